"""Python models with ``EXECUTION_ENV_PATH``, run in their own environment, seen by tritonclient.

The environment is real: a venv with numpy<2 (the server runs numpy 2), built once per machine
by the ``np1_env`` fixture with pip (skipped, saying why, where pip cannot reach an index) and
cached under the temp directory. The models use numpy 1 API that numpy 2 removed (``np.NINF``,
``np.float_``), at import time and in ``execute``, so they can only run in that environment:
once as a directory, once as a tarball (``$$TRITON_MODEL_DIRECTORY/env.tar.gz``, unpacked by
the server into a cache keyed by its hash). The same model without the parameter fails to load
with a message that names the numpy API and suggests ``EXECUTION_ENV_PATH``.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server, wait_until
from decoupled_repo import ASYNC_MODEL, DEC_CONFIG, DEC_MODEL, Stream, is_final
from repos import client_for, write_python_model
from support.reference import ReferenceTriton, require_reference
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(300)  # the first run builds the numpy<2 environment

PROTOCOLS = ["http", "grpc"]

NUMPY1_MODEL = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils

FLOOR = np.NINF  # numpy 1 API: removed in numpy 2


class TritonPythonModel:
    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        out = pb_utils.get_output_config_by_name(self.config, "OUT")
        self.out_dtype = pb_utils.triton_string_to_numpy(out["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (x < 0).any():
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)))
                continue
            if (x == 13).any():
                raise pb_utils.TritonModelException("thirteen is unlucky")
            y = np.maximum(x.astype(np.float_) * 2, FLOOR)
            version = np.array([[np.__version__.encode()]] * x.shape[0], dtype=np.object_)
            tag = np.array([[request.request_id() + "|" + request.parameters()]] * x.shape[0],
                           dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", y.astype(self.out_dtype)),
                pb_utils.Tensor("NUMPY", version),
                pb_utils.Tensor("TAG", tag)]))
        return responses

    def finalize(self):
        print("finalized under numpy", np.__version__)
"""

CONFIG = """
backend: "python"
max_batch_size: 8
input [{{ name: "IN" data_type: TYPE_FP32 dims: [4] }}]
output [{{ name: "OUT" data_type: TYPE_FP32 dims: [4] }},
        {{ name: "NUMPY" data_type: TYPE_STRING dims: [1] }},
        {{ name: "TAG" data_type: TYPE_STRING dims: [1] }}]
instance_group [{{ count: 1 kind: KIND_CPU }}]
dynamic_batching {{ max_queue_delay_microseconds: {delay} }}
{env}
"""

CRASHY_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        here = pb_utils.get_model_dir()
        with open(os.path.join(here, "pid"), "w") as f:
            f.write(str(os.getpid()))
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if x[0, 0] == 1:
                open(os.path.join(here, "busy"), "w").close()
                time.sleep(120)
            if x[0, 0] == 2:
                raise SystemExit(7)
            pid = np.full((x.shape[0], 1), os.getpid(), dtype=np.int64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return out
"""

CRASHY_CONFIG = """
backend: "python"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "PID" data_type: TYPE_INT64 dims: [1] }]
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }
"""

ECHO_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            big = pb_utils.get_input_tensor_by_name(request, "BIG").as_numpy()
            big += 1  # inputs are writable, as in Triton
            tensors = [pb_utils.Tensor("TEXT_OUT", text[::-1].copy()),
                       pb_utils.Tensor("BIG_OUT", big)]
            try:
                out.append(pb_utils.InferenceResponse(tensors, parameters={
                    "sum": float(big.sum(dtype=np.float64)), "n": int(text.size)}))
            except TypeError:  # Triton 2.51 has no response parameters
                out.append(pb_utils.InferenceResponse(tensors))
        return out
"""

ECHO_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "TEXT" data_type: TYPE_STRING dims: [-1] },
       { name: "BIG" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "TEXT_OUT" data_type: TYPE_STRING dims: [-1] },
        { name: "BIG_OUT" data_type: TYPE_FP32 dims: [-1] }]
instance_group [{ count: 2 kind: KIND_CPU }]
parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "@ENV@" } }
"""

AUTO_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

SCALE = np.float_(3)  # numpy 1 API at import: auto-complete must run in the environment too


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_FP32",
                                              "dims": [4]})
        auto_complete_model_config.add_output({"name": "OUT", "data_type": "TYPE_FP32",
                                               "dims": [4]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (
            pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * SCALE).astype(np.float32))])
            for r in requests]
"""

AUTO_BAD_MODEL = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "IN", "dims": [4]})
        return auto_complete_model_config

    def execute(self, requests):
        return []
"""

BLS_MODEL = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

NEG = np.NINF  # numpy 1 API: this model can only run in the environment


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            target = request.parameters()
            if "missing" in target:
                answer = pb_utils.InferenceRequest(
                    model_name="no_such_model", inputs=[pb_utils.Tensor("IN", x)],
                    requested_output_names=["OUT"]).exec()
                responses.append(pb_utils.InferenceResponse(error=answer.error()))
                continue
            # one BLS call in this thread, one awaited: both through the server's core
            doubled = pb_utils.InferenceRequest(
                model_name="np1_dir", inputs=[pb_utils.Tensor("IN", x)],
                requested_output_names=["OUT"]).exec()
            twice = pb_utils.get_output_tensor_by_name(doubled, "OUT").as_numpy()
            quadrupled = await pb_utils.InferenceRequest(
                model_name="np1_dir", inputs=[pb_utils.Tensor("IN", twice)],
                requested_output_names=["OUT"], request_id="inner").async_exec()
            texts = []
            stream = pb_utils.InferenceRequest(
                model_name="dec", requested_output_names=["TEXT"], inputs=[
                    pb_utils.Tensor("TEXT", np.array([b"count"], dtype=np.object_)),
                    pb_utils.Tensor("N", np.array([2], dtype=np.int32))]).exec(decoupled=True)
            for part in stream:
                t = pb_utils.get_output_tensor_by_name(part, "TEXT")
                if t is not None:
                    texts.append(t.as_numpy()[0])
            out = pb_utils.get_output_tensor_by_name(quadrupled, "OUT").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.maximum(out, NEG)),
                pb_utils.Tensor("PARTS", np.array([b",".join(texts)] * x.shape[0],
                                                  dtype=np.object_).reshape(-1, 1))]))
        return responses
"""

BLS_CONFIG = """
backend: "python"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] },
        { name: "PARTS" data_type: TYPE_STRING dims: [1] }]
"""

BAD_INIT_MODEL = """
import numpy as np


class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("initialize refused under numpy " + np.__version__)

    def execute(self, requests):
        return []
"""


def _env_param(value: str) -> str:
    return f'parameters {{ key: "EXECUTION_ENV_PATH" value: {{ string_value: "{value}" }} }}'


def _build_np1_env(python: str, dest: Path) -> None:
    """A venv of ``python`` with numpy<2 at ``dest`` (built beside it, then renamed there)."""
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        subprocess.run(
            [python, "-m", "venv", str(tmp)], check=True, timeout=180, capture_output=True
        )
        pip = subprocess.run(
            [
                str(tmp / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "numpy<2",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if pip.returncode != 0:
            pytest.skip(
                "cannot build an environment with numpy<2 (pip cannot reach an index "
                f"or has no numpy<2 wheel): {(pip.stderr or pip.stdout).strip()[-400:]}"
            )
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cached_np1_env(python: str, version: str) -> Path:
    """A venv of ``python`` (Python ``version``) with numpy<2, cached per machine under the
    temp dir; built once, also by parallel test processes."""
    cache = Path(tempfile.gettempdir()) / f"tritonlite-test-numpy1-py{version}-{os.getuid()}"
    cache.mkdir(exist_ok=True)
    dest = cache / "venv"
    with (cache / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / "bin" / "python").exists():
            _build_np1_env(python, dest)
    probe = subprocess.run(
        [
            str(dest / "bin" / "python"),
            "-c",
            "import numpy, sys; print(numpy.__version__, sys.version)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0 and probe.stdout.startswith("1."), probe
    assert probe.stdout.split()[1].startswith(version + "."), probe
    return dest


@pytest.fixture(scope="session")
def np1_env() -> Path:
    """A venv of this Python with numpy<2."""
    return _cached_np1_env(sys.executable, f"{sys.version_info[0]}.{sys.version_info[1]}")


@pytest.fixture(scope="session")
def py38_env() -> Path:
    """A venv of Python 3.8 with numpy<2 (the oldest Python the worker supports), or skip."""
    candidates = []
    pyenv_root = Path(os.path.expanduser("~/.pyenv/versions"))
    if pyenv_root.is_dir():
        candidates += [str(p / "bin" / "python3.8") for p in sorted(pyenv_root.glob("3.8.*"))]
    candidates.append(shutil.which("python3.8"))  # (a pyenv shim may not run: probed below)

    def runs(python: str | None) -> bool:
        return (
            bool(python)
            and subprocess.run(
                [str(python), "-c", "import venv"], capture_output=True, timeout=60
            ).returncode
            == 0
        )

    found = next((c for c in candidates if runs(c)), None)
    if found is None:
        pytest.skip("no python3.8 on this machine (PATH or pyenv)")
    return _cached_np1_env(found, "3.8")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory, np1_env: Path) -> Path:
    r = tmp_path_factory.mktemp("python_env")
    write_python_model(
        r, "np1_dir", NUMPY1_MODEL, CONFIG.format(delay=0, env=_env_param(str(np1_env)))
    )
    write_python_model(
        r,
        "np1_tar",
        NUMPY1_MODEL,
        CONFIG.format(delay=200000, env=_env_param("$$TRITON_MODEL_DIRECTORY/env.tar.gz")),
    )
    # A tarred venv, as a user would ship one next to config.pbtxt (bin/python stays a link).
    with tarfile.open(r / "np1_tar" / "env.tar.gz", "w:gz", compresslevel=1) as tar:
        tar.add(np1_env, arcname=".")
    write_python_model(r, "np1_in_process", NUMPY1_MODEL, CONFIG.format(delay=0, env=""))
    write_python_model(r, "crashy", CRASHY_MODEL, CRASHY_CONFIG)
    (r / "crashy" / "env").symlink_to(np1_env, target_is_directory=True)
    write_python_model(r, "echo", ECHO_MODEL, ECHO_CONFIG.replace("@ENV@", str(np1_env)))
    auto_config = 'backend: "python"\n' + _env_param(str(np1_env))
    write_python_model(r, "auto_env", AUTO_MODEL, auto_config)
    write_python_model(r, "auto_bad", AUTO_BAD_MODEL, auto_config)
    for name, code in (("dec", DEC_MODEL), ("dec_async", ASYNC_MODEL)):
        write_python_model(r, name, code, DEC_CONFIG)
        write_python_model(r, f"{name}_env", code, DEC_CONFIG + _env_param(str(np1_env)))
    write_python_model(r, "bls_env", BLS_MODEL, BLS_CONFIG + _env_param(str(np1_env)))
    write_python_model(
        r, "bad_init", BAD_INIT_MODEL, CONFIG.format(delay=0, env=_env_param(str(np1_env)))
    )
    write_python_model(
        r,
        "missing_env",
        NUMPY1_MODEL,
        CONFIG.format(delay=0, env=_env_param("$$TRITON_MODEL_DIRECTORY/missing.tar.gz")),
    )
    write_python_model(
        r,
        "not_an_env",
        NUMPY1_MODEL,
        CONFIG.format(delay=0, env=_env_param("$$TRITON_MODEL_DIRECTORY/config.pbtxt")),
    )
    return r


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    cache = tmp_path_factory.mktemp("env_cache")
    s = start_server(
        repo,
        "--allow-metrics=false",
        "--model-control-mode=explicit",
        "--load-model=np1_dir",
        "--load-model=np1_tar",
        "--load-model=crashy",
        "--load-model=echo",
        "--load-model=auto_env",
        "--load-model=dec",
        "--load-model=dec_env",
        "--load-model=dec_async",
        "--load-model=dec_async_env",
        "--load-model=bls_env",
        env={"TRITONLITE_PYTHON_ENV_CACHE": str(cache)},
    )
    yield s
    s.stop()


def _infer(
    server: Server,
    protocol: str,
    model: str,
    x: np.ndarray,
    request_id: str = "",
    parameters: dict[str, str] | None = None,
) -> dict[str, Any]:
    client, mod = client_for(server, protocol)
    inp = mod.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    kwargs: dict[str, Any] = {"request_id": request_id}
    if parameters:
        kwargs["parameters"] = parameters
    result = client.infer(model, [inp], **kwargs)
    return {name: result.as_numpy(name) for name in ("OUT", "NUMPY", "TAG")}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["np1_dir", "np1_tar"])
def test_numpy1_model_runs_in_its_environment(server: Server, protocol: str, model: str) -> None:
    x = np.array([[1.0, -0.0, 2.5, 1e30]], dtype=np.float32)
    out = _infer(server, protocol, model, x, request_id="r-7", parameters={"k": "v"})
    np.testing.assert_array_equal(out["OUT"], x * 2)
    assert out["OUT"].dtype == np.float32
    assert out["NUMPY"].shape == (1, 1) and out["NUMPY"][0, 0].startswith(b"1."), out["NUMPY"]
    assert out["TAG"][0, 0] == b'r-7|{"k":"v"}'


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_model_errors_reach_the_client(server: Server, protocol: str) -> None:
    with pytest.raises(InferenceServerException) as e:
        _infer(server, protocol, "np1_dir", np.full((1, 4), -1, dtype=np.float32))
    assert "negative input" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        _infer(server, protocol, "np1_dir", np.full((1, 4), 13, dtype=np.float32))
    assert e.value.message().startswith(
        "Failed to process the request(s) for model 'np1_dir_0_0', message: "
        "TritonModelException: thirteen is unlucky"
    ), e.value.message()
    assert "model.py(" in e.value.message()  # the model's frames, as Triton's stub reports
    out = _infer(server, protocol, "np1_dir", np.ones((1, 4), dtype=np.float32))
    np.testing.assert_array_equal(out["OUT"], np.full((1, 4), 2, dtype=np.float32))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bytes_and_large_tensors_cross_intact(server: Server, protocol: str) -> None:
    client, mod = client_for(server, protocol)
    text = np.array([b"", b"\xff\x00 not utf-8", "ünï".encode(), b"x" * 70000], dtype=np.object_)
    big = np.arange(3 << 18, dtype=np.float32)  # 3 MB: many socket buffers' worth
    inputs = [mod.InferInput("TEXT", [4], "BYTES"), mod.InferInput("BIG", [big.size], "FP32")]
    inputs[0].set_data_from_numpy(text)
    inputs[1].set_data_from_numpy(big)
    result = client.infer("echo", inputs)
    assert result.as_numpy("TEXT_OUT").tolist() == text[::-1].tolist()
    np.testing.assert_array_equal(result.as_numpy("BIG_OUT"), big + 1)
    if protocol == "http":
        params = result.get_response()["parameters"]
        assert params["n"] == 4 and params["sum"] == float((big + 1).sum(dtype=np.float64))
    for instance in ("echo_0_0", "echo_0_1"):  # one worker per instance
        assert f"model instance '{instance}' runs in " in server.output()


def test_requests_are_batched_and_counted(server: Server) -> None:
    """np1_tar waits 200 ms for a fuller batch: 8 concurrent requests run in fewer executions,
    each request's outputs its own rows, and the statistics count them."""
    client = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    before = client.get_inference_statistics("np1_tar")["model_stats"][0]
    xs = [np.full((1, 4), i, dtype=np.float32) for i in range(8)]
    pending = []
    for x in xs:
        inp = httpclient.InferInput("IN", [1, 4], "FP32")
        inp.set_data_from_numpy(x)
        pending.append(client.async_infer("np1_tar", [inp]))
    for x, p in zip(xs, pending):
        np.testing.assert_array_equal(p.get_result(timeout=60).as_numpy("OUT"), x * 2)
    after = client.get_inference_statistics("np1_tar")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 8
    executions = after["execution_count"] - before["execution_count"]
    assert 1 <= executions < 8, after
    success = after["inference_stats"]["success"]
    assert success["count"] - before["inference_stats"]["success"]["count"] == 8
    client.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_without_the_parameter_the_load_error_names_the_numpy_api(
    server: Server, protocol: str
) -> None:
    client, _ = client_for(server, protocol)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("np1_in_process")
    message = e.value.message()
    assert "`np.NINF` was removed in the NumPy 2.0 release" in message, message
    assert "The model uses `np.NINF`, NumPy API that NumPy 2 removed" in message, message
    assert "EXECUTION_ENV_PATH" in message, message
    assert not client.is_model_ready("np1_in_process")


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("bad_init", "RuntimeError: initialize refused under numpy 1."),
        (
            "missing_env",
            "Internal: Failed to get the canonical path for {repo}/missing_env/missing.tar.gz.;",
        ),  # Triton 2.51's message
        (
            "not_an_env",
            "EXECUTION_ENV_PATH of model 'not_an_env': '{repo}/not_an_env/config.pbtxt'"
            " is neither a directory nor a tar archive",
        ),
    ],
)
def test_load_failures(server: Server, repo: Path, model: str, expected: str) -> None:
    client, _ = client_for(server, "http")
    with pytest.raises(InferenceServerException) as e:
        client.load_model(model)
    assert expected.format(repo=repo) in e.value.message(), e.value.message()
    if model == "bad_init":
        assert f"{repo}/bad_init/1/model.py(7): initialize" in e.value.message()
    assert not client.is_model_ready(model)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auto_complete_runs_in_the_environment(server: Server, repo: Path, protocol: str) -> None:
    client, mod = client_for(server, protocol)
    config = client.get_model_config("auto_env")
    config = (
        config
        if protocol == "http"
        else json.loads(
            __import__("google.protobuf.json_format").protobuf.json_format.MessageToJson(
                config.config, preserving_proto_field_name=True
            )
        )
    )
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    assert [i["name"] for i in config["input"]] == ["IN"]
    inp = mod.InferInput("IN", [2, 4], "FP32")
    inp.set_data_from_numpy(np.ones((2, 4), dtype=np.float32))
    np.testing.assert_array_equal(
        client.infer("auto_env", [inp]).as_numpy("OUT"), np.full((2, 4), 3, dtype=np.float32)
    )
    with pytest.raises(InferenceServerException) as e:
        client.load_model("auto_bad")
    message = e.value.message()
    assert message.startswith(
        "load failed for model 'auto_bad': version 1 is at UNAVAILABLE state: Internal: "
        "ValueError: input 'IN' in auto-complete-config function for model 'auto_bad' is "
        "missing 'data_type' property.\n\nAt:\n"
    ), message
    assert message.endswith(f"{repo}/auto_bad/1/model.py(5): auto_complete_config\n;\n")


DECOUPLED_CASES = [
    ("count", 2),
    ("last", 3),
    ("err", None),
    ("errfinal", None),
    ("thread", 2),
    ("raise", None),
    ("return", None),
    ("count", 0),
    ("misuse", None),
    ("report", None),
]


def _stream_messages(
    server: Server,
    model: str,
    cases: list[tuple[str, int | None]],
) -> list[Any]:
    """Each case's messages on one stream: (request id, final, TEXT, I) or the error text,
    with ``model`` written as "M" (the two models' names differ)."""
    stream = Stream(server.grpc_url)
    out: list[Any] = []
    try:
        for k, (text, n) in enumerate(cases):
            inputs = [grpcclient.InferInput("TEXT", [1], "BYTES")]
            inputs[0].set_data_from_numpy(np.array([text.encode()], dtype=object))
            if n is not None:
                inputs.append(grpcclient.InferInput("N", [1], "INT32"))
                inputs[1].set_data_from_numpy(np.array([n], dtype=np.int32))
            stream.send(model, inputs, f"{text}-{k}", empty_final=True)
            while True:  # up to the final response, or the error that ends the request
                result, error = stream.take(timeout=30)
                if error is not None:
                    message = error.message().replace(f"'{model}_0'", "'M_0'")
                    out.append(("error", message.replace(f"/{model}/", "/M/")))
                    if text in ("errfinal", "raise", "return"):
                        break
                    continue
                r = result.get_response()
                text_out = result.as_numpy("TEXT")
                i_out = result.as_numpy("I")
                out.append(
                    (
                        r.id,
                        is_final(result),
                        None if text_out is None else text_out.tolist(),
                        None if i_out is None else i_out.tolist(),
                    )
                )
                if is_final(result):
                    break
    finally:
        stream.close()
    return out


@pytest.mark.parametrize("model", ["dec", "dec_async"])
def test_decoupled_models_stream_the_same_in_an_environment(server: Server, model: str) -> None:
    """The same decoupled model.py, in-process and in an environment: the same messages on
    the stream (responses from execute and from threads after it returned, error responses,
    failures, misuse of the sender), and the same statistics counts."""
    cases = DECOUPLED_CASES if model == "dec" else [("async", None), ("raise", None)]
    ours = _stream_messages(server, f"{model}_env", cases)
    assert ours == _stream_messages(server, model, cases)
    assert any(m[0] == "error" for m in ours) and len(ours) > len(cases)
    client = httpclient.InferenceServerClient(server.http_url)
    stats = [client.get_inference_statistics(m)["model_stats"][0] for m in (f"{model}_env", model)]
    for key in ("inference_count", "execution_count"):
        assert stats[0][key] == stats[1][key], key
    for key in ("success", "fail"):
        assert (
            stats[0]["inference_stats"][key]["count"] == stats[1]["inference_stats"][key]["count"]
        ), key
    assert stats[0]["response_stats"].keys() == stats[1]["response_stats"].keys()


def test_cancelling_a_stream_reaches_the_environment(server: Server) -> None:
    """The model's sender.is_cancelled() / request.is_cancelled() see the client's cancel."""
    s = Stream(server.grpc_url)
    try:
        inputs = [grpcclient.InferInput("TEXT", [1], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([b"cancel"], dtype=object))
        s.send("dec_env", inputs, "c", empty_final=False)
        assert [s.take(timeout=30)[0].as_numpy("TEXT").tolist() for _ in range(2)] == [
            [b"tick0"],
            [b"tick1"],
        ]
        s.client.stop_stream(cancel_requests=True)
    finally:
        s.client.close()

    def noted() -> dict[str, Any]:
        check = Stream(server.grpc_url)
        try:
            inputs[0].set_data_from_numpy(np.array([b"report"], dtype=object))
            check.send("dec_env", inputs, "report")
            ((result, error),) = check.until_final(timeout=30)
            assert error is None
            return json.loads(result.as_numpy("TEXT")[0])  # type: ignore[no-any-return]
        finally:
            check.close()

    wait_until(lambda: "cancelled" in noted(), timeout=30)
    seen_by_sender, seen_by_request, ticks = noted()["cancelled"]
    assert seen_by_sender is True and seen_by_request is True and ticks >= 2


def test_decoupled_worker_killed_mid_stream_ends_the_request(server: Server) -> None:
    """The model streams from a thread after execute returned; its worker dies: the request
    ends with an error, and a new worker serves the next one."""
    pids = re.findall(r"model instance 'dec_env_0' runs in .* pid (\d+)\)", server.output())
    stream = Stream(server.grpc_url)
    try:
        inputs = [grpcclient.InferInput("TEXT", [1], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([b"cancel"], dtype=object))
        stream.send("dec_env", inputs, "ticks", empty_final=True)
        result, error = stream.take(timeout=30)
        assert error is None and result.as_numpy("TEXT").tolist() == [b"tick0"]
        os.kill(int(pids[-1]), signal.SIGKILL)
        while True:
            result, error = stream.take(timeout=30)
            if error is not None:
                break
        assert error.message() == (
            "the python process of model instance 'dec_env_0' exited "
            "before the request's final response"
        ), error.message()
        wait_until(
            lambda: len(re.findall(r"'dec_env_0' runs in ", server.output())) > len(pids),
            timeout=60,
        )
        inputs[0].set_data_from_numpy(np.array([b"last"], dtype=object))
        stream.send("dec_env", inputs, "after", empty_final=True)
        got = stream.until_final(1, timeout=30)
        assert [r.as_numpy("TEXT").tolist() for r, _ in got] == [[b"last0"], [b"last1"], [b"last2"]]
    finally:
        stream.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bls_from_an_environment(server: Server, protocol: str) -> None:
    """BLS requests (exec, async_exec, decoupled exec) of an environment model run through the
    server: here to another environment model and to an in-process decoupled one."""
    client, mod = client_for(server, protocol)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = mod.InferInput("IN", [2, 4], "FP32")
    inp.set_data_from_numpy(x)
    result = client.infer("bls_env", [inp])
    np.testing.assert_array_equal(result.as_numpy("OUT"), x * 4)
    assert result.as_numpy("PARTS").tolist() == [[b"count0,count1"]] * 2
    with pytest.raises(InferenceServerException) as e:
        client.infer("bls_env", [inp], parameters={"missing": "yes"})
    assert "no_such_model" in e.value.message(), e.value.message()


def _pid(server: Server) -> int:
    client, mod = client_for(server, "http")
    inp = mod.InferInput("IN", [1, 4], "FP32")
    inp.set_data_from_numpy(np.zeros((1, 4), dtype=np.float32))
    return int(client.infer("crashy", [inp]).as_numpy("PID")[0, 0])


def _wait_ready(server: Server) -> None:
    client, _ = client_for(server, "http")
    wait_until(lambda: client.is_model_ready("crashy"), timeout=120)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_worker_killed_mid_request_fails_it_and_restarts(
    server: Server, repo: Path, protocol: str
) -> None:
    _wait_ready(server)
    first = _pid(server)
    busy = repo / "crashy" / "1" / "busy"
    busy.unlink(missing_ok=True)
    client, mod = client_for(server, protocol)
    inp = mod.InferInput("IN", [1, 4], "FP32")
    inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        call = pool.submit(client.infer, "crashy", [inp])
        wait_until(busy.exists, timeout=60)
        os.kill(first, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as e:
            call.result(timeout=60)
    assert time.monotonic() - started < 30
    message = e.value.message()
    assert "model instance 'crashy_0_0' failed and was taken out of rotation" in message, message
    assert f"(pid {first}," in message and "was killed by SIGKILL during execute" in message
    _wait_ready(server)  # the core rebuilt the instance: a new worker
    second = _pid(server)
    assert second != first


def test_a_worker_that_dies_idle_is_replaced_at_once(server: Server) -> None:
    """No request fails for it: a new worker starts as soon as the old one is gone."""
    _wait_ready(server)
    first = _pid(server)
    os.kill(first, signal.SIGKILL)
    wait_until(
        lambda: f"'crashy_0_0' (pid {first}) exited while idle" in server.output(), timeout=60
    )
    _wait_ready(server)
    assert _pid(server) != first


def test_sys_exit_in_execute_restarts_the_worker(server: Server) -> None:
    _wait_ready(server)
    first = _pid(server)
    client, mod = client_for(server, "http")
    inp = mod.InferInput("IN", [1, 4], "FP32")
    inp.set_data_from_numpy(np.full((1, 4), 2, dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("crashy", [inp])
    assert "SystemExit: 7" in e.value.message(), e.value.message()
    _wait_ready(server)
    assert _pid(server) != first


def test_unload_finalizes_in_the_environment(server: Server) -> None:
    client, _ = client_for(server, "http")
    client.unload_model("np1_dir")
    wait_until(lambda: "finalized under numpy 1." in server.output(), timeout=60)
    client.load_model("np1_dir")
    out = _infer(server, "http", "np1_dir", np.ones((1, 4), dtype=np.float32))
    assert out["NUMPY"][0, 0].startswith(b"1.")


def test_an_older_python_runs_the_worker(
    tmp_path: Path, py38_env: Path, server_factory: Callable[..., Server]
) -> None:
    """The environment's interpreter need not be the server's: Python 3.8 with numpy 1.x."""
    write_python_model(
        tmp_path, "old", NUMPY1_MODEL, CONFIG.format(delay=0, env=_env_param(str(py38_env)))
    )
    server = server_factory(tmp_path, "--allow-metrics=false", "--allow-grpc=false")
    out = _infer(server, "http", "old", np.ones((2, 4), dtype=np.float32))
    np.testing.assert_array_equal(out["OUT"], np.full((2, 4), 2, dtype=np.float32))
    assert out["NUMPY"][0, 0].startswith(b"1.") and out["TAG"].shape == (2, 1)
    assert "model instance 'old_0_0' runs in " in server.output()
    assert "(python 3.8." in server.output()


# -- the same requests against real Triton 2.51 ------------------------------------------------


def _models_ready(client: httpclient.InferenceServerClient, models: tuple[str, ...]) -> bool:
    try:
        return all(client.is_model_ready(m) for m in models)
    except Exception:  # noqa: BLE001 - not listening yet
        return False


@pytest.fixture(scope="module")
def triton(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceTriton]:
    models = ("np1_dir", "np1_tar", "echo", "auto_env")
    r = ReferenceTriton(
        require_reference(),
        repo,
        "--model-control-mode=explicit",
        *[f"--load-model={m}" for m in models],
        timeout=180,
        log=tmp_path_factory.mktemp("triton_log") / "triton.log",
        ready=lambda ref: _models_ready(httpclient.InferenceServerClient(ref.http_url), models),
    )
    yield r
    r.stop()


class _Url:
    def __init__(self, http_url: str, grpc_url: str) -> None:
        self.http_url, self.grpc_url = http_url, grpc_url


def _outcome(target: Any, protocol: str, model: str, x: np.ndarray) -> Any:
    try:
        out = _infer(target, protocol, model, x, request_id="cmp", parameters={"k": "v", "n": "1"})
    except InferenceServerException as exc:
        return ("error", exc.status(), exc.message())
    request_id, params = out.pop("TAG")[0, 0].decode().split("|", 1)
    # (the order of a gRPC request's parameters is the map's: not compared)
    return {**{k: v.tolist() for k, v in out.items()}, "TAG": (request_id, json.loads(params))}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_same_as_triton(server: Server, triton: ReferenceTriton, repo: Path, protocol: str) -> None:
    """Outputs, model errors and load errors of the environment models, as Triton 2.51 gives
    them for the same repository (Triton's python also has numpy 1.26 in these envs)."""
    theirs = _Url(triton.http_url, triton.grpc_url)
    for model in ("np1_dir", "np1_tar"):
        for value in (1.5, -1, 13):
            x = np.full((1, 4), value, dtype=np.float32)
            ours_out, theirs_out = (_outcome(t, protocol, model, x) for t in (server, theirs))
            assert ours_out == theirs_out, (model, value)
    client, mod = client_for(server, protocol)
    ref, _ = client_for(theirs, protocol)  # type: ignore[arg-type]
    text = np.array([b"", b"\xff\x00", b"x" * 70000], dtype=np.object_)
    big = np.arange(1 << 16, dtype=np.float32)
    answers = []
    for c in (client, ref):
        inputs = [mod.InferInput("TEXT", [3], "BYTES"), mod.InferInput("BIG", [big.size], "FP32")]
        inputs[0].set_data_from_numpy(text)
        inputs[1].set_data_from_numpy(big)
        result = c.infer("echo", inputs)
        answers.append((result.as_numpy("TEXT_OUT").tolist(), result.as_numpy("BIG_OUT").tolist()))
    assert answers[0] == answers[1]
    answers = []
    for c in (client, ref):
        inp = mod.InferInput("IN", [1, 4], "FP32")
        inp.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        answers.append(c.infer("auto_env", [inp]).as_numpy("OUT").tolist())
    assert answers[0] == answers[1] == [[3.0] * 4]
    for model in ("bad_init", "missing_env", "auto_bad"):
        messages = []
        for c in (client, ref):
            with pytest.raises(InferenceServerException) as e:
                c.load_model(model)
            message = e.value.message()
            if model == "auto_bad":  # Triton also lists the frames of its pb_utils file
                message = message.split("At:\n")[0] + message.splitlines()[-2]
            messages.append((e.value.status(), message))
        assert messages[0] == messages[1], model
