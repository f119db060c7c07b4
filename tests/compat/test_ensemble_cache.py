"""The response cache on ensembles, through the real tritonclient (HTTP and gRPC).

``response_cache { enable: true }`` at the top of an ensemble's config caches the ensemble's
final response, keyed by the ensemble's inputs (and requested outputs): a hit runs no step and
counts as a ``cache_hit`` of the ensemble, a miss runs the steps and counts a ``cache_miss``, a
request whose step fails is never stored. A composing model that enables the cache itself is
cached on its own when a step runs it. Without a server cache the setting does nothing.

The repository: ``scale`` (python, OUT = 2 * IN), ``scale_cached`` (the same, cached),
``guard`` (python, fails on negative input) and the ensembles

* ``twice``: X -> scale -> M -> scale -> Y (4X), and M as output too; cached;
* ``guarded``: X -> guard -> Y; cached;
* ``over_cached``: X -> scale_cached -> Y; not cached itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import (
    GUARD_MODEL,
    PY_FP32_CONFIG,
    SCALE_MODEL,
    ensemble_step,
    write_ensemble,
    write_python_model,
)
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

CACHED = "response_cache { enable: true }\n"


def _step(model: str, inp: str, out: str) -> str:
    return ensemble_step(model, {"IN": inp}, {"OUT": out})


def build_repo(repo: Path) -> Path:
    for name, code, extra in (
        ("scale", SCALE_MODEL, ""),
        ("scale_cached", SCALE_MODEL, CACHED),
        ("guard", GUARD_MODEL, ""),
    ):
        write_python_model(repo, name, code, PY_FP32_CONFIG + extra)
    write_ensemble(
        repo,
        "twice",
        ["Y", "M"],
        [_step("scale", "X", "M"), _step("scale", "M", "Y")],
        extra=CACHED,
    )
    write_ensemble(repo, "guarded", ["Y"], [_step("guard", "X", "Y")], extra=CACHED)
    write_ensemble(repo, "over_cached", ["Y"], [_step("scale_cached", "X", "Y")])
    return repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repo(tmp_path_factory.mktemp("ensemble_cache_repo"))


@pytest.fixture()
def server(repo: Path, server_factory: Callable[..., Server]) -> Server:
    return server_factory(repo, "--allow-metrics=false", "--cache-config", "local,size=1048576")


def _client(server: Server, protocol: str) -> tuple[Any, Any]:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url), httpclient
    return grpcclient.InferenceServerClient(server.grpc_url), grpcclient


def infer(
    server: Server, protocol: str, model: str, x: np.ndarray, outputs: list[str] | None = None
) -> Any:
    client, mod = _client(server, protocol)
    inp = mod.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    requested = None if outputs is None else [mod.InferRequestedOutput(o) for o in outputs]
    try:
        return client.infer(model, [inp], outputs=requested)
    finally:
        client.close()


def stats(server: Server, model: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        s = client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()
    inf = s["inference_stats"]
    return {
        "success": inf["success"]["count"],
        "fail": inf["fail"]["count"],
        "hit": inf["cache_hit"]["count"],
        "miss": inf["cache_miss"]["count"],
        "executions": s["execution_count"],
        "inferences": s["inference_count"],
    }


X = np.arange(8, dtype=np.float32).reshape(2, 4)


def test_second_identical_request_is_a_hit_on_both_front_ends(server: Server) -> None:
    first = infer(server, "http", "twice", X)
    np.testing.assert_allclose(first.as_numpy("Y"), 4 * X)
    np.testing.assert_allclose(first.as_numpy("M"), 2 * X)
    again = infer(server, "grpc", "twice", X)  # one cache serves both front ends
    np.testing.assert_allclose(again.as_numpy("Y"), 4 * X)
    np.testing.assert_allclose(again.as_numpy("M"), 2 * X)
    assert stats(server, "twice") == {
        "success": 2,
        "fail": 0,
        "hit": 1,
        "miss": 1,
        "executions": 1,
        "inferences": 2,
    }
    # the hit ran no step: scale ran twice (two steps) for the first request only
    assert stats(server, "scale")["success"] == 2
    infer(server, "http", "twice", X)
    assert stats(server, "twice")["hit"] == 2 and stats(server, "scale")["success"] == 2


def test_a_different_input_or_output_set_is_a_miss(server: Server) -> None:
    infer(server, "http", "twice", X)
    other = infer(server, "http", "twice", X + 1)
    np.testing.assert_allclose(other.as_numpy("Y"), 4 * (X + 1))
    # the same values with another batch shape are another entry too
    infer(server, "http", "twice", X.reshape(1, 8)[:, :4])
    only_y = infer(server, "grpc", "twice", X, outputs=["Y"])
    assert only_y.as_numpy("M") is None
    np.testing.assert_allclose(only_y.as_numpy("Y"), 4 * X)
    assert stats(server, "twice")["miss"] == 4 and stats(server, "twice")["hit"] == 0
    # and each of those is a hit the second time
    again = infer(server, "grpc", "twice", X, outputs=["Y"])
    assert again.as_numpy("M") is None
    infer(server, "http", "twice", X + 1)
    assert stats(server, "twice")["hit"] == 2 and stats(server, "scale")["success"] == 8


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_failing_step_is_never_cached(server: Server, protocol: str) -> None:
    bad = -np.ones((1, 4), np.float32)
    for _ in range(2):
        with pytest.raises(
            InferenceServerException, match="in ensemble 'guarded', .*negative input is not allowed"
        ):
            infer(server, protocol, "guarded", bad)
    assert stats(server, "guarded") == {
        "success": 0,
        "fail": 2,
        "hit": 0,
        "miss": 0,
        "executions": 0,
        "inferences": 0,
    }
    # the step ran both times; its error response is a success in guard's own statistics,
    # as Triton counts a model's error responses (only raised errors are failures)
    assert stats(server, "guard")["success"] == 2 and stats(server, "guard")["fail"] == 0
    good = np.ones((1, 4), np.float32)
    for _ in range(2):
        np.testing.assert_allclose(infer(server, protocol, "guarded", good).as_numpy("Y"), good)
    assert stats(server, "guarded") | {"fail": 2} == {
        "success": 2,
        "fail": 2,
        "hit": 1,
        "miss": 1,
        "executions": 1,
        "inferences": 1,
    }


def test_a_bad_request_reaches_neither_the_cache_nor_the_steps(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    bad = httpclient.InferInput("X", [1, 5], "FP32")
    bad.set_data_from_numpy(np.ones((1, 5), np.float32))
    for _ in range(2):
        with pytest.raises(InferenceServerException, match="unexpected shape for input 'X'"):
            client.infer("twice", [bad])
    with pytest.raises(InferenceServerException, match="unexpected inference output 'Z'"):
        client.infer("twice", [_x(X)], outputs=[httpclient.InferRequestedOutput("Z")])
    client.close()
    assert stats(server, "twice") == {
        "success": 0,
        "fail": 0,
        "hit": 0,
        "miss": 0,
        "executions": 0,
        "inferences": 0,
    }
    assert stats(server, "scale")["success"] == 0


def _x(x: np.ndarray) -> httpclient.InferInput:
    inp = httpclient.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return inp


def test_a_composing_model_caches_on_its_own(server: Server) -> None:
    for _ in range(3):
        np.testing.assert_allclose(infer(server, "http", "over_cached", X).as_numpy("Y"), 2 * X)
    # the ensemble is not cached: it runs its step each time, and that step hits
    assert stats(server, "over_cached") == {
        "success": 3,
        "fail": 0,
        "hit": 0,
        "miss": 0,
        "executions": 3,
        "inferences": 6,
    }
    assert stats(server, "scale_cached") == {
        "success": 3,
        "fail": 0,
        "hit": 2,
        "miss": 1,
        "executions": 1,
        "inferences": 2,
    }


@pytest.fixture()
def uncached_server(repo: Path) -> Iterator[Server]:
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


def test_without_a_server_cache_nothing_is_cached(uncached_server: Server) -> None:
    for _ in range(2):
        infer(uncached_server, "http", "twice", X)
        infer(uncached_server, "http", "over_cached", X)
    assert stats(uncached_server, "twice") == {
        "success": 2,
        "fail": 0,
        "hit": 0,
        "miss": 0,
        "executions": 2,
        "inferences": 4,
    }
    assert stats(uncached_server, "scale_cached")["executions"] == 2
