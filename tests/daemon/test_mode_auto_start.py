"""``mode: auto`` at the composition root: an explicit device-plugin mode still loads no API
client (auto's code is imported only for auto), and auto without the node's name is refused
in one line, as DRA mode is."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kae_deviceplugin.cli.demo import demo_settings
from kae_deviceplugin.daemon.run import build_for_mode
from kae_deviceplugin.errors import EXIT_USAGE, StartupError

NEVER_IN_DEVICE_PLUGIN = (
    "kae_deviceplugin.apiserver.rest_api",
    "kae_deviceplugin.apiserver.node_api",
    "kae_deviceplugin.daemon.mode_auto",
    "kae_deviceplugin.dra.frontend",
)


def test_an_explicit_device_plugin_mode_loads_no_api_client(tmp_path: Path) -> None:
    """In a fresh interpreter, the device-plugin daemon built by the composition root (which
    now also knows auto) has loaded neither the API client nor auto's start nor DRA."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from kae_deviceplugin.cli.demo import demo_settings
        from kae_deviceplugin.daemon.run import build_for_mode
        daemon = build_for_mode(demo_settings(Path({str(tmp_path)!r})))
        assert daemon.front.name == "device-plugin"
        print(json.dumps([m for m in {NEVER_IN_DEVICE_PLUGIN!r} if m in sys.modules]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_auto_without_a_node_name_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mode auto needs its Node: without --node-name or NODE_NAME, exit 2 naming both."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    settings = dataclasses.replace(demo_settings(tmp_path), mode="auto")
    with pytest.raises(StartupError) as refused:
        build_for_mode(settings)
    assert refused.value.exit_code == EXIT_USAGE
    assert "--mode auto needs the node's name" in str(refused.value)
    assert "NODE_NAME" in str(refused.value)
