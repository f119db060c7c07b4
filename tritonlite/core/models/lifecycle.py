"""Per (model, version) lifecycle state, with the strings the repository index reports."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritonlite.contracts.errors import ErrorCode

if TYPE_CHECKING:
    from tritonlite.core.runtime.model import Model


class ModelState(str, enum.Enum):
    """A version's state; the value is the string the repository index reports."""

    UNKNOWN = "UNKNOWN"
    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


UNKNOWN = ModelState.UNKNOWN
LOADING = ModelState.LOADING
READY = ModelState.READY
UNLOADING = ModelState.UNLOADING
UNAVAILABLE = ModelState.UNAVAILABLE

UNLOADED_REASON = "unloaded"


@dataclass(slots=True)
class VersionState:
    state: ModelState
    reason: str = ""
    model: Model | None = None

    @property
    def counts_for_readiness(self) -> bool:
        """Explicitly unloaded versions do not make the server unready (Triton's rule)."""
        return not (self.state == UNAVAILABLE and self.reason == UNLOADED_REASON)

    @property
    def is_ready(self) -> bool:
        return self.state == READY and self.model is not None and self.model.ready


# Triton's Status::CodeString.
_CODE_TEXT = {
    ErrorCode.UNKNOWN: "Unknown",
    ErrorCode.INTERNAL: "Internal",
    ErrorCode.NOT_FOUND: "Not found",
    ErrorCode.INVALID_ARG: "Invalid argument",
    ErrorCode.UNAVAILABLE: "Unavailable",
    ErrorCode.UNSUPPORTED: "Unsupported",
    ErrorCode.ALREADY_EXISTS: "Already exists",
    ErrorCode.CANCELLED: "Cancelled",
}


def failed_reason(message: str, code: ErrorCode = ErrorCode.INTERNAL) -> str:
    """A version's index reason after its load failed: Triton's ``Status::AsString``. Backends
    fail a load with INTERNAL; the server's own checks of a config with INVALID_ARG."""
    return f"{_CODE_TEXT[code]}: {message}"


def load_failed_message(name: str, reasons: dict[int, str]) -> str:
    """What an explicit load answers when versions failed (``reasons``: version -> index
    reason): Triton's text, one ``;\\n``-terminated clause per failed version, ascending."""
    return f"load failed for model '{name}': " + "".join(
        f"version {v} is at {UNAVAILABLE.value} state: {r};\n" for v, r in sorted(reasons.items())
    )
