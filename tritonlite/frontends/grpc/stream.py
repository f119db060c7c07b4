"""ModelStreamInfer: a bidirectional stream of requests, processed concurrently.

A reader task turns each incoming message into an inference task and queues the task in
arrival order; the RPC's coroutine writes the results from that queue, so responses leave in
the order their requests arrived (Triton's rule for non-decoupled models) while the requests
run concurrently. Every response carries ``triton_final_response``. An inference error becomes
an ``error_message`` message and the stream stays open, unless the client opened the stream
with ``triton_grpc_error: true`` metadata: then the stream ends with the mapped status.
Half-close finishes the queued work and ends with OK; cancellation cancels it.

Ownership: the RPC coroutine owns the reader and every queued task; it cancels whatever is
left when it ends for any reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc

from tritonlite.core.core import InferenceCore
from tritonlite.core.trace import Trace
from tritonlite.errors import TritonliteError, internal
from tritonlite.frontends.grpc import codec
from tritonlite.frontends.grpc.errors import STATUS
from tritonlite.frontends.grpc.tracing import write_traced

log = logging.getLogger("tritonlite")


def _wants_grpc_error(context: Any) -> bool:
    for key, value in context.invocation_metadata() or ():
        if key == "triton_grpc_error" and str(value).strip().lower() == "true":
            return True
    return False


async def _infer_one(core: InferenceCore, data: bytes,
                     grpc_error: bool) -> tuple[bytes, Trace | None]:
    """One streamed request -> its serialized ModelStreamInferResponse (errors as messages),
    and its trace when it was traced (the writer releases it)."""
    w = None
    try:
        recv_start = time.monotonic_ns() if core.trace.enabled else 0
        w = codec.parse(data)
        req = codec.decode_infer(w)
        recv_end = time.monotonic_ns() if recv_start else 0
        resp = await core.infer(req)
        if req.trace is not None:
            req.trace.recv = (recv_start, recv_end)
        return codec.encode_stream(resp), req.trace
    except TritonliteError as exc:
        if grpc_error:
            raise
        err = exc
    except Exception as exc:
        log.exception("unexpected error in ModelStreamInfer")
        err = internal(f"internal error: {type(exc).__name__}: {exc}")
        if grpc_error:
            raise err from None
    if w is None:
        return codec.stream_error(err.message, "", "", ""), None
    return codec.stream_error(err.message, w.id, w.model_name, w.model_version), None


async def model_stream_infer(
    core: InferenceCore, requests: Any, context: Any, compression: grpc.Compression | None
) -> None:
    grpc_error = _wants_grpc_error(context)
    queue: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue()

    async def read() -> None:
        try:
            async for msg in requests:
                queue.put_nowait(asyncio.ensure_future(_infer_one(core, msg, grpc_error)))
        finally:
            queue.put_nowait(None)

    if compression is not None:
        context.set_compression(compression)
    reader = asyncio.ensure_future(read())
    try:
        while True:
            task = await queue.get()
            if task is None:
                break
            try:
                out, trace = await task
            except TritonliteError as exc:
                await context.abort(STATUS[exc.code], exc.message)
            if trace is None:
                await context.write(out)
            else:
                await write_traced(context, out, trace)
        await reader  # re-raises a failure to read the request stream
    finally:
        reader.cancel()
        while not queue.empty():
            left = queue.get_nowait()
            if left is None:
                continue
            if left.done():
                if not left.cancelled():
                    left.exception()  # retrieved: an unsent error is not an unhandled one
            else:
                left.cancel()
