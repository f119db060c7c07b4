"""The A/B router as the core loads it: ``SplitBackend`` (its variants table, no instances) and
``SplitModel``, the loaded version, which is also its scheduler's ``SplitHost``
(scheduling/split.py routes the requests), and ``SplitMetrics``, what the metrics port shows
of it (frontends/split_metrics.py):

* ``tritonlite_split_requests_total{model, variant}``: requests the router sent to the
  variant (answered or failed);
* ``tritonlite_split_request_duration_us{model, variant}``: a histogram of the variant's
  answer time as the router saw it, successful requests only, with the
  ``--metrics-config histogram_buckets_us`` bounds.

A router reloaded with new weights keeps its ``SplitMetrics`` (the counters do not restart);
each variant's own ``nv_*`` families count its requests as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from tritonlite.contracts.errors import TritonliteError, internal
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.core.observability.latency import Histogram
from tritonlite.core.runtime.model import Model
from tritonlite.scheduling.split import SplitScheduler, Variants


class Variant(Protocol):
    """Where a router finds its variants and admits their requests (the repository)."""

    step_infer: Callable[[InferRequest], Awaitable[InferResponse]]

    def get(self, name: str, version: int = -1) -> Model: ...


class SplitMetrics:
    """One router's per-variant request counts and answer-time histograms (event loop only)."""

    __slots__ = ("bounds", "requests", "durations")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.requests: dict[str, int] = {}
        self.durations: dict[str, Histogram] = {}

    def observe(self, variant: str, duration_ns: int, ok: bool) -> None:
        self.requests[variant] = self.requests.get(variant, 0) + 1
        if ok:
            hist = self.durations.get(variant)
            if hist is None:
                hist = self.durations[variant] = Histogram(self.bounds)
            hist.observe(duration_ns // 1000)


class SplitBackend:
    """What a router has in place of a backend: its variants and the repository they live in."""

    def __init__(self, variants: Variants, repository: Variant, metrics: SplitMetrics) -> None:
        self.variants = variants
        self.repository = repository
        self.metrics = metrics

    def new_instance(self, spec: Any) -> Any:
        raise internal("a tritonlite_split model has no instances")

    def close(self) -> None:
        """Nothing to release: the variants are loaded and unloaded on their own."""


class SplitModel(Model):
    """A loaded router version: no instances; ready while loaded (a request finding no ready
    variant fails with UNAVAILABLE). Its scheduler's ``SplitHost``."""

    @property
    def _backend(self) -> SplitBackend:
        backend = self.backend
        assert isinstance(backend, SplitBackend)
        return backend

    @property
    def variants(self) -> Variants:
        return self._backend.variants

    @property
    def metrics(self) -> SplitMetrics:
        return self._backend.metrics

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self.signature.outputs)

    def variant_ready(self, name: str) -> bool:
        try:
            self._backend.repository.get(name)
        except TritonliteError:
            return False
        return True

    async def step_infer(self, request: InferRequest) -> InferResponse:
        return await self._backend.repository.step_infer(request)

    def observe(self, variant: str, duration_ns: int, ok: bool) -> None:
        self._backend.metrics.observe(variant, duration_ns, ok)

    @property
    def ready(self) -> bool:
        return True

    async def drain(self, timeout_s: float | None = None) -> None:
        sched = self.scheduler
        assert isinstance(sched, SplitScheduler)
        try:
            await asyncio.wait_for(sched.wait_idle(), timeout_s)
        except asyncio.TimeoutError:
            pass
