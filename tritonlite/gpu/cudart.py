"""The few CUDA runtime calls the server makes itself, through ctypes on ``libcudart``.

Used for CUDA shared memory (open a client's ``cudaIpcMemHandle_t``, copy between its device
memory and host buffers) and for counting devices. ctypes keeps it free of a binding package's
version quirks; ``libcudart`` comes from the CUDA toolkit, the ``nvidia-cuda-runtime-cu12`` wheel
or a directory on ``LD_LIBRARY_PATH``. ``load()`` returns None where there is none; every call
raises ``CudaError`` with the runtime's own message when CUDA refuses.

``Runtime`` is the interface the rest of the server codes against; tests substitute a fake.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

IPC_HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
_H2D, _D2H = 1, 2  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost


class CudaError(RuntimeError):
    pass


class Runtime(Protocol):
    def device_count(self) -> int: ...

    def set_device(self, device: int) -> None: ...

    def ipc_open(self, handle: bytes) -> int:
        """Map another process's allocation; returns its device address here."""
        ...

    def ipc_close(self, ptr: int) -> None: ...

    def to_host(self, dst: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` from device address ``src`` to host address ``dst`` (synchronous)."""
        ...

    def to_device(self, dst: int, src: int, nbytes: int) -> None:
        """Copy ``nbytes`` from host address ``src`` to device address ``dst`` (synchronous)."""
        ...


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


def _candidates() -> Iterator[str]:
    """Library names to try, cheapest first: ``find_library`` (it runs ldconfig) comes last."""
    yield from ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        lib = Path(root) / "cuda_runtime" / "lib"
        yield from (str(p) for p in sorted(lib.glob("libcudart.so*")))
    found = ctypes.util.find_library("cudart")
    if found:
        yield found


class CudaRuntime:
    """``Runtime`` over a loaded libcudart."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaIpcOpenMemHandle.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            _IpcHandle,
            ctypes.c_uint,
        ]
        lib.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.cudaSetDevice.argtypes = [ctypes.c_int]

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            text = self._lib.cudaGetErrorString(err)
            raise CudaError(f"{what} failed: {text.decode() if text else f'CUDA error {err}'}")

    def device_count(self) -> int:
        count = ctypes.c_int(0)
        err = self._lib.cudaGetDeviceCount(ctypes.byref(count))
        return int(count.value) if err == 0 else 0

    def set_device(self, device: int) -> None:
        self._check(self._lib.cudaSetDevice(device), f"cudaSetDevice({device})")

    def ipc_open(self, handle: bytes) -> int:
        if len(handle) != IPC_HANDLE_BYTES:
            raise CudaError(f"a CUDA IPC handle has {IPC_HANDLE_BYTES} bytes, got {len(handle)}")
        ptr = ctypes.c_void_p()
        self._check(
            self._lib.cudaIpcOpenMemHandle(
                ctypes.byref(ptr), _IpcHandle(handle), _LAZY_ENABLE_PEER_ACCESS
            ),
            "cudaIpcOpenMemHandle",
        )
        return int(ptr.value or 0)

    def ipc_close(self, ptr: int) -> None:
        self._check(self._lib.cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle")

    def to_host(self, dst: int, src: int, nbytes: int) -> None:
        self._check(self._lib.cudaMemcpy(dst, src, nbytes, _D2H), "cudaMemcpy device to host")

    def to_device(self, dst: int, src: int, nbytes: int) -> None:
        self._check(self._lib.cudaMemcpy(dst, src, nbytes, _H2D), "cudaMemcpy host to device")


@functools.cache
def load() -> CudaRuntime | None:
    """The CUDA runtime, or None when no libcudart can be loaded (or CUDA is hidden)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return None
    for name in _candidates():
        try:
            return CudaRuntime(ctypes.CDLL(name))
        except OSError:
            continue
    return None


def device_count() -> int:
    """CUDA devices this process can use (0 without a runtime, a driver or a device)."""
    rt = load()
    return rt.device_count() if rt is not None else 0
