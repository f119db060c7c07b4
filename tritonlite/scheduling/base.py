"""The scheduler contract between a Model and the code that decides what runs when.

Ownership: ``enqueue`` takes a validated request; from then until the returned future resolves
the scheduler (and, while executing, the instance) owns it. The future resolves on the event
loop with the InferResponse or a TritonliteError.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from tritonlite.contracts.types import InferRequest, InferResponse


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
