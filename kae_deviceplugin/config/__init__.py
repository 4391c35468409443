"""Settings: the one table of options, the versioned YAML file, and reloading it safely."""
