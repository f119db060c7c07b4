# cython: language_level=3, annotation_typing=False, boundscheck=False, wraparound=False
"""JSON ``data`` lists -> numpy arrays in one typed pass: the HTTP codec's fast path.

``data_array`` walks the list orjson made (flat or nested, row-major), checks each element's
JSON type and writes it straight into a preallocated array of the tensor's dtype. It answers
only the plain case: every element of the exact JSON type the datatype takes (numbers, for
booleans ``true``/``false``), within range, as many as the shape says. Anything else (a wrong
type, a value out of range, a count that does not match, BYTES, a shape near numpy's limits)
is ``None``: the codec's general path then decides, and it alone words the errors, so both
paths give the same array or the same 400.

Compiled by Cython through ``_jsondata_c.pxd`` (typed loops over typed memoryviews: ~0.5 µs for
16 FP32 elements where the general path takes ~4); the pure twin is the same source.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonlite.contracts.types import InferInput

try:
    import cython
except ImportError:  # Cython is a build-time dependency; the pure twin runs without it

    class _CythonShim:
        compiled = False

    cython = _CythonShim()

COMPILED: bool = bool(cython.compiled)

_MAX_DEPTH = 100  # the general path's limit on nesting
_FAST_MAX = 1 << 26  # elements; a larger tensor takes the general path
_F32_MAX = 3.4028234663852886e38  # beyond: numpy's cast to inf (with a warning) decides
_F16_MAX = 65504.0
_F64_MAX = 1.7976931348623157e308
_EXACT = 9007199254740992  # 2**53: an integer converts to a double exactly up to here

# Kinds of fill: which typed loop writes the elements.
_K_F32 = 1
_K_F64 = 2
_K_F16 = 3  # written as doubles, then cast (numpy's float16 rounding, as np.array does)
_K_I32 = 4
_K_I64 = 5  # every other integer type too: written as int64, range-checked, then cast
_K_BOOL = 6

# datatype -> (kind, numpy dtype of the result, lowest and highest integer value taken)
_KINDS: dict[str, tuple[int, Any, int, int]] = {
    "FP32": (_K_F32, np.dtype(np.float32), 0, 0),
    "FP64": (_K_F64, np.dtype(np.float64), 0, 0),
    "FP16": (_K_F16, np.dtype(np.float16), 0, 0),
    "INT32": (_K_I32, np.dtype(np.int32), -(2**31), 2**31 - 1),
    "INT64": (_K_I64, np.dtype(np.int64), -(2**63), 2**63 - 1),
    "INT8": (_K_I64, np.dtype(np.int8), -(2**7), 2**7 - 1),
    "INT16": (_K_I64, np.dtype(np.int16), -(2**15), 2**15 - 1),
    "UINT8": (_K_I64, np.dtype(np.uint8), 0, 2**8 - 1),
    "UINT16": (_K_I64, np.dtype(np.uint16), 0, 2**16 - 1),
    "UINT32": (_K_I64, np.dtype(np.uint32), 0, 2**32 - 1),
    "UINT64": (_K_I64, np.dtype(np.uint64), 0, 2**63 - 1),  # above 2**63 - 1: general path
    "BOOL": (_K_BOOL, np.dtype(np.bool_), 0, 0),
}
_INT64 = np.dtype(np.int64)
_FLOAT64 = np.dtype(np.float64)
_UINT8 = np.dtype(np.uint8)


def _reals(data: list[Any], buf: Any, pos: int, n: int, depth: int, limit: float) -> int:
    """Write ``data``'s numbers into ``buf`` (float or double) from ``pos``, each within
    ``limit`` (FP16 goes to doubles before its cast); the next position, or -1."""
    if depth > _MAX_DEPTH:
        return -1
    for x in data:
        if type(x) is float:
            v = x
        elif type(x) is int:
            if x > _EXACT or x < -_EXACT:
                return -1
            v = float(x)
        elif type(x) is list:
            pos = _reals(x, buf, pos, n, depth + 1, limit)
            if pos < 0:
                return -1
            continue
        else:
            return -1
        if pos >= n or v > limit or v < -limit:
            return -1
        buf[pos] = v
        pos += 1
    return pos


def _ints(data: list[Any], buf: Any, pos: int, n: int, depth: int, lo: int, hi: int) -> int:
    """``_reals`` for integers (int or long long): integers only (not booleans), within
    ``lo``..``hi``."""
    if depth > _MAX_DEPTH:
        return -1
    for x in data:
        if type(x) is int:
            try:
                v = int(x)
            except OverflowError:  # the compiled twin's conversion to a C long long
                return -1
            if pos >= n or v > hi or v < lo:
                return -1
            buf[pos] = v
            pos += 1
        elif type(x) is list:
            pos = _ints(x, buf, pos, n, depth + 1, lo, hi)
            if pos < 0:
                return -1
        else:
            return -1
    return pos


def _bools(data: list[Any], buf: Any, pos: int, n: int, depth: int) -> int:
    """``_reals`` for BOOL: ``true``/``false`` only, written as bytes 1/0."""
    if depth > _MAX_DEPTH:
        return -1
    for x in data:
        if x is True:
            v = 1
        elif x is False:
            v = 0
        elif type(x) is list:
            pos = _bools(x, buf, pos, n, depth + 1)
            if pos < 0:
                return -1
            continue
        else:
            return -1
        if pos >= n:
            return -1
        buf[pos] = v
        pos += 1
    return pos


def _count(data: list[Any], n: int, depth: int) -> int:
    """How many non-list elements ``data`` holds at any depth; -1 past ``n`` or too deep."""
    if depth > _MAX_DEPTH:
        return -1
    total = 0
    for x in data:
        if type(x) is list:
            k = _count(x, n - total, depth + 1)
            if k < 0:
                return -1
            total += k
        else:
            total += 1
        if total > n:
            return -1
    return total


def data_array(datatype: str, shape: tuple[int, ...], data: Any) -> Any:
    """``data`` (a JSON list, flat or nested) as an array of ``datatype`` and ``shape``, or
    None when the general path must decide (see the module's docstring).

    ``shape`` is already checked: a tuple of non-negative integers.
    """
    spec = _KINDS.get(datatype)
    if spec is None or type(data) is not list or len(shape) > 32:
        return None
    n = 1
    for d in shape:
        if d > _FAST_MAX:
            return None
        n *= d
        if n > _FAST_MAX:
            return None
    if len(data) != n and _count(data, n, 0) != n:
        return None  # allocate only as many elements as the request holds
    kind, dt, lo, hi = spec
    # Each kind fills through a view typed for its loop (``_jsondata_c.pxd``): ``f32``, ``f64``,
    # ``i32``, ``i64`` pick the compiled loop's specialization; in the pure twin they are ``arr``.
    if kind == _K_F32:
        arr = f32 = np.empty(n, dt)
        if _reals(data, f32, 0, n, 0, _F32_MAX) != n:
            return None
    elif kind == _K_I32:
        arr = i32 = np.empty(n, dt)
        if _ints(data, i32, 0, n, 0, lo, hi) != n:
            return None
    elif kind == _K_F64:
        arr = f64 = np.empty(n, dt)
        if _reals(data, f64, 0, n, 0, _F64_MAX) != n:
            return None
    elif kind == _K_F16:
        arr = f64 = np.empty(n, _FLOAT64)
        if _reals(data, f64, 0, n, 0, _F16_MAX) != n:
            return None
        arr = arr.astype(dt)
    elif kind == _K_I64:
        arr = i64 = np.empty(n, _INT64)
        if _ints(data, i64, 0, n, 0, lo, hi) != n:
            return None
        if datatype != "INT64":
            arr = arr.astype(dt)
    else:
        arr = np.empty(n, _UINT8)
        if _bools(data, arr, 0, n, 0) != n:
            return None
        arr = arr.view(dt)
    return arr.reshape(shape)


def _plain_parts(item: Any) -> Any:
    """``(name, datatype, shape, array)`` of the common JSON input (``plain_input``), or
    None."""
    if type(item) is not dict or len(item) != 4:
        return None
    fields = item  # (typed as a dict in the compiled twin: its own lookups, no method calls)
    name = fields.get("name")
    datatype = fields.get("datatype")
    shape = fields.get("shape")
    data = fields.get("data")
    if type(name) is not str or type(datatype) is not str or type(shape) is not list:
        return None
    listed = shape  # (a list: likewise)
    for d in listed:
        if type(d) is not int or d < 0:
            return None
    dims = tuple(listed)
    arr = data_array(datatype, dims, data)
    if arr is None:
        return None
    return (name, datatype, dims, arr)


def plain_input(item: Any) -> Any:
    """The common JSON input, ``{"name": str, "datatype": str, "shape": [...], "data": [...]}``
    with exactly these keys and a plain ``data`` list, as an ``InferInput``; None when the
    general path must decide (any other form, or any error to word)."""
    parts = _plain_parts(item)
    if parts is None:
        return None
    return InferInput(parts[0], parts[1], parts[2], parts[3], None, {})


def plain_inputs(items: Any) -> Any:
    """A request's ``inputs`` list when every entry is the common JSON input
    (``plain_input``), each name once: ``(key, feed)``, ``key`` the inputs' ``(name,
    datatype, shape)`` in order and ``feed`` their arrays by name; None otherwise (an empty
    list too)."""
    if type(items) is not list or not items:
        return None
    key = []
    feed = {}
    for item in items:
        parts = _plain_parts(item)
        if parts is None:
            return None
        name = parts[0]
        if name in feed:
            return None
        key.append((name, parts[1], parts[2]))
        feed[name] = parts[3]
    return (tuple(key), feed)
