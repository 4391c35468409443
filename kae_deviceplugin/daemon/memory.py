"""Give back, once, the heap that start-up used and the daemon at rest no longer needs, and keep
the cyclic garbage collector off what start-up built.

Start-up allocates and frees far more than the daemon keeps: unmarshalled bytecode buffers,
the first full scan, protobuf descriptor building, gRPC server set-up. glibc keeps those freed
chunks in its free lists, resident, for reuse that never comes; ``malloc_trim(0)`` returns the
free pages (at the top of the heap and, since glibc 2.8, inside it too) to the kernel. It only
releases memory nothing points at, so it is safe at any time; later allocations simply ask the
kernel again. Where libc has no ``malloc_trim`` (musl) that step does nothing.

``gc.freeze()`` moves every object alive at that point (modules, classes, the inventory and views
of the first scan: tens of thousands of objects with many devices or shares) to a permanent
generation that collections skip. Without it each full collection, which the scan loop's small
per-tick allocations trigger now and then, walks all of them again to find nothing. Reference
counting still frees them when they are dropped; only a cycle among them would never be
collected, and start-up leaves none that matter (they are collected just before).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging

log = logging.getLogger(__name__)

# After the first scan, the servers and the registrations: start-up's garbage is garbage by then.
STARTUP_SETTLE = 1.0


def trim_heap() -> bool:
    """Collect cyclic garbage, freeze what is left, then hand glibc's free heap pages back;
    False without glibc's malloc_trim."""
    gc.collect()
    gc.freeze()
    try:
        # The process's own symbols, libc's among them: no ctypes.util.find_library, which
        # would run `ldconfig -p` and keep shutil, tempfile, bz2 and lzma loaded (~0.8 MiB).
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


async def release_startup_memory() -> None:
    """Root task: trim the heap once start-up has settled; then its work is done."""
    await asyncio.sleep(STARTUP_SETTLE)
    if trim_heap():
        log.debug("returned start-up's free heap pages to the kernel")
