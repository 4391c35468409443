"""The real device-plugin daemon brings a node to its VF profile and changes it under a live pod
only once the pod has ended: the kubelet emulator over real sockets, the pod-resources emulator,
the config file reloaded, and a sysfs that answers as the kernel does (FUSE)."""

from __future__ import annotations

from pathlib import Path

from kae_deviceplugin.config.reload import ConfigSource
from kae_deviceplugin.daemon.run import build_daemon
from kae_deviceplugin.testing.kubelet_emulator import KubeletEmulator
from kae_deviceplugin.testing.podresources_emulator import PodResourcesEmulator
from kae_deviceplugin.testing.sysfs_trees import two_socket
from tests.support.harness import DaemonThread, settings_for, short_tmpdir
from tests.support.sriov_kernel import NEEDS_FUSE, SriovKernel

pytestmark = NEEDS_FUSE
SEC = "openfuyao.com/kae.sec"
SEC0, SEC1 = "0000:76:00.0", "0000:b6:00.0"
WAIT = 60.0  # a waiting PF is planned again with backoff (at most 30 s apart)
# The settings a test passes as flags: the sandbox's paths, which a reload keeps.
PATH_FIELDS = (
    "sysfs_root", "dev_root", "kubelet_root", "device_plugin_dir", "pod_resources_socket",
    "state_dir", "metrics_address", "nfd_features_file", "registration", "runtime_config",
)  # fmt: skip


def write_config(path: Path, sec_vfs: int) -> None:
    path.write_text(f"version: v1\nscanInterval: 200ms\nengines: {{sec: {{vfs: {sec_vfs}}}}}\n")


def vfs_of(view: dict[str, object], kernel: SriovKernel, pf: str) -> int:
    """How many of ``pf``'s VFs the kubelet is told of (device IDs are PCI addresses)."""
    addresses = {p.resolve().name for p in _virtfns(kernel, pf)}
    return len(addresses & set(view))


def _virtfns(kernel: SriovKernel, pf: str) -> list[Path]:
    root = kernel.backing / "sys" / "bus" / "pci" / "devices" / pf
    return sorted(root.resolve().glob("virtfn*"))


def test_a_profile_is_applied_at_start_and_changed_only_once_the_pod_on_a_vf_ended() -> None:
    """sec: 2 at start gives each SEC PF 2 VFs, served to the kubelet. A pod then holds a VF of
    the first PF and the profile becomes 4: the second PF changes at once, the first keeps its 2
    VFs (the pod's among them, never withdrawn) until the pod ends, then gets 4."""
    with short_tmpdir() as workdir:
        kernel = SriovKernel(workdir / "backing", two_socket())
        with kernel.mounted(workdir / "node"):
            settings = settings_for(workdir)
            config = workdir / "config.yaml"
            write_config(config, 2)
            source = ConfigSource(config, {f: getattr(settings, f) for f in PATH_FIELDS})
            settings = source.initial()
            podres_socket = settings.effective_pod_resources_socket
            podres_socket.parent.mkdir(parents=True)
            kubelet = KubeletEmulator(settings.effective_device_plugin_dir, dial_timeout=5.0)
            with PodResourcesEmulator(podres_socket) as podres:
                kubelet.start()
                runner = DaemonThread(build_daemon(settings, source, with_optional=False))
                runner.start()
                try:
                    _scenario(kernel, kubelet, podres, config, runner)
                finally:
                    runner.stop()
                    kubelet.stop()


def _view(kubelet: KubeletEmulator) -> dict[str, object]:
    return {d.id: d.health for d in kubelet.resources().get(SEC, [])}


def _scenario(
    kernel: SriovKernel,
    kubelet: KubeletEmulator,
    podres: PodResourcesEmulator,
    config: Path,
    runner: DaemonThread,
) -> None:
    held: list[str] = []  # the VF a pod holds, once it holds one
    withdrawn: list[dict[str, object]] = []  # every kubelet update that lacked it meanwhile

    def served(sec0: int, sec1: int) -> bool:
        def check(k: KubeletEmulator) -> bool:  # called on every update the kubelet gets
            view = _view(k)
            if held and held[0] not in view:
                withdrawn.append(view)
            return (vfs_of(view, kernel, SEC0), vfs_of(view, kernel, SEC1)) == (sec0, sec1)

        return kubelet.wait_for(check, WAIT)

    assert served(2, 2), _view(kubelet)
    held.append(_virtfns(kernel, SEC0)[1].resolve().name)
    podres.set_pods([("default", "crypto", "main", SEC, held)])
    write_config(config, 4)
    assert served(2, 4), (_view(kubelet), kernel.writes)
    assert [w for w in kernel.writes if w[0] == SEC0] == [(SEC0, "2", 0)]  # left as it was
    assert withdrawn == []
    waiting = {c.pf: c for c in runner.daemon.vf_changes}[SEC0]  # what metrics and doctor show
    assert (waiting.state, waiting.reason, waiting.holders) == (
        "pending",
        "held-by-pod",
        ("pod default/crypto",),
    )
    held.clear()
    podres.set_pods([])
    assert served(4, 4), (_view(kubelet), kernel.writes)
    assert [w[1] for w in kernel.writes if w[0] == SEC0] == ["2", "0", "4"]
    assert all(w[2] == 0 for w in kernel.writes)  # never refused: nothing was in use
