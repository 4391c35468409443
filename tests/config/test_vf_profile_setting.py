"""The VF profile setting ``engines.<name>.vfs``: read from the file and from the chart, per node.

Unset (null) is the default and leaves the node's VFs as they are; a count is 0 to 63 or ``max``;
anything else is refused in one line naming the key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kae_deviceplugin.config.file import parse_config_text
from kae_deviceplugin.config.resolve import resolve_settings
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.errors import InvalidConfig
from tests.deploy.test_configs import daemon_settings, rendered
from tests.deploy.test_deploy import of_kind


def settings_of(text: str) -> Settings:
    return resolve_settings(parse_config_text("version: v1\n" + text, "test.yaml"), {})


def test_unset_is_the_default_and_leaves_vfs_alone() -> None:
    """No key, or null: every engine's profile is None (today's behaviour)."""
    assert all(settings_of("").engine(e).vfs is None for e in ("hpre", "sec", "zip"))
    assert settings_of("engines: {sec: {vfs: null}}").engine("sec").vfs is None


@pytest.mark.parametrize(("written", "read"), [("8", 8), ("0", 0), ("63", 63), ("max", "max")])
def test_a_count_or_max_is_read(written: str, read: object) -> None:
    """A YAML integer 0 to 63, or max in any case, is the profile of that engine only."""
    settings = settings_of(f"engines: {{sec: {{vfs: {written}}}}}")
    assert settings.engine("sec").vfs == read
    assert settings.engine("zip").vfs is None
    assert settings_of("engines: {zip: {vfs: MAX}}").engine("zip").vfs == "max"


@pytest.mark.parametrize("written", ["64", "-1", '"8"', "eight", "true", "1.5"])
def test_anything_else_is_refused_in_one_line_naming_the_key(written: str) -> None:
    """A bad profile fails the file with one line that names engines.sec.vfs and what it takes."""
    with pytest.raises(InvalidConfig) as caught:
        settings_of(f"engines: {{sec: {{vfs: {written}}}}}")
    (line,) = caught.value.lines()
    assert "engines.sec.vfs" in line and "0 to 63, or max" in line, line


def test_the_chart_sets_a_profile_for_one_group_of_nodes_only(tmp_path: Path) -> None:
    """configs.<name>.engines.sec.vfs reaches that configuration's file alone; the default
    DaemonSet's file has no vfs key, so its nodes keep their VFs."""
    objs = rendered(tmp_path, {"sec-vfs": {"engines": {"sec": {"vfs": 8}}}})
    maps = {m["metadata"]["name"]: m["data"]["config.yaml"] for m in of_kind(objs, "ConfigMap")}
    base = "kae-kae-device-plugin"
    assert daemon_settings(maps[f"{base}-sec-vfs"]).engine("sec").vfs == 8
    assert daemon_settings(maps[base]).engine("sec").vfs is None
    assert "vfs" not in maps[base]
