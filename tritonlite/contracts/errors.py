"""Triton's error codes and the one exception type the core and backends raise.

Front ends map ``ErrorCode`` to a status once each (``frontends/base/http_errors.py``,
``frontends/base/grpc_errors.py``). This module imports no web framework.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ErrorCode(enum.Enum):
    UNKNOWN = "UNKNOWN"
    INTERNAL = "INTERNAL"
    NOT_FOUND = "NOT_FOUND"
    INVALID_ARG = "INVALID_ARG"
    UNAVAILABLE = "UNAVAILABLE"
    UNSUPPORTED = "UNSUPPORTED"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    CANCELLED = "CANCELLED"


class TritonliteError(Exception):
    """An error with a Triton code; ``message`` is what the client reads."""

    __slots__ = ("code", "message")

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"TritonliteError({self.code.name}, {self.message!r})"


class ErrorResponse(TritonliteError):
    """The model answered a request with an error response (pb_utils ``InferenceResponse(
    error=...)``): the client gets the error, yet the execution succeeded, and Triton counts
    the request as a success in its statistics."""


class Rejected(TritonliteError):
    """A scheduler refused the request as it was queued (a full queue, a sequence request
    without its START): in Triton ``InferAsync`` fails, so the request never ran. It counts as a
    refused request, as one that failed validation does (``StreamResponse.refused``)."""


def rejected(exc: TritonliteError) -> Rejected:
    """``exc`` as a ``Rejected``."""
    return Rejected(exc.code, exc.message)


def invalid_arg(message: str) -> TritonliteError:
    return TritonliteError(ErrorCode.INVALID_ARG, message)


def not_found(message: str) -> TritonliteError:
    return TritonliteError(ErrorCode.NOT_FOUND, message)


def unavailable(message: str) -> TritonliteError:
    return TritonliteError(ErrorCode.UNAVAILABLE, message)


def unsupported(message: str) -> TritonliteError:
    return TritonliteError(ErrorCode.UNSUPPORTED, message)


def internal(message: str) -> TritonliteError:
    return TritonliteError(ErrorCode.INTERNAL, message)


@dataclass(frozen=True, slots=True)
class Refusal:
    """How a caller words the refusal of a request that never reached its model, handed to
    the core's admission as data (BLS words them as Triton's python_backend does; clients get
    the core's own messages). ``{name}`` in each text is the requested model's name.

    ``unknown_model`` replaces the lookup's message (unknown or unready model), ``decoupled``
    is the message for a unary call to a decoupled model, and ``prefix`` goes before every
    refusal's message: those two, a stopping server's, validation's and the scheduler
    intake's (``Rejected``). The code stays the core's.
    """

    unknown_model: str
    decoupled: str
    prefix: str = ""

    def word(self, exc: TritonliteError, name: str, message: str | None = None) -> TritonliteError:
        """``exc`` as this caller words it (``message`` in place of its own when given)."""
        text = message.replace("{name}", name) if message is not None else exc.message
        return TritonliteError(exc.code, self.prefix.replace("{name}", name) + text)
