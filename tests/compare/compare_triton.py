"""Differential check: the same HTTP exchanges against the real tritonserver and tritonlite.

Real Triton here is the tritonserver binary of the nvidia-pytriton wheel
(tools/triton-reference.sh), whose only backend is Python; it serves the Python-backend twins in
tests/compare/models/, while tritonlite serves ONNX twins with the same names, inputs, outputs,
dims and max_batch_size (only platform and backend differ). Every exchange is sent with identical
bytes (raw http.client, the same Host header) to both; the status line, the headers that matter
and the JSON bodies are compared after normalizing the fields known to differ for a stated reason.

    .venv/bin/python tests/compare/compare_triton.py [--triton-dir .tools/triton] [--keep]

Prints a table (exchange | triton | tritonlite | same? | difference) and writes the raw
comparison to bench/results/compare_triton.json. It is a report: exit status 0 whatever the
differences, non-zero only when a server fails to start.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import tritonclient.http as httpclient
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).resolve().parent / "models"
RESULTS = ROOT / "bench" / "results" / "compare_triton.json"
HOST = "127.0.0.1"
# Headers whose presence or value a client reads; Date/Server/Connection are not compared.
COMPARED_HEADERS = (
    "content-type",
    "inference-header-content-length",
    "content-encoding",
    "accept-encoding",
    "transfer-encoding",
)

_ONNX_TYPE = {
    "TYPE_FP32": TensorProto.FLOAT,
    "TYPE_INT32": TensorProto.INT32,
    "TYPE_STRING": TensorProto.STRING,
}


# -- repositories ----------------------------------------------------------------------------------
Spec = tuple[str, str, list[int]]  # (tensor name, TYPE_* name, dims)


def _io_specs(config_text: str) -> tuple[int, list[Spec], list[Spec]]:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    cfg = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    dt = model_config_pb2.DataType.Name

    def specs(tensors: Any) -> list[Spec]:
        return [(t.name, dt(t.data_type), list(t.dims)) for t in tensors]

    return cfg.max_batch_size, specs(cfg.input), specs(cfg.output)


def _onnx_twin(name: str, config_text: str, path: Path) -> None:
    """The ONNX graph computing what tests/compare/models/model.py computes for this config."""
    max_batch, inputs, outputs = _io_specs(config_text)

    def vinfo(spec: Spec) -> onnx.ValueInfoProto:
        n, dtype, dims = spec
        # Variable dims are named by position, so an identity's input and output share them.
        shape: list[int | str] = ["batch"] if max_batch else []
        shape += [d if d >= 0 else f"d{i}" for i, d in enumerate(dims)]
        return helper.make_tensor_value_info(n, _ONNX_TYPE[dtype], shape)

    if len(inputs) == 2:
        nodes = [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ]
    else:
        nodes = [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])]
    graph = helper.make_graph(nodes, name, [vinfo(i) for i in inputs], [vinfo(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def build_repositories(root: Path) -> tuple[Path, Path]:
    """Write Triton's Python-backend repository and tritonlite's ONNX one under ``root``."""
    triton_repo, lite_repo = root / "triton_repo", root / "tritonlite_repo"
    for model_dir in sorted(p for p in MODELS.iterdir() if p.is_dir()):
        name, text = model_dir.name, (model_dir / "config.pbtxt").read_text()
        t = triton_repo / name
        (t / "1").mkdir(parents=True)
        (t / "config.pbtxt").write_text('backend: "python"\n' + text)
        shutil.copy(MODELS / "model.py", t / "1" / "model.py")
        lt = lite_repo / name
        (lt / "1").mkdir(parents=True)
        (lt / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\n' + text)
        _onnx_twin(name, text, lt / "1" / "model.onnx")
    return triton_repo, lite_repo


# -- servers ---------------------------------------------------------------------------------------
def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind((HOST, 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _wait_ready(port: int, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection(HOST, port, timeout=2)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)  # readiness poll interval
    return False


class Tritonlite:
    """tritonlite on port 0; the bound HTTP port is read back from its startup log line."""

    MARK = "Started HTTPService at "

    def __init__(self, repo: Path, log_path: Path) -> None:
        self.log_path = log_path
        self.port: int | None = None
        self._found = threading.Event()
        cmd = [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(repo),
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--http-address",
            HOST,
            "--grpc-address",
            HOST,
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        with open(self.log_path, "wb") as log:
            for raw in self.proc.stderr:
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", "replace")
                if self.port is None and self.MARK in line:
                    self.port = int(line.split(self.MARK, 1)[1].split()[0].rsplit(":", 1)[1])
                    self._found.set()
        self._found.set()

    def start(self, timeout_s: float = 90.0) -> int:
        if not self._found.wait(timeout_s) or self.port is None:
            raise RuntimeError(f"tritonlite did not report its HTTP port; log: {self.log_path}")
        if not _wait_ready(self.port, self.proc, timeout_s):
            raise RuntimeError(f"tritonlite not ready; log: {self.log_path}")
        return self.port

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Triton:
    """The real tritonserver through tools/triton-reference.sh."""

    def __init__(self, tool_dir: Path, repo: Path) -> None:
        self.tool_dir, self.repo = tool_dir, repo
        self.script = ROOT / "tools" / "triton-reference.sh"
        self.port, self.log = 0, ""

    def start(self) -> int:
        http_port, grpc_port, metrics_port = _free_ports(3)
        run = subprocess.run(
            [
                "bash",
                str(self.script),
                "start",
                str(self.tool_dir),
                str(self.repo),
                str(http_port),
                str(grpc_port),
                str(metrics_port),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if run.returncode != 0:
            raise RuntimeError(f"tritonserver failed to start:\n{run.stdout}{run.stderr}")
        self.log = run.stdout.split()[-1]
        self.port = http_port
        return http_port

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(self.script), "stop", str(self.tool_dir)], timeout=60, check=False
        )


# -- exchanges -------------------------------------------------------------------------------------
Normalizer = Callable[[Any], Any]


@dataclass
class Exchange:
    name: str
    method: str
    path: str
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    normalize: list[tuple[str, Normalizer]] = field(default_factory=list)


@dataclass
class Answer:
    status: int
    reason: str
    headers: dict[str, str]
    body: bytes

    def record(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "headers": self.headers,
            "body": self.body.decode("utf-8", "backslashreplace"),
        }


def send(port: int, ex: Exchange) -> Answer:
    c = http.client.HTTPConnection(HOST, port, timeout=30)
    # Same bytes to both servers: the Host header names no port, and nothing is added implicitly.
    c.putrequest(ex.method, ex.path, skip_host=True, skip_accept_encoding=True)
    c.putheader("Host", HOST)
    for k, v in ex.headers.items():
        c.putheader(k, v)
    if ex.body or ex.method in ("POST", "PUT"):
        c.putheader("Content-Length", str(len(ex.body)))
    c.endheaders(ex.body or None)
    r = c.getresponse()
    body = r.read()
    headers = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return Answer(r.status, r.reason, headers, body)


def _json_body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def _binary_request(
    inputs: list[httpclient.InferInput],
    outputs: list[httpclient.InferRequestedOutput] | None = None,
    **kw: Any,
) -> tuple[bytes, dict[str, str]]:
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs, **kw)
    headers = {"Content-Type": "application/octet-stream"}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    return body, headers


def _fp32_inputs(batch: int | None, binary: bool) -> list[httpclient.InferInput]:
    shape = [batch, 16] if batch else [16]
    a = np.arange(16, dtype=np.float32) + np.float32(0.1)
    if batch:
        a = np.tile(a, (batch, 1))
    b = np.ones(shape, dtype=np.float32)
    out = []
    for n, arr in (("INPUT0", a), ("INPUT1", b)):
        i = httpclient.InferInput(n, shape, "FP32")
        i.set_data_from_numpy(arr, binary_data=binary)
        out.append(i)
    return out


def _set(path: str, value: Callable[[Any], Any]) -> tuple[str, Normalizer]:
    """Replace every value at a dotted path (``*`` walks lists and dicts) with value(old)."""
    keys = path.split(".")

    def walk(node: Any, rest: list[str]) -> None:
        k, tail = rest[0], rest[1:]
        if isinstance(node, list):
            slots: list[Any] = list(range(len(node))) if k == "*" else []
        elif isinstance(node, dict):
            slots = list(node) if k == "*" else [k] if k in node else []
        else:
            return
        for slot in slots:
            if tail:
                walk(node[slot], tail)
            else:
                node[slot] = value(node[slot])

    def norm(doc: Any) -> Any:
        walk(doc, keys)
        return doc

    return path, norm


def _mask(path: str) -> tuple[str, Normalizer]:
    return _set(path, lambda _old: "<masked>")


def _nonzero(path: str) -> tuple[str, Normalizer]:
    return _set(path, lambda old: "<nonzero>" if old else old)


def _sorted(path: str) -> tuple[str, Normalizer]:
    return _set(path, lambda old: sorted(old) if isinstance(old, list) else old)


def _outputs_at_dtype() -> tuple[str, Normalizer]:
    """JSON output data read at the output's own precision, as tritonclient's as_numpy reads it.

    Triton writes an FP32 element as the double nearest to it (1.100000023841858); the shortest
    text that reads back as the same float32 (1.1) is an equally exact answer.
    """
    narrow = {"FP32": np.float32, "FP16": np.float16}

    def norm(doc: Any) -> Any:
        for out in doc.get("outputs", []) if isinstance(doc, dict) else []:
            dtype = narrow.get(out.get("datatype"))
            if dtype is not None and isinstance(out.get("data"), list):
                exact = np.asarray(out["data"], dtype=dtype).astype(np.float64)
                out["data"] = exact.ravel().tolist()
        return doc

    return "FP32 data at float32 precision", norm


def _config_norms() -> list[tuple[str, Normalizer]]:
    # Fields that follow from the backend (python vs onnxruntime), not from the config text.
    return [_mask("platform"), _mask("backend"), _mask("default_model_filename"), _mask("runtime")]


def _stats_norms() -> list[tuple[str, Normalizer]]:
    per_stat = (
        "success",
        "fail",
        "queue",
        "compute_input",
        "compute_infer",
        "compute_output",
        "cache_hit",
        "cache_miss",
    )
    norms = [_nonzero("model_stats.*.last_inference"), _mask("model_stats.*.memory_usage")]
    norms += [_nonzero(f"model_stats.*.inference_stats.{s}.ns") for s in per_stat]
    norms += [
        _nonzero(f"model_stats.*.batch_stats.*.{s}.ns")
        for s in ("compute_input", "compute_infer", "compute_output")
    ]
    return norms


def exchanges() -> list[Exchange]:
    ex: list[Exchange] = []

    def get(name: str, path: str, *norms: tuple[str, Normalizer]) -> None:
        ex.append(Exchange(name, "GET", path, normalize=list(norms)))

    def post(
        name: str,
        path: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        *norms: tuple[str, Normalizer],
    ) -> None:
        extra = [_outputs_at_dtype()] if path.endswith("/infer") else []
        ex.append(Exchange(name, "POST", path, body, dict(headers or {}), list(norms) + extra))

    json_h = {"Content-Type": "application/json"}

    get("server metadata", "/v2", _mask("version"), _sorted("extensions"))
    get("health live", "/v2/health/live")
    get("health ready", "/v2/health/ready")
    for m in ("add_sub", "add_sub_nobatch", "add_sub_int32", "identity_bytes", "identity_vardim"):
        get(f"metadata {m}", f"/v2/models/{m}", _mask("platform"))
    for m in ("add_sub", "add_sub_nobatch", "add_sub_int32", "identity_bytes"):
        get(f"config {m}", f"/v2/models/{m}/config", *_config_norms())
    # identity_vardim leaves instance_group out: each backend picks its own default count.
    get(
        "config identity_vardim",
        "/v2/models/identity_vardim/config",
        *_config_norms(),
        _mask("instance_group.*.count"),
    )
    get("model ready", "/v2/models/add_sub/ready")
    get("model ready v1", "/v2/models/add_sub/versions/1/ready")
    get("model ready v2 (absent)", "/v2/models/add_sub/versions/2/ready")
    get("metadata v2 (absent)", "/v2/models/add_sub/versions/2")
    get("metadata unknown model", "/v2/models/nope")
    get("ready unknown model", "/v2/models/nope/ready")
    get("config unknown model", "/v2/models/nope/config")

    a = list(np.arange(16, dtype=np.float32) + np.float32(0.1))
    fp = [float(x) for x in a]
    ones = [1.0] * 16
    infer = "/v2/models/add_sub/infer"
    json_req: dict[str, Any] = {
        "id": "r1",
        "inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": fp},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "FP32", "data": ones},
        ],
        "outputs": [
            {"name": "OUTPUT0", "parameters": {"binary_data": False}},
            {"name": "OUTPUT1", "parameters": {"binary_data": False}},
        ],
    }
    post("infer JSON", infer, _json_body(json_req), json_h)
    no_out = copy.deepcopy(json_req)
    del no_out["outputs"], no_out["id"]
    post("infer JSON, no outputs listed", infer, _json_body(no_out), json_h)
    one_out = copy.deepcopy(json_req)
    one_out["outputs"] = [{"name": "OUTPUT1"}]
    post("infer JSON, one output", infer, _json_body(one_out), json_h)
    nested = copy.deepcopy(no_out)
    nested["inputs"][0]["data"] = [fp]
    nested["inputs"][1]["data"] = [ones]
    post("infer JSON, nested data", infer, _json_body(nested), json_h)

    body, hdr = _binary_request(
        _fp32_inputs(2, True),
        [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
        ],
        request_id="b7",
    )
    post("infer binary (tritonclient body)", infer, body, hdr)
    body, hdr = _binary_request(_fp32_inputs(1, True), None, parameters=None)
    post("infer binary, no outputs listed", infer, body, hdr)
    post("infer binary, Accept-Encoding gzip", infer, body, {**hdr, "Accept-Encoding": "gzip"})
    post(
        "infer JSON, gzip request body",
        infer,
        gzip.compress(_json_body(no_out)),
        {**json_h, "Content-Encoding": "gzip"},
    )
    post(
        "infer JSON, deflate request body",
        infer,
        zlib.compress(_json_body(no_out)),
        {**json_h, "Content-Encoding": "deflate"},
    )
    post(
        "infer, unsupported Content-Encoding",
        infer,
        _json_body(no_out),
        {**json_h, "Content-Encoding": "br"},
    )
    body, hdr = _binary_request(_fp32_inputs(None, True))
    post("infer add_sub_nobatch binary", "/v2/models/add_sub_nobatch/infer", body, hdr)
    int_req: dict[str, Any] = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [2, 4],
                "datatype": "INT32",
                "data": [1, 2, 3, 4, 5, 6, 7, -8],
            },
            {
                "name": "INPUT1",
                "shape": [2, 4],
                "datatype": "INT32",
                "data": [10, 20, 30, 40, 50, 60, 70, 80],
            },
        ]
    }
    post("infer INT32 JSON", "/v2/models/add_sub_int32/infer", _json_body(int_req), json_h)

    words = httpclient.InferInput("INPUT0", [1, 3], "BYTES")
    words.set_data_from_numpy(np.array([[b"hello", b"", "\u00e9t\u00e9".encode()]], dtype=object))
    body, hdr = _binary_request([words], [httpclient.InferRequestedOutput("OUTPUT0")])
    post("infer BYTES binary", "/v2/models/identity_bytes/infer", body, hdr)
    bytes_json = {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 2],
                "datatype": "BYTES",
                "data": ["hi", "\u00e9t\u00e9"],
            }
        ]
    }
    post("infer BYTES JSON", "/v2/models/identity_bytes/infer", _json_body(bytes_json), json_h)
    var = {
        "inputs": [
            {"name": "INPUT0", "shape": [2, 3], "datatype": "FP32", "data": [1.5, 2, 3, 4, 5, 6]}
        ]
    }
    post("infer variable dim", "/v2/models/identity_vardim/infer", _json_body(var), json_h)
    zero = {"inputs": [{"name": "INPUT0", "shape": [0, 3], "datatype": "FP32", "data": []}]}
    post("infer zero-size tensor", "/v2/models/identity_vardim/infer", _json_body(zero), json_h)

    bad_shape = copy.deepcopy(no_out)
    bad_shape["inputs"][0]["shape"] = [1, 15]
    bad_shape["inputs"][0]["data"] = fp[:15]
    post("error: wrong shape", infer, _json_body(bad_shape), json_h)
    bad_type = copy.deepcopy(no_out)
    bad_type["inputs"][0]["datatype"] = "FP64"
    post("error: wrong datatype", infer, _json_body(bad_type), json_h)
    unknown_in = copy.deepcopy(no_out)
    unknown_in["inputs"][1]["name"] = "INPUT9"
    post("error: unknown input", infer, _json_body(unknown_in), json_h)
    missing = copy.deepcopy(no_out)
    del missing["inputs"][1]
    post("error: missing input", infer, _json_body(missing), json_h)
    count = copy.deepcopy(no_out)
    count["inputs"][0]["data"] = fp[:10]
    post("error: element count mismatch", infer, _json_body(count), json_h)
    big = copy.deepcopy(no_out)
    for i in big["inputs"]:
        i["shape"], i["data"] = [9, 16], i["data"] * 9
    post("error: batch 9 > max_batch_size 8", infer, _json_body(big), json_h)
    unknown_out = copy.deepcopy(no_out)
    unknown_out["outputs"] = [{"name": "OUTPUT7"}]
    post("error: unknown output", infer, _json_body(unknown_out), json_h)
    post("error: broken JSON", infer, b'{"inputs": [', json_h)
    post("error: empty body", infer, b"", json_h)
    post("error: infer unknown model", "/v2/models/nope/infer", _json_body(no_out), json_h)
    body, hdr = _binary_request(_fp32_inputs(1, True))
    post(
        "error: header length past body",
        infer,
        body,
        {**hdr, "Inference-Header-Content-Length": str(len(body) + 10)},
    )
    get("error: unknown route", "/v2/nothing/here")
    get("error: wrong method (GET infer)", infer)
    ex.append(Exchange("error: wrong method (DELETE /v2)", "DELETE", "/v2"))
    get("error: non-numeric version", "/v2/models/add_sub/versions/one")

    get("stats add_sub (after the above)", "/v2/models/add_sub/stats", *_stats_norms())
    get("stats all models", "/v2/models/stats", *_stats_norms(), _sorted_stats())
    get("stats unknown model", "/v2/models/nope/stats")
    post("repository index", "/v2/repository/index", b"", None, _sorted_index())
    post(
        "repository index ready",
        "/v2/repository/index",
        _json_body({"ready": True}),
        json_h,
        _sorted_index(),
    )
    get("system shm status", "/v2/systemsharedmemory/status")
    get("system shm status, unknown region", "/v2/systemsharedmemory/region/nope/status")
    post("system shm unregister all", "/v2/systemsharedmemory/unregister", b"")
    get("cuda shm status", "/v2/cudasharedmemory/status")
    post("cuda shm unregister all", "/v2/cudasharedmemory/unregister", b"")
    post(
        "system shm register, bad key",
        "/v2/systemsharedmemory/region/r0/register",
        _json_body({"key": "/tritonlite_compare_absent", "offset": 0, "byte_size": 64}),
        json_h,
    )
    get("trace setting", "/v2/trace/setting", _mask("trace_file"))
    get("logging setting", "/v2/logging", _mask("log_file"))
    return ex


def _sorted_stats() -> tuple[str, Normalizer]:
    def norm(doc: Any) -> Any:
        if isinstance(doc, dict) and isinstance(doc.get("model_stats"), list):
            doc["model_stats"].sort(key=lambda s: (s.get("name", ""), s.get("version", "")))
        return doc

    return "model_stats order", norm


def _sorted_index() -> tuple[str, Normalizer]:
    def norm(doc: Any) -> Any:
        if isinstance(doc, list):
            doc.sort(key=lambda e: (e.get("name", ""), e.get("version", "")))
        return doc

    return "index order", norm


# -- comparison ------------------------------------------------------------------------------------
def _split_body(a: Answer) -> tuple[Any, bytes | None]:
    """(parsed JSON or text, binary tail) of an answer, decompressing a compressed body."""
    body = a.body
    enc = a.headers.get("content-encoding", "")
    try:
        if enc == "gzip":
            body = gzip.decompress(body)
        elif enc == "deflate":
            body = zlib.decompress(body)
    except (OSError, zlib.error):
        return ("<undecodable " + enc + " body>", None)
    head_len = a.headers.get("inference-header-content-length")
    tail: bytes | None = None
    if head_len is not None and head_len.isdigit():
        body, tail = body[: int(head_len)], body[int(head_len) :]
    if not body:
        return None, tail
    try:
        return json.loads(body), tail
    except ValueError:
        return body.decode("utf-8", "backslashreplace"), tail


def _diff(t: Any, lt: Any, path: str = "") -> list[str]:
    if isinstance(t, dict) and isinstance(lt, dict):
        out = []
        for k in list(t) + [k for k in lt if k not in t]:
            p = f"{path}.{k}" if path else k
            if k not in lt:
                out.append(f"{p}: only in triton ({json.dumps(t[k])[:60]})")
            elif k not in t:
                out.append(f"{p}: only in tritonlite ({json.dumps(lt[k])[:60]})")
            else:
                out += _diff(t[k], lt[k], p)
        return out
    scalar = (str, int, float, bool)
    if (
        isinstance(t, list)
        and isinstance(lt, list)
        and len(t) != len(lt)
        and all(isinstance(x, scalar) for x in t + lt)
    ):
        only_t = [x for x in t if x not in lt]
        only_l = [x for x in lt if x not in t]
        return [
            f"{path}: only in triton {json.dumps(only_t)}; only in tritonlite {json.dumps(only_l)}"
        ]
    if isinstance(t, list) and isinstance(lt, list) and len(t) == len(lt):
        return [d for i, (x, y) in enumerate(zip(t, lt)) for d in _diff(x, y, f"{path}[{i}]")]
    if t == lt and type(t) is type(lt):
        return []
    if (
        isinstance(t, (int, float))
        and isinstance(lt, (int, float))
        and not isinstance(t, bool)
        and not isinstance(lt, bool)
        and float(t) == float(lt)
    ):
        return []
    return [f"{path or 'body'}: triton {json.dumps(t)[:80]} vs tritonlite {json.dumps(lt)[:80]}"]


def compare(ex: Exchange, t: Answer, lt: Answer) -> dict[str, Any]:
    diffs: list[str] = []
    kinds: set[str] = set()
    if t.status != lt.status:
        diffs.append(f"status {t.status} vs {lt.status}")
        kinds.add("status")
    if t.reason != lt.reason and t.status == lt.status:
        diffs.append(f"reason '{t.reason}' vs '{lt.reason}'")
        kinds.add("message")
    for h in COMPARED_HEADERS:
        tv, lv = t.headers.get(h), lt.headers.get(h)
        if h == "inference-header-content-length":
            continue  # its value is the JSON length, which may differ; presence is checked below
        if tv != lv:
            diffs.append(f"header {h}: {tv!r} vs {lv!r}")
            kinds.add("header")
    if ("content-length" in t.headers) != ("content-length" in lt.headers):
        diffs.append(
            f"content-length present: {'content-length' in t.headers} vs "
            f"{'content-length' in lt.headers}"
        )
        kinds.add("header")
    if ("inference-header-content-length" in t.headers) != (
        "inference-header-content-length" in lt.headers
    ):
        diffs.append(
            "inference-header-content-length present: "
            f"{'inference-header-content-length' in t.headers} vs "
            f"{'inference-header-content-length' in lt.headers}"
        )
        kinds.add("header")
    tj, ttail = _split_body(t)
    lj, ltail = _split_body(lt)
    tj_raw, lj_raw = copy.deepcopy(tj), copy.deepcopy(lj)
    normalized = []
    for label, norm in ex.normalize:
        before = (json.dumps(tj, sort_keys=True), json.dumps(lj, sort_keys=True))
        tj, lj = norm(tj), norm(lj)
        if before != (
            json.dumps(tj, sort_keys=True),
            json.dumps(lj, sort_keys=True),
        ) and json.dumps(tj_raw, sort_keys=True) != json.dumps(lj_raw, sort_keys=True):
            normalized.append(label)
    body_diffs = _diff(tj, lj)
    if body_diffs:
        only_message = (
            isinstance(tj, dict)
            and isinstance(lj, dict)
            and set(tj) == {"error"}
            and set(lj) == {"error"}
        )
        kinds.add("message" if only_message else "body")
        diffs += body_diffs
    if ttail != ltail:
        kinds.add("binary")
        diffs.append(
            f"binary tail: {len(ttail or b'')} vs {len(ltail or b'')} bytes"
            + (
                " (same length, different bytes)"
                if ttail and ltail and len(ttail) == len(ltail)
                else ""
            )
        )
    if not kinds:
        verdict = "yes*" if normalized else "yes"
    elif kinds <= {"message"}:
        verdict = "text"
    elif kinds <= {"message", "header"}:
        verdict = "hdr"
    else:
        verdict = "NO"
    return {
        "exchange": ex.name,
        "request": {
            "method": ex.method,
            "path": ex.path,
            "headers": ex.headers,
            "body": ex.body.decode("utf-8", "backslashreplace"),
        },
        "triton": t.record(),
        "tritonlite": lt.record(),
        "verdict": verdict,
        "differences": diffs,
        "normalized": normalized,
        "raw_bodies_identical": t.body == lt.body,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    w = max(len(r["exchange"]) for r in rows)

    def status(a: dict[str, Any]) -> str:
        return f"{a['status']} {a['reason']}"[:24]

    print(f"{'exchange':<{w}} | {'triton':<24} | {'tritonlite':<24} | same? | difference")
    print("-" * (w + 80))
    for r in rows:
        d = "; ".join(r["differences"]) or (
            "after normalizing " + ", ".join(r["normalized"]) if r["normalized"] else ""
        )
        print(
            f"{r['exchange']:<{w}} | {status(r['triton']):<24} | {status(r['tritonlite']):<24} |"
            f" {r['verdict']:<5} | {d[:160]}"
        )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    print("-" * (w + 80))
    print(
        f"{len(rows)} exchanges: "
        + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        + "\n  yes* = same after normalizing the named fields; text = only the wording of the"
        "\n  error or reason phrase; hdr = headers (and wording) differ; NO = status, body, data"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--triton-dir",
        type=Path,
        default=ROOT / ".tools" / "triton",
        help="where tools/triton-reference.sh installs tritonserver",
    )
    p.add_argument("--keep", action="store_true", help="keep the generated repositories and logs")
    p.add_argument("--output", type=Path, default=RESULTS)
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="tritonlite_compare_"))
    triton_repo, lite_repo = build_repositories(work)
    triton = Triton(args.triton_dir, triton_repo)
    lite = Tritonlite(lite_repo, work / "tritonlite.log")
    try:
        try:
            lite_port = lite.start()
        except RuntimeError as exc:
            print(f"compare_triton: {exc}", file=sys.stderr)
            print(Path(lite.log_path).read_text(errors="replace")[-3000:], file=sys.stderr)
            return 2
        try:
            triton_port = triton.start()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"compare_triton: {exc}", file=sys.stderr)
            return 3
        rows = []
        for ex in exchanges():
            t, lt = send(triton_port, ex), send(lite_port, ex)
            rows.append(compare(ex, t, lt))
        server = json.loads(send(triton_port, Exchange("v2", "GET", "/v2")).body)
        print(
            f"triton: tritonserver {server.get('version')} (nvidia-pytriton wheel), Python "
            "backend; tritonlite: ONNX Runtime backend\n"
        )
        print_table(rows)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps({"triton_version": server.get("version"), "exchanges": rows}, indent=1)
        )
        print(f"\nraw comparison: {args.output}")
        return 0
    finally:
        lite.stop()
        triton.stop()
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
