"""The device-plugin front end: one DevicePlugin server per resource (servicer, server, server
set), how they get registered (kubelet.sock or the plugin watcher), and the kubelet's restarts."""
