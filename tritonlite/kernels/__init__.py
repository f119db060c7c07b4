"""Numba kernels with plain-Python twins: shape grouping, gather, scatter, BYTES (de)serialization.

The kernels are written once, as plain functions in ``_plain``; this module is the one place
that wraps them with ``njit(cache=True)``: with ``nogil=True`` where a call can move much data,
holding the GIL where its work is a few ints (``_HOLDS_GIL``), and ``gather_list`` both ways
(``KernelSet.gather_into`` picks by size, ``api.GATHER_NOGIL_MIN``). A thread that releases the
GIL waits to take it back behind whatever the event loop is doing: for a small call that wait,
tens of microseconds on a busy loop, is many times the work. ``TRITONLITE_NO_NUMBA=1`` (or Numba
failing to import) runs the plain functions instead. Call ``warmup()`` at model load so that
no request ever waits for a compilation.

Public API (bound to the active twin; ``JIT`` and ``PLAIN`` give either explicitly):
``gather_into(out, parts) -> rows``, ``split_views(buf, sizes) -> views``,
``shape_prefix_len(shapes) -> int``, ``shape_group_ids(shapes) -> (ids, heads)``,
``bytes_offsets(buf, count=None) -> (starts, lengths)``, ``decode_bytes(buf, count=None)``,
``encode_bytes(items) -> bytes``, ``pack_shapes(shapes)``, ``warmup()``, ``describe()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import FunctionType, SimpleNamespace
from typing import Any

from tritonlite.kernels import _plain, _raw
from tritonlite.kernels.api import BytesFormatError, KernelSet, pack_shapes

__all__ = [
    "JIT",
    "NUMBA_ACTIVE",
    "PLAIN",
    "BytesFormatError",
    "KernelSet",
    "bytes_offsets",
    "decode_bytes",
    "describe",
    "encode_bytes",
    "gather_into",
    "pack_shapes",
    "shape_group_ids",
    "shape_prefix_len",
    "split_views",
    "warmup",
]

_LAYOUT = _raw.probe_layout()


# Kernels whose work is a few ints: compiled holding the GIL.
_HOLDS_GIL = frozenset({"shape_prefix_len", "shape_group_ids", "batch_offsets"})


def _renamed(fn: Callable[..., Any], suffix: str) -> Callable[..., Any]:
    """``fn`` under another name. Numba's cache keys a compiled function by its name and code,
    not by its ``nogil`` flag: a GIL-holding build of a function also built without the GIL
    must be cached as another function."""
    twin = FunctionType(
        fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__, fn.__closure__
    )
    twin.__qualname__ = fn.__qualname__ + suffix
    twin.__module__ = fn.__module__
    return twin


def _compile() -> SimpleNamespace | None:
    if os.environ.get("TRITONLITE_NO_NUMBA") == "1":
        return None
    try:
        import numba
    except ImportError:
        return None
    _raw.register_numba()
    free = numba.njit(cache=True, nogil=True)
    held = numba.njit(cache=True)
    impl = {
        fn.__name__: held(_renamed(fn, "_held")) if fn.__name__ in _HOLDS_GIL else free(fn)
        for fn in _plain.KERNELS
    }
    impl["gather_list_held"] = held(_renamed(_plain.gather_list, "_held"))
    return SimpleNamespace(**impl)


_JIT_IMPL = _compile()
PLAIN = KernelSet(
    SimpleNamespace(
        **{fn.__name__: fn for fn in _plain.KERNELS}, gather_list_held=_plain.gather_list
    ),
    jitted=False,
    layout=_LAYOUT,
)
JIT: KernelSet | None = (
    None if _JIT_IMPL is None else KernelSet(_JIT_IMPL, jitted=True, layout=_LAYOUT)
)
NUMBA_ACTIVE: bool = JIT is not None
_ACTIVE = JIT if JIT is not None else PLAIN

gather_into = _ACTIVE.gather_into
split_views = _ACTIVE.split_views
shape_prefix_len = _ACTIVE.shape_prefix_len
shape_group_ids = _ACTIVE.shape_group_ids
bytes_offsets = _ACTIVE.bytes_offsets
decode_bytes = _ACTIVE.decode_bytes
encode_bytes = _ACTIVE.encode_bytes
warmup = _ACTIVE.warmup


def describe() -> str:
    """One line for ``tritonlite --version`` and the startup log."""
    if NUMBA_ACTIVE:
        gather = "struct-reading gather" if _LAYOUT is not None else "numpy gather"
        return f"kernels: Numba ({gather})"
    if os.environ.get("TRITONLITE_NO_NUMBA") == "1":
        return "kernels: plain Python (TRITONLITE_NO_NUMBA=1)"
    return "kernels: plain Python (Numba not importable)"
