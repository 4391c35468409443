"""The `kae-deviceplugin` program. serve's usual command line (what the DaemonSet runs) starts
the daemon without loading click, which would stay resident for a command line read once; any
other command line goes to click (:mod:`kae_deviceplugin.cli.main`)."""

from __future__ import annotations

import os
import sys

from kae_deviceplugin.cli import serve_args
from kae_deviceplugin.cli.serve_args import PROG, Resolved
from kae_deviceplugin.daemon.run import run_serve
from kae_deviceplugin.observability import logs


def main() -> None:
    call = serve_args.read(sys.argv[1:], os.environ)
    if call is None:
        from kae_deviceplugin.cli.main import main as command_line  # noqa: PLC0415 -- see above

        command_line(prog_name=PROG)
        return
    for line in serve_args.unknown_variables(os.environ):
        print(line, file=sys.stderr, flush=True)
    try:
        code = serve(serve_args.settings_or_exit(call.config_path, call.given, os.environ))
    except KeyboardInterrupt:  # before serve's own handlers: as click ends it
        print("\nAborted!", file=sys.stderr, flush=True)
        code = 1
    raise SystemExit(code)


def serve(resolved: Resolved) -> int:
    """Run the daemon with these settings until it stops; its exit code."""
    logs.configure(resolved.settings.log_level, resolved.settings.log_format)
    return run_serve(resolved.settings, resolved.source, resolved.label)
