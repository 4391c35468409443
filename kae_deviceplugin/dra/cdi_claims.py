"""One transient CDI spec per prepared claim: what its containers get, written atomically.

The kubelet hands a container the CDI IDs of the devices of the claim requests it references,
so the spec has two kinds of entries, both named after the claim UID (a name defined in two
specs is a conflict the runtime resolves by dropping both, and two claims may share a device):

* ``<uid>-<device>`` (``<uid>-<device>-<share ID>`` for a share of a shared device, so two
  shares of one device in one claim never define one name twice): the device's own edits
  (``container.edits.device_edits``): its /dev node and its PCI function for the sysfs view;
* ``<uid>_<request>``: per request, what Allocate gives the same devices in device-plugin mode
  beyond them: the node-wide /sys/class/uacce view mount and the ``KAE_<ENGINE>_*``, ``WD_*``
  and ``OPENSSL_ENGINES`` variables; for shares, ``KAE_<ENGINE>_QUEUES`` and ``WD_*_CTX_NUM``
  sized to the queues consumed. Its ID goes with the request's first device only, so each
  container gets it once. (A container using two requests of one engine gets the
  ``KAE_<ENGINE>_*`` variables of only one of them; its device nodes and view are complete.)

Device names are DNS labels and have no ``_``, so the two kinds never collide. The spec uses
the device-plugin mode's CDI kind; its file ``openfuyao.com-kae_<uid>.json`` cannot be mistaken
for that mode's single ``openfuyao.com-kae.json``.

A CDI runtime refuses a device name that is not letters and digits with ``-``, ``_``, ``.``
and ``:`` between them (the CDI parser's rule), and fails the container's start. The claim UID
is checked (``UID``) and device names are this driver's own, but request names and share IDs
come from the claim: each goes into a name verbatim only when it is a DNS label (what the API
server makes them), and otherwise as ``h.`` and 16 hex digits of its SHA-256, which no DNS label
can be (``cdi_part``). The kubelet still gets the raw share ID in its answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kae_deviceplugin.container import cdi, safe_fs
from kae_deviceplugin.container.edits import (
    ContainerEdits,
    ContainerOptions,
    container_edits,
    device_edits,
)
from kae_deviceplugin.core.model import UacceDevice
from kae_deviceplugin.dra.checkpoint import PreparedDevice

SPEC_PREFIX = f"{cdi.KIND.replace('/', '-')}_"
SPEC_SUFFIX = ".json"
# What a claim UID may look like here (the API server makes UUIDs): it becomes part of a file
# name, so no '/', no '.', nothing a path could be built from.
UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
_SPEC_FILE = re.compile(rf"{re.escape(SPEC_PREFIX)}({UID.pattern}){re.escape(SPEC_SUFFIX)}")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of the kubelet's answer: the allocation result and its CDI IDs."""

    result: PreparedDevice
    cdi_ids: tuple[str, ...]


def spec_file(uid: str) -> str:
    """The file name of a claim's spec in the CDI directory; ValueError for an unsafe UID."""
    if not UID.fullmatch(uid):
        raise ValueError(f"claim UID {uid[:80]!r} is not a UID")
    return f"{SPEC_PREFIX}{uid}{SPEC_SUFFIX}"


def uid_of_spec_file(name: str) -> str | None:
    """The claim UID a spec file belongs to; None for any other file."""
    match = _SPEC_FILE.fullmatch(name)
    return None if match is None else match.group(1)


def cdi_part(raw: str) -> str:
    """``raw`` where it is a DNS label, else a name made of it that a CDI runtime accepts and
    no DNS label can equal (the ``.``)."""
    if DNS_LABEL.fullmatch(raw):
        return raw
    return f"h.{hashlib.sha256(raw.encode(errors='surrogateescape')).hexdigest()[:16]}"


def _device_entry_name(uid: str, result: PreparedDevice) -> str:
    # A share ID tells apart two shares of one device in one claim (two requests, one device).
    share = f"-{cdi_part(result.share_id)}" if result.share_id else ""
    return f"{uid}-{result.device}{share}"


def _request_entry_name(uid: str, request: str) -> str:
    # A subrequest is <request>/<subrequest>: each part on its own, joined by "_".
    return "_".join([uid, *map(cdi_part, request.split("/"))])


def _request_entry(name: str, edits: Sequence[ContainerEdits]) -> dict[str, object]:
    env: dict[str, str] = {}
    mounts: dict[str, object] = {}
    for edit in edits:
        env.update(edit.env)
        for m in edit.mounts:  # the same view mount for every engine: keep one
            options = ["ro", "rbind"] if m.read_only else ["rbind"]
            mounts[m.container_path] = {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": options,
            }
    rendered: dict[str, object] = {"env": [f"{k}={v}" for k, v in env.items()]}
    if mounts:
        rendered["mounts"] = list(mounts.values())
    return {"name": name, "containerEdits": rendered}


def _request_edits(
    results: Sequence[PreparedDevice],
    devices: Mapping[str, UacceDevice],
    options: ContainerOptions,
) -> list[ContainerEdits]:
    """One request's edits per engine; the queues of its shares, by PCI address, size them."""
    engines: dict[str, dict[str, UacceDevice]] = {}
    queues: dict[str, int] = {}
    for r in results:
        device = devices[r.device]
        engines.setdefault(device.engine, {})[device.pci_address] = device
        if r.queues is not None:
            queues[device.pci_address] = queues.get(device.pci_address, 0) + r.queues
    return [
        container_edits(engine, list(found.values()), options, queues or None)
        for engine, found in engines.items()
    ]


def claim_spec(
    uid: str,
    results: Sequence[PreparedDevice],
    devices: Mapping[str, UacceDevice],
    options: ContainerOptions,
) -> tuple[dict[str, object], tuple[ClaimDevice, ...]]:
    """The claim's CDI spec and its answer devices; ``devices`` maps pool device names to the
    inventory's devices and must hold every result's device."""
    # cdi=True: container_edits then leaves each device's own edits to the CDI entries below.
    shared = replace(options, cdi=True)
    entries: list[dict[str, object]] = []
    answers: list[ClaimDevice] = []
    for request in dict.fromkeys(r.request for r in results):
        mine = [r for r in results if r.request == request]
        request_name = _request_entry_name(uid, request)
        entries.append(_request_entry(request_name, _request_edits(mine, devices, shared)))
        for index, r in enumerate(mine):
            entry = cdi.device_entry(devices[r.device], device_edits(devices[r.device], options))
            entry["name"] = _device_entry_name(uid, r)
            entries.append(entry)
            ids = (f"{cdi.KIND}={entry['name']}",)
            answers.append(
                ClaimDevice(r, ids + ((f"{cdi.KIND}={request_name}",) if not index else ()))
            )
    return cdi.build_spec(entries), tuple(answers)


def encode_spec(spec: Mapping[str, object]) -> bytes:
    return (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode()


def write_spec(cdi_dir: Path, uid: str, spec: Mapping[str, object]) -> bool:
    """Atomically replace the claim's spec file if its content changed; True when written.

    Atomic (a temporary file renamed over it: the runtime reads the old spec or the new one)
    but not fsynced: a power cut may take the spec back or leave it empty, and that is
    repaired before any container can use it. The checkpoint, fsynced before the kubelet is
    answered, holds what the spec is made from; at start the daemon writes every recorded
    claim's spec again where it differs (``ClaimPreparer.reconcile``, before the socket
    serves), and after a reboot the kubelet prepares its claims again before it starts their
    containers, which writes the spec again too. So the pod start pays for the checkpoint's
    fsyncs only."""
    data = encode_spec(spec)
    with safe_fs.open_root(cdi_dir) as fd:
        if safe_fs.read_file(fd, spec_file(uid)) == data:
            return False
        safe_fs.remove_temporaries(fd, spec_file(uid))  # the caller holds the checkpoint lock
        safe_fs.write_file(fd, spec_file(uid), data, mode=0o644, durable=False)
    return True


def remove_spec(cdi_dir: Path, uid: str) -> None:
    """Delete the claim's spec file; absent is fine."""
    remove_spec_file(cdi_dir, spec_file(uid))


def remove_spec_file(cdi_dir: Path, name: str) -> None:
    """Delete the claim spec file ``name``; absent is fine, and a name that is not a claim
    spec's (a damaged checkpoint could name anything) is never touched."""
    if uid_of_spec_file(name) is None:
        return
    with safe_fs.open_root(cdi_dir) as fd:
        safe_fs.remove_entry(fd, name)


def remove_claim_specs(cdi_dir: Path, uid: str, recorded: str | None) -> str:
    """Remove the claim's spec files: the one its record names (``recorded``) and the one this
    version would name (a claim whose record was lost, or never written); no other UID can have
    a spec. An error text for the kubelet, or "" when none is left."""
    names = {recorded} if recorded is not None else set()
    if UID.fullmatch(uid):
        names.add(spec_file(uid))
    try:
        for name in sorted(names):
            remove_spec_file(cdi_dir, name)
    except OSError as err:
        return f"cannot remove the CDI spec: {err}"
    return ""


def spec_uids(cdi_dir: Path) -> set[str]:
    """The UIDs of every claim spec file in the CDI directory (other files are not ours)."""
    with safe_fs.open_root(cdi_dir) as fd:
        names = os.listdir(fd)
    return {uid for uid in map(uid_of_spec_file, names) if uid is not None}
