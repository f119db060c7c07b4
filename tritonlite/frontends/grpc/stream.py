"""ModelStreamInfer: a bidirectional stream of requests, processed concurrently.

A reader task starts one task per incoming message; each runs ``InferenceCore.infer_stream``
and puts the messages it produces on the stream's outbox, which the RPC's coroutine writes one
at a time. A request answered by a single final message (every non-decoupled request) waits
for the requests before it to have answered, so those answers leave in arrival order (Triton's
rule); a decoupled request's messages go out as the model sends them, interleaved with other
requests'. Every response carries ``triton_final_response``; a decoupled request ended with the
final flag alone gets an empty final response only when it asked with
``triton_enable_empty_final_response`` (Triton leaves that response's ``model_version`` empty).
An inference error, a decoupled model's error response included, becomes an ``error_message``
message and the stream stays open, unless the client opened the stream with
``triton_grpc_error: true`` metadata: then the stream ends with the mapped status.
Half-close finishes the started work and ends with OK; a cancelled RPC (the client cancelled
or went away) cancels every request still running, which their models see as
``is_cancelled()``.

Ownership: the RPC coroutine owns the reader and every request task; it cancels whatever is
left when it ends for any reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from tritonlite.contracts.errors import TritonliteError, internal
from tritonlite.contracts.stream import StreamResponse
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.contracts.types import RequestTrace as Trace
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.call import GrpcCall
from tritonlite.frontends.base.grpc_errors import STATUS, UNKNOWN, internal_message, rejected
from tritonlite.frontends.grpc import codec
from tritonlite.frontends.grpc.tracing import write_traced

log = logging.getLogger("tritonlite")

# What the outbox holds: a message (and its trace), an error ending the stream
# (``triton_grpc_error`` mode), or None once every request is answered.
Outgoing = tuple[bytes, Trace | None] | TritonliteError | None


def _wants_grpc_error(call: GrpcCall) -> bool:
    for key, value in call.metadata():
        if isinstance(value, bytes):
            continue  # a -bin key; triton_grpc_error is a text key
        if key == "triton_grpc_error" and value.strip().lower() == "true":
            return True
    return False


def _after(prev: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
    """Resolve ``mine`` once ``prev`` is resolved (the arrival-order chain)."""

    def resolve(_: Any = None) -> None:
        if not mine.done():
            mine.set_result(None)

    if prev is None or prev.done():
        resolve()
    else:
        prev.add_done_callback(resolve)


def _error_message(err: TritonliteError, w: Any) -> bytes:
    """An error on the stream, with the request's identity when it was parsed; counted as a
    rejection when it is the client's mistake (an error that ends the stream instead is
    counted by the transport, with the call's status)."""
    rejected(STATUS.get(err.code, UNKNOWN), err.message)
    if w is None:
        return codec.stream_error(err.message, "", "", "")
    return codec.stream_error(err.message, w.id, w.model_name, w.model_version)


def _message(item: StreamResponse, req: InferRequest, w: Any) -> bytes | None:
    """The stream message for one item; None for a flags-only final nobody asked to see."""
    if item.response is not None:
        return codec.encode_stream(item.response)
    if item.error is not None:
        return _error_message(item.error, w)
    if not req.enable_empty_final_response:
        return None
    return codec.encode_stream(InferResponse(req.model_name, "", req.id, final=True))


async def _serve_one(
    core: CoreAPI,
    data: bytes,
    grpc_error: bool,
    outbox: asyncio.Queue[Outgoing],
    prev: asyncio.Future[None] | None,
    mine: asyncio.Future[None],
    forwarded: dict[str, Any],
) -> None:
    """One streamed request: its messages go to ``outbox``; ``mine`` resolves once it has
    answered (or started streaming) and every earlier request has too."""
    w = None
    try:
        try:
            recv_start = time.monotonic_ns() if core.trace.enabled else 0
            w = codec.parse(data)
            req = codec.decode_infer(w)
            if forwarded:
                req.parameters.update(forwarded)
            recv_end = time.monotonic_ns() if recv_start else 0
        except TritonliteError as exc:
            if prev is not None:
                await prev
            outbox.put_nowait(exc if grpc_error else (_error_message(exc, w), None))
            return
        first = True
        async for item in core.infer_stream(req):
            if first:
                first = False
                if item.final and prev is not None:
                    await prev  # a single answer keeps its place in arrival order
                _after(prev, mine)
            if item.error is not None and grpc_error:
                outbox.put_nowait(item.error)
                return
            try:
                msg = _message(item, req, w)
            except TritonliteError as exc:  # e.g. a response over gRPC's size limit
                msg = _error_message(exc, w)
            if msg is None:
                continue
            trace = req.trace if item.final else None
            if trace is not None:
                trace.recv = (recv_start, recv_end)
            outbox.put_nowait((msg, trace))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("unexpected error in ModelStreamInfer")
        err = internal(internal_message(exc))
        outbox.put_nowait(err if grpc_error else (_error_message(err, w), None))
    finally:
        _after(prev, mine)


async def model_stream_infer(
    core: CoreAPI, call: GrpcCall, compression: str | None, forwarded: dict[str, Any] | None = None
) -> None:
    """Serve one ModelStreamInfer call; an error ending the stream is raised (the transport
    turns it into the call's status). ``forwarded``: the call's metadata that
    ``--grpc-header-forward-pattern`` picked, added to each request's parameters."""
    forwarded = forwarded or {}
    grpc_error = _wants_grpc_error(call)
    outbox: asyncio.Queue[Outgoing] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def read() -> None:
        prev: asyncio.Future[None] | None = None
        try:
            while (msg := await call.read()) is not None:
                mine: asyncio.Future[None] = loop.create_future()
                task = asyncio.ensure_future(
                    _serve_one(core, msg, grpc_error, outbox, prev, mine, forwarded)
                )
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                prev = mine
            while tasks:  # half-closed: finish what was started
                await asyncio.wait(set(tasks))
        finally:
            outbox.put_nowait(None)

    if compression is not None:
        call.set_compression(compression)
    reader = asyncio.ensure_future(read())
    try:
        while True:
            out = await outbox.get()
            if out is None:
                break
            if isinstance(out, TritonliteError):
                raise out
            msg, trace = out
            if trace is None:
                await call.write(msg)
            else:
                await write_traced(call, msg, trace)
        await reader  # re-raises a failure to read the request stream
    finally:
        reader.cancel()
        for task in list(tasks):
            task.cancel()
        while not outbox.empty():
            left = outbox.get_nowait()
            if isinstance(left, tuple) and left[1] is not None:
                left[1].release()  # a traced response that was never written
