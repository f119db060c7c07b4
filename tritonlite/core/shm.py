"""Shared-memory regions registered by clients: system (POSIX shm) and CUDA (IPC handles).

Triton's semantics: a system region maps ``[offset, offset + byte_size)`` of the POSIX shm object
``key``; a CUDA region is ``byte_size`` bytes of another process's device allocation, opened from
its ``cudaIpcMemHandle_t`` on ``device_id``. Every use is checked against the region before a
byte is read or written. Region names are one namespace across both kinds (Triton's manager).

``read`` returns the bytes of a slice (a view over the mmap for system regions, a host copy of
device memory for CUDA regions); ``write`` stores bytes into a slice; ``check`` validates a slice
without touching it. A system region still viewed by an in-flight request is closed once the
last view is gone; CUDA regions are only ever copied from or to, so they close at once.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonlite.errors import ErrorCode, TritonliteError, invalid_arg, not_found, unsupported
from tritonlite.gpu import cudart


@dataclass(slots=True)
class SystemRegion:
    name: str
    key: str
    offset: int
    byte_size: int
    map: mmap.mmap

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}


@dataclass(slots=True)
class CudaRegion:
    name: str
    device_id: int
    byte_size: int
    ptr: int  # the device address of the opened IPC allocation in this process

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}


def _shm_path(key: str) -> str:
    name = key.lstrip("/")
    if not name or "/" in name or name in (".", ".."):
        raise invalid_arg(f"Unable to open shared memory region: '{key}'")
    return os.path.join("/dev/shm", name)


class SharedMemoryManager:
    """Owns the registered regions. Called on the event loop thread only."""

    def __init__(self, cuda: Callable[[], cudart.Runtime | None] = cudart.load) -> None:
        self._system: dict[str, SystemRegion] = {}
        self._cuda: dict[str, CudaRegion] = {}
        self._closing: list[mmap.mmap] = []  # unregistered while still viewed
        self._cuda_runtime = cuda

    def _check_new_name(self, name: str) -> None:
        if not name:
            raise invalid_arg("shared memory region name must not be empty")
        if name in self._system or name in self._cuda:
            raise TritonliteError(
                ErrorCode.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )

    # -- system shared memory --------------------------------------------------------------
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_new_name(name)
        if offset < 0 or byte_size < 0:
            raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        path = _shm_path(key)
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            raise invalid_arg(f"Unable to open shared memory region: '{key}'") from None
        try:
            size = os.fstat(fd).st_size
            if byte_size == 0 or offset + byte_size > size:
                raise invalid_arg(
                    f"failed to register shared memory region '{name}': invalid args"
                )
            mapped = mmap.mmap(fd, offset + byte_size)
        finally:
            os.close(fd)
        self._system[name] = SystemRegion(name, key, offset, byte_size, mapped)

    def system_status(self, name: str = "") -> list[dict[str, Any]]:
        if name:
            region = self._system.get(name)
            if region is None:
                raise not_found(f"Unable to find system shared memory region: '{name}'")
            return [region.status()]
        return [r.status() for r in self._system.values()]

    def unregister_system(self, name: str = "") -> None:
        names = [name] if name else list(self._system)
        for n in names:
            region = self._system.pop(n, None)
            if region is not None:
                self._close(region.map)
        self._reap()

    def view(self, name: str, offset: int, byte_size: int) -> memoryview:
        """A writable view of ``byte_size`` bytes at ``offset`` within system region ``name``."""
        region = self._system.get(name)
        if region is None:
            if name in self._cuda:
                raise invalid_arg(f"shared memory region '{name}' is CUDA memory: it has no "
                                  "host view")
            raise invalid_arg(f"Unable to find shared memory region: '{name}'")
        if offset < 0 or byte_size < 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
        start = region.offset + offset
        return memoryview(region.map)[start : start + byte_size]

    def check(self, name: str, offset: int, byte_size: int) -> None:
        """Raise INVALID_ARG unless ``[offset, offset + byte_size)`` lies in region ``name``."""
        if name in self._cuda:
            self._cuda_slice(name, offset, byte_size)
        else:
            self.view(name, offset, byte_size)

    def read(self, name: str, offset: int, byte_size: int) -> memoryview:
        """The bytes of a slice of either kind of region (device memory is copied to host)."""
        if name not in self._cuda:
            return self.view(name, offset, byte_size)
        region, rt = self._cuda_slice(name, offset, byte_size)
        host = np.empty(byte_size, dtype=np.uint8)
        if byte_size:
            try:
                rt.set_device(region.device_id)
                rt.to_host(host.ctypes.data, region.ptr + offset, byte_size)
            except cudart.CudaError as exc:
                raise TritonliteError(ErrorCode.INTERNAL, f"failed to read CUDA shared memory "
                                      f"region '{name}': {exc}") from None
        return memoryview(host.data)

    def write(self, name: str, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` at ``offset`` of region ``name`` (either kind)."""
        size = len(memoryview(data).cast("B"))
        if name not in self._cuda:
            self.view(name, offset, size)[:] = memoryview(data).cast("B")
            return
        region, rt = self._cuda_slice(name, offset, size)
        if not size:
            return
        host = np.frombuffer(data, dtype=np.uint8)
        try:
            rt.set_device(region.device_id)
            rt.to_device(region.ptr + offset, host.ctypes.data, size)
        except cudart.CudaError as exc:
            raise TritonliteError(ErrorCode.INTERNAL, f"failed to write CUDA shared memory "
                                  f"region '{name}': {exc}") from None

    # -- CUDA shared memory ------------------------------------------------------------------
    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        self._check_new_name(name)
        rt = self._cuda_runtime()
        devices = rt.device_count() if rt is not None else 0
        if rt is None or devices == 0:
            raise unsupported(
                f"failed to register CUDA shared memory region '{name}': "
                "CUDA shared memory is not supported on this server (no CUDA device)"
            )
        if device_id < 0 or device_id >= devices:
            raise invalid_arg(f"failed to register CUDA shared memory region '{name}': "
                              f"device {device_id} does not exist")
        if byte_size <= 0:
            raise invalid_arg(f"failed to register CUDA shared memory region '{name}': "
                              "invalid args")
        try:
            rt.set_device(device_id)
            ptr = rt.ipc_open(bytes(raw_handle))
        except cudart.CudaError as exc:
            raise invalid_arg(f"failed to register CUDA shared memory region '{name}': "
                              f"{exc}") from None
        self._cuda[name] = CudaRegion(name, device_id, byte_size, ptr)

    def cuda_status(self, name: str = "") -> list[dict[str, Any]]:
        if name:
            region = self._cuda.get(name)
            if region is None:
                raise not_found(f"Unable to find cuda shared memory region: '{name}'")
            return [region.status()]
        return [r.status() for r in self._cuda.values()]

    def unregister_cuda(self, name: str = "") -> None:
        names = [name] if name else list(self._cuda)
        for n in names:
            region = self._cuda.pop(n, None)
            if region is None:
                continue
            rt = self._cuda_runtime()
            if rt is None:
                continue
            try:
                rt.set_device(region.device_id)
                rt.ipc_close(region.ptr)
            except cudart.CudaError:
                pass  # the client's process may already have freed it; nothing to undo here

    def _cuda_slice(self, name: str, offset: int, byte_size: int) -> tuple[CudaRegion, Any]:
        region = self._cuda[name]
        if offset < 0 or byte_size < 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
        rt = self._cuda_runtime()
        if rt is None:
            raise TritonliteError(ErrorCode.INTERNAL, "the CUDA runtime is gone")
        return region, rt

    def close(self) -> None:
        self.unregister_system()
        self.unregister_cuda()

    def _close(self, m: mmap.mmap) -> None:
        try:
            m.close()
        except BufferError:
            self._closing.append(m)

    def _reap(self) -> None:
        pending, self._closing = self._closing, []
        for m in pending:
            self._close(m)
