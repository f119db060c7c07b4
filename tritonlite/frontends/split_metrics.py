"""The split metrics families on the metrics port, for every loaded ``tritonlite_split`` model
(what they count: core/runtime/split.py)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, Metric

from tritonlite.core.api import SplitRow

REQUESTS = "tritonlite_split_requests"
DURATION = "tritonlite_split_request_duration_us"


def _bound(v: float) -> str:
    if math.isinf(v):
        return "+Inf"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def collect(rows: Sequence[SplitRow]) -> Iterator[Metric]:
    """The split families for the snapshot's router rows; nothing when there is no router."""
    if not rows:
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
    for row in rows:
        counter.add_metric([row.model, row.variant], row.requests)
        h = row.durations
        labels = {"model": row.model, "variant": row.variant}
        for bound, c in zip((*h.bounds, math.inf), h.cumulative):
            hist.add_sample(DURATION + "_bucket", {**labels, "le": _bound(bound)}, c)
        hist.add_sample(DURATION + "_count", labels, h.count)
        hist.add_sample(DURATION + "_sum", labels, h.sum)
    yield counter
    yield hist
