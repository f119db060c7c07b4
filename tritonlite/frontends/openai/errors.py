"""OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}`` with a status."""

from __future__ import annotations

import orjson

from tritonlite.contracts.errors import ErrorCode, TritonliteError

_TYPES = {400: "invalid_request_error", 404: "invalid_request_error", 413: "invalid_request_error"}


class OpenAIError(Exception):
    """A request answered with an OpenAI error object and HTTP ``status``."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    def body(self) -> bytes:
        kind = _TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )
        return orjson.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": kind,
                    "param": self.param,
                    "code": self.code,
                }
            }
        )


def bad(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    """400: the request body is not one tritonlite can answer."""
    return OpenAIError(400, message, param, code)


def unknown_model(name: str) -> OpenAIError:
    return OpenAIError(404, f"The model '{name}' does not exist", "model", "model_not_found")


_REFUSED = {
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED: 400,
    ErrorCode.INVALID_ARG: 400,
    ErrorCode.ALREADY_EXISTS: 400,
    ErrorCode.CANCELLED: 400,
}


def from_core(exc: TritonliteError, refused: bool) -> OpenAIError:
    """The error the core gave: a request it ``refused`` keeps its status (400, 404, 503); a
    model that failed while running it is 500 (503 while the server is unavailable)."""
    if refused:
        status = _REFUSED.get(exc.code, 500)
    else:
        status = 503 if exc.code is ErrorCode.UNAVAILABLE else 500
    code = "model_not_found" if exc.code is ErrorCode.NOT_FOUND else None
    return OpenAIError(status, exc.message, None, code)
