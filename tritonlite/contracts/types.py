"""The request and response types that flow between front ends, core, schedulers and backends.

Tensors are numpy arrays throughout; a front end's decoded arrays are views over its request
bytes (no copies). BYTES tensors are object arrays of ``bytes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Params = dict[str, Any]  # values: bool | int | float | str
# A response made of its outputs alone (``CoreAPI.infer_plain``): the model's name, its
# version, and each output's (name, wire datatype, array), in the model's output order.
PlainAnswer = tuple[str, str, list[tuple[str, str, np.ndarray[Any, Any]]]]


class RequestTrace(Protocol):
    """A sampled request's trace (the core's ``core/trace.py`` ``Trace``): stamps, then one
    ``release`` by whoever finished the response hands it to the trace writer."""

    recv: tuple[int, int]  # the front end's receive span (monotonic ns), set before sending

    def stamp(self, name: str, ns: int) -> None: ...
    def completed(self, enqueue_ns: int, timing: Any, now_ns: int) -> None: ...
    def end(self, ns: int) -> None: ...
    def frontend(self, protocol: str, recv: tuple[int, int], send: tuple[int, int]) -> None: ...
    def release(self) -> None: ...


class Responder(Protocol):
    """Where the responses of a decoupled model's request go (the core's ``ResponseStream``):
    a backend sends from any thread; the core consumes on the loop."""

    def begin(self, start_ns: int) -> None: ...
    def send(self, result: Any, final: bool) -> bool: ...
    def is_cancelled(self) -> bool: ...
    def when_final(self, callback: Callable[[int], None]) -> bool: ...


@dataclass(slots=True)
class ShmRef:
    """A slice of a registered shared-memory region named by a request."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(slots=True)
class InferInput:
    name: str
    datatype: str  # wire name, e.g. "FP32", "BYTES"
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any] | None = None  # None until resolved from shared memory
    shm: ShmRef | None = None
    parameters: Params = field(default_factory=dict)


@dataclass(slots=True)
class RequestedOutput:
    name: str
    binary: bool | None = None  # HTTP only: None = use the request's binary_data_output default
    classification: int = 0
    shm: ShmRef | None = None
    parameters: Params = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    model_name: str
    model_version: int = -1  # -1: the server picks (highest ready version)
    id: str = ""
    inputs: list[InferInput] = field(default_factory=list)
    outputs: list[RequestedOutput] | None = None  # None: every output of the model
    parameters: Params = field(default_factory=dict)  # custom parameters, passed to the model
    sequence_id: int | str = 0
    sequence_start: bool = False
    sequence_end: bool = False
    priority: int = 0
    timeout_us: int = 0
    binary_data_output: bool = False  # HTTP: default for outputs not listed in ``outputs``
    enable_empty_final_response: bool = False
    # HTTP raw binary request: the bytes of the model's single input (shape taken from config)
    raw_input: memoryview | None = None
    # Set by the core: when the request arrived (monotonic ns) and its batch size (1 if unbatched).
    arrival_ns: int = 0
    batch_size: int = 1
    # Ensemble steps: called with the ExecTiming of the batch that ran this request.
    on_timing: Any = None
    trace: RequestTrace | None = None  # set by the core when this request is traced
    # Set by the core for a request of a decoupled model: where its responses go (core/stream.py)
    responder: Responder | None = None
    # Set by a decoder that rebuilt this request from a header it decoded before (the HTTP
    # binary template): what that header's requests proved valid, per signature, shared by
    # them (``validate.prepare`` reads and fills it); None: validated from scratch.
    proven: dict[int, tuple[Any, int]] | None = None

    def input(self, name: str) -> InferInput | None:
        for inp in self.inputs:
            if inp.name == name:
                return inp
        return None


@dataclass(slots=True)
class InferOutput:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any] | None  # None when written to shared memory
    shm: ShmRef | None = None
    binary: bool = True  # HTTP: send in the binary tail (True) or as JSON ``data`` (False)


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[InferOutput] = field(default_factory=list)
    parameters: Params = field(default_factory=dict)
    final: bool = True  # the last response for its request (decoupled models send several)
