"""The kernels as plain Python: the source that ``kernels/__init__.py`` hands to Numba.

Every function here runs as written (slowly) and compiles unchanged under
``njit(nogil=True)``, so each one takes only numpy arrays and ints, returns ints or fills
arrays it was given, and reports bad input with negative integer codes instead of raising.
Arithmetic goes through ``int()`` so that numpy's small-integer rules (uint8 << 8 == 0) never
apply in the plain twin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonlite.kernels._raw import (
    L_DATA,
    L_DESCR,
    L_DIMS,
    L_FLAGS,
    L_LIST_ITEMS,
    L_LIST_SIZE,
    L_ND,
    L_NDARRAY_TYPE,
    L_TYPE,
    NPY_C_CONTIGUOUS,
    NPY_WRITEABLE,
    copy_bytes,
    load_i64,
)

I64 = np.ndarray[Any, np.dtype[np.int64]]
U8 = np.ndarray[Any, np.dtype[np.uint8]]

# BYTES decode errors (negative so a count can share the return value).
BYTES_TRUNCATED_PREFIX = -1  # fewer than 4 bytes left where a length prefix must start
BYTES_OVERRUN = -2  # an element's length runs past the end of the buffer
BYTES_COUNT_MISMATCH = -3  # more or fewer elements than the tensor's shape says

SIZES_NEGATIVE = -1


def shape_prefix_len(shapes: I64) -> int:
    """Rows at the start of ``shapes`` equal to row 0 (0 for no rows)."""
    n = shapes.shape[0]
    rank = shapes.shape[1]
    for i in range(1, n):
        for k in range(rank):
            if shapes[i, k] != shapes[0, k]:
                return i
    return int(n)


def shape_group_ids(shapes: I64, ids: I64, heads: I64) -> int:
    """Number each distinct row of ``shapes`` in order of first appearance.

    Fills ``ids[i]`` with row i's group and ``heads[g]`` with group g's first row; returns the
    number of groups.
    """
    n = shapes.shape[0]
    rank = shapes.shape[1]
    groups = 0
    for i in range(n):
        found = -1
        for g in range(groups):
            head = heads[g]
            same = True
            for k in range(rank):
                if shapes[i, k] != shapes[head, k]:
                    same = False
                    break
            if same:
                found = g
                break
        if found < 0:
            heads[groups] = i
            found = groups
            groups += 1
        ids[i] = found
    return groups


def gather_list(list_addr: int, out_addr: int, itemsize: int, layout: I64) -> int:
    """Copy the arrays of a Python list, end to end, into the ndarray at ``out_addr``.

    Precondition: the list (at ``list_addr``), its arrays and ``out`` stay alive and unchanged
    during the call (it runs without the GIL); ``out`` is an ndarray of a dtype without object
    references whose element size is ``itemsize``; ``layout`` comes from
    ``_raw.probe_layout()``. Every part must be an exact ``ndarray``, C-contiguous, of ``out``'s
    dtype object and of shape ``(rows, *out.shape[1:])``.

    Returns the rows copied; ``-(i + 1)`` when part ``i`` is not of that form, ``-(n + 1)``
    when the ``n`` parts hold more rows than ``out``, ``-(n + 2)`` when ``out`` is not a
    writeable C-contiguous array with a batch dimension. Nothing is copied unless the result is
    >= 0.
    """
    n = load_i64(list_addr + layout[L_LIST_SIZE])
    ndarray_type = layout[L_NDARRAY_TYPE]
    out_flags = load_i64(out_addr + layout[L_FLAGS])
    if (out_flags & (NPY_C_CONTIGUOUS | NPY_WRITEABLE)) != (NPY_C_CONTIGUOUS | NPY_WRITEABLE):
        return -(n + 2)
    ndim = load_i64(out_addr + layout[L_ND]) & 0xFFFFFFFF
    if ndim < 1:
        return -(n + 2)
    out_dims = load_i64(out_addr + layout[L_DIMS])
    descr = load_i64(out_addr + layout[L_DESCR])
    row_bytes = itemsize
    for k in range(1, ndim):
        row_bytes *= load_i64(out_dims + 8 * k)
    items = load_i64(list_addr + layout[L_LIST_ITEMS])
    total = 0
    for i in range(n):
        arr = load_i64(items + 8 * i)
        if load_i64(arr + layout[L_TYPE]) != ndarray_type:
            return -(i + 1)
        if load_i64(arr + layout[L_DESCR]) != descr:
            return -(i + 1)
        if (load_i64(arr + layout[L_FLAGS]) & NPY_C_CONTIGUOUS) == 0:
            return -(i + 1)
        if (load_i64(arr + layout[L_ND]) & 0xFFFFFFFF) != ndim:
            return -(i + 1)
        dims = load_i64(arr + layout[L_DIMS])
        for k in range(1, ndim):
            if load_i64(dims + 8 * k) != load_i64(out_dims + 8 * k):
                return -(i + 1)
        total += load_i64(dims)
    if total > load_i64(out_dims):
        return -(n + 1)
    dst = load_i64(out_addr + layout[L_DATA])
    offset = 0
    for i in range(n):
        arr = load_i64(items + 8 * i)
        nbytes = load_i64(load_i64(arr + layout[L_DIMS])) * row_bytes
        if nbytes > 0:
            copy_bytes(dst + offset, load_i64(arr + layout[L_DATA]), nbytes)
        offset += nbytes
    return total


def batch_offsets(sizes: I64, offsets: I64) -> int:
    """Fill ``offsets`` (len n + 1) with the running sum of ``sizes``; returns the total.

    Returns ``SIZES_NEGATIVE`` if a size is negative.
    """
    total = 0
    offsets[0] = 0
    for i in range(sizes.shape[0]):
        size = sizes[i]
        if size < 0:
            return SIZES_NEGATIVE
        total += size
        offsets[i + 1] = total
    return total


def bytes_scan(buf: U8, starts: I64, lengths: I64, count: int) -> int:
    """Walk a BYTES tensor: elements of a 4-byte little-endian length, then that many bytes.

    With ``count < 0`` only validates and counts. Otherwise fills ``starts``/``lengths`` (each
    of size ``count``) and requires exactly ``count`` elements spanning the whole buffer.
    Returns the element count or a negative ``BYTES_*`` code.
    """
    size = buf.shape[0]
    pos = 0
    i = 0
    while pos < size:
        if size - pos < 4:
            return BYTES_TRUNCATED_PREFIX
        length = (
            int(buf[pos])
            | (int(buf[pos + 1]) << 8)
            | (int(buf[pos + 2]) << 16)
            | (int(buf[pos + 3]) << 24)
        )
        pos += 4
        if length > size - pos:
            return BYTES_OVERRUN
        if count >= 0:
            if i >= count:
                return BYTES_COUNT_MISMATCH
            starts[i] = pos
            lengths[i] = length
        pos += length
        i += 1
    if count >= 0 and i != count:
        return BYTES_COUNT_MISMATCH
    return i


def bytes_interleave(payload: U8, lengths: I64, out: U8) -> int:
    """Write each element of ``payload`` (concatenated) behind its 4-byte LE length prefix.

    ``out`` must hold ``4 * len(lengths) + len(payload)`` bytes; returns the bytes written.
    """
    src = 0
    dst = 0
    for i in range(lengths.shape[0]):
        length = int(lengths[i])
        out[dst] = length & 0xFF
        out[dst + 1] = (length >> 8) & 0xFF
        out[dst + 2] = (length >> 16) & 0xFF
        out[dst + 3] = (length >> 24) & 0xFF
        dst += 4
        out[dst : dst + length] = payload[src : src + length]
        dst += length
        src += length
    return dst


KERNELS = (
    shape_prefix_len,
    shape_group_ids,
    gather_list,
    batch_offsets,
    bytes_scan,
    bytes_interleave,
)
