"""HTTP side of request tracing: stamp HTTP_SEND_START/END once the response is written.

Only traced responses come here (``core.infer`` left ``request.trace`` set); the handler has
already taken HTTP_RECV_START (handler entry, headers parsed) and HTTP_RECV_END (body read).
"""

from __future__ import annotations

from tritonlite.contracts.types import RequestTrace as Trace
from tritonlite.frontends.base.http_call import HttpResponse


def traced(response: HttpResponse, trace: Trace, recv: tuple[int, int]) -> HttpResponse:
    """Have the transport hand the finished trace to its writer once ``response`` is sent
    (``on_sent`` runs whether or not the send succeeded)."""

    def sent(start: int, end: int) -> None:
        trace.frontend("HTTP", recv, (start, end))
        trace.release()

    response.on_sent = sent
    return response
