"""Build and mutate fake ``sys/`` + ``dev/`` trees laid out as Linux lays out UACCE devices.

Tests inject faults with it, the demo and the benchmarks build trees in temporary directories, and
``sysfs_fixtures/generate.py`` writes the checked-in trees. The layout rules are documented in
``sysfs_fixtures/README.md``; the named trees live in :mod:`kae_deviceplugin.testing.sysfs_trees`.

Every link is relative, as in the kernel, so a tree keeps working wherever it is copied.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from kae_deviceplugin.testing.sysfs_layout import (
    ATTRS_SUBDIR,
    LAYOUTS,
    UACCE_MAJOR,
    DeviceSpec,
    module_attributes,
    parse_bdf,
    pci_attributes,
    uacce_attributes,
    vf_address,
)

# Re-exported so that callers need one import for specs and trees alike.
__all__ = [
    "LAYOUTS",
    "DeviceSpec",
    "add_class_link",
    "add_dev_node",
    "add_device",
    "add_stray_class_file",
    "build_tree",
    "find_function_dir",
    "find_uacce_dir",
    "function_dir",
    "remove_dev_node",
    "remove_device",
    "set_attribute",
    "set_driver_bound",
    "set_pci_attribute",
    "vf_address",
]


def function_dir(root: Path, root_port: str, pci_address: str) -> Path:
    """``sys/devices/pci<dom>:<bus>/<root port>/<bdf>`` under ``root``."""
    return root / "sys" / "devices" / f"pci{root_port[:7]}" / root_port / pci_address


def find_function_dir(root: Path, pci_address: str) -> Path:
    """The existing directory of a PCI function, wherever its root port is."""
    found = sorted((root / "sys" / "devices").glob(f"pci*/*/{pci_address}"))
    if not found:
        raise FileNotFoundError(f"no PCI function {pci_address} under {root}")
    return found[0]


def find_uacce_dir(root: Path, name: str) -> Path:
    """The existing class-device directory of a uacce device (found without its class link)."""
    found = sorted((root / "sys" / "devices").glob(f"pci*/*/*/uacce/{name}"))
    if not found:
        raise FileNotFoundError(f"no uacce device {name} under {root}")
    return found[0]


def build_tree(root: Path, devices: Sequence[DeviceSpec]) -> None:
    """Create ``root/sys`` and ``root/dev`` holding ``devices`` (PFs are added before VFs)."""
    (root / "sys").mkdir(parents=True, exist_ok=True)
    (root / "dev").mkdir(parents=True, exist_ok=True)
    for spec in sorted(devices, key=lambda s: s.parent_pf is not None):
        add_device(root, spec)


def add_device(root: Path, spec: DeviceSpec) -> None:
    """Add a uacce device (and its PCI function if new) the way the kernel and udev do.

    The class link comes last, so a concurrent scan sees the device whole or not at all.
    """
    fn = _ensure_function(root, spec)
    udir = fn / "uacce" / spec.name
    udir.mkdir(parents=True, exist_ok=True)
    class_dir = root / "sys" / "class" / "uacce"
    class_dir.mkdir(parents=True, exist_ok=True)
    if spec.device_link:
        _link(udir / "device", fn)
    _link(udir / "subsystem", class_dir)
    _write(udir / "dev", f"{UACCE_MAJOR}:{spec.minor}")
    _write(udir / "uevent", f"MAJOR={UACCE_MAJOR}\nMINOR={spec.minor}\nDEVNAME={spec.name}")
    attr_dir = udir / ATTRS_SUBDIR.get(spec.layout, "")
    for attr, value in sorted(uacce_attributes(spec).items()):
        _write(attr_dir / attr, value)
    if spec.dev_node:
        add_dev_node(root, spec.name)
    _link(class_dir / spec.name, udir)


def remove_device(root: Path, name: str, *, remove_function: bool = False) -> None:
    """Remove a device's class link, /dev node and class-device directory (class link first).

    With ``remove_function`` the PCI function goes too (a PF only once its VFs are gone).
    """
    class_link = root / "sys" / "class" / "uacce" / name
    udir = find_uacce_dir(root, name)
    fn = udir.parent.parent
    if remove_function and any(fn.glob("virtfn*")):
        raise ValueError(f"{fn.name} still has VFs: remove them first")
    class_link.unlink(missing_ok=True)
    remove_dev_node(root, name)
    shutil.rmtree(udir)
    if remove_function:
        _remove_function(root, fn)


def set_attribute(root: Path, name: str, attr: str, value: str | None) -> None:
    """Atomically replace (or, with None, remove) a uacce attribute, in ``attrs/`` if present.

    ``isolate`` of a PF is also written to the uacce devices of its VFs: the kernel has one
    isolation flag per PF, which a VF's ``isolate`` reads (``hisi_qm_get_isolate_state``), and
    what a container's UADK reads there should say so. Discovery does not depend on it: both
    scanners give a VF its PF's reading and read a VF's own file only while its PF is absent
    (``discovery/volatile.py``). A VF file a test made unreadable (a directory) is left so.
    """
    udir = find_uacce_dir(root, name)
    _write(_attribute_dir(udir) / attr, value)
    if attr == "isolate":
        for virtfn in sorted(udir.parent.parent.glob("virtfn*")):
            for vf_udir in sorted((virtfn.resolve() / "uacce").glob("*")):
                vf_file = _attribute_dir(vf_udir) / attr
                if not vf_file.is_dir():
                    _write(vf_file, value)


def _attribute_dir(udir: Path) -> Path:
    for subdir in ATTRS_SUBDIR.values():
        if (udir / subdir).is_dir():
            return udir / subdir
    return udir


def set_pci_attribute(root: Path, pci_address: str, attr: str, value: str | None) -> None:
    """Atomically replace (or, with None, remove) an attribute file of a PCI function."""
    _write(find_function_dir(root, pci_address) / attr, value)


def add_dev_node(root: Path, name: str) -> None:
    """Create ``dev/<name>`` as an empty file (git cannot hold character devices)."""
    (root / "dev").mkdir(parents=True, exist_ok=True)
    (root / "dev" / name).touch()


def remove_dev_node(root: Path, name: str) -> None:
    """Remove ``dev/<name>`` if present."""
    (root / "dev" / name).unlink(missing_ok=True)


def set_driver_bound(root: Path, pci_address: str, bound: bool, driver: str | None = None) -> None:
    """Bind or unbind a PCI function: its ``driver`` link and the driver's link back.

    The driver defaults to the one named by the function's uacce devices.
    """
    fn = find_function_dir(root, pci_address)
    link = fn / "driver"
    if link.is_symlink():
        (link.resolve() / pci_address).unlink(missing_ok=True)
        link.unlink()
    if not bound:
        return
    if driver is None:
        names = sorted(p.name for p in (fn / "uacce").glob("*-*"))
        if not names:
            raise ValueError(f"{pci_address} has no uacce device to name its driver: pass driver=")
        driver = names[0].rpartition("-")[0]
    driver_dir = root / "sys" / "bus" / "pci" / "drivers" / driver
    driver_dir.mkdir(parents=True, exist_ok=True)
    _link(link, driver_dir)
    _link(driver_dir / pci_address, fn)


def add_class_link(root: Path, name: str, target: str) -> None:
    """Add ``sys/class/uacce/<name>`` pointing at ``target`` verbatim (e.g. dangling or a loop)."""
    class_dir = root / "sys" / "class" / "uacce"
    class_dir.mkdir(parents=True, exist_ok=True)
    (class_dir / name).symlink_to(target)


def add_stray_class_file(root: Path, name: str, content: str = "") -> None:
    """Add a regular file in ``sys/class/uacce`` where only links belong."""
    class_dir = root / "sys" / "class" / "uacce"
    class_dir.mkdir(parents=True, exist_ok=True)
    (class_dir / name).write_text(content)


def _ensure_function(root: Path, spec: DeviceSpec) -> Path:
    fn = function_dir(root, spec.root_port, spec.pci_address)
    pf_dir = fn.parent / spec.parent_pf if spec.parent_pf else None
    if pf_dir is not None and not pf_dir.is_dir():
        raise ValueError(f"VF {spec.pci_address}: PF {spec.parent_pf} is not under the same port")
    fn.mkdir(parents=True, exist_ok=True)
    for attr, value in sorted(pci_attributes(spec).items()):
        _write(fn / attr, value)
    bus = root / "sys" / "bus" / "pci"
    (bus / "devices").mkdir(parents=True, exist_ok=True)
    _link(fn / "subsystem", bus)
    _link(bus / "devices" / spec.pci_address, fn)
    _ensure_module(root, spec)
    set_driver_bound(root, spec.pci_address, spec.driver_bound, spec.driver)
    if spec.parent_pf is None and "sriov_numvfs" not in spec.pci_attrs:
        _sync_numvfs(fn)  # re-adding a PF must not forget VFs that are already there
    if pf_dir is not None and spec.parent_pf is not None:
        index = _devfn(spec.pci_address) - _devfn(spec.parent_pf) - 1
        _link(fn / "physfn", pf_dir)
        _link(pf_dir / f"virtfn{index}", fn)
        _sync_numvfs(pf_dir)
    return fn


def _ensure_module(root: Path, spec: DeviceSpec) -> None:
    # A loaded module and its registered PCI driver, bound or not: sys/module/<driver> with its
    # version files (the first device of a driver writes them) and the driver's `module` link.
    module_dir = root / "sys" / "module" / spec.driver
    if not module_dir.is_dir():
        module_dir.mkdir(parents=True)
        for attr, value in sorted(module_attributes(spec).items()):
            _write(module_dir / attr, value)
    driver_dir = root / "sys" / "bus" / "pci" / "drivers" / spec.driver
    driver_dir.mkdir(parents=True, exist_ok=True)
    _link(driver_dir / "module", module_dir)


def _remove_function(root: Path, fn: Path) -> None:
    set_driver_bound(root, fn.name, False)
    (root / "sys" / "bus" / "pci" / "devices" / fn.name).unlink(missing_ok=True)
    physfn = fn / "physfn"
    if physfn.is_symlink():
        pf_dir = physfn.resolve()
        for virtfn in pf_dir.glob("virtfn*"):
            if virtfn.resolve() == fn.resolve():
                virtfn.unlink()
        _sync_numvfs(pf_dir)
    shutil.rmtree(fn)


def _sync_numvfs(pf_dir: Path) -> None:
    # sriov_numvfs follows the virtfn links, unless the file was left out.
    if (pf_dir / "sriov_numvfs").exists():
        _write(pf_dir / "sriov_numvfs", str(len(list(pf_dir.glob("virtfn*")))))


def _devfn(address: str) -> int:
    _, _, dev, fn = parse_bdf(address)
    return dev * 8 + fn


def _write(path: Path, value: str | None) -> None:
    # Through a temporary file and a rename, so a concurrent reader never sees a half file.
    if value is None:
        path.unlink(missing_ok=True)
        return
    text = value if value == "" or value.endswith("\n") else value + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _link(link: Path, target: Path) -> None:
    # Relative as the kernel writes them: up to the target's parent, then down to the target, so a
    # link to an ancestor reads ../../../0000:79:00.0 rather than ../.. (bind mounts rely on it).
    # Swapped in by rename when replacing an old link.
    up = os.path.relpath(target.parent, link.parent)
    relative = target.name if up == "." else f"{up}/{target.name}"
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(relative)
    os.replace(tmp, link)
