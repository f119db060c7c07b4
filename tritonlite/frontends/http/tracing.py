"""HTTP side of request tracing: send a traced response and stamp HTTP_SEND_START/END.

Only traced responses come here (``core.infer`` left ``request.trace`` set); the handler has
already taken HTTP_RECV_START (handler entry, headers parsed) and HTTP_RECV_END (body read).
"""

from __future__ import annotations

import time

from aiohttp import web

from tritonlite.core.trace import Trace


async def send_traced(request: web.BaseRequest, response: web.Response, trace: Trace,
                      recv: tuple[int, int]) -> web.Response:
    """Write ``response`` now (aiohttp accepts a handler's already-prepared response), then
    hand the finished trace to its writer, whether or not the send succeeded."""
    start = time.monotonic_ns()
    try:
        await response.prepare(request)
        await response.write_eof()
    finally:
        trace.frontend("HTTP", recv, (start, time.monotonic_ns()))
        trace.release()
    return response
