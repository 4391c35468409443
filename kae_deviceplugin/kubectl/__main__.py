"""``python -m kae_deviceplugin.kubectl``: the ``kubectl-kae`` console script."""

from kae_deviceplugin.kubectl.main import main

main()
