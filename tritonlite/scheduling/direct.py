"""The scheduler for models without dynamic batching: each request runs alone.

Requests wait in arrival order and go to the next idle instance, so a model with several
instances runs that many requests at once.

Every dispatch is ``direct``: a request that runs inline on the loop gives its instance back
before ``dispatch`` returns, and the pass that dispatched it (``_pass``) sees the instance idle
again and hands it the next queued request at once -- no loop turn between two requests. The
``instance_free`` such a release calls from inside the pass only notes that the pass goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from tritonlite.contracts.errors import unavailable
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.scheduling.base import InstancePool, Pending


class DirectScheduler:
    def __init__(self, model: InstancePool) -> None:
        self._model = model
        self._queue: deque[Pending] = deque()
        self._loop = asyncio.get_running_loop()
        self._passing = False  # inside ``instance_free``'s dispatch loop
        self.goes_straight = True  # (``GoesStraight``: every request, when an instance is idle)

    def at_once(self) -> bool:
        return not self._queue and not self._passing

    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        fut: asyncio.Future[InferResponse] = self._loop.create_future()
        p = Pending(request, fut, time.monotonic_ns())
        model = self._model
        if not self._queue and not self._passing and model.has_idle():
            self._passing = True  # an instance freed by this run is idle on return
            try:
                model.dispatch_one(p)
            finally:
                self._passing = False
            if self._queue:  # queued by a handler the run resolved: serve it now
                self.instance_free()
            return fut
        self._queue.append(p)
        self.instance_free()
        return fut

    def instance_free(self) -> None:
        if self._passing:
            return  # the pass running now sees the instance idle on its next check
        model = self._model
        queue = self._queue
        self._passing = True
        try:
            while queue and model.has_idle():
                p = queue.popleft()
                if p.future.done():  # cancelled while queued
                    continue
                model.dispatch_one(p)
        finally:
            self._passing = False

    def inflight(self) -> int:
        return len(self._queue) + self._model.executing

    def stop(self) -> None:
        while self._queue:
            p = self._queue.popleft()
            if not p.future.done():
                p.future.set_exception(unavailable(f"model '{self._model.name}' is unloading"))
