"""`doctor`'s rows on the node's KAE facts (issue 37), through the real command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kae_deviceplugin.cli.main import main
from kae_deviceplugin.testing.sysfs_builder import build_tree, remove_device
from kae_deviceplugin.testing.sysfs_trees import one_socket
from tests.support.fact_trees import FACT_TREES
from tests.support.node_files import KIB_PER_MIB, NodeSpec, set_meminfo

FIXTURES = Path(__file__).resolve().parents[2] / "sysfs_fixtures"


def rows_of(root: Path) -> dict[str, list[dict[str, Any]]]:
    """doctor's JSON rows, by check, on the tree at ``root`` (no kubelet, daemon or NFD)."""
    args = ["doctor", "-o", "json", "--sysfs-root", str(root / "sys")]
    args += ["--dev-root", str(root / "dev"), "--nfd-features-file", "", "--metrics-address", ""]
    result = CliRunner().invoke(main, [*args, "--kubelet-root", "/none"])
    rows: dict[str, list[dict[str, Any]]] = {}
    for row in json.loads(result.stdout)["checks"]:
        rows.setdefault(row["check"], []).append(row)
    return rows


def built(tmp_path: Path, name: str) -> dict[str, list[dict[str, Any]]]:
    FACT_TREES[name](tmp_path)
    return rows_of(tmp_path)


def test_no_sva_and_low_cma_warns_to_raise_cma(tmp_path: Path) -> None:
    """Devices without SVA and 8 MiB of CMA free: the cma row warns and names cma=; with
    400 MiB free it is fine."""
    rows = built(tmp_path, "no-sva-low-cma")
    (sva,) = rows["sva"]
    assert sva["status"] == "ok" and "3 of 3 devices run without SVA" in sva["detail"]
    (cma,) = rows["cma"]
    assert cma["status"] == "warn" and "CmaFree 8 MiB of CmaTotal 64 MiB" in cma["detail"]
    assert "raise cma= on the kernel command line" in cma["fixes"][0]
    set_meminfo(tmp_path, NodeSpec(cma_total_kib=512 * KIB_PER_MIB, cma_free_kib=400 * KIB_PER_MIB))
    (cma,) = rows_of(tmp_path)["cma"]
    assert cma["status"] == "ok" and cma["detail"] == "CmaFree 400 MiB of CmaTotal 512 MiB"


def test_a_kernel_without_cma_under_devices_without_sva_warns(tmp_path: Path) -> None:
    """No Cma lines in meminfo while devices run without SVA: the kernel has no CMA area."""
    FACT_TREES["no-sva-low-cma"](tmp_path)
    set_meminfo(tmp_path, NodeSpec(cma_total_kib=None))
    (cma,) = rows_of(tmp_path)["cma"]
    assert cma["status"] == "warn" and "shows no CMA area" in cma["detail"]


def test_devices_with_sva_need_no_cma_row() -> None:
    """The two-socket KAE 2.0 tree (flags 129): all SVA, no cma row even without /proc."""
    rows = rows_of(FIXTURES / "kunpeng920-2p")
    assert (
        rows["sva"][0]["status"] == "ok"
        and "6 of 6 devices run with SVA" in rows["sva"][0]["detail"]
    )
    assert "cma" not in rows


def test_each_driver_row_names_provenance_version_mode_and_queues() -> None:
    """KAE 2.0's out-of-tree modules and mainline 6.6's in-tree ones, each described as such."""
    (kae,) = rows_of(FIXTURES / "kunpeng920-2p")["driver hisi_sec2"]
    assert kae["status"] == "ok"
    assert kae["detail"] == (
        "out-of-tree module (KAE's driver packages), version 2.0.2, uacce_mode 1 (uacce with "
        "SVA), pf_q_num 256"
    )
    (mainline,) = rows_of(FIXTURES / "mainline-6.6")["driver hisi_sec2"]
    assert mainline["status"] == "ok"
    assert mainline["detail"].startswith("in-tree module (the kernel's own), uacce_mode 1")


def test_the_kernels_own_driver_beside_kaes_warns_with_the_initramfs_fix(tmp_path: Path) -> None:
    """hisi_zip in tree while hisi_hpre and hisi_sec2 are KAE's: likely loaded first."""
    rows = built(tmp_path, "mixed-provenance")
    (zip_row,) = rows["driver hisi_zip"]
    assert zip_row["status"] == "warn"
    assert "likely loaded first" in zip_row["detail"] and "dracut -f" in zip_row["fixes"][0]
    assert rows["driver hisi_sec2"][0]["status"] == "ok"


def test_built_in_drivers_are_said_built_in(tmp_path: Path) -> None:
    """A kernel with the drivers built in: no warning, and the engine rows say built in."""
    rows = built(tmp_path, "built-in")
    assert rows["driver hisi_hpre"][0]["detail"].startswith("built into the kernel")
    assert "driver hisi_hpre built in" in rows["engine hpre"][0]["detail"]
    assert all(rows[f"driver {d}"][0]["status"] == "ok" for d in ("hisi_sec2", "hisi_zip"))


def test_sec_absent_on_a_single_socket_kunpeng_names_tee(tmp_path: Path) -> None:
    """The SEC row warns that TEE likely holds it and names the BIOS setting."""
    (row,) = built(tmp_path, "single-socket-without-sec")["engine sec"]
    assert row["status"] == "warn"
    assert "likely held by TEE" in row["detail"] and "BIOS" in row["fixes"][0]


def test_a_kunpeng_without_engines_names_the_licence_as_likely(tmp_path: Path) -> None:
    """No engine on the bus of a Kunpeng: the hardware row says the licence is likely missing."""
    (row,) = built(tmp_path, "no-licence")["hardware"]
    assert row["status"] == "fail" and "likely no KAE licence" in row["detail"]
    assert row["fixes"][0].startswith("load the KAE licence")


def test_an_engine_on_the_bus_without_a_driver_names_the_modprobe(tmp_path: Path) -> None:
    """ZIP PFs on the bus, hisi_zip not loaded: the engine row fails with the modprobe."""
    (row,) = built(tmp_path, "engine-without-driver")["engine zip"]
    assert row["status"] == "fail" and "driver not loaded" in row["detail"]
    assert row["fixes"] == [
        "on the node: modprobe hisi_zip (openEuler's KAE driver packages provide it)"
    ]


def test_the_cpu_comes_from_cpuinfo_where_sysfs_shows_no_midr(tmp_path: Path) -> None:
    """An arm64 kernel without MIDR_EL1 in sysfs: the hardware row names the CPU from
    /proc/cpuinfo's implementer and part."""
    FACT_TREES["single-socket-without-sec"](tmp_path)
    for midr in (tmp_path / "sys" / "devices" / "system" / "cpu").glob("cpu*/regs"):
        for path in sorted(midr.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        midr.rmdir()
    (row,) = rows_of(tmp_path)["hardware"]
    assert "CPU: arm64, HiSilicon Kunpeng 920" in row["detail"]
    assert rows_of(tmp_path)["engine sec"][0]["status"] == "warn"  # still known as a Kunpeng


def test_the_kernels_own_driver_without_sva_names_the_smmu_or_kaes_driver(tmp_path: Path) -> None:
    """Mainline 6.6's in-tree hisi_zip bound to its PF but with no uacce device (it registers
    one only with SVA) and no IOMMU group: the fix names the SMMU and KAE's uacce_mode=2."""
    build_tree(tmp_path, one_socket(layout="mainline-isolate"))
    remove_device(tmp_path, "hisi_zip-2")
    (row,) = rows_of(tmp_path)["engine zip"]
    assert row["status"] == "fail" and "no uacce device" in row["detail"]
    assert "registers uacce devices only with SVA" in row["fixes"][0]
    assert "no IOMMU group" in row["fixes"][0] and "uacce_mode=2" in row["fixes"][0]
