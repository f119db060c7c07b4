"""The backend contract: what the core asks of a backend.

A ``Backend`` is made once per loaded (model, version) and makes one ``BackendInstance`` per
instance of the model's instance groups. Each instance lives on a thread of its own: its
``new_instance`` call, every ``execute`` and its ``close`` run on that one thread, unless the
instance declares ``RunsOnLoop`` (its execute may run on any thread, one call at a time); the
core then runs its short batches on the event loop itself. The core owns requests; an instance
borrows a batch for the duration of ``execute`` only and keeps no reference to it afterwards
(outputs it returns may view its own buffers until the responses are encoded). The optional
capabilities are protocols the core checks once per instance: ``RunsOnLoop``, ``TakesNext``
(its runs leave the interpreter lock and the loop builds their responses: ONNX Runtime on the
CPU) and ``Readiness`` (its own probe, which the model-ready endpoints consult).

Request errors and fatal errors: anything ``execute`` raises or returns fails requests and
nothing more, except ``BackendFatalError``, which says the *instance* can no longer serve (its
session or device context is gone, its interpreter state is broken). The core then takes the
instance out of rotation (it is handed no more batches), fails that batch with a message
naming the instance, and rebuilds it in the background with ``Backend.new_instance`` on a new
thread; the model stays ready while any other instance is healthy. The broken instance's
``close`` is still called, on its own thread, and may fail.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest

# One request's result: output name -> array, or the error that request alone failed with.
Outputs = dict[str, np.ndarray[Any, Any]]
Result = Outputs | TritonliteError


class ModelOutputs(dict[str, np.ndarray[Any, Any]]):
    """Outputs with what a backend adds to the response itself (a plain dict works too).

    ``parameters`` become the response's parameters. With ``partial`` true, requested outputs
    missing from the dict are left out of the response instead of failing it (the python
    backend's rule: a model returns what it returns).
    """

    __slots__ = ("parameters", "partial")

    def __init__(
        self,
        outputs: Outputs | None = None,
        *,
        parameters: dict[str, Any] | None = None,
        partial: bool = False,
    ) -> None:
        super().__init__(outputs or {})
        self.parameters: dict[str, Any] = parameters or {}
        self.partial = partial


class BackendFatalError(TritonliteError):
    """Raised by ``BackendInstance.execute``: this instance is unusable (see the module docs).

    ``message`` says what broke; the core adds the instance's name. The code is what the
    batch's requests fail with (INTERNAL unless the backend knows better).
    """

    __slots__ = ()

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INTERNAL) -> None:
        super().__init__(code, message)


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    name: str  # Triton's instance name, e.g. "add_sub_0_0"
    kind: str  # "CPU" | "GPU" | "MODEL"
    device_id: int


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What a backend needs to know about the model it serves."""

    name: str
    version: int
    model_dir: Path  # <repo>/<model>
    version_dir: Path  # <repo>/<model>/<version>
    config: Any  # the normalized pb.ModelConfig
    config_json: str  # the config as /config renders it (what model.py sees)
    # The running server as model code reaches it (BLS, model management); None: no server
    # (a backend made outside one, in a test).
    server: ServerAccess | None = None


class ServerAccess(Protocol):
    """The running server as model code on its own thread reaches it; the in-process layer
    implements it (``inprocess.InProcessServer``) and the core hands it down in ``ModelContext``.

    Every method refuses to block the server's event loop thread (``is_loop_thread`` tells).
    """

    def execute(self, request: Any, decoupled: bool) -> Any:
        """``pb_utils.InferenceRequest.exec``: a response (errors inside) or an iterator."""
        ...

    def execute_async(self, request: Any, decoupled: bool) -> Any:
        """``async_exec``: a future on the caller's running loop."""
        ...

    def call(self, factory: Callable[[Any], Awaitable[Any]]) -> Any:
        """Run ``factory(core)`` on the server's loop and wait for its result."""
        ...

    def is_loop_thread(self) -> bool: ...


class BackendInstance(Protocol):
    def execute(self, requests: list[InferRequest], timing: ExecTiming) -> list[Result]:
        """Run one batch on the calling (instance) thread; one result per request, in order.

        Inputs are already validated and reshaped per the config. Mark ``timing.input_end_ns``
        and ``timing.infer_end_ns`` (monotonic) where the phases end. Raising fails every request
        of the batch with the error.
        """
        ...

    def close(self) -> None:
        """Release the instance's resources; called once, after its last execute."""
        ...


@runtime_checkable
class RunsOnLoop(Protocol):
    """An instance whose ``execute`` may run on any thread (one call at a time), so the core
    may run its short batches on the event loop; read again when the instance is rebuilt."""

    @property
    def thread_agnostic(self) -> bool: ...


@runtime_checkable
class ExecutesOne(Protocol):
    """An instance with a lane for one request alone: ``execute_one(request, timing)`` returns
    what ``execute([request], timing)[0]`` would (its ``Result``), without the batch's lists.
    ``executes_one`` False: the lane is not available for this instance (``execute`` is used)."""

    @property
    def executes_one(self) -> bool: ...

    def execute_one(self, request: InferRequest, timing: ExecTiming) -> Result: ...


@runtime_checkable
class RunsBound(Protocol):
    """An instance whose one-request run can be called bare (the core's single-request lane,
    ``core/runtime/lane.py``): ``bound_run`` is ``(run, output_names)`` where ``run(output_names,
    feed, None)`` returns the outputs' arrays in ``output_names`` order for a feed of the
    request's own arrays, skipping the checks of the feed that the core's validation already
    made; anything it raises sends the request back to ``execute_one``, which words the error.
    None: not available for this instance."""

    @property
    def bound_run(
        self,
    ) -> tuple[Callable[[list[str], dict[str, Any], None], list[Any]], list[str]] | None: ...


@runtime_checkable
class TakesNext(Protocol):
    """An instance whose runs leave the interpreter lock and whose responses the loop may build
    from what ``execute`` returned (``takes_next``). With no batcher the core hands its thread
    one more request while one runs, and the thread starts it as the run before ends, with no
    loop turn between the two runs (``thread+next``); under a batcher the thread runs one batch
    at a time and the batcher forms the next when the instance frees (``thread+batch``)."""

    @property
    def takes_next(self) -> bool: ...


@runtime_checkable
class FillsCores(Protocol):
    """An instance whose one run already spreads over every core the process may use but the
    event loop's (``fills_cores``): a second instance's run beside it has no core of its own to
    gain from, so under a batcher that waits, the core may run its batches on the loop."""

    @property
    def fills_cores(self) -> bool: ...


@runtime_checkable
class Readiness(Protocol):
    """An instance with its own readiness probe (Triton's python ``is_ready``)."""

    def is_ready(self) -> bool: ...


class Backend(Protocol):
    def new_instance(self, spec: InstanceSpec) -> BackendInstance:
        """Make one instance; called on a loader thread. Raise TritonliteError to fail the load."""
        ...

    def close(self) -> None:
        """Release model-wide resources after every instance is closed."""
        ...
