"""Per-(model, version) counters: the statistics extension's shape, read by metrics too.

Updated only on the event loop thread (completions are delivered there), so no locks.
Units are nanoseconds; metrics convert to microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonlite.contracts.timing import ExecTiming


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


def _add_spans(target: BatchStats | ModelStats, ci: int, cinf: int, co: int) -> None:
    """One more of each compute duration, in one call: every request and every batch comes
    here, so the three adds are written out rather than three ``Duration.add`` calls."""
    d = target.compute_input
    d.count += 1
    d.ns += ci
    d = target.compute_infer
    d.count += 1
    d.ns += cinf
    d = target.compute_output
    d.count += 1
    d.ns += co


@dataclass(slots=True)
class ResponseStats:
    """The statistics of the responses at one index (Triton's InferResponseStatistics)."""

    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    empty_response: Duration = field(default_factory=Duration)
    cancel: Duration = field(default_factory=Duration)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {n: getattr(self, n).to_dict() for n in _RESPONSE_NAMES}


_RESPONSE_NAMES = ("compute_infer", "compute_output", "success", "fail", "empty_response", "cancel")


class LatencyObserver(Protocol):
    """Per-request observations for the opt-in summaries/histograms (core/latency.py)."""

    def request(
        self, total_ns: int, queue_ns: int, compute: tuple[int, int, int] | None
    ) -> None: ...

    def cache_hit(self, ns: int) -> None: ...

    def cache_miss(self, ns: int) -> None: ...


# What the core hands the repository for the opt-in latency metrics: one observer per loaded
# model version (core/latency.py); None: the statistics path makes no observations at all.
LatencyFactory = Callable[[], LatencyObserver]


_NAMES = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)


class ModelStats:
    """Cumulative statistics of one model version (Triton's ModelStatistics)."""

    __slots__ = (
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
        "inference_count",
        "execution_count",
        "last_inference_ms",
        "batches",
        "failures_by_reason",
        "latency",
        "responses",
    )

    def __init__(self, latency: LatencyObserver | None = None) -> None:
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.cache_hit = Duration()
        self.cache_miss = Duration()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.batches: dict[int, BatchStats] = {}
        self.responses: dict[int, ResponseStats] = {}
        self.failures_by_reason: dict[str, int] = {
            "REJECTED": 0,
            "CANCELED": 0,
            "BACKEND": 0,
            "OTHER": 0,
        }
        self.latency = latency

    def record_execution(self, batch_size: int, timing: ExecTiming) -> tuple[int, int, int]:
        """One batch executed; returns its ``timing.spans()`` for the requests' records."""
        spans = timing.spans()
        ci, cinf, co = spans
        self.execution_count += 1
        b = self.batches.get(batch_size)
        if b is None:
            b = self.batches[batch_size] = BatchStats()
        _add_spans(b, ci, cinf, co)
        return spans

    def record_one(self, batch_size: int, total_ns: int, queue_ns: int, timing: ExecTiming) -> None:
        """A request executed alone that succeeded: ``record_execution`` of its batch and its
        ``record_success``, in one call (the general path's inline run of one request)."""
        ci, cinf, co = timing.spans()
        self.record_spans(batch_size, total_ns, queue_ns, ci, cinf, co)

    def record_spans(
        self, batch_size: int, total_ns: int, queue_ns: int, ci: int, cinf: int, co: int
    ) -> None:
        """``record_one`` given its timing's spans (``ExecTiming.spans``: none negative), as
        plain integers: the single-request lane's one record per request, with no timing
        object."""
        self.execution_count += 1
        self.inference_count += batch_size
        b = self.batches.get(batch_size)
        if b is None:
            b = self.batches[batch_size] = BatchStats()
        d = b.compute_input  # the batch's durations, then the model's: written out
        d.count += 1
        d.ns += ci
        d = b.compute_infer
        d.count += 1
        d.ns += cinf
        d = b.compute_output
        d.count += 1
        d.ns += co
        d = self.compute_input
        d.count += 1
        d.ns += ci
        d = self.compute_infer
        d.count += 1
        d.ns += cinf
        d = self.compute_output
        d.count += 1
        d.ns += co
        d = self.success
        d.count += 1
        d.ns += total_ns
        d = self.queue
        d.count += 1
        d.ns += queue_ns
        if self.latency is not None:
            self.latency.request(total_ns, queue_ns, (ci, cinf, co))
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_success(
        self,
        total_ns: int,
        queue_ns: int,
        timing: ExecTiming | None,
        batch_size: int = 1,
        spans: tuple[int, int, int] | None = None,
    ) -> None:
        """A request that succeeded; ``inference_count`` counts its ``batch_size``
        inferences (as Triton's, it counts successful requests only). ``spans``: the
        ``timing.spans()`` the caller already has."""
        self.inference_count += batch_size
        d = self.success  # every request comes here: the adds written out, not called
        d.count += 1
        d.ns += total_ns
        d = self.queue
        d.count += 1
        d.ns += queue_ns
        if timing is not None:
            ci, cinf, co = spans if spans is not None else timing.spans()
            _add_spans(self, ci, cinf, co)
        if self.latency is not None:
            self.latency.request(total_ns, queue_ns, None if timing is None else (ci, cinf, co))
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_cache_hit(self, total_ns: int, hit_ns: int) -> None:
        """A response served by the response cache: a success with no queue and no compute."""
        self.success.add(total_ns)
        self.queue.add(0)
        self.cache_hit.add(hit_ns)
        if self.latency is not None:
            self.latency.request(total_ns, 0, None)
            self.latency.cache_hit(hit_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_cache_miss(self, miss_ns: int, insert_ns: int) -> None:
        """A successful response after a miss (already a success): ``miss_ns`` is lookup +
        insert; the insert happened after the request's duration was taken, so it is added."""
        self.cache_miss.add(miss_ns)
        self.success.ns += insert_ns
        if self.latency is not None:
            self.latency.cache_miss(miss_ns)

    def record_failure(self, total_ns: int, reason: str = "OTHER") -> None:
        self.fail.add(total_ns)
        self.failures_by_reason[reason] = self.failures_by_reason.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_response(self, index: int, outcome: str, infer_ns: int, output_ns: int) -> None:
        """One response of a decoupled model, the ``index``-th of its request (from 0).

        ``outcome`` is ``"success"``, ``"fail"``, ``"empty_response"`` (a final flag with no
        response) or ``"cancel"`` (a response the client no longer waits for). As in Triton's
        ``UpdateResponse*``: ``compute_infer`` counts every outcome but a cancel,
        ``compute_output`` a success and a fail that got as far as building outputs
        (``output_ns`` > 0); an outcome's own duration is ``infer_ns + output_ns``.
        """
        r = self.responses.get(index)
        if r is None:
            r = self.responses[index] = ResponseStats()
        if outcome != "cancel":
            r.compute_infer.add(infer_ns)
        if outcome == "success" or (outcome == "fail" and output_ns > 0):
            r.compute_output.add(output_ns)
        getattr(r, outcome).add(infer_ns + output_ns)

    def to_dict(self, name: str, version: str) -> dict[str, Any]:
        """The statistics extension's JSON object for this version (every key present)."""
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {n: getattr(self, n).to_dict() for n in _NAMES},
            "response_stats": {str(i): r.to_dict() for i, r in sorted(self.responses.items())},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.to_dict(),
                    "compute_infer": b.compute_infer.to_dict(),
                    "compute_output": b.compute_output.to_dict(),
                }
                for size, b in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }
