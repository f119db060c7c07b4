"""Python-backend models (real ``model.py`` files) behind a real server, seen by tritonclient.http.

The models are written the way Triton users write them (``import triton_python_backend_utils as
pb_utils``); every one of them would run unchanged on Triton's python backend, except the response
parameters model (Triton 2.51 lacks them; newer releases have them).
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from conftest import start_server
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

ADD_SUB = '''
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Triton's classic python add_sub example."""

    def initialize(self, args):
        self.model_config = model_config = json.loads(args["model_config"])
        output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
        self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            out_0, out_1 = (in_0.as_numpy() + in_1.as_numpy(), in_0.as_numpy() - in_1.as_numpy())
            out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
            out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[out_tensor_0, out_tensor_1]))
        return responses

    def finalize(self):
        print("Cleaning up...")
'''

ADD_SUB_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
{extra}
"""

STRINGS_CONFIG = """
backend: "python"
max_batch_size: 0
input { name: "IN" data_type: TYPE_STRING dims: [ -1 ] }
output { name: "OUT" data_type: TYPE_STRING dims: [ -1 ] }
"""

BYTES_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            items = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            assert all(type(x) is bytes for x in items)
            kind = request.parameters()
            if '"as_str"' in kind:  # object array of str, encoded as UTF-8 by the server
                out = np.array([x.decode("utf-8").upper() for x in items], dtype=object)
            elif '"as_bytes_"' in kind:
                out = np.array([x[::-1] for x in items], dtype=np.bytes_)
            else:
                out = np.array([x[::-1] for x in items], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses
"""

ERRORS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0]
            if value == b"raise":
                raise RuntimeError("the model broke")
            if value == b"bls":
                pb_utils.InferenceRequest(model_name="add_sub", inputs=[],
                                          requested_output_names=["OUTPUT0"]).exec()
            if value == b"invalid":
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "IN must not be 'invalid'", pb_utils.TritonError.INVALID_ARG)))
            elif value == b"unsupported":
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "no such mode", pb_utils.TritonError.UNSUPPORTED)))
            else:
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([b"fine"], dtype=object))],
                    parameters={"note": "ok", "count": 3, "exact": True, "ratio": 0.5}))
        return responses
"""

UTILS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils
import utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", np.array([utils.greeting().encode()], dtype=object))]) for _ in requests]
"""

AUTO_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [2]})
        auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_INT32", "dims": [2]})
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 10)]) for r in requests]
"""

ASYNC_MODEL = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        async def one(request):
            await asyncio.sleep(0.01)
            items = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            return pb_utils.InferenceResponse([pb_utils.Tensor(
                "OUT", np.array([b"async:" + x for x in items], dtype=object))])
        return list(await asyncio.gather(*(one(r) for r in requests)))
"""

ARGS_MODEL = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        self.args["get_model_dir"] = pb_utils.get_model_dir()

    def execute(self, requests):
        text = json.dumps(self.args).encode()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([text], dtype=object))])
                for _ in requests]

    def is_ready(self):
        return True
"""

NOT_READY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def is_ready(self):
        return False

    def execute(self, requests):
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""

BATCH_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # Each request keeps its own tensors; OUT says how many requests shared this execute.
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", np.full_like(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy(),
                                len(requests)))]) for r in requests]
"""

BATCH_CONFIG = """
backend: "python"
max_batch_size: 8
input { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 50000 }
"""

DECOUPLED_CONFIG = STRINGS_CONFIG + "model_transaction_policy { decoupled: true }\n"


def _write(
    repo: Path, name: str, code: str, config: str | None, files: dict[str, str] | None = None
) -> None:
    vdir = repo / name / "1"
    vdir.mkdir(parents=True)
    (vdir / "model.py").write_text(textwrap.dedent(code))
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)
    for rel, text in (files or {}).items():
        (repo / name / rel).write_text(text)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("python_repo")
    _write(
        repo, "add_sub", ADD_SUB, ADD_SUB_CONFIG.format(name="add_sub", mbs=8, count=2, extra="")
    )
    _write(
        repo,
        "add_sub_nobatch",
        ADD_SUB,
        ADD_SUB_CONFIG.format(name="add_sub_nobatch", mbs=0, count=1, extra=""),
    )
    _write(repo, "strings", BYTES_MODEL, STRINGS_CONFIG)
    _write(repo, "errors", ERRORS_MODEL, STRINGS_CONFIG)
    for who in ("left", "right"):
        _write(
            repo,
            f"utils_{who}",
            UTILS_MODEL,
            STRINGS_CONFIG,
            files={"1/utils.py": f"def greeting():\n    return 'hello from {who}'\n"},
        )
    _write(repo, "auto", AUTO_MODEL, None)
    _write(repo, "async_model", ASYNC_MODEL, STRINGS_CONFIG)
    _write(repo, "args", ARGS_MODEL, STRINGS_CONFIG)
    _write(repo, "not_ready", NOT_READY_MODEL, STRINGS_CONFIG)
    _write(repo, "batcher", BATCH_MODEL, BATCH_CONFIG)
    _write(repo, "decoupled", BYTES_MODEL, DECOUPLED_CONFIG)
    return repo


@pytest.fixture(scope="module")
def server(repo: Path) -> Any:
    s = start_server(
        repo,
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--exit-on-error=false",
        "--strict-readiness=false",
    )
    yield s
    s.stop()


@pytest.fixture()
def client(server: Any) -> Any:
    c = httpclient.InferenceServerClient(server.http_url)
    yield c
    c.close()


def _strings(values: list[bytes], binary: bool = True) -> list[httpclient.InferInput]:
    i = httpclient.InferInput("IN", [len(values)], "BYTES")
    i.set_data_from_numpy(np.array(values, dtype=object), binary_data=binary)
    return [i]


def _fp32(a: np.ndarray, b: np.ndarray, binary: bool = True) -> list[httpclient.InferInput]:
    inputs = []
    for name, arr in (("INPUT0", a), ("INPUT1", b)):
        i = httpclient.InferInput(name, list(arr.shape), "FP32")
        i.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(i)
    return inputs


@pytest.mark.parametrize("binary", [True, False])
def test_add_sub(client: Any, binary: bool) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), dtype=np.float32)
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")
    ]
    r = client.infer("add_sub", _fp32(a, b, binary), outputs=outputs, request_id="7")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert r.get_response()["id"] == "7" and r.get_response()["model_version"] == "1"
    r = client.infer("add_sub_nobatch", _fp32(a[0], b[0], binary))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a[0] + b[0])


def test_only_requested_outputs(client: Any) -> None:
    a = np.ones((1, 4), dtype=np.float32)
    r = client.infer("add_sub", _fp32(a, a), outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert [o["name"] for o in r.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), np.zeros((1, 4), np.float32))


def test_metadata_and_config(client: Any) -> None:
    md = client.get_model_metadata("add_sub")
    assert md["platform"] == "python"
    assert md["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}
    cfg = client.get_model_config("add_sub")
    assert cfg["backend"] == "python" and cfg["platform"] == ""
    assert cfg["default_model_filename"] == "model.py"
    assert cfg["instance_group"][0]["count"] == 2


@pytest.mark.parametrize("binary", [True, False])
def test_bytes_round_trip(client: Any, binary: bool) -> None:
    # JSON carries UTF-8 text only (and the model reverses bytes): binary gets arbitrary bytes.
    values = (
        [b"abc", b"", "h\u00e9llo".encode(), b"\x00\x01\xff"] if binary else [b"abc", b"", b"x y"]
    )
    r = client.infer(
        "strings",
        _strings(values, binary),
        outputs=[httpclient.InferRequestedOutput("OUT", binary_data=binary)],
    )
    got = [v if isinstance(v, bytes) else v.encode() for v in r.as_numpy("OUT").tolist()]
    assert got == [v[::-1] for v in values]  # the client gives JSON BYTES back as str
    assert r.get_response()["outputs"][0]["datatype"] == "BYTES"


def test_bytes_outputs_from_str_and_bytes_arrays(client: Any) -> None:
    r = client.infer(
        "strings", _strings([b"ab", "\u00e9t\u00e9".encode()]), parameters={"as_str": True}
    )
    assert r.as_numpy("OUT").tolist() == [b"AB", "\u00c9T\u00c9".encode()]
    r = client.infer("strings", _strings([b"ab", b"cde"]), parameters={"as_bytes_": True})
    assert r.as_numpy("OUT").tolist() == [b"ba", b"edc"]


def test_model_error_code_reaches_the_client(client: Any) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("errors", _strings([b"invalid"]))
    assert info.value.status() == "400"
    assert info.value.message() == "IN must not be 'invalid'"
    with pytest.raises(InferenceServerException) as info:
        client.infer("errors", _strings([b"unsupported"]))
    assert info.value.status() == "501"


def test_exception_in_execute_is_a_500(client: Any) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer("errors", _strings([b"raise"]))
    assert info.value.status() == "500"
    msg = info.value.message()
    assert msg.startswith(
        "Failed to process the request(s) for model 'errors_0', message: "
        "RuntimeError: the model broke\n\nAt:\n"
    ), msg
    assert "model.py" in msg
    r = client.infer("errors", _strings([b"after"]))  # the instance keeps serving
    assert r.as_numpy("OUT").tolist() == [b"fine"]


def test_failed_bls_call_does_not_fail_the_model(client: Any) -> None:
    # BLS errors come back in the BLS response (tests/compat/test_bls.py); nothing raises
    r = client.infer("errors", _strings([b"bls"]))
    assert r.as_numpy("OUT").tolist() == [b"fine"]


def test_response_parameters(client: Any) -> None:
    r = client.infer("errors", _strings([b"ok"]))
    assert r.get_response()["parameters"] == {"note": "ok", "count": 3, "exact": True, "ratio": 0.5}


def test_two_models_with_their_own_utils(client: Any) -> None:
    for who in ("left", "right", "left"):
        r = client.infer(f"utils_{who}", _strings([b"x"]))
        assert r.as_numpy("OUT").tolist() == [f"hello from {who}".encode()]


def test_auto_complete_config(client: Any) -> None:
    cfg = client.get_model_config("auto")
    assert cfg["max_batch_size"] == 8
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [
        ("X", "TYPE_INT32", [2])
    ]
    assert [(o["name"], o["data_type"], o["dims"]) for o in cfg["output"]] == [
        ("Y", "TYPE_INT32", [2])
    ]
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [8]
    x = np.array([[1, 2], [3, 4]], dtype=np.int32)
    i = httpclient.InferInput("X", [2, 2], "INT32")
    i.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("auto", [i]).as_numpy("Y"), x * 10)


def test_async_execute(client: Any) -> None:
    r = client.infer("async_model", _strings([b"a", b"b"]))
    assert r.as_numpy("OUT").tolist() == [b"async:a", b"async:b"]


def test_initialize_args_match_the_config_endpoint(client: Any, repo: Path) -> None:
    args = json.loads(client.infer("args", _strings([b"x"])).as_numpy("OUT")[0])
    assert json.loads(args.pop("model_config")) == client.get_model_config("args")
    assert args == {
        "model_instance_kind": "CPU",
        "model_instance_name": "args_0",
        "model_instance_device_id": "0",
        "model_repository": str(repo / "args"),
        "model_version": "1",
        "model_name": "args",
        "get_model_dir": str(repo / "args" / "1"),
    }


def test_is_ready_decides_model_readiness(client: Any) -> None:
    assert client.is_model_ready("args") is True
    assert client.is_model_ready("not_ready") is False


def test_decoupled_model_loads_and_infer_refuses_it(client: Any) -> None:
    # Decoupled models are served (tests/compat/test_decoupled.py); /infer refuses them.
    assert client.is_model_ready("decoupled") is True
    inp = httpclient.InferInput("IN", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"x"], dtype=object))
    with pytest.raises(InferenceServerException) as info:
        client.infer("decoupled", [inp])
    assert info.value.status() == "501"
    assert "HTTP end point doesn't support models with decoupled" in info.value.message()


async def _burst(url: str, n: int) -> list[int]:
    c = aioclient.InferenceServerClient(url)
    try:

        async def one(k: int) -> int:
            i = aioclient.InferInput("IN", [1, 1], "INT32")
            i.set_data_from_numpy(np.array([[k]], dtype=np.int32))
            r = await c.infer("batcher", [i], request_id=str(k))
            assert r.get_response()["id"] == str(k)
            return int(r.as_numpy("OUT")[0, 0])

        return list(await asyncio.gather(*(one(k) for k in range(n))))
    finally:
        await c.close()


def test_dynamic_batching_hands_several_requests_to_one_execute(client: Any, server: Any) -> None:
    shared = asyncio.run(_burst(server.http_url, 8))
    assert max(shared) > 1  # some execute saw more than one request
    s = client.get_inference_statistics("batcher")["model_stats"][0]
    assert s["inference_count"] == 8 and s["inference_stats"]["success"]["count"] == 8
    assert s["execution_count"] < 8
