"""What the fault, fuzz and soak suites share: small repositories, raw clients, metric reads.

* ``write_repo(path)``: ``add_sub`` (FP32[4], batching to 8, dynamic batcher), ``add_sub_nobatch``
  and the python models ``raising`` (every execute raises), ``hanging`` (execute sleeps
  ``HANG_S``) and ``slow`` (execute sleeps 0.2 s, OUT = 2 * IN);
* ``Http``: one keep-alive HTTP/1.1 connection (http.client) that reconnects after a close and
  returns ``(status, body)``; ``infer_body`` and ``check_add_sub`` build and check infers;
* ``grpc_unary``: a raw unary call (bytes in, ``(status, message, bytes)`` out) on a plain
  grpc channel, so mutated protobufs reach the server unparsed;
* ``scrape`` / ``rejected``: samples read from ``/metrics``;
* ``start_raw``: conftest's ``start_server`` for servers that may write bytes that are not
  UTF-8 to stderr (grpc's C core logs what a hostile client sent), or that need a
  ``preexec_fn`` (resource limits).
"""

from __future__ import annotations

import http.client
import json
import sys
import textwrap
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from conftest import Server, start_server
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.onnx_graphs import write_add_sub  # noqa: E402

SERVICE = "/inference.GRPCInferenceService/"
HANG_S = 30.0

PY_CONFIG = """
backend: "python"
max_batch_size: 8
input {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }}
output {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
{extra}
"""

PY_MODEL = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        {body}
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x * 2)]))
        return out
"""


def write_python(repo: Path, name: str, body: str, extra: str = "") -> None:
    """A python model ``name``: IN FP32[4] -> OUT = 2 * IN after running ``body`` in execute."""
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "1" / "model.py").write_text(textwrap.dedent(PY_MODEL).format(body=body))
    (repo / name / "config.pbtxt").write_text(PY_CONFIG.format(extra=extra))


GATED_BODY = """import os, sys
        print(f"gated: execute started {{len(requests)}}", file=sys.stderr, flush=True)
        while not os.path.exists({gate!r}):
            time.sleep(0.01)"""


def write_gated(repo: Path, name: str, gate: Path, extra: str = "dynamic_batching { }") -> None:
    """A python model that logs ``gated: execute started N`` (N requests in the batch) and then
    waits until the file ``gate`` exists before it answers OUT = 2 * IN."""
    write_python(repo, name, GATED_BODY.format(gate=str(gate)), extra)


def write_repo(repo: Path, python: bool = True) -> Path:
    """The suites' repository (see the module docstring)."""
    write_add_sub(repo, "add_sub", 8, dims=4, extra_config="dynamic_batching { }")
    write_add_sub(repo, "add_sub_nobatch", 0, dims=4)
    if python:
        write_python(repo, "raising", "raise RuntimeError('model.py failed on purpose')")
        write_python(repo, "hanging", f"time.sleep({HANG_S})")
        write_python(repo, "slow", "time.sleep(0.2)", "dynamic_batching { }")
    return repo


def infer_body(
    a: list[float], b: list[float], model_inputs: tuple[str, str] = ("INPUT0", "INPUT1")
) -> bytes:
    """A JSON infer body for add_sub (batch of one)."""
    return json.dumps(
        {
            "inputs": [
                {"name": model_inputs[0], "datatype": "FP32", "shape": [1, 4], "data": a},
                {"name": model_inputs[1], "datatype": "FP32", "shape": [1, 4], "data": b},
            ]
        }
    ).encode()


def check_add_sub(status: int, body: bytes, a: list[float], b: list[float]) -> None:
    """Assert an add_sub answer: 200 and OUTPUT0 = a + b, OUTPUT1 = a - b."""
    assert status == 200, (status, body[:300])
    outs = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    np.testing.assert_allclose(outs["OUTPUT0"], np.add(a, b), rtol=1e-6)
    np.testing.assert_allclose(outs["OUTPUT1"], np.subtract(a, b), rtol=1e-6)


class Http:
    """One keep-alive HTTP/1.1 connection; reconnects when the server closed it.

    A server may close an idle keep-alive connection at any time (RFC 9112 9.3), without having
    said so in its last response (aiohttp does after some error answers): a request whose
    sending fails on such a reused connection never reached the server, and is sent once more
    on a new one, as pooled clients do. A failure after the request was sent is not retried."""

    def __init__(self, url: str, timeout: float = 20.0) -> None:
        host, port = url.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        self.reused = False  # the open connection has answered a request before

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        try:
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                if not self.reused:
                    raise
                self.close()  # closed by the server while idle: never sent, so sent again
                self.conn.request(method, path, body=body, headers=hdrs)
            resp = self.conn.getresponse()
            data = resp.read()
        except (ConnectionError, http.client.HTTPException, OSError):
            self.close()
            raise
        if resp.will_close:
            self.close()
        else:
            self.reused = True
        return resp.status, data

    def close(self) -> None:
        """Close the socket; the next request opens a new one (http.client's auto_open)."""
        self.conn.close()
        self.reused = False

    def __enter__(self) -> Http:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def grpc_unary(
    channel: grpc.Channel, method: str, payload: bytes, timeout: float = 20.0
) -> tuple[grpc.StatusCode, str, bytes]:
    """Call ``method`` of the inference service with raw ``payload``; (status, message, reply)."""
    fn = channel.unary_unary(SERVICE + method)
    try:
        reply = fn(payload, timeout=timeout)
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", b""
    return grpc.StatusCode.OK, "", reply


def scrape(metrics_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics`` as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def rejected(samples: dict[Any, float], protocol: str) -> dict[str, int]:
    """``tritonlite_rejected_requests_total`` of ``protocol`` by reason (non-zero ones)."""
    out = {}
    for (name, labels), v in samples.items():
        lbl = dict(labels)
        if name == "tritonlite_rejected_requests_total" and lbl["protocol"] == protocol and v:
            out[lbl["reason"]] = int(v)
    return out


def start_raw(
    repo: Path,
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> Server:
    """conftest's ``start_server`` on separate free ports and the front end ``args`` name (not
    the environment's), with ``preexec_fn`` run in the child. The caller stops the server."""
    return start_server(repo, *args, env=env, preexec_fn=preexec_fn, transport=False)
