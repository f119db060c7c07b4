"""GPU discovery: every count is 0 without CUDA, and real counts where a device exists."""

from __future__ import annotations

import pytest

from tritonlite.gpu import cudart, devices

HAS_GPU = devices.visible_gpus() > 0


@pytest.mark.skipif(HAS_GPU, reason="this machine has a CUDA device")
def test_without_a_device_every_backend_counts_zero() -> None:
    for backend in ("onnxruntime", "pytorch", "tensorrt", "python", "other"):
        assert devices.usable_gpus(backend) == 0


def test_runtime_loads_or_is_absent_without_raising() -> None:
    rt = cudart.load()
    if rt is not None:
        assert rt.device_count() >= 0
        with pytest.raises(cudart.CudaError, match="IPC handle has 64 bytes"):
            rt.ipc_open(b"short")


@pytest.mark.gpu
def test_devices_are_counted() -> None:
    assert cudart.device_count() >= 1
    assert devices.usable_gpus("python") == devices.visible_gpus()
