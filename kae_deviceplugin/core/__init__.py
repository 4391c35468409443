"""Pure values and policies: the device model, the engine table, health, device IDs and
shares, resource views, placement policies, the broadcast latest value. No I/O and no grpc,
prometheus_client, click or yaml: everything here is a function of its arguments."""
