"""benchmarks/kubelet_metrics.py, the reader of the real kubelet's own metrics that the Go peer
comparison (issue 41) trusts for the prepare and Allocate latency the kubelet saw: one series
picked out by its labels, a burst's share as the difference of two reads, the mean exact and
the p99 only as the bound of the bucket it falls in."""

from __future__ import annotations

import math
import ssl
from typing import Any

from tests.support.bench_modules import bench_module

PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"


def _module() -> Any:
    return bench_module("kubelet_metrics")


def _exposition(ours: tuple[int, int, int], go: tuple[int, int, int], total: float) -> str:
    """dra_grpc_operations_duration_seconds for two drivers: counts at le 0.1, 1, +Inf."""
    lines = ["# TYPE dra_grpc_operations_duration_seconds histogram"]
    for driver, counts in (("kae.openfuyao.com", ours), ("kae-go.openfuyao.com", go)):
        labels = f'driver_name="{driver}",grpc_status_code="OK",method_name="{PREPARE}"'
        for le, count in zip(("0.1", "1", "+Inf"), counts, strict=True):
            lines.append(
                f'dra_grpc_operations_duration_seconds_bucket{{{labels},le="{le}"}} {count}'
            )
        lines.append(f"dra_grpc_operations_duration_seconds_sum{{{labels}}} {total}")
        lines.append(f"dra_grpc_operations_duration_seconds_count{{{labels}}} {counts[-1]}")
    lines += [
        "# TYPE dra_resource_claims_in_use gauge",
        'dra_resource_claims_in_use{driver_name="<any>"} 3',
        'dra_resource_claims_in_use{driver_name="kae.openfuyao.com"} 2',
    ]
    return "\n".join(lines) + "\n"


def _reader(texts: list[str]) -> Any:
    """A KubeletMetrics whose endpoint answers ``texts`` in turn."""
    metrics = _module()

    class Canned(metrics.KubeletMetrics):  # type: ignore[misc,name-defined]
        def _text(self) -> str:
            return texts.pop(0)

    return Canned("https://127.0.0.1:1/metrics", ssl.create_default_context())


def test_one_drivers_burst_is_the_difference_of_two_reads() -> None:
    """Before: 10 prepares of ours (2.0 s), all under 100 ms; after: 60 (4.0 s), 55 under
    100 ms and 59 under 1 s. The burst's 50 calls: mean 40 ms, half under 100 ms, 98% under
    1 s, and 99% under no bound but +Inf (49 of 50 is not 99%). The Go driver's series, in
    the same text, is left out."""
    reader = _reader(
        [_exposition((10, 10, 10), (7, 7, 7), 2.0), _exposition((55, 59, 60), (7, 7, 7), 4.0)]
    )
    labels = {"driver_name": "kae.openfuyao.com", "method_name": PREPARE}
    before = reader.histogram("dra_grpc_operations_duration_seconds", labels)
    burst = reader.histogram("dra_grpc_operations_duration_seconds", labels) - before
    assert burst.count == 50
    assert math.isclose(burst.mean(), 0.04)
    assert burst.bound(0.5) == 0.1
    assert burst.bound(0.99) == math.inf  # one call of 50 over 1 s: 49/50 is below 99%
    assert burst.bound(0.98) == 1.0


def test_sums_add_up_and_claims_in_use_is_every_drivers() -> None:
    """Two bursts add bucket by bucket; the claims in use are the "<any>" series."""
    reader = _reader([_exposition((1, 2, 2), (0, 0, 0), 1.0)] * 3)
    labels = {"driver_name": "kae.openfuyao.com"}
    one = reader.histogram("dra_grpc_operations_duration_seconds", labels)
    two = one + reader.histogram("dra_grpc_operations_duration_seconds", labels)
    assert (two.count, two.total, two.buckets[0.1]) == (4, 2.0, 2)
    assert reader.claims_in_use() == 3
