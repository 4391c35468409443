"""Capability labels through Node Feature Discovery: a "local" feature file NFD turns into labels.

nfd-worker reads every file in ``/etc/kubernetes/node-feature-discovery/features.d/`` (files
whose name starts with a dot are skipped, at most 64 KiB each). Each line is ``<key>[=<value>]``
(value ``true`` when left out); a line starting with ``#`` is a comment, except for directives
``# +<name>=<value>``, of which ``# +expiry-time=<RFC 3339 time>`` drops the lines after it once
the time has passed. NFD documents unprefixed keys as deprecated (auto-prefixed for now), so
every key here carries the ``feature.node.kubernetes.io/`` prefix itself.

What this module writes (only engines with at least one device appear)::

    # +expiry-time=2030-01-02T03:04:05Z
    feature.node.kubernetes.io/kae.present=true
    feature.node.kubernetes.io/kae-hpre.present=true
    feature.node.kubernetes.io/kae-hpre.api=hisi_qm_v2
    feature.node.kubernetes.io/kae-hpre.algorithms=rsa_dh
    feature.node.kubernetes.io/kae-hpre.algorithm.rsa=true
    feature.node.kubernetes.io/kae-hpre.algorithm.dh=true
    feature.node.kubernetes.io/kae-hpre.driver-version=2.0.2
    feature.node.kubernetes.io/kae-hpre.pfs=2
    feature.node.kubernetes.io/kae-hpre.vfs=4

The node's KAE facts (issue 37, read again at each write) add per engine with devices ``.sva``,
``.uacce-mode``, ``.pf-q-num``, ``.driver-provenance``; per engine without devices (on the bus, or
not on a HiSilicon CPU) ``.likely-absent-cause``; ``kae.cma-total-mib`` where a device runs
without SVA (values in docs/observability.md).

``algorithms`` joins the names in kernel order with ``_`` and is left out when that would not
be a valid label value (over 63 characters); ``algorithm.<name>`` is the exact, always-present
form for rules (``Exists``). ``api`` joins distinct values with ``.`` if devices disagree.
``driver-version`` is the kernel module's ``version`` (else ``srcversion``), left out when it is
unknown, when the engine's devices disagree (mid-upgrade) or when it is not a valid label value.
Labels describe hardware, so unhealthy devices count. The expiry (an hour ahead, renewed at
half-life) makes the labels vanish after the plugin is removed from a node instead of lying on.

The file is replaced atomically (a dot file in the same directory, then rename, as NFD asks)
and only when the labels change or the expiry needs renewing.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container import safe_fs
from kae_deviceplugin.core.broadcast import LatestValue, wait_until_set
from kae_deviceplugin.core.engines import ENGINES
from kae_deviceplugin.core.model import Function, Inventory, UacceDevice
from kae_deviceplugin.discovery.node_facts import (
    DriverFacts,
    NodeFacts,
    engine_sva,
    read_node_facts,
)

log = logging.getLogger(__name__)

LABEL_PREFIX = "feature.node.kubernetes.io/"
FEATURE_TTL = timedelta(hours=1)
EXPIRY_DIRECTIVE = "# +expiry-time="
MAX_LABEL_LENGTH = 63
MIB = 1024 * 1024
_VALID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_INVALID_CHARS = re.compile(r"[^-A-Za-z0-9_.]+")


def valid_label_part(text: str) -> bool:
    """A label name (after the prefix) or a non-empty label value, as Kubernetes accepts them."""
    return len(text) <= MAX_LABEL_LENGTH and _VALID.fullmatch(text) is not None


def _label_safe(name: str) -> str:
    return _INVALID_CHARS.sub("-", name).strip("-_.")


def _distinct(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def feature_labels(inventory: Inventory, facts: NodeFacts | None = None) -> dict[str, str]:
    """The node labels (full keys) that describe the KAE hardware in ``inventory``, and the
    node's facts where given."""
    labels: dict[str, str] = {}
    if inventory.devices:
        labels["kae.present"] = "true"
    for engine in ENGINES:
        devices = [d for d in inventory if d.engine == engine.name]
        if not devices:
            continue
        name = f"kae-{engine.name}"
        labels[f"{name}.present"] = "true"
        api = ".".join(_distinct([d.api for d in devices if d.api]))
        if valid_label_part(api):
            labels[f"{name}.api"] = api
        algorithms = _distinct([a for d in devices for a in d.algorithms])
        joined = "_".join(_label_safe(a) for a in algorithms)
        if valid_label_part(joined):
            labels[f"{name}.algorithms"] = joined
        for algorithm in algorithms:
            key = f"{name}.algorithm.{_label_safe(algorithm)}"
            if valid_label_part(key):
                labels[key] = "true"
        versions = _distinct([d.driver_version for d in devices if d.driver_version])
        if len(versions) == 1 and valid_label_part(versions[0]):
            labels[f"{name}.driver-version"] = versions[0]
        labels[f"{name}.pfs"] = str(sum(d.function is Function.PF for d in devices))
        labels[f"{name}.vfs"] = str(sum(d.function is Function.VF for d in devices))
        if facts is not None:
            labels |= _fact_labels(name, devices, facts.drivers[engine.name])
    if facts is not None:
        labels |= _node_fact_labels(inventory, facts)
    return {LABEL_PREFIX + key: value for key, value in labels.items()}


def _fact_labels(name: str, devices: list[UacceDevice], driver: DriverFacts) -> dict[str, str]:
    """An engine's SVA and its driver's mode, queues and provenance, each where known."""
    found = {
        f"{name}.sva": engine_sva(devices),
        f"{name}.uacce-mode": None if driver.uacce_mode is None else str(driver.uacce_mode),
        f"{name}.pf-q-num": None if driver.pf_q_num is None else str(driver.pf_q_num),
        f"{name}.driver-provenance": driver.provenance,
    }
    return {k: v for k, v in found.items() if v is not None and valid_label_part(v)}


def _node_fact_labels(inventory: Inventory, facts: NodeFacts) -> dict[str, str]:
    """Why absent engines are absent, and the CMA area where a device runs without SVA."""
    labels = {f"kae-{a.engine}.likely-absent-cause": a.cause for a in facts.absent}
    if facts.without_sva(inventory) and facts.cma.total is not None:
        labels["kae.cma-total-mib"] = str(facts.cma.total // MIB)
    return labels


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def render(labels: Mapping[str, str], expires: datetime | None) -> str:
    lines = ["# Written by kae-deviceplugin: replaced whenever the KAE hardware changes."]
    if expires is not None:
        lines.append(EXPIRY_DIRECTIVE + _rfc3339(expires))
    lines += [f"{key}={value}" for key, value in labels.items()]
    return "\n".join(lines) + "\n"


def parse(text: str) -> tuple[dict[str, str], datetime | None]:
    """The labels and expiry of a file this module wrote (other comments are skipped)."""
    labels: dict[str, str] = {}
    expires = None
    for line in text.splitlines():
        if line.startswith(EXPIRY_DIRECTIVE):
            try:
                expires = datetime.fromisoformat(line.removeprefix(EXPIRY_DIRECTIVE).strip())
            except ValueError:
                expires = None
        elif line and not line.startswith("#"):
            key, equals, value = line.partition("=")
            labels[key] = value if equals else "true"  # NFD's reading of a bare key
    return labels, expires


def replace_file(path: Path, content: str) -> None:
    """Write ``content`` to ``path`` atomically: readers see the old file or the new, whole.

    Through a descriptor of the directory, so a symlink planted as the file (or its temporary)
    is replaced, never followed. 0644: nfd-worker need not run as our user.
    """
    with safe_fs.open_root(path.parent, create=False) as fd:
        safe_fs.write_file(fd, path.name, content.encode("utf-8"), mode=0o644)


def read_file(path: Path) -> str | None:
    """The file's text, None when it is absent, not a regular file, a symlink or not UTF-8."""
    try:
        with safe_fs.open_root(path.parent, create=False) as fd:
            data = safe_fs.read_file(fd, path.name)
        return None if data is None else data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@dataclass
class FeatureFile:
    """The feature file at ``path``, rewritten only when its labels or expiry need it."""

    path: Path
    ttl: timedelta | None = FEATURE_TTL
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    expires: datetime | None = None  # the file's expiry as the last update() left it

    def update(self, labels: Mapping[str, str]) -> bool:
        """Bring the file in line with ``labels``; True if it was written. Raises OSError."""
        now = self.clock()
        text = read_file(self.path)
        current, expires = (None, None) if text is None else parse(text)
        if current == dict(labels) and not self._renew_due(expires, now):
            self.expires = expires
            return False
        new_expiry = None if self.ttl is None else now + self.ttl
        replace_file(self.path, render(labels, new_expiry))
        self.expires = new_expiry
        if current != dict(labels):
            log.info("NFD feature file %s now holds %d labels", self.path, len(labels))
        return True

    def _renew_due(self, expires: datetime | None, now: datetime) -> bool:
        if self.ttl is None:
            return expires is not None  # drop an expiry a previous configuration wrote
        return expires is None or expires - now < self.ttl / 2


class Observed(Protocol):
    """What the task reads (a ``scanloop.ScanLoop``)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def inventories(self) -> LatestValue[Inventory]: ...


async def nfd_task(daemon: Observed) -> None:
    """Root task: keep the feature file in line with the inventory; failures are logged, not fatal.

    It wakes when the daemon publishes a changed inventory and when the file's expiry needs
    renewing (about every half hour), nothing else; after a failed write it retries every scan
    interval until the file can be written.
    """
    path = daemon.settings.nfd_features_file
    if path is None:
        return  # disabled: nothing to do
    writer = FeatureWriter(FeatureFile(path), daemon.settings.sysfs_root)
    latest: list[Inventory] = []
    changed = asyncio.Event()

    async def follow() -> None:
        async for _version, inventory in daemon.inventories.updates():
            latest[:] = [inventory]
            changed.set()

    follower = asyncio.create_task(follow())
    try:
        while True:
            await changed.wait()
            changed.clear()
            while not await writer.write(latest[0]):
                await wait_until_set(changed, max(daemon.settings.scan_interval, 0.1))
                changed.clear()
            await wait_until_set(changed, writer.renewal_due())
            changed.set()  # a new inventory, or the expiry to renew: write (update() decides)
    finally:
        follower.cancel()


class FeatureWriter:
    """Writes off the loop; logs a failure once per kind and once when it clears."""

    def __init__(self, feature_file: FeatureFile, sysfs_root: Path | None = None) -> None:
        self.feature_file = feature_file
        self.sysfs_root = sysfs_root  # None: the inventory's labels alone, no node facts
        self.last_error: str | None = None

    def _update(self, inventory: Inventory) -> bool:
        root = self.sysfs_root
        facts = None if root is None else read_node_facts(root, inventory)
        return self.feature_file.update(feature_labels(inventory, facts))

    async def write(self, inventory: Inventory) -> bool:
        path = self.feature_file.path
        try:
            await asyncio.to_thread(self._update, inventory)
        except OSError as err:
            if err.strerror != self.last_error:
                log.warning(
                    "cannot write the NFD feature file %s (%s); no KAE node labels until it "
                    "can be written (is features.d mounted?)",
                    path,
                    err.strerror or err,
                )
            self.last_error = err.strerror or str(err)
            return False
        if self.last_error is not None:
            log.info("NFD feature file %s is writable again", path)
        self.last_error = None
        return True

    def renewal_due(self) -> float:
        """Seconds until the file's expiry is due for renewal (half its life left), a second
        past it so that update() sees it due; a day when the file has no expiry."""
        file = self.feature_file
        if file.ttl is None or file.expires is None:
            return 86400.0
        left = file.expires - file.ttl / 2 - file.clock()
        return max(1.0, left.total_seconds() + 1.0)
