"""The engine table: one row per KAE engine. Adding an engine is adding a row here."""

from __future__ import annotations

from dataclasses import dataclass

RESOURCE_PREFIX = "openfuyao.com/kae."
HUAWEI_PCI_VENDOR = "0x19e5"


@dataclass(frozen=True, slots=True)
class Engine:
    """A KAE engine as the kernel and the kubelet name it."""

    name: str
    driver: str
    pf_device_id: str
    vf_device_id: str
    algorithms: tuple[str, ...]

    @property
    def resource(self) -> str:
        return RESOURCE_PREFIX + self.name

    @property
    def env_prefix(self) -> str:
        return f"KAE_{self.name.upper()}"


ENGINES: tuple[Engine, ...] = (
    Engine("hpre", "hisi_hpre", "0xa258", "0xa259", ("rsa", "dh")),
    Engine("sec", "hisi_sec2", "0xa255", "0xa256", ("cipher", "digest", "aead")),
    Engine("zip", "hisi_zip", "0xa250", "0xa251", ("zlib", "gzip")),
)

ENGINES_BY_NAME: dict[str, Engine] = {engine.name: engine for engine in ENGINES}
ENGINES_BY_RESOURCE: dict[str, Engine] = {engine.resource: engine for engine in ENGINES}


def engine_for_uacce_name(uacce_name: str) -> Engine | None:
    """Return the engine whose driver produced ``<driver>-<id>``, or None for other drivers."""
    driver, sep, ident = uacce_name.rpartition("-")
    if not sep or not ident.isdigit():
        return None
    for engine in ENGINES:
        if engine.driver == driver:
            return engine
    return None
