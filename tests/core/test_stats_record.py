"""``ModelStats.record_one`` (one request run alone) and ``record_spans`` (the single-request
lane's record) against the two records they stand for: every field of the statistics
extension comes out the same."""

from __future__ import annotations

import pytest

from tritonlite.contracts.timing import ExecTiming
from tritonlite.core.observability.stats import ModelStats


class _Observer:
    def __init__(self) -> None:
        self.seen: list[tuple[int, int, tuple[int, int, int] | None]] = []

    def request(self, total_ns: int, queue_ns: int, compute: tuple[int, int, int] | None) -> None:
        self.seen.append((total_ns, queue_ns, compute))

    def cache_hit(self, ns: int) -> None:
        raise AssertionError("not a cache hit")

    def cache_miss(self, ns: int) -> None:
        raise AssertionError("not a cache miss")


@pytest.mark.parametrize(
    "timing",
    [
        ExecTiming(100, 130, 190, 200),
        ExecTiming(100, 0, 0, 250),  # a backend that marks nothing: all of it is infer
        ExecTiming(100, 90, 80, 70),  # clocks read out of order: no negative span
        ExecTiming(100, 150, 0, 180),
    ],
)
@pytest.mark.parametrize("batch_size", [1, 3])
def test_record_one_is_execution_plus_success(timing: ExecTiming, batch_size: int) -> None:
    one, two = _Observer(), _Observer()
    a, b = ModelStats(one), ModelStats(two)
    for _ in range(2):
        a.record_one(batch_size, 1_000, 40, timing)
        spans = b.record_execution(batch_size, timing)
        b.record_success(1_000, 40, timing, batch_size, spans)
    da, db = a.to_dict("m", "1"), b.to_dict("m", "1")
    da.pop("last_inference")
    db.pop("last_inference")
    assert da == db
    assert one.seen == two.seen
    assert a.last_inference_ms > 0


@pytest.mark.parametrize("timing", [ExecTiming(100, 130, 190, 200), ExecTiming(100, 0, 0, 250)])
def test_record_spans_is_record_one_of_those_spans(timing: ExecTiming) -> None:
    one, two = _Observer(), _Observer()
    a, b = ModelStats(one), ModelStats(two)
    for size in (1, 2, 1):
        a.record_one(size, 1_000, 40, timing)
        b.record_spans(size, 1_000, 40, *timing.spans())
    da, db = a.to_dict("m", "1"), b.to_dict("m", "1")
    da.pop("last_inference")
    db.pop("last_inference")
    assert da == db
    assert one.seen == two.seen
