"""Response cache behind a real server, seen by tritonclient (HTTP and gRPC).

``--cache-config local,size=...`` plus ``response_cache { enable: true }``: a hit is served
without executing the model (statistics: success and cache_hit grow, inference/execution counts
do not), one cache serves both front ends, outputs keep each request's form (binary, JSON,
shared memory), and the per-model cache metrics equal the statistics.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from conftest import Server, start_server
from prometheus_client.parser import text_string_to_metric_families
from repos import refused_at_start, write_add_sub
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

CACHED = "response_cache { enable: true }\n"
A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.float32)


def _repo(root: Path) -> Path:
    write_add_sub(root, "cached", 8, extra_config="dynamic_batching { }\n" + CACHED)
    write_add_sub(root, "cached_nobatch", 0, extra_config=CACHED)
    write_add_sub(root, "plain", 8)
    return root


@pytest.fixture(scope="module")
def cache_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(
        _repo(tmp_path_factory.mktemp("cache_repo")), "--cache-config", "local,size=1048576"
    )
    yield s
    s.stop()


def _inputs(mod: Any, a: np.ndarray = A, b: np.ndarray = B, binary: bool = True) -> list[Any]:
    ins = [
        mod.InferInput("INPUT0", list(a.shape), "FP32"),
        mod.InferInput("INPUT1", list(b.shape), "FP32"),
    ]
    if mod is httpclient:
        ins[0].set_data_from_numpy(a, binary_data=binary)
        ins[1].set_data_from_numpy(b, binary_data=binary)
    else:
        ins[0].set_data_from_numpy(a)
        ins[1].set_data_from_numpy(b)
    return ins


def _stats(client: httpclient.InferenceServerClient, model: str) -> dict[str, Any]:
    return client.get_inference_statistics(model)["model_stats"][0]  # type: ignore[no-any-return]


def _metrics(server: Server) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "model" in s.labels and "reason" not in s.labels:
                # the parser names counter samples <family>_total; Triton's carry no suffix
                name = s.name.removesuffix("_total") if fam.type == "counter" else s.name
                out[(name, s.labels["model"])] = s.value
    return out


def test_hits_skip_execution_and_count_in_statistics(cache_server: Server) -> None:
    c = httpclient.InferenceServerClient(cache_server.http_url)
    for i in range(3):
        r = c.infer("cached", _inputs(httpclient), request_id=f"r{i}")
        assert r.get_response()["id"] == f"r{i}"
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A - B)
    s = _stats(c, "cached")
    inf = s["inference_stats"]
    counts = (inf["success"]["count"], inf["cache_hit"]["count"], inf["cache_miss"]["count"])
    assert counts == (3, 2, 1)
    assert s["inference_count"] == 1 and s["execution_count"] == 1
    assert inf["compute_infer"]["count"] == 1 and inf["queue"]["count"] == 3
    assert inf["cache_hit"]["ns"] > 0 and inf["cache_miss"]["ns"] > 0
    assert s["batch_stats"][0]["compute_infer"]["count"] == 1

    # Other data, other requested outputs: separate entries, each executed once.
    r = c.infer("cached", _inputs(httpclient, a=A * 3))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A * 3 + B)
    only0 = [httpclient.InferRequestedOutput("OUTPUT0")]
    for _ in range(2):
        r = c.infer("cached", _inputs(httpclient), outputs=only0)
        assert [o["name"] for o in r.get_response()["outputs"]] == ["OUTPUT0"]
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A + B)
    s = _stats(c, "cached")
    assert s["execution_count"] == 3
    assert s["inference_stats"]["cache_hit"]["count"] == 3


def test_one_cache_for_both_front_ends_and_each_requests_output_form(cache_server: Server) -> None:
    a = A + 100
    h = httpclient.InferenceServerClient(cache_server.http_url)
    g = grpcclient.InferenceServerClient(cache_server.grpc_url)
    before = _stats(h, "cached")["execution_count"]
    r = g.infer("cached", _inputs(grpcclient, a=a))
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + B)
    # HTTP hit of the gRPC miss, with JSON outputs and JSON inputs.
    json_out = [
        httpclient.InferRequestedOutput(n, binary_data=False) for n in ("OUTPUT0", "OUTPUT1")
    ]
    r = h.infer("cached", _inputs(httpclient, a=a, binary=False), outputs=json_out)
    assert all("data" in o for o in r.get_response()["outputs"])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - B)
    assert _stats(h, "cached")["execution_count"] == before + 1


def test_a_hit_writes_shared_memory_outputs(cache_server: Server) -> None:
    c = httpclient.InferenceServerClient(cache_server.http_url)
    a = A + 200
    c.infer("cached", _inputs(httpclient, a=a))  # the miss, with inline outputs
    handle = shm.create_shared_memory_region("tl_cache_out", "/tl_cache_out", 128)
    try:
        c.register_system_shared_memory("tl_cache_out", "/tl_cache_out", 128)
        outs = [httpclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
        outs[0].set_shared_memory("tl_cache_out", 64)
        outs[1].set_shared_memory("tl_cache_out", 64, offset=64)
        before = _stats(c, "cached")
        c.infer("cached", _inputs(httpclient, a=a), outputs=outs)
        after = _stats(c, "cached")
        assert after["execution_count"] == before["execution_count"]
        assert (
            after["inference_stats"]["cache_hit"]["count"]
            == before["inference_stats"]["cache_hit"]["count"] + 1
        )
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [1, 16]), a + B)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(handle, np.float32, [1, 16], offset=64), a - B
        )
    finally:
        c.unregister_system_shared_memory("tl_cache_out")
        shm.destroy_shared_memory_region(handle)


def test_cache_metrics_equal_statistics_only_for_cached_models(cache_server: Server) -> None:
    c = httpclient.InferenceServerClient(cache_server.http_url)
    a = np.arange(16, dtype=np.float32).reshape(16)
    for _ in range(3):
        c.infer("cached_nobatch", _inputs(httpclient, a=a, b=np.ones(16, np.float32)))
    c.infer("plain", _inputs(httpclient))
    m = _metrics(cache_server)
    for model in ("cached", "cached_nobatch"):
        inf = _stats(c, model)["inference_stats"]
        assert m[("nv_cache_num_hits_per_model", model)] == inf["cache_hit"]["count"]
        assert m[("nv_cache_num_misses_per_model", model)] == inf["cache_miss"]["count"]
        assert m[("nv_cache_hit_duration_per_model", model)] == inf["cache_hit"]["ns"] // 1000
        assert m[("nv_cache_miss_duration_per_model", model)] == inf["cache_miss"]["ns"] // 1000
        assert m[("nv_inference_request_success", model)] == inf["success"]["count"]
        assert m[("nv_inference_request_duration_us", model)] == inf["success"]["ns"] // 1000
    assert m[("nv_cache_num_hits_per_model", "cached_nobatch")] == 2
    assert ("nv_cache_num_hits_per_model", "plain") not in m
    assert m[("nv_inference_request_success", "plain")] >= 1


def test_without_a_server_cache_the_model_loads_and_runs_uncached(tmp_path: Path) -> None:
    s = start_server(_repo(tmp_path), "--allow-grpc=false")
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        for _ in range(2):
            out = c.infer("cached", _inputs(httpclient)).as_numpy("OUTPUT0")
            np.testing.assert_array_equal(out, A + B)
        st = _stats(c, "cached")
        assert st["execution_count"] == 2
        assert st["inference_stats"]["cache_hit"]["count"] == 0
        assert st["inference_stats"]["cache_miss"]["count"] == 0
        assert not any(name.startswith("nv_cache") for name, _ in _metrics(s))
    finally:
        s.stop()


def test_deprecated_byte_size_flag(tmp_path: Path) -> None:
    s = start_server(_repo(tmp_path), "--allow-grpc=false", "--response-cache-byte-size=65536")
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        for _ in range(2):
            c.infer("cached", _inputs(httpclient))
        assert _stats(c, "cached")["inference_stats"]["cache_hit"]["count"] == 1
        assert "'--response-cache-byte-size' has been deprecated" in s.output()
    finally:
        s.stop()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--cache-config", "local,size=1024", "--response-cache-byte-size", "1024"],
            "Incompatible flags --response-cache-byte-size and --cache-config both provided",
        ),
        (["--cache-config", "redis,host=localhost"], "unsupported cache 'redis'"),
        (["--cache-config", "local,size=lots"], "expects an integer byte count"),
    ],
)
def test_bad_cache_flags_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    assert message in refused_at_start(tmp_path, *args)


def test_sequence_model_with_the_cache_fails_to_load_with_tritons_message(tmp_path: Path) -> None:
    write_add_sub(tmp_path, "seq", 8, extra_config="sequence_batching { }\n" + CACHED)
    write_add_sub(tmp_path, "plain", 8)
    s = start_server(
        tmp_path,
        "--allow-grpc=false",
        "--exit-on-error=false",
        "--strict-readiness=false",
        "--cache-config",
        "local,size=65536",
    )
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        index = {m["name"]: m for m in c.get_model_repository_index()}
        assert index["seq"]["state"] == "UNAVAILABLE"
        assert (
            "Response Cache does not currently support model seq with sequence batching "
            "scheduler. Please disable the response cache."
        ) in index["seq"]["reason"]
        with pytest.raises(InferenceServerException):
            c.infer("seq", _inputs(httpclient))
    finally:
        s.stop()
