"""``triton_python_backend_utils``: what a Triton Python-backend ``model.py`` imports.

Importing the python backend installs this module as ``sys.modules["triton_python_backend_utils"]``,
so ``import triton_python_backend_utils as pb_utils`` in an unchanged ``model.py`` resolves here.
Names, signatures, return types and error messages follow Triton's python_backend (the pure-Python
``triton_python_backend_utils.py`` plus the classes its C++ stub injects: ``Tensor``,
``InferenceRequest``, ``InferenceResponse``, ``TritonError``, ``TritonModelException``, ``Logger``,
``MetricFamily``, ``PreferredMemory``), with three deliberate widenings: ``np.str_`` arrays are
accepted as BYTES outputs, response parameters may also be floats, and execute may return a tuple.

Tensors are numpy arrays in this process, so there are no shared-memory copies: an input's
``as_numpy()`` is the request's own array (copied once, on first use, only when it is read-only,
because Triton hands models writable arrays), and an output array is encoded after ``execute``
returns, so a model must not change it afterwards. Only CPU tensors exist here.

BLS (``InferenceRequest.exec`` / ``async_exec``) runs in this process through the server's core
(``inprocess/bls.py``, reached through the ``ServerAccess`` the python backend attaches from
its ``ModelContext``); ``load_model``, ``unload_model`` and ``is_model_ready`` call the core's
model management, under the server's model-control mode. Unlike Triton, BLS also works from
``initialize``, and BLS requests take ``parameters`` as a JSON object string too, with float
values.
``MetricFamily`` metrics work in memory but are not exported on ``/metrics`` yet.

The names it shares with the environment worker's module (``env_pb_utils``) come from
``pb_core``. Over 500 lines: this is the one module a ``model.py`` imports as ``triton_python_backend_utils``
(one module in Triton too), so every name Triton puts there lives here, grouped by section
(errors, dtypes, lookups, tensors, requests and responses, model management, logging, metrics).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonlite.backends.base import ServerAccess
from tritonlite.backends.python import pb_core
from tritonlite.backends.python.model_config import ModelConfig
from tritonlite.backends.python.pb_core import (
    _BYTES_CODE,
    _CODE_BY_DTYPE,
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceResponse,
    InferenceResponseSender,
    InferenceTrace,
    PreferredMemory,
    TritonError,
    TritonModelException,
    _ErrorCode,
    _LogLevel,
    _parameters_json,
    deserialize_bytes_tensor,
    get_input_config_by_name,
    get_output_config_by_name,
    get_output_tensor_by_name,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
    using_decoupled_model_transaction_policy,
)
from tritonlite.contracts.errors import TritonliteError, unavailable

if TYPE_CHECKING:
    from tritonlite.contracts.types import InferRequest as CoreRequest

__all__ = [
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "TRITON_STRING_TO_NUMPY",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_model_dir",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

# (the TRITONSERVER_* constants, dtype tables, errors, BYTES helpers: pb_core.py)
_BF16_CODE = 14
_log = logging.getLogger("tritonlite.python")


# -- errors ----------------------------------------------------------------------------------


def _unsupported(what: str) -> TritonModelException:
    return TritonModelException(f"{what} is not supported yet", _ErrorCode.UNSUPPORTED)


# -- dtypes and BYTES --------------------------------------------------------------------------


def _dtype_code(dtype: np.dtype[Any]) -> int | None:
    code = _CODE_BY_DTYPE.get(dtype)
    if code is not None:
        return code
    if dtype.kind in ("O", "S"):  # Triton refuses np.str_ ("U") arrays
        return _BYTES_CODE
    code = numpy_to_triton_type(dtype)
    if code is None and dtype.name == "bfloat16":
        return _BF16_CODE
    return code


# -- config and tensor lookups ------------------------------------------------------------------


def get_input_tensor_by_name(inference_request: Any, name: str) -> Tensor | None:
    if type(inference_request) is InferenceRequest:
        return inference_request._input(name)
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor  # type: ignore[no-any-return]
    return None


# -- the running model (set by the backend on the threads that run model code) -----------------


class _Runtime(threading.local):
    model_dir: str | None = None  # the version directory of the model this thread runs


_runtime = _Runtime()


def _no_caller() -> str | None:
    return None


# Finds the model whose code is calling, from a thread the backend did not set up; the backend
# installs it (the import isolation knows which files belong to which model).
_caller_model_dir: Callable[[], str | None] = _no_caller


def get_model_dir() -> str:
    """The version directory (``<repo>/<model>/<version>``) of the calling model."""
    found = _runtime.model_dir or _caller_model_dir()
    if found is None:
        raise TritonModelException("get_model_dir() must be called from a Python model")
    return found


# -- tensors, responses, senders (pb_core.py) -----------------------------------------------


class Tensor(pb_core.Tensor):
    """A named numpy array: ``Tensor(name, numpy_array)``."""

    __slots__ = ()
    _dtype_code = staticmethod(_dtype_code)


# -- requests ---------------------------------------------------------------------------------


class InferenceRequest(pb_core._RequestFields):
    """A request the model executes, or (BLS) one it sends to another model with ``exec``.

    The BLS form is ``InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...],
    model_version=-1, request_id="", correlation_id=0, flags=0, timeout=0, preferred_memory=...,
    trace=..., parameters=None)``: ``inputs`` a list of ``Tensor``, ``requested_output_names``
    a list of str (empty: every output), ``correlation_id`` an unsigned int or a str, ``flags``
    the SEQUENCE_START / SEQUENCE_END bits, ``timeout`` in microseconds (0: none),
    ``parameters`` a dict of bool/int/float/str values (or its JSON string). Outputs always
    arrive in CPU memory, whatever ``preferred_memory`` asks for.
    """

    __slots__ = (
        "_id",
        "_correlation_id",
        "_inputs",
        "_by_name",
        "_requested",
        "_model_name",
        "_model_version",
        "_flags",
        "_timeout",
        "_parameters",
        "_trace",
        "_sender",
        "_release_flags",
        "_core",
        "_bls",
    )

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Iterable[Tensor] | None = None,
        requested_output_names: Iterable[str] | None = None,
        model_name: str | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if inputs is None or requested_output_names is None or model_name is None:
            raise TypeError(
                "InferenceRequest(): 'inputs', 'requested_output_names' and "
                "'model_name' are required"
            )
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException("Correlation ID must be integer or string")
        tensors, names = _bls_arguments(inputs, requested_output_names, locals())
        if isinstance(correlation_id, int) and not 0 <= correlation_id < 1 << 64:
            raise TritonModelException(
                f"Correlation ID must be an unsigned 64-bit integer or a string, got "
                f"{correlation_id}"
            )
        if preferred_memory is not None and not isinstance(preferred_memory, PreferredMemory):
            raise TypeError(
                f"InferenceRequest(): 'preferred_memory' must be a "
                f"pb_utils.PreferredMemory, got {type(preferred_memory)}"
            )
        self._parameters = _bls_parameters_json(parameters)
        self._id = request_id
        self._correlation_id: int | str = correlation_id
        self._inputs: list[Tensor] | None = tensors
        self._by_name: dict[str, Tensor] | None = None
        self._requested: Iterable[str] = names
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._trace: InferenceTrace | None = trace or InferenceTrace()
        self._sender: InferenceResponseSender | None = InferenceResponseSender()
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._core: CoreRequest | None = None
        self._bls = True

    @classmethod
    def _of_core(
        cls, req: CoreRequest, default_outputs: Iterable[str], model_name: str, model_version: int
    ) -> InferenceRequest:
        """The request a model's execute sees for one of the core's requests; it asks for
        ``default_outputs`` (the model's outputs) unless the request names its own.

        What most models never ask for (the input list, the trace, the response sender, the
        requested names as a set) is made on first use: this runs once per request.
        """
        r = cls.__new__(cls)
        r._core = req
        r._inputs = None
        r._by_name = None
        r._id = req.id
        r._correlation_id = req.sequence_id
        r._requested = default_outputs  # unless ``req`` names its own (requested_output_names)
        r._model_name = model_name
        r._model_version = model_version
        r._flags = (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START if req.sequence_start else 0) | (
            TRITONSERVER_REQUEST_FLAG_SEQUENCE_END if req.sequence_end else 0
        )
        r._timeout = req.timeout_us
        # Triton hands the model the request's custom parameters as compact JSON.
        r._parameters = (
            json.dumps(req.parameters, separators=(",", ":")) if req.parameters else "{}"
        )
        r._trace = None
        r._sender = None
        r._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        r._bls = False
        return r

    def inputs(self) -> list[Tensor]:
        if self._inputs is None:
            assert self._core is not None
            self._inputs = [
                Tensor._of_input(i.name, i.data) for i in self._core.inputs if i.data is not None
            ]
        return self._inputs

    def _input(self, name: str) -> Tensor | None:
        """``get_input_tensor_by_name``: the first input called ``name``."""
        by_name = self._by_name
        if by_name is None:
            by_name = {}
            for t in self.inputs():
                by_name.setdefault(t._name, t)
            self._by_name = by_name
        return by_name.get(name)

    def trace(self) -> InferenceTrace:
        if self._trace is None:
            self._trace = InferenceTrace()
        return self._trace

    def requested_output_names(self) -> set[str]:
        names = self._requested
        if type(names) is not set:
            core = self._core  # a core request's own outputs are named on first use
            if core is not None and core.outputs is not None:
                names = {o.name for o in core.outputs}
            else:
                names = set(names)
            self._requested = names
        return names

    def get_response_sender(self) -> InferenceResponseSender:
        if self._sender is None:
            self._sender = InferenceResponseSender()
        return self._sender

    def is_cancelled(self) -> bool:
        return self.get_response_sender().is_cancelled()

    def set_release_flags(self, flags: int) -> None:
        self._release_flags = flags

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` and wait: an ``InferenceResponse`` (errors in it,
        never raised) or, with ``decoupled``, an iterator of them."""
        return _access().execute(self, bool(decoupled))

    def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` without blocking: an awaitable, from a running (``async def execute``) loop."""
        return _access().execute_async(self, bool(decoupled))


def _bls_arguments(
    inputs: Any, requested: Any, args: dict[str, Any]
) -> tuple[list[Tensor], set[str]]:
    """Type checks of the BLS constructor (pybind's in Triton: TypeError, as there)."""
    tensors = list(inputs) if isinstance(inputs, (list, tuple)) else None
    if tensors is None or not all(isinstance(t, Tensor) for t in tensors):
        raise TypeError("InferenceRequest(): 'inputs' must be a list of pb_utils.Tensor")
    if not isinstance(requested, (list, tuple, set, frozenset)) or not all(
        isinstance(n, str) for n in requested
    ):
        raise TypeError("InferenceRequest(): 'requested_output_names' must be a list of str")
    checks = (
        ("request_id", str),
        ("model_name", str),
        ("model_version", int),
        ("flags", int),
        ("timeout", int),
    )
    for key, kind in checks:
        value = args[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TypeError(
                f"InferenceRequest(): '{key}' must be {kind.__name__}, got {type(value)}"
            )
    for key in ("flags", "timeout"):
        if args[key] < 0:
            raise TypeError(f"InferenceRequest(): '{key}' must not be negative, got {args[key]}")
    return tensors, set(requested)


def _bls_parameters_json(parameters: Any) -> str:
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters)
        except ValueError as exc:
            raise TritonModelException(f"parameters is not valid JSON: {exc}") from None
        if not isinstance(parameters, dict):
            raise TritonModelException("parameters must be a JSON object")
    return _parameters_json(parameters)


def _instance_name() -> str:
    """The calling model instance (its thread is named after it; ``-asyncio``: its own loop)."""
    return threading.current_thread().name.removesuffix("-asyncio")


def _manage(what: str, factory: Callable[[Any], Any]) -> Any:
    server = _access()
    if server.is_loop_thread():
        raise TritonModelException(f"{what}: not allowed on the server's event loop thread")
    try:
        return server.call(factory)
    except TritonliteError as exc:
        raise TritonModelException(
            f"{what}: Failed to process the request for model '{_instance_name()}', message: "
            f"{exc.message}"
        ) from None


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load (or reload) ``model_name``, optionally with a JSON ``config`` and ``files``
    (``{"file:<version>/<name>": bytes}``); needs ``--model-control-mode=explicit``."""
    if not isinstance(model_name, str) or not isinstance(config, str):
        raise TypeError("load_model(): 'model_name' and 'config' must be str")
    params: dict[str, Any] = {"config": config} if config else {}
    for key, content in (files or {}).items():
        if not isinstance(key, str) or not key.startswith("file:"):
            raise TritonModelException(
                f"Failed to load model: file keys must start with 'file:', got {key!r}"
            )
        if not isinstance(content, (bytes, bytearray)):
            raise TypeError(f"load_model(): the content of {key!r} must be bytes")
        params[key] = bytes(content)
    _manage("Failed to load model", lambda core: core.load_model(model_name, params))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload ``model_name`` (and, if asked, its dependents); needs explicit model control."""
    if not isinstance(model_name, str):
        raise TypeError("unload_model(): 'model_name' must be str")
    _manage(
        "Failed to unload model",
        lambda core: core.unload_model(model_name, bool(unload_dependents)),
    )


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether ``model_name`` (``model_version``; "" lets the server pick) is ready; False
    for a model the server does not know."""
    if not isinstance(model_name, str) or not isinstance(model_version, str):
        raise TypeError("is_model_ready(): 'model_name' and 'model_version' must be str")
    if model_version != "" and not (model_version.isdigit() and int(model_version) > 0):
        raise TritonModelException(
            f"Failed to check model readiness: Failed to process the request for model "
            f"'{_instance_name()}', message: failed to get model version from specified "
            f"version string '{model_version}' (details: stol), version should be an integral "
            "value > 0"
        )
    version = int(model_version) if model_version else -1

    async def ready(core: Any) -> bool:
        try:
            return bool(core.model_ready(model_name, version))
        except Exception:
            return False

    return bool(_manage("Failed to check model readiness", ready))


# -- logging and metrics ----------------------------------------------------------------------

_PY_LEVEL = {
    _LogLevel.INFO: logging.INFO,
    _LogLevel.WARNING: logging.WARNING,
    _LogLevel.ERROR: logging.ERROR,
    _LogLevel.VERBOSE: logging.DEBUG,
}


class Logger(pb_core.Logger):
    """Triton's model logger; lines go to the server log with the caller's file and line."""

    @classmethod
    def _emit(cls, message: str, level: _LogLevel) -> None:
        _log.log(_PY_LEVEL.get(level, logging.INFO), "%s", message, stacklevel=3)


class MetricFamily(pb_core.MetricFamily):
    """Custom metrics, kept in memory: not exported on /metrics yet (said once, in the log)."""

    _warned = False

    @classmethod
    def _created(cls, name: str) -> None:
        if not MetricFamily._warned:
            MetricFamily._warned = True
            _log.warning(
                "pb_utils.MetricFamily '%s': custom metrics are kept in memory but are "
                "not exported on /metrics by this server yet",
                name,
            )


class _NoServer:
    """``ServerAccess`` outside a running server (a backend made by a test): every call is
    refused as UNAVAILABLE, BLS requests with an error response."""

    def execute(self, request: Any, decoupled: bool) -> Any:
        error = TritonError(_NOT_RUNNING)  # BLS errors are INTERNAL, whatever the cause
        response = InferenceResponse(error=error)
        return iter([response]) if decoupled else response

    def execute_async(self, request: Any, decoupled: bool) -> Any:
        import asyncio

        out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        out.set_result(self.execute(request, decoupled))
        return out

    def call(self, factory: Callable[[Any], Any]) -> Any:
        raise unavailable(_NOT_RUNNING)

    def is_loop_thread(self) -> bool:
        return False


_NOT_RUNNING = "the inference server is not running in this process"
_server: ServerAccess = _NoServer()


def attach_server(server: ServerAccess | None) -> None:
    """Where ``exec``, ``async_exec`` and model management go from now on (the python backend
    attaches its ``ModelContext.server`` when it loads a model; one server per process)."""
    global _server
    if server is not None:
        _server = server


def _access() -> ServerAccess:
    return _server


def _install() -> None:
    """Make ``import triton_python_backend_utils`` resolve to this module."""
    sys.modules["triton_python_backend_utils"] = sys.modules[__name__]
