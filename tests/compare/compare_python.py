"""Differential check of the Python backend: the same model.py files under the real tritonserver
and under tritonlite, driven by tritonclient over HTTP and gRPC.

Both servers serve one copy of tests/compare/python_models/ (so model paths are identical).
Each case calls both servers with the same client code and records what a client sees: output
values, datatypes and shapes; HTTP status or gRPC status code and the error text; the model
configuration and metadata JSON; for the decoupled model, the streamed responses and their
final flags. Records are compared after the normalizations named in each case (with the reason).

    .venv/bin/python tests/compare/compare_python.py [--triton-dir .tools/triton] [--keep]

Prints a table (case | protocol | same? | difference) and writes the records to
bench/results/compare_python.json. It is a report: exit status 0 whatever the differences,
non-zero only when a server fails to start.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_triton import HOST, _diff, _free_ports, _wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).resolve().parent / "python_models"
RESULTS = ROOT / "bench" / "results" / "compare_python.json"
STREAM_TIMEOUT_S = 30.0


# -- servers ---------------------------------------------------------------------------------------
@dataclass
class Endpoints:
    http: str
    grpc: str


def control_flags(repo: Path) -> list[str]:
    """Explicit model control, every model loaded but the pyc_bad_* ones (whose failed loads are
    cases: Triton exits at startup when a model fails to load)."""
    flags = ["--model-control-mode=explicit"]
    for d in sorted(repo.iterdir()):
        if d.is_dir() and not d.name.startswith("pyc_bad_"):
            flags.append(f"--load-model={d.name}")
    return flags


class Tritonlite:
    def __init__(self, repo: Path, log_path: Path) -> None:
        self.http_port, self.grpc_port, metrics = _free_ports(3)
        self.log = open(log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tritonlite",
                "--model-repository",
                str(repo),
                "--http-port",
                str(self.http_port),
                "--grpc-port",
                str(self.grpc_port),
                "--metrics-port",
                str(metrics),
                "--http-address",
                HOST,
                "--grpc-address",
                HOST,
                *control_flags(repo),
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def start(self) -> Endpoints:
        if not _wait_ready(self.http_port, self.proc, 120.0):
            raise RuntimeError(
                "tritonlite not ready:\n" + self.log_path.read_text(errors="replace")[-3000:]
            )
        return Endpoints(f"{HOST}:{self.http_port}", f"{HOST}:{self.grpc_port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Triton:
    def __init__(self, tool_dir: Path, repo: Path) -> None:
        self.tool_dir, self.repo = tool_dir, repo
        self.script = ROOT / "tools" / "triton-reference.sh"
        self.log = ""

    def start(self) -> Endpoints:
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
                *control_flags(self.repo),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if run.returncode != 0:
            raise RuntimeError(f"tritonserver failed to start:\n{run.stdout}{run.stderr}")
        self.log = run.stdout.split()[-1]
        return Endpoints(f"{HOST}:{http_port}", f"{HOST}:{grpc_port}")

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(self.script), "stop", str(self.tool_dir)], timeout=60, check=False
        )


# -- what a client sees ----------------------------------------------------------------------------
def _value(arr: np.ndarray[Any, Any]) -> Any:
    if arr.dtype == np.object_ or arr.dtype.kind == "S":
        return [
            v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else repr(v)
            for v in arr.reshape(-1)
        ]
    return arr.reshape(-1).tolist()


def _outputs(result: Any, proto: str) -> dict[str, Any]:
    resp = result.get_response()
    outs = resp["outputs"] if proto == "http" else resp.outputs
    rec = {}
    for o in outs:
        name = o["name"] if proto == "http" else o.name
        dtype = o["datatype"] if proto == "http" else o.datatype
        shape = list(o["shape"] if proto == "http" else o.shape)
        arr = result.as_numpy(name)
        rec[name] = {
            "datatype": dtype,
            "shape": shape,
            "value": None if arr is None else _value(arr),
        }
    return {"outputs": rec}


def _error(exc: InferenceServerException) -> dict[str, Any]:
    return {"error": {"status": str(exc.status()), "message": exc.message()}}


def _client(proto: str, ep: Endpoints, timeout_s: float = 20.0) -> Any:
    if proto == "http":
        return httpclient.InferenceServerClient(ep.http, network_timeout=timeout_s)
    return grpcclient.InferenceServerClient(ep.grpc)


def _mod(proto: str) -> Any:
    return httpclient if proto == "http" else grpcclient


def _input(proto: str, name: str, arr: np.ndarray[Any, Any], dtype: str) -> Any:
    i = _mod(proto).InferInput(name, list(arr.shape), dtype)
    i.set_data_from_numpy(arr)
    return i


Spec = tuple[str, np.ndarray[Any, Any], str]


def infer(
    model: str,
    inputs: list[Spec],
    outputs: list[str] | None = None,
    timeout_s: float = 20.0,
    **kw: Any,
) -> Callable[[str, Endpoints], dict[str, Any]]:
    def run(proto: str, ep: Endpoints) -> dict[str, Any]:
        c = _client(proto, ep, timeout_s)
        if proto == "grpc":
            kw["client_timeout"] = timeout_s
        ins = [_input(proto, n, a, d) for n, a, d in inputs]
        outs = None if outputs is None else [_mod(proto).InferRequestedOutput(o) for o in outputs]
        try:
            return _outputs(c.infer(model, ins, outputs=outs, **kw), proto)
        except InferenceServerException as exc:
            return _error(exc)
        finally:
            c.close()

    return run


def stream(
    model: str, inputs: list[Spec], empty_final: bool = True
) -> Callable[[str, Endpoints], dict[str, Any]]:
    """gRPC ModelStreamInfer: every response (outputs, error, final flag) until the final one."""

    def run(proto: str, ep: Endpoints) -> dict[str, Any]:
        got: queue.Queue[tuple[Any, Any]] = queue.Queue()
        c = grpcclient.InferenceServerClient(ep.grpc)
        c.start_stream(callback=lambda result, error: got.put((result, error)))
        rec: list[dict[str, Any]] = []
        try:
            c.async_stream_infer(
                model,
                [_input("grpc", n, a, d) for n, a, d in inputs],
                request_id="s1",
                enable_empty_final_response=empty_final,
            )
            while True:
                try:
                    result, error = got.get(timeout=STREAM_TIMEOUT_S if empty_final else 3.0)
                except queue.Empty:
                    rec.append({"timeout": True})
                    break
                if error is not None:
                    rec.append(_error(error))
                    if not empty_final:
                        continue
                    break
                resp = result.get_response()
                final = (
                    resp.parameters["triton_final_response"].bool_param
                    if "triton_final_response" in resp.parameters
                    else None
                )
                entry = _outputs(result, "grpc")
                entry["final"] = final
                entry["id"] = resp.id
                rec.append(entry)
                if final:
                    break
        finally:
            c.stop_stream()
            c.close()
        return {"responses": rec}

    return run


def config(model: str) -> Callable[[str, Endpoints], dict[str, Any]]:
    def run(proto: str, ep: Endpoints) -> dict[str, Any]:
        c = _client(proto, ep)
        try:
            cfg = (
                c.get_model_config(model)
                if proto == "http"
                else c.get_model_config(model, as_json=True)["config"]
            )
            return {"config": cfg}
        except InferenceServerException as exc:
            return _error(exc)
        finally:
            c.close()

    return run


def metadata(model: str) -> Callable[[str, Endpoints], dict[str, Any]]:
    def run(proto: str, ep: Endpoints) -> dict[str, Any]:
        c = _client(proto, ep)
        try:
            md = (
                c.get_model_metadata(model)
                if proto == "http"
                else c.get_model_metadata(model, as_json=True)
            )
            return {"metadata": md}
        except InferenceServerException as exc:
            return _error(exc)
        finally:
            c.close()

    return run


def load(model: str) -> Callable[[str, Endpoints], dict[str, Any]]:
    """Load a model that fails, then read its repository index entry."""

    def run(proto: str, ep: Endpoints) -> dict[str, Any]:
        c = _client(proto, ep, 60.0)
        rec: dict[str, Any] = {}
        try:
            c.load_model(model)
            rec["load"] = "ok"
        except InferenceServerException as exc:
            rec["load"] = _error(exc)["error"]
        try:
            index = (
                c.get_model_repository_index()
                if proto == "http"
                else c.get_model_repository_index(as_json=True).get("models", [])
            )
            rec["index"] = [e for e in index if e.get("name") == model]
        finally:
            c.close()
        return rec

    return run


def stats(model: str) -> Callable[[str, Endpoints], dict[str, Any]]:
    """Counts of the model's statistics; durations only as zero or not (timings differ)."""

    def run(proto: str, ep: Endpoints) -> dict[str, Any]:
        c = _client(proto, ep)
        try:
            doc = (
                c.get_inference_statistics(model)
                if proto == "http"
                else c.get_inference_statistics(model, as_json=True)
            )
        except InferenceServerException as exc:
            return _error(exc)
        finally:
            c.close()
        for s in doc.get("model_stats", []):
            s.pop("last_inference", None)
            for part in s.get("inference_stats", {}).values():
                if isinstance(part, dict) and "ns" in part:
                    part["ns"] = "<nonzero>" if int(part["ns"]) else 0
            for b in s.get("batch_stats", []):
                for part in b.values():
                    if isinstance(part, dict) and "ns" in part:
                        part["ns"] = "<nonzero>" if int(part["ns"]) else 0
        return {"stats": doc}

    return run


def raw_http(
    method: str, path: str, body: bytes = b""
) -> Callable[[str, Endpoints], dict[str, Any]]:
    def run(proto: str, ep: Endpoints) -> dict[str, Any]:
        host, port = ep.http.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        c.request(
            method,
            path,
            body=body or None,
            headers={"Content-Type": "application/json"} if body else {},
        )
        r = c.getresponse()
        text = r.read().decode("utf-8", "backslashreplace")
        c.close()
        try:
            doc: Any = json.loads(text)
        except ValueError:
            doc = text
        return {"status": r.status, "body": doc}

    return run


# -- normalizations --------------------------------------------------------------------------------
Normalizer = Callable[[Any], Any]


def _json_outputs(*names: str) -> tuple[str, Normalizer]:
    """Parse JSON-string outputs so differences are reported field by field."""

    def norm(rec: Any) -> Any:
        for n in names:
            out = rec.get("outputs", {}).get(n)
            if out and out["value"]:
                out["value"] = [json.loads(v) for v in out["value"]]
                for v in out["value"]:
                    if isinstance(v, dict) and isinstance(v.get("model_config"), str):
                        v["model_config"] = json.loads(v["model_config"])
        return rec

    return "JSON outputs parsed (not a difference)", norm


def _unanswered() -> tuple[str, Normalizer]:
    """Triton 2.51 never answers a request whose execute() slot is None and whose response sender
    sent nothing (the client times out); tritonlite fails it with INTERNAL instead of holding it.
    Both outcomes become one marker: a hang is not behaviour a client can rely on."""

    def norm(rec: Any) -> Any:
        err = rec.get("error", {})
        if (
            "timed out" in rec.get("client_exception", "")
            or err.get("status") == "StatusCode.DEADLINE_EXCEEDED"
            or "none was sent with its response sender" in err.get("message", "")
        ):
            return {"unanswered": True}
        return rec

    return "request left unanswered (Triton: client timeout; tritonlite: INTERNAL)", norm


def _twice() -> tuple[str, Normalizer]:
    """A model returning one output name twice: Triton's gRPC answer repeats it, which
    tritonclient cannot decode (a reshape error); its HTTP answer reads as the last one, which is
    what tritonlite sends on both. Copying an answer no client can read is not a goal."""

    def norm(rec: Any) -> Any:
        if "cannot reshape" in rec.get("client_exception", ""):
            return {"outputs": "<duplicate output>"}
        if rec.get("outputs", {}).get("OUT", {}).get("value") == [3.0, 5.0, 7.0]:
            return {"outputs": "<duplicate output>"}
        return rec

    return "duplicate output (Triton gRPC: undecodable)", norm


def _paths() -> tuple[str, Normalizer]:
    """Load errors may quote the model file's path; both servers use the same one, but tracebacks
    of the two Python backends run through different internal files, which are cut."""

    def cut(text: str) -> str:
        return text.split("\n\nAt:")[0]

    def norm(rec: Any) -> Any:
        if isinstance(rec.get("load"), dict):
            rec["load"]["message"] = cut(rec["load"]["message"])
        for e in rec.get("index", []):
            if "reason" in e:
                e["reason"] = cut(e["reason"])
        return rec

    return "traceback after 'At:' cut", norm


@dataclass
class Case:
    name: str
    run: Callable[[str, Endpoints], dict[str, Any]]
    protocols: tuple[str, ...] = ("http", "grpc")
    normalize: list[tuple[str, Normalizer]] = field(default_factory=list)


def f32(*v: float) -> np.ndarray[Any, Any]:
    return np.array(v, dtype=np.float32)


def i32(*v: int) -> np.ndarray[Any, Any]:
    return np.array(v, dtype=np.int32)


def obj(*rows: list[Any]) -> np.ndarray[Any, Any]:
    return np.array(rows, dtype=object)


def cases() -> list[Case]:
    cs: list[Case] = []
    models = (
        "pyc_autocomplete",
        "pyc_introspect",
        "pyc_bytes",
        "pyc_errors",
        "pyc_repeat",
        "pyc_adder",
        "pyc_bls",
    )
    for m in models:
        cs.append(Case(f"config {m}", config(m)))
        cs.append(Case(f"metadata {m}", metadata(m)))
    cs.append(Case("config unknown model", config("nope")))
    cs.append(Case("metadata unknown model", metadata("nope")))

    ac = [("IN", np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32), "FP32")]
    cs.append(Case("autocomplete: infer, optional input absent", infer("pyc_autocomplete", ac)))
    cs.append(
        Case(
            "autocomplete: infer, optional input given",
            infer(
                "pyc_autocomplete", ac + [("OPT", np.array([[7], [8]], dtype=np.int32), "INT32")]
            ),
        )
    )
    cs.append(
        Case(
            "autocomplete: batch 5 > max_batch_size 4",
            infer("pyc_autocomplete", [("IN", np.ones((5, 3), dtype=np.float32), "FP32")]),
        )
    )

    half = [("IN", np.array([1.5, -2, 3.25], dtype=np.float16), "FP16")]
    intro = _json_outputs("ARGS", "UTILS", "REQUEST")
    cs.append(
        Case(
            "introspect: initialize args, utils, request",
            infer("pyc_introspect", half, request_id="r-17"),
            normalize=[intro],
        )
    )
    cs.append(
        Case(
            "introspect: parameters, requested outputs",
            infer(
                "pyc_introspect",
                half,
                ["REQUEST", "HALF"],
                request_id="r-18",
                parameters={"s": "text", "i": 7, "b": True, "neg": -3},
            ),
            normalize=[intro],
        )
    )
    cs.append(
        Case(
            "introspect: sequence id and flags",
            infer("pyc_introspect", half, ["REQUEST"], sequence_id=42, sequence_start=True),
            normalize=[intro],
        )
    )

    words = obj([b"hello", b"", "\u00e9t\u00e9".encode(), b"\x00\xffbin"])
    cs.append(
        Case(
            "bytes: object array in, bytes/str/np.bytes_ out",
            infer("pyc_bytes", [("IN", words, "BYTES")]),
        )
    )
    cs.append(
        Case(
            "bytes: str objects sent",
            infer("pyc_bytes", [("IN", obj(["abc", "d"], ["", "z"]), "BYTES")]),
        )
    )
    cs.append(
        Case(
            "bytes: zero-length dim",
            infer("pyc_bytes", [("IN", np.empty((1, 0), dtype=object), "BYTES")]),
        )
    )

    for mode, what in (
        (0, "success"),
        (1, "TritonError, no code"),
        (2, "TritonError INVALID_ARG"),
        (3, "TritonError UNAVAILABLE"),
        (4, "TritonError NOT_FOUND"),
        (5, "exception raised in execute"),
        (6, "no responses returned"),
        (7, "TritonModelException raised"),
        (8, "[None] returned"),
        (9, "not a list returned"),
    ):
        # [None] leaves the request unanswered in Triton: the client's timeout ends the call.
        cs.append(
            Case(
                f"errors: mode {mode} ({what})",
                infer(
                    "pyc_errors",
                    [("MODE", i32(mode), "INT32")],
                    timeout_s=5.0 if mode == 8 else 20.0,
                ),
                normalize=[_unanswered()] if mode == 8 else [],
            )
        )
    cs.append(
        Case("errors: success after the failures", infer("pyc_errors", [("MODE", i32(0), "INT32")]))
    )

    cs.append(
        Case(
            "decoupled: 3 responses + empty final",
            stream("pyc_repeat", [("N", i32(3), "INT32")]),
            protocols=("grpc",),
        )
    )
    cs.append(
        Case(
            "decoupled: 0 responses",
            stream("pyc_repeat", [("N", i32(0), "INT32")]),
            protocols=("grpc",),
        )
    )
    cs.append(
        Case(
            "decoupled: 2 responses, no empty final asked",
            stream("pyc_repeat", [("N", i32(2), "INT32")], empty_final=False),
            protocols=("grpc",),
        )
    )
    cs.append(
        Case(
            "decoupled: error response with final flag",
            stream("pyc_repeat", [("N", i32(-1), "INT32")]),
            protocols=("grpc",),
        )
    )
    cs.append(Case("decoupled: /infer refused", infer("pyc_repeat", [("N", i32(1), "INT32")])))
    cs.append(
        Case(
            "non-decoupled model over the stream",
            stream("pyc_adder", [("X", f32(1, 2), "FP32")]),
            protocols=("grpc",),
        )
    )

    x = ("X", f32(1, 2, 3), "FP32")
    cs.append(
        Case(
            "bls: exec pyc_adder",
            infer("pyc_bls", [x, ("TARGET", obj([b"pyc_adder"])[0], "BYTES")]),
            normalize=[_json_outputs("INFO")],
        )
    )
    cs.append(
        Case(
            "bls: exec missing model (error returned)",
            infer("pyc_bls", [x, ("TARGET", obj([b"missing_model"])[0], "BYTES")]),
            normalize=[_json_outputs("INFO")],
        )
    )
    cs.append(
        Case(
            "bls: exec missing model (raised)",
            infer("pyc_bls", [x, ("TARGET", obj([b"raise:missing_model"])[0], "BYTES")]),
        )
    )
    cs.append(
        Case(
            "bls: exec decoupled model without decoupled=True",
            infer("pyc_bls", [x, ("TARGET", obj([b"pyc_repeat"])[0], "BYTES")]),
            normalize=[_json_outputs("INFO")],
        )
    )

    for mode, what in (
        (0, "FP64 for an FP32 output"),
        (1, "numpy unicode array for BYTES"),
        (2, "an output not in the config"),
        (3, "no outputs"),
        (4, "2-D for a 1-D output"),
        (5, "non-contiguous array"),
        (6, "bool output"),
        (7, "the same output twice"),
        (8, "numpy S array for BYTES"),
        (9, "0-d array"),
        (10, "outputs and an error"),
        (11, "all outputs"),
    ):
        cs.append(
            Case(
                f"outputs: mode {mode} ({what})",
                infer("pyc_outputs", [("MODE", i32(mode), "INT32")]),
                normalize=[_twice()] if mode == 7 else [],
            )
        )
    cs.append(
        Case(
            "outputs: requested output the model did not produce",
            infer("pyc_outputs", [("MODE", i32(3), "INT32")], ["OUT"]),
        )
    )
    cs.append(
        Case(
            "outputs: requested one of three",
            infer("pyc_outputs", [("MODE", i32(11), "INT32")], ["FLAG"]),
        )
    )

    report = _json_outputs("REPORT")
    for case in (
        "decoupled",
        "decoupled_error",
        "coded_error",
        "raised_in_callee",
        "wrong_dtype",
        "missing_input",
        "unknown_output",
        "no_outputs_requested",
        "parameters",
        "version",
        "batched_callee",
    ):
        cs.append(
            Case(
                f"bls more: {case}",
                infer("pyc_bls_more", [("CASE", obj([case.encode()])[0], "BYTES")]),
                normalize=[report],
            )
        )

    for bad in ("pyc_bad_autocomplete", "pyc_bad_init", "pyc_bad_batch", "pyc_bad_conflict"):
        cs.append(Case(f"load failure: {bad}", load(bad), normalize=[_paths()]))
    cs.append(
        Case(
            "infer on a model that failed to load", infer("pyc_bad_init", [("IN", f32(1), "FP32")])
        )
    )

    cs.append(
        Case(
            "raw: POST infer decoupled (JSON)",
            raw_http(
                "POST",
                "/v2/models/pyc_repeat/infer",
                json.dumps(
                    {"inputs": [{"name": "N", "shape": [1], "datatype": "INT32", "data": [1]}]}
                ).encode(),
            ),
            protocols=("http",),
        )
    )
    cs.append(
        Case(
            "raw: POST infer error mode 2 (JSON)",
            raw_http(
                "POST",
                "/v2/models/pyc_errors/infer",
                json.dumps(
                    {"inputs": [{"name": "MODE", "shape": [1], "datatype": "INT32", "data": [2]}]}
                ).encode(),
            ),
            protocols=("http",),
        )
    )
    cs.append(
        Case(
            "raw: POST infer exception (JSON)",
            raw_http(
                "POST",
                "/v2/models/pyc_errors/infer",
                json.dumps(
                    {"inputs": [{"name": "MODE", "shape": [1], "datatype": "INT32", "data": [5]}]}
                ).encode(),
            ),
            protocols=("http",),
        )
    )
    cs.append(Case("stats pyc_errors (after the above)", stats("pyc_errors")))
    cs.append(Case("stats pyc_bls (after the above)", stats("pyc_bls")))
    return cs


# -- comparison ------------------------------------------------------------------------------------
def compare(case: Case, proto: str, t: dict[str, Any], lt: dict[str, Any]) -> dict[str, Any]:
    tn, ln = copy.deepcopy(t), copy.deepcopy(lt)
    raw_same = not _diff(t, lt)
    applied = []
    for label, norm in case.normalize:
        tn, ln = norm(tn), norm(ln)
        applied.append(label)
    diffs = _diff(tn, ln)
    if not diffs and not raw_same:
        return {
            "case": case.name,
            "protocol": proto,
            "verdict": "yes*",
            "differences": [],
            "normalized": applied,
            "triton": t,
            "tritonlite": lt,
        }
    # an error text (a client's error message, a load reason, a BLS error in a report)
    only_message = bool(diffs) and all(
        any(k in d.split(":")[0] for k in (".message", ".error", ".reason")) for d in diffs
    )
    verdict = "yes" if not diffs else "text" if only_message else "NO"
    return {
        "case": case.name,
        "protocol": proto,
        "verdict": verdict,
        "differences": diffs,
        "normalized": applied,
        "triton": t,
        "tritonlite": lt,
    }


def _run_safely(
    fn: Callable[[str, Endpoints], dict[str, Any]], proto: str, ep: Endpoints
) -> dict[str, Any]:
    try:
        return fn(proto, ep)
    except Exception as exc:  # a client-side failure is part of what is compared
        return {"client_exception": f"{type(exc).__name__}: {exc}"[:300]}


def print_table(rows: list[dict[str, Any]]) -> None:
    w = max(len(r["case"]) for r in rows)
    print(f"{'case':<{w}} | proto | same? | difference")
    print("-" * (w + 60))
    for r in rows:
        d = "; ".join(r["differences"]) or (
            "after normalizing: " + ", ".join(r["normalized"]) if r["verdict"] == "yes*" else ""
        )
        print(f"{r['case']:<{w}} | {r['protocol']:<5} | {r['verdict']:<5} | {d[:200]}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    print("-" * (w + 60))
    print(
        f"{len(rows)} comparisons: "
        + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        + "\n  yes* = same after the named normalization; text = only the wording of an error"
        "\n  message differs; NO = anything else"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument(
        "--triton-dir",
        type=Path,
        default=ROOT / ".tools" / "triton",
        help="where tools/triton-reference.sh installs tritonserver",
    )
    p.add_argument("--keep", action="store_true", help="keep the repository and logs")
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("-k", dest="only", default="", help="run only cases whose name contains this")
    args = p.parse_args(argv)

    # SIGTERM unwinds through the finally below, so neither server is left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="tritonlite_compare_python_"))
    repo = work / "models"
    shutil.copytree(MODELS, repo, ignore=shutil.ignore_patterns("__pycache__"))
    triton = Triton(args.triton_dir, repo)
    lite = Tritonlite(repo, work / "tritonlite.log")
    try:
        try:
            lite_ep = lite.start()
            triton_ep = triton.start()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"compare_python: {exc}", file=sys.stderr)
            return 2
        rows = []
        for case in cases():
            if args.only and args.only not in case.name:
                continue
            for proto in case.protocols:
                t = _run_safely(case.run, proto, triton_ep)
                lt = _run_safely(case.run, proto, lite_ep)
                rows.append(compare(case, proto, t, lt))
        c = httpclient.InferenceServerClient(triton_ep.http)
        version = c.get_server_metadata().get("version")
        c.close()
        print(f"triton: tritonserver {version} (nvidia-pytriton wheel); both serve {repo}\n")
        print_table(rows)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(
            json.dumps({"triton_version": version, "comparisons": rows}, indent=1, default=str)
        )
        print(f"\nrecords: {args.output}")
        return 0
    finally:
        lite.stop()
        triton.stop()
        if args.keep:
            print(f"kept {work} (triton log {triton.log})", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
