"""System shared-memory regions registered by clients: bounds-checked views over mmaps.

Triton's semantics: a region maps ``[offset, offset + byte_size)`` of the POSIX shm object
``key``; every use is checked against the region before a byte is read or written. A region
still viewed by an in-flight request is closed once the last view is gone.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any

from tritonlite.errors import ErrorCode, TritonliteError, invalid_arg, not_found, unsupported


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


def _shm_path(key: str) -> str:
    name = key.lstrip("/")
    if not name or "/" in name or name in (".", ".."):
        raise invalid_arg(f"Unable to open shared memory region: '{key}'")
    return os.path.join("/dev/shm", name)


class SharedMemoryManager:
    """Owns the registered regions. Called on the event loop thread only."""

    def __init__(self) -> None:
        self._system: dict[str, SystemRegion] = {}
        self._closing: list[mmap.mmap] = []  # unregistered while still viewed

    # -- system shared memory --------------------------------------------------------------
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise invalid_arg("shared memory region name must not be empty")
        if name in self._system:
            raise TritonliteError(
                ErrorCode.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )
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
        """A writable view of ``byte_size`` bytes at ``offset`` within region ``name``."""
        region = self._system.get(name)
        if region is None:
            raise invalid_arg(f"Unable to find shared memory region: '{name}'")
        if offset < 0 or byte_size < 0 or offset + byte_size > region.byte_size:
            raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
        start = region.offset + offset
        return memoryview(region.map)[start : start + byte_size]

    # -- CUDA shared memory: no CUDA IPC in this build ---------------------------------------
    def register_cuda(self, name: str) -> None:
        raise unsupported(
            f"failed to register CUDA shared memory region '{name}': "
            "CUDA shared memory is not supported on this server (no CUDA device)"
        )

    def cuda_status(self, name: str = "") -> list[dict[str, Any]]:
        if name:
            raise not_found(f"Unable to find cuda shared memory region: '{name}'")
        return []

    def unregister_cuda(self, name: str = "") -> None:
        return None

    def close(self) -> None:
        self.unregister_system()

    def _close(self, m: mmap.mmap) -> None:
        try:
            m.close()
        except BufferError:
            self._closing.append(m)

    def _reap(self) -> None:
        pending, self._closing = self._closing, []
        for m in pending:
            self._close(m)
