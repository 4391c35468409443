"""prometheus_client's metric classes and OpenMetrics encoder, without the HTTP half of its package.

Importing ``prometheus_client`` or any of its submodules first runs the package's ``__init__``,
which imports ``prometheus_client.exposition``, and that imports ``urllib.request``,
``http.server``, ``wsgiref``, ``gzip``, ``ssl`` and ``email`` for its push gateway and HTTP
servers: about 3.8 MiB resident (of the daemon's ~46) for code the daemon never runs, since it
serves ``/metrics`` itself. The metric classes, the registry and the OpenMetrics encoder live in
submodules that import none of it.

So the package is imported as importlib imports any package, except that its ``__init__`` is held
back: ``module_from_spec`` makes the package module (with its ``__path__``, so its submodules
import as usual) and the ``__init__`` runs later, in that same module, the first time anyone
reads a top-level name (``prometheus_client.REGISTRY``, ``from prometheus_client import X``), by
a module ``__getattr__`` (PEP 562; asked for a submodule not loaded yet, it leaves that to the
import system as usual). From then on the package is what a plain import makes, with the
submodules already loaded reused. Nothing changes where the package was already imported,
and any surprise (no spec, a loader that cannot do this) falls back to the plain import.

:func:`choose_encoder` answers a scrape that asks for OpenMetrics 1.0 (what Prometheus asks
first since 2.43) with the light encoder; any other Accept header goes to prometheus_client's
own ``choose_encoder``, which loads ``exposition`` then, once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from functools import partial
from importlib.machinery import PathFinder
from types import ModuleType
from typing import Any

PACKAGE = "prometheus_client"
_completing = threading.Lock()


def _defer_package_init() -> None:
    if PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # the plain import below then says what is wrong
    package = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(name: str) -> Any:
        # ``from . import values`` (as the submodules do) asks for the name first: a submodule
        # not imported yet is no reason to run __init__; the import system loads it next.
        if PathFinder.find_spec(f"{PACKAGE}.{name}", package.__path__) is not None:
            return _missing(name)
        with _completing:
            if package.__dict__.pop("__getattr__", None) is not None:
                loader.exec_module(package)  # the package's own __init__, in this module
        return package.__dict__[name] if name in package.__dict__ else _missing(name)

    package.__dict__["__getattr__"] = complete
    sys.modules[PACKAGE] = package


def _missing(name: str) -> Any:
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


def package_completed() -> bool:
    """Whether prometheus_client's ``__init__`` has run (for tests and the benchmark notes)."""
    package = sys.modules.get(PACKAGE)
    return package is not None and "__getattr__" not in package.__dict__


try:
    _defer_package_init()
except Exception:  # anything unexpected: import the package plainly instead
    sys.modules.pop(PACKAGE, None)

# Only now, with the package's __init__ held back: its light submodules. The metric classes,
# the registry and the collectors are the library's documented names, in every version allowed.
from prometheus_client.metrics import (  # noqa: E402
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
)
from prometheus_client.metrics_core import (  # noqa: E402
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.platform_collector import PlatformCollector  # noqa: E402
from prometheus_client.process_collector import ProcessCollector  # noqa: E402
from prometheus_client.registry import Collector, CollectorRegistry  # noqa: E402

# The light encoder reaches past the documented API (name escaping and ``parse_version`` came in
# 0.23.1): where any of it is missing, every scrape goes to the library's own choose_encoder.
try:
    from prometheus_client.openmetrics import exposition as openmetrics
    from prometheus_client.utils import parse_version

    _ESCAPINGS: tuple[str, ...] | None = (
        openmetrics.ALLOWUTF8,
        openmetrics.UNDERSCORES,
        openmetrics.DOTS,
        openmetrics.VALUES,
    )
except (ImportError, AttributeError):
    _ESCAPINGS = None

__all__ = [
    "Collector",
    "CollectorRegistry",
    "Counter",
    "CounterMetricFamily",
    "Gauge",
    "GaugeMetricFamily",
    "Histogram",
    "Info",
    "Metric",
    "PlatformCollector",
    "ProcessCollector",
    "choose_encoder",
    "disable_created_metrics",
    "light_encoder_available",
    "package_completed",
]

Encoder = Callable[[Collector], bytes]


def light_encoder_available() -> bool:
    """Whether this prometheus_client has what the light OpenMetrics encoder uses."""
    return _ESCAPINGS is not None


def _parameters(media_range: str) -> dict[str, str]:
    """``version`` and ``escaping`` of one Accept entry, the first of each as the library reads."""
    found: dict[str, str] = {}
    for token in media_range.split(";")[1:]:
        if "=" in token:
            key, value = token.strip().split("=", 1)
            found.setdefault(key, value)
    return found


def _openmetrics_choice(accept: str) -> tuple[Encoder, str] | None:
    """What prometheus_client's choose_encoder answers when the first entry of ``accept`` is
    OpenMetrics it serves (no version, or 1.0.0 and later); None for any other header."""
    first = accept.split(",", maxsplit=1)[0]
    if _ESCAPINGS is None or first.split(";")[0].strip() != "application/openmetrics-text":
        return None
    parameters = _parameters(first)
    version = parameters.get("version", "")
    if not version:
        encoder = partial(
            openmetrics.generate_latest, escaping=openmetrics.UNDERSCORES, version="1.0.0"
        )
        return encoder, openmetrics.CONTENT_TYPE_LATEST
    if parse_version(version) < (1, 0, 0):
        return None
    escaping = parameters.get("escaping", openmetrics.UNDERSCORES)
    if escaping not in _ESCAPINGS:
        escaping = openmetrics.UNDERSCORES
    content_type = (
        f"application/openmetrics-text; version={version}; charset=utf-8; escaping={escaping}"
    )
    return partial(openmetrics.generate_latest, escaping=escaping, version=version), content_type


def choose_encoder(accept: str) -> tuple[Encoder, str]:
    """prometheus_client's ``exposition.choose_encoder``, its heavy module loaded only when the
    scraper asks for something other than OpenMetrics 1.0."""
    light = _openmetrics_choice(accept or "")
    if light is not None:
        return light
    exposition: ModuleType = importlib.import_module(f"{PACKAGE}.exposition")
    heavy: tuple[Encoder, str] = exposition.choose_encoder(accept)
    return heavy
