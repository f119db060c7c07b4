"""``triton_python_backend_utils`` inside an ``EXECUTION_ENV_PATH`` worker (stdlib + numpy only).

``env_worker.py`` loads this file under Triton's module name before it imports the model,
so ``import triton_python_backend_utils as pb_utils`` works there as in Triton. It covers what a
model needs for ``initialize`` / ``execute`` / ``finalize``: ``Tensor``, ``InferenceRequest``,
``InferenceResponse``, the non-decoupled ``InferenceResponseSender``, ``TritonError``,
``TritonModelException``, ``Logger`` (lines go to the server's log), the config and tensor
lookups, the dtype tables and BYTES helpers, ``get_model_dir``. Names, signatures and messages
follow Triton's python_backend (and tritonlite's in-process ``backends/python/pb_utils.py``).

BLS (``InferenceRequest.exec`` / ``async_exec``) goes to the server, which runs it through its
core as it runs in-process models' BLS. Not available in a worker (each raises
``TritonModelException`` with code UNSUPPORTED): ``load_model`` / ``unload_model`` /
``is_model_ready``. Decoupled senders work, ``is_cancelled()`` included (it asks the server).
``MetricFamily`` metrics are kept in memory only.

The parts it shares with the in-process module (constants, dtype tables, errors, BYTES
helpers, lookups) are ``pb_core.py``, loaded by path beside this file. Over 500 lines: the worker
loads this file by path as one module named ``triton_python_backend_utils``, in an environment
where tritonlite is not importable.
"""

from __future__ import annotations

import enum
import json
import sys
from typing import TYPE_CHECKING, Any

import numpy as np


def _load_core() -> Any:
    """``pb_core.py`` beside this file, by path (tritonlite is not importable in the worker)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).with_name("pb_core.py")
    spec = importlib.util.spec_from_file_location("triton_python_backend_utils_core", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_CORE_NAMES = (
    "TRITON_STRING_TO_NUMPY",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TritonError",
    "TritonModelException",
    "_BYTES_CODE",
    "_ErrorCode",
    "_NUMPY_BY_CODE",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
)

if TYPE_CHECKING:
    from tritonlite.backends.python.pb_core import (
        _BYTES_CODE,
        TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
        TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        TritonError,
        TritonModelException,
        _ErrorCode,
        numpy_to_triton_type,
    )
else:
    _core = _load_core()
    globals().update({n: getattr(_core, n) for n in _CORE_NAMES})

_model_dir: str | None = None  # set by the worker before the model is imported
_bls: Any = None  # the worker's BLS call: (request, decoupled) -> response(s)


def _unsupported(what: str) -> TritonModelException:
    return TritonModelException(
        f"{what} is not supported for a model that runs in its own EXECUTION_ENV_PATH environment",
        _ErrorCode.UNSUPPORTED,
    )


# -- dtypes, BYTES, lookups ----------------------------------------------------------------


def _dtype_code(dtype: Any) -> int | None:
    if dtype.kind in ("O", "S", "U"):
        return _BYTES_CODE
    return numpy_to_triton_type(dtype)


def get_input_tensor_by_name(inference_request: Any, name: str) -> Tensor | None:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor  # type: ignore[no-any-return]
    return None


def get_model_dir() -> str:
    if _model_dir is None:
        raise TritonModelException("get_model_dir() must be called from a Python model")
    return _model_dir


# -- tensors, requests, responses ------------------------------------------------------------


class Tensor:
    """A named numpy array: ``Tensor(name, numpy_array)``."""

    def __init__(self, name: str, data: Any) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Tensor(): 'name' must be a str, got {type(name)}")
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if not isinstance(data, np.ndarray):
            raise TypeError(f"Tensor(): expected a numpy.ndarray, got {type(data)}")
        code = _dtype_code(data.dtype)
        if code is None:
            raise TritonModelException("NumPy dtype is not supported.")
        self._name = name
        self._array = np.ascontiguousarray(data)
        self._dtype = code

    @classmethod
    def _of_input(cls, name: str, data: Any) -> Tensor:
        t = cls.__new__(cls)
        t._name, t._array, t._dtype = name, data, _dtype_code(data.dtype) or 0
        return t

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> Any:
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
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if not hasattr(tensor, "__dlpack__"):
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have a "
                "`__dlpack__` attribute"
            )
        return Tensor(name, np.from_dlpack(tensor))

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


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
                "Expect parameters values to have type bool/int/float/str, found type "
                f"{type(value)}"
            )
    return json.dumps(parameters)


class InferenceResponse:
    """``InferenceResponse(output_tensors=[], error=None, parameters=None)``."""

    def __init__(
        self,
        output_tensors: Any = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        tensors = list(output_tensors) if output_tensors is not None else []
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"InferenceResponse(): output_tensors must hold pb_utils.Tensor, got {type(t)}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(
                f"InferenceResponse(): error must be a pb_utils.TritonError, got {type(error)}"
            )
        self._parameters_json = _parameters_json(parameters)
        self._tensors = tensors
        self._error = error
        self._parameters = dict(parameters) if parameters else {}

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters_json


class InferenceResponseSender:
    """``request.get_response_sender()``: ``send(response=None, flags=0)``, Triton's rules.

    A decoupled model's sender may be called any number of times, from any thread, during or
    after ``execute``; each call is delivered at once, in call order (``deliver``, installed
    by the worker). A non-decoupled model may send exactly one response (then, optionally, a
    flags-only FINAL) instead of returning it from ``execute``; it is kept in ``response``.
    """

    def __init__(self, decoupled: bool = False, deliver: Any = None, cancelled: Any = None) -> None:
        import threading

        self._decoupled = decoupled
        self._deliver = deliver
        self._cancelled = cancelled
        self._closed = False
        self._sent = 0
        self._lock = threading.Lock()
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
            self._deliver(response, final)  # under the lock: deliveries keep the call order

    def is_cancelled(self) -> bool:
        """True once the client cancelled the request or went away (decoupled streams)."""
        return bool(self._cancelled()) if self._cancelled is not None else False

    def _close(self) -> bool:
        """Refuse further sends (the execution failed); True if it was still open."""
        with self._lock:
            was_open = not self._closed
            self._closed = True
            return was_open


class InferenceTrace:
    def __init__(self, context: str | None = None) -> None:
        self._context = context

    def get_context(self) -> str | None:
        return self._context or None


class PreferredMemory:
    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceRequest:
    """A request the model executes; constructing one for BLS works, ``exec`` does not here."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: Any = 0,
        inputs: Any = None,
        requested_output_names: Any = None,
        model_name: str | None = None,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: Any = None,
    ) -> None:
        self._id = request_id
        self._correlation_id = correlation_id
        self._inputs = list(inputs or [])
        self._requested = set(requested_output_names or [])
        self._model_name = model_name
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._trace = trace or InferenceTrace()
        self._parameters = (
            parameters if isinstance(parameters, str) else _parameters_json(parameters)
        )
        self._sender = InferenceResponseSender()

    @classmethod
    def _of_server(cls, r: dict[str, Any], inputs: list[Tensor]) -> InferenceRequest:
        req = cls.__new__(cls)
        req._id = r["id"]
        req._correlation_id = r["correlation_id"]
        req._inputs = inputs
        req._requested = set(r["requested"])
        req._model_name = r["model_name"]
        req._model_version = r["model_version"]
        req._flags = r["flags"]
        req._timeout = r["timeout"]
        req._trace = InferenceTrace()
        req._parameters = r["parameters"]
        req._sender = InferenceResponseSender()
        return req

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._id

    def correlation_id(self) -> Any:
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
        return self._trace

    def requested_output_names(self) -> set[str]:
        return self._requested

    def get_response_sender(self) -> InferenceResponseSender:
        return self._sender

    def is_cancelled(self) -> bool:
        return self._sender.is_cancelled()

    def set_release_flags(self, flags: int) -> None:
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise _unsupported("Request rescheduling")

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on ``model_name`` through the server and wait: an
        ``InferenceResponse`` (errors in it) or, with ``decoupled``, an iterator of them."""
        if _bls is None:
            raise _unsupported("BLS (InferenceRequest.exec) outside a model")
        return _bls(self, bool(decoupled))

    def async_exec(self, decoupled: bool = False) -> Any:
        """``exec`` without blocking the model's event loop: an awaitable."""
        import asyncio

        return asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)


def load_model(model_name: str, config: str = "", files: Any = None) -> None:
    raise _unsupported("load_model")


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    raise _unsupported("unload_model")


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    raise _unsupported("is_model_ready")


# -- logging and metrics ---------------------------------------------------------------------


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Triton's model logger; lines go to the worker's stderr, which the server logs."""

    LogLevel = _LogLevel
    INFO = _LogLevel.INFO
    WARNING = _LogLevel.WARNING
    ERROR = _LogLevel.ERROR
    VERBOSE = _LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: _LogLevel = _LogLevel.INFO) -> None:
        sys.stderr.write(f"{_LogLevel(level).name}: {message}\n")
        sys.stderr.flush()

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, _LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, _LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, _LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, _LogLevel.VERBOSE)


class _Metric:
    def __init__(self) -> None:
        self._value = 0.0

    def increment(self, value: float) -> None:
        self._value += value

    def set(self, value: float) -> None:
        self._value = float(value)

    def observe(self, value: float) -> None:
        self._value += value

    def value(self) -> float:
        return self._value


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self._metrics: dict[Any, _Metric] = {}

    def Metric(
        self,
        labels: dict[str, str] | None = None,  # noqa: N802 (Triton's name)
        buckets: list[float] | None = None,
    ) -> _Metric:
        key = tuple(sorted((labels or {}).items()))
        return self._metrics.setdefault(key, _Metric())
