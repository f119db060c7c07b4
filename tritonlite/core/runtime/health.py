"""Instance health: failover, rebuilds, the execution timeout and the periodic health probe.

One ``InstanceHealth`` per loaded model version, used on the event loop. An instance leaves
rotation when its backend raises ``BackendFatalError``, when a batch runs past
``--backend-execution-timeout`` or when a health probe fails. Then:

* it is handed no more batches (it leaves the model's idle instances and is not put back);
  the batch it was running fails with a message naming it; queued work goes to the other instances;
* its thread is told to stop: it closes its backend instance after the call it is in. A hung
  thread cannot be killed (Python has no way to): it is abandoned, and whatever it returns
  later is dropped;
* it is rebuilt in the background: ``Backend.new_instance`` on a new thread, then the model's
  warm-up samples, with up to ``rebuild_attempts`` tries and exponential backoff; it rejoins
  rotation once that succeeds. Each step is logged.

The model is READY while any instance is healthy (``Model.ready``); with none left it is not,
and when no rebuild is left to try, its queued requests fail with UNAVAILABLE.

The health probe: every ``probe_interval_s`` seconds, for a model with ``model_warmup``, each
instance that is idle while nothing is queued or executing runs the warm-up samples (a request
arriving meanwhile waits for at most that one run). A probe that
fails or exceeds the execution timeout takes the instance out as above. Neither probes nor
the warm-up of a rebuild count in statistics (the warm-up at load does, as in Triton).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritonlite.contracts.errors import TritonliteError, unavailable
from tritonlite.core.runtime.warmup import WarmupSample, run_samples

if TYPE_CHECKING:
    from tritonlite.core.runtime.model import Model, ModelInstance

log = logging.getLogger("tritonlite")


def _describe(exc: BaseException) -> str:
    return exc.message if isinstance(exc, TritonliteError) else f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """``execution_timeout_s``: 0 = none. ``probe_interval_s``: 0 = no probe."""

    execution_timeout_s: float = 0.0
    probe_interval_s: float = 30.0
    rebuild_attempts: int = 5
    rebuild_backoff_s: float = 0.5  # doubles after each failed attempt, up to 30 s


class InstanceHealth:
    """Takes failed instances of one model out of rotation and brings them back."""

    def __init__(
        self, model: Model, settings: HealthSettings, samples: Sequence[WarmupSample]
    ) -> None:
        self.model = model
        self.settings = settings
        self.samples = list(samples)
        # A hung batch on the event loop could not be cut off: with a timeout, batches
        # always cross to the instance thread.
        self.inline_ok = settings.execution_timeout_s <= 0
        self._loop = asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._rebuilding: set[ModelInstance] = set()
        self._stopped = False
        if self.samples and settings.probe_interval_s > 0:
            self._spawn(self._probe_loop())

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = self._loop.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- failover --------------------------------------------------------------------------
    def take_out(self, inst: ModelInstance, reason: str) -> None:
        """Out of rotation now (on the loop); a rebuild starts in the background."""
        if not inst.healthy:
            return
        model = self.model
        inst.abandon()
        inst.fault = reason
        inst.failovers += 1
        model.take_idle(inst)
        left = sum(i.healthy for i in model.instances)
        log.error(
            "model '%s' version %s: instance %s taken out of rotation (%d of %d left): %s",
            model.name,
            model.version_str,
            inst.spec.name,
            left,
            len(model.instances),
            reason,
        )
        if not self._stopped:
            self._rebuilding.add(inst)
            self._spawn(self._rebuild(inst))

    async def _rebuild(self, inst: ModelInstance) -> None:
        s = self.settings
        name = inst.spec.name
        delay = s.rebuild_backoff_s
        try:
            for attempt in range(1, s.rebuild_attempts + 1):
                if self._stopped:
                    return
                log.info(
                    "rebuilding instance %s (attempt %d of %d)", name, attempt, s.rebuild_attempts
                )
                try:
                    await asyncio.to_thread(inst.restart)
                    if self.samples:
                        await self._run_samples(inst)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    msg = _describe(exc)
                    if self._stopped:
                        return
                    if attempt == s.rebuild_attempts:
                        log.error(
                            "giving up on instance %s after %d attempts: %s", name, attempt, msg
                        )
                        break
                    log.warning(
                        "rebuilding instance %s failed: %s; next attempt in %.1f s",
                        name,
                        msg,
                        delay,
                    )
                    inst.abandon()  # stop the new thread, if one was made
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
                if self._stopped:
                    return
                inst.healthy = True
                inst.fault = ""
                inst.rebuilds += 1
                self.model.return_idle(inst)
                log.info("instance %s rebuilt and back in rotation", name)
                self.model.scheduler.instance_free()
                return
        finally:
            self._rebuilding.discard(inst)
        if not self.model.ready and not self._rebuilding:
            log.error(
                "model '%s' version %s has no healthy instance left",
                self.model.name,
                self.model.version_str,
            )
            self.model.scheduler.stop()

    async def _run_samples(self, inst: ModelInstance) -> None:
        """The warm-up samples on ``inst``'s thread, bounded by the execution timeout."""
        model = self.model
        fut = inst.call_soon(lambda: run_samples(inst.impl, self.samples, model.signature))
        timeout = self.settings.execution_timeout_s
        try:
            await asyncio.wait_for(asyncio.wrap_future(fut), timeout if timeout > 0 else None)
        except asyncio.TimeoutError:
            raise unavailable(f"warm-up timed out after {timeout:g} s") from None

    # -- probe -----------------------------------------------------------------------------
    async def _probe_loop(self) -> None:
        while not self._stopped:
            await asyncio.sleep(self.settings.probe_interval_s)
            await self.probe_once()

    async def probe_once(self) -> None:
        """Probe each idle, healthy instance once, while the model has no other work."""
        model = self.model
        for inst in list(model.instances):
            if self._stopped:
                return
            if not inst.healthy or model.scheduler.inflight() > 0 or not model.take_idle(inst):
                continue
            try:
                await self._run_samples(inst)
            except Exception as exc:
                self.take_out(inst, f"health probe failed: {_describe(exc)}")
                continue
            log.debug("health probe of instance %s passed", inst.spec.name)
            if inst.healthy and not self._stopped:
                model.return_idle(inst)
                model.scheduler.instance_free()

    # -- shutdown --------------------------------------------------------------------------
    def stop(self) -> None:
        """No more probes or rebuilds (callable from any thread)."""
        self._stopped = True

        def cancel() -> None:
            for task in list(self._tasks):
                task.cancel()

        try:
            self._loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # the loop is closed
            pass
