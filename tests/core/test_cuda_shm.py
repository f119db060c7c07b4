"""CUDA shared-memory regions over a stand-in CUDA runtime, through the real core.

The stand-in keeps "device memory" in host buffers that the IPC handles name, and copies with
``memmove`` between real addresses, so the manager's pointer arithmetic, bounds checks and the
request path (inputs read from a region, outputs written into one) run as they do on a GPU.
"""

from __future__ import annotations

import asyncio
import ctypes
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest, RequestedOutput, ShmRef
from tritonlite.core.core import InferenceCore
from tritonlite.core.tensors.shm import SharedMemoryManager
from tritonlite.gpu import cudart
from tritonlite.options import ServerOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from repos import write_add_sub  # noqa: E402

pytestmark = pytest.mark.timeout(60)


class FakeRuntime:
    """Two devices; allocations are host buffers addressed by their IPC handle."""

    def __init__(self) -> None:
        self.allocations: dict[bytes, ctypes.Array[ctypes.c_char]] = {}
        self.opened: dict[int, bytes] = {}
        self.device = -1

    def alloc(self, nbytes: int) -> bytes:
        handle = bytes([len(self.allocations) + 1]) * cudart.IPC_HANDLE_BYTES
        self.allocations[handle] = ctypes.create_string_buffer(nbytes)
        return handle

    def memory(self, handle: bytes) -> bytearray:
        return bytearray(self.allocations[handle].raw)

    def device_count(self) -> int:
        return 2

    def set_device(self, device: int) -> None:
        self.device = device

    def ipc_open(self, handle: bytes) -> int:
        if handle not in self.allocations:
            raise cudart.CudaError("cudaIpcOpenMemHandle failed: invalid argument")
        ptr = ctypes.addressof(self.allocations[handle])
        self.opened[ptr] = handle
        return ptr

    def ipc_close(self, ptr: int) -> None:
        del self.opened[ptr]

    def to_host(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    def to_device(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)


def test_register_read_write_status_unregister() -> None:
    rt = FakeRuntime()
    shm = SharedMemoryManager(cuda=lambda: rt)
    handle = rt.alloc(64)
    shm.register_cuda("r", handle, 1, 64)
    assert rt.device == 1
    assert shm.cuda_status() == [{"name": "r", "device_id": 1, "byte_size": 64}]
    shm.write("r", 8, b"\x01\x02\x03\x04")
    assert rt.memory(handle)[8:12] == b"\x01\x02\x03\x04"
    assert bytes(shm.read("r", 6, 8)) == b"\x00\x00\x01\x02\x03\x04\x00\x00"
    shm.check("r", 0, 64)
    for offset, size in ((60, 8), (0, 65), (-1, 2), (64, 0)):
        what = "offset + byte size" if offset in (0, 60) else "offset"
        with pytest.raises(TritonliteError, match=f"^Invalid {re.escape(what)} for shared"):
            shm.read("r", offset, size)
    with pytest.raises(TritonliteError, match="Invalid offset \\+ byte size"):
        shm.write("r", 62, b"abc")
    shm.unregister_cuda("r")
    assert rt.opened == {} and shm.cuda_status() == []
    with pytest.raises(TritonliteError) as e:
        shm.cuda_status("r")
    assert e.value.code == ErrorCode.NOT_FOUND


INVALID = "failed to register shared memory region: invalid args"


def _refused(shm: SharedMemoryManager, caplog: pytest.LogCaptureFixture, *args: object) -> str:
    """Triton's one answer to a handle that cannot be opened; returns the logged reason."""
    caplog.clear()
    with pytest.raises(TritonliteError) as e:
        shm.register_cuda(*args)  # type: ignore[arg-type]
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_ARG, INVALID)
    return caplog.text


def test_register_errors(caplog: pytest.LogCaptureFixture) -> None:
    rt = FakeRuntime()
    shm = SharedMemoryManager(cuda=lambda: rt)
    handle = rt.alloc(16)
    shm.register_cuda("r", handle, 0, 16)
    with pytest.raises(TritonliteError) as e:
        shm.register_cuda("r", handle, 0, 16)
    assert e.value.code == ErrorCode.ALREADY_EXISTS
    assert "device 5 does not exist" in _refused(shm, caplog, "s", handle, 5, 16)
    assert "cudaIpcOpenMemHandle failed" in _refused(shm, caplog, "s", b"\xff" * 64, 0, 16)
    assert "raw_handle must be 64 bytes, got 8" in _refused(shm, caplog, "s", b"\0" * 8, 0, 16)
    with pytest.raises(TritonliteError, match="failed to register shared memory region 's'"):
        shm.register_cuda("s", handle, 0, 0)
    with pytest.raises(TritonliteError, match="has no host view"):
        shm.view("r", 0, 4)


def test_without_cuda_registration_is_refused_as_triton_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shm = SharedMemoryManager(cuda=lambda: None)
    assert "no CUDA device" in _refused(shm, caplog, "r", b"\0" * 64, 0, 16)
    assert shm.cuda_status() == []


def test_names_are_one_namespace_across_kinds(tmp_path: Path) -> None:
    rt = FakeRuntime()
    shm = SharedMemoryManager(cuda=lambda: rt)
    key = f"tl_test_ns_{id(shm)}"
    path = Path("/dev/shm") / key
    path.write_bytes(b"\0" * 32)
    try:
        shm.register_system("r", key, 0, 32)
        with pytest.raises(TritonliteError) as e:
            shm.register_cuda("r", rt.alloc(16), 0, 16)
        assert e.value.code == ErrorCode.ALREADY_EXISTS
    finally:
        shm.close()
        path.unlink()


def test_inference_reads_inputs_from_and_writes_outputs_to_cuda_regions(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "add_sub", 8)
    rt = FakeRuntime()
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.float32)
    nbytes = a.nbytes
    inputs = rt.alloc(2 * nbytes)
    outputs = rt.alloc(2 * nbytes)
    ctypes.memmove(rt.allocations[inputs], a.tobytes() + b.tobytes(), 2 * nbytes)

    async def main() -> None:
        core = InferenceCore(ServerOptions(model_repositories=(tmp_path,)))
        core.shm._cuda_runtime = lambda: rt
        assert await core.start() == []
        try:
            core.register_cuda_shm("in", inputs, 0, 2 * nbytes, peer_is_local=True)
            core.register_cuda_shm("out", outputs, 0, 2 * nbytes, peer_is_local=True)
            req = InferRequest(
                model_name="add_sub",
                inputs=[
                    InferInput("INPUT0", "FP32", (1, 16), shm=ShmRef("in", nbytes, 0)),
                    InferInput("INPUT1", "FP32", (1, 16), shm=ShmRef("in", nbytes, nbytes)),
                ],
                outputs=[
                    RequestedOutput("OUTPUT0", shm=ShmRef("out", nbytes, 0)),
                    RequestedOutput("OUTPUT1", shm=ShmRef("out", nbytes, nbytes)),
                ],
            )
            resp = await core.infer(req)
            assert [o.shm.region for o in resp.outputs if o.shm] == ["out", "out"]
            mem = rt.memory(outputs)
            np.testing.assert_array_equal(np.frombuffer(mem[:nbytes], np.float32), (a + b).ravel())
            np.testing.assert_array_equal(np.frombuffer(mem[nbytes:], np.float32), (a - b).ravel())
            # an output slice that does not fit is refused before the model runs
            bad = InferRequest(
                model_name="add_sub",
                inputs=req.inputs[:1] + [InferInput("INPUT1", "FP32", (1, 16), b)],
                outputs=[RequestedOutput("OUTPUT0", shm=ShmRef("out", nbytes, nbytes + 8))],
            )
            with pytest.raises(TritonliteError, match="Invalid offset \\+ byte size"):
                await core.infer(bad)
        finally:
            await core.stop()
        assert rt.opened == {}  # closed with the server

    asyncio.run(main())
