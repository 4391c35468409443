"""The `kae-deviceplugin` command line: serve, list, check-config, demo."""
