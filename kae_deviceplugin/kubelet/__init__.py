"""What any kubelet plugin needs, below both front ends: unix-socket hygiene and private binding,
the plugin watcher's registration servicer, the pod-resources client, directory watches."""
