"""Shared-memory regions registered by clients: system (POSIX shm) and CUDA (IPC handles).

Triton's semantics: a system region is ``[offset, offset + byte_size)`` of the POSIX shm object
``key``; a CUDA region is ``byte_size`` bytes of another process's device allocation, opened from
its ``cudaIpcMemHandle_t`` on ``device_id``. Every use is checked against the region before a
byte is read or written. Region names are one namespace across both kinds (Triton's manager).

A system region is an open file descriptor, not a mapping: ``read`` copies with ``pread`` and
``write`` stores with ``pwrite``, so a client that truncates its file after registering gets an
error for its request instead of killing the server with SIGBUS on a mapped page past the end.
The key is opened with ``O_NOFOLLOW`` and must be a regular file: a symlink in ``/dev/shm``
cannot point the server's writes at another file.

A request holds every region it names, inputs and outputs, from validation (``hold``) until
its response is built (``release``), as Triton's in-flight requests keep their regions mapped;
unregistering a held region is refused with Triton's INTERNAL "it is currently in use." (and,
for unregister-all, its list of every held region), and the region stays registered.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tritonlite.contracts.errors import (
    ErrorCode,
    TritonliteError,
    internal,
    invalid_arg,
    not_found,
)
from tritonlite.gpu import cudart

log = logging.getLogger("tritonlite")


@dataclass(slots=True)
class SystemRegion:
    name: str
    key: str
    offset: int
    byte_size: int
    fd: int
    users: int = 0  # requests holding it (hold / release)
    # Guards fd against a close under an instance thread's read or write (a request cancelled
    # while its batch runs no longer holds the region); closed once unregistered.
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


@dataclass(slots=True)
class CudaRegion:
    name: str
    device_id: int
    byte_size: int
    ptr: int  # the device address of the opened IPC allocation in this process
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)  # as SystemRegion's
    closed: bool = False

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}


def _shm_path(key: str) -> str:
    name = key.lstrip("/")
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        raise internal(f"Unable to open shared memory region: '{key}'")
    return os.path.join("/dev/shm", name)


def _open_key(key: str) -> int:
    """An fd on ``/dev/shm/<key>``: never through a symlink, never blocking (a FIFO), and only
    a regular file; INVALID_ARG with Triton's message otherwise."""
    path = _shm_path(key)
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        raise internal(f"Unable to open shared memory region: '{key}'") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise internal(f"Unable to open shared memory region: '{key}'")
    return fd


def in_use(name: str) -> TritonliteError:
    """Triton's refusal to unregister a region that a request is using."""
    return TritonliteError(
        ErrorCode.INTERNAL,
        f"Cannot unregister shared memory region '{name}', it is currently in use.",
    )


class SharedMemoryManager:
    """Owns the registered regions. Registration, status, hold/release and unregistration run
    on the event loop thread; ``read``/``write`` may run on an instance thread, on a region
    that a request holds (so it cannot be unregistered under them)."""

    def __init__(self, cuda: Callable[[], cudart.Runtime | None] = cudart.load) -> None:
        self._system: dict[str, SystemRegion] = {}
        self._cuda: dict[str, CudaRegion] = {}
        self._cuda_runtime = cuda
        # id(request) -> the regions it holds; empty unless a request writes shared memory
        self.holding: dict[int, list[SystemRegion | CudaRegion]] = {}

    def _check_new_name(self, name: str) -> None:
        if not name:
            raise invalid_arg("shared memory region name must not be empty")
        if name in self._system or name in self._cuda:
            raise TritonliteError(
                ErrorCode.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )

    # -- requests using regions ------------------------------------------------------------
    def hold(self, request: object, names: Iterable[str]) -> None:
        """``request`` uses the regions ``names`` until ``release(request)``; unregistering
        them is refused meanwhile. Names that are not registered are skipped (the request's
        validation reports them)."""
        regions: list[SystemRegion | CudaRegion] = []
        for n in names:
            region = self._system.get(n) or self._cuda.get(n)
            if region is not None:
                region.users += 1
                regions.append(region)
        if regions:
            self.holding.setdefault(id(request), []).extend(regions)

    def release(self, request: object) -> None:
        """End ``request``'s holds (idempotent)."""
        for region in self.holding.pop(id(request), ()):
            region.users -= 1

    # -- system shared memory --------------------------------------------------------------
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._check_new_name(name)
        if offset < 0 or byte_size < 0:
            raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        fd = _open_key(key)
        try:
            if byte_size == 0 or offset + byte_size > os.fstat(fd).st_size:
                # (Triton 2.51 answers 500 "Invalid shared memory region: '<key>'" instead
                # when another region already maps this key: it allows a key once)
                raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        except BaseException:
            os.close(fd)
            raise
        self._system[name] = SystemRegion(name, key, offset, byte_size, fd)

    def system_status(self, name: str = "") -> list[dict[str, Any]]:
        if name:
            region = self._system.get(name)
            if region is None:
                raise not_found(f"Unable to find system shared memory region: '{name}'")
            return [region.status()]
        return [self._system[n].status() for n in sorted(self._system)]  # Triton: name order

    def unregister_system(self, name: str = "") -> None:
        """Unregister ``name`` (every region when empty); a region a request holds stays, and
        the call fails naming it, as Triton's does."""
        busy = []
        for n in [name] if name else list(self._system):
            region = self._system.get(n)
            if region is None:
                continue
            if region.users:
                busy.append(n)
                continue
            del self._system[n]
            _close_system(region)
        _raise_busy(busy, "system", not name)

    def _system_slice(self, name: str, offset: int, byte_size: int) -> tuple[SystemRegion, int]:
        """The region and the file position of ``[offset, offset + byte_size)`` in it."""
        region = self._system.get(name)
        if region is None:
            if name in self._cuda:
                raise invalid_arg(
                    f"shared memory region '{name}' is CUDA memory: it has no host view"
                )
            raise not_found(f"Unable to find shared memory region: '{name}'")
        _check_slice(name, region.byte_size, offset, byte_size)
        return region, region.offset + offset

    def view(self, name: str, offset: int, byte_size: int) -> memoryview:
        """The bytes of a slice of system region ``name``: a copy, as ``read`` (regions are
        not mapped); INVALID_ARG for a CUDA region, which has no host bytes."""
        self._system_slice(name, offset, byte_size)
        return self.read(name, offset, byte_size)

    def check(self, name: str, offset: int, byte_size: int) -> None:
        """Raise INVALID_ARG unless ``[offset, offset + byte_size)`` lies in region ``name``."""
        if name in self._cuda:
            self._cuda_slice(name, offset, byte_size)
        else:
            self._system_slice(name, offset, byte_size)

    def read(self, name: str, offset: int, byte_size: int) -> memoryview:
        """A copy of the bytes of a slice of either kind of region."""
        if name not in self._cuda:
            region, pos = self._system_slice(name, offset, byte_size)
            buf = bytearray(byte_size)
            if byte_size:
                with region.lock:
                    if region.closed:
                        raise not_found(f"Unable to find shared memory region: '{name}'")
                    try:
                        got = os.preadv(region.fd, [buf], pos)
                    except OSError as exc:
                        raise _io_error(name, "read", exc) from None
                if got != byte_size:
                    raise _truncated(name)
            return memoryview(buf)
        cregion, rt = self._cuda_slice(name, offset, byte_size)
        host = np.empty(byte_size, dtype=np.uint8)
        if byte_size:
            try:
                with cregion.lock:
                    if cregion.closed:
                        raise not_found(f"Unable to find shared memory region: '{name}'")
                    rt.set_device(cregion.device_id)
                    rt.to_host(host.ctypes.data, cregion.ptr + offset, byte_size)
            except cudart.CudaError as exc:
                raise TritonliteError(
                    ErrorCode.INTERNAL, f"failed to read CUDA shared memory region '{name}': {exc}"
                ) from None
        return memoryview(host.data)

    def write(self, name: str, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` at ``offset`` of region ``name`` (either kind)."""
        raw = memoryview(data).cast("B")
        size = len(raw)
        if name not in self._cuda:
            region, pos = self._system_slice(name, offset, size)
            with region.lock:
                if region.closed:
                    raise not_found(f"Unable to find shared memory region: '{name}'")
                try:
                    if os.fstat(region.fd).st_size < region.offset + region.byte_size:
                        raise _truncated(name)
                    done = 0
                    while done < size:
                        done += os.pwrite(region.fd, raw[done:], pos + done)
                except OSError as exc:
                    raise _io_error(name, "write", exc) from None
            return
        cregion, rt = self._cuda_slice(name, offset, size)
        if not size:
            return
        host = np.frombuffer(raw, dtype=np.uint8)
        try:
            with cregion.lock:
                if cregion.closed:
                    raise not_found(f"Unable to find shared memory region: '{name}'")
                rt.set_device(cregion.device_id)
                rt.to_device(cregion.ptr + offset, host.ctypes.data, size)
        except cudart.CudaError as exc:
            raise TritonliteError(
                ErrorCode.INTERNAL, f"failed to write CUDA shared memory region '{name}': {exc}"
            ) from None

    # -- CUDA shared memory ------------------------------------------------------------------
    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Open the client's IPC handle. As Triton, a handle that cannot be opened (no CUDA
        device here, no such device, a bad handle) answers only INVALID_ARG "failed to
        register shared memory region: invalid args"; why is logged."""
        self._check_new_name(name)
        if byte_size <= 0:
            raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
        rt = self._cuda_runtime()
        devices = rt.device_count() if rt is not None else 0
        if len(raw_handle) != 64:
            why = f"raw_handle must be 64 bytes, got {len(raw_handle)}"
        elif rt is None or devices == 0:
            why = "CUDA shared memory is not supported on this server (no CUDA device)"
        elif device_id < 0 or device_id >= devices:
            why = f"device {device_id} does not exist"
        else:
            try:
                rt.set_device(device_id)
                ptr = rt.ipc_open(bytes(raw_handle))
                why = ""
            except cudart.CudaError as exc:
                why = str(exc)
        if why:
            log.error("failed to register CUDA shared memory region '%s': %s", name, why)
            raise invalid_arg("failed to register shared memory region: invalid args")
        self._cuda[name] = CudaRegion(name, device_id, byte_size, ptr)

    def cuda_status(self, name: str = "") -> list[dict[str, Any]]:
        if name:
            region = self._cuda.get(name)
            if region is None:
                raise not_found(f"Unable to find cuda shared memory region: '{name}'")
            return [region.status()]
        return [self._cuda[n].status() for n in sorted(self._cuda)]

    def unregister_cuda(self, name: str = "") -> None:
        """As ``unregister_system``, for CUDA regions."""
        busy = []
        for n in [name] if name else list(self._cuda):
            region = self._cuda.get(n)
            if region is None:
                continue
            if region.users:
                busy.append(n)
                continue
            del self._cuda[n]
            self._ipc_close(region)
        _raise_busy(busy, "cuda", not name)

    def _ipc_close(self, region: CudaRegion) -> None:
        with region.lock:
            region.closed = True
            rt = self._cuda_runtime()
            if rt is None:
                return
            try:
                rt.set_device(region.device_id)
                rt.ipc_close(region.ptr)
            except cudart.CudaError:
                pass  # the client's process may already have freed it; nothing to undo

    def _cuda_slice(self, name: str, offset: int, byte_size: int) -> tuple[CudaRegion, Any]:
        region = self._cuda[name]
        _check_slice(name, region.byte_size, offset, byte_size)
        rt = self._cuda_runtime()
        if rt is None:
            raise TritonliteError(ErrorCode.INTERNAL, "the CUDA runtime is gone")
        return region, rt

    def close(self) -> None:
        """Unregister everything, held or not (the server is stopping)."""
        self.holding.clear()
        for region in self._system.values():
            _close_system(region)
        for cregion in self._cuda.values():
            self._ipc_close(cregion)
        self._system.clear()
        self._cuda.clear()


def _check_slice(name: str, size: int, offset: int, byte_size: int) -> None:
    """Triton's bounds checks, in its order: an offset outside the region (a negative one is
    a huge unsigned one to Triton), then a slice that runs past its end."""
    if offset < 0 or offset >= size:
        raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
    if byte_size < 0 or offset + byte_size > size:
        raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")


def _close_system(region: SystemRegion) -> None:
    with region.lock:
        region.closed = True
        os.close(region.fd)


def _raise_busy(busy: list[str], kind: str, every: bool) -> None:
    """Triton's refusals: one region by name, or (``every``: an unregister-all) the list of
    the regions left, in name order, each followed by " ," as Triton writes it."""
    if not busy:
        return
    if not every:
        raise in_use(busy[0])
    raise TritonliteError(
        ErrorCode.INTERNAL,
        f"Failed to unregister the following {kind} shared memory regions: "
        + "".join(f"{n} ," for n in sorted(busy)),
    )


def _truncated(name: str) -> TritonliteError:
    return invalid_arg(
        f"shared memory region '{name}' is smaller than when it was "
        "registered: its file was truncated"
    )


def _io_error(name: str, what: str, exc: OSError) -> TritonliteError:
    code = ErrorCode.INVALID_ARG if exc.errno in (errno.EFBIG, errno.ENOSPC) else ErrorCode.INTERNAL
    return TritonliteError(
        code,
        f"failed to {what} shared memory region '{name}': {exc.strerror or type(exc).__name__}",
    )
