"""The per-engine settings (``engines.<name>.<field>``): each field's rule and how the reference
writes its type. Re-exported by :mod:`kae_deviceplugin.config.schema`, the table's home."""

from __future__ import annotations

from typing import Final

from kae_deviceplugin.config import rules
from kae_deviceplugin.core.engines import MAX_VFS
from kae_deviceplugin.core.ids import MAX_SHARES
from kae_deviceplugin.core.views import FUNCTIONS

ENGINE_FIELDS: Final[dict[str, tuple[rules.Rule, str]]] = {
    "enabled": (rules.boolean, "boolean"),
    "shares": (rules.shares, f"integer 1 to {MAX_SHARES}"),
    "functions": (rules.choice(FUNCTIONS), ", ".join(f"`{f}`" for f in FUNCTIONS)),
    "vfs": (rules.vf_count, f"integer 0 to {MAX_VFS}, `max`, or null"),
}
# The one flag that is not a row: it rewrites engines.<name>.enabled for every engine at once.
ENABLE_ENGINES_FLAG: Final = "--enable-engines"
