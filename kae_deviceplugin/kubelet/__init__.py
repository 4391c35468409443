"""The gRPC shell towards the kubelet: one DevicePlugin server per resource, registration
(kubelet socket or plugin watcher), pod-resources, and unix-socket hygiene."""
