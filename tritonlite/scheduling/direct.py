"""The scheduler for models without dynamic batching: each request runs alone.

Requests wait in arrival order and go to the next idle instance, so a model with several
instances runs that many requests at once.
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

    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        fut: asyncio.Future[InferResponse] = self._loop.create_future()
        self._queue.append(Pending(request, fut, time.monotonic_ns()))
        self.instance_free()
        return fut

    def instance_free(self) -> None:
        model = self._model
        while self._queue and model.has_idle():
            p = self._queue.popleft()
            if p.future.done():  # cancelled while queued
                continue
            model.dispatch([p])

    def inflight(self) -> int:
        return len(self._queue) + self._model.executing

    def stop(self) -> None:
        while self._queue:
            p = self._queue.popleft()
            if not p.future.done():
                p.future.set_exception(unavailable(f"model '{self._model.name}' is unloading"))
