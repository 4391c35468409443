"""Which stack the e2e cluster runs (scripts/cluster/up exports it) and which of the product's
version-dependent features it can show, so a test that needs one skips with the reason elsewhere.

The releases are those of the feature gates' defaults: a cluster runs with no gate changed, as
an operator's does. Read from the Kubernetes sources (pkg/features/kube_features.go of each
release) and checked on the matrix's cells (docs/compatibility.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_K8S = "1.37.2"
DEFAULT_CONTAINERD = "2.4.2"

Version = tuple[int, int]


def minor(version: str) -> Version:
    """``1.34.4`` -> ``(1, 34)``."""
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


@dataclass(frozen=True, slots=True)
class Stack:
    """The releases of the control plane, the kubelet and containerd, and whether the runtime
    applies CDI devices."""

    k8s: str = DEFAULT_K8S
    kubelet: str = DEFAULT_K8S
    containerd: str = DEFAULT_CONTAINERD
    cdi: bool = True

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Stack:
        """From up's exports; a cluster started before they existed is the default stack."""
        k8s = env.get("KAE_E2E_K8S") or DEFAULT_K8S
        return cls(
            k8s=k8s,
            kubelet=env.get("KAE_E2E_KUBELET") or k8s,
            containerd=env.get("KAE_E2E_CONTAINERD") or DEFAULT_CONTAINERD,
            cdi=(env.get("KAE_E2E_CDI") or "on") == "on",
        )

    @property
    def api(self) -> Version:
        return minor(self.k8s)

    @property
    def node(self) -> Version:
        return minor(self.kubelet)

    def describe(self) -> str:
        skew = "" if self.kubelet == self.k8s else f", kubelet {self.kubelet}"
        cdi = "on" if self.cdi else "off"
        return f"Kubernetes {self.k8s}{skew}, containerd {self.containerd} (CDI {cdi})"

    def missing(self, feature: str) -> str | None:
        """Why this stack cannot show `feature`, or None when it can."""
        check, why = FEATURES[feature]
        return None if check(self) else f"{why} (this cluster: {self.describe()})"


def _both(release: Version) -> Callable[[Stack], bool]:
    return lambda s: min(s.api, s.node) >= release


FEATURES: dict[str, tuple[Callable[[Stack], bool], str]] = {
    "dra": (
        _both((1, 34)),
        "DRA's resource.k8s.io/v1 is served from Kubernetes 1.34 (1.32-1.33 serve only the "
        "beta versions, off by default) and the kubelet must be 1.34 too",
    ),
    "cdi": (
        lambda s: s.cdi,
        "the runtime applies no CDI devices (containerd 1.7 with enable_cdi = false): DRA "
        "cannot give a container its devices, and --cdi on names device nodes instead",
    ),
    "cdi-off": (
        lambda s: not s.cdi and s.containerd.startswith("1.7."),
        "needs containerd 1.7 with enable_cdi = false "
        "(KAE_E2E_CONTAINERD=1.7.35 KAE_E2E_CDI=off scripts/cluster/up)",
    ),
    "pod-health": (
        _both((1, 36)),
        "health in the pod's status (ResourceHealthStatus) is alpha, off by default, before "
        "Kubernetes 1.36: the kubelet reports none and the API server drops "
        "allocatedResourcesStatus",
    ),
    "dra-taints": (
        lambda s: s.api >= (1, 36),
        "device taints (DRADeviceTaints) are alpha, off by default, before Kubernetes 1.36: "
        "the API server drops them from slices",
    ),
    "dra-extended-resource": (
        _both((1, 36)),
        "extended resources served by DRA (DRAExtendedResource) are alpha, off by default, "
        "before Kubernetes 1.36: the API server drops a DeviceClass's extendedResourceName",
    ),
    "dra-consumable-capacity": (
        lambda s: s.api >= (1, 36),
        "consumable capacity (DRAConsumableCapacity) is alpha, off by default, before "
        "Kubernetes 1.36: the API server drops a device's allowMultipleAllocations",
    ),
    "dra-taints-dropped": (
        lambda s: (1, 34) <= s.api < (1, 36),
        "shows the driver where the API server drops device taints (Kubernetes 1.34-1.35, "
        "DRADeviceTaints off by default)",
    ),
    "dra-consumable-capacity-dropped": (
        lambda s: (1, 34) <= s.api < (1, 36),
        "shows the driver where the API server drops consumable capacity (Kubernetes "
        "1.34-1.35, DRAConsumableCapacity off by default)",
    ),
}
