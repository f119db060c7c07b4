"""The two contracts of scheduling: ``Scheduler`` (what a model asks of its scheduler) and
``InstancePool`` (what a scheduler may ask of the model's instances), with ``Pending``, the
queued request they pass between them.

Ownership: ``Scheduler.enqueue`` takes a validated request; from then until the returned future
resolves the scheduler owns it, until it hands it to ``InstancePool.dispatch`` in a batch; from
then the pool (the instance executing it) owns it and resolves its future on the event loop with
the InferResponse or a TritonliteError. A pool tells its scheduler that an instance is free
again with ``Scheduler.instance_free``; a scheduler never touches the pool's idle instances
itself (Triton's schedulers likewise hand payloads to the rate limiter through two calls, never
a shared list). Every method runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tritonlite.backends.base import BackendInstance, ModelContext, Result
from tritonlite.contracts.errors import TritonliteError, rejected, unavailable
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest, InferResponse


@dataclass(slots=True)
class Pending:
    """A request queued by a scheduler: its future, and when it was queued and dispatched."""

    request: InferRequest
    future: asyncio.Future[InferResponse]
    enqueue_ns: int
    dispatch_ns: int = 0


class Scheduler(Protocol):
    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        """Queue ``request``; the future resolves when its response is ready."""
        ...

    def instance_free(self) -> None:
        """An instance became idle: dispatch queued work to it if there is any."""
        ...

    def inflight(self) -> int:
        """Requests queued or executing."""
        ...

    def stop(self) -> None:
        """Fail every queued (not yet executing) request with UNAVAILABLE."""
        ...


@runtime_checkable
class GoesStraight(Protocol):
    """A scheduler that may hand a request straight to an idle instance, alone (the direct
    scheduler; a dynamic batcher with no delay). The model's single-request lane
    (core/runtime/lane.py) then runs such a request itself, in the scheduler's place."""

    #: Whether it ever does (fixed for the scheduler's life): the model makes a lane only then.
    goes_straight: bool

    def at_once(self) -> bool:
        """Whether a request enqueued now, an instance being idle, would be dispatched at once
        and alone: nothing queued or being dispatched ahead of it, and nothing to wait for.
        Also asked as a run ends: False says the scheduler must hear of the freed instance."""
        ...


class BatchRunner(Protocol):
    """Runs one dispatched batch in place of the backend instance's ``execute`` (the sequence
    batcher's implicit-state wrapper). Called on the instance's thread with its backend
    instance; same contract as ``BackendInstance.execute``."""

    def execute(
        self, inner: BackendInstance, requests: list[InferRequest], timing: ExecTiming
    ) -> list[Result]: ...


class InstancePool(Protocol):
    """A loaded model as its scheduler sees it: what it serves and its instances (``Model``
    implements it). Instances are opaque to the scheduler; it names one only to dispatch to it
    (the sequence batcher binds sequences to instances)."""

    name: str
    config: Any  # the normalized pb.ModelConfig
    signature: Signature
    ctx: ModelContext
    executing: int  # requests dispatched and not yet completed

    @property
    def instances(self) -> Sequence[object]: ...

    def has_idle(self, instance: object | None = None) -> bool:
        """Whether an instance (or this one) is idle and healthy, ready for a batch."""
        ...

    def dispatch_one(self, p: Pending) -> None:
        """``dispatch([p], direct=True)`` on the next idle instance (``has_idle`` must be
        true): one request, with no batch list built for it."""
        ...

    def dispatch(
        self,
        batch: list[Pending],
        instance: object | None = None,
        runner: BatchRunner | None = None,
        done: Callable[[], None] | None = None,
        direct: bool = False,
        padding: int = 0,
    ) -> None:
        """Take an idle instance (``instance`` when given; ``has_idle`` must be true) and run
        ``batch`` on it, through ``runner`` when given. ``done`` is called on the loop once the
        batch's futures are resolved, before the instance is idle again. ``direct``: the
        scheduler calls from outside its scheduling pass, so a batch that runs inline may give
        its instance back (and call ``instance_free``) before this returns, not a loop turn
        later. ``padding``: requests ``runner`` adds to the batch (the sequence batcher's null
        requests); they count in the executed batch size of the statistics, as in Triton."""
        ...

    def reject(
        self, request: InferRequest, future: asyncio.Future[InferResponse], err: TritonliteError
    ) -> None:
        """Fail a request the scheduler refused (queue full, timed out): counted as the
        statistics count a rejection, then ``future`` gets ``err``."""
        ...


class ForwardStats(Protocol):
    """The statistics a forwarding model (an ensemble, an A/B router) keeps of its own
    requests: the core's ``ModelStats``, whose ``record_*`` every scheduler calls."""

    def record_failure(self, total_ns: int, reason: str) -> None: ...
    def record_execution(self, batch_size: int, timing: ExecTiming) -> Any: ...
    def record_success(
        self, total_ns: int, queue_ns: int, timing: ExecTiming | None, batch_size: int
    ) -> None: ...


class ForwardingScheduler:
    """What the schedulers of models with no instances of their own share -- an ensemble's,
    an A/B router's: each request is a task that forwards work to other models; the scheduler
    counts those in flight, refuses new ones once stopped and says when none is left."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._inflight = 0
        self._stopped = False
        self._idle = asyncio.Event()
        self._idle.set()

    def _begin(self) -> None:
        """A request is admitted (raises the Rejected of UNAVAILABLE once stopped)."""
        if self._stopped:
            raise rejected(unavailable(f"model '{self._name}' is unloading"))
        self._inflight += 1
        self._idle.clear()

    def _end(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    def instance_free(self) -> None:
        """No instances of its own: nothing waits for one."""

    def inflight(self) -> int:
        return self._inflight

    def stop(self) -> None:
        """Refuse new requests; those in flight finish (their forwarded work is queued)."""
        self._stopped = True

    async def wait_idle(self) -> None:
        await self._idle.wait()
