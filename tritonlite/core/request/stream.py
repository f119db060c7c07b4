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

Response statistics (the statistics extension's ``response_stats``, Triton's per-response
statistics): the n-th item of a request, whatever it is, is its response ``n``. Its
``compute_infer`` runs from the end of the previous response (for the first: the moment the
backend called ``begin``, when ``execute`` started) to the ``send`` call, its
``compute_output`` is the building of the response on the sender's thread. A flags-only final
is an ``empty_response``; an error item, or an execution failure that ends the request, a
``fail``; a response sent after the client left, or an error with code CANCELLED, a
``cancel``. Recorded on the loop, as every statistic is.

A decoupled request is in flight until its final item, as in Triton, where a request is
released (and its inference statistics reported) only then: the model registers
``when_final`` and counts the request's success, its compute_infer and its batch's execution
when the final item is queued, not when ``execute`` returns.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tritonlite.contracts.errors import ErrorCode, TritonliteError, internal
from tritonlite.contracts.stream import StreamResponse
from tritonlite.contracts.types import InferRequest
from tritonlite.core.tensors.outputs import build_response

if TYPE_CHECKING:
    from tritonlite.core.runtime.model import Model


def is_decoupled(model: Model) -> bool:
    """The model's ``model_transaction_policy { decoupled }``."""
    return model.signature.decoupled


class ResponseStream:
    """The channel from a backend's senders (any thread) to ``infer_stream`` (the loop)."""

    __slots__ = (
        "_loop",
        "_model",
        "_request",
        "_lock",
        "_items",
        "_waiter",
        "_index",
        "_mark_ns",
        "_on_final",
        "closed",
        "cancelled",
        "sent",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, model: Model, request: InferRequest
    ) -> None:
        self._loop = loop
        self._model = model
        self._request = request
        self._lock = threading.Lock()
        self._items: deque[StreamResponse] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._index = 0  # the index the next item gets in the response statistics
        self._mark_ns = time.monotonic_ns()  # where the next response's compute_infer starts
        self._on_final: Callable[[int], None] | None = None  # see when_final
        self.closed = False  # a final item was queued: nothing more goes in
        self.cancelled = False  # the consumer went away
        self.sent = 0  # responses (not flags-only finals) queued so far

    def when_final(self, callback: Callable[[int], None]) -> bool:
        """Call ``callback(final_ns)`` on the loop once the final item is queued (``final_ns``:
        monotonic, when it was sent). False, and no call, when it already was."""
        with self._lock:
            if self.closed:
                return False
            self._on_final = callback
            return True

    # -- sending side (any thread) ----------------------------------------------------------
    def begin(self, start_ns: int) -> None:
        """The backend starts computing this request's responses at ``start_ns`` (monotonic)."""
        with self._lock:
            if self._index == 0:
                self._mark_ns = start_ns

    def send(self, result: Any, final: bool) -> bool:
        """Queue one response. ``result`` is a backend result (outputs dict, ``ModelOutputs``
        or a ``TritonliteError``) or None for a flags-only final (``final`` must be True).

        Returns False when the item was not queued: the stream is closed (a final already
        went) or cancelled. Never raises for a bad result: a response that cannot be built
        becomes an error item.
        """
        output_start = time.monotonic_ns()
        if result is None:
            item = StreamResponse(None, None, True)
            outcome = "empty_response"
        elif isinstance(result, TritonliteError):
            item = StreamResponse(None, result, final)
            outcome = "cancel" if result.code is ErrorCode.CANCELLED else "fail"
        else:
            m = self._model
            try:
                sig = m.output_signature(self._request)
                resp = build_response(sig, m.version_str, self._request, result, m.shm)
                resp.final = final
                item = StreamResponse(resp, None, final)
                outcome = "success"
            except TritonliteError as exc:
                item = StreamResponse(None, exc, final)
                outcome = "fail"
        end = time.monotonic_ns()
        # Only what a model builds has an output phase: an error or a flag goes out as is.
        output_ns = (
            end - output_start
            if result is not None and not isinstance(result, TritonliteError)
            else 0
        )
        with self._lock:
            if self.closed:
                return False
            self.closed = final
            on_final = None
            if final:
                on_final, self._on_final = self._on_final, None
            index, start = self._index, self._mark_ns
            self._index += 1
            self._mark_ns = end
            queued = not self.cancelled
            if queued:
                if item.response is not None or item.error is not None:
                    self.sent += 1
                self._items.append(item)
        infer_ns = max(0, output_start - start)
        try:
            self._loop.call_soon_threadsafe(
                self._delivered,
                index,
                outcome if queued else "cancel",
                infer_ns,
                output_ns,
                on_final,
                output_start,
            )
        except RuntimeError:  # the loop is closed: the server is gone
            return False
        return queued

    def is_cancelled(self) -> bool:
        return self.cancelled

    # -- the loop ---------------------------------------------------------------------------
    def fail(self, err: TritonliteError) -> None:
        """The execution failed: end the stream with ``err`` unless a final already went."""
        now = time.monotonic_ns()
        with self._lock:
            if self.closed:
                return
            self.closed = True
            on_final, self._on_final = self._on_final, None
            index, start = self._index, self._mark_ns
            self._index += 1
            self._items.append(StreamResponse(None, err, True))
        self._delivered(index, "fail", max(0, now - start), 0, on_final, now)

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

    def _delivered(
        self,
        index: int,
        outcome: str,
        infer_ns: int,
        output_ns: int,
        on_final: Callable[[int], None] | None = None,
        sent_ns: int = 0,
    ) -> None:
        """On the loop: count the item at ``index`` (see the module docstring), wake ``get``."""
        self._model.stats.record_response(index, outcome, infer_ns, output_ns)
        if on_final is not None:
            on_final(sent_ns)
        self._wake()

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
