"""The split metrics families on the metrics port, for every loaded ``tritonlite_split`` model
(what they count: core/runtime/split.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from tritonlite.core.observability.latency import Histogram
from tritonlite.core.runtime.split import SplitModel

REQUESTS = "tritonlite_split_requests"
DURATION = "tritonlite_split_request_duration_us"


def _bound(v: float) -> str:
    if math.isinf(v):
        return "+Inf"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def collect(models: Sequence[Any]) -> Iterator[Metric]:
    """The split families for the routers among ``models`` (the ready loaded versions);
    nothing when there is no router."""
    routers = [m for m in models if isinstance(m, SplitModel)]
    if not routers:
        return
    counter = CounterMetricFamily(
        REQUESTS,
        "Requests a tritonlite_split model sent to each of its variants (answered or failed)",
        labels=["model", "variant"],
    )
    hist = Metric(
        DURATION,
        "Histogram of the answer time of each variant of a tritonlite_split model as the "
        "router saw it, in microseconds (successful requests)",
        "histogram",
    )
    seen: set[int] = set()
    for m in routers:
        metrics = m.metrics
        if id(metrics) in seen:  # the versions of one router share them
            continue
        seen.add(id(metrics))
        for variant in sorted(set(m.variants.names) | set(metrics.requests)):
            counter.add_metric([m.name, variant], metrics.requests.get(variant, 0))
            h = metrics.durations.get(variant) or Histogram(metrics.bounds)
            labels = {"model": m.name, "variant": variant}
            for bound, c in zip((*h.bounds, math.inf), h.cumulative()):
                hist.add_sample(DURATION + "_bucket", {**labels, "le": _bound(bound)}, c)
            hist.add_sample(DURATION + "_count", labels, h.count)
            hist.add_sample(DURATION + "_sum", labels, h.sum)
    yield counter
    yield hist
