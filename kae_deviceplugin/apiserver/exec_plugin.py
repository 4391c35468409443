"""A kubeconfig user's ``exec`` credential plugin, run as client-go runs it.

The plugin gets ``KUBERNETES_EXEC_INFO`` (an ``ExecCredential`` of its ``apiVersion``, not
interactive, with the cluster when ``provideClusterInfo`` asks for it), its stdin closed, and
``EXEC_TIMEOUT`` to answer: past it (or when the caller gives up) it is killed and reaped, so
none outlives the call. Its answer's token, client certificate and key, and
``expirationTimestamp`` are used; the credential is kept until that time (or a 401). What it
writes to stderr may hold a secret: the daemon drops it, ``kubectl kae`` passes it to the
person's terminal as kubectl does, and no error, log line or ``/readyz`` ever quotes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EXEC_TIMEOUT = 30.0  # a cloud CLI fetching a token takes seconds; a hung one is killed
MAX_OUTPUT = 1024 * 1024  # an ExecCredential is a few KiB


class CredentialError(Exception):
    """A token that cannot be had now (its file gone, an exec plugin failing): said as is."""


@dataclass(frozen=True, slots=True)
class ExecCredential:
    """What a plugin answered: a token and/or a client certificate, until ``expires`` (a Unix
    time; None: until a 401)."""

    token: str | None
    cert: bytes | None
    key: bytes | None
    expires: float | None


class ExecPlugin:
    """One ``exec`` section; ``run`` runs the plugin once and reads its answer."""

    def __init__(
        self, spec: Mapping[str, Any], cluster: Mapping[str, Any], *, show_stderr: bool = False
    ) -> None:
        self.spec = spec
        self.command = [str(spec["command"]), *map(str, spec.get("args") or [])]
        self.cluster = cluster
        self.show_stderr = show_stderr

    def _env(self) -> dict[str, str]:
        info: dict[str, Any] = {"interactive": False}
        if self.spec.get("provideClusterInfo") is True:
            info["cluster"] = {k: v for k, v in self.cluster.items() if k != "extensions"}
        exec_info = {"apiVersion": self.spec["apiVersion"], "kind": "ExecCredential", "spec": info}
        env = dict(os.environ) | {e["name"]: e["value"] for e in self.spec.get("env") or []}
        return env | {"KUBERNETES_EXEC_INFO": json.dumps(exec_info)}

    async def run(self) -> ExecCredential:
        name = self.command[0]
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command,
                env=self._env(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=None if self.show_stderr else asyncio.subprocess.DEVNULL,
            )
        except OSError as failed:
            hint = self.spec.get("installHint")
            said = f"exec plugin {name}: {failed.strerror or failed}"
            raise CredentialError(f"{said} ({hint.strip()})" if hint else said) from None
        try:
            async with asyncio.timeout(EXEC_TIMEOUT):
                out = await _read_bounded(process)
                code = await process.wait()
        except TimeoutError:
            raise CredentialError(
                f"exec plugin {name} gave no credential within {EXEC_TIMEOUT:g} s (killed)"
            ) from None
        finally:
            await _reap(process)
        if code != 0:
            raise CredentialError(f"exec plugin {name} exited with status {code} (its stderr is "
                                  "not repeated here: it may hold a secret)")  # fmt: skip
        return _credential(name, out)


async def _read_bounded(process: asyncio.subprocess.Process) -> bytes:
    assert process.stdout is not None
    out = await process.stdout.read(MAX_OUTPUT + 1)
    if len(out) > MAX_OUTPUT:
        raise CredentialError(f"exec plugin printed more than {MAX_OUTPUT} bytes")
    return out


async def _reap(process: asyncio.subprocess.Process) -> None:
    """Kill the plugin if it still runs, and wait for it (no zombie, no orphan)."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        with contextlib.suppress(Exception):
            await asyncio.shield(process.wait())


def _credential(name: str, out: bytes) -> ExecCredential:
    try:
        status = json.loads(out)["status"]
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        expiry = status.get("expirationTimestamp")
        if not all(isinstance(v, str | None) for v in (token, cert, key, expiry)):
            raise TypeError("a field of the wrong type")
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        raise CredentialError(f"exec plugin {name} printed no ExecCredential status") from None
    if not token and not (cert and key):
        raise CredentialError(f"exec plugin {name} printed neither a token nor a certificate")
    expires = None
    if expiry:
        try:
            when = datetime.datetime.fromisoformat(expiry.replace("Z", "+00:00"))
            expires = when.timestamp()
        except ValueError:
            raise CredentialError(
                f"exec plugin {name} printed an expirationTimestamp that is no RFC 3339 time"
            ) from None
    return ExecCredential(token or None, _bytes(cert), _bytes(key), expires)


def _bytes(text: str | None) -> bytes | None:
    return text.encode() if text else None
