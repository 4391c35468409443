"""`python -m kae_deviceplugin` runs the command line."""

from kae_deviceplugin.cli.entry import main

main()
