"""A loaded model version: its instances (one thread each), scheduler and statistics.

Execution design (the one way a batch runs):

* **Scheduler and instances meet at one seam.** Schedulers (``scheduling/``) decide only which
  requests form a batch and when, and hand it down with ``Model.dispatch``; the model tells
  them an instance is free again with ``Scheduler.instance_free``. Only this module touches the
  idle instances.
* **An instance's execution mode is picked once**, when the instance (or its rebuild) is made,
  from what the backend declares (``backends/base.py``) and whether the model has a batcher:
  ``thread`` (on the instance's thread, which builds the responses), and for ``TakesNext``
  backends (their run leaves the interpreter lock; the loop builds the responses from what the
  run returned) ``thread+next`` with no batcher (the instance's thread holds the next request while one runs
  and starts it as that run returns, with no loop turn between) or ``thread+batch`` with one
  (one batch at a time; the instance frees ``CATCH_UP_TURNS`` loop turns after its batch
  ends, so that what arrived during the run and while its answers were written is queued
  before the batcher forms the next batch, as Triton's front-end threads queue requests while
  an instance runs); and whether batches may run
  ``inline`` on the loop at all (``RunsOnLoop.thread_agnostic``, and no execution timeout).
  Nothing about the mode is re-derived per batch.
* **A policy object owns the measured switching** (``InlinePolicy``): for an instance that may
  run inline, it says per batch, from the batches' measured times, whether this one runs on
  the loop or goes to the instance's off-loop mode. No other code decides. Its bound is picked
  with the mode: a ``thread+batch`` instance under a dynamic batcher with a delay, whose run
  fills the cores (``FillsCores``), keeps longer batches on the loop (the loop read what came
  while they waited; two thread hand-offs are a large part of such a cycle) than every other
  instance.
* **The single-request lane.** One request, one execution, no batching (the commonest case)
  takes ``Model._run_one``: the request's arrays go to the backend as they are, its response is
  built from the backend's output with no per-batch lists, and its statistics are one record
  (``ModelStats.record_one``). An instance freed during its scheduler's pass (an inline run)
  is idle again before ``dispatch`` returns, so the scheduler's pass hands it the next queued
  request with no loop turn in between.
* Every batch, whatever its mode, ends in ``ModelInstance.finished`` and then
  ``Model._complete``, the one completion step.

Over 500 lines: ``Model``, ``ModelInstance`` and its worker thread are one state machine (a
batch's dispatch, its execution modes and its completion) and read best together.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from tritonlite.backends.base import (
    Backend,
    BackendFatalError,
    BackendInstance,
    ExecutesOne,
    FillsCores,
    InstanceSpec,
    ModelContext,
    RunsBound,
    RunsOnLoop,
    TakesNext,
)
from tritonlite.contracts.errors import (
    ErrorCode,
    ErrorResponse,
    TritonliteError,
    internal,
    unavailable,
)
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.core.observability.stats import LatencyFactory, ModelStats
from tritonlite.core.runtime.arrivals import ARRIVALS
from tritonlite.core.runtime.health import HealthSettings, InstanceHealth
from tritonlite.core.runtime.lane import DirectLane
from tritonlite.core.runtime.pacing import AnswerPacing
from tritonlite.core.runtime.policy import INLINE_MAX_NS, WAITED_INLINE_MAX_NS, InlinePolicy
from tritonlite.core.runtime.warmup import WarmupSample
from tritonlite.core.tensors.outputs import build_response
from tritonlite.core.tensors.shm import SharedMemoryManager
from tritonlite.scheduling.base import BatchRunner, GoesStraight, Pending
from tritonlite.scheduling.direct import DirectScheduler
from tritonlite.scheduling.dynamic import DynamicBatchScheduler
from tritonlite.scheduling.factory import make_scheduler

log = logging.getLogger("tritonlite")


_STOP = object()

# ``thread+batch``: the loop turn after a batch's, on which its instance frees. The batch's
# answers wake their handlers, which write them, on turn 1; the loop then polls its sockets, and
# what arrived meanwhile (clients answered first send again at once) starts its handlers, which
# queue their requests on turn 2; the instance frees on turn 3. The batcher then forms the
# next batch from what reached the server while it answered -- what Triton's front-end threads
# would have queued -- not from what the loop had read before it answered (on turn 1, that was
# often one request: the batches alternated between one request and all the others).
CATCH_UP_TURNS = 3


class _Worker:
    """One thread and the backend instance it created; what a rebuild replaces.

    The thread runs the callables put on ``work`` one at a time, until ``_STOP``, then closes
    the backend instance it made. A worker abandoned while hung inside the backend (Python
    threads cannot be killed) closes its instance whenever that call returns.
    """

    __slots__ = ("work", "thread", "impl")

    def __init__(self, name: str, factory: Callable[[], BackendInstance]) -> None:
        """Start the thread and make the backend instance on it; raises what ``factory`` raised."""
        self.work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        made: list[tuple[bool, Any]] = []
        ready = threading.Event()

        def main() -> None:
            try:
                made.append((True, factory()))
            except BaseException as exc:
                made.append((False, exc))
            ready.set()
            if made[0][0]:
                self._serve(made[0][1], name)

        self.thread = threading.Thread(target=main, name=name, daemon=True)
        self.thread.start()
        ready.wait()
        ok, value = made[0]
        if not ok:
            self.thread.join()
            raise value
        self.impl: BackendInstance = value

    def _serve(self, impl: BackendInstance, name: str) -> None:
        work = self.work
        while True:
            item = work.get()
            if item is _STOP:
                try:
                    impl.close()
                except Exception:
                    log.exception("closing instance %s", name)
                return
            item()

    def stop(self) -> None:
        self.work.put(_STOP)


def _answer(fut: asyncio.Future[InferResponse], res: InferResponse | TritonliteError) -> None:
    """A request's outcome to its future (unless it was cancelled meanwhile)."""
    if fut.done():
        return
    if isinstance(res, TritonliteError):
        fut.set_exception(res)
    else:
        fut.set_result(res)


class ModelInstance:
    """One backend instance and the thread that runs it; executes one batch at a time.

    Every call into the backend instance (its creation, each ``execute``, ``close``) happens on
    this one thread, so thread-local state a model sets up when created holds when it runs. The
    thread takes work from a queue and hands results back to the event loop with one
    ``call_soon_threadsafe``: no executor futures on the hot path.

    Health (core/health.py decides; this class carries it out): ``healthy`` is False while the
    instance is out of rotation. ``generation`` counts the threads this instance has had: a
    result delivered by an older one (an abandoned, hung thread) is dropped. ``restart`` makes
    a new backend instance on a new thread and points ``impl`` at it.

    ``runner``, ``on_done`` and ``padding`` belong to the batch executing now (one at a time):
    what ``Model.dispatch`` was handed for it.
    """

    def __init__(self, spec: InstanceSpec, factory: Callable[[], BackendInstance]) -> None:
        """Start the thread and make the backend instance on it; raises what ``factory`` raised."""
        self.spec = spec
        self.healthy = True
        self.fault = ""  # why the instance is out of rotation
        self.failovers = 0  # times taken out of rotation
        self.rebuilds = 0  # successful rebuilds
        self.generation = 0
        self._factory = factory
        self._lock = threading.Lock()
        self._closed = False
        self._watch: asyncio.TimerHandle | None = None
        self._worker = _Worker(spec.name, factory)
        self.impl: BackendInstance = self._worker.impl
        self.runner: BatchRunner | None = None
        self.on_done: Callable[[], None] | None = None
        self.padding = 0
        self._inline_allowed = True
        self.policy: InlinePolicy | None = None
        self.execute_one: Callable[[InferRequest, ExecTiming], Any] | None = None
        self.bound_run: tuple[Callable[..., list[Any]], list[str]] | None = None
        self.mode = ""
        # Whether the model's scheduler forms batches (a dynamic or sequence batcher): set by
        # the model before it picks the mode; a batcher's batches are not held on the thread.
        self.batcher = False
        # Whether that batcher waits for a delay (a dynamic batcher's): a ``thread+batch``
        # instance then keeps batches of up to WAITED_INLINE_MAX_NS on the loop.
        self.waited = False
        self.policy_waited = False
        self._frees_later = False  # ``thread+batch``: free ``CATCH_UP_TURNS`` after a batch
        # ``depth`` batches at once: 2 where the thread takes the next itself (``TakesNext``);
        # ``pipe`` holds those handed to the thread and not yet back, oldest first (``busy``:
        # how many; a batch runs on the loop only while none is out).
        self.depth = 1
        self.pipe: deque[tuple[Model, list[Pending]]] = deque()
        # A request its policy keeps on the loop, taken while a run was out on the thread: it
        # runs on the loop when that run is back (``Model._release``), not on the thread after
        # it. With its model, which fails it if the instance is taken out first.
        self.held: tuple[Model, Pending] | None = None
        self._broken_gen = -1  # set on the thread: a run of that generation broke the session
        self._choose_mode()

    @property
    def busy(self) -> int:
        """How many batches are out on the instance's thread (``thread+next``); the hot paths
        test ``pipe`` itself."""
        return len(self.pipe)

    def allow_inline(self, allowed: bool) -> None:
        """Whether the model lets batches run on the loop at all (not with an execution
        timeout: a hung batch on the loop could not be cut off); picks the mode again."""
        self._inline_allowed = allowed
        self._choose_mode()

    def _choose_mode(self) -> None:
        """The execution mode, from what ``impl`` declares (backends/base.py): picked once per
        backend instance, never per batch (an isinstance of a runtime-checked Protocol walks
        its members on every call, about 2 us of the loop's time).
        """
        impl = self.impl
        self.execute_one = None
        if isinstance(impl, ExecutesOne) and impl.executes_one:
            self.execute_one = impl.execute_one
        self.bound_run = impl.bound_run if isinstance(impl, RunsBound) else None
        inline = (
            self._inline_allowed and isinstance(impl, RunsOnLoop) and bool(impl.thread_agnostic)
        )
        off_loop = "thread"
        self.depth = 1
        takes_next = isinstance(impl, TakesNext) and bool(impl.takes_next)
        self._frees_later = takes_next and self.batcher
        # A waited batch of a run that fills the cores: the loop read what came meanwhile, and
        # no other instance could have run beside it (``WAITED_INLINE_MAX_NS``).
        waited = (
            self._frees_later
            and self.waited
            and isinstance(impl, FillsCores)
            and bool(impl.fills_cores)
        )
        self.policy = (
            InlinePolicy(WAITED_INLINE_MAX_NS if waited else INLINE_MAX_NS) if inline else None
        )
        # its batches run on the loop only while the model's requests are all that arrive
        self.policy_waited = inline and waited
        if self._frees_later:
            off_loop = "thread+batch"
        elif takes_next and self._inline_allowed:
            # With an execution timeout (no inline) each batch has its own watch: one at a time.
            self.depth = 2
            off_loop = "thread+next"
        self.mode = f"inline|{off_loop}" if inline else off_loop

    def submit(self, model: Model, batch: list[Pending], loop: asyncio.AbstractEventLoop) -> None:
        """Run ``batch`` on this instance's thread; ``model._complete`` gets the results.

        ``thread+next`` and ``thread+batch`` hand it over with ``_hand_next`` (the loop builds
        the responses); ``thread`` builds them on the thread too.
        """
        gen = self.generation
        timeout = model.health.settings.execution_timeout_s
        if timeout > 0:
            self._watch = loop.call_later(timeout, self._timed_out, model, gen, batch)
        if (self.depth > 1 or self._frees_later) and self.runner is None:  # a runner wraps
            # ``execute``, which then runs with it on the thread
            self._hand_next(model, batch, loop, gen)
            return

        def job() -> None:
            try:
                results, timing, executed = self.run(model, [p.request for p in batch])
            except BaseException as exc:  # never lose a batch: fail it instead
                err = internal(f"instance {self.spec.name} failed: {exc}")
                results, timing, executed = [err] * len(batch), None, False
            try:
                loop.call_soon_threadsafe(
                    self.finished, model, gen, batch, results, timing, executed
                )
            except RuntimeError:  # the loop is closed: the server is gone
                return

        self._worker.work.put(job)

    def _hand_next(
        self, model: Model, batch: list[Pending], loop: asyncio.AbstractEventLoop, gen: int
    ) -> None:
        """Queue ``batch`` on the thread, which may still be running the one before
        (``thread+next``): the thread starts it as soon as that run returns, and the loop builds
        the responses of each (``_piped``) while the next runs. In ``thread+batch`` the thread
        runs one batch at a time and the loop builds its responses."""
        self.pipe.append((model, batch))
        impl = self.impl
        one = self.execute_one if len(batch) == 1 else None
        requests = [p.request for p in batch]
        timing = ExecTiming()

        def job() -> None:
            # Abandoned, or the run before broke the session: the loop fails this batch when
            # it takes the instance out.
            if gen != self.generation or gen == self._broken_gen:
                return
            timing.start_ns = time.monotonic_ns()  # when it starts, not when it was queued
            try:
                out = (
                    [one(requests[0], timing)]
                    if one is not None
                    else impl.execute(requests, timing)
                )
                err: BaseException | None = None
            except BaseException as exc:  # never lose a batch: fail it instead
                out, err = [], exc
                if isinstance(exc, BackendFatalError):
                    self._broken_gen = gen

            def collect() -> list[Any]:
                if err is not None:
                    raise err
                return out

            try:
                loop.call_soon_threadsafe(self._piped, model, gen, batch, requests, timing, collect)
            except RuntimeError:  # the loop is closed: the server is gone
                return

        self._worker.work.put(job)

    def _piped(
        self,
        model: Model,
        gen: int,
        batch: list[Pending],
        requests: list[InferRequest],
        timing: ExecTiming,
        collect: Callable[[], list[Any]],
    ) -> None:
        """On the loop: a batch queued by ``_hand_next`` ended (the thread runs them in order).
        From an abandoned thread it was failed already, when the instance was taken out."""
        if gen != self.generation:
            return
        self.pipe.popleft()
        start = timing.start_ns
        if start:  # a request held on the thread was queued until its run started, as in Triton
            for p in batch:
                p.dispatch_ns = start
        self._collected(
            model, gen, batch, requests, timing, collect, CATCH_UP_TURNS if self._frees_later else 0
        )

    def _fail_pipe(self) -> None:
        """The batches handed to an abandoned thread fail now (their results are dropped when
        they come back); the one whose result took the instance out is no longer among them."""
        pipe = self.pipe
        self.pipe = deque()
        held = self.held
        if held is not None:  # counted in ``executing`` already: fails as a batch
            self.held = None
            pipe.append((held[0], [held[1]]))
        msg = f"model instance '{self.spec.name}' was taken out of rotation"
        for model, batch in pipe:
            model.take_idle(self)  # before a completion lets the scheduler dispatch again
            model._complete(self, batch, [unavailable(msg)] * len(batch), None, False)

    def _collected(
        self,
        model: Model,
        gen: int,
        batch: list[Pending],
        requests: list[InferRequest],
        timing: ExecTiming,
        collect: Callable[[], list[Any]],
        release_turns: int = 0,
    ) -> None:
        """On the loop: a batch handed to the thread by ``_hand_next`` ended; build its
        responses. ``release_turns``: the instance frees that many loop turns later
        (``CATCH_UP_TURNS`` in ``thread+batch``)."""
        try:
            results = self._responses(model, requests, timing, collect)
        except BaseException as exc:  # never lose a batch: fail it instead
            err = internal(f"instance {self.spec.name} failed: {exc}")
            self.finished(model, gen, batch, [err] * len(batch), None, False, release_turns)
            return
        self.finished(model, gen, batch, results, timing, True, release_turns)

    def call_soon(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn`` on this instance's thread (after the current batch); its future."""
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def job() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn())
            except BaseException as exc:
                fut.set_exception(exc)

        self._worker.work.put(job)
        return fut

    def finished(
        self,
        model: Model,
        gen: int,
        batch: list[Pending],
        results: list[InferResponse | TritonliteError],
        timing: ExecTiming | None,
        executed: bool,
        release_turns: int = 0,
    ) -> None:
        """On the loop: a batch came back. A fatal error takes the instance out first."""
        if gen != self.generation:
            log.warning(
                "abandoned thread of instance %s returned; its results are dropped", self.spec.name
            )
            return
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for r in results:  # every batch: a loop, not next(generator)
            if isinstance(r, BackendFatalError):
                model.health.take_out(self, r.message)
                break
        model._complete(self, batch, results, timing, executed, release_turns)

    def _timed_out(self, model: Model, gen: int, batch: list[Pending]) -> None:
        if gen != self.generation:
            return
        self._watch = None
        timeout = model.health.settings.execution_timeout_s
        msg = (
            f"execution timed out after {timeout:g} s on model instance '{self.spec.name}'; "
            "the instance was taken out of rotation"
        )
        self.pipe.clear()  # ``thread+batch``: this batch, failed here rather than with the pipe
        model.health.take_out(self, msg)
        model._complete(self, batch, [unavailable(msg)] * len(batch), None, True)

    def abandon(self) -> None:
        """Out of rotation: results still to come from the current thread are dropped, and the
        thread closes its backend instance after its current call (on the loop)."""
        self.healthy = False
        self.generation += 1
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self._worker.stop()
        if self.pipe or self.held is not None:
            self._fail_pipe()

    def restart(self) -> None:
        """Make a new backend instance on a new thread (blocking; call on a worker thread).

        Raises what the backend raised; a closed instance closes the new one at once.
        """
        worker = _Worker(self.spec.name, self._factory)
        with self._lock:
            if self._closed:
                worker.stop()
                raise unavailable(f"instance {self.spec.name} was closed while rebuilding")
            self._worker = worker
            self.impl = worker.impl
        self._choose_mode()

    def run(
        self, model: Model, requests: list[InferRequest]
    ) -> tuple[list[InferResponse | TritonliteError], ExecTiming, bool]:
        """Execute on this instance's thread; returns (per-request result, timing, executed)."""
        timing = ExecTiming(start_ns=time.monotonic_ns())
        runner = self.runner
        if runner is None:
            results = self._responses(model, requests, timing, self.impl.execute, requests, timing)
        else:
            results = self._responses(
                model, requests, timing, runner.execute, self.impl, requests, timing
            )
        return results, timing, True

    def _responses(
        self,
        model: Model,
        requests: list[InferRequest],
        timing: ExecTiming,
        execute: Callable[..., list[Any]],
        *args: Any,
    ) -> list[InferResponse | TritonliteError]:
        """Each request's response or error from ``execute(*args)`` (the backend's results,
        or what it raised), then ``timing.end_ns``."""
        try:
            produced = execute(*args)
            if len(produced) != len(requests):
                raise internal(
                    f"model '{model.name}' returned {len(produced)} responses "
                    f"for {len(requests)} requests"
                )
        except Exception as exc:
            produced = self.failure(model, exc, len(requests))
        results: list[InferResponse | TritonliteError] = []
        for req, out in zip(requests, produced):
            if isinstance(out, TritonliteError):
                results.append(out)
                continue
            try:
                results.append(
                    build_response(model.signature, model.version_str, req, out, model.shm)
                )
            except TritonliteError as exc:
                results.append(exc)
        timing.end_ns = time.monotonic_ns()
        return results

    def failure(self, model: Model, exc: Exception, count: int) -> list[TritonliteError]:
        """What each of ``count`` requests gets when executing them raised ``exc``."""
        if isinstance(exc, BackendFatalError):
            log.error("instance %s failed fatally: %s", self.spec.name, exc.message)
            fatal = BackendFatalError(
                f"model instance '{self.spec.name}' failed and was taken out of rotation: "
                f"{exc.message}",
                exc.code,
            )
            return [fatal] * count
        if isinstance(exc, TritonliteError):
            return [exc] * count
        log.exception("instance %s failed", self.spec.name)
        return [internal(f"{type(exc).__name__}: {exc}")] * count

    def close(self) -> None:
        """Release the backend instance on its thread after the current batch; wait for it
        (not for a thread that was abandoned: it may be hung)."""
        with self._lock:
            self._closed = True
            worker = self._worker
        worker.stop()
        if self.healthy and threading.current_thread() is not worker.thread:
            worker.thread.join(timeout=60)


class Model:
    """One loaded (model, version). Created by the repository; used on the event loop."""

    def __init__(
        self,
        ctx: ModelContext,
        signature: Signature,
        backend: Backend,
        instances: list[ModelInstance],
        shm: SharedMemoryManager,
        health: HealthSettings | None = None,
        warmup: Sequence[WarmupSample] = (),
        latency: LatencyFactory | None = None,
    ) -> None:
        self.ctx = ctx
        self.name = ctx.name
        self.version = ctx.version
        self.version_str = str(ctx.version)
        self.config = ctx.config
        self.signature = signature
        self.backend = backend
        self.instances = instances
        self.shm = shm
        self.stats = ModelStats(latency() if latency is not None else None)
        # One entry per batch an instance may take now: ``depth`` of them when it is free.
        self.idle: deque[ModelInstance] = deque()
        self.executing = 0
        self._loop = asyncio.get_running_loop()
        self.scheduler = sched = make_scheduler(self)
        # A dynamic batcher that waits: how a batch's answers go out (core/runtime/pacing.py;
        # with no delay, nothing is ever paced: no decision on each batch), and whether its
        # batches may run on the loop (``_alone``).
        delay_us = int(self.config.dynamic_batching.max_queue_delay_microseconds)
        self._waited = sched if isinstance(sched, DynamicBatchScheduler) and delay_us > 0 else None
        waited = self._waited is not None
        # ``_alone``: the server's and this model's arrivals when it last asked
        self._seen = (ARRIVALS.n, 0)
        self.pacing = AnswerPacing(delay_us * 1000) if waited else None
        self.health = InstanceHealth(self, health or HealthSettings(), warmup)
        batcher = type(self.scheduler) is not DirectScheduler
        for inst in instances:
            inst.batcher = batcher
            inst.waited = waited
            inst.allow_inline(self.health.inline_ok)
        for _ in range(max((i.depth for i in instances), default=1)):
            self.idle.extend(i for i in instances if i.depth > _)
        # The single-request lane (core/runtime/lane.py): for a scheduler that may hand a
        # request straight to an instance (no batching; a dynamic batcher with no delay); each
        # request then checks what may change (queue, idle instance, its policy, the request).
        self.lane: DirectLane | None = None
        if isinstance(sched, GoesStraight) and sched.goes_straight and not signature.decoupled:
            self.lane = DirectLane(self, sched, INLINE_MAX_NS)
        self._drained: asyncio.Event | None = None
        # Response cache (core/cache.py; used only when the server has one too). The salt, part
        # of every key, keeps a reload of this version off its predecessor's entries.
        self.response_cache = bool(self.config.response_cache.enable)
        self.cache_salt = os.urandom(8)

    def output_signature(self, request: InferRequest) -> Signature:
        """The signature ``request``'s response is built with (an ensemble's adds its
        composing models' labels)."""
        return self.signature

    @property
    def ready(self) -> bool:
        for i in self.instances:  # on every request's lookup: a loop, not any(generator)
            if i.healthy:
                return True
        return False

    # -- InstancePool (scheduling/base.py): the only code that touches ``idle`` ---------------
    def has_idle(self, instance: object | None = None) -> bool:
        if instance is None:
            return bool(self.idle)
        return instance in self.idle

    def dispatch_one(self, p: Pending) -> None:
        chosen = self.idle.popleft()
        chosen.runner = None
        chosen.on_done = None
        chosen.padding = 0
        policy = chosen.policy
        if policy is None or self.signature.decoupled:
            self.run_batch(chosen, [p], True)
        elif policy.inline():  # asked once per batch, a run out or not: it counts the asks
            if not chosen.pipe:
                self._run_one(chosen, p, True)
            else:
                # A run is out on the thread (``thread+next``): this one waits for it and runs
                # on the loop as it comes back (``_release``). Handed to the thread instead, a
                # model whose first runs went there would stay there while requests keep
                # coming, the policy never asked again.
                self.executing += 1
                chosen.held = (self, p)
        else:
            self._submit(chosen, [p])

    def dispatch(
        self,
        batch: list[Pending],
        instance: object | None = None,
        runner: BatchRunner | None = None,
        done: Callable[[], None] | None = None,
        direct: bool = False,
        padding: int = 0,
    ) -> None:
        if instance is None:
            chosen = self.idle.popleft()
        else:
            assert isinstance(instance, ModelInstance)
            self.idle.remove(instance)
            chosen = instance
        chosen.runner = runner
        chosen.on_done = done
        chosen.padding = padding
        self.run_batch(chosen, batch, direct)

    def reject(
        self, request: InferRequest, future: asyncio.Future[InferResponse], err: TritonliteError
    ) -> None:
        self.record_rejection(request, err)
        future.set_exception(err)

    def take_idle(self, instance: ModelInstance) -> bool:
        """Take ``instance`` out of ``idle`` (health's probes and failover); False if it was
        not idle."""
        if instance not in self.idle:
            return False
        while instance in self.idle:  # each of its entries (``depth``)
            self.idle.remove(instance)
        return True

    def return_idle(self, instance: ModelInstance) -> None:
        """Put ``instance`` back in ``idle`` (after a probe or a rebuild); the scheduler is
        told by the caller."""
        self.idle.extend([instance] * instance.depth)

    def run_batch(
        self, instance: ModelInstance, batch: list[Pending], direct: bool = False
    ) -> None:
        """Send ``batch`` to ``instance`` (which ``dispatch`` took from ``idle``).

        A batch the instance's ``InlinePolicy`` keeps on the loop runs right here: its futures
        resolve before this returns, so a handler that awaits one next goes on without a loop
        turn; the instance goes back to ``idle`` one turn later, so the scheduler that called
        this is never re-entered -- or at once when the scheduler said ``direct`` (it handles
        an instance freed under it). One request of a model that is not decoupled takes the
        lean lane (``_run_one``). The rest go off the loop in the instance's mode and complete
        on the loop when they come back.
        """
        policy = instance.policy
        if (
            policy is not None
            and not instance.pipe
            and policy.inline()
            and (not instance.policy_waited or self._alone())
        ):
            if (
                len(batch) == 1
                and instance.runner is None
                and not instance.padding
                and not self.signature.decoupled
            ):
                self._run_one(instance, batch[0], direct)
                return
            now = time.monotonic_ns()
            requests = []
            for p in batch:
                p.dispatch_ns = now
                requests.append(p.request)
            self.executing += len(batch)
            results, timing, executed = instance.run(self, requests)
            instance.finished(
                self, instance.generation, batch, results, timing, executed, 0 if direct else 1
            )
            return
        self._submit(instance, batch)

    def _alone(self) -> bool:
        """Whether every request the server took in since this model last asked was this
        model's (a waited batch then runs on the loop: nothing else needs the loop meanwhile)."""
        waited = self._waited
        if waited is None:
            return False
        total, own = ARRIVALS.n, waited.received
        alone = total - self._seen[0] == own - self._seen[1]
        self._seen = (total, own)
        return alone

    def _submit(self, instance: ModelInstance, batch: list[Pending]) -> None:
        """Start ``batch`` off the loop in the instance's mode (it completes on the loop)."""
        now = time.monotonic_ns()
        for p in batch:
            p.dispatch_ns = now
        self.executing += len(batch)
        instance.submit(self, batch, self._loop)

    def _run_one(self, instance: ModelInstance, p: Pending, direct: bool) -> None:
        """One request, executed inline, completed and accounted with no per-batch lists:
        ``run_batch`` + ``finished`` + ``_complete`` for a batch of one, written out."""
        req = p.request
        start = time.monotonic_ns()
        p.dispatch_ns = start
        self.executing += 1
        timing = ExecTiming(start)
        res: InferResponse | TritonliteError
        one = instance.execute_one
        try:
            if one is not None:
                out = one(req, timing)
            else:
                produced = instance.impl.execute([req], timing)
                if len(produced) != 1:
                    raise internal(
                        f"model '{self.name}' returned {len(produced)} responses for 1 requests"
                    )
                out = produced[0]
            if isinstance(out, TritonliteError):
                res = out
            else:
                res = build_response(self.signature, self.version_str, req, out, self.shm)
        except Exception as exc:
            res = instance.failure(self, exc, 1)[0]
        now = timing.end_ns = time.monotonic_ns()
        self.executing -= 1
        policy = instance.policy
        if policy is not None:
            policy.record(now - start)
        stats = self.stats
        total = now - req.arrival_ns
        if req.trace is not None:
            req.trace.completed(p.enqueue_ns, timing, now)
        if isinstance(res, TritonliteError):
            if isinstance(res, BackendFatalError):
                self.health.take_out(instance, res.message)
            if isinstance(res, ErrorResponse):  # the model's own answer: a success to Triton
                stats.record_one(req.batch_size, total, start - p.enqueue_ns, timing)
            else:
                stats.record_execution(req.batch_size, timing)
                stats.record_failure(total, "BACKEND")
            if not p.future.done():
                p.future.set_exception(res)
        else:
            stats.record_one(req.batch_size, total, start - p.enqueue_ns, timing)
            if req.on_timing is not None:
                req.on_timing(timing)
            if not p.future.done():
                p.future.set_result(res)
        done = instance.on_done
        if done is not None:
            instance.on_done = None
            done()
        if direct:
            self._release(instance)
        else:
            self._loop.call_soon(self._release, instance)

    def _complete(
        self,
        instance: ModelInstance,
        batch: list[Pending],
        results: list[InferResponse | TritonliteError],
        timing: ExecTiming | None,
        executed: bool,
        release_turns: int = 0,
    ) -> None:
        self.executing -= len(batch)
        policy = instance.policy
        if timing is not None and policy is not None:
            policy.record(timing.end_ns - timing.start_ns)
        stats = self.stats
        streaming = None
        spans = None
        if executed and timing is not None:
            if self.signature.decoupled:
                streaming = _StreamingBatch(self, batch, timing)
            else:
                size = (
                    batch[0].request.batch_size
                    if len(batch) == 1
                    else sum(p.request.batch_size for p in batch)
                ) + instance.padding
                spans = stats.record_execution(size, timing)
        now = time.monotonic_ns()
        for p, res in zip(batch, results):
            req = p.request
            total = now - req.arrival_ns
            if req.trace is not None:
                req.trace.completed(p.enqueue_ns, timing, now)
            if isinstance(res, TritonliteError):
                # An error response the model answered with is a success for Triton's
                # statistics.
                if not isinstance(res, ErrorResponse):
                    stats.record_failure(total, "BACKEND" if executed else "OTHER")
                else:
                    stats.record_success(
                        total, p.dispatch_ns - p.enqueue_ns, timing, req.batch_size, spans
                    )
                continue
            if streaming is None or not streaming.defer(p):
                stats.record_success(
                    total, p.dispatch_ns - p.enqueue_ns, timing, req.batch_size, spans
                )
            if req.on_timing is not None and timing is not None:
                req.on_timing(timing)
        pacing = self.pacing
        if (
            pacing is not None
            and streaming is None
            and len(batch) > 1
            and pacing.paced(len(batch), self.scheduler.inflight() > self.executing)
        ):
            # the answers still to go count as executing (a drain waits for them)
            self.executing += len(batch)
            self._answer_paced(batch, results, 0, now)
        else:
            for p, res in zip(batch, results):
                _answer(p.future, res)
        if streaming is not None:
            streaming.executed()
        done = instance.on_done
        if done is not None:
            instance.on_done = None
            done()
        if release_turns:
            self._loop.call_soon(self._release_after, instance, release_turns)
        else:
            self._release(instance)

    def _release_after(self, instance: ModelInstance, turns: int) -> None:
        """``_release`` on the loop turn ``turns`` (this being the first) after the batch's."""
        if turns > 1:
            self._loop.call_soon(self._release_after, instance, turns - 1)
        else:
            self._release(instance)

    def _answer_paced(
        self,
        batch: list[Pending],
        results: list[InferResponse | TritonliteError],
        i: int,
        start_ns: int,
    ) -> None:
        """Answer ``batch[i]``, and the next one a loop turn later (``core/runtime/pacing.py``)."""
        self.executing -= 1
        _answer(batch[i].future, results[i])
        if i + 1 < len(batch):
            self._loop.call_soon(self._answer_paced, batch, results, i + 1, start_ns)
            return
        if self.pacing is not None:
            self.pacing.took(len(batch), time.monotonic_ns() - start_ns)
        self._check_drained()

    def _release(self, instance: ModelInstance) -> None:
        """``instance`` is done with its batch: back to ``idle``, and the next batch goes --
        first the request held for the loop while a run was out (``dispatch_one``), run here
        before the scheduler hears of the instance."""
        held = instance.held
        if held is not None and not instance.pipe and instance.healthy:
            # (out of rotation, ``abandon`` failed it with the batches on the thread)
            instance.held = None
            self.idle.append(instance)  # this batch's entry; the held one's comes back at its end
            self.executing -= 1  # counted while held; ``_run_one`` counts it again
            self._run_one(instance, held[1], True)
            return
        if instance.healthy:  # one taken out of rotation comes back when rebuilt
            self.idle.append(instance)
        self.scheduler.instance_free()
        self._check_drained()

    def _check_drained(self) -> None:
        """A ``drain`` waiting ends once nothing is queued or executing."""
        if self._drained is not None and self.scheduler.inflight() == 0:
            self._drained.set()

    def record_rejection(self, request: InferRequest, err: TritonliteError) -> None:
        reason = "REJECTED" if err.code == ErrorCode.UNAVAILABLE else "OTHER"
        self.stats.record_failure(time.monotonic_ns() - request.arrival_ns, reason)

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait until nothing is queued or executing (bounded by ``timeout_s``)."""
        if self.scheduler.inflight() == 0:
            return
        self._drained = asyncio.Event()
        try:
            await asyncio.wait_for(self._drained.wait(), timeout_s)
        except asyncio.TimeoutError:
            log.warning(
                "model %s v%s: in-flight requests did not finish in time", self.name, self.version
            )

    def stop_scheduling(self) -> None:
        """On the loop, after ``drain``: no more probes or rebuilds, and the scheduler fails
        what it still holds (its queue and futures belong to the loop)."""
        self.health.stop()
        self.scheduler.stop()

    def close(self) -> None:
        """Close instances and backend; call from a worker thread after ``stop_scheduling``."""
        for inst in self.instances:
            try:
                inst.close()
            except Exception:
                log.exception("closing instance %s", inst.spec.name)
        try:
            self.backend.close()
        except Exception:
            log.exception("closing backend of %s", self.name)


class _StreamingBatch:
    """A batch's statistics when some of its requests are decoupled streams still open after
    ``execute`` returned: as in Triton, such a request counts (success, compute_infer up to its
    final response) when its final is sent, and the batch's execution when the last one is."""

    __slots__ = ("_model", "_size", "_timing", "_open", "_last_ns", "_executed")

    def __init__(self, model: Model, batch: list[Pending], timing: ExecTiming) -> None:
        self._model = model
        self._size = sum(p.request.batch_size for p in batch)
        self._timing = timing
        self._open = 0
        self._last_ns = 0
        self._executed = False

    def defer(self, p: Pending) -> bool:
        """Count ``p`` at its final response instead of now; False if it has no open stream."""
        stream = p.request.responder
        if stream is None or not stream.when_final(lambda ns: self._final(p, ns)):
            return False
        self._open += 1
        return True

    def executed(self) -> None:
        """The batch's requests are all accounted for (counted, or deferred)."""
        self._executed = True
        self._maybe_record()

    def _stretched(self, final_ns: int) -> ExecTiming:
        t = self._timing
        infer_end = t.infer_end_ns or t.end_ns
        shift = max(0, final_ns - infer_end)
        return ExecTiming(t.start_ns, t.input_end_ns, infer_end + shift, t.end_ns + shift)

    def _final(self, p: Pending, final_ns: int) -> None:
        timing = self._stretched(final_ns)
        self._model.stats.record_success(
            timing.end_ns - p.request.arrival_ns,
            p.dispatch_ns - p.enqueue_ns,
            timing,
            p.request.batch_size,
        )
        self._open -= 1
        self._last_ns = max(self._last_ns, final_ns)
        self._maybe_record()

    def _maybe_record(self) -> None:
        if self._executed and self._open == 0:
            timing = self._stretched(self._last_ns) if self._last_ns else self._timing
            self._model.stats.record_execution(self._size, timing)
            self._executed = False  # once
