"""Tensor datatypes: wire name <-> config TYPE_* <-> numpy dtype, sizes, BYTES (de)serialization.

The wire uses ``BYTES`` where model configs say ``TYPE_STRING``. BYTES tensors are numpy object
arrays of ``bytes``; on the wire each element is a 4-byte little-endian length and the raw bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonlite import kernels
from tritonlite.contracts.errors import TritonliteError, invalid_arg

try:  # BF16 needs ml_dtypes; without it BF16 tensors are refused with a clear error.
    import ml_dtypes

    _BF16: np.dtype[Any] | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _BF16 = None

# wire name -> (config enum name, numpy dtype or None for BYTES, element size or 0 for BYTES)
_TABLE: dict[str, tuple[str, np.dtype[Any] | None, int]] = {
    "BOOL": ("TYPE_BOOL", np.dtype(np.bool_), 1),
    "UINT8": ("TYPE_UINT8", np.dtype("<u1"), 1),
    "UINT16": ("TYPE_UINT16", np.dtype("<u2"), 2),
    "UINT32": ("TYPE_UINT32", np.dtype("<u4"), 4),
    "UINT64": ("TYPE_UINT64", np.dtype("<u8"), 8),
    "INT8": ("TYPE_INT8", np.dtype("<i1"), 1),
    "INT16": ("TYPE_INT16", np.dtype("<i2"), 2),
    "INT32": ("TYPE_INT32", np.dtype("<i4"), 4),
    "INT64": ("TYPE_INT64", np.dtype("<i8"), 8),
    "FP16": ("TYPE_FP16", np.dtype("<f2"), 2),
    "FP32": ("TYPE_FP32", np.dtype("<f4"), 4),
    "FP64": ("TYPE_FP64", np.dtype("<f8"), 8),
    "BYTES": ("TYPE_STRING", None, 0),
}
if _BF16 is not None:
    _TABLE["BF16"] = ("TYPE_BF16", _BF16, 2)

WIRE_NAMES = frozenset(_TABLE) | {"BF16"}
_CONFIG_TO_WIRE = {cfg: wire for wire, (cfg, _, _) in _TABLE.items()}
_CONFIG_TO_WIRE["TYPE_BF16"] = "BF16"
_NUMPY_TO_WIRE = {dt: wire for wire, (_, dt, _) in _TABLE.items() if dt is not None}
NATIVE_WIRE = _NUMPY_TO_WIRE  # numpy dtype (native byte order) -> wire name: wire_name_of's lookup


def is_wire_name(name: str) -> bool:
    return name in WIRE_NAMES


def config_to_wire(config_type: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES``."""
    try:
        return _CONFIG_TO_WIRE[config_type]
    except KeyError:
        raise invalid_arg(f"unsupported data type '{config_type}'") from None


def wire_to_config(wire: str) -> str:
    return _TABLE[wire][0] if wire in _TABLE else "TYPE_BF16"


def numpy_dtype(wire: str) -> np.dtype[Any]:
    """The numpy dtype of a wire datatype; object for BYTES."""
    if wire == "BYTES":
        return np.dtype(object)
    entry = _TABLE.get(wire)
    if entry is None or entry[1] is None:
        if wire == "BF16":
            raise invalid_arg("BF16 tensors need the ml_dtypes package on the server")
        raise invalid_arg(f"invalid datatype '{wire}'")
    return entry[1]


def element_size(wire: str) -> int:
    """Bytes per element; 0 for BYTES (variable)."""
    entry = _TABLE.get(wire)
    return entry[2] if entry is not None else 2


def wire_name_of(array: np.ndarray[Any, Any]) -> str:
    """The wire datatype of a numpy array (object / bytes_ / str_ arrays are BYTES)."""
    wire = _NUMPY_TO_WIRE.get(array.dtype)  # native byte order: one lookup
    if wire is not None:
        return wire
    kind = array.dtype.kind
    if kind in ("O", "S", "U"):
        return "BYTES"
    dt = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    wire = _NUMPY_TO_WIRE.get(dt)
    if wire is None:
        raise invalid_arg(f"unsupported numpy dtype {array.dtype}")
    return wire


def num_elements(shape: tuple[int, ...] | list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def deserialize_bytes(buf: memoryview | bytes, count: int | None = None) -> np.ndarray[Any, Any]:
    """Parse length-prefixed BYTES elements into an object array of ``bytes``.

    With ``count``, exactly that many elements must fill ``buf``; errors are INVALID_ARG.
    """
    try:
        return kernels.decode_bytes(buf, count)
    except kernels.BytesFormatError as exc:
        raise invalid_arg(f"malformed BYTES tensor: {exc}") from None


def as_bytes_element(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview, np.bytes_)):
        return bytes(value)
    if isinstance(value, np.str_):
        return str(value).encode("utf-8")
    return str(value).encode("utf-8")


def serialize_bytes(array: np.ndarray[Any, Any]) -> bytes:
    """Length-prefix every element of a BYTES array, row-major."""
    return kernels.encode_bytes(array)


def tensor_bytes(array: np.ndarray[Any, Any]) -> memoryview:
    """The wire bytes of a tensor: raw little-endian C-order data, or serialized BYTES."""
    if array.dtype.kind in ("O", "S", "U"):
        return memoryview(serialize_bytes(array))
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    flat = np.ascontiguousarray(array).reshape(-1)
    return memoryview(flat.view(np.uint8))  # type: ignore[arg-type]


def shape_error(shape: tuple[int, ...] | list[int], what: str) -> TritonliteError:
    """INVALID_ARG for a shape no array can have (numpy's limits: at most 64 dimensions, at
    most 2**63 - 1 elements counting only the non-zero dimensions)."""
    dims = list(shape)
    text = str(dims) if len(dims) <= 16 else str(dims[:16])[:-1] + ", ...]"
    return invalid_arg(f"unsupported shape {text} for {what}: too many dimensions or elements")


def empty(wire: str, shape: tuple[int, ...], what: str) -> np.ndarray[Any, Any]:
    """An uninitialized tensor (a zero-element input sent without data)."""
    try:
        return np.empty(shape, dtype=numpy_dtype(wire))
    except (ValueError, OverflowError, MemoryError):
        raise shape_error(shape, what) from None


class Misfit(np.ndarray):
    """What ``from_buffer`` returns for a buffer that does not fill its tensor: an empty array
    (so no front end caches it as a template) that remembers the byte count it got, and for
    BYTES the buffer itself (Triton words what is wrong with it)."""

    got: int = 0
    raw: memoryview | bytes = b""

    @classmethod
    def of(cls, got: int, raw: memoryview | bytes = b"") -> Misfit:
        out = np.empty(0, dtype=np.uint8).view(cls)
        out.got = got
        out.raw = raw
        return out


def from_buffer(
    wire: str, shape: tuple[int, ...], buf: memoryview | bytes, what: str
) -> np.ndarray[Any, Any]:
    """A numpy view of ``buf`` as a tensor (no copy); BYTES are parsed.

    ``what`` names the tensor in errors. A buffer that does not fill the shape comes back as a
    ``Misfit``: Triton refuses it once the model is known, with a message that names the model
    and the request (``validate.prepare``).
    """
    count = num_elements(shape)
    try:
        if wire == "BYTES":
            if count > len(buf) // 4:  # each element has a 4-byte length: do not allocate
                return Misfit.of(len(buf), buf)
            try:
                return kernels.decode_bytes(buf, count).reshape(shape)
            except kernels.BytesFormatError:
                return Misfit.of(len(buf), buf)
        dt = numpy_dtype(wire)
        expected = count * dt.itemsize
        if len(buf) != expected:
            return Misfit.of(len(buf))
        return np.frombuffer(buf, dtype=dt, count=count).reshape(shape)
    except (ValueError, OverflowError, MemoryError):
        raise shape_error(shape, what) from None
