"""`kae-deviceplugin list --mode dra`: each device's DRA name and the claim holding it, read from
a real checkpoint under the kubelet root; totals stay; the checkpoint is only read."""

from __future__ import annotations

import json
import os
import threading

from click.testing import CliRunner, Result

from kae_deviceplugin.cli.main import main
from kae_deviceplugin.dra.checkpoint import CheckpointFile
from tests.cli.dra_node import HPRE_0, SEC_0, UID_A, UID_B, DraNode, dra_node


def listed(node: DraNode, *extra: str) -> Result:
    args = ["list", "--sysfs-root", str(node.root / "sys"), "--dev-root", str(node.root / "dev")]
    return CliRunner().invoke(main, [*args, "--kubelet-root", str(node.kubelet), *extra])


def test_the_table_names_each_device_and_its_claim() -> None:
    """Every device gets its pool name; the held one its claim (namespace/name and uid); the
    device-plugin totals line stays, followed by how many are held."""
    with dra_node() as node:
        node.prepare(UID_A, "rsa", HPRE_0)
        result = listed(node, "--mode", "dra")
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0].split()[-4:] == ["REASONS", "DRA", "DEVICE", "CLAIM"]
        (held,) = [line for line in lines if HPRE_0 in line]
        assert held.startswith("hpre    hisi_hpre-2") and f"team-a/rsa ({UID_A})" in held
        (free,) = [line for line in lines if SEC_0 in line]
        assert free.split()[-2:] == [SEC_0, "-"]
        assert lines[-2:] == ["6 devices: 6 healthy, 0 unhealthy", "1 device held, by 1 claim"]


def test_json_adds_the_dra_device_and_its_claims() -> None:
    """The JSON records keep every key and add dra_device and claims (empty when free)."""
    with dra_node() as node:
        node.prepare(UID_A, "rsa", HPRE_0)
        plain = json.loads(listed(node, "-o", "json").stdout)
        records = json.loads(listed(node, "-o", "json", "--mode", "dra").stdout)
        assert [set(r) - set(p) for r, p in zip(records, plain, strict=True)] == [
            {"dra_device", "claims"}
        ] * len(plain)
        by_name = {r["dra_device"]: r for r in records}
        assert by_name[HPRE_0]["name"] == "hisi_hpre-2"
        assert by_name[HPRE_0]["claims"] == [
            {"namespace": "team-a", "name": "rsa", "uid": UID_A, "request": "kae"}
        ]
        assert by_name[SEC_0]["claims"] == []


def test_a_claim_on_a_device_the_scan_lacks_is_named() -> None:
    """A checkpointed claim holding a device this node does not show now gets its own line."""
    with dra_node() as node:
        node.prepare(UID_A, "rsa", "hpre-0000-99-00-0")
        lines = listed(node, "--mode", "dra").stdout.splitlines()
        assert (
            lines[-1]
            == f"team-a/rsa ({UID_A}) holds hpre-0000-99-00-0, which this node does not show now"
        )
        assert lines[-2] == "no device held by a claim"  # the claim's own line says where


def test_a_damaged_checkpoint_is_one_line_naming_it() -> None:
    """A checkpoint that is not JSON: exit 1, one line with its path, no traceback."""
    with dra_node() as node:
        path = CheckpointFile(node.plugin_dir).path
        path.write_text("{not json")
        result = listed(node, "--mode", "dra")
        assert result.exit_code == 1 and result.exception is not None
        assert f"cannot read the DRA checkpoint: {path}: not JSON" in result.stderr
        assert "Traceback" not in result.output


def test_list_mode_dra_creates_nothing_and_refuses_allocations() -> None:
    """No plugin directory (the driver never ran with this kubelet root, or the root is
    mistyped): exit 1 and one line naming the directory, not every device listed as free; no
    directory made. --allocations (the device plugin's pods) with --mode dra is a bad
    invocation."""
    with dra_node() as node:
        node.plugin_dir.rmdir()
        result = listed(node, "--mode", "DRA")  # choices in any case, as serve's
        assert result.exit_code == 1 and result.stdout == "", result.output
        (line,) = result.stderr.splitlines()
        assert f"no DRA driver state in {node.plugin_dir}" in line and "--kubelet-root" in line
        assert not node.plugin_dir.exists()
        refused = listed(node, "--mode", "dra", "--allocations")
        assert refused.exit_code == 2 and "--allocations" in refused.stderr


def test_a_kubelet_root_that_does_not_exist_is_a_bad_invocation() -> None:
    """A mistyped --kubelet-root: exit 2 and one line naming it, as a bad root of list's."""
    with dra_node() as node:
        missing = node.root / "no-kubelet"
        args = [
            "list",
            "--sysfs-root",
            str(node.root / "sys"),
            "--dev-root",
            str(node.root / "dev"),
        ]
        result = CliRunner().invoke(main, [*args, "--kubelet-root", str(missing), "--mode", "dra"])
        assert result.exit_code == 2 and result.stdout == ""
        (line,) = result.stderr.splitlines()
        assert f"--kubelet-root (KAE_DP_KUBELET_ROOT) {missing} does not exist" in line


def test_a_device_two_claims_share_reads_as_shared() -> None:
    """Two claims on one device: "1 device held, by 2 claims", saying it is shared, and both
    claims in its row."""
    with dra_node() as node:
        node.prepare(UID_A, "zip-a", HPRE_0)
        node.prepare(UID_B, "zip-b", HPRE_0)
        lines = listed(node, "--mode", "dra").stdout.splitlines()
        assert lines[-1] == "1 device held, by 2 claims (1 device shared by several claims)"
        (row,) = [line for line in lines if HPRE_0 in line]
        assert UID_A in row and UID_B in row


def _listed_in_time(node: DraNode) -> Result | None:
    """list --mode dra run in a thread that must end within 10 s; None if it did not."""
    results: list[Result] = []
    worker = threading.Thread(
        target=lambda: results.append(listed(node, "--mode", "dra")), daemon=True
    )
    worker.start()
    worker.join(10.0)
    return results[0] if results else None


def test_a_fifo_or_symlink_checkpoint_is_one_line_and_never_waited_on() -> None:
    """A FIFO or a symlink where the checkpoint goes: list --mode dra answers at once (a FIFO
    opened to read would wait for a writer for ever) with exit 1 and one line naming the file
    and what is in its place, no traceback; the symlink's target is not read."""
    for plant, words in (("fifo", "not a regular file (a FIFO)"), ("link", "a symlink")):
        with dra_node() as node:
            path = CheckpointFile(node.plugin_dir).path
            if plant == "fifo":
                os.mkfifo(path)
            else:
                path.symlink_to(node.root / "elsewhere.json")
            result = _listed_in_time(node)
            assert result is not None, f"list waited on the {plant}"
            assert result.exit_code == 1 and "Traceback" not in result.output
            assert f"cannot read the DRA checkpoint: {path}: {words}" in result.stderr
