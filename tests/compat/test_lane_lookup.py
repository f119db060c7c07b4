"""The lane's kept model lookup (``InferenceCore._lane``) through a real server: after a reload
with another version policy, an unload, a load again, and a version's instances taken out of
service, every request (a JSON body of inputs alone: the JSON lane; and gRPC: ``infer_now``) is
answered by the version the repository serves now, or refused as the general path refuses it --
never by the lookup kept from before the change.
"""

from __future__ import annotations

import http.client
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import start_server
from onnx_models import write_add_sub
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(180)

_ROUNDS = 150  # requests per step: past each instance's first runs, off the loop
_BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16},
        ]
    }
).encode()


def _post(url: str, path: str) -> tuple[int, dict[str, Any]]:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", path, _BODY, {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def _answered_by(url: str, version: str, path: str = "/v2/models/m/infer") -> None:
    for _ in range(_ROUNDS):
        status, doc = _post(url, path)
        assert status == 200, doc
        assert doc["model_version"] == version
        assert doc["outputs"][0]["data"] == [float(x + 2) for x in range(16)]


def _refused(url: str, path: str, words: str) -> None:
    for _ in range(3):
        status, doc = _post(url, path)
        assert status >= 400 and words in doc["error"], doc


def _grpc_version(url: str, version: str = "") -> str:
    c = grpcclient.InferenceServerClient(url)
    inputs = []
    for name, arr in (
        ("INPUT0", np.arange(16, dtype=np.float32).reshape(1, 16)),
        ("INPUT1", np.full((1, 16), 2.0, np.float32)),
    ):
        i = grpcclient.InferInput(name, [1, 16], "FP32")
        i.set_data_from_numpy(arr)
        inputs.append(i)
    got = ""
    for _ in range(_ROUNDS // 3):
        r = c.infer("m", inputs, model_version=version)
        got = r.get_response().model_version
    c.close()
    return got


def test_a_kept_lookup_follows_reloads_unloads_and_health(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "m", 8)
    shutil.copytree(repo / "m" / "1", repo / "m" / "2")
    s = start_server(repo, "--model-control-mode=explicit", "--load-model=m")
    try:
        url = s.http_url
        c = httpclient.InferenceServerClient(url)
        _answered_by(url, "2")  # the latest version, by the config on disk
        _answered_by(url, "2", "/v2/models/m/versions/2/infer")
        assert _grpc_version(s.grpc_url) == "2"
        config = c.get_model_config("m")

        # a reload that serves version 1 alone: version 2 is gone at once
        config["version_policy"] = {"specific": {"versions": [1]}}
        c.load_model("m", config=json.dumps(config))
        _answered_by(url, "1")
        _refused(url, "/v2/models/m/versions/2/infer", "version 2")
        assert _grpc_version(s.grpc_url) == "1"

        # unloaded: refused as an unknown model is, by version and without
        c.unload_model("m")
        _refused(url, "/v2/models/m/infer", "'m'")
        _refused(url, "/v2/models/m/versions/1/infer", "'m'")
        with pytest.raises(InferenceServerException):
            _grpc_version(s.grpc_url)

        # loaded again from disk: the latest version again
        c.load_model("m")
        _answered_by(url, "2")
        _refused(url, "/v2/models/m/versions/1/infer", "version 1")

        # every version: the highest answers (several versions: nothing kept for -1)
        config["version_policy"] = {"all": {}}
        c.load_model("m", config=json.dumps(config))
        _answered_by(url, "2")
        _answered_by(url, "1", "/v2/models/m/versions/1/infer")
        assert _grpc_version(s.grpc_url, "1") == "1"
        assert _grpc_version(s.grpc_url) == "2"
    finally:
        s.stop()
