"""What one container gets for a set of devices: device nodes, mounts, env, the container's
view of /sys/class/uacce, and the CDI spec."""
