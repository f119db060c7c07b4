"""Raw memory access for the gather kernel, and the object layouts it reads.

Gathering many tiny request tensors is bounded by what it costs to learn each tensor's data
pointer and shape. From Python that is ~1 µs a tensor (``arr.ctypes.data``); np.concatenate
pays ~120 ns. Reading the ``list`` and ``ndarray`` structs directly from the kernel costs a few
ns. The two helpers below are the only raw accesses: plain Python implements them with ctypes
(the kernels' plain twins run unchanged, slowly), and ``register_numba`` gives Numba an
implementation of the same two names.

Struct offsets are never assumed: ``probe_layout`` measures them on live objects and checks
every one; on any other interpreter or numpy ABI it returns None and callers use numpy instead.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

# Indices into the layout array that probe_layout returns.
L_LIST_ITEMS = 0  # PyListObject.ob_item
L_TYPE = 1  # PyObject.ob_type
L_DATA = 2  # PyArrayObject.data
L_ND = 3  # PyArrayObject.nd (C int)
L_DIMS = 4  # PyArrayObject.dimensions
L_DESCR = 5  # PyArrayObject.descr
L_FLAGS = 6  # PyArrayObject.flags (C int)
L_LIST_SIZE = 7  # PyListObject.ob_size
L_NDARRAY_TYPE = 8  # not an offset: the address of the ndarray type object
LAYOUT_SIZE = 9

NPY_C_CONTIGUOUS = 0x0001
NPY_WRITEABLE = 0x0400
# The 64-bit CPython / numpy offsets; probe_layout accepts them only if every probe agrees.
# Checked in this order: nothing is dereferenced before the fields that locate it agree.
_EXPECTED = {
    L_TYPE: 8,
    L_LIST_ITEMS: 24,
    L_DATA: 16,
    L_ND: 24,
    L_DIMS: 32,
    L_DESCR: 56,
    L_FLAGS: 64,
    L_LIST_SIZE: 16,
}


def load_i64(addr: int) -> int:
    """Return the int64 stored at ``addr``."""
    return int(ctypes.c_int64.from_address(int(addr)).value)


def copy_bytes(dst: int, src: int, nbytes: int) -> None:
    """memcpy ``nbytes`` from ``src`` to ``dst`` (the ranges must not overlap)."""
    ctypes.memmove(int(dst), int(src), int(nbytes))


def _low32(value: int) -> int:
    return value & 0xFFFFFFFF


def probe_layout() -> np.ndarray[Any, np.dtype[np.int64]] | None:
    """Measure the struct offsets the gather kernel reads; None when they cannot be trusted."""
    if sys.implementation.name != "cpython" or sys.byteorder != "little":
        return None
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    # Header sizes first: they decide whether reading at these offsets stays inside objects.
    if object.__basicsize__ != 16 or list.__basicsize__ != 40 or np.ndarray.__basicsize__ < 80:
        return None
    layout = np.zeros(LAYOUT_SIZE, dtype=np.int64)
    probes: list[np.ndarray[Any, Any]] = [
        np.arange(15, dtype=np.float32).reshape(3, 5),
        np.zeros((2, 0, 4), dtype=np.int8),
        np.frombuffer(b"\x01\x02\x03\x04\x05\x06\x07\x08", dtype=np.uint16).reshape(2, 2),
        np.zeros((7, 2), dtype=np.float64, order="F"),
    ]
    holder = list(probes)
    if load_i64(id(holder) + 8) != id(list):
        return None
    try:
        for field, off in _EXPECTED.items():
            if not all(_field_ok(field, off, holder, i, arr) for i, arr in enumerate(probes)):
                return None
            layout[field] = off
        layout[L_NDARRAY_TYPE] = id(np.ndarray)
    except (ValueError, OverflowError):
        return None
    return layout


def _field_ok(field: int, off: int, holder: list[Any], i: int, arr: np.ndarray[Any, Any]) -> bool:
    # Every read stays inside objects that are alive for the whole probe.
    base = id(arr)
    if field == L_LIST_ITEMS:
        return load_i64(load_i64(id(holder) + off) + 8 * i) == base
    if field == L_LIST_SIZE:
        return load_i64(id(holder) + off) == len(holder)
    if field == L_TYPE:
        return load_i64(base + off) == id(np.ndarray)
    if field == L_DATA:
        return bool(load_i64(base + off) == arr.__array_interface__["data"][0])
    if field == L_ND:
        return _low32(load_i64(base + off)) == arr.ndim
    if field == L_DIMS:
        dims = load_i64(base + off)
        return all(load_i64(dims + 8 * k) == arr.shape[k] for k in range(arr.ndim))
    if field == L_DESCR:
        return load_i64(base + off) == id(arr.dtype)
    if field == L_FLAGS:
        flags = _low32(load_i64(base + off))
        contiguous = bool(flags & NPY_C_CONTIGUOUS) == bool(arr.flags.c_contiguous)
        return contiguous and bool(flags & NPY_WRITEABLE) == bool(arr.flags.writeable)
    return False


def register_numba() -> None:
    """Teach Numba ``load_i64`` and ``copy_bytes``; call before compiling kernels that use them."""
    global _registered
    if _registered:
        return
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload

    @intrinsic
    def _load_i64(typingctx: Any, addr: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ptr = builder.inttoptr(args[0], context.get_value_type(types.int64).as_pointer())
            return builder.load(ptr)

        return types.int64(types.int64), codegen

    @intrinsic
    def _copy_bytes(typingctx: Any, dst: Any, src: Any, nbytes: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            byte_ptr = context.get_value_type(types.uint8).as_pointer()
            cgutils.raw_memcpy(  # type: ignore[no-untyped-call]
                builder,
                builder.inttoptr(args[0], byte_ptr),
                builder.inttoptr(args[1], byte_ptr),
                args[2],
                1,
            )
            return context.get_dummy_value()

        return types.none(types.int64, types.int64, types.int64), codegen

    @overload(load_i64, jit_options={"nogil": True})
    def _load_i64_impl(addr: Any) -> Any:
        # Numba requires the implementation's parameters to match these exactly.
        def impl(addr: Any) -> Any:
            return _load_i64(addr)  # type: ignore[call-arg]

        return impl

    @overload(copy_bytes, jit_options={"nogil": True})
    def _copy_bytes_impl(dst: Any, src: Any, nbytes: Any) -> Any:
        def impl(dst: Any, src: Any, nbytes: Any) -> Any:
            _copy_bytes(dst, src, nbytes)  # type: ignore[call-arg]

        return impl

    _registered = True


_registered = False
