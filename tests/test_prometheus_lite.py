"""prometheus_lite: the daemon's modules load without prometheus_client's HTTP half, the package
still completes on first use, and the light encoder answers exactly as the library's own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, exposition

from kae_deviceplugin import prometheus_lite

# What serve never needs at rest (the HTTP half of prometheus_client and what it pulls in).
HEAVY = ("prometheus_client.exposition", "urllib.request", "http.client", "email", "wsgiref")


def _in_fresh_interpreter(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    answer: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_serve_modules_load_without_the_http_half() -> None:
    """Everything `serve` imports (the CLI entry point and the daemon) leaves the heavy modules
    unloaded, and prometheus_client's __init__ held back."""
    answer = _in_fresh_interpreter(
        "import json, sys\n"
        "import kae_deviceplugin.cli.main, kae_deviceplugin.daemon.run\n"
        "from kae_deviceplugin import prometheus_lite\n"
        f"print(json.dumps({{'loaded': [m for m in {HEAVY!r} if m in sys.modules],"
        " 'completed': prometheus_lite.package_completed()}))"
    )
    assert answer == {"loaded": [], "completed": False}


def test_first_top_level_use_completes_the_package() -> None:
    """Reading a top-level name runs the package's __init__ once: the names are there, the
    classes are the ones already in use, and a missing name is still an AttributeError."""
    answer = _in_fresh_interpreter(
        "import json\n"
        "from kae_deviceplugin import prometheus_lite\n"
        "import prometheus_client\n"
        "before = prometheus_lite.package_completed()\n"
        "from prometheus_client import Counter, REGISTRY\n"
        "try:\n"
        "    prometheus_client.no_such_name\n"
        "    missing = False\n"
        "except AttributeError:\n"
        "    missing = True\n"
        "print(json.dumps({'before': before, 'after': prometheus_lite.package_completed(),"
        " 'same': Counter is prometheus_lite.Counter, 'registry': type(REGISTRY).__name__,"
        " 'missing': missing}))"
    )
    assert answer == {
        "before": False,
        "after": True,
        "same": True,
        "registry": "CollectorRegistry",
        "missing": True,
    }


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("demo_events", "Events.", ["kind"], registry=registry).labels("a").inc(3)
    Histogram("demo_seconds", "Time.", buckets=(0.1, 1.0), registry=registry).observe(0.5)
    return registry


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "*/*",
        "text/plain",
        "text/plain;version=0.0.4",
        "text/plain; version=1.0.0; escaping=allow-utf-8",
        "application/openmetrics-text",
        "application/openmetrics-text; version=1.0.0",
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
        "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3",
        "application/openmetrics-text; version=0.0.1,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        "application/openmetrics-text;version=1.0.0;escaping=bogus",
        "application/openmetrics-text;version=2.0.0;escaping=dots",
        "text/plain;version=0.0.4,application/openmetrics-text;version=1.0.0",
    ],
)
def test_encoder_choice_matches_the_library(accept: str) -> None:
    """For every Accept header (Prometheus 2 and 3 defaults, curl, odd ones) the content type
    and the body are what prometheus_client's own choose_encoder gives."""
    registry = _registry()
    ours, our_type = prometheus_lite.choose_encoder(accept)
    theirs, their_type = exposition.choose_encoder(accept)
    assert our_type == their_type
    assert ours(registry) == theirs(registry)


def test_serve_in_device_plugin_mode_loads_no_api_client() -> None:
    """A device-plugin daemon, built as `serve` builds it, loads neither the API-server seam nor
    any client library: that mode's memory at rest does not pay for DRA."""
    answer = _in_fresh_interpreter(
        "import json, sys, tempfile, pathlib\n"
        "import kae_deviceplugin.cli.main\n"
        "from kae_deviceplugin.cli.demo import demo_settings\n"
        "from kae_deviceplugin.daemon.run import build_daemon\n"
        "build_daemon(demo_settings(pathlib.Path(tempfile.mkdtemp())))\n"
        "names = ('kae_deviceplugin.apiserver', 'kae_deviceplugin.dra', 'lightkube',\n"
        "    'kubernetes')\n"
        "print(json.dumps({'loaded': sorted(m for m in sys.modules if m.startswith(names))}))"
    )
    assert answer == {"loaded": []}


def test_without_the_light_names_every_scrape_uses_the_library_encoder() -> None:
    """A prometheus_client lacking what the light encoder reaches for (as before 0.23.1): the
    module still imports, and OpenMetrics scrapes get exactly the library's own answer."""
    answer = _in_fresh_interpreter(
        "import json\n"
        "import prometheus_client.utils as utils\n"
        "utils.__dict__.pop('parse_version', None)  # absent before 0.23.1 anyway\n"
        "from kae_deviceplugin import prometheus_lite\n"
        "from prometheus_client import CollectorRegistry, Counter, exposition\n"
        "registry = CollectorRegistry()\n"
        "Counter('demo_events', 'Events.', registry=registry).inc()\n"
        "accept = 'application/openmetrics-text; version=1.0.0'\n"
        "ours, our_type = prometheus_lite.choose_encoder(accept)\n"
        "theirs, their_type = exposition.choose_encoder(accept)\n"
        "print(json.dumps({'light': prometheus_lite.light_encoder_available(),\n"
        "    'same': ours(registry) == theirs(registry) and our_type == their_type}))"
    )
    assert answer == {"light": False, "same": True}
