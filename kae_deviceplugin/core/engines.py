"""The engine table: one row per KAE engine. Adding an engine is adding a row here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RESOURCE_PREFIX = "openfuyao.com/kae."
# The DRA driver's name. Here, not in dra/, because the device plugin must also recognise the
# devices DRA claims hold (the kubelet reports them by driver name); dra.api re-exports it.
DRA_DRIVER = "kae.openfuyao.com"


def dra_plugin_dir(kubelet_root: Path) -> Path:
    """The DRA driver's own directory under the kubelet's (``<root-dir>/plugins/<driver>``):
    its service socket and checkpoint; it outlives the driver, so it tells that DRA ran here."""
    return kubelet_root / "plugins" / DRA_DRIVER


HUAWEI_PCI_VENDOR = "0x19e5"
# The most VFs a KAE PF has (its sriov_totalvfs on every Kunpeng 920; FACTS.md section 3).
MAX_VFS = 63


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
