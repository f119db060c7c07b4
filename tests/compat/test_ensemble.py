"""Ensembles behind a real server, seen by tritonclient (HTTP and gRPC) and perf_analyzer.

The repository: ``scale`` (python, OUT = 2 * IN), ``add_sub`` (ONNX), ``guard`` (python, fails
on negative input) and ensembles over them:

* ``fan``: X -> scale -> M; (X, M) -> add_sub -> S = 3X, D = -X; D -> scale -> E = -2X
  (fan-out of X, fan-in at add_sub, a model used by two steps);
* ``guarded``: X -> guard -> Y (a step error);
* ``fan_nobatch``: ``fan``'s first two steps with max_batch_size 0 over the batching models;
* ``broken``: names a model that is not in the repository (fails to load, the rest serve).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import (
    GUARD_MODEL,
    PY_FP32_CONFIG,
    SCALE_MODEL,
    client_for,
    ensemble_step,
    run_perf_analyzer,
    throughput,
    write_add_sub,
    write_ensemble,
    write_python_model,
)
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(180)

FAN_STEPS = [
    ensemble_step("scale", {"IN": "X"}, {"OUT": "M"}),
    ensemble_step("add_sub", {"INPUT0": "X", "INPUT1": "M"}, {"OUTPUT0": "S", "OUTPUT1": "D"}),
    ensemble_step("scale", {"IN": "D"}, {"OUT": "E"}),
]


def build_repo(repo: Path) -> Path:
    write_python_model(repo, "scale", SCALE_MODEL, PY_FP32_CONFIG)
    write_python_model(repo, "guard", GUARD_MODEL, PY_FP32_CONFIG)
    write_add_sub(repo, "add_sub", 8, dims=4, extra_config="dynamic_batching { }\n")
    write_ensemble(repo, "fan", ["S", "E"], FAN_STEPS)
    write_ensemble(repo, "guarded", ["Y"], [ensemble_step("guard", {"IN": "X"}, {"OUT": "Y"})])
    write_ensemble(
        repo,
        "fan_nobatch",
        ["S"],
        [FAN_STEPS[0], ensemble_step("add_sub", {"INPUT0": "X", "INPUT1": "M"}, {"OUTPUT0": "S"})],
        max_batch_size=0,
        dims="[1, 4]",
    )
    write_ensemble(repo, "broken", ["Y"], [ensemble_step("nonexistent", {"IN": "X"}, {"OUT": "Y"})])
    return repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repo(tmp_path_factory.mktemp("ensemble_repo"))


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(repo, "--allow-metrics=false", "--exit-on-error=false")
    yield s
    s.stop()


def _infer(
    server: Server, protocol: str, model: str, x: np.ndarray, outputs: list[str] | None = None
) -> Any:
    client, mod = client_for(server, protocol)
    inp = mod.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    requested = None if outputs is None else [mod.InferRequestedOutput(o) for o in outputs]
    return client.infer(model, [inp], outputs=requested, request_id="rid-7")


X = np.arange(12, dtype=np.float32).reshape(3, 4) - 2.5


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_fan_out_fan_in(server: Server, protocol: str) -> None:
    r = _infer(server, protocol, "fan", X)
    np.testing.assert_allclose(r.as_numpy("S"), 3 * X)
    np.testing.assert_allclose(r.as_numpy("E"), -2 * X)
    resp = r.get_response()
    assert (resp["id"] if protocol == "http" else resp.id) == "rid-7"
    assert (resp["model_name"] if protocol == "http" else resp.model_name) == "fan"
    # as Triton's ensemble responses: the request's sequence parameters
    if protocol == "http":
        assert resp["parameters"] == {
            "sequence_id": 0,
            "sequence_start": False,
            "sequence_end": False,
        }
    else:
        assert resp.parameters["sequence_start"].bool_param is False
        assert resp.parameters["sequence_id"].int64_param == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_requested_output_only(server: Server, protocol: str) -> None:
    r = _infer(server, protocol, "fan", X, outputs=["S"])
    np.testing.assert_allclose(r.as_numpy("S"), 3 * X)
    assert r.as_numpy("E") is None


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_non_batching_ensemble_over_batching_models(server: Server, protocol: str) -> None:
    x = X[:1]
    r = _infer(server, protocol, "fan_nobatch", x)
    np.testing.assert_allclose(r.as_numpy("S"), 3 * x)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_step_error_fails_request_with_step_message(server: Server, protocol: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        _infer(server, protocol, "guarded", -np.ones((1, 4), np.float32))
    msg = info.value.message()
    assert msg.startswith("in ensemble 'guarded', "), msg
    assert "negative input is not allowed" in msg
    # and the server keeps serving the same ensemble
    r = _infer(server, protocol, "guarded", np.ones((1, 4), np.float32))
    np.testing.assert_allclose(r.as_numpy("Y"), np.ones((1, 4)))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_input_is_rejected_by_the_ensemble(server: Server, protocol: str) -> None:
    client, mod = client_for(server, protocol)
    bad = mod.InferInput("X", [1, 5], "FP32")
    bad.set_data_from_numpy(np.ones((1, 5), np.float32))
    with pytest.raises(
        InferenceServerException,
        match=re.escape(
            "unexpected shape for input 'X' for model 'fan'. Expected [-1,4], got [1,5]"
        ),
    ):
        client.infer("fan", [bad])
    wrong = mod.InferInput("X", [1, 4], "INT32")
    wrong.set_data_from_numpy(np.ones((1, 4), np.int32))
    with pytest.raises(InferenceServerException, match="data-type is 'INT32'"):
        client.infer("fan", [wrong])
    assert client.is_model_ready("fan")


def test_missing_composing_model_fails_only_that_ensemble(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    rows = {r["name"]: r for r in client.get_model_repository_index()}
    assert rows["broken"]["state"] == "UNAVAILABLE"
    assert rows["broken"]["reason"] == (
        "ensemble broken contains models that are not available or ambiguous: nonexistent"
    )
    for name in ("fan", "guarded", "fan_nobatch", "scale", "add_sub", "guard"):
        assert rows[name]["state"] == "READY", rows[name]
    assert not client.is_model_ready("broken")


def test_metadata_and_config(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    meta = client.get_model_metadata("fan")
    assert meta["platform"] == "ensemble"
    assert [o["name"] for o in meta["outputs"]] == ["S", "E"]
    cfg = client.get_model_config("fan")
    assert [s["model_name"] for s in cfg["ensemble_scheduling"]["step"]] == [
        "scale",
        "add_sub",
        "scale",
    ]
    assert cfg["model_transaction_policy"] == {"decoupled": False}
    assert cfg["instance_group"] == []


def _stats(client: Any, name: str) -> dict[str, Any]:
    return dict(client.get_inference_statistics(name)["model_stats"][0])


def test_statistics_for_ensemble_and_composing_models(
    repo: Path, server_factory: Callable[..., Server]
) -> None:
    s = server_factory(repo, "--allow-metrics=false", "--exit-on-error=false")
    client = httpclient.InferenceServerClient(s.http_url)
    for _ in range(3):
        _infer(s, "http", "fan", X)
    with pytest.raises(InferenceServerException):
        _infer(s, "http", "guarded", -np.ones((2, 4), np.float32))
    fan = _stats(client, "fan")
    assert fan["inference_count"] == 9 and fan["execution_count"] == 3
    inf = fan["inference_stats"]
    assert inf["success"]["count"] == 3 and inf["fail"]["count"] == 0
    # the ensemble's compute is its steps' compute, summed
    assert inf["compute_infer"]["count"] == 3 and inf["compute_infer"]["ns"] > 0
    assert [b["batch_size"] for b in fan["batch_stats"]] == [3]
    # each step is a normal inference of its composing model: scale runs twice per request
    assert _stats(client, "scale")["inference_stats"]["success"]["count"] == 6
    assert _stats(client, "add_sub")["inference_stats"]["success"]["count"] == 3
    guarded = _stats(client, "guarded")["inference_stats"]
    assert guarded["fail"]["count"] == 1 and guarded["success"]["count"] == 0
    # guard answered with an error response: the ensemble failed, but for Triton's statistics
    # the composing model's execution succeeded (only raised errors count as failures)
    guard = _stats(client, "guard")["inference_stats"]
    assert guard["fail"]["count"] == 0 and guard["success"]["count"] == 1


def test_explicit_load_and_unload_dependents(
    repo: Path, server_factory: Callable[..., Server]
) -> None:
    s = server_factory(repo, "--model-control-mode=explicit", "--allow-metrics=false")
    client = httpclient.InferenceServerClient(s.http_url)
    client.load_model("fan")  # loads scale and add_sub too, as Triton does
    for name in ("fan", "scale", "add_sub"):
        assert client.is_model_ready(name), name
    assert not client.is_model_ready("guard")
    np.testing.assert_allclose(_infer(s, "http", "fan", X).as_numpy("S"), 3 * X)
    client.unload_model("fan")  # without unload_dependents the composing models stay
    assert not client.is_model_ready("fan")
    assert client.is_model_ready("scale") and client.is_model_ready("add_sub")
    client.load_model("fan")
    client.unload_model("fan", unload_dependents=True)
    for name in ("fan", "scale", "add_sub"):
        assert not client.is_model_ready(name), name
    # a model the user loaded is theirs: unload_dependents leaves it
    client.load_model("scale")
    client.load_model("fan")
    client.unload_model("fan", unload_dependents=True)
    assert client.is_model_ready("scale") and not client.is_model_ready("add_sub")
    with pytest.raises(
        InferenceServerException,
        match=re.escape(
            "ensemble broken contains models that are not available or ambiguous: nonexistent"
        ),
    ):
        client.load_model("broken")
    assert client.is_model_ready("scale")


def test_composing_model_load_failure_names_the_cause(
    tmp_path: Path, server_factory: Callable[..., Server]
) -> None:
    repo = tmp_path / "repo"
    (repo / "bad" / "1").mkdir(parents=True)
    (repo / "bad" / "1" / "model.py").write_text("raise RuntimeError('cannot import me')\n")
    (repo / "bad" / "config.pbtxt").write_text(PY_FP32_CONFIG)
    write_ensemble(repo, "uses_bad", ["Y"], [ensemble_step("bad", {"IN": "X"}, {"OUT": "Y"})])
    write_python_model(repo, "ok", SCALE_MODEL, PY_FP32_CONFIG)
    s = server_factory(repo, "--allow-metrics=false", "--allow-grpc=false", "--exit-on-error=false")
    client = httpclient.InferenceServerClient(s.http_url)
    rows = {r["name"]: r for r in client.get_model_repository_index()}
    reason = rows["uses_bad"]["reason"]
    assert reason.startswith(
        "ensemble 'uses_bad' depends on 'bad' which has no loaded version. "
        "Model 'bad' loading failed with error: "
    ), reason
    assert "cannot import me" in reason
    assert rows["ok"]["state"] == "READY"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_profiles_the_ensemble(
    perf_analyzer: str, server: Server, protocol: str
) -> None:
    url = server.http_url if protocol == "http" else server.grpc_url
    out = run_perf_analyzer(
        perf_analyzer,
        "fan",
        url,
        protocol,
        "--shape",
        "X:4",
        timeout=80,
    )
    assert throughput(out) > 0, out
    # perf_analyzer read the composing models' configs and statistics
    assert "Composing models:" in out, out
    assert re.search(r"\bscale, version:", out) and re.search(r"\badd_sub, version:", out), out


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``labelled``: X -> ``scale_lab`` (OUT = 2 * IN, labels ``l0``..``l3``) -> Y, and Z from
    ``scale`` (no labels); ``nested``: X -> ``labelled`` -> W (an ensemble in an ensemble);
    ``own``: as ``labelled``'s Y, with labels ``e0``..``e3`` of its own."""
    repo = tmp_path_factory.mktemp("labelled_repo")
    write_python_model(repo, "scale", SCALE_MODEL, PY_FP32_CONFIG)
    write_python_model(
        repo,
        "scale_lab",
        SCALE_MODEL,
        PY_FP32_CONFIG.replace(
            "dims: [4] }]\ninstance", 'dims: [4] label_filename: "l.txt" }]\ninstance'
        ),
    )
    (repo / "scale_lab" / "l.txt").write_text("".join(f"l{i}\n" for i in range(4)))
    write_ensemble(
        repo,
        "labelled",
        ["Y", "Z"],
        [
            ensemble_step("scale_lab", {"IN": "X"}, {"OUT": "Y"}),
            ensemble_step("scale", {"IN": "X"}, {"OUT": "Z"}),
        ],
    )
    write_ensemble(repo, "nested", ["W"], [ensemble_step("labelled", {"X": "X"}, {"Y": "W"})])
    # an ensemble output's own label_filename wins (Triton 2.51 does the same)
    write_ensemble(repo, "own", ["Y"], [ensemble_step("scale_lab", {"IN": "X"}, {"OUT": "Y"})])
    config = repo / "own" / "config.pbtxt"
    out = 'output [{ name: "Y" data_type: TYPE_FP32 dims: [4]'
    config.write_text(config.read_text().replace(out, out + ' label_filename: "e"'))
    (repo / "own" / "e").write_text("".join(f"e{i}\n" for i in range(4)))
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_classification_labels_come_from_the_composing_model(
    labelled: Server, protocol: str
) -> None:
    """Triton's L0_infer ``test_class_*`` through ensembles: "value:index:label", the label
    from the ``label_filename`` of the composing model output the ensemble output maps."""
    client, mod = client_for(labelled, protocol)
    x = np.array([[0, 1, 2, 7], [5, 0, 1, 0]], dtype=np.float32)
    inp = mod.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    for model, out in (("labelled", "Y"), ("nested", "W")):
        r = client.infer(model, [inp], outputs=[mod.InferRequestedOutput(out, class_count=2)])
        assert r.as_numpy(out).tolist() == [
            [b"14.000000:3:l3", b"4.000000:2:l2"],
            [b"10.000000:0:l0", b"2.000000:2:l2"],
        ]
    r = client.infer("own", [inp], outputs=[mod.InferRequestedOutput("Y", class_count=1)])
    assert r.as_numpy("Y").tolist() == [[b"14.000000:3:e3"], [b"10.000000:0:e0"]]
    r = client.infer("labelled", [inp], outputs=[mod.InferRequestedOutput("Z", class_count=1)])
    assert r.as_numpy("Z").tolist() == [[b"14.000000:3"], [b"10.000000:0"]]
    r = client.infer("labelled", [inp], outputs=[mod.InferRequestedOutput("Y")])
    np.testing.assert_array_equal(r.as_numpy("Y"), 2 * x)  # unclassified: the tensor
