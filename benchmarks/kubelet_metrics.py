"""The real kubelet's own metrics, read from its endpoint with the cluster's admin certificate:
what the kubelet saw of a driver's calls, independent of the driver's own clocks.

The e2e cluster's kubelet serves HTTPS on the port its config names, authenticating clients by
the cluster CA (scripts/cluster/up); the API server will not proxy to a loopback node.
"""

from __future__ import annotations

import ssl
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.cluster import Cluster

READ_TIMEOUT = 10.0


@dataclass
class Histogram:
    """One labelled histogram's counts: cumulative per upper bound, with its sum and count."""

    buckets: dict[float, float] = field(default_factory=dict)
    total: float = 0.0
    count: float = 0.0

    def __sub__(self, other: Histogram) -> Histogram:
        return Histogram(
            {le: n - other.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.total - other.total,
            self.count - other.count,
        )

    def __add__(self, other: Histogram) -> Histogram:
        bounds = set(self.buckets) | set(other.buckets)
        return Histogram(
            {le: self.buckets.get(le, 0.0) + other.buckets.get(le, 0.0) for le in bounds},
            self.total + other.total,
            self.count + other.count,
        )

    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    def bound(self, quantile: float) -> float:
        """The smallest bucket bound under which ``quantile`` of the calls fell."""
        for le in sorted(self.buckets):
            if self.buckets[le] >= quantile * self.count:
                return le
        return float("inf")


class KubeletMetrics:
    """Reads the kubelet's /metrics on each call."""

    def __init__(self, url: str, context: ssl.SSLContext) -> None:
        self.url = url
        self.context = context

    @classmethod
    def of(cls, cluster: Cluster) -> KubeletMetrics:
        pki = cluster.state / "pki"
        # The kubelet serves a certificate it signed itself (no serving CA in this cluster): the
        # endpoint is on loopback, and only the client certificate matters to it.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return cls(f"https://127.0.0.1:{_kubelet_port(cluster)}/metrics", context)

    def _text(self) -> str:
        with urllib.request.urlopen(self.url, context=self.context, timeout=READ_TIMEOUT) as got:
            body: bytes = got.read()
        return body.decode()

    def histogram(self, name: str, labels: dict[str, str]) -> Histogram:
        """The series of ``name`` whose labels include ``labels`` (other labels summed)."""
        out = Histogram()
        for family in text_string_to_metric_families(self._text()):
            if family.name != name:
                continue
            for sample in family.samples:
                if any(sample.labels.get(k) != v for k, v in labels.items()):
                    continue
                if sample.name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    out.buckets[le] = out.buckets.get(le, 0.0) + sample.value
                elif sample.name.endswith("_sum"):
                    out.total += sample.value
                elif sample.name.endswith("_count"):
                    out.count += sample.value
        return out

    def claims_in_use(self) -> float:
        """Claims the kubelet holds prepared, of every driver."""
        for family in text_string_to_metric_families(self._text()):
            if family.name == "dra_resource_claims_in_use":
                for sample in family.samples:
                    if sample.labels.get("driver_name") == "<any>":
                        return sample.value
        return 0.0


def _kubelet_port(cluster: Cluster) -> int:
    config = (cluster.state / "kubelet-config.yaml").read_text()
    for line in config.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "port":
            return int(value)
    return 10250
