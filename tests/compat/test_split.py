"""A/B traffic between model variants (``platform: "tritonlite_split"``), end to end.

One server in explicit control mode serves python variants that answer ``OUT = IN + k`` (so a
response tells which variant computed it) and routers over them, seen by the real tritonclient
over HTTP, gRPC and gRPC streaming:

* ``ab`` (``va:90,vb:10``): the split over 10,000 requests, sticky keys, the ``variant``
  parameter, statistics and metrics;
* ``live`` (``va:50,vb:50``): its weights change under load through a load with a ``config``
  override, and no request in flight fails;
* ``ru`` over its own variants ``ua``/``ub``: a variant unloaded at run time has its share
  redistributed (with a warning); with none ready the request fails with UNAVAILABLE;
* ``bad``: loaded with config overrides that a router must refuse, with clear messages.
"""

from __future__ import annotations

import asyncio
import json
import re
import textwrap
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
from conftest import Server, start_server, wait_until
from repos import write_add_sub  # (also puts the repository root on sys.path for tools/)
from tritonclient.utils import InferenceServerException

from tools.onnx_graphs import config_for, identity, write_model

pytestmark = pytest.mark.timeout(180)

OFFSETS = {"va": 1.0, "vb": 2.0, "vc": 3.0, "ua": 11.0, "ub": 12.0, "vo": 0.0}

VARIANT_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", (x + {offset}).astype(np.float32))]))
        return out
"""

BROKEN_MODEL = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this variant never loads")

    def execute(self, requests):
        return []
"""

IO = """
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
"""


def _router(variants: str) -> str:
    return (
        'platform: "tritonlite_split"\n'
        f'parameters {{ key: "variants" value {{ string_value: "{variants}" }} }}\n' + IO
    )


def _router_json(variants: str, **changes: Any) -> str:
    cfg: dict[str, Any] = {
        "platform": "tritonlite_split",
        "max_batch_size": 8,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]}],
        "parameters": {"variants": {"string_value": variants}},
    }
    cfg.update(changes)
    return json.dumps(cfg)


def _write(repo: Path, name: str, config: str, code: str | None = None) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)
    if code is not None:
        (repo / name / "1" / "model.py").write_text(textwrap.dedent(code))


def build_repo(repo: Path) -> Path:
    py = 'backend: "python"\ninstance_group [{ count: 1 kind: KIND_CPU }]\n'
    for name, offset in OFFSETS.items():
        _write(repo, name, py + IO, VARIANT_MODEL.format(offset=offset))
    _write(repo, "broken", py + IO, BROKEN_MODEL)
    _write(
        repo,
        "wide",  # IN/OUT of [8]: does not fit a router of [4]
        py + IO.replace("[4]", "[8]"),
        VARIANT_MODEL.format(offset=0),
    )
    decoupled = "model_transaction_policy { decoupled: true }\n"
    _write(repo, "dec", py + decoupled + IO, VARIANT_MODEL.format(offset=0))
    onnx = identity("FP32", (4,), name_in="IN", name_out="OUT")
    write_model(
        repo, "vo", onnx, config_for(onnx, max_batch_size=8, extra="dynamic_batching { }\n")
    )
    write_add_sub(repo, "add_sub", 8, dims=4)
    _write(repo, "ab", _router("va:90,vb:10"))
    _write(repo, "mixed", _router("va:50,vo:50"))
    _write(repo, "live", _router("va:50,vb:50"))
    _write(repo, "ru", _router("ua:50,ub:50"))
    _write(repo, "bad", _router("va:1"))
    _write(repo, "inner", _router("va:1"))
    return repo


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = build_repo(tmp_path_factory.mktemp("split_repo"))
    s = start_server(
        repo,
        "--model-control-mode=explicit",
        "--load-model=ab",
        "--load-model=live",
        "--load-model=ru",
        "--load-model=mixed",
    )
    yield s
    s.stop()


def _x(seed: int) -> np.ndarray[Any, Any]:
    return np.full((1, 4), float(seed % 97), np.float32)


def _http_input(mod: Any, x: np.ndarray[Any, Any]) -> list[Any]:
    inp = mod.InferInput("IN", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return [inp]


def _check(variant: str, x: np.ndarray[Any, Any], out: np.ndarray[Any, Any]) -> None:
    """The response came from the variant it names."""
    np.testing.assert_array_equal(out, x + OFFSETS[variant])


def _grpc_variant(result: Any) -> str:
    return str(result.get_response().parameters["variant"].string_param)


async def _http_burst(
    url: str, model: str, n: int, concurrency: int = 16, key: str | None = None
) -> Counter[str]:
    """``n`` requests to ``model`` over the aio HTTP client; the variants that answered."""
    counts: Counter[str] = Counter()
    client = httpaio.InferenceServerClient(url)
    try:

        async def worker(w: int) -> None:
            for i in range(w, n, concurrency):
                x = _x(i)
                params = {"ab_key": key} if key is not None else None
                res = await client.infer(model, _http_input(httpaio, x), parameters=params)
                variant = res.get_response()["parameters"]["variant"]
                _check(variant, x, res.as_numpy("OUT"))
                counts[variant] += 1

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        await client.close()
    return counts


def _metric(server: Server, pattern: str) -> float:
    text = (
        urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10).read().decode()
    )
    m = re.search("^" + pattern + r" (\S+)$", text, re.MULTILINE)
    assert m is not None, f"{pattern} not in metrics:\n{text}"
    return float(m.group(1))


# -- the split -----------------------------------------------------------------------------------
def test_split_ratio_over_ten_thousand_requests(server: Server) -> None:
    before = _metric(server, r'tritonlite_split_requests_total\{model="ab",variant="va"\}')
    started = time.monotonic()
    counts = asyncio.run(_http_burst(server.http_url, "ab", 10_000, concurrency=24))
    took = time.monotonic() - started
    assert sum(counts.values()) == 10_000
    share = counts["va"] / 10_000 * 100
    assert abs(share - 90) <= 2, (counts, took)
    assert set(counts) == {"va", "vb"}
    after = _metric(server, r'tritonlite_split_requests_total\{model="ab",variant="va"\}')
    assert after - before == counts["va"]


def test_grpc_and_streaming_carry_the_variant(server: Server) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    seen: Counter[str] = Counter()
    for i in range(200):
        x = _x(i)
        res = client.infer("ab", _http_input(grpcclient, x))
        variant = _grpc_variant(res)
        _check(variant, x, res.as_numpy("OUT"))
        assert res.get_response().model_name == "ab"
        seen[variant] += 1
    assert seen["va"] > seen["vb"] > 0

    results: list[Any] = []
    done = threading.Event()

    def callback(result: Any, error: Any) -> None:
        results.append(error if error is not None else result)
        if len(results) == 50:
            done.set()

    client.start_stream(callback)
    try:
        for i in range(50):
            client.async_stream_infer("ab", _http_input(grpcclient, _x(i)), request_id=str(i))
        assert done.wait(30)
    finally:
        client.stop_stream()
    for res in results:
        assert not isinstance(res, InferenceServerException), res
        i = int(res.get_response().id)
        _check(_grpc_variant(res), _x(i), res.as_numpy("OUT"))
    client.close()


def test_grpc_aio_split(server: Server) -> None:
    async def run() -> Counter[str]:
        client = grpcaio.InferenceServerClient(server.grpc_url)
        counts: Counter[str] = Counter()
        try:
            for i in range(300):
                x = _x(i)
                res = await client.infer("ab", _http_input(grpcaio, x))
                variant = _grpc_variant(res)
                _check(variant, x, res.as_numpy("OUT"))
                counts[variant] += 1
        finally:
            await client.close()
        return counts

    counts = asyncio.run(run())
    assert 0 < counts["vb"] < counts["va"]


def test_sticky_keys_never_change_variant(server: Server) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    per_key: dict[str, set[str]] = {}
    for k in range(150):
        key = f"user-{k}"
        for rep in range(3):
            x = _x(k + rep)
            res = http.infer("ab", _http_input(httpclient, x), parameters={"ab_key": key})
            variant = res.get_response()["parameters"]["variant"]
            _check(variant, x, res.as_numpy("OUT"))
            per_key.setdefault(key, set()).add(variant)
        g = grpc.infer("ab", _http_input(grpcclient, _x(k)), parameters={"ab_key": key})
        per_key[key].add(_grpc_variant(g))
    assert all(len(v) == 1 for v in per_key.values()), per_key
    on_b = sum(1 for v in per_key.values() if v == {"vb"})
    assert 3 <= on_b <= 35  # about 10% of 150 keys
    with pytest.raises(InferenceServerException, match="'ab_key' must be a string") as info:
        http.infer("ab", _http_input(httpclient, _x(0)), parameters={"ab_key": 7})
    assert info.value.status() == "400"  # type: ignore[no-untyped-call]
    http.close()
    grpc.close()


def test_statistics_show_the_router_like_an_ensemble(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)

    def stats() -> dict[str, dict[str, Any]]:
        return {
            m["name"]: m["inference_stats"]
            for m in client.get_inference_statistics()["model_stats"]
            if m["version"] == "1"
        }

    before = stats()
    for i in range(30):
        client.infer("ab", _http_input(httpclient, _x(i)))
    after = stats()

    def delta(model: str, field: str) -> int:
        return int(after[model][field]["count"] - before[model][field]["count"])

    assert delta("ab", "success") == 30  # the router counts each request once
    assert delta("ab", "compute_infer") == 30  # with its variant's compute times
    assert after["ab"]["fail"]["count"] == 0
    assert delta("va", "success") + delta("vb", "success") == 30  # and so do the variants
    assert after["ab"]["compute_infer"]["ns"] > before["ab"]["compute_infer"]["ns"]
    only = client.get_inference_statistics("ab")["model_stats"]
    assert [m["name"] for m in only] == ["ab"]
    config = client.get_model_config("ab")
    assert config["platform"] == "tritonlite_split"
    assert not config.get("instance_group") and "optimization" not in config
    assert client.get_model_metadata("ab")["platform"] == "tritonlite_split"
    client.close()


def test_metrics_count_per_variant(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    before = {
        v: _metric(server, rf'tritonlite_split_requests_total\{{model="ab",variant="{v}"\}}')
        for v in ("va", "vb")
    }
    hist = _metric(server, r'tritonlite_split_request_duration_us_count\{model="ab",variant="va"\}')
    va_success = _metric(server, r'nv_inference_request_success\{model="va",version="1"\}')
    sent: Counter[str] = Counter()
    for i in range(40):
        res = client.infer("ab", _http_input(httpclient, _x(i)))
        sent[res.get_response()["parameters"]["variant"]] += 1
    for v in ("va", "vb"):
        now = _metric(server, rf'tritonlite_split_requests_total\{{model="ab",variant="{v}"\}}')
        assert now - before[v] == sent[v]
    assert (
        _metric(server, r'tritonlite_split_request_duration_us_count\{model="ab",variant="va"\}')
        - hist
        == sent["va"]
    )
    inf_bucket = _metric(
        server, r'tritonlite_split_request_duration_us_bucket\{le="\+Inf",model="ab",variant="va"\}'
    )
    assert inf_bucket == hist + sent["va"]
    assert (
        _metric(server, r'nv_inference_request_success\{model="va",version="1"\}') - va_success
        == sent["va"]
    )
    client.close()


def test_variants_of_any_backend(server: Server) -> None:
    """``mixed`` splits between a python model and a dynamically batched ONNX model."""

    async def run() -> Counter[str]:
        counts = await _http_burst(server.http_url, "mixed", 400)
        client = grpcaio.InferenceServerClient(server.grpc_url)
        try:
            for i in range(100):
                x = _x(i)
                res = await client.infer("mixed", _http_input(grpcaio, x))
                variant = _grpc_variant(res)
                _check(variant, x, res.as_numpy("OUT"))
                counts[variant] += 1
        finally:
            await client.close()
        return counts

    counts = asyncio.run(run())
    assert set(counts) == {"va", "vo"} and min(counts.values()) > 150, counts
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="input 'IN' is not an input of variant"):
        client.load_model("bad", config=_router_json("va:1,add_sub:1"))
    client.close()


# -- run-time changes ----------------------------------------------------------------------------
def test_weight_change_under_load_drops_nothing(server: Server) -> None:
    """Requests keep flowing while ``live`` is reloaded from 50/50 to 1/99; none fails, and
    the requests after the reload follow the new weights."""

    async def run() -> tuple[int, Counter[str]]:
        stop = asyncio.Event()
        errors: list[BaseException] = []
        sent = [0]
        client = httpaio.InferenceServerClient(server.http_url)

        async def load() -> None:
            while not stop.is_set():
                x = _x(sent[0])
                try:
                    res = await client.infer("live", _http_input(httpaio, x))
                    _check(res.get_response()["parameters"]["variant"], x, res.as_numpy("OUT"))
                except Exception as exc:  # collected: the test asserts there is none
                    errors.append(exc)
                sent[0] += 1

        async def until(n: int) -> None:
            while sent[0] < n:
                await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(load()) for _ in range(8)]
        try:
            await asyncio.wait_for(until(200), 60)
            control = httpaio.InferenceServerClient(server.http_url)
            try:
                await control.load_model("live", config=_router_json("va:1,vb:99"))
            finally:
                await control.close()
            await asyncio.wait_for(until(sent[0] + 200), 60)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await client.close()
        assert not errors, errors[:3]
        return sent[0], await _http_burst(server.http_url, "live", 400)

    sent, after = asyncio.run(run())
    assert sent >= 400
    assert after["vb"] >= 380, after  # 99% of 400, with room for chance


def test_unloaded_variant_share_is_redistributed(server: Server) -> None:
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    keys = [f"k{i}" for i in range(60)]

    def variant_of(key: str) -> str:
        x = _x(len(key))
        res = http.infer("ru", _http_input(httpclient, x), parameters={"ab_key": key})
        variant: str = res.get_response()["parameters"]["variant"]
        _check(variant, x, res.as_numpy("OUT"))
        return variant

    first = {k: variant_of(k) for k in keys}
    assert set(first.values()) == {"ua", "ub"}
    http.unload_model("ub")
    try:
        assert "model 'ru' splits its traffic: 'ua' 50%, 'ub' 50%" in server.output()
        assert http.is_model_ready("ru")
        moved = {k: variant_of(k) for k in keys}
        assert set(moved.values()) == {"ua"}
        # keys of the ready variant stay where they were
        assert all(moved[k] == "ua" for k in keys if first[k] == "ua")
        for i in range(20):
            res = grpc.infer("ru", _http_input(grpcclient, _x(i)))
            assert _grpc_variant(res) == "ua"
        server.wait_for_lines(
            lambda lines: any("variant 'ub' is not ready" in line for line in lines)
        )
        warnings = [ln for ln in server.output().splitlines() if "variant 'ub' is not ready" in ln]
        assert 1 <= len(warnings) <= 3  # rate-limited (10 s): not one per redirected request
        http.unload_model("ua")
        with pytest.raises(InferenceServerException) as info:
            http.infer("ru", _http_input(httpclient, _x(0)))
        assert "model 'ru' has no ready variant (variants: 'ua', 'ub')" in str(info.value)
        assert info.value.status() == "503"  # type: ignore[no-untyped-call]
        with pytest.raises(InferenceServerException) as ginfo:
            grpc.infer("ru", _http_input(grpcclient, _x(0)))
        assert ginfo.value.status() == "StatusCode.UNAVAILABLE"  # type: ignore[no-untyped-call]
    finally:
        http.load_model("ua")
        http.load_model("ub")
    assert {k: variant_of(k) for k in keys} == first
    http.close()
    grpc.close()


# -- configs a router refuses --------------------------------------------------------------------
BAD_CONFIGS = [
    (_router_json(""), "must list at least one variant"),
    (_router_json("va:0"), "the weight of variant 'va' must be a positive integer, got '0'"),
    (_router_json("va:-3"), "the weight of variant 'va' must be a positive integer"),
    (_router_json("va:x"), "the weight of variant 'va' must be a positive integer, got 'x'"),
    (_router_json("va"), "'va' is not 'name:weight'"),
    (_router_json("va:1,va:2"), "variant 'va' is listed twice"),
    (_router_json("bad:1"), "a model cannot be a variant of itself"),
    (_router_json("nowhere:1"), "variant 'nowhere' is not in the model repository"),
    (_router_json("va:1,broken:1"), "variant 'broken' failed to load:.*never loads"),
    (_router_json("inner:1"), "variant 'inner' is itself a tritonlite_split model"),
    (_router_json("va:1,dec:1"), "variant 'dec' is decoupled"),
    (_router_json("../va:1"), "variant name '../va' is not a model name: must not contain '/'"),
    (_router_json("wide:1"), "input 'IN' has dims \\[4\\] but \\[8\\] in variant 'wide'"),
    (
        _router_json("va:1", input=[{"name": "IN", "data_type": "TYPE_INT32", "dims": [4]}]),
        "input 'IN' is INT32 but FP32 in variant 'va'",
    ),
    (
        _router_json("va:1", output=[{"name": "NOPE", "data_type": "TYPE_FP32", "dims": [4]}]),
        "output 'NOPE' is not an output of variant 'va'",
    ),
    (_router_json("va:1", max_batch_size=16), "allows max_batch_size 16 but variant 'va' only 8"),
    (_router_json("va:1", max_batch_size=0), "both must batch or neither"),
    (_router_json("va:1", dynamic_batching={}), "cannot set dynamic_batching"),
    (_router_json("va:1", instance_group=[{"count": 2}]), "cannot set instance_group"),
    (_router_json("va:1", response_cache={"enable": True}), "cannot enable response_cache"),
    (
        json.dumps(
            {k: v for k, v in json.loads(_router_json("va:1")).items() if k != "parameters"}
        ),
        'must set parameters { key: "variants"',
    ),
]


@pytest.mark.parametrize(("config", "message"), BAD_CONFIGS)
def test_bad_configs_are_refused(server: Server, config: str, message: str) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match=message):
        client.load_model("bad", config=config)
    assert not client.is_model_ready("bad")
    client.close()


def test_a_good_load_after_refusals_serves(server: Server) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model("bad", config=_router_json("vc:1"))
    x = _x(5)
    res = client.infer("bad", _http_input(httpclient, x))
    assert res.get_response()["parameters"]["variant"] == "vc"
    _check("vc", x, res.as_numpy("OUT"))
    client.unload_model("bad")
    client.close()


def test_startup_loads_variants_first(tmp_path: Path) -> None:
    """Without explicit control a router loads after its variants; a router whose variant
    fails to load fails, naming it, and everything else serves."""
    repo = tmp_path / "repo"
    py = 'backend: "python"\ninstance_group [{ count: 1 kind: KIND_CPU }]\n'
    _write(repo, "va", py + IO, VARIANT_MODEL.format(offset=OFFSETS["va"]))
    _write(repo, "broken", py + IO, BROKEN_MODEL)
    _write(repo, "ab", _router("va:3"))
    _write(repo, "sad", _router("va:1,broken:1"))
    s = start_server(repo, "--exit-on-error=false", "--allow-metrics=false")
    try:
        c = httpclient.InferenceServerClient(s.http_url)
        wait_until(lambda: c.is_model_ready("ab"), 30)
        rows = {r["name"]: r for r in c.get_model_repository_index()}
        assert rows["sad"]["state"] == "UNAVAILABLE"
        assert "variant 'broken' failed to load" in rows["sad"]["reason"]
        res = c.infer("ab", _http_input(httpclient, _x(1)))
        assert res.get_response()["parameters"]["variant"] == "va"
        c.close()
    finally:
        s.stop()
