"""The DRA facade's names agree with what the kubelet expects (FACTS §9)."""

from __future__ import annotations

import pytest

from kae_deviceplugin.dra import api


def test_registration_service_names() -> None:
    """supported_versions holds service names, not bare versions: v1 before v1beta1."""
    assert api.PLUGIN_SERVICES == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    assert api.HEALTH_SERVICES == ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")


def test_full_service_names() -> None:
    """The method paths use the fully qualified DRAPlugin names and the bare health packages."""
    assert api.full_service_name(api.dra_v1, "DRAPlugin") == (
        "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
    )
    assert api.full_service_name(api.dra_v1beta1, "DRAPlugin") == (
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
    )
    assert api.full_service_name(api.health_v1alpha1, "DRAResourceHealth") == (
        "v1alpha1.DRAResourceHealth"
    )


def test_unknown_service_is_refused() -> None:
    """Asking a module for a service it does not define is an error, not an empty name."""
    with pytest.raises(LookupError):
        api.service_name(api.dra_v1, "DRAResourceHealth")


def test_driver_name_is_a_dns_subdomain() -> None:
    """The driver name is the one the slices, claims and sockets use."""
    assert api.DRIVER == "kae.openfuyao.com"
    assert api.PLUGIN_TYPE == "DRAPlugin"
