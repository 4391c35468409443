"""The DRA checkpoint's content and its bytes: prepared claims, tombstones, versions (pure).

The file (``checkpoint.CheckpointFile`` reads and writes it)::

    {"version": 3, "checksum": "<sha256 of everything but version and checksum>",
     "generation": 41, "forgotten": 12,
     "claims": {"<uid>": {"namespace": "...", "name": "...", "cdiSpec": "<file in the CDI dir>",
                          "devices": [{"request": "...", "pool": "...", "device": "...",
                                       "shareID": null, "queues": null}]}},
     "unprepared": {"<uid>": {"generation": 40, "at": 1765100000}}}

Version 2 added ``queues`` (what a share of a shared device consumed, for the queues-claimed
metric). Version 3 added what lets two driver instances (a rolling update) agree that an
unprepare overtook a prepare: ``generation`` counts the writes of the file, and ``unprepared``
holds a tombstone per claim UID recently unprepared: the generation that recorded it and when
(seconds since the epoch). A prepare notes the generation before it reads its claims from the
API server; a tombstone written after that (a higher generation) means the kubelet unprepared
the claim meanwhile, on either instance, and the prepare records nothing (``prepare.py``).
Tombstones are pruned when older than ``TOMBSTONE_TTL`` or beyond the newest
``MAX_TOMBSTONES``; ``forgotten`` is the newest generation pruned, and a prepare that began
before it cannot be checked, so it is refused (the kubelet asks again). Version 1 and 2 files
are read as version 3 with generation 0 and no tombstones, and written as version 3 at the next
change. A downgrade to a version that reads only up to 2 refuses to start on a version 3 file
(``CheckpointTooNew``, naming the file and the fix); run the newer version again, or remove
the file once no pod on the node holds a KAE claim. During a rolling update from such a
version, the older instance, still running, answers its calls with that error once the newer
one has written the file.

The checksum covers ``claims`` alone in versions 1 and 2, and every key but ``version`` and
``checksum`` from version 3. Decoding refuses with a clear error (``CheckpointCorrupt``,
``CheckpointTooNew``, naming the file) anything else: a file that is not this shape, whose
checksum does not match (edited or damaged), whose JSON nests too deep to parse, or whose
version is newer than this daemon's (a downgrade must not misread it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kae_deviceplugin.errors import CheckpointCorrupt, CheckpointTooNew

VERSION = 3  # 2 had no generation and tombstones, 1 no queues either: both still read
# A tombstone must outlive every prepare that could have begun before its unprepare: the
# kubelet gives a call 45 s, so after ten minutes none is waiting for its answer.
TOMBSTONE_TTL = 600
MAX_TOMBSTONES = 1024  # a storm of unprepares keeps the file, its parse and memory bounded


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
class Tombstone:
    """A claim UID unprepared: by the write of which generation, and when (epoch seconds)."""

    generation: int
    at: int


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Every prepared claim by UID, the file's generation and the recent unprepares; a value,
    changed by making a new one."""

    claims: Mapping[str, PreparedClaim] = field(default_factory=dict)
    generation: int = 0  # of the file this was read from (0: none, or an older format)
    unprepared: Mapping[str, Tombstone] = field(default_factory=dict)
    forgotten: int = 0  # the newest generation of a tombstone pruned

    def with_claim(self, claim: PreparedClaim) -> Checkpoint:
        return replace(self, claims={**self.claims, claim.uid: claim})

    def without_claim(self, uid: str) -> Checkpoint:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})

    def unprepared_now(self, uids: Iterable[str], now: int) -> Checkpoint:
        """With a tombstone for each of ``uids`` at the generation the next write records."""
        stone = Tombstone(self.generation + 1, now)
        return replace(self, unprepared={**self.unprepared, **dict.fromkeys(uids, stone)})

    def overtaken(self, uid: str, seen: int) -> bool:
        """Whether a prepare of ``uid`` that read the file at generation ``seen`` before it
        asked the API server must not record it: an unprepare came since, or one may have
        come whose tombstone is already pruned."""
        stone = self.unprepared.get(uid)
        return seen < self.forgotten or (stone is not None and stone.generation > seen)

    def next_write(self, now: int) -> Checkpoint:
        """What the next write stores: one generation on, old and surplus tombstones pruned."""
        kept = dict(
            sorted(
                ((uid, s) for uid, s in self.unprepared.items() if s.at > now - TOMBSTONE_TTL),
                key=lambda item: (item[1].generation, item[0]),
            )[-MAX_TOMBSTONES:]
        )
        dropped = [s.generation for uid, s in self.unprepared.items() if uid not in kept]
        return replace(
            self,
            generation=self.generation + 1,
            unprepared=kept,
            forgotten=max([self.forgotten, *dropped]),
        )

    def same_records(self, other: Checkpoint) -> bool:
        """The same claims and tombstones (a write would change nothing that matters)."""
        return self.claims == other.claims and self.unprepared == other.unprepared


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
    body = {
        "generation": checkpoint.generation,
        "forgotten": checkpoint.forgotten,
        "claims": _claims_json(checkpoint),
        "unprepared": {
            uid: {"generation": s.generation, "at": s.at}
            for uid, s in sorted(checkpoint.unprepared.items())
        },
    }
    document = {"version": VERSION, "checksum": _checksum(body), **body}
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def decode(data: bytes, where: str) -> Checkpoint:
    """The checkpoint in ``data``, or CheckpointCorrupt / CheckpointTooNew naming ``where``."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointCorrupt(f"{where}: not JSON ({err})") from None
    except RecursionError:  # nested deeper than the parser's stack: no file this daemon wrote
        raise CheckpointCorrupt(f"{where}: not JSON (nested too deep to read)") from None
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
    covered: object = document.get("claims")
    if version >= 3:
        covered = {k: v for k, v in document.items() if k not in ("version", "checksum")}
    if document.get("checksum") != _checksum(covered):
        raise CheckpointCorrupt(f"{where}: checksum mismatch (edited or damaged)")
    try:
        return _checkpoint(document, version)
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointCorrupt(f"{where}: unexpected content ({err!r})"[:300]) from None


def _checkpoint(document: Mapping[str, Any], version: int) -> Checkpoint:
    claims = {uid: _claim(uid, c) for uid, c in _object(document["claims"]).items()}
    if version < 3:
        return Checkpoint(claims)
    unprepared = {
        uid: Tombstone(_whole(s["generation"]), _whole(s["at"]))
        for uid, s in ((uid, _object(s)) for uid, s in _object(document["unprepared"]).items())
    }
    return Checkpoint(
        claims, _whole(document["generation"]), unprepared, _whole(document["forgotten"])
    )


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


def _whole(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise TypeError(f"expected a whole number, got {value!r}"[:80])


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
