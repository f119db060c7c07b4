"""BYTES through ONNX Runtime string tensors (``identity_string`` of tests/onnx_models.py).

ORT's Python API moves string tensors as text, so bytes that are not UTF-8 cannot pass through
unchanged: they are refused with INVALID_ARG naming the input and element (they used to be
replaced with U+FFFD silently), only the request that sent them fails, and every byte of UTF-8
data (NULs, multi-byte characters, empty elements) comes back as it was sent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server
from tritonclient.utils import InferenceServerException

from tritonlite.backends import AUTO_COMPLETERS
from tritonlite.backends.base import InstanceSpec, ModelContext
from tritonlite.backends.onnxruntime import OnnxRuntimeBackend
from tritonlite.contracts import config as model_config
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferInput, InferRequest

pytestmark = pytest.mark.timeout(90)

GOOD = np.array([[b"x\x00y", b"z\x00", "é€".encode(), b""]], dtype=object)
BAD = np.array([[b"ok", b"\xff\xfe", b"a", b"b"]], dtype=object)


def _client(server: Server, protocol: str) -> tuple[object, object]:
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(server.http_url)
    return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)


def _infer(mod: object, client: object, data: np.ndarray) -> np.ndarray:
    inp = mod.InferInput("INPUT0", [1, 4], "BYTES")  # type: ignore[attr-defined]
    inp.set_data_from_numpy(data)
    out = mod.InferRequestedOutput("OUTPUT0")  # type: ignore[attr-defined]
    result = client.infer("identity_string", [inp], outputs=[out])  # type: ignore[attr-defined]
    return result.as_numpy("OUTPUT0")  # type: ignore[no-any-return]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_utf8_bytes_come_back_unchanged(server: Server, protocol: str) -> None:
    mod, client = _client(server, protocol)
    got = _infer(mod, client, GOOD)
    assert got.tolist() == GOOD.tolist()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_that_are_not_utf8_are_refused(server: Server, protocol: str) -> None:
    mod, client = _client(server, protocol)
    with pytest.raises(InferenceServerException) as exc:
        _infer(mod, client, BAD)
    assert exc.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert "input 'INPUT0': element 1 of the BYTES tensor is not valid UTF-8" in str(exc.value)
    assert _infer(mod, client, GOOD).tolist() == GOOD.tolist()  # still serving


def test_only_the_request_with_bad_bytes_fails_in_a_batch(onnx_repo: Path) -> None:
    model_dir = onnx_repo / "identity_string"
    cfg = model_config.load_model_config(
        model_dir, model_name="identity_string", auto_completers=AUTO_COMPLETERS
    )
    ctx = ModelContext("identity_string", 1, model_dir, model_dir / "1", cfg, "{}")
    backend = OnnxRuntimeBackend(ctx)
    instance = backend.new_instance(InstanceSpec("identity_string_0", "CPU", 0))
    try:
        requests = [
            InferRequest("identity_string", inputs=[InferInput("INPUT0", "BYTES", (1, 4), data)])
            for data in (GOOD, BAD, GOOD[:, ::-1].copy())
        ]
        results = instance.execute(requests, ExecTiming())
        assert isinstance(results[1], TritonliteError)
        assert results[1].code == ErrorCode.INVALID_ARG
        assert "element 1" in results[1].message
        for k in (0, 2):
            out = results[k]
            assert not isinstance(out, TritonliteError), out
            assert out["OUTPUT0"].tolist() == requests[k].inputs[0].data.tolist()
        with pytest.raises(TritonliteError) as exc:  # alone: its batch's error
            instance.execute([requests[1]], ExecTiming())
        assert exc.value.code == ErrorCode.INVALID_ARG
    finally:
        instance.close()
        backend.close()
