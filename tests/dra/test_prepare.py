"""The prepare/unprepare core on a real fixture tree, CDI dir and checkpoint file."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
from pathlib import Path

import jsonschema
import pytest

from kae_deviceplugin.core.model import Inventory
from kae_deviceplugin.dra.checkpoint import Checkpoint, CheckpointFile
from kae_deviceplugin.dra.claim_specs import ClaimAnswer
from kae_deviceplugin.dra.claims import ClaimRef
from kae_deviceplugin.dra.prepare import ClaimPreparer
from kae_deviceplugin.errors import CheckpointUnreadable
from kae_deviceplugin.testing.sysfs_builder import set_attribute
from tests.container.test_cdi import CDI_SCHEMA
from tests.dra.node import HPRE_0, KIND, POOL, SEC_0, Node, add_claim, build_node
from tests.dra.policy import serving_policy
from tests.support.dra_claims import Result, claim_object


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return build_node(tmp_path)


def _claim(node: Node, name: str, *results: Result) -> ClaimRef:
    return add_claim(node, name, *results)


def _prepare(preparer: ClaimPreparer, *claims: ClaimRef) -> dict[str, ClaimAnswer]:
    return asyncio.run(preparer.prepare(list(claims)))


def _unprepare(preparer: ClaimPreparer, *claims: ClaimRef) -> dict[str, str]:
    return asyncio.run(preparer.unprepare(list(claims)))


def _entries(spec: dict[str, object]) -> dict[str, dict[str, object]]:
    devices = spec["devices"]
    assert isinstance(devices, list)
    return {d["name"]: d["containerEdits"] for d in devices}


def test_one_device_gets_its_node_view_and_variables(node: Node) -> None:
    """The answer names two CDI devices (the device's own edits and its request's); the spec
    on disk holds the /dev node, the PCI mount, the sysfs view and the KAE/WD variables, and
    the claim is in the checkpoint."""
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    answer = _prepare(node.preparer(), claim)[claim.uid]
    assert answer.error == ""
    (device,) = answer.devices
    assert device.result.device == HPRE_0 and device.result.request == "hpre"
    assert device.cdi_ids == (f"{KIND}={claim.uid}-{HPRE_0}", f"{KIND}={claim.uid}_hpre")
    spec = node.spec(claim.uid)
    jsonschema.validate(spec, CDI_SCHEMA)
    entries = _entries(spec)
    own = entries[f"{claim.uid}-{HPRE_0}"]
    assert own["deviceNodes"] == [
        {
            "path": "/dev/hisi_hpre-2",
            "hostPath": f"{node.root}/dev/hisi_hpre-2",
            "permissions": "rw",
        }
    ]
    pci = f"{node.root}/sys/devices/pci0000:78/0000:78:00.0/0000:79:00.0"
    assert own["mounts"] == [
        {"hostPath": pci, "containerPath": "/run/kae/pci/0000:79:00.0", "options": ["ro", "rbind"]}
    ]
    request = entries[f"{claim.uid}_hpre"]
    assert request["env"] == [
        "KAE_HPRE_DEVICES=hisi_hpre-2",
        "KAE_HPRE_PCI_ADDRESSES=0000:79:00.0",
        "WD_DH_CTX_NUM=sync:1@0,async:1@0",
        "WD_RSA_CTX_NUM=sync:1@0,async:1@0",
    ]
    assert request["mounts"] == [
        {
            "hostPath": f"{node.root}/state/uacce-class",
            "containerPath": "/sys/class/uacce",
            "options": ["ro", "rbind"],
        }
    ]
    recorded = node.checkpoint.load().claims[claim.uid]
    assert [d.device for d in recorded.devices] == [HPRE_0]
    assert recorded.cdi_spec == node.spec_path(claim.uid).name


def test_two_requests_of_two_engines_get_one_entry_each(node: Node) -> None:
    """HPRE and SEC in one claim: each request's entry carries only its engine's variables,
    and the request's ID goes with its first device only."""
    claim = _claim(node, "pair", Result("hpre", HPRE_0, POOL), Result("sec", SEC_0, POOL))
    answer = _prepare(node.preparer(), claim)[claim.uid]
    assert [d.cdi_ids[-1] for d in answer.devices] == [
        f"{KIND}={claim.uid}_hpre",
        f"{KIND}={claim.uid}_sec",
    ]
    entries = _entries(node.spec(claim.uid))
    sec_env = entries[f"{claim.uid}_sec"]["env"]
    assert isinstance(sec_env, list)
    assert "KAE_SEC_DEVICES=hisi_sec2-0" in sec_env
    assert not any(v.startswith("KAE_HPRE") for v in sec_env)


def test_bad_claims_fail_alone(node: Node) -> None:
    """Every claim asked gets an entry: the good one is prepared beside each refusal."""
    good = _claim(node, "good", Result("hpre", HPRE_0, POOL))
    unallocated = ClaimRef("team-a", "pending", "u-pending")
    node.store.add(claim_object("team-a", "pending", None, uid="u-pending"))
    recreated = ClaimRef("team-a", "good", "u-old")  # same name, another UID
    missing = ClaimRef("team-a", "gone", "u-gone")
    unknown_device = _claim(node, "odd", Result("hpre", "hpre-0000-99-00-0", POOL))
    elsewhere = _claim(node, "other", Result("hpre", HPRE_0, "worker-2"))
    unsafe = ClaimRef("team-a", "good", "../../etc")
    asked = [good, unallocated, recreated, missing, unknown_device, elsewhere, unsafe]
    answers = _prepare(node.preparer(), *asked)
    assert set(answers) == {c.uid for c in asked}
    assert answers[good.uid].error == "" and answers[good.uid].devices
    expected = {
        unallocated.uid: "is not allocated",
        recreated.uid: "deleted and re-created",
        missing.uid: "not found",
        unknown_device.uid: "is not on this node",
        elsewhere.uid: "pool worker-2",
        unsafe.uid: "is not a UID",
    }
    for uid, words in expected.items():
        assert words in answers[uid].error, (uid, answers[uid])
    assert set(node.checkpoint.load().claims) == {good.uid}
    assert sorted(p.name for p in node.cdi_dir.iterdir()) == [node.spec_path(good.uid).name]


def test_an_unhealthy_device_is_refused_with_its_reason(node: Node) -> None:
    """An isolated engine is not prepared; the error names the reason."""
    set_attribute(node.root, "hisi_hpre-2", "isolate", "1")
    node.rescan()
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    assert "Unhealthy (isolated)" in _prepare(node.preparer(), claim)[claim.uid].error


def test_other_drivers_results_are_not_ours(node: Node) -> None:
    """A claim whose only result is another driver's is prepared as nothing (no spec)."""
    claim = _claim(node, "gpu", Result("gpu", "gpu-0", POOL, driver="gpu.example.com"))
    assert _prepare(node.preparer(), claim)[claim.uid] == ClaimAnswer()
    assert not node.spec_path(claim.uid).exists()


def test_a_withheld_view_refuses(node: Node) -> None:
    """When the container view cannot be written, prepare says why instead of answering."""
    node.policy = serving_policy(node.root, view_problem="cannot write /x: read-only")
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    assert "read-only" in _prepare(node.preparer(), claim)[claim.uid].error


def test_an_api_server_that_does_not_answer_fails_the_claim_in_time(node: Node) -> None:
    """A GET that never returns is cut at the claim deadline, as an error of that claim."""
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    node.store.hang = True
    answer = _prepare(node.preparer(claim_timeout=0.2), claim)[claim.uid]
    assert "cannot read claim team-a/c1" in answer.error


def test_prepare_again_rewrites_a_lost_spec_from_the_checkpoint(node: Node) -> None:
    """After a reboot the spec may be gone: a second prepare writes it again, answers the
    same IDs, and does not ask the API server again."""
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    first = _prepare(node.preparer(), claim)[claim.uid]
    node.spec_path(claim.uid).unlink()
    node.store.delete("team-a", "c1")  # even with the API unreachable for it
    again = _prepare(node.preparer(), claim)[claim.uid]
    assert again == first
    assert node.spec_path(claim.uid).is_file()
    assert node.store.reads == [("team-a", "c1")]


def test_unprepare_needs_only_the_checkpoint(node: Node) -> None:
    """After a plugin restart and the claim's deletion, unprepare removes the spec and the
    record; an unknown claim is success."""
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    _prepare(node.preparer(), claim)
    node.store.delete("team-a", "c1")
    restarted = node.preparer()
    errors = _unprepare(restarted, claim, ClaimRef("team-a", "never", "u-never"))
    assert errors == {claim.uid: "", "u-never": ""}
    assert not node.spec_path(claim.uid).exists()
    assert node.checkpoint.load().claims == {}


def test_a_claim_that_cannot_be_recorded_is_not_prepared(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the checkpoint cannot be written (the disk full), the claim fails and the spec its
    prepare wrote is taken back."""
    preparer = node.preparer()
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))

    def full(_self: CheckpointFile, _checkpoint: Checkpoint) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(CheckpointFile, "save", full)
    answer = _prepare(preparer, claim)[claim.uid]
    assert "cannot record the claim" in answer.error and "No space" in answer.error
    assert not node.spec_path(claim.uid).exists()


def test_a_plugin_directory_in_the_way_fails_the_call_not_the_daemon(node: Node) -> None:
    """The plugin directory replaced by a file: the checkpoint cannot be read, so the call
    raises CheckpointUnreadable naming the directory (the servicer answers each claim with
    it), and nothing is written to the CDI directory."""
    preparer = node.preparer()
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    (node.root / "plugin").rmdir()
    (node.root / "plugin").write_text("not a directory")
    with pytest.raises(CheckpointUnreadable, match=f"{node.root / 'plugin'}: Not a directory"):
        _prepare(preparer, claim)
    assert not node.spec_path(claim.uid).exists()


def test_shared_devices_keep_their_share_id(node: Node) -> None:
    """A share of a device (consumable capacity) is answered and recorded with its ID."""
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL, share_id="share-7"))
    (device,) = _prepare(node.preparer(), claim)[claim.uid].devices
    assert device.result.share_id == "share-7"
    assert node.checkpoint.load().claims[claim.uid].devices[0].share_id == "share-7"


def test_reconcile_removes_orphans_and_restores_missing_specs(node: Node) -> None:
    """At start: a spec no claim holds goes, a checkpointed claim's missing spec comes back,
    and files that are not claim specs stay."""
    kept = _claim(node, "kept", Result("hpre", HPRE_0, POOL))
    _prepare(node.preparer(), kept)
    node.spec_path(kept.uid).unlink()
    orphan = node.spec_path("0d1e5e57-aaaa-4bbb-8ccc-000000000000")
    orphan.write_text("{}")
    foreign = [node.cdi_dir / "openfuyao.com-kae.json", node.cdi_dir / "vendor.com-gpu_x.json"]
    for path in foreign:
        path.write_text("{}")
    report = asyncio.run(node.preparer().reconcile())
    assert report.removed == ("0d1e5e57-aaaa-4bbb-8ccc-000000000000",)
    assert report.rewritten == (kept.uid,) and report.problems == ()
    assert node.spec_path(kept.uid).is_file() and not orphan.exists()
    assert all(path.read_text() == "{}" for path in foreign)
    again = asyncio.run(node.preparer().reconcile())
    assert again == dataclasses.replace(report, removed=(), rewritten=())


def test_reconcile_reports_a_device_that_left(node: Node) -> None:
    """A checkpointed claim whose device vanished cannot get its spec back: it is reported,
    and its record stays for Unprepare."""
    claim = _claim(node, "c1", Result("hpre", HPRE_0, POOL))
    _prepare(node.preparer(), claim)
    node.spec_path(claim.uid).unlink()
    node.inventory = Inventory(tuple(d for d in node.inventory if d.name != "hisi_hpre-2"))
    report = asyncio.run(node.preparer().reconcile())
    assert len(report.problems) == 1 and HPRE_0 in report.problems[0]
    assert claim.uid in node.checkpoint.load().claims


def test_unprepare_removes_the_file_the_checkpoint_names(node: Node) -> None:
    """The recorded spec file goes (whatever name it has), but a record naming a file that is
    no claim spec (a damaged checkpoint) never deletes it."""
    legacy = _claim(node, "legacy", Result("hpre", HPRE_0, POOL))
    odd = _claim(node, "odd", Result("sec", SEC_0, POOL))
    _prepare(node.preparer(), legacy, odd)
    state = node.checkpoint.load()
    old_name = "openfuyao.com-kae_0d1e5e57-0000-4000-8000-00000000cafe.json"
    node.spec_path(legacy.uid).rename(node.cdi_dir / old_name)
    precious = node.cdi_dir / "vendor.com-gpu.json"
    precious.write_text("{}")
    state = state.with_claim(dataclasses.replace(state.claims[legacy.uid], cdi_spec=old_name))
    state = state.with_claim(dataclasses.replace(state.claims[odd.uid], cdi_spec=precious.name))
    node.checkpoint.save(state)
    assert _unprepare(node.preparer(), legacy, odd) == {legacy.uid: "", odd.uid: ""}
    assert sorted(p.name for p in node.cdi_dir.iterdir()) == [precious.name]
