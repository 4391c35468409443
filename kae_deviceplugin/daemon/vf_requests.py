"""The one privileged step, apart: the serving daemon asks, the ``vf-writer`` writes.

The daemon's container keeps a read-only /sys and no capabilities. Where a VF profile is set,
the chart adds a small ``vf-writer`` container to the pod that alone sees the host's PCI devices
writable, and the two share an in-memory directory:

- the daemon puts ``<pf>.request`` there (``<sequence> <count>``, through a rename) and waits;
- the writer checks that ``<pf>`` is a KAE PF (vendor 0x19e5, a KAE PF device ID, SR-IOV
  capable) and the count a number up to its ``sriov_totalvfs``, writes it to that PF's
  ``sriov_numvfs`` and nothing else, and answers ``<pf>.result`` (``<sequence> <errno>``, 0 for
  success): the kernel's errno comes back to the daemon as if it had written itself.

Anything else in the directory is ignored; a request for anything but a KAE PF is answered
EPERM without touching sysfs.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.engines import ENGINES, HUAWEI_PCI_VENDOR
from kae_deviceplugin.daemon.vf_holders import ClaimHolders, pod_resources_holders
from kae_deviceplugin.daemon.vf_profiles import VfProfiles, VfWriter
from kae_deviceplugin.discovery.attributes import PCI_ADDRESS, parse_int, read_attribute, text
from kae_deviceplugin.discovery.sriov import pf_function_dir

log = logging.getLogger(__name__)

ANSWER_TIMEOUT = 120.0  # the kernel probes every new VF inside the write: seconds for 63
POLL = 0.05
_PF_DEVICE_IDS = frozenset(engine.pf_device_id for engine in ENGINES)


def _put(directory: Path, name: str, body: str) -> None:
    tmp = directory / f".{name}.tmp"
    tmp.write_text(body)
    os.replace(tmp, directory / name)


def request_writer(directory: Path, timeout: float = ANSWER_TIMEOUT) -> VfWriter:
    """The daemon's side: hand each write to the vf-writer and raise its errno as OSError."""
    sequence = [time.time_ns()]  # unique across restarts of the daemon, which reuse the files

    def write(pf: str, count: int) -> None:
        sequence[0] += 1
        mine = str(sequence[0])
        _put(directory, f"{pf}.request", f"{mine} {count}\n")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                seq, _, code = (directory / f"{pf}.result").read_text().partition(" ")
            except OSError:
                seq, code = "", ""
            if seq == mine:
                number = int(code.strip() or errno.EIO)
                if number:
                    raise OSError(number, os.strerror(number))
                return
            time.sleep(POLL)
        raise OSError(errno.ETIMEDOUT, f"no answer from the vf-writer in {directory}")

    return write


def vf_writer_of(settings: Settings) -> VfWriter | None:
    """The writer the settings ask for: through the vf-writer, or None (the daemon's own)."""
    return request_writer(settings.vf_writer_dir) if settings.vf_writer_dir else None


def vf_profiles_for(
    settings: Settings, writer: VfWriter | None = None, claims: ClaimHolders | None = None
) -> VfProfiles:
    """The VF profiles of a daemon: holders from pod-resources (and DRA's ``claims``), writes
    through ``writer``, else as the settings say."""
    holders = pod_resources_holders(settings.effective_pod_resources_socket, claims)
    return VfProfiles(settings.sysfs_root, holders, writer or vf_writer_of(settings))


def check_request(sysfs_root: str, pf: str, count_text: str) -> int:
    """0 when ``count_text`` may be written to ``pf``'s sriov_numvfs, else the errno."""
    if not PCI_ADDRESS.match(pf):
        return errno.EPERM
    fn = pf_function_dir(sysfs_root, pf)
    vendor = text(read_attribute(os.path.join(fn, "vendor")))
    device = text(read_attribute(os.path.join(fn, "device")))
    if vendor != HUAWEI_PCI_VENDOR or device not in _PF_DEVICE_IDS:
        return errno.EPERM
    total = parse_int(read_attribute(os.path.join(fn, "sriov_totalvfs")))
    if total is None:
        return errno.EPERM
    if not count_text.isdigit():
        return errno.EINVAL
    return errno.ERANGE if int(count_text) > total else 0


def answer_requests(sysfs_root: str, directory: Path, answered: dict[str, str]) -> int:
    """Answer every new request in ``directory`` once; how many were answered."""
    done = 0
    for request in sorted(directory.glob("*.request")):
        pf = request.name.removesuffix(".request")
        try:
            seq, _, count = request.read_text().strip().partition(" ")
        except OSError:
            continue
        if answered.get(pf) == seq:
            continue
        code = check_request(sysfs_root, pf, count)
        if code == 0:
            code = _write(sysfs_root, pf, count)
        log.info("%s/sriov_numvfs = %s: %s", pf, count, os.strerror(code) if code else "done")
        _put(directory, f"{pf}.result", f"{seq} {code}\n")
        answered[pf] = seq
        done += 1
    return done


def _write(sysfs_root: str, pf: str, count: str) -> int:
    path = os.path.join(pf_function_dir(sysfs_root, pf), "sriov_numvfs")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, f"{count}\n".encode())
        finally:
            os.close(fd)
    except OSError as err:
        return err.errno or errno.EIO
    return 0


def serve_requests(
    sysfs_root: str, directory: Path, stop: Callable[[], bool] = lambda: False
) -> None:
    """The vf-writer's loop: answer requests until ``stop()`` (never, in the container)."""
    answered: dict[str, str] = {}
    # A result already there answers a request of a previous writer: not again.
    for result in directory.glob("*.result"):
        answered[result.name.removesuffix(".result")] = result.read_text().partition(" ")[0]
    while not stop():
        if not answer_requests(sysfs_root, directory, answered):
            time.sleep(POLL)
