"""``StreamResponse``: one item of a request's stream of responses, what
``CoreAPI.infer_stream`` yields for every model, decoupled or not (how the core builds the
stream: core/request/stream.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferResponse


@dataclass(slots=True)
class StreamResponse:
    """One item of ``InferenceCore.infer_stream``.

    Exactly one of ``response`` / ``error`` is set, except for a *flags-only final* (the model
    ended the request without a last response): both None and ``final`` True. ``final`` is True
    on the last item of the request and only there. An error item may be non-final: a decoupled
    model may send an error response and go on sending. ``refused`` marks the error of a
    request that never reached a model (unknown model, failed validation): front ends that
    answer those differently from model errors (HTTP generate) look at it.
    """

    response: InferResponse | None
    error: TritonliteError | None = None
    final: bool = False
    refused: bool = False
