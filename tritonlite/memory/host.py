"""Host allocations for staging buffers: 64-byte-aligned numpy, or pinned (page-locked) memory.

Pinned memory needs CUDA. ``pinned_available()`` decides without importing anything heavy on a
machine without an NVIDIA driver: it looks for the driver's device files first and only then
tries torch (if installed) or cuda-python. Nothing here is imported by the request path on
CPU-only machines except numpy.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

U8 = np.ndarray[Any, np.dtype[np.uint8]]
DEFAULT_ALIGNMENT = 64
_DRIVER_FILES = ("/dev/nvidiactl", "/proc/driver/nvidia/version")


def _check_alignment(alignment: int) -> None:
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two, got {alignment}")


def align_view(raw: U8, nbytes: int, alignment: int) -> U8:
    """The ``nbytes`` of ``raw`` that start at the first ``alignment``-byte boundary."""
    start = (-raw.__array_interface__["data"][0]) % alignment
    if start + nbytes > raw.shape[0]:
        raise ValueError("allocation too small to align")
    return raw[start : start + nbytes]


def aligned_empty(nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> U8:
    """Uninitialized uint8 array of ``nbytes`` whose data starts on an ``alignment`` boundary."""
    _check_alignment(alignment)
    return align_view(np.empty(nbytes + alignment, dtype=np.uint8), nbytes, alignment)


def _driver_present() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return any(os.path.exists(path) for path in _DRIVER_FILES)


def _torch_allocator() -> Callable[[int], U8] | None:
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None

    def allocate(nbytes: int) -> U8:
        # The numpy view keeps the pinned tensor alive through its base.
        arr: U8 = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True).numpy()
        return arr

    return allocate


class _CudaHostMemory:
    """Owns one cudaMallocHost block; freed when the last numpy view of it is gone."""

    def __init__(self, runtime: Any, nbytes: int) -> None:
        err, ptr = runtime.cudaMallocHost(nbytes)
        if err != runtime.cudaError_t.cudaSuccess:
            raise MemoryError(f"cudaMallocHost({nbytes}) failed: {err}")
        self._runtime = runtime
        self.ptr = int(ptr)

    def __del__(self) -> None:
        if self.ptr:
            self._runtime.cudaFreeHost(self.ptr)
            self.ptr = 0


def _cuda_python_allocator() -> Callable[[int], U8] | None:
    runtime: Any = None
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            if importlib.util.find_spec(name.rsplit(".", 1)[0]) is None:
                continue
            runtime = importlib.import_module(name)
            break
        except ImportError:
            continue
    if runtime is None:
        return None
    err, count = runtime.cudaGetDeviceCount()
    if err != runtime.cudaError_t.cudaSuccess or count < 1:
        return None

    def allocate(nbytes: int) -> U8:
        owner = _CudaHostMemory(runtime, max(nbytes, 1))
        block = (ctypes.c_uint8 * max(nbytes, 1)).from_address(owner.ptr)
        block._owner = owner  # type: ignore[attr-defined]
        return np.frombuffer(memoryview(block), dtype=np.uint8)[:nbytes]

    return allocate


@functools.cache
def pinned_allocator() -> Callable[[int], U8] | None:
    """The pinned-host allocator (torch first, then cuda-python), or None without CUDA."""
    if not _driver_present():
        return None
    for factory in (_torch_allocator, _cuda_python_allocator):
        try:
            allocator = factory()
        except Exception:  # a broken CUDA install means "no pinned memory", not a crash
            allocator = None
        if allocator is not None:
            return allocator
    return None


def pinned_available() -> bool:
    """Whether pinned host memory can be allocated here (CUDA driver + torch or cuda-python)."""
    return pinned_allocator() is not None


def pinned_empty(nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> U8:
    """Uninitialized pinned uint8 array of ``nbytes``, ``alignment``-aligned.

    Raises
    ------
    RuntimeError
        Where ``pinned_available()`` is False.
    """
    _check_alignment(alignment)
    allocate = pinned_allocator()
    if allocate is None:
        raise RuntimeError("pinned host memory needs CUDA (and torch or cuda-python)")
    return align_view(allocate(nbytes + alignment), nbytes, alignment)
