"""The NFD local feature file: NFD's format, valid labels, atomic and only-on-change writes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.core.broadcast import LatestValue
from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.discovery.scan import scan
from kae_deviceplugin.observability.nfd import (
    EXPIRY_DIRECTIVE,
    FEATURE_TTL,
    LABEL_PREFIX,
    FeatureFile,
    FeatureWriter,
    feature_labels,
    nfd_task,
    parse,
    valid_label_part,
)
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.sysfs_builder import remove_device
from kae_deviceplugin.testing.sysfs_trees import TREES
from tests.support.harness import DaemonThread, settings_for, short_tmpdir
from tests.support.observability_harness import wait_until

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"
P = LABEL_PREFIX


def fixture_inventory(name: str) -> Inventory:
    return scan(FIXTURES / name / "sys", FIXTURES / name / "dev")


def test_labels_of_the_two_socket_vf_tree() -> None:
    """Presence, api, algorithms (joined and one key each), PF and VF counts per engine."""
    expected = {P + "kae.present": "true"}
    for engine, algorithms in (("hpre", ["rsa", "dh"]), ("sec", ["cipher", "digest", "aead"])):
        expected |= {
            f"{P}kae-{engine}.present": "true",
            f"{P}kae-{engine}.api": "hisi_qm_v2",
            f"{P}kae-{engine}.algorithms": "_".join(algorithms),
            **{f"{P}kae-{engine}.algorithm.{a}": "true" for a in algorithms},
            f"{P}kae-{engine}.driver-version": "2.0.2",
            f"{P}kae-{engine}.pfs": "2",
            f"{P}kae-{engine}.vfs": "4",
        }
    labels = feature_labels(fixture_inventory("kunpeng920-2p-vfs"))
    assert {k: v for k, v in labels.items() if "kae-zip" not in k} == expected
    assert labels[P + "kae-zip.algorithms"] == "zlib_gzip"


def test_driver_version_label_only_when_known_agreed_and_valid() -> None:
    """srcversion serves where no version is set; unknown, mixed or invalid versions get none."""
    labels = feature_labels(fixture_inventory("mainline-5.10"))
    assert labels[P + "kae-hpre.driver-version"].isalnum()  # a srcversion checksum
    assert not any("driver-version" in k for k in feature_labels(fixture_inventory("mainline-6.6")))
    devices = fixture_inventory("kunpeng920-2p").devices
    mixed = (dataclasses.replace(devices[0], driver_version="2.0.3"), *devices[1:])
    bad = tuple(dataclasses.replace(d, driver_version="2.0 (rc1)") for d in devices)
    assert P + "kae-hpre.driver-version" not in feature_labels(Inventory(mixed))
    assert P + "kae-sec.driver-version" in feature_labels(Inventory(mixed))
    assert not any("driver-version" in k for k in feature_labels(Inventory(bad)))


def test_no_devices_no_labels() -> None:
    """A node without KAE gets no label at all (not kae.present=false, which Exists matches)."""
    assert feature_labels(fixture_inventory("empty-node")) == {}


def test_odd_algorithm_names_become_valid_labels_or_are_left_out() -> None:
    """Names with characters labels cannot hold are cleaned; too long a join is dropped."""
    inventory = fixture_inventory("mainline-6.6")
    odd = ("cbc(aes)", "x" * 70, "sm4")
    devices = tuple(dataclasses.replace(d, algorithms=odd) for d in inventory.devices)
    labels = feature_labels(Inventory(devices))
    assert labels[P + "kae-sec.algorithm.cbc-aes"] == "true"
    assert labels[P + "kae-sec.algorithm.sm4"] == "true"
    assert P + "kae-sec.algorithms" not in labels  # 79 characters: not a valid value
    assert not any("xxxx" in key for key in labels)


def test_every_line_is_one_nfd_accepts(tmp_path: Path) -> None:
    """Comments, one RFC 3339 expiry directive, and prefixed key=value with valid name/value."""
    path = tmp_path / "kae"
    FeatureFile(path).update(feature_labels(fixture_inventory("kunpeng920-2p-vfs")))
    lines = path.read_text().splitlines()
    directives = [line for line in lines if line.startswith("# +")]
    assert len(directives) == 1 and directives[0].startswith(EXPIRY_DIRECTIVE)
    expiry = datetime.strptime(directives[0].removeprefix(EXPIRY_DIRECTIVE), "%Y-%m-%dT%H:%M:%SZ")
    assert expiry.replace(tzinfo=UTC) > datetime.now(UTC)
    label_lines = [line for line in lines if not line.startswith("#")]
    assert len(label_lines) >= 20
    for line in label_lines:
        key, value = line.split("=", 1)
        assert key.startswith(LABEL_PREFIX), line
        assert valid_label_part(key.removeprefix(LABEL_PREFIX)), line
        assert valid_label_part(value), line
    assert len(path.read_bytes()) < 64 * 1024  # NFD ignores bigger files
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kae"]  # no temp file left


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def identity(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns


def test_written_only_when_labels_change_or_the_expiry_is_due(tmp_path: Path) -> None:
    """Same labels: untouched; new labels or half the TTL gone: replaced by a new file."""
    clock = Clock()
    path = tmp_path / "kae"
    feature_file = FeatureFile(path, ttl=timedelta(hours=1), clock=clock)
    labels = {P + "kae.present": "true"}
    assert feature_file.update(labels)
    before = identity(path)
    clock.now += timedelta(minutes=29)
    assert not feature_file.update(labels)
    assert identity(path) == before
    assert feature_file.update({**labels, P + "kae-zip.present": "true"})
    assert identity(path)[0] != before[0]  # renamed over, not rewritten in place
    assert parse(path.read_text())[0] == {**labels, P + "kae-zip.present": "true"}
    renewed = identity(path)
    clock.now += timedelta(minutes=31)
    assert feature_file.update({**labels, P + "kae-zip.present": "true"})
    assert identity(path) != renewed
    assert parse(path.read_text())[1] == clock.now + timedelta(hours=1)


def test_a_deleted_or_edited_file_is_restored(tmp_path: Path) -> None:
    """The file on disk is the reference: deleted or hand-edited, it is written again."""
    path = tmp_path / "kae"
    feature_file = FeatureFile(path)
    labels = {P + "kae.present": "true"}
    feature_file.update(labels)
    path.unlink()
    assert feature_file.update(labels)
    path.write_text("feature.node.kubernetes.io/kae.present=false\n")
    assert feature_file.update(labels)
    assert parse(path.read_text())[0] == labels


def test_without_ttl_no_expiry_is_written(tmp_path: Path) -> None:
    """ttl=None writes no directive, and removes one an earlier run wrote."""
    path = tmp_path / "kae"
    labels = {P + "kae.present": "true"}
    FeatureFile(path).update(labels)
    assert FeatureFile(path, ttl=None).update(labels)
    assert "+expiry-time" not in path.read_text()
    assert not FeatureFile(path, ttl=None).update(labels)


class FakeDaemon:
    """Settings and the inventory broadcast; counts the writer's passes (FeatureFile.update)."""

    def __init__(self, settings: Settings, inventory: Inventory) -> None:
        self.settings = settings
        self.inventories = LatestValue(inventory)
        self.reads = 0

    def counting(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = FeatureFile.update

        def update(file: FeatureFile, labels: Mapping[str, str]) -> bool:
            self.reads += 1
            return real(file, labels)

        monkeypatch.setattr(FeatureFile, "update", update)


async def wait_while_running(task: asyncio.Task[None], check: Callable[[], bool]) -> bool:
    """Poll ``check`` on the loop; False if ``task`` ends first or 10 s pass."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10.0
    while not check():
        if task.done() or loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def test_unwritable_directory_warns_once_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing features.d: one warning however many retries, no crash; written once it exists."""
    caplog.set_level(logging.INFO, logger="kae_deviceplugin.observability.nfd")
    path = tmp_path / "features.d" / "kae"
    settings = dataclasses.replace(Settings(), nfd_features_file=path, scan_interval=0.01)
    daemon = FakeDaemon(settings, fixture_inventory("kunpeng920-2p"))
    daemon.counting(monkeypatch)

    async def scenario() -> None:
        task = asyncio.create_task(nfd_task(daemon))
        assert await wait_while_running(task, lambda: "cannot write" in caplog.text), caplog.text
        failed_passes = daemon.reads + 5
        assert await wait_while_running(task, lambda: daemon.reads > failed_passes), caplog.text
        path.parent.mkdir()
        # Not path.exists(): the file appears in the writer's thread before the task logs.
        assert await wait_while_running(task, lambda: "writable again" in caplog.text)
        task.cancel()

    asyncio.run(scenario())
    assert caplog.text.count("cannot write") == 1, caplog.text
    assert parse(path.read_text())[0][P + "kae-hpre.pfs"] == "2"


def test_an_unchanged_inventory_wakes_nothing_and_a_new_one_is_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer runs when the inventory changes, not every scan interval: with the interval
    at 10 ms, half a second of an unchanged inventory is no pass; a published one is written."""
    path = tmp_path / "kae"
    settings = dataclasses.replace(Settings(), nfd_features_file=path, scan_interval=0.01)
    daemon = FakeDaemon(settings, fixture_inventory("kunpeng920-2p"))
    daemon.counting(monkeypatch)

    async def scenario() -> None:
        task = asyncio.create_task(nfd_task(daemon))
        assert await wait_while_running(task, lambda: daemon.reads == 1 and path.exists())
        await asyncio.sleep(0.5)  # a window for what must not happen: a pass without a change
        assert daemon.reads == 1
        daemon.inventories.publish(fixture_inventory("kunpeng920-2p-vfs"))
        vfs = P + "kae-zip.vfs"
        assert await wait_while_running(
            task, lambda: path.exists() and parse(path.read_text())[0].get(vfs) == "4"
        )
        assert daemon.reads == 2
        task.cancel()

    asyncio.run(scenario())


def test_the_expiry_is_renewed_when_half_its_life_is_left(tmp_path: Path) -> None:
    """The writer's one timer: due a second after half the TTL is left, by the file's expiry."""
    clock = Clock()
    feature_file = FeatureFile(tmp_path / "kae", clock=clock)
    writer = FeatureWriter(feature_file)
    assert writer.renewal_due() == 86400.0  # nothing written yet: no expiry to renew
    feature_file.update({P + "kae.present": "true"})
    assert writer.renewal_due() == FEATURE_TTL.total_seconds() / 2 + 1
    clock.now += FEATURE_TTL / 2 + timedelta(seconds=1)
    assert feature_file.update({P + "kae.present": "true"}), "renewal due: rewritten"


def test_disabled_writer_ends_without_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """nfd_features_file None: the task returns at once, having read no inventory (a returning
    optional task has just finished its work; the supervisor keeps the others running)."""
    daemon = FakeDaemon(Settings(nfd_features_file=None), fixture_inventory("kunpeng920-2p"))
    daemon.counting(monkeypatch)

    async def scenario() -> None:
        await asyncio.wait_for(nfd_task(daemon), 5.0)

    asyncio.run(scenario())
    assert daemon.reads == 0


def test_the_daemon_keeps_the_file_in_line_with_hotplug() -> None:
    """In the real daemon: the file appears after the first scan and follows a VF removal."""
    with short_tmpdir() as workdir:
        TREES["kunpeng920-2p-vfs"].build(workdir / "node")
        features = workdir / "features.d" / "kae"
        features.parent.mkdir()
        settings = settings_for(workdir, nfd_features_file=features, scan_interval=0.1)
        with KubeletEmulator(settings.effective_device_plugin_dir):
            runner = DaemonThread(
                build_daemon(
                    settings, extra_tasks=[lambda d: nfd_task(d.scan)], with_optional=False
                )
            )
            runner.start()
            try:
                vfs = P + "kae-zip.vfs"
                assert wait_until(lambda: features.exists() and parse(features.read_text())[0])
                assert parse(features.read_text())[0][vfs] == "4"
                remove_device(workdir / "node", "hisi_zip-16")
                assert wait_until(lambda: parse(features.read_text())[0][vfs] == "3")
                assert not [p for p in os.listdir(features.parent) if p.startswith(".")]
            finally:
                assert runner.stop() == 0
