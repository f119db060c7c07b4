"""What ``triton_python_backend_utils`` is made of in both places it runs: the in-process
module (``pb_utils``) and the one an ``EXECUTION_ENV_PATH`` worker loads (``env_pb_utils``).

Constants, the dtype tables, ``TritonError`` / ``TritonModelException``, the BYTES helpers, the
config and tensor lookups, ``Tensor``, ``InferenceResponse``, ``InferenceResponseSender``, the
accessors of ``InferenceRequest``, ``Logger`` and ``MetricFamily``, as Triton's python_backend
has them. Standard library and numpy only, and nothing of tritonlite: the worker runs in an
environment where tritonlite is not importable and loads this file by path (``env_pb_utils``);
each of the two modules re-exports these names, so model code sees them on ``pb_utils``.

What differs between the two places is left to small hooks the two modules fill in: which
numpy dtypes a ``Tensor`` takes (``Tensor._dtype_code``), where a ``Logger`` line goes
(``Logger._emit``), what a new ``MetricFamily`` announces (``MetricFamily._created``), how a
response reaches the server (the sender's ``deliver``) and how a BLS request runs (each
module's ``InferenceRequest.exec``).

Over 500 lines: the worker loads this file by path, as one module, where tritonlite is not
importable; splitting it would make each loader know every piece.
"""

from __future__ import annotations

import enum
import json
import struct
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

# What each of the two pb_utils modules re-exports as Triton's API (the rest is their own).
__all__ = [
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "MetricFamily",
    "PreferredMemory",
    "Tensor",
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
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

# Config type name -> numpy type, exactly Triton's table (TYPE_BOOL is Python's bool; no BF16).
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# TRITONSERVER_DataType numbers (tritonserver.h): BOOL=1 ... BYTES=13, BF16=14.
_NUMPY_BY_CODE: tuple[Any, ...] = (
    None,
    np.bool_,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
    np.object_,
)
_BYTES_CODE = 13
# The same table keyed by dtype, for the per-tensor lookup (native byte order hits it).
_CODE_BY_DTYPE: dict[np.dtype[Any], int] = {
    np.dtype(t): code for code, t in enumerate(_NUMPY_BY_CODE) if 0 < code < _BYTES_CODE
}
TRITONSERVER_MEMORY_GPU = 0
TRITONSERVER_MEMORY_CPU = 1

# -- errors --------------------------------------------------------------------------------------


class _ErrorCode(enum.IntEnum):
    """TRITONSERVER_Error_Code (Triton shows it as ``TritonError.__ErrorCode``)."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    """An error a model puts in a response: ``TritonError(message, code=TritonError.INTERNAL)``."""

    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    __slots__ = ("_message", "_code")

    def __init__(self, message: str, code: _ErrorCode = _ErrorCode.INTERNAL) -> None:
        if not isinstance(message, str):
            raise TypeError(f"TritonError(): 'message' must be a str, got {type(message)}")
        self._message = message
        self._code = _ErrorCode(code)

    def message(self) -> str:
        return self._message

    def code(self) -> _ErrorCode:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self._code.name})"


class TritonModelException(Exception):
    """Raised by model code (and by this module) to fail the requests being executed.

    ``code`` is INTERNAL unless this module raises it for a feature the server lacks
    (UNSUPPORTED); the backend reports the batch's requests with that code.
    """

    def __init__(self, message: str = "", code: _ErrorCode = _ErrorCode.INTERNAL) -> None:
        super().__init__(message)
        self._message = message
        self.code = _ErrorCode(code)

    def message(self) -> str:
        return self._message


# -- dtypes and BYTES --------------------------------------------------------------------------


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType number -> numpy type; None when there is none (e.g. BF16)."""
    if isinstance(data_type, (int, np.integer)) and 0 < int(data_type) < len(_NUMPY_BY_CODE):
        return _NUMPY_BY_CODE[int(data_type)]
    return None


def numpy_to_triton_type(data_type: Any) -> int | None:
    """numpy dtype or type -> TRITONSERVER_DataType number; object and ``bytes_`` are BYTES."""
    if data_type == np.object_ or data_type == np.bytes_:
        return _BYTES_CODE
    for code in range(1, _BYTES_CODE):
        if data_type == _NUMPY_BY_CODE[code]:
            return code
    return None


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32``; raises KeyError for names Triton has no entry for."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def serialize_byte_tensor(input_tensor: np.ndarray[Any, Any]) -> Any:
    """Length-prefix every element (C order): ``bytes``; ``()`` when empty; None if not BYTES.

    ``bytes`` elements go as they are, anything else as ``str(x)`` in UTF-8. numpy strips
    trailing NULs from ``np.bytes_`` elements, so prefer object arrays.
    """
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    chunks = []
    for item in input_tensor.reshape(-1, order="C").tolist():
        raw = item if type(item) is bytes else str(item).encode("utf-8")
        chunks.append(struct.pack("<I", len(raw)))
        chunks.append(raw)
    return b"".join(chunks)


def deserialize_bytes_tensor(
    encoded_tensor: bytes | bytearray | memoryview,
) -> np.ndarray[Any, Any]:
    """The inverse of ``serialize_byte_tensor``: a 1-D object array of ``bytes``."""
    buf = memoryview(encoded_tensor).cast("B")
    items: list[bytes] = []
    offset = 0
    while offset < len(buf):
        (length,) = struct.unpack_from("<I", buf, offset)
        offset += 4
        if offset + length > len(buf):
            raise struct.error(f"unpack_from requires a buffer of at least {offset + length} bytes")
        items.append(bytes(buf[offset : offset + length]))
        offset += length
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out


# -- config and tensor lookups ------------------------------------------------------------------


def get_input_tensor_by_name(inference_request: Any, name: str) -> Any:
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response: Any, name: str) -> Any:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for entry in model_config.get("input", ()):
        if entry["name"] == name:
            return entry  # type: ignore[no-any-return]
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for entry in model_config.get("output", ()):
        if entry["name"] == name:
            return entry  # type: ignore[no-any-return]
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    if "model_transaction_policy" in model_config:
        return bool(model_config["model_transaction_policy"].get("decoupled", False))
    return False


# -- tensors --------------------------------------------------------------------------------


def _any_dtype_code(dtype: np.dtype[Any]) -> int | None:
    if dtype.kind in ("O", "S", "U"):
        return _BYTES_CODE
    return numpy_to_triton_type(dtype)


class Tensor:
    """A named numpy array: ``Tensor(name, numpy_array)``.

    ``_dtype_code`` (dtype -> TRITONSERVER_DataType number, None: refused) is the hook each
    module sets: the in-process one follows Triton (no ``np.str_``; bfloat16), the worker's
    takes every string kind as BYTES.
    """

    __slots__ = ("_name", "_array", "_dtype", "_owned")

    _dtype_code: Callable[[np.dtype[Any]], int | None] = staticmethod(_any_dtype_code)

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
            code = self._dtype_code(data.dtype)
            if code is None:
                raise TritonModelException("NumPy dtype is not supported.")
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        self._name = name
        self._array = data
        self._dtype = code
        self._owned = True

    @classmethod
    def _of_input(cls, name: str, data: np.ndarray[Any, Any]) -> Any:
        """A request input around the server's array (copied later only if written to)."""
        t = cls.__new__(cls)
        t._name, t._array, t._dtype, t._owned = name, data, cls._dtype_code(data.dtype) or 0, False
        return t

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        if not self._owned:
            # Inputs view the request's bytes, which may be read-only; Triton's are writable.
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

    @classmethod
    def from_dlpack(cls, name: str, tensor: Any) -> Any:
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
        return cls(name, np.from_dlpack(tensor))

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
            if not isinstance(t, Tensor):
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
    installed by the backend or the worker: it is how a response reaches the server). A
    non-decoupled model may send exactly one response (then, optionally, a flags-only FINAL)
    instead of returning it from ``execute``; it is kept in ``response`` for the backend.
    ``is_cancelled()`` is True once the client cancelled the request or went away (streams
    only; ``cancelled`` asks).
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


class _RequestFields:
    """The accessors both modules' ``InferenceRequest`` share (each keeps its own
    construction, lazy fields and ``exec``); slots of its own would clash with theirs."""

    __slots__ = ()
    _id: str
    _correlation_id: Any
    _flags: int
    _timeout: int
    _parameters: str

    def request_id(self) -> str:
        return self._id

    def correlation_id(self) -> Any:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags  # type: ignore[misc]  # a slot of the subclass

    def timeout(self) -> int:
        return self._timeout

    def parameters(self) -> str:
        return self._parameters


# -- what execute may return (the stub's rules; the in-process backend and the worker apply them)


class BatchError(Exception):
    """A malformed execute result: fails every request of the batch with this message."""


NO_RESPONSE = (
    "execute returned no response for a request and none was sent with its response sender"
)


def execute_function(model: Any, name: str) -> Callable[[list[Any]], Any]:
    """The model's ``execute``; ``name`` says which model lacks one."""
    fn = getattr(model, "execute", None)
    if fn is None:
        raise BatchError(f"Python model {name} does not implement `execute` method.")
    return fn  # type: ignore[no-any-return]


def decoupled_returned(name: str) -> BatchError:
    """A decoupled model's execute returned something other than None (or a coroutine)."""
    return BatchError(
        f"Python model '{name}' is using the decoupled "
        "mode and the execute function must return None."
    )


def execute_results(ret: Any, n: int) -> Any:
    """A non-decoupled execute's return for ``n`` requests, as one entry per request."""
    if ret is None:
        return [None] * n
    if not isinstance(ret, (list, tuple)):
        raise BatchError(f"Expected a list in the execute return, found type '{type(ret)}'.")
    if len(ret) != n:
        raise BatchError(
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            f"objects. InferenceRequest(s) size is:{n}, and InferenceResponse(s) size "
            f"is:{len(ret)}\n"
        )
    return ret


def execute_failure(
    exc: BaseException, describe: Callable[[BaseException], str]
) -> tuple[str, bool]:
    """What a failed execute reports: its text (a ``BatchError``'s own message, else what
    ``describe`` makes of the exception) and whether it is UNSUPPORTED rather than INTERNAL."""
    text = str(exc) if isinstance(exc, BatchError) else describe(exc)
    return text, isinstance(exc, TritonModelException) and exc.code == _ErrorCode.UNSUPPORTED


def returned_response(resp: Any, sent: InferenceResponse | None) -> InferenceResponse:
    """The response execute returned for a request (not None), checked: no second one if the
    model also ``send``-ed one."""
    if not isinstance(resp, InferenceResponse):
        raise BatchError(
            "Expected an 'InferenceResponse' object in the execute function return "
            f"list, found type '{type(resp)}'."
        )
    if sent is not None:
        raise BatchError(
            "Unable to send response. Non-decoupled model cannot send more than one response."
        )
    return resp


# -- logging ------------------------------------------------------------------------------------


class _LogLevel(enum.IntEnum):
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Triton's model logger; where a line goes is ``_emit(message, level)``: standard error
    here (a per-environment worker's, which the server logs), the server's log in-process
    (``pb_utils`` overrides it; the caller of a ``Logger`` method is two frames above
    ``_emit``)."""

    LogLevel = _LogLevel
    INFO = _LogLevel.INFO
    WARNING = _LogLevel.WARNING
    ERROR = _LogLevel.ERROR
    VERBOSE = _LogLevel.VERBOSE

    @classmethod
    def _emit(cls, message: str, level: _LogLevel) -> None:
        sys.stderr.write(f"{level.name}: {message}\n")
        sys.stderr.flush()

    @classmethod
    def log(cls, message: str, level: _LogLevel = _LogLevel.INFO) -> None:
        cls._emit(message, _LogLevel(level))

    @classmethod
    def log_info(cls, message: str) -> None:
        cls._emit(message, _LogLevel.INFO)

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls._emit(message, _LogLevel.WARNING)

    @classmethod
    def log_error(cls, message: str) -> None:
        cls._emit(message, _LogLevel.ERROR)

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls._emit(message, _LogLevel.VERBOSE)


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
    """``MetricFamily(name, description, kind)``; ``_created(name)`` is the hook a module sets
    to say where (or that not) the family's metrics are exported."""

    COUNTER = _MetricKind.COUNTER
    GAUGE = _MetricKind.GAUGE
    HISTOGRAM = _MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: _MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = _MetricKind(kind)
        self._metrics: dict[tuple[tuple[str, str], ...], _Metric] = {}
        self._created(name)

    @classmethod
    def _created(cls, name: str) -> None:
        return None

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
