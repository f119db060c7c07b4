"""ErrorCode -> HTTP status, once (PROTOCOL §0.3), and Triton's error body."""

from __future__ import annotations

import orjson

from tritonlite.contracts.errors import ErrorCode
from tritonlite.frontends.base.http_call import HttpResponse
from tritonlite.frontends.base.rejects import REJECTS

STATUS = {
    ErrorCode.INTERNAL: 500,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 501,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.UNKNOWN: 400,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
}


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


def error(
    status: int, message: str, headers: dict[str, str] | None = None, reason: str | None = None
) -> HttpResponse:
    """Triton's error response: ``{"error": message}`` as JSON with ``status``.

    A client error is counted and logged (rate-limited) as a rejected request under ``reason``
    (by default the one ``rejects.http_reason`` gives ``status``); a server error is not.
    """
    REJECTS.http(status, message, reason)
    return HttpResponse(status, [error_body(message)], "application/json", headers)
