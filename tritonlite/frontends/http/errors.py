"""ErrorCode -> HTTP status, once (PROTOCOL §0.3), and Triton's error body."""

from __future__ import annotations

import orjson
from aiohttp import web

from tritonlite.errors import ErrorCode

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


def error_response(status: int, message: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"error": message}),
        content_type="application/json",
        headers=headers,
    )
