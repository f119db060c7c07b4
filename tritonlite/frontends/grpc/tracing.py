"""gRPC side of request tracing: GRPC_WAITREAD_START/END and GRPC_SEND_START/END.

A transport hands a handler the whole request message, so the read stamps are taken around
parsing it (handler entry to decoded request), not around the wait for the client's bytes as
in tritonserver's completion-queue loop. A unary response's send ends when the call has
ended (``GrpcCall.add_done_callback``, on the event loop); a streamed one's when
``call.write`` returns.
"""

from __future__ import annotations

import time

from tritonlite.contracts.types import RequestTrace as Trace
from tritonlite.frontends.base.call import GrpcCall


def trace_unary(call: GrpcCall, trace: Trace, recv: tuple[int, int]) -> None:
    """The response is about to be returned: release the trace when the call is done."""
    start = time.monotonic_ns()

    def done() -> None:
        trace.frontend("GRPC", recv, (start, time.monotonic_ns()))
        trace.release()

    call.add_done_callback(done)


async def write_traced(call: GrpcCall, message: bytes, trace: Trace) -> None:
    """Write one streamed response of a traced request (``trace.recv`` already set)."""
    start = time.monotonic_ns()
    try:
        await call.write(message)
    finally:
        trace.frontend("GRPC", trace.recv, (start, time.monotonic_ns()))
        trace.release()
