"""The start-up heap trim: it reaches glibc's malloc_trim without ctypes.util, and does nothing
where libc has none."""

from __future__ import annotations

import ctypes
import gc
import json
import platform
import subprocess
import sys
import textwrap

import pytest

from kae_deviceplugin.daemon import memory

GLIBC = platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_the_trim_runs_and_loads_no_library_finder() -> None:
    """In a fresh interpreter (gc.freeze is for good): the trim ran, start-up's objects are frozen,
    and neither ctypes.util nor what it drags in (shutil, tempfile) was loaded for it."""
    code = textwrap.dedent(
        """
        import gc, json, sys
        from kae_deviceplugin.daemon.memory import trim_heap
        trimmed = trim_heap()
        loaded = [m for m in ("ctypes.util", "shutil", "tempfile") if m in sys.modules]
        print(json.dumps({"trimmed": trimmed, "frozen": gc.get_freeze_count() > 0,
                          "loaded": loaded}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == {"trimmed": True, "frozen": True, "loaded": []}


class NoTrim:
    """A libc without malloc_trim (musl)."""

    def __init__(self, name: str | None) -> None:
        del name


def test_without_malloc_trim_the_trim_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes, "CDLL", NoTrim)
    try:
        assert memory.trim_heap() is False
    finally:
        gc.unfreeze()  # this interpreter goes on running other tests
