"""Dynamic batching glue: owns requests, timers and instance dispatch around ``BatchQueue``.

``BatchQueue`` makes every batching decision over plain ints; this module maps requests to
slots and shape keys, arms one timer for the next decision or timeout, fails rejected
requests, and (with ``preserve_ordering``) releases responses in arrival order.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from tritonlite.contracts.errors import rejected, unavailable
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.scheduling import delay_hooks
from tritonlite.scheduling.base import InstancePool, Pending
from tritonlite.scheduling.batcher import REJECT_QUEUE_FULL, BatchQueue, QueuePolicy
from tritonlite.scheduling.wakeup import Wakeup

_SHAPE_KEYS_MAX = 4096


def _policy(p: Any) -> QueuePolicy:
    return QueuePolicy(
        int(p.timeout_action),
        int(p.default_timeout_microseconds) * 1000,
        bool(p.allow_timeout_override),
        int(p.max_queue_size),
    )


class DynamicBatchScheduler:
    def __init__(self, model: InstancePool) -> None:
        self._model = model
        db = model.config.dynamic_batching
        self._queue = BatchQueue(
            model.signature.max_batch_size,
            tuple(int(s) for s in db.preferred_batch_size),
            int(db.max_queue_delay_microseconds) * 1000,
            int(db.priority_levels),
            int(db.default_priority_level),
            _policy(db.default_queue_policy),
            {int(k): _policy(v) for k, v in db.priority_queue_policy.items()},
        )
        self._loop = asyncio.get_running_loop()
        self._slots: dict[int, Pending] = {}
        self._next_slot = 0
        self._wakeup = Wakeup(self._loop, self._schedule)
        self._shape_keys: dict[tuple[Any, ...], int] = {}
        self._ragged = frozenset(t.name for t in model.config.input if t.allow_ragged_batch)
        self._preserve = bool(db.preserve_ordering)
        # With no delay and nothing queued, a request that finds an instance idle is a batch
        # of its own at once: BatchQueue would decide just that, so it is not asked.
        self._direct_ok = int(db.max_queue_delay_microseconds) == 0 and not self._preserve
        # Triton's TRITONSERVER_DELAY_SCHEDULER (delay_hooks): no batch until this many requests
        # are queued, then 0 for good.
        self._hold = delay_hooks.count(delay_hooks.DELAY_ENV)
        # (``GoesStraight``: see ``at_once``) what ``_direct_ok`` is once a hold is over
        self.goes_straight = self._direct_ok
        if self._hold:
            delay_hooks.announce(model.name, "queued requests", self._hold)
            self._direct_ok = False
        self._order: deque[tuple[asyncio.Future[InferResponse], asyncio.Future[InferResponse]]] = (
            deque()
        )

    # -- intake ---------------------------------------------------------------------------------
    def at_once(self) -> bool:
        """A request would be a batch of its own at once (``enqueue``'s direct case): no delay,
        nothing queued, no ordering to keep, no test hold."""
        return self._direct_ok and not len(self._queue)

    def _shape_key(self, req: InferRequest) -> int:
        key = tuple((i.name, None if i.name in self._ragged else i.shape[1:]) for i in req.inputs)
        found = self._shape_keys.get(key)
        if found is None:
            if len(self._shape_keys) >= _SHAPE_KEYS_MAX and not self._slots:
                self._shape_keys.clear()
            found = self._shape_keys[key] = len(self._shape_keys) + 1
        return found

    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        loop = self._loop
        fut: asyncio.Future[InferResponse] = loop.create_future()
        now = time.monotonic_ns()
        model = self._model
        if self._direct_ok and model.has_idle() and not len(self._queue):
            model.dispatch([Pending(request, fut, now)], direct=True)
            return fut
        slot = self._next_slot
        self._next_slot += 1
        rc = self._queue.push(
            slot,
            request.batch_size,
            now,
            request.priority,
            request.timeout_us * 1000,
            self._shape_key(request),
        )
        if rc == REJECT_QUEUE_FULL:
            err = rejected(
                unavailable(f"Exceeds maximum queue size for model '{self._model.name}'")
            )
            self._model.reject(request, fut, err)
            return fut
        inner = fut
        if self._preserve:
            inner = loop.create_future()
            self._order.append((inner, fut))
            inner.add_done_callback(self._release_in_order)
        self._slots[slot] = Pending(request, inner, now)
        fut.add_done_callback(lambda f: self._cancelled(slot) if f.cancelled() else None)
        self._schedule()
        return fut

    def _cancelled(self, slot: int) -> None:
        if self._queue.remove(slot):
            self._slots.pop(slot, None)

    def _release_in_order(self, _: asyncio.Future[InferResponse]) -> None:
        order = self._order
        while order and order[0][0].done():
            inner, outer = order.popleft()
            if outer.done():
                continue
            exc = inner.exception() if not inner.cancelled() else None
            if inner.cancelled():
                outer.cancel()
            elif exc is not None:
                outer.set_exception(exc)
            else:
                outer.set_result(inner.result())

    # -- dispatch -------------------------------------------------------------------------------
    def instance_free(self) -> None:
        # nothing queued and no wake-up pending: a scheduling pass would decide nothing (the
        # common case once a batch that ran inline or alone frees its instance)
        if len(self._queue) or self._wakeup.armed:
            self._schedule()

    def _schedule(self) -> None:
        queue, model = self._queue, self._model
        if self._hold:
            if len(queue) < self._hold:
                return  # as Triton's delayed batcher: nothing is batched, rejected or timed out
            self._hold = 0
            self._direct_ok = self.goes_straight
        now = time.monotonic_ns()
        for slot in queue.expired(now):
            self._reject(slot)
        wait = -1
        while model.has_idle() and len(queue):
            take, wait = queue.next_batch(now)
            for slot in queue.expired(now):
                self._reject(slot)
            if take == 0:
                break
            batch = []
            for slot in queue.pop(take):
                p = self._slots.pop(slot)
                if not p.future.done():
                    batch.append(p)
            if batch:
                model.dispatch(batch)
            wait = -1
        deadline = queue.next_deadline_ns() if len(queue) else -1
        when = now + wait if wait > 0 else -1
        if deadline >= 0 and (when < 0 or deadline + 1 < when):
            when = deadline + 1
        self._wakeup.arm(when)

    def _reject(self, slot: int) -> None:
        p = self._slots.pop(slot, None)
        if p is None or p.future.done():
            return
        self._model.reject(p.request, p.future, unavailable("Request timeout expired"))

    def inflight(self) -> int:
        return len(self._slots) + self._model.executing

    @property
    def received(self) -> int:
        """How many requests have been queued so far (with a delay: every request)."""
        return self._next_slot

    def stop(self) -> None:
        self._wakeup.close()
        for slot, p in list(self._slots.items()):
            self._queue.remove(slot)
            if not p.future.done():
                p.future.set_exception(unavailable(f"model '{self._model.name}' is unloading"))
        self._slots.clear()
