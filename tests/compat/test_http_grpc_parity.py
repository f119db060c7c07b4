"""HTTP and gRPC never diverge: one parametrized body runs each case through tritonclient.http
and tritonclient.grpc against one server and compares the decoded results, or the error class
(gRPC codes mapped to HTTP statuses with PROTOCOL §0.3's table) and message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import start_server
from repos import DTYPES, build_http_repo
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

pytestmark = pytest.mark.timeout(60)

A = np.arange(16, dtype=np.float32).reshape(1, 16)
B = np.full((1, 16), 2.0, dtype=np.float32)
RNG = np.random.default_rng(11)

# gRPC status -> the HTTP status of the same Triton error code (PROTOCOL §0.3)
_HTTP_OF = {
    "StatusCode.INVALID_ARGUMENT": "400",
    "StatusCode.UNKNOWN": "400",
    "StatusCode.ALREADY_EXISTS": "400",
    "StatusCode.CANCELLED": "400",
    "StatusCode.NOT_FOUND": "404",
    "StatusCode.UNAVAILABLE": "503",
    "StatusCode.UNIMPLEMENTED": "501",
    "StatusCode.INTERNAL": "500",
}


class Proto:
    """One protocol's client behind the calls the cases make."""

    def __init__(self, name: str, mod: Any, client: Any) -> None:
        self.name, self.mod, self.client = name, mod, client

    def infer(
        self,
        model: str,
        inputs: list[tuple[str, np.ndarray, str]],
        outputs: list[tuple[str, int]] | None = None,
        **kw: Any,
    ) -> dict[str, np.ndarray]:
        ins = []
        for name, arr, dt in inputs:
            i = self.mod.InferInput(name, list(arr.shape), dt)
            i.set_data_from_numpy(arr)
            ins.append(i)
        outs = None
        if outputs is not None:
            outs = [self.mod.InferRequestedOutput(n, class_count=k) for n, k in outputs]
        r = self.client.infer(model, ins, outputs=outs, **kw)
        resp = r.get_response()
        names = (
            [o["name"] for o in resp["outputs"]]
            if self.name == "http"
            else [o.name for o in resp.outputs]
        )
        return {n: r.as_numpy(n) for n in names}

    def call(self, method: str, *args: Any, **kw: Any) -> Any:
        if self.name == "grpc":
            kw["as_json"] = True
        return getattr(self.client, method)(*args, **kw)


def _ints(doc: Any) -> Any:
    """gRPC's MessageToJson writes int64 as strings: turn digit strings back into ints."""
    if isinstance(doc, dict):
        return {k: _ints(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_ints(v) for v in doc]
    if isinstance(doc, str) and re.fullmatch(r"-?\d+", doc):
        return int(doc)
    return doc


def metadata(p: Proto, model: str) -> Any:
    return _ints(p.call("get_model_metadata", model))


def config_summary(p: Proto, model: str) -> Any:
    cfg = p.call("get_model_config", model)
    cfg = _ints(cfg["config"] if p.name == "grpc" else cfg)
    return {
        "name": cfg["name"],
        "max_batch_size": cfg.get("max_batch_size", 0),
        "platform": cfg.get("platform"),
        "backend": cfg.get("backend"),
        "input": [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]],
        "output": [(t["name"], t["data_type"], t["dims"]) for t in cfg["output"]],
        "dynamic_batching": "dynamic_batching" in cfg,
        "instance_kinds": [g["kind"] for g in cfg.get("instance_group", [])],
    }


def server_metadata(p: Proto) -> Any:
    md = p.call("get_server_metadata")
    return {k: md[k] for k in ("name", "version", "extensions")}


def repository_index(p: Proto) -> Any:
    rows = p.call("get_model_repository_index")
    rows = rows.get("models", []) if p.name == "grpc" else rows
    return sorted((r["name"], r.get("version", ""), r.get("state", "")) for r in rows)


def statistics(p: Proto, model: str = "") -> Any:
    st = p.call("get_inference_statistics", model)
    return sorted((m["name"], m["version"]) for m in st["model_stats"])


def log_settings(p: Proto) -> Any:
    s = p.call("get_log_settings")
    if p.name == "grpc":  # {"key": {"bool_param": v}} (a set oneof prints even a default)
        return {k: next(iter(v.values()), None) for k, v in s["settings"].items()}
    return s


def trace_settings(p: Proto, model: str = "") -> Any:
    s = p.call("get_trace_settings", model)
    if p.name == "grpc":
        return {
            k: v.get("value", []) if k == "trace_level" else "".join(v.get("value", []))
            for k, v in s["settings"].items()
        }
    return s


def shm_status(p: Proto) -> Any:
    s = p.call("get_system_shared_memory_status")
    return sorted(s.get("regions", {})) if p.name == "grpc" else sorted(r["name"] for r in s)


def _identity(dtype: str) -> Callable[[Proto], Any]:
    np_dtype = triton_to_np_dtype(dtype)
    if dtype == "BOOL":
        data = RNG.random((3, 4)) > 0.5
    elif dtype == "BF16" or np.dtype(np_dtype).kind == "f":
        data = (RNG.random((3, 4)) * 50).astype(np_dtype)
    else:
        info = np.iinfo(np_dtype)
        data = RNG.integers(info.min, info.max, size=(3, 4), dtype=np_dtype, endpoint=True)
    return lambda p: p.infer(f"identity_{dtype.lower()}", [("INPUT0", data, dtype)])


def _add_sub(
    a: np.ndarray = A, b: np.ndarray = B, model: str = "add_sub", adt: str = "FP32", **kw: Any
) -> Callable[[Proto], Any]:
    return lambda p: p.infer(model, [("INPUT0", a, adt), ("INPUT1", b, "FP32")], **kw)


_BATCH = (RNG.random((8, 16), dtype=np.float32), RNG.random((8, 16), dtype=np.float32))
_CLS = np.array([[0.5, 3.25, -1.0, 2.0] + [0.0] * 12, [9.0] + [0.0] * 15], dtype=np.float32)
_STRINGS = np.array([[b"hello", "é∑".encode(), b"", b"x" * 300]], dtype=object)

CASES: dict[str, Callable[[Proto], Any]] = {
    "add_sub": _add_sub(),
    "add_sub version 1": _add_sub(model_version="1"),
    "batch of 8": _add_sub(*_BATCH),
    "no batching": _add_sub(A.reshape(16), B.reshape(16), "add_sub_nobatch"),
    "one output": _add_sub(outputs=[("OUTPUT1", 0)]),
    "classification": _add_sub(_CLS, np.zeros_like(_CLS), outputs=[("OUTPUT0", 2)]),
    "classification with labels": lambda p: p.infer(
        "classifier",
        [("INPUT0", _CLS[:1, :4].copy(), "FP32"), ("INPUT1", np.zeros((1, 4), np.float32), "FP32")],
        outputs=[("OUTPUT0", 3)],
    ),
    **{f"identity {dt}": _identity(dt) for dt in DTYPES},
    "bytes": lambda p: p.infer("identity_string", [("INPUT0", _STRINGS, "BYTES")]),
    "zero elements": _add_sub(np.zeros((0, 16), np.float32), np.zeros((0, 16), np.float32)),
    "variable dims": lambda p: p.infer(
        "identity_variable", [("INPUT0", np.arange(7, dtype=np.float32)[None], "FP32")]
    ),
    "parameters": _add_sub(
        parameters={"k": 1, "s": "x", "b": True, "f": 0.5},
        priority=1,
        timeout=100_000,
        request_id="77",
    ),
    # errors: the same class and message on both
    "unknown model": _add_sub(model="nope"),
    "unknown version": _add_sub(model_version="9"),
    "wrong datatype": _add_sub(np.zeros((1, 8), np.float64), adt="FP64"),
    "wrong shape": _add_sub(np.zeros((1, 8), np.float32)),
    "batch too big": _add_sub(np.zeros((9, 16), np.float32), np.zeros((9, 16), np.float32)),
    "batch mismatch": _add_sub(np.zeros((2, 16), np.float32)),
    "missing input": lambda p: p.infer("add_sub", [("INPUT0", A, "FP32")]),
    "unknown input": lambda p: p.infer("add_sub", [("INPUT0", A, "FP32"), ("INPUTX", B, "FP32")]),
    "unknown output": _add_sub(outputs=[("NOPE", 0)]),
    "classification of nobatch": _add_sub(
        A.reshape(16), B.reshape(16), "add_sub_nobatch", outputs=[("OUTPUT0", 3)]
    ),
    # the other extensions
    "metadata": lambda p: metadata(p, "add_sub"),
    "metadata nobatch": lambda p: metadata(p, "add_sub_nobatch"),
    "metadata bytes": lambda p: metadata(p, "identity_string"),
    "metadata unknown": lambda p: metadata(p, "nope"),
    "config": lambda p: config_summary(p, "add_sub"),
    "config nobatch": lambda p: config_summary(p, "add_sub_nobatch"),
    "config bytes": lambda p: config_summary(p, "identity_string"),
    "config unknown": lambda p: config_summary(p, "nope"),
    "server metadata": server_metadata,
    "repository index": repository_index,
    "load in none mode": lambda p: p.client.load_model("add_sub"),
    "statistics": lambda p: statistics(p, "add_sub"),
    "statistics of all": statistics,
    "statistics unknown": lambda p: statistics(p, "nope"),
    "log settings": log_settings,
    "trace settings": trace_settings,
    "trace settings of a model": lambda p: trace_settings(p, "add_sub"),
    "trace settings unknown model": lambda p: trace_settings(p, "nope"),
    "shm status": shm_status,
    "shm status unknown": lambda p: p.call("get_system_shared_memory_status", "nope"),
    "shm register bad key": lambda p: p.client.register_system_shared_memory("x", "/tl_nokey", 8),
    "cuda shm unregister all": lambda p: p.client.unregister_cuda_shared_memory(),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo: Path = build_http_repo(tmp_path_factory.mktemp("parity_repo"))
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def protocols(server: Any) -> Iterator[list[Proto]]:
    h = httpclient.InferenceServerClient(server.http_url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    yield [Proto("http", httpclient, h), Proto("grpc", grpcclient, g)]
    h.close()
    g.close()


def _outcome(p: Proto, case: Callable[[Proto], Any]) -> tuple[str, Any]:
    try:
        return "ok", case(p)
    except InferenceServerException as exc:
        status = exc.status() or ""
        return "error", (_HTTP_OF.get(status, status), exc.message())


def _assert_same(h: Any, g: Any) -> None:
    if isinstance(h, dict) and h and all(isinstance(v, np.ndarray) for v in h.values()):
        assert list(h) == list(g)
        for name in h:
            assert h[name].dtype == g[name].dtype and h[name].shape == g[name].shape, name
            np.testing.assert_array_equal(h[name], g[name])
    else:
        assert h == g


@pytest.mark.parametrize("name", list(CASES))
def test_parity(protocols: list[Proto], name: str) -> None:
    http, grpc_ = (_outcome(p, CASES[name]) for p in protocols)
    assert http[0] == grpc_[0], (http, grpc_)
    if http[0] == "error":
        assert http[1][0] == grpc_[1][0], (http, grpc_)  # the same class of error
        assert http[1][1] == grpc_[1][1]  # and the same message: the core decided it
    else:
        _assert_same(http[1], grpc_[1])
