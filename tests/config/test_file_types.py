"""The configuration file's booleans and counts are YAML values: quoted text there ("yes", "on",
"4") is refused with one line naming the key, while flags and variables, text by nature, keep
their spellings."""

from __future__ import annotations

import pytest

from kae_deviceplugin.config.file import parse_config_text
from kae_deviceplugin.config.resolve import resolve_settings
from kae_deviceplugin.errors import InvalidConfig


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('containerSysfsView: "on"', "containerSysfsView"),
        ('cdi: "false"', "cdi"),
        ('engines: {zip: {enabled: "yes"}}', "engines.zip.enabled"),
        ('engines: {zip: {shares: "4"}}', "engines.zip.shares"),
        ('env: {uadkNumaHint: "true"}', "env.uadkNumaHint"),
    ],
)
def test_quoted_booleans_and_counts_are_refused_naming_the_key(text: str, key: str) -> None:
    """One error per value, on one line, with the file, the key, the rule and the value."""
    with pytest.raises(InvalidConfig) as caught:
        parse_config_text(f"version: v1\n{text}\n", "config.yaml")
    (line,) = caught.value.lines()
    assert line.startswith(f"config.yaml: {key}: must be ") and "written without quotes" in line


def test_yaml_booleans_and_integers_are_taken() -> None:
    """Unquoted values are YAML's own: true/false (YAML 1.1's yes/off too) and integers."""
    file = parse_config_text(
        "version: v1\ncontainerSysfsView: off\nengines: {zip: {enabled: yes, shares: 4}}\n",
        "config.yaml",
    )
    settings = resolve_settings(file, {})
    assert settings.container_sysfs_view is False
    assert (settings.engine("zip").enabled, settings.engine("zip").shares) == (True, 4)


def test_flags_and_variables_keep_their_text_spellings() -> None:
    """KAE_DP_CONTAINER_SYSFS_VIEW=on and the like are text by nature, and still taken."""
    settings = resolve_settings(None, {"container_sysfs_view": "on", "cdi": "0"})
    assert (settings.container_sysfs_view, settings.cdi) == (True, False)
