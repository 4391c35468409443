"""Modules the API client imports at its top but the driver never runs, executed on first use.

lightkube's own modules import every model of ``core/v1`` (``internal_models`` and
``internal_resources``, for a pod's logs, exec and eviction) and PyYAML (``config.kubeconfig``,
for a kubeconfig file); httpx imports ``idna`` (for a non-ASCII host name) and ``mimetypes``
(for a multipart upload), httpcore HTTP/2's ``h2`` (the client speaks HTTP/1.1). The driver
calls none of that with the pod's service account, yet the imports stayed resident: ~4 MiB of
the DRA driver at rest. ``lightkube_api`` defers them before it imports the client.

So each of these modules is made as the import system makes it (``module_from_spec``: its
name, spec, file and, for a package, path), put in ``sys.modules`` and on its parent, but its
code runs only the first time anyone reads a name it does not have yet, through a module
``__getattr__`` (PEP 562), in that same module object, as prometheus_lite defers its package's
``__init__``. An ``import`` statement only reads ``__spec__``, which the module has, so it gets
the module without running it; ``module.Name`` or ``from module import Name`` runs it once,
and from then on it is the module a plain import makes. A module already imported, one that
cannot be found, or a loader that cannot do this is left to the plain import.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, cast

# Every module named here is imported by the API client's modules at their top, with its names
# read only inside functions the driver does not call (or calls only with a kubeconfig file).
API_CLIENT_UNUSED = (
    "lightkube.models.core_v1",
    "lightkube.resources.core_v1",
    "yaml",
    "idna",
    "mimetypes",
    "h2.connection",
    "h2.events",
    "h2.exceptions",
    "h2.settings",
)

_running = threading.RLock()


def defer(*names: str) -> None:
    """Make each of ``names`` importable now but executed on first use (see the module's doc).

    Every module is in place before any parent package is imported: a parent's ``__init__``
    (lightkube's imports its whole client) would otherwise import the real module first. So
    this imports those parents: call it where the client is about to be imported anyway.
    """
    made = [module for name in names if name not in sys.modules for module in _deferred(name)]
    for module in made:
        parent, _, child = module.__name__.rpartition(".")
        if parent:  # as the import system does once it has imported a submodule
            setattr(importlib.import_module(parent), child, module)


def _spec(name: str) -> ModuleSpec | None:
    """``name``'s spec as the import system finds it, without importing its parent packages."""
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        known = sys.modules.get(parent)
        parent_spec = known.__spec__ if known is not None else _spec(parent)
        path = None if parent_spec is None else parent_spec.submodule_search_locations
        if path is None:
            return None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = None if find is None else find(name, path)
        if spec is not None:
            return cast("ModuleSpec", spec)
    return None


def _deferred(name: str) -> list[ModuleType]:
    """``name`` made, registered and deferred; [] where it cannot be (left to the import)."""
    spec = _spec(name)
    if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
        return []
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(attribute: str) -> Any:
        with _running:
            if module.__dict__.pop("__getattr__", None) is complete:
                loader.exec_module(module)  # the module's own code, in this module
        try:
            return module.__dict__[attribute]
        except KeyError:
            getter = module.__dict__.get("__getattr__")  # the module's own, if it has one
            if getter is not None:
                return getter(attribute)
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}") from None

    module.__dict__["__getattr__"] = complete
    sys.modules[name] = module
    return [module]


def executed(module: ModuleType) -> bool:
    """Whether ``module``'s code has run (False while it waits for its first use)."""
    getter = module.__dict__.get("__getattr__")
    return getattr(getter, "__module__", None) != __name__
