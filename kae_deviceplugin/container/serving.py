"""What every call of a kubelet front end answers with, from the settings: one value, replaced
wholesale on a configuration reload, so a call never sees half of an old and half of a new one."""

from __future__ import annotations

from dataclasses import dataclass

from kae_deviceplugin.config.settings import Settings
from kae_deviceplugin.container.edits import ContainerOptions
from kae_deviceplugin.core import placement


@dataclass(frozen=True, slots=True)
class ServingPolicy:
    """Settings the servicer reads on each call (replaced wholesale on config reload)."""

    container: ContainerOptions
    allocation_policy: placement.PolicyName = placement.DEFAULT_POLICY

    @classmethod
    def from_settings(
        cls, s: Settings, view_problem: str | None = None, *, runtime_cdi: bool = True
    ) -> ServingPolicy:
        """What the settings say every call should answer; ``view_problem`` refuses Allocate;
        ``runtime_cdi`` False (a runtime that does not apply CDI devices) turns ``cdi`` off."""
        return cls(
            container=ContainerOptions(
                sysfs_root=s.sysfs_root,
                state_dir=s.state_dir,
                sysfs_view=s.container_sysfs_view,
                uadk_numa_hint=s.env.uadk_numa_hint,
                openssl_engines=s.env.openssl_engines,
                openssl_conf=s.env.openssl_conf,
                cdi=s.cdi and runtime_cdi,
                host_sysfs_root=s.host_sysfs_root,
                dev_root=s.dev_root,
                host_dev_root=s.host_dev_root,
                view_problem=view_problem,
            ),
            allocation_policy=s.allocation_policy,
        )
