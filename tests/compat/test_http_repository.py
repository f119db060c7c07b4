"""Model control modes and the model repository extension, through the real tritonclient.http."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import start_server, wait_until
from repos import write_add_sub, write_identity
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(90)


def _infer_add_sub(c: httpclient.InferenceServerClient, name: str, dims: int = 16) -> np.ndarray:
    a = np.ones((1, dims), np.float32)
    ins = []
    for n in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(n, [1, dims], "FP32")
        i.set_data_from_numpy(a)
        ins.append(i)
    return c.infer(name, ins).as_numpy("OUTPUT0")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    write_add_sub(r, "add_sub", 8)
    write_add_sub(r, "other", 8)
    return r


def test_explicit_mode_load_unload(repo: Path) -> None:
    s = start_server(
        repo,
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
    )
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        index = {m["name"]: m for m in c.get_model_repository_index()}
        assert index["add_sub"]["state"] == "READY"
        assert index["other"] == {"name": "other"}
        assert [m["name"] for m in c.get_model_repository_index()] == ["add_sub", "other"]
        assert not c.is_model_ready("other")
        c.load_model("other")
        assert c.is_model_ready("other")
        np.testing.assert_array_equal(_infer_add_sub(c, "other").reshape(-1)[:2], [2, 2])
        c.unload_model("other")
        assert not c.is_model_ready("other")
        row = next(m for m in c.get_model_repository_index() if m["name"] == "other")
        assert row["state"] == "UNAVAILABLE" and row["reason"] == "unloaded"
        assert c.is_server_ready()  # explicitly unloaded models do not count against readiness
        ready = json.loads(c._post("v2/repository/index", '{"ready": true}', None, None).read())
        assert [m["name"] for m in ready] == ["add_sub"]
        with pytest.raises(InferenceServerException, match="has not been served"):
            c.unload_model("never_loaded")
        with pytest.raises(InferenceServerException, match="failed to load 'nope'"):
            c.load_model("nope")
        c.unload_model("add_sub", unload_dependents=True)
        assert not c.is_model_ready("add_sub")
    finally:
        s.stop()


def test_load_with_config_and_file_overrides(repo: Path, tmp_path: Path) -> None:
    s = start_server(
        repo, "--allow-grpc=false", "--allow-metrics=false", "--model-control-mode=explicit"
    )
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        cfg = c.get_model_repository_index()
        assert all("state" not in m for m in cfg)
        # config override: same files, new max_batch_size
        override = {
            "max_batch_size": 2,
            "input": [
                {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [16]},
            ],
            "output": [
                {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]},
                {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]},
            ],
        }
        c.load_model("add_sub", config=json.dumps(override))
        assert c.get_model_config("add_sub")["max_batch_size"] == 2
        # file override: a model built elsewhere, served under a new name
        src = tmp_path / "src"
        write_add_sub(src, "built", 4, dims=4)
        onnx_bytes = (src / "built" / "1" / "model.onnx").read_bytes()
        new_cfg = {
            "backend": "onnxruntime",
            "max_batch_size": 4,
            "input": [
                {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
            ],
            "output": [
                {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
                {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
            ],
        }
        c.load_model(
            "from_files", config=json.dumps(new_cfg), files={"file:1/model.onnx": onnx_bytes}
        )
        np.testing.assert_array_equal(_infer_add_sub(c, "from_files", 4), np.full((1, 4), 2.0))
        # path escapes, bad base64, non-string values, files without config
        for key in ("file:../escape.onnx", "file:/abs/model.onnx", "file:1/../../x"):
            with pytest.raises(InferenceServerException, match="invalid file override path"):
                c.load_model("evil", config=json.dumps(new_cfg), files={key: b"x"})
        body = json.dumps(
            {"parameters": {"config": json.dumps(new_cfg), "file:1/model.onnx": "!!!"}}
        )
        r = c._post("v2/repository/models/bad64/load", body, None, None)
        assert r.status_code == 400 and b"base64" in r.read()
        r = c._post(
            "v2/repository/models/x/load",
            json.dumps({"parameters": {"file:1/model.onnx": base64.b64encode(b"x").decode()}}),
            None,
            None,
        )
        assert r.status_code == 400 and b"'config'" in r.read()
        with pytest.raises(
            InferenceServerException,
            match="failed to load 'add_sub', failed to poll from model repository",
        ):
            c.load_model("add_sub", config="{not json")
        assert c.is_model_ready("add_sub")  # failed reload keeps the old version serving
    finally:
        s.stop()


def test_version_policy_and_versions(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "multi", 8)
    for v in (2, 3):
        shutil.copytree(repo / "multi" / "1", repo / "multi" / str(v))
    (repo / "multi" / "007").mkdir()  # leading zero: ignored
    cfg = (repo / "multi" / "config.pbtxt").read_text()
    (repo / "multi" / "config.pbtxt").write_text(
        cfg + "version_policy { specific { versions: [1, 3] } }\n"
    )
    write_add_sub(repo, "latest", 8)
    shutil.copytree(repo / "latest" / "1", repo / "latest" / "5")
    s = start_server(repo, "--allow-grpc=false", "--allow-metrics=false")
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        assert c.get_model_metadata("multi")["versions"] == ["1", "3"]
        assert c.is_model_ready("multi", "3") and not c.is_model_ready("multi", "2")
        assert c.get_model_metadata("latest")["versions"] == ["5"]
        with pytest.raises(InferenceServerException, match="version 2"):
            c.get_model_metadata("multi", "2")
    finally:
        s.stop()


def test_exit_on_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "good", 8)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 0\ninput [{ name: "X" }]\nnot_a_field: 1\n'
    )
    with pytest.raises(RuntimeError):
        start_server(repo, "--allow-grpc=false", "--allow-metrics=false")
    s = start_server(repo, "--allow-grpc=false", "--allow-metrics=false", "--exit-on-error=false")
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        assert c.is_server_live()
        assert not c.is_server_ready()  # strict readiness: one model failed
        assert c.is_model_ready("good")
        row = next(m for m in c.get_model_repository_index() if m["name"] == "broken")
        assert row == {"name": "broken"}  # Triton's row for a config that does not parse
    finally:
        s.stop()
    s = start_server(
        repo,
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--exit-on-error=false",
        "--strict-readiness=false",
    )
    try:
        assert httpclient.InferenceServerClient(s.http_url).is_server_ready()
    finally:
        s.stop()


def test_poll_mode(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "first", 8)
    s = start_server(
        repo,
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--model-control-mode=poll",
        "--repository-poll-secs=0.2",
    )
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        assert c.is_model_ready("first")
        write_identity(repo, "second", "FP32", [4], 8)
        _wait(lambda: c.is_model_ready("second"))
        shutil.rmtree(repo / "first")
        _wait(lambda: not c.is_model_ready("first"))
        cfg = (repo / "second" / "config.pbtxt").read_text()
        cfg = cfg.replace("max_batch_size: 8", "max_batch_size: 3")
        (repo / "second" / "config.pbtxt").write_text(cfg)
        _wait(lambda: c.get_model_config("second")["max_batch_size"] == 3)
        (repo / "second" / "config.pbtxt").write_text("this is { not valid")
        _wait(lambda: "failed to load 'second'" in s.output())
        assert c.is_model_ready("second")  # a failed reload keeps the old model serving
        with pytest.raises(InferenceServerException, match="not allowed"):
            c.load_model("second")
    finally:
        s.stop()


def _wait(cond: Any, timeout: float = 15.0) -> None:
    wait_until(cond, timeout)
