"""The Dynamic Resource Allocation front end: slices, prepare/unprepare, checkpoint, health."""
