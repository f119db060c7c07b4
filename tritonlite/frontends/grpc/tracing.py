"""gRPC side of request tracing: GRPC_WAITREAD_START/END and GRPC_SEND_START/END.

grpc.aio hands a servicer the whole request message, so the read stamps are taken around
parsing it (handler entry to decoded request), not around the wait for the client's bytes as
in tritonserver's completion-queue loop. A unary response's send ends when the RPC completes
(its done callback, on the event loop); a streamed one's when ``context.write`` returns.
"""

from __future__ import annotations

import time
from typing import Any

from tritonlite.core.trace import Trace


def trace_unary(context: Any, trace: Trace, recv: tuple[int, int]) -> None:
    """The response is about to be returned: release the trace when the RPC is done."""
    start = time.monotonic_ns()

    def done(_: Any) -> None:
        trace.frontend("GRPC", recv, (start, time.monotonic_ns()))
        trace.release()

    context.add_done_callback(done)


async def write_traced(context: Any, message: bytes, trace: Trace) -> None:
    """Write one streamed response of a traced request (``trace.recv`` already set)."""
    start = time.monotonic_ns()
    try:
        await context.write(message)
    finally:
        trace.frontend("GRPC", trace.recv, (start, time.monotonic_ns()))
        trace.release()
