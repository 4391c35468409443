"""``kubectl kae``: the pool as the API holds it, read with a person's credentials.

A separate console script (``kubectl-kae``), so kubectl finds it as a plugin on ``PATH``. It
reads nodes, ResourceSlices, ResourceClaims, pods and DeviceClasses through
``apiserver.reads`` and writes nothing; the daemon's own packages are never loaded.
"""
