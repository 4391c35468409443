"""What a pod asks of KAE: its claims (by name or from a template) and its extended-resource
limits, resolved against the API (the one part of ``why`` that reads beyond the first lists)."""

from __future__ import annotations

from typing import Any

from kae_deviceplugin.apiserver.reads import RESOURCE_CLAIM_TEMPLATES, ClusterReads
from kae_deviceplugin.errors import ApiError
from kae_deviceplugin.kubectl.cluster import Cluster, name_of, namespace_of
from kae_deviceplugin.kubectl.why_claim import ClaimAsk

JsonObject = dict[str, Any]
NOT_FOUND = 404


def _claim_named(cluster: Cluster, namespace: str, name: str) -> JsonObject | None:
    return next(
        (c for c in cluster.claims if namespace_of(c) == namespace and name_of(c) == name), None
    )


def _generated_names(pod: JsonObject) -> dict[str, str]:
    """Pod claim name -> the claim the controller made from its template."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or ()
    return {
        str(s.get("name")): str(s["resourceClaimName"])
        for s in statuses
        if s.get("resourceClaimName")
    }


async def _from_template(
    reads: ClusterReads, pod_claim: str, namespace: str, template: str
) -> ClaimAsk:
    source = f"template {namespace}/{template}"
    try:
        found = await reads.get(RESOURCE_CLAIM_TEMPLATES, template, namespace)
    except ApiError as err:
        if err.status != NOT_FOUND:
            raise
        return ClaimAsk(pod_claim, source, {}, problem="does not exist")
    devices = ((found.get("spec") or {}).get("spec") or {}).get("devices") or {}
    return ClaimAsk(pod_claim, source, devices)


async def claim_asks(reads: ClusterReads, pod: JsonObject, cluster: Cluster) -> list[ClaimAsk]:
    """One ask per entry of the pod's ``spec.resourceClaims``."""
    namespace = namespace_of(pod)
    generated = _generated_names(pod)
    asks = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        pod_claim = str(entry.get("name", ""))
        claim_name = entry.get("resourceClaimName") or generated.get(pod_claim)
        if claim_name:
            claim = _claim_named(cluster, namespace, str(claim_name))
            source = f"claim {namespace}/{claim_name}"
            if claim is None:
                asks.append(ClaimAsk(pod_claim, source, {}, problem="does not exist"))
            else:
                devices = (claim.get("spec") or {}).get("devices") or {}
                asks.append(ClaimAsk(pod_claim, source, devices, claim))
        elif entry.get("resourceClaimTemplateName"):
            template = str(entry["resourceClaimTemplateName"])
            asks.append(await _from_template(reads, pod_claim, namespace, template))
    return asks


def extended_claim(pod: JsonObject, cluster: Cluster) -> JsonObject | None:
    """The claim the scheduler made for the pod's extended resources (DRA nodes), if any."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    name = status.get("resourceClaimName")
    return None if not name else _claim_named(cluster, namespace_of(pod), str(name))


def class_for(resource: str, cluster: Cluster) -> str | None:
    """The DeviceClass that serves ``resource`` through DRA (its extendedResourceName)."""
    return next(
        (
            name_of(c)
            for c in cluster.classes
            if (c.get("spec") or {}).get("extendedResourceName") == resource
        ),
        None,
    )
