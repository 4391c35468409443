"""What ``serve`` keeps out of its process at rest, checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# What `serve` never loads at rest: uevents come from a netlink socket of its own
# (daemon/uevents.py); malloc_trim is found without ctypes.util (daemon/memory.py); the bind
# directory is made without tempfile (kubelet/sockets.py); shutil waits for a directory to remove
# and secrets is not needed for a random tag (container/safe_fs.py); serve's usual command line
# is read without click (cli/serve_args.py). Each is ~0.2-1.5 MiB.
SERVE_NEVER_LOADS = (
    "pyudev", "ctypes.util", "tempfile", "shutil", "bz2", "lzma", "secrets", "click",
)  # fmt: skip


def test_serve_loads_none_of_the_modules_it_does_without() -> None:
    """In a fresh interpreter, everything `serve` imports (its entry point and the daemon) and
    opening the uevent socket leave the listed modules unloaded."""
    code = textwrap.dedent(
        f"""
        import sys
        import kae_deviceplugin.cli.entry, kae_deviceplugin.daemon.run
        from kae_deviceplugin.daemon.hotplug import open_uacce_monitor
        try:
            open_uacce_monitor().close()
        except OSError:
            pass  # a sandbox without netlink: the imports are what is checked
        print([m for m in {SERVE_NEVER_LOADS!r} if m in sys.modules])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
