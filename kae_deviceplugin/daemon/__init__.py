"""The running daemon: the supervisor owning every root task, hotplug from udev, directory
watches, and process-level start-up."""
