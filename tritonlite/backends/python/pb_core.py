"""What ``triton_python_backend_utils`` is made of in both places it runs: the in-process
module (``pb_utils``) and the one an ``EXECUTION_ENV_PATH`` worker loads (``env_pb_utils``).

Constants, the dtype tables, ``TritonError`` / ``TritonModelException``, the BYTES helpers and
the config and tensor lookups, as Triton's python_backend has them. Standard library and numpy
only, and nothing of tritonlite: the worker runs in an environment where tritonlite is not
importable and loads this file by path (``env_pb_utils``); each of the two modules re-exports
these names, so model code sees them on ``pb_utils``.
"""

from __future__ import annotations

import enum
import struct
from typing import Any

import numpy as np

__all__ = [
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
