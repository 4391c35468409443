"""`python -m kae_deviceplugin` runs the command line."""

from kae_deviceplugin.cli.main import main

main(prog_name="kae-deviceplugin")
