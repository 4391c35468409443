"""The configuration file as the daemon sees it: noticed when it changes, reloaded safely."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from kae_deviceplugin.config.file import FileConfig, load_config_file
from kae_deviceplugin.config.resolve import (
    file_keys,
    resolve_settings,
    restart_required,
    where_set,
)
from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.errors import InvalidConfig

log = logging.getLogger(__name__)


def _identity(path: Path) -> tuple[str, int, int] | None:
    # A ConfigMap update swaps a symlink, so the resolved path changes even if mtime does not.
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return (real, st.st_mtime_ns, st.st_size)


class ConfigSource:
    """A config file plus the flag/env overrides that always win over it."""

    def __init__(
        self,
        path: Path,
        overrides: Mapping[str, object],
        sources: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self.overrides = dict(overrides)
        self.sources = dict(sources or {})
        self._seen = _identity(path)
        self.file: FileConfig | None = None  # as read at start

    def initial(self) -> Settings:
        """Settings at start; raises InvalidConfig listing every problem."""
        self._seen = _identity(self.path)
        self.file = load_config_file(self.path)
        return resolve_settings(self.file, self.overrides, sources=self.sources)

    def label(self, field: str) -> str:
        """How the user wrote ``field`` (a flag, a variable, or the file's key) for messages."""
        return where_set(field, self.sources, self.file)

    def changed(self) -> bool:
        return _identity(self.path) != self._seen

    def load(self, current: Settings) -> Settings | None:
        """The new settings, or None (old ones kept) when the file is invalid."""
        self._seen = _identity(self.path)
        try:
            new = resolve_settings(
                load_config_file(self.path), self.overrides, sources=self.sources
            )
        except InvalidConfig as err:
            for line in err.lines():
                log.error("configuration reload rejected, keeping the running one: %s", line)
            return None
        frozen = restart_required(current, new)
        if frozen:
            log.warning(
                "configuration changes of %s need a restart to take effect; keeping the running "
                "values until the pod restarts",
                file_keys(frozen),
            )
            new = _keep(new, current, frozen)
        return new


def _keep(new: Settings, current: Settings, names: list[str]) -> Settings:
    """``new`` with the running values of ``names`` (settings a reload cannot apply)."""
    for name in names:
        new = dataclasses.replace(new, **{name: getattr(current, name)})
    return new
