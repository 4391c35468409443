"""The DRA plugin's record of prepared claims: versioned JSON, replaced atomically, read strictly.

The kubelet may ask to unprepare a claim after the claim is gone from the API server and after
this daemon restarted, so what Unprepare needs (the claim's CDI spec file) is written here
before NodePrepareResources answers. The file::

    {"version": 2, "checksum": "<sha256 of the claims>",
     "claims": {"<uid>": {"namespace": "...", "name": "...", "cdiSpec": "<file in the CDI dir>",
                          "devices": [{"request": "...", "pool": "...", "device": "...",
                                       "shareID": null, "queues": null}]}}}

Version 2 added ``queues`` (what a share of a shared device consumed, for the queues-claimed
metric). A version 1 file is read as version 2 with no queues (no device was shared then) and is
written as version 2 at the next change.

It is replaced by a temporary file that is fsynced, renamed over the old one and followed by an
fsync of the directory (so the rename itself survives a power cut); a crash at any point leaves
the old file or the new one, never a mix. Both fsyncs are needed: without the first a power
cut can leave an empty file, which this daemon refuses to start on; without the second, a
prepared claim's record can vanish after NodePrepareResources answered, and with it what
Unprepare and the claims' status need. The claims' CDI specs are not fsynced: they are made
again from this file (``cdi_claims.write_spec``). Reading refuses anything else with a clear
error: a file that is not this shape, whose checksum does not match (edited or damaged), or
whose version is newer than this daemon's (a downgrade must not misread it). A missing file is
an empty checkpoint. Everything goes through directory descriptors (``container.safe_fs``), so
a symlink planted as the file is replaced, never followed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kae_deviceplugin.container import safe_fs
from kae_deviceplugin.errors import CheckpointCorrupt, CheckpointTooNew

VERSION = 2  # 1 had no queues: still read (as no queues), written as 2 at the next change
FILE_NAME = "checkpoint.json"
FILE_MODE = 0o600  # claim names are not for every local user


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocation result of a claim that this plugin prepared."""

    request: str
    pool: str
    device: str
    share_id: str | None = None
    queues: int | None = None  # consumed of a shared device's queues; None: not shared


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    """A prepared claim: who it is, what it got, and which CDI spec file holds its edits."""

    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    cdi_spec: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Every prepared claim by UID; a value, changed by making a new one."""

    claims: Mapping[str, PreparedClaim] = field(default_factory=dict)

    def with_claim(self, claim: PreparedClaim) -> Checkpoint:
        return Checkpoint({**self.claims, claim.uid: claim})

    def without_claim(self, uid: str) -> Checkpoint:
        return Checkpoint({k: v for k, v in self.claims.items() if k != uid})


def claimed_queues(checkpoint: Checkpoint) -> dict[str, int]:
    """Device name -> the queues all prepared claims consumed of it (shared devices only)."""
    claimed: dict[str, int] = {}
    for claim in checkpoint.claims.values():
        for device in claim.devices:
            if device.queues is not None:
                claimed[device.device] = claimed.get(device.device, 0) + device.queues
    return claimed


def _claims_json(checkpoint: Checkpoint) -> dict[str, Any]:
    return {
        uid: {
            "namespace": c.namespace,
            "name": c.name,
            "cdiSpec": c.cdi_spec,
            "devices": [
                {
                    "request": d.request,
                    "pool": d.pool,
                    "device": d.device,
                    "shareID": d.share_id,
                    "queues": d.queues,
                }
                for d in c.devices
            ],
        }
        for uid, c in sorted(checkpoint.claims.items())
    }


def _checksum(claims: object) -> str:
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def encode(checkpoint: Checkpoint) -> bytes:
    """The file's bytes for ``checkpoint``."""
    claims = _claims_json(checkpoint)
    document = {"version": VERSION, "checksum": _checksum(claims), "claims": claims}
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def decode(data: bytes, where: str) -> Checkpoint:
    """The checkpoint in ``data``, or CheckpointCorrupt / CheckpointTooNew naming ``where``."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointCorrupt(f"{where}: not JSON ({err})") from None
    if not isinstance(document, dict):
        raise CheckpointCorrupt(f"{where}: not a JSON object")
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CheckpointCorrupt(f"{where}: no valid version")
    if version > VERSION:
        raise CheckpointTooNew(
            f"{where}: version {version} was written by a newer kae-deviceplugin "
            f"(this one reads up to {VERSION}); run that version, or remove the file once no "
            "pod on this node holds a KAE claim"
        )
    claims = document.get("claims")
    if document.get("checksum") != _checksum(claims):
        raise CheckpointCorrupt(f"{where}: checksum mismatch (edited or damaged)")
    try:
        return Checkpoint({uid: _claim(uid, c) for uid, c in _object(claims).items()})
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointCorrupt(f"{where}: unexpected content ({err!r})") from None


def _object(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _text(value: object, optional: bool = False) -> Any:
    if isinstance(value, str) or (optional and value is None):
        return value
    raise TypeError(f"expected a string, got {type(value).__name__}")


def _count(value: object) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise TypeError(f"expected a count or null, got {value!r}"[:80])


def _claim(uid: str, raw: object) -> PreparedClaim:
    claim = _object(raw)
    devices = claim["devices"]
    if not isinstance(devices, list):
        raise TypeError("devices is not a list")
    return PreparedClaim(
        uid=uid,
        namespace=_text(claim["namespace"]),
        name=_text(claim["name"]),
        cdi_spec=_text(claim["cdiSpec"]),
        devices=tuple(
            PreparedDevice(
                request=_text(d["request"]),
                pool=_text(d["pool"]),
                device=_text(d["device"]),
                share_id=_text(d.get("shareID"), optional=True),
                queues=_count(d.get("queues")),
            )
            for d in map(_object, devices)
        ),
    )


class CheckpointFile:
    """The checkpoint file in ``directory`` (the plugin's own directory under the kubelet's)."""

    def __init__(self, directory: Path, name: str = FILE_NAME) -> None:
        self.directory = directory
        self.name = name

    @property
    def path(self) -> Path:
        return self.directory / self.name

    def load(self) -> Checkpoint:
        """The checkpoint on disk; empty when there is none. Raises CheckpointError."""
        with safe_fs.open_root(self.directory) as fd:
            data = safe_fs.read_file(fd, self.name)
        return Checkpoint() if data is None else decode(data, str(self.path))

    def read_only(self) -> Checkpoint:
        """The checkpoint for a reader that must change nothing on the node (doctor, list): a
        missing file or directory is an empty checkpoint and is never created; a symlink in the
        file's place is refused (ELOOP), not followed. Raises CheckpointError or OSError."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return Checkpoint()
        with os.fdopen(fd, "rb") as file:
            return decode(file.read(), str(self.path))

    def save(self, checkpoint: Checkpoint) -> None:
        """Replace the file with ``checkpoint``; when this returns, a power cut keeps it. The
        caller holds the checkpoint lock, so a temporary file of another writer is a leftover
        of one that died, and goes."""
        with safe_fs.open_root(self.directory) as fd:
            safe_fs.remove_temporaries(fd, self.name)
            safe_fs.write_file(fd, self.name, encode(checkpoint), mode=FILE_MODE)
            safe_fs.fsync(fd)  # the rename lives in the directory: make it durable too
