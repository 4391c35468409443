"""Reading sysfs: the full scan of /sys/class/uacce and the incremental scanner of the scan loop."""
