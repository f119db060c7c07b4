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

import enum
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonlite.backends.base import ServerAccess
from tritonlite.backends.python.model_config import ModelConfig
from tritonlite.backends.python.pb_core import (
    _BYTES_CODE,
    _NUMPY_BY_CODE,
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    TritonError,
    TritonModelException,
    _ErrorCode,
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
# The same table keyed by dtype, for the per-tensor lookup (native byte order hits it).
_CODE_BY_DTYPE: dict[np.dtype[Any], int] = {
    np.dtype(t): code for code, t in enumerate(_NUMPY_BY_CODE) if 0 < code < _BYTES_CODE
}
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


# -- tensors --------------------------------------------------------------------------------


class Tensor:
    """A named numpy array: ``Tensor(name, numpy_array)``."""

    __slots__ = ("_name", "_array", "_dtype", "_owned")

    def __init__(self, name: str, data: np.ndarray[Any, Any]) -> None:
        # Every output of every response comes through here: the common case in one test.
        code = _CODE_BY_DTYPE.get(data.dtype) if type(data) is np.ndarray else None
        if code is None or type(name) is not str or not name:
            if not isinstance(name, str):
                raise TypeError(f"Tensor(): 'name' must be a str, got {type(name)}")
            if name == "":
                raise TritonModelException("Tensor name cannot be an empty string.")
            if not isinstance(data, np.ndarray):
                raise TypeError(f"Tensor(): expected a numpy.ndarray, got {type(data)}")
            code = _dtype_code(data.dtype)
            if code is None:
                raise TritonModelException("NumPy dtype is not supported.")
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        self._name = name
        self._array = data
        self._dtype = code
        self._owned = True

    @classmethod
    def _of_input(cls, name: str, data: np.ndarray[Any, Any]) -> Tensor:
        """A request input around the core's array (copied later only if written to)."""
        t = cls.__new__(cls)
        t._name, t._array, t._dtype, t._owned = name, data, _dtype_code(data.dtype) or 0, False
        return t

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        if not self._owned:
            # Inputs view the request's bytes, which are read-only; Triton's are writable.
            if not self._array.flags.writeable:
                self._array = self._array.copy()
            self._owned = True
        return self._array

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def triton_dtype(self) -> int:
        return self._dtype

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        if self._dtype == _BYTES_CODE:
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self.as_numpy().__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU, device 0

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A tensor from a DLPack capsule or an object with ``__dlpack__`` (CPU memory only)."""
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if type(tensor).__name__ == "PyCapsule":
            tensor = _Capsule(tensor)
        elif not hasattr(tensor, "__dlpack__"):
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have a "
                "`__dlpack__` attribute"
            )
        device = tensor.__dlpack_device__()
        if int(device[0]) not in (1, 3):  # kDLCPU, kDLCUDAHost
            raise TritonModelException(
                f"DLPack tensors on device type {int(device[0])} are not supported by this "
                "server: only CPU tensors are",
                _ErrorCode.UNSUPPORTED,
            )
        return Tensor(name, np.from_dlpack(tensor))

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


class _Capsule:
    """Gives a bare DLPack capsule the protocol ``np.from_dlpack`` expects."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        import ctypes

        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        ptr = get(self._capsule, b"dltensor")
        # DLManagedTensor starts with DLTensor {void* data; DLDevice {int32 type; int32 id}; ...}
        dev = (ctypes.c_int32 * 2).from_address(ptr + ctypes.sizeof(ctypes.c_void_p))
        return int(dev[0]), int(dev[1])


# -- requests, responses, senders -------------------------------------------------------------


def _parameters_json(parameters: Any) -> str:
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, float, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/float/str, found type "
                f"{type(value)}"
            )
    return json.dumps(parameters)


class PreferredMemory:
    """Where BLS outputs should go; accepted for compatibility (every tensor is on the CPU)."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    def __init__(self, context: str | None = None) -> None:
        self._context = context

    def get_context(self) -> str | None:
        return self._context or None


class InferenceResponse:
    """``InferenceResponse(output_tensors=[], error=None, parameters=None)``."""

    __slots__ = ("_tensors", "_error", "_parameters", "_parameters_json")

    def __init__(
        self,
        output_tensors: Iterable[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        tensors = list(output_tensors) if output_tensors is not None else []
        for t in tensors:
            if type(t) is not Tensor and not isinstance(t, Tensor):
                raise TypeError(
                    f"InferenceResponse(): output_tensors must hold pb_utils.Tensor, got {type(t)}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f"InferenceResponse(): error must be a pb_utils.TritonError, got {type(error)}"
            )
        self._tensors = tensors
        self._error = error
        if parameters is None:  # the common case: no JSON to check or render
            self._parameters_json = "{}"
            self._parameters: dict[str, Any] = {}
        else:
            self._parameters_json = _parameters_json(parameters)
            self._parameters = dict(parameters) if parameters else {}

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters_json


def _never() -> bool:
    return False


class InferenceResponseSender:
    """``request.get_response_sender()``: ``send(response=None, flags=0)``.

    Triton's rules and messages: ``flags`` is 0 or ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``;
    flags 0 needs a response; nothing may be sent after the FINAL flag. A decoupled model's
    sender may be called any number of times, from any thread, during or after ``execute``;
    each call is delivered at once, in call order (``deliver(response or None, final)``,
    installed by the backend). A non-decoupled model may send exactly one response (then,
    optionally, a flags-only FINAL) instead of returning it from ``execute``; it is kept in
    ``response`` for the backend. ``is_cancelled()`` is True once the client cancelled the
    request or went away (streams only).
    """

    __slots__ = ("_decoupled", "_closed", "_sent", "_lock", "_deliver", "_cancelled", "response")

    def __init__(
        self,
        decoupled: bool = False,
        deliver: Callable[[InferenceResponse | None, bool], None] | None = None,
        cancelled: Callable[[], bool] = _never,
    ) -> None:
        self._decoupled = decoupled
        self._closed = False
        self._sent = 0
        self._lock = threading.Lock()
        self._deliver = deliver
        self._cancelled = cancelled
        self.response: InferenceResponse | None = None

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL and flags != 0:
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(f"send(): expected a pb_utils.InferenceResponse, got {type(response)}")
        final = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent > 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model "
                        "cannot send more than one response."
                    )
                if response is None and self._sent == 0:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model "
                        "cannot send complete final before sending a "
                        "response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self._closed = final
            self._sent += 1
            if self._deliver is None:
                if response is not None:
                    self.response = response
                return
            # Under the lock, so that deliveries keep the order of the calls.
            self._deliver(response, final)

    def is_cancelled(self) -> bool:
        return self._cancelled()

    def _close(self) -> bool:
        """Refuse further sends (the execution failed); True if it was still open."""
        with self._lock:
            was_open = not self._closed
            self._closed = True
            return was_open


class InferenceRequest:
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

    def request_id(self) -> str:
        return self._id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return self._parameters

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


# -- logging ------------------------------------------------------------------------------------


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_PY_LEVEL = {
    _LogLevel.INFO: logging.INFO,
    _LogLevel.WARNING: logging.WARNING,
    _LogLevel.ERROR: logging.ERROR,
    _LogLevel.VERBOSE: logging.DEBUG,
}


class Logger:
    """Triton's model logger; lines go to the server log with the caller's file and line."""

    LogLevel = _LogLevel
    INFO = _LogLevel.INFO
    WARNING = _LogLevel.WARNING
    ERROR = _LogLevel.ERROR
    VERBOSE = _LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _LogLevel = _LogLevel.INFO) -> None:
        _log.log(_PY_LEVEL.get(_LogLevel(level), logging.INFO), "%s", message, stacklevel=2)

    @staticmethod
    def log_info(message: str) -> None:
        _log.info("%s", message, stacklevel=2)

    @staticmethod
    def log_warn(message: str) -> None:
        _log.warning("%s", message, stacklevel=2)

    @staticmethod
    def log_error(message: str) -> None:
        _log.error("%s", message, stacklevel=2)

    @staticmethod
    def log_verbose(message: str) -> None:
        _log.debug("%s", message, stacklevel=2)


# -- custom metrics (kept in memory; not exported on /metrics yet) ------------------------------


class _MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class _Metric:
    def __init__(self, kind: _MetricKind, buckets: list[float] | None) -> None:
        self._kind = kind
        self._value = 0.0
        self._lock = threading.Lock()
        self._buckets = sorted(buckets) if buckets is not None else None
        self._counts = [0] * (len(self._buckets) + 1) if self._buckets is not None else []

    def increment(self, value: float) -> None:
        if self._kind == _MetricKind.HISTOGRAM:
            raise TritonModelException(
                "Failed to increment metric value. Metric kind "
                "HISTOGRAM does not support increment."
            )
        if self._kind == _MetricKind.COUNTER and value < 0:
            raise TritonModelException(
                "Failed to increment metric value. Counter metrics cannot be decremented."
            )
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        if self._kind != _MetricKind.GAUGE:
            raise TritonModelException("Failed to set metric value. Only GAUGE metrics can be set.")
        with self._lock:
            self._value = float(value)

    def observe(self, value: float) -> None:
        if self._kind != _MetricKind.HISTOGRAM or self._buckets is None:
            raise TritonModelException(
                "Failed to observe metric value. Only HISTOGRAM metrics can observe."
            )
        with self._lock:
            self._value += value
            i = next((k for k, b in enumerate(self._buckets) if value <= b), len(self._buckets))
            self._counts[i] += 1

    def value(self) -> float:
        if self._kind == _MetricKind.HISTOGRAM:
            raise TritonModelException(
                "Failed to get metric value. Metric kind HISTOGRAM does not support value()."
            )
        return self._value


class MetricFamily:
    COUNTER = _MetricKind.COUNTER
    GAUGE = _MetricKind.GAUGE
    HISTOGRAM = _MetricKind.HISTOGRAM
    _warned = False

    def __init__(self, name: str, description: str, kind: _MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = _MetricKind(kind)
        self._metrics: dict[tuple[tuple[str, str], ...], _Metric] = {}
        if not MetricFamily._warned:
            MetricFamily._warned = True
            _log.warning(
                "pb_utils.MetricFamily '%s': custom metrics are kept in memory but are "
                "not exported on /metrics by this server yet",
                name,
            )

    def Metric(
        self,
        labels: dict[str, str] | None = None,  # noqa: N802 (Triton's name)
        buckets: list[float] | None = None,
    ) -> _Metric:
        if self.kind == _MetricKind.HISTOGRAM and buckets is None:
            raise TritonModelException("Missing required buckets for histogram metric.")
        key = tuple(sorted((labels or {}).items()))
        metric = self._metrics.get(key)
        if metric is None:
            metric = self._metrics[key] = _Metric(self.kind, buckets)
        return metric


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
