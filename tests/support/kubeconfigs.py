"""A one-context kubeconfig for the API client's tests: one cluster, one user, as JSON (which is
YAML), with whatever cluster and user fields a test gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    config = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
    }
    path.write_text(json.dumps(config))
    return path
