"""Responses of one request as a stream: what decoupled models send, in the order sent.

A decoupled model answers a request with 0..N responses and then a final flag, from any thread,
during or after its ``execute``. ``ResponseStream`` is the channel for one request: the backend
calls ``send`` (thread-safe; the response is built on the calling thread), the core's
``infer_stream`` awaits ``get`` on the event loop. ``StreamResponse`` is the item
``InferenceCore.infer_stream`` yields for every model, decoupled or not.

Ownership: the core makes the stream, puts it on ``InferRequest.responder`` before the request
is queued, and owns the consuming side; the backend owns the sending side until it sends a
final item (or the core fails the stream because the execution failed). A stream the consumer
abandons (the client cancelled or went away) is ``cancelled``: later sends are dropped and
``is_cancelled`` says so to the model.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tritonlite.core.outputs import build_response
from tritonlite.core.types import InferRequest, InferResponse
from tritonlite.errors import TritonliteError, internal

if TYPE_CHECKING:
    from tritonlite.core.model import Model


@dataclass(slots=True)
class StreamResponse:
    """One item of ``InferenceCore.infer_stream``.

    Exactly one of ``response`` / ``error`` is set, except for a *flags-only final* (the model
    ended the request without a last response): both None and ``final`` True. ``final`` is True
    on the last item of the request and only there. An error item may be non-final: a decoupled
    model may send an error response and go on sending. ``refused`` marks the error of a
    request that never reached a model (unknown model, failed validation): front ends that
    answer those differently from model errors (HTTP generate) look at it.
    """

    response: InferResponse | None
    error: TritonliteError | None = None
    final: bool = False
    refused: bool = False


def is_decoupled(model: Model) -> bool:
    """The model's ``model_transaction_policy { decoupled }``."""
    return model.signature.decoupled


class ResponseStream:
    """The channel from a backend's senders (any thread) to ``infer_stream`` (the loop)."""

    __slots__ = ("_loop", "_model", "_request", "_lock", "_items", "_waiter", "closed",
                 "cancelled", "sent")

    def __init__(self, loop: asyncio.AbstractEventLoop, model: Model,
                 request: InferRequest) -> None:
        self._loop = loop
        self._model = model
        self._request = request
        self._lock = threading.Lock()
        self._items: deque[StreamResponse] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False  # a final item was queued: nothing more goes in
        self.cancelled = False  # the consumer went away
        self.sent = 0  # responses (not flags-only finals) queued so far

    # -- sending side (any thread) ----------------------------------------------------------
    def send(self, result: Any, final: bool) -> bool:
        """Queue one response. ``result`` is a backend result (outputs dict, ``ModelOutputs``
        or a ``TritonliteError``) or None for a flags-only final (``final`` must be True).

        Returns False when the item was not queued: the stream is closed (a final already
        went) or cancelled. Never raises for a bad result: a response that cannot be built
        becomes an error item.
        """
        if result is None:
            item = StreamResponse(None, None, True)
        elif isinstance(result, TritonliteError):
            item = StreamResponse(None, result, final)
        else:
            m = self._model
            try:
                resp = build_response(m.signature, m.version_str, self._request, result, m.shm)
                resp.final = final
                item = StreamResponse(resp, None, final)
            except TritonliteError as exc:
                item = StreamResponse(None, exc, final)
        with self._lock:
            if self.closed:
                return False
            self.closed = final
            if self.cancelled:
                return False
            if item.response is not None or item.error is not None:
                self.sent += 1
            self._items.append(item)
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: the server is gone
            return False
        return True

    def is_cancelled(self) -> bool:
        return self.cancelled

    # -- the loop ---------------------------------------------------------------------------
    def fail(self, err: TritonliteError) -> None:
        """The execution failed: end the stream with ``err`` unless a final already went."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._items.append(StreamResponse(None, err, True))
        self._wake()

    def executed(self, fut: asyncio.Future[Any]) -> None:
        """Done callback of the request's scheduler future: a failure ends the stream."""
        if fut.cancelled():
            return
        exc = fut.exception()
        if isinstance(exc, TritonliteError):
            self.fail(exc)
        elif exc is not None:
            self.fail(internal(f"{type(exc).__name__}: {exc}"))

    def cancel(self) -> None:
        """The consumer is gone: drop what is queued and whatever comes later."""
        with self._lock:
            self.cancelled = True
            self._items.clear()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def get(self) -> StreamResponse:
        """The next item, in the order sent (the loop only; one consumer)."""
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                self._waiter = self._loop.create_future()
            await self._waiter
            self._waiter = None
