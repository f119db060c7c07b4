"""A loaded model version: its instances (one thread each), scheduler and statistics.

``Model.run_batch`` is the single place a batch crosses from the event loop to an instance
thread and back; schedulers decide only which requests form a batch and when.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tritonlite.backends.base import Backend, BackendInstance, InstanceSpec, ModelContext
from tritonlite.core.outputs import build_response
from tritonlite.core.shm import SharedMemoryManager
from tritonlite.core.signature import Signature
from tritonlite.core.stats import ExecTiming, ModelStats
from tritonlite.core.types import InferRequest, InferResponse
from tritonlite.errors import ErrorCode, TritonliteError, internal

log = logging.getLogger("tritonlite")


@dataclass(slots=True)
class Pending:
    request: InferRequest
    future: asyncio.Future[InferResponse]
    enqueue_ns: int
    dispatch_ns: int = 0


class ModelInstance:
    """One backend instance and the thread that runs it; executes one batch at a time."""

    def __init__(self, spec: InstanceSpec, impl: BackendInstance) -> None:
        self.spec = spec
        self.impl = impl
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=spec.name)
        self.healthy = True

    def run(
        self, model: Model, requests: list[InferRequest]
    ) -> tuple[list[InferResponse | TritonliteError], ExecTiming, bool]:
        """Execute on this instance's thread; returns (per-request result, timing, executed)."""
        timing = ExecTiming(start_ns=time.monotonic_ns())
        executed = True
        try:
            produced = self.impl.execute(requests, timing)
            if len(produced) != len(requests):
                raise internal(
                    f"model '{model.name}' returned {len(produced)} responses "
                    f"for {len(requests)} requests"
                )
        except TritonliteError as exc:
            produced = [exc] * len(requests)
        except Exception as exc:
            log.exception("instance %s failed", self.spec.name)
            produced = [internal(f"{type(exc).__name__}: {exc}")] * len(requests)
        results: list[InferResponse | TritonliteError] = []
        for req, out in zip(requests, produced):
            if isinstance(out, TritonliteError):
                results.append(out)
                continue
            try:
                results.append(build_response(model.signature, model.version_str, req, out,
                                              model.shm))
            except TritonliteError as exc:
                results.append(exc)
        timing.end_ns = time.monotonic_ns()
        return results, timing, executed

    def close(self) -> None:
        try:
            self.impl.close()
        finally:
            self.executor.shutdown(wait=False)


class Model:
    """One loaded (model, version). Created by the repository; used on the event loop."""

    def __init__(
        self,
        ctx: ModelContext,
        signature: Signature,
        backend: Backend,
        instances: list[ModelInstance],
        shm: SharedMemoryManager,
    ) -> None:
        from tritonlite.scheduling.factory import make_scheduler

        self.ctx = ctx
        self.name = ctx.name
        self.version = ctx.version
        self.version_str = str(ctx.version)
        self.config = ctx.config
        self.signature = signature
        self.backend = backend
        self.instances = instances
        self.shm = shm
        self.stats = ModelStats()
        self.idle: deque[ModelInstance] = deque(instances)
        self.executing = 0
        self._loop = asyncio.get_running_loop()
        self.scheduler = make_scheduler(self)
        self._drained: asyncio.Event | None = None

    @property
    def ready(self) -> bool:
        return any(i.healthy for i in self.instances)

    def run_batch(self, instance: ModelInstance, batch: list[Pending]) -> None:
        """Send ``batch`` to ``instance`` (which the caller took from ``idle``)."""
        now = time.monotonic_ns()
        for p in batch:
            p.dispatch_ns = now
        self.executing += len(batch)
        fut = self._loop.run_in_executor(
            instance.executor, instance.run, self, [p.request for p in batch]
        )
        fut.add_done_callback(lambda f: self._complete(instance, batch, f))

    def _complete(self, instance: ModelInstance, batch: list[Pending], fut: asyncio.Future[Any]) -> None:
        self.executing -= len(batch)
        try:
            results, timing, executed = fut.result()
        except BaseException as exc:  # the executor itself failed
            err = internal(f"instance {instance.spec.name} failed: {exc}")
            results, timing, executed = [err] * len(batch), None, False
        stats = self.stats
        if executed and timing is not None:
            stats.record_execution(sum(p.request.batch_size for p in batch), timing)
        now = time.monotonic_ns()
        for p, res in zip(batch, results):
            total = now - p.request.arrival_ns
            if isinstance(res, TritonliteError):
                stats.record_failure(total, "BACKEND" if executed else "OTHER")
                if not p.future.done():
                    p.future.set_exception(res)
            else:
                stats.record_success(total, p.dispatch_ns - p.enqueue_ns, timing)
                if not p.future.done():
                    p.future.set_result(res)
        self.idle.append(instance)
        self.scheduler.instance_free()
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
            log.warning("model %s v%s: in-flight requests did not finish in time",
                        self.name, self.version)

    def close(self) -> None:
        """Close instances and backend; call from a worker thread after ``drain``."""
        self.scheduler.stop()
        for inst in self.instances:
            try:
                inst.close()
            except Exception:
                log.exception("closing instance %s", inst.spec.name)
        try:
            self.backend.close()
        except Exception:
            log.exception("closing backend of %s", self.name)
