"""The kernels' Python API, over either twin (Numba-compiled or plain).

``KernelSet`` turns the raw kernels of ``_plain`` (ints and arrays in, codes out) into calls
that take ordinary numpy arrays and raise ``ValueError`` on bad input. ``kernels/__init__.py``
builds one set per twin and binds the module-level functions to the active one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from tritonlite.kernels import _plain

Array = np.ndarray[Any, Any]
I64 = np.ndarray[Any, np.dtype[np.int64]]

_EMPTY_I64 = np.zeros(0, dtype=np.int64)
# From this many bytes ``gather_into`` copies without the GIL (``impl.gather_list``); below, it
# holds it (``impl.gather_list_held``): about 25-50 us of copying, which is what a thread that
# lets the GIL go may wait to take it back while the event loop is busy.
GATHER_NOGIL_MIN = 256 * 1024
_MAX_ELEMENT = 0xFFFFFFFF


class BytesFormatError(ValueError):
    """A BYTES tensor whose length prefixes do not describe its buffer.

    ``code`` is one of ``_plain.BYTES_*``; ``message`` names the problem without the tensor's
    name, which the caller adds.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _as_u8(buf: Any) -> np.ndarray[Any, np.dtype[np.uint8]]:
    if isinstance(buf, np.ndarray):
        if buf.dtype == np.uint8 and buf.ndim == 1 and buf.flags.c_contiguous:
            return buf
        return np.frombuffer(np.ascontiguousarray(buf).data, dtype=np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


def pack_shapes(shapes: Sequence[Sequence[int]]) -> I64:
    """Shapes as the 2-D int64 array the grouping kernels take (n x max rank).

    Shorter shapes are padded with -1, which no real dimension equals, so shapes of different
    rank never group together.
    """
    rank = max((len(shape) for shape in shapes), default=0)
    out = np.full((len(shapes), rank), -1, dtype=np.int64)
    for i, shape in enumerate(shapes):
        out[i, : len(shape)] = shape
    return out


class KernelSet:
    """The kernels over one implementation.

    Parameters
    ----------
    impl
        Namespace of the raw kernels (``_plain``'s functions or their ``njit`` twins), and
        ``gather_list_held``: ``gather_list`` holding the GIL (the same function, plain).
    jitted
        Whether ``impl`` is compiled; used to pick the fastest path where plain Python would be
        slower than numpy.
    layout
        ``_raw.probe_layout()``; None disables the struct-reading gather.
    raw_gather
        Run the struct-reading gather kernel even when ``impl`` is plain (tests do, to check the
        plain twin); by default only a compiled ``impl`` runs it.
    """

    def __init__(
        self,
        impl: SimpleNamespace,
        *,
        jitted: bool,
        layout: I64 | None,
        raw_gather: bool | None = None,
    ) -> None:
        self.impl = impl
        self.jitted = jitted
        self._layout = layout
        use_raw = jitted if raw_gather is None else raw_gather
        self._raw_gather = use_raw and layout is not None
        self._warm = False
        self._warm_lock = threading.Lock()

    # -- shape grouping -------------------------------------------------------------------

    def shape_prefix_len(self, shapes: Array) -> int:
        """Rows at the start of ``shapes`` (n x rank ints, see ``pack_shapes``) equal to row 0.

        This is the longest batch a dynamic batcher may form from the head of the queue.
        """
        return int(self.impl.shape_prefix_len(_shapes_2d(shapes)))

    def shape_group_ids(self, shapes: Array) -> tuple[I64, I64]:
        """Group equal rows of ``shapes``.

        Returns
        -------
        (ids, heads)
            ``ids[i]`` is row i's group, numbered by first appearance; ``heads[g]`` is the first
            row of group g (``len(heads)`` groups).
        """
        arr = _shapes_2d(shapes)
        n = arr.shape[0]
        ids = np.empty(n, dtype=np.int64)
        heads = np.empty(n, dtype=np.int64)
        groups = self.impl.shape_group_ids(arr, ids, heads)
        return ids, heads[:groups]

    # -- gather / scatter -----------------------------------------------------------------

    def gather_into(self, out: Array, parts: Sequence[Array]) -> int:
        """Copy ``parts`` end to end along axis 0 into the start of ``out``.

        Parameters
        ----------
        out
            Writeable, C-contiguous, ``ndim >= 1`` (a staging buffer view).
        parts
            Arrays of ``out``'s dtype and shape ``(rows_i, *out.shape[1:])``; zero rows is fine.
            Non-contiguous parts are accepted (copied through numpy).

        Returns
        -------
        int
            Rows written (``sum(rows_i)``); rows past it are left as they were.

        Raises
        ------
        ValueError
            On a dtype or trailing-shape mismatch, or more rows than ``out`` holds.
        """
        # Our own list: the kernel reads it without the GIL, so no one else may hold it.
        items = list(parts)
        if self._raw_gather and isinstance(out, np.ndarray) and not out.dtype.hasobject:
            impl = self.impl
            gather = impl.gather_list if out.nbytes >= GATHER_NOGIL_MIN else impl.gather_list_held
            rows = gather(id(items), id(out), out.itemsize, self._layout)
            if rows >= 0:
                return int(rows)
        return _gather_numpy(out, items)

    def split_views(self, buf: Array, sizes: Sequence[int] | I64) -> list[Array]:
        """Per-request views (no copies) of a batch buffer: rows ``[o_i, o_i + sizes[i])``.

        Raises
        ------
        ValueError
            If a size is negative or the sizes add up to more rows than ``buf`` has.
        """
        arr = np.ascontiguousarray(sizes, dtype=np.int64).reshape(-1)
        offsets = np.empty(arr.shape[0] + 1, dtype=np.int64)
        total = self.impl.batch_offsets(arr, offsets)
        if total < 0:
            raise ValueError(f"batch sizes must be >= 0, got {arr.tolist()}")
        if total > buf.shape[0]:
            raise ValueError(f"batch sizes add up to {total} but the buffer has {buf.shape[0]}")
        bounds = offsets.tolist()
        return [buf[bounds[i] : bounds[i + 1]] for i in range(arr.shape[0])]

    # -- BYTES ----------------------------------------------------------------------------

    def bytes_offsets(self, buf: Any, count: int | None = None) -> tuple[I64, I64]:
        """Locate the elements of a serialized BYTES tensor (4-byte LE length, then bytes).

        Parameters
        ----------
        buf
            bytes, bytearray, memoryview or a uint8 array (not copied).
        count
            The element count the tensor's shape requires; None accepts any.

        Returns
        -------
        (starts, lengths)
            int64 arrays: element i is ``buf[starts[i] : starts[i] + lengths[i]]``.

        Raises
        ------
        BytesFormatError
            When a prefix is cut short, an element runs past the buffer, or the count differs.
        """
        data = _as_u8(buf)
        if count is None:
            found = self.impl.bytes_scan(data, _EMPTY_I64, _EMPTY_I64, -1)
            if found < 0:
                raise _bytes_error(found, data.shape[0], None)
            count = int(found)
        starts = np.empty(count, dtype=np.int64)
        lengths = np.empty(count, dtype=np.int64)
        result = self.impl.bytes_scan(data, starts, lengths, count)
        if result < 0:
            raise _bytes_error(result, data.shape[0], count)
        return starts, lengths

    def decode_bytes(self, buf: Any, count: int | None = None) -> Array:
        """A serialized BYTES tensor as a 1-D object array of ``bytes`` (see ``bytes_offsets``)."""
        starts, lengths = self.bytes_offsets(buf, count)
        raw = buf if isinstance(buf, bytes) else _as_u8(buf).tobytes()
        out = np.empty(starts.shape[0], dtype=object)
        out[:] = [raw[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
        return out

    def encode_bytes(self, items: Any) -> bytes:
        """Serialize BYTES elements (C order): each as a 4-byte LE length, then its bytes.

        ``items`` is an array (object, ``S`` or ``U``) or a sequence; ``bytes`` go as they are,
        ``str`` as UTF-8, anything else as ``str(x)`` in UTF-8 (tritonclient's rule).
        """
        seq = items.reshape(-1).tolist() if isinstance(items, np.ndarray) else list(items)
        if not all(type(x) is bytes for x in seq):
            seq = [_element_bytes(x) for x in seq]
        lengths = np.fromiter(map(len, seq), dtype=np.int64, count=len(seq))
        if lengths.size and int(lengths.max()) > _MAX_ELEMENT:
            raise ValueError("a BYTES element is longer than 2**32 - 1 bytes")
        payload = b"".join(seq)
        out = np.empty(4 * len(seq) + len(payload), dtype=np.uint8)
        self.impl.bytes_interleave(np.frombuffer(payload, dtype=np.uint8), lengths, out)
        return out.tobytes()

    # -- compilation ----------------------------------------------------------------------

    def warmup(self) -> None:
        """Run every kernel once on tiny inputs, so compilation happens now (at model load).

        Models load on several threads at once; the first call compiles, later calls return.
        """
        with self._warm_lock:
            if not self._warm:
                self._warmup()
                self._warm = True

    def _warmup(self) -> None:
        shapes = np.array([[2, 3], [2, 3], [4, 3]], dtype=np.int64)
        self.shape_prefix_len(shapes)
        self.shape_group_ids(shapes)
        out = np.empty((3, 2), dtype=np.float32)
        self.gather_into(out, [np.ones((1, 2), np.float32), np.ones((2, 2), np.float32)])
        if self._layout is not None:
            # the kernel reads the list by address: it must stay alive across the call
            no_parts: list[Array] = []
            for gather in (self.impl.gather_list, self.impl.gather_list_held):
                gather(id(no_parts), id(out), out.itemsize, self._layout)
            del no_parts
        self.split_views(out, [1, 2])
        encoded = self.encode_bytes([b"ab", b""])
        self.bytes_offsets(encoded)  # read-only buffer
        self.bytes_offsets(bytearray(encoded), 2)  # writeable buffer


def _shapes_2d(shapes: Array) -> I64:
    arr = np.ascontiguousarray(shapes, dtype=np.int64)
    if arr.ndim != 2:
        raise ValueError(f"shapes must be 2-D (requests x rank), got {arr.ndim}-D")
    return arr


def _element_bytes(x: Any) -> bytes:
    if isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    return str(x).encode("utf-8")


def _gather_numpy(out: Any, parts: list[Array]) -> int:
    if not isinstance(out, np.ndarray) or out.ndim < 1:
        raise ValueError("out must be an ndarray with a batch dimension")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be writeable and C-contiguous")
    # numpy checks shapes and dtypes before it copies anything; only a failure needs the
    # slower walk that says which part is wrong.
    try:
        rows = int(sum(part.shape[0] for part in parts))
        if rows <= out.shape[0]:
            if parts:
                np.concatenate(parts, axis=0, out=out[:rows], casting="no")
            return rows
    except (AttributeError, IndexError, TypeError, ValueError):
        pass
    raise _gather_error(out, parts)


def _gather_error(out: Array, parts: list[Any]) -> ValueError:
    rows = 0
    for i, part in enumerate(parts):
        if not isinstance(part, np.ndarray):
            return ValueError(f"part {i} is a {type(part).__name__}, not an ndarray")
        if part.dtype != out.dtype:
            return ValueError(f"part {i} has dtype {part.dtype}, expected {out.dtype}")
        if part.ndim != out.ndim or part.shape[1:] != out.shape[1:]:
            trailing = ", ".join(map(str, out.shape[1:]))
            return ValueError(f"part {i} has shape {part.shape}, expected (n, {trailing})")
        rows += part.shape[0]
    return ValueError(f"parts hold {rows} rows but out has {out.shape[0]}")


def _bytes_error(code: int, size: int, count: int | None) -> BytesFormatError:
    if code == _plain.BYTES_TRUNCATED_PREFIX:
        return BytesFormatError(
            code, f"incomplete string length indicator in a {size}-byte BYTES buffer"
        )
    if code == _plain.BYTES_OVERRUN:
        return BytesFormatError(
            code, f"element byte size indicator exceeds the end of a {size}-byte BYTES buffer"
        )
    return BytesFormatError(code, f"expected {count} string elements in the BYTES buffer")
