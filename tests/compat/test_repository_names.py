"""Hostile model names on the model repository API of a real server, over HTTP and gRPC.

The server runs in explicit mode with TMPDIR set to ``watched/tmp`` (where load overrides get
their fresh dirs); a sentinel dir and the model repository sit beside it, and an absolute name
points beside it too. Every hostile name is refused with 400 / INVALID_ARGUMENT and a message
that names no server path; nothing outside ``tmp/`` is created or removed, ``tmp/`` is empty
once the loads are done, the index lists no stray entry, and the server still loads and serves.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import write_add_sub
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

CONFIG = json.dumps(
    {
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
)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def hostile_names(watched: Path) -> list[str]:
    return [
        ".",
        "..",
        ".hidden",
        "a/b",
        "../x",
        "../escaped",
        "a/../../b",
        "a\x00b",
        "x" * 300,
        str(watched / "abs_victim"),
        str(watched / "sentinel" / "inner"),
        "../../sentinel",
        "../../repo",
        "../..",
    ]


class Env:
    def __init__(self, watched: Path, server: Server, onnx: bytes) -> None:
        self.watched = watched
        self.server = server
        self.onnx = onnx
        self.outside = {p for p in _tree(watched) if p != "tmp" and not p.startswith("tmp/")}

    def assert_untouched(self) -> None:
        now = {p for p in _tree(self.watched) if p != "tmp" and not p.startswith("tmp/")}
        assert now == self.outside
        assert (self.watched / "sentinel" / "keep").read_text() == "keep"
        leftovers = [p for p in _tree(self.watched / "tmp") if "tritonlite-override" in p]
        assert leftovers == []

    def assert_clean_message(self, message: str, name: str = "") -> None:
        """No server path in ``message`` (beyond the client's own ``name``, quoted back)."""
        message = message.replace(f"'{name}'", "''") if name else message
        for path in (
            str(self.watched),
            str(self.watched.resolve()),
            "tritonlite-override",
            "Traceback",
        ):
            assert path not in message


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    watched = tmp_path_factory.mktemp("names")
    (watched / "tmp").mkdir()
    (watched / "sentinel").mkdir()
    (watched / "sentinel" / "keep").write_text("keep")
    write_add_sub(watched / "repo", "add_sub", 4, dims=4)
    onnx = (watched / "repo" / "add_sub" / "1" / "model.onnx").read_bytes()
    s = start_server(
        watched / "repo",
        "--allow-metrics=false",
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        env={"TMPDIR": str(watched / "tmp")},
    )
    yield Env(watched, s, onnx)
    s.stop()


def _quoted(name: str) -> str:
    return "".join(f"%{b:02X}" for b in name.encode("utf-8"))


def _http_post(env: Env, path: str, body: dict[str, object]) -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://{env.server.http_url}/{path}", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _index_names(env: Env) -> set[str]:
    c = httpclient.InferenceServerClient(env.server.http_url)
    return {m["name"] for m in c.get_model_repository_index()}


def _serves(env: Env, name: str) -> None:
    c = httpclient.InferenceServerClient(env.server.http_url)
    ins = []
    for n in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(n, [1, 4], "FP32")
        i.set_data_from_numpy(np.ones((1, 4), np.float32))
        ins.append(i)
    out = c.infer(name, ins).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, np.full((1, 4), 2.0, np.float32))


def test_http_hostile_names(env: Env) -> None:
    files = {"file:1/model.onnx": __import__("base64").b64encode(env.onnx).decode()}
    for name in hostile_names(env.watched):
        for body in ({"parameters": {"config": CONFIG, **files}}, {}):
            status, text = _http_post(env, f"v2/repository/models/{_quoted(name)}/load", body)
            assert status == 400, (name, status, text)
            assert "invalid model name" in json.loads(text)["error"], text
            env.assert_clean_message(json.loads(text)["error"], name)
        status, text = _http_post(env, f"v2/repository/models/{_quoted(name)}/unload", {})
        assert status == 400 and "invalid model name" in text, (name, status, text)
        env.assert_untouched()
    assert _index_names(env) == {"add_sub"}
    _serves(env, "add_sub")


def test_http_client_hostile_names(env: Env) -> None:
    c = httpclient.InferenceServerClient(env.server.http_url)
    for name in (".hidden", "..x", "x" * 300):
        with pytest.raises(InferenceServerException, match="invalid model name") as exc:
            c.load_model(name, config=CONFIG, files={"file:1/model.onnx": env.onnx})
        assert exc.value.status() == "400"
    env.assert_untouched()
    assert _index_names(env) == {"add_sub"}


def test_grpc_hostile_names(env: Env) -> None:
    c = grpcclient.InferenceServerClient(env.server.grpc_url)
    for name in hostile_names(env.watched):
        for kwargs in ({"config": CONFIG, "files": {"file:1/model.onnx": env.onnx}}, {}):
            with pytest.raises(InferenceServerException) as exc:
                c.load_model(name, **kwargs)  # type: ignore[arg-type]
            assert exc.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT), (name, exc.value)
            assert "invalid model name" in exc.value.message()
            env.assert_clean_message(exc.value.message(), name)
        with pytest.raises(InferenceServerException) as exc:
            c.unload_model(name)
        assert exc.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT), (name, exc.value)
        env.assert_untouched()
    assert _index_names(env) == {"add_sub"}


def test_bad_file_paths_leave_no_entry(env: Env) -> None:
    c = grpcclient.InferenceServerClient(env.server.grpc_url)
    for key in ("file:../escape", "file:1/../../escape", "file:/abs", "file:a\x00b"):
        with pytest.raises(InferenceServerException, match="invalid file override path") as exc:
            c.load_model("fresh", config=CONFIG, files={key: b"x"})
        env.assert_clean_message(exc.value.message())
    with pytest.raises(InferenceServerException, match="unable to write file override") as exc:
        c.load_model("fresh", config=CONFIG, files={"file:a": b"1", "file:a/b": b"2"})
    assert exc.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    env.assert_clean_message(exc.value.message())
    env.assert_untouched()
    assert _index_names(env) == {"add_sub"}


def test_still_serves_overrides_after_hostile_names(env: Env) -> None:
    c = grpcclient.InferenceServerClient(env.server.grpc_url)
    c.load_model("from_files", config=CONFIG, files={"file:1/model.onnx": env.onnx})
    overrides = [
        p
        for p in _tree(env.watched / "tmp")
        if p.count("/") == 0 and p.startswith("tritonlite-override-")
    ]
    assert len(overrides) == 1
    _serves(env, "from_files")
    c.unload_model("from_files")
    env.assert_untouched()
    assert _index_names(env) == {"add_sub", "from_files"}  # unloaded: listed, as in Triton
    _serves(env, "add_sub")
