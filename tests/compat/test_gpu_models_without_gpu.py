"""Models that need a GPU, on a server without one: each fails to load with a clear reason and
the rest of the repository serves (Triton's behaviour for a model that cannot load)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import start_server
from repos import write_add_sub
from tritonclient.utils import InferenceServerException

from tritonlite.gpu.devices import visible_gpus

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(visible_gpus() > 0, reason="this machine has a CUDA device"),
]

GPU_GROUP = "instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n"


def _plan_model(repo: Path, name: str, extra: str = "") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.plan").write_bytes(b"not a real engine")
    (repo / name / "config.pbtxt").write_text(
        'platform: "tensorrt_plan"\nmax_batch_size: 8\n'
        'input { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }\n'
        'output { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }\n' + extra
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    repo = tmp_path_factory.mktemp("gpu_models")
    write_add_sub(repo, "add_sub", 8)
    write_add_sub(repo, "add_sub_gpu", 8, extra_config=GPU_GROUP)
    write_add_sub(repo, "add_sub_auto", 8, extra_config="instance_group [ { kind: KIND_AUTO } ]\n")
    _plan_model(repo, "plan_auto")
    _plan_model(repo, "plan_gpu", GPU_GROUP)
    s = start_server(repo, "--exit-on-error=false")
    yield s
    s.stop()


def test_gpu_models_fail_to_load_with_reasons(server: Any) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    index = {m["name"]: m for m in client.get_model_repository_index()}
    for name in ("add_sub_gpu", "plan_gpu"):
        assert index[name]["state"] == "UNAVAILABLE"
        assert "specifies invalid or unsupported gpu id 0" in index[name]["reason"]
    reason = index["plan_auto"]["reason"]
    assert index["plan_auto"]["state"] == "UNAVAILABLE"
    assert "tensorrt" in reason.lower() and ("not installed" in reason or "CUDA" in reason)


def test_kind_auto_resolves_to_cpu_and_serves(server: Any) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    cfg = client.get_model_config("add_sub_auto")
    assert [g["kind"] for g in cfg["instance_group"]] == ["KIND_CPU"]
    a = np.ones((1, 16), np.float32)
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for inp in inputs:
        inp.set_data_from_numpy(a)
    res = client.infer("add_sub_auto", inputs)
    np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + a)
    assert client.is_model_ready("add_sub")


def test_cuda_shared_memory_registration_is_refused_cleanly(server: Any) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    for handle, message in (
        # tritonclient takes the handle base64-encoded (as cuda_shared_memory.get_raw_handle
        # gives it); Triton's words, the reason ("no CUDA device") goes to the log
        (base64.b64encode(b"\0" * 64), "failed to register shared memory region: invalid args"),
        (b"not base64!", "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"),
    ):
        with pytest.raises(InferenceServerException) as e:
            client.register_cuda_shared_memory("r", handle, 0, 64)
        assert (e.value.status(), e.value.message()) == ("400", message)
    assert client.get_cuda_shared_memory_status() == []
