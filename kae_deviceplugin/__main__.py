"""`python -m kae_deviceplugin` runs the command line."""

from .cli import main

main(prog_name="kae-deviceplugin")
