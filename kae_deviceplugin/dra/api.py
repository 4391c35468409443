"""The only door from the DRA front end to the generated DRA code: modules, names, constants.

The kubelet names services in two ways: the plugin-registration answer lists *service names*
(``v1.DRAPlugin``: the last two components of the gRPC service name), while the gRPC method paths
use the full names (``/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources``). Both
are read from the generated descriptors here, so they cannot drift from the protos.
"""

from __future__ import annotations

import re
from pathlib import Path

from kae_deviceplugin._generated.dra.v1 import api_pb2 as dra_v1
from kae_deviceplugin._generated.dra.v1 import api_pb2_grpc as dra_v1_grpc
from kae_deviceplugin._generated.dra.v1beta1 import api_pb2 as dra_v1beta1
from kae_deviceplugin._generated.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from kae_deviceplugin._generated.drahealth.v1 import api_pb2 as health_v1
from kae_deviceplugin._generated.drahealth.v1 import api_pb2_grpc as health_v1_grpc
from kae_deviceplugin._generated.drahealth.v1alpha1 import api_pb2 as health_v1alpha1
from kae_deviceplugin._generated.drahealth.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from kae_deviceplugin.core.engines import DRA_DRIVER, dra_plugin_dir
from kae_deviceplugin.kubelet.pluginwatcher import registry_dir
from kae_deviceplugin.kubelet.socket_names import digest, first_fitting

__all__ = [
    "DRIVER",
    "HEALTH_SERVICES",
    "PLUGIN_SERVICES",
    "PLUGIN_TYPE",
    "dra_v1",
    "dra_v1_grpc",
    "dra_v1beta1",
    "dra_v1beta1_grpc",
    "full_service_name",
    "health_v1",
    "health_v1_grpc",
    "health_v1alpha1",
    "health_v1alpha1_grpc",
    "is_registration_socket",
    "may_be_registration_socket",
    "plugin_dir",
    "registration_names",
    "service_name",
    "service_names",
    "socket_names",
    "socket_paths",
]

# The driver name: spec.driver of our ResourceSlices, results[].driver of the claims we prepare,
# PluginInfo.name at registration, and the directory of the service socket.
DRIVER = DRA_DRIVER
# PluginInfo.type of a DRA driver in the plugin-watcher registration.
PLUGIN_TYPE = "DRAPlugin"


def plugin_dir(kubelet_root: Path) -> Path:
    """The driver's own directory under the kubelet's: the service socket and the checkpoint
    (the kubelet's convention, ``<root-dir>/plugins/<driver>``; it outlives our pod)."""
    return dra_plugin_dir(kubelet_root)


REGISTRATION_SUFFIX = "-reg.sock"
# Ours by their start: the driver's name, alone or with the pod's UID or its digest.
_REGISTRATION = re.compile(
    rf"{re.escape(DRIVER)}(-[A-Za-z0-9_-]+)?{re.escape(REGISTRATION_SUFFIX)}"
)
# The shortest rolling-update name, as upstream's helper makes it for any driver: ours only if
# it answers GetInfo with our driver's name.
_HASHED_REGISTRATION = re.compile(rf"dra-[A-Za-z0-9_-]{{22}}{re.escape(REGISTRATION_SUFFIX)}")
KUBELET_ROOT_FLAG = "--kubelet-root"


def socket_names(pod_uid: str | None) -> tuple[str, str]:
    """(registration socket, service socket) file names, per pod when its UID is known: the
    preferred ones, which ``socket_paths`` uses wherever they fit."""
    registration, service = registration_names(pod_uid), service_names(pod_uid)
    return registration[0], service[0]


def registration_names(pod_uid: str | None) -> tuple[str, ...]:
    """The registration socket's names, preferred first, as upstream's helper orders them
    (kubernetes#139623): with the pod's UID, with a digest of it, then a digest of both."""
    if not pod_uid:
        return (f"{DRIVER}{REGISTRATION_SUFFIX}",)
    return (
        f"{DRIVER}-{pod_uid}{REGISTRATION_SUFFIX}",
        f"{DRIVER}-{digest(pod_uid, size=8)}{REGISTRATION_SUFFIX}",
        f"dra-{digest(DRIVER, pod_uid, size=16)}{REGISTRATION_SUFFIX}",
    )


def service_names(pod_uid: str | None) -> tuple[str, ...]:
    """The service socket's names, preferred first (kubernetes#142003): with the pod's UID,
    then with a digest of it."""
    if not pod_uid:
        return ("dra.sock",)
    return (f"dra-{pod_uid}.sock", f"dra-{digest(pod_uid, size=8)}.sock")


def socket_paths(
    kubelet_root: Path, pod_uid: str | None, *, strict: bool = True
) -> tuple[Path, Path]:
    """(registration socket, service socket): the first names that fit a unix socket address
    below ``kubelet_root``; SocketPathTooLong, naming --kubelet-root, when none does (the
    shortest names, not fitting, with ``strict`` off)."""
    registration = first_fitting(
        registry_dir(kubelet_root),
        registration_names(pod_uid),
        KUBELET_ROOT_FLAG,
        kubelet_root,
        strict=strict,
    )
    service = first_fitting(
        plugin_dir(kubelet_root),
        service_names(pod_uid),
        KUBELET_ROOT_FLAG,
        kubelet_root,
        strict=strict,
    )
    return registration, service


def is_registration_socket(name: str) -> bool:
    """Whether a file name in plugins_registry is one of ours, with or without a pod UID."""
    return _REGISTRATION.fullmatch(name) is not None


def may_be_registration_socket(name: str) -> bool:
    """Whether a file name in plugins_registry has the form of upstream's shortest rolling
    name, which any driver's may have: GetInfo tells whether it is ours."""
    return _HASHED_REGISTRATION.fullmatch(name) is not None


def full_service_name(module: object, service: str) -> str:
    """The gRPC service's fully qualified name, from a generated ``*_pb2`` module."""
    descriptor = getattr(module, "DESCRIPTOR", None)
    if descriptor is None or service not in descriptor.services_by_name:
        raise LookupError(f"{module!r} defines no service {service!r}")
    return str(descriptor.services_by_name[service].full_name)


def service_name(module: object, service: str) -> str:
    """The name the kubelet expects in ``supported_versions``: ``<version>.<Service>``."""
    return ".".join(full_service_name(module, service).split(".")[-2:])


# Newest first: the kubelet uses the first version it supports.
PLUGIN_SERVICES: tuple[str, ...] = (
    service_name(dra_v1, "DRAPlugin"),
    service_name(dra_v1beta1, "DRAPlugin"),
)
HEALTH_SERVICES: tuple[str, ...] = (
    service_name(health_v1, "DRAResourceHealth"),
    service_name(health_v1alpha1, "DRAResourceHealth"),
)
