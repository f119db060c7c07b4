"""ErrorCode -> gRPC status code, once (PROTOCOL §0.3).

Status codes are plain ints (the numbers of ``grpc.StatusCode`` and of the ``grpc-status``
trailer) so that handlers and the native transport never import grpc; the grpc.aio adapter
turns them back into ``grpc.StatusCode`` members.
"""

from __future__ import annotations

from tritonlite.contracts.errors import ErrorCode
from tritonlite.frontends.base.rejects import REJECTS, Rejects

# gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html)
OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16

STATUS: dict[ErrorCode, int] = {
    ErrorCode.INTERNAL: INTERNAL,
    ErrorCode.NOT_FOUND: NOT_FOUND,
    ErrorCode.UNAVAILABLE: UNAVAILABLE,
    ErrorCode.UNSUPPORTED: UNIMPLEMENTED,
    ErrorCode.INVALID_ARG: INVALID_ARGUMENT,
    ErrorCode.UNKNOWN: UNKNOWN,
    ErrorCode.ALREADY_EXISTS: ALREADY_EXISTS,
    ErrorCode.CANCELLED: CANCELLED,
}

# the reason each client-caused status counts under in tritonlite_rejected_requests_total
_REASONS = {
    INVALID_ARGUMENT: "bad_request",
    UNKNOWN: "bad_request",  # ErrorCode.UNKNOWN (HTTP 400)
    ALREADY_EXISTS: "bad_request",
    FAILED_PRECONDITION: "bad_request",
    OUT_OF_RANGE: "bad_request",
    NOT_FOUND: "not_found",
    UNIMPLEMENTED: "unsupported",
    RESOURCE_EXHAUSTED: "too_large",
    DEADLINE_EXCEEDED: "timeout",
    UNAVAILABLE: "unavailable",
    PERMISSION_DENIED: "forbidden",
    UNAUTHENTICATED: "forbidden",
}


def grpc_reason(status: int) -> str | None:
    """The reason a gRPC status counts under, or None (OK, CANCELLED, INTERNAL, DATA_LOSS)."""
    return _REASONS.get(status)


def internal_message(exc: BaseException) -> str:
    """The status message of an unexpected exception (INTERNAL), the same on every transport."""
    return f"internal error: {type(exc).__name__}: {exc}"


def rejected(
    status: int, message: str, reason: str | None = None, *, rejects: Rejects = REJECTS
) -> None:
    """Count and log (rate-limited) a call ended with ``status`` when it is a client's mistake.

    Each gRPC transport calls this once per call it ends with an error status (``reason``
    overrides the status's own, e.g. "protocol_error" for an INTERNAL the client caused).
    """
    reason = reason or grpc_reason(status)
    if reason is not None:
        rejects.note("grpc", reason, message, status)
