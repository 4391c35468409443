"""The container view of /sys/class/uacce, assembled by a real OCI runtime (runc) from Allocate.

The emulated container filesystem in container_fs.py resolves symlinks the way the kernel would;
here the kernel does it: runc bind-mounts the fixture sysfs at /sys and then the plugin's mounts
and devices, and a shell inside reads what UADK would read.
"""

from __future__ import annotations

import pytest

from tests.support import oci_bundle
from tests.support.harness import running_node

HPRE, SEC = (f"openfuyao.com/kae.{e}" for e in ("hpre", "sec"))
PICKS = {HPRE: ("0000:79:00.0", "hisi_hpre-2"), SEC: ("0000:b6:00.0", "hisi_sec2-1")}
UNREADABLE = "!"

# One line per fact, "<what> <entry> <value...>", with "!" when the read fails.
LIST_AND_READ = r"""
ls -1 /sys/class/uacce | while read -r name; do
    entry=/sys/class/uacce/$name
    echo "entry $name"
    if v=$(cat "$entry/algorithms" 2>/dev/null); then echo "algorithms $name" $v
    else echo "algorithms $name !"; fi
    if v=$(cat "$entry/device/numa_node" 2>/dev/null); then echo "numa_node $name" $v
    else echo "numa_node $name !"; fi
    if [ -e "/dev/$name" ]; then echo "dev $name /dev/$name"; else echo "dev $name !"; fi
done
"""


def parse(stdout: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The listed entries in order, and per fact kind the value read for each entry."""
    entries: list[str] = []
    facts: dict[str, dict[str, str]] = {"algorithms": {}, "numa_node": {}, "dev": {}}
    for line in stdout.splitlines():
        kind, name, *value = line.split()
        if kind == "entry":
            entries.append(name)
        else:
            facts[kind][name] = " ".join(value)
    return entries, facts


@pytest.fixture(scope="module")
def runc_usable() -> None:
    reason = oci_bundle.runc_unusable()
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.usefixtures("runc_usable")
def test_runc_container_reads_only_its_allocated_devices() -> None:
    """kae.hpre: 1 + kae.sec: 1 in a real runc container: /sys/class/uacce lists every device of
    the node, but only the two allocated ones resolve (algorithms, NUMA node, /dev node); every
    other entry dangles and has no /dev node."""
    with running_node("kunpeng920-2p-vfs") as node:
        assert node.wait_registered()
        answers = [
            node.kubelet.allocate(resource, [device_id]).container_responses[0]
            for resource, (device_id, _) in PICKS.items()
        ]
        host_sys, host_dev = node.root / "sys", node.root / "dev"
        mounts = [
            *oci_bundle.base_mounts(),
            oci_bundle.bind(host_sys, "/sys"),
            *oci_bundle.allocate_mounts(answers, {"/sys": host_sys, "/dev": host_dev}),
        ]
        result = oci_bundle.run(["sh", "-c", LIST_AND_READ], mounts)
        assert result.returncode == 0, result.stderr

        entries, facts = parse(result.stdout)
        algorithms, numa, dev = facts["algorithms"], facts["numa_node"], facts["dev"]
        node_wide = sorted(p.name for p in (host_sys / "class" / "uacce").iterdir())
        assert sorted(entries) == node_wide
        allocated = {name for _, name in PICKS.values()}
        assert allocated < set(entries)
        for name in entries:
            if name in allocated:
                device = host_sys / "class" / "uacce" / name
                expected = (device / "algorithms").read_text().split()
                assert algorithms[name].split() == expected, name
                assert numa[name] == (device / "device" / "numa_node").read_text().strip(), name
                assert dev[name] == f"/dev/{name}"
            else:
                assert (algorithms[name], numa[name], dev[name]) == (UNREADABLE,) * 3, name
        assert "rsa" in algorithms["hisi_hpre-2"].split()
