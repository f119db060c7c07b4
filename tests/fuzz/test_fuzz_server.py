"""Seeded, bounded fuzz against real servers, on both front ends (issue 18).

What a client can send, mutated from valid input, through the real sockets:

* ``json``: KServe v2 JSON infer bodies for add_sub, mutated at the JSON level and the byte
  level (the generators of tests/frontends/test_fuzz_codecs.py);
* ``binary``: binary-tensor bodies (``Inference-Header-Content-Length``), header and tail mutated;
* ``raw_http``: raw HTTP/1.1 byte streams, well-formed, malformed and mutated (the generators of
  tests/frontends/wire/test_http1_fuzz.py), then EOF;
* ``grpc``: ModelInferRequest messages mutated field by field and byte by byte, sent through a
  plain grpc channel (the server parses them);
* ``h2``: HTTP/2 frame sequences mutated from valid ModelInfer conversations (the mutator of
  tests/frontends/wire/test_h2_fuzz.py) on a raw socket to the gRPC port;
* ``repo``: repository load/unload with hostile model names and override files (explicit model
  control; the server's temporary directory is under the test's own).

Checked for every case: an answer within ``CASE_TIMEOUT_S`` (no hang), no 5xx / INTERNAL for what
a client sent; after each suite: the server process is alive and still answers a correct
inference; for ``repo``: nothing outside the server's temporary directory is created or removed.

Size: ``FUZZ_CASES`` (``make fuzz``: 100,000 in all, split by ``WEIGHTS``); unset, the small
size of ``make test`` (a few seconds a suite). ``FUZZ_SEED`` picks the seed; a failure prints
the seed, the case number and the input.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import socket
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import hpack
import numpy as np
import pytest
from conftest import Server

sys.path[:0] = [
    str(Path(__file__).resolve().parents[1] / p) for p in ("fault", "frontends", "frontends/wire")
]

from faultkit import (  # noqa: E402
    Http,
    check_add_sub,
    grpc_unary,
    infer_body,
    start_raw,
    write_repo,
)
from test_fuzz_codecs import HOSTILE, _mutate_bytes, _mutate_grpc, _mutate_json  # noqa: E402
from test_h2_fuzz import _mutate as _mutate_frames  # noqa: E402
from test_h2_peer import (  # noqa: E402
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    WINDOW_UPDATE,
    frame,
    grpc_message,
    settings,
)
from test_http1_fuzz import malformed, mutate, valid_pipeline  # noqa: E402
from tritonclient.grpc import service_pb2  # noqa: E402

FUZZ_CASES = int(os.environ.get("FUZZ_CASES", "0"))
SEED = int(os.environ.get("FUZZ_SEED", "20261204"))
CASE_TIMEOUT_S = 15.0
WEIGHTS = {"json": 0.3, "binary": 0.15, "raw_http": 0.15, "grpc": 0.25, "h2": 0.1, "repo": 0.05}
SMALL = {"json": 300, "binary": 150, "raw_http": 150, "grpc": 300, "h2": 80, "repo": 40}
SMALL_BUDGET_S = 8.0  # per suite and front end in make test; cases past it are skipped


def _plan(kind: str) -> tuple[int, float]:
    """(cases, seconds) for one suite on one front end."""
    if FUZZ_CASES <= 0:
        return SMALL[kind], SMALL_BUDGET_S
    n = max(1, int(FUZZ_CASES * WEIGHTS[kind] / 2))  # two front ends
    return n, float(os.environ.get("FUZZ_SECONDS", "3600"))


pytestmark = pytest.mark.timeout(
    120 if FUZZ_CASES <= 0 else int(os.environ.get("FUZZ_SECONDS", "3600")) + 300
)


class Findings:
    """Cases that broke a rule; the test fails listing the first few with seed and input."""

    def __init__(self, kind: str, frontend: str) -> None:
        self.kind, self.frontend = kind, frontend
        self.items: list[str] = []
        self.cases = 0

    def add(self, case: int, what: str, data: Any) -> None:
        self.items.append(f"case {case}: {what}: {repr(data)[:400]}")

    def check(self) -> None:
        head = f"{self.kind} on {self.frontend} (seed {SEED}, {self.cases} cases)"
        assert not self.items, f"{head}: {len(self.items)} findings, the first 8:\n" + "\n".join(
            self.items[:8]
        )
        print(f"fuzz {head}: 0 findings")


def _cases(kind: str, frontend: str) -> Iterator[tuple[int, random.Random]]:
    n, budget = _plan(kind)
    deadline = time.monotonic() + budget
    rng = random.Random(f"{SEED}/{kind}/{frontend}")
    for case in range(n):
        if time.monotonic() > deadline:
            return
        yield case, random.Random(rng.getrandbits(64))


@pytest.fixture(scope="module", params=["aio", "native"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Server]]:
    repo = write_repo(tmp_path_factory.mktemp("fuzz_repo"), python=False)
    # (start_raw: grpc's C core logs bytes that are not UTF-8 from hostile frames)
    s = start_raw(
        repo,
        "--frontend",
        request.param,
        "--http-max-input-size",
        "1048576",
        "--allow-metrics=false",
    )
    yield request.param, s
    s.stop()


A, B = [1.0, 2.0, 3.0, 4.0], [0.25, 0.5, 0.75, 1.0]
# what the server logs when grpc.aio's server stops by itself (its known limit, README)
AIO_GRPC_STOPPED = "the gRPC front end (grpc.aio) stopped: UnicodeDecodeError"


def _still_serves(server: Server) -> None:
    assert server.proc.poll() is None, "the server exited:\n" + server.output()[-3000:]
    with Http(server.http_url) as client:
        check_add_sub(*client.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B)
    with grpc.insecure_channel(server.grpc_url) as channel:
        payload = _grpc_add_sub().SerializeToString()
        code, message, reply = grpc_unary(channel, "ModelInfer", payload)
    assert code == grpc.StatusCode.OK, message
    out = service_pb2.ModelInferResponse.FromString(reply)
    got = np.frombuffer(out.raw_output_contents[0], np.float32)
    np.testing.assert_allclose(got, np.add(A, B))


# -- HTTP bodies ---------------------------------------------------------------------------------
def _json_bases() -> list[dict[str, Any]]:
    two = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": A},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": B},
        ]
    }
    return [
        two,
        {
            **two,
            "id": "r1",
            "outputs": [
                {"name": "OUTPUT0"},
                {"name": "OUTPUT1", "parameters": {"binary_data": True}},
            ],
        },
        {**two, "parameters": {"priority": 1, "timeout": 100000, "binary_data_output": True}},
        {
            "inputs": [
                {"name": "INPUT0", "datatype": "FP32", "shape": [2, 4], "data": A + B},
                {"name": "INPUT1", "datatype": "FP32", "shape": [2, 4], "data": B + A},
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2}}],
        },
    ]


_MODEL_PATHS = [
    "/v2/models/add_sub/infer",
    "/v2/models/add_sub/versions/1/infer",
    "/v2/models/add_sub_nobatch/infer",
]


def _post_case(
    findings: Findings,
    client: Http,
    case: int,
    path: str,
    body: bytes,
    headers: dict[str, str] | None = None,
) -> None:
    findings.cases += 1
    try:
        status, text = client.request("POST", path, body, headers)
    except (OSError, Exception) as exc:  # a reset or a timeout: the server dropped a request
        findings.add(case, f"no answer ({type(exc).__name__}: {exc})", (path, headers, body))
        return
    if status >= 500:
        findings.add(case, f"{status} {text[:200]!r}", (path, headers, body))


def test_http_json_bodies(served: tuple[str, Server]) -> None:
    frontend, server = served
    findings = Findings("json", frontend)
    bases = _json_bases()
    with Http(server.http_url, timeout=CASE_TIMEOUT_S) as client:
        for case, rng in _cases("json", frontend):
            doc = json.loads(json.dumps(rng.choice(bases)))
            if rng.random() < 0.7:
                body = json.dumps(_mutate_json(rng, doc)).encode()
            else:
                body = _mutate_bytes(rng, json.dumps(doc).encode())
            _post_case(findings, client, case, rng.choice(_MODEL_PATHS), body)
    findings.check()
    _still_serves(server)


def _binary_body(rng: random.Random) -> tuple[bytes, dict[str, str]]:
    a = np.asarray(A, np.float32).tobytes()
    b = np.asarray(B, np.float32).tobytes()
    doc: Any = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": "FP32",
                "shape": [1, 4],
                "parameters": {"binary_data_size": 16},
            },
            {
                "name": "INPUT1",
                "datatype": "FP32",
                "shape": [1, 4],
                "parameters": {"binary_data_size": 16},
            },
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
    }
    if rng.random() < 0.6:
        doc = _mutate_json(rng, doc)
    head = json.dumps(doc).encode()
    tail = a + b
    roll = rng.random()
    if roll < 0.3:
        tail = _mutate_bytes(rng, tail)
    elif roll < 0.4:
        head = _mutate_bytes(rng, head)
    n = len(head)
    length = rng.choice([n, n, n, 0, n - 1, n + 1, n + len(tail) + 5, -1, 2**63, "x", ""])
    return head + tail, {"Inference-Header-Content-Length": str(length)}


def test_http_binary_bodies(served: tuple[str, Server]) -> None:
    frontend, server = served
    findings = Findings("binary", frontend)
    with Http(server.http_url, timeout=CASE_TIMEOUT_S) as client:
        for case, rng in _cases("binary", frontend):
            body, headers = _binary_body(rng)
            _post_case(findings, client, case, rng.choice(_MODEL_PATHS), body, headers)
    findings.check()
    _still_serves(server)


# -- raw HTTP/1.1 ------------------------------------------------------------------------------
_STATUS = re.compile(rb"(?:^|\r\n)HTTP/1\.[01] (\d{3}) ")


def _raw_exchange(url: str, data: bytes) -> bytes:
    """Send ``data``, half-close, read until the server closes (or CASE_TIMEOUT_S)."""
    host, port = url.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=CASE_TIMEOUT_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the server closed first (it refused early): read what it said
            pass
        out = bytearray()
        deadline = time.monotonic() + CASE_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                return bytes(out)
            out += chunk
    raise TimeoutError(f"no close within {CASE_TIMEOUT_S}s; got {bytes(out[:200])!r}")


def _raw_request(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.3:
        data = valid_pipeline(rng)[0]
    elif roll < 0.6:
        data = malformed(rng)
    else:
        data = mutate(rng, valid_pipeline(rng)[0])
    # aim some at the model's route, so bodies reach the handlers
    if rng.random() < 0.5:
        data = data.replace(b"/v2/models/add_sub/infer", rng.choice(_MODEL_PATHS).encode())
    return data


def test_raw_http_streams(served: tuple[str, Server]) -> None:
    frontend, server = served
    findings = Findings("raw_http", frontend)
    for case, rng in _cases("raw_http", frontend):
        data = _raw_request(rng)
        findings.cases += 1
        try:
            out = _raw_exchange(server.http_url, data)
        except (TimeoutError, OSError) as exc:
            findings.add(case, f"{type(exc).__name__}: {exc}", data)
            continue
        bad = [int(m.group(1)) for m in _STATUS.finditer(out) if m.group(1)[0] == ord("5")]
        if bad:
            findings.add(case, f"{bad} {out[:300]!r}", data)
    findings.check()
    _still_serves(server)


# -- gRPC messages -----------------------------------------------------------------------------
def _grpc_add_sub() -> Any:
    req = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        req.inputs.add(name=name, datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(np.asarray(A, np.float32).tobytes())
    req.raw_input_contents.append(np.asarray(B, np.float32).tobytes())
    return req


_NOT_CLIENT = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS}


def _grpc_payload(rng: random.Random) -> bytes:
    from tritonlite._proto import pb

    req = pb.ModelInferRequest.FromString(_grpc_add_sub().SerializeToString())
    if rng.random() < 0.2:
        del req.raw_input_contents[:]
        for t in req.inputs:
            t.contents.fp32_contents.extend(A)
    if rng.random() < 0.1:
        req.model_name = rng.choice(["", "add_sub_nobatch", "nope", "é", "../x", "a" * 300])
    if rng.random() < 0.75:
        _mutate_grpc(rng, req)
        return bytes(req.SerializeToString())
    return _mutate_bytes(rng, req.SerializeToString())


def test_grpc_messages(served: tuple[str, Server]) -> None:
    frontend, server = served
    findings = Findings("grpc", frontend)
    with grpc.insecure_channel(server.grpc_url) as channel:
        for case, rng in _cases("grpc", frontend):
            payload = _grpc_payload(rng)
            findings.cases += 1
            code, message, _ = grpc_unary(channel, "ModelInfer", payload, CASE_TIMEOUT_S)
            if code in _NOT_CLIENT or code == grpc.StatusCode.DEADLINE_EXCEEDED:
                findings.add(case, f"{code.name}: {message[:200]}", payload)
    findings.check()
    _still_serves(server)


# -- HTTP/2 frames ---------------------------------------------------------------------------------
_INFER = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
    (b":authority", b"fuzz"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]


def _conversation(rng: random.Random) -> list[bytes]:
    """A valid ModelInfer conversation (several streams) as a list of frames."""
    enc = hpack.Encoder()
    frames = [PREFACE, settings((4, rng.choice([10, 65535, 1 << 20])), (5, 16384))]
    message = grpc_message(_grpc_add_sub().SerializeToString())
    sid = 1
    for _ in range(rng.randint(1, 3)):
        block = bytes(enc.encode(_INFER))
        if rng.random() < 0.3:
            cut = rng.randint(0, len(block))
            frames.append(frame(HEADERS, 0, sid, block[:cut]))
            frames.append(frame(CONTINUATION, END_HEADERS, sid, block[cut:]))
        else:
            frames.append(frame(HEADERS, END_HEADERS, sid, block))
        body = message
        while body:
            k = rng.randint(1, len(body))
            frames.append(frame(DATA, 0, sid, body[:k]))
            body = body[k:]
        if rng.random() < 0.85:
            frames.append(frame(DATA, END_STREAM, sid, b""))
        else:
            frames.append(frame(RST_STREAM, 0, sid, b"\0\0\0\x08"))
        if rng.random() < 0.2:
            frames.append(frame(PING, 0, 0, rng.randbytes(8)))
        elif rng.random() < 0.2:
            frames.append(frame(WINDOW_UPDATE, 0, 0, (1 << 16).to_bytes(4, "big")))
        sid += 2
    return frames


def test_h2_frame_sequences(served: tuple[str, Server]) -> None:
    frontend, server = served
    findings = Findings("h2", frontend)
    corpus: list[bytes] = []
    for case, rng in _cases("h2", frontend):
        frames = _conversation(rng)
        corpus.extend(frames[1:])
        del corpus[:-200]
        data = _mutate_frames(rng, frames, corpus) if rng.random() < 0.9 else b"".join(frames)
        findings.cases += 1
        try:
            _raw_exchange(server.grpc_url, data)
        except TimeoutError as exc:
            findings.add(case, f"no close after the client's EOF: {exc}", data)
        except OSError:
            pass  # the server reset the connection: an answer to a broken conversation
    findings.check()
    if frontend == "aio" and AIO_GRPC_STOPPED in server.output():
        # A mutated header block decoded to a :path that is not UTF-8: grpc.aio's known limit
        # (test_a_path_that_is_not_utf8_leaves_grpc_serving). HTTP must still serve.
        with Http(server.http_url) as client:
            check_add_sub(
                *client.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B
            )
        pytest.xfail("grpc.aio stopped on a :path that is not UTF-8 (README, Front ends)")
    _still_serves(server)


# -- repository API ----------------------------------------------------------------------------
_NAMES = [
    "..",
    ".",
    "../x",
    "../../etc",
    "/tmp/x",
    "a/b",
    "a\\b",
    "%2F",
    "%2e%2e",
    "x" * 300,
    "\x00",
    "a\x00b",
    "é",
    " ",
    "",
    "-",
    ".hidden",
    "CON",
    "add_sub_nobatch",
    "new_model",
    "ok_name",
    "a\nb",
    "~",
    "$HOME",
    "*",
]
_FILES = [
    "1/model.onnx",
    "../1/model.onnx",
    "/abs/model.onnx",
    "1/../../x",
    "config.pbtxt",
    "1/sub/dir/f",
    "..",
    "",
    "1/\x00",
    "1/" + "f" * 300,
    "1/./model.onnx",
    "x/../../../y",
]


def _repo_case(rng: random.Random) -> tuple[str, bytes]:
    name = rng.choice(_NAMES)
    if rng.random() < 0.3:
        name = "".join(rng.choice("abc./%\\_-é\x00") for _ in range(rng.randint(1, 8)))
    quoted = urllib.parse.quote(name, safe=rng.choice(["", "/", "%"]))
    action = "unload" if rng.random() < 0.25 else "load"
    params: dict[str, Any] = {}
    roll = rng.random()
    if roll < 0.6:
        cfg: Any = {
            "name": name,
            "backend": "onnxruntime",
            "max_batch_size": 0,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        }
        if rng.random() < 0.3:
            cfg = _mutate_json(rng, cfg)
        params["config"] = json.dumps(cfg) if rng.random() < 0.9 else rng.choice(HOSTILE)
        for _ in range(rng.randint(0, 3)):
            data = base64.b64encode(rng.randbytes(rng.choice([0, 10, 300]))).decode()
            params[f"file:{rng.choice(_FILES)}"] = data if rng.random() < 0.9 else "%%%"
    elif roll < 0.8:
        params = {rng.choice(["unload_dependents", "config", "file:", "x"]): rng.choice(HOSTILE)}
    body = json.dumps({"parameters": params}).encode() if rng.random() < 0.9 else b"{"
    return f"/v2/repository/models/{quoted}/{action}", body


def _tree(root: Path, skip: Path) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        if Path(dirpath) == skip:
            dirnames[:] = []
            continue
        for n in dirnames + filenames:
            out.add(str(Path(dirpath, n).relative_to(root)))
    return out


@pytest.mark.parametrize("frontend", ["aio", "native"])
def test_repository_names_and_override_files(tmp_path: Path, frontend: str) -> None:
    repo = write_repo(tmp_path / "repo", python=False)
    server_tmp = tmp_path / "deep" / "server_tmp"
    server_tmp.mkdir(parents=True)
    server = start_raw(
        repo,
        "--frontend",
        frontend,
        "--model-control-mode",
        "explicit",
        "--load-model",
        "add_sub",
        "--allow-metrics=false",
        env={"TMPDIR": str(server_tmp)},
    )
    try:
        _fuzz_repository(server, tmp_path, server_tmp, frontend)
    finally:
        server.stop()


def _fuzz_repository(server: Server, tmp_path: Path, server_tmp: Path, frontend: str) -> None:
    before = _tree(tmp_path, server_tmp)
    findings = Findings("repo", frontend)
    with Http(server.http_url, timeout=CASE_TIMEOUT_S) as client:
        for case, rng in _cases("repo", frontend):
            path, body = _repo_case(rng)
            _post_case(findings, client, case, path, body)
    after = _tree(tmp_path, server_tmp)  # the worst finding first
    assert after == before, (sorted(after - before), sorted(before - after))
    findings.check()
    with Http(server.http_url) as client:
        check_add_sub(*client.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B)
    assert server.proc.poll() is None


# -- what the fuzz found, kept as plain tests --------------------------------------------------
@pytest.mark.parametrize(
    "frontend",
    [
        pytest.param(
            "aio",
            marks=pytest.mark.xfail(
                strict=True,
                reason="grpcio 1.85's grpc.aio decodes the :path as UTF-8 in "
                "AioServer._server_main_loop (server.pyx.pxi), before any generic handler or "
                "interceptor runs and with no option to change it: the UnicodeDecodeError "
                "ends its serving task, which shuts the gRPC server down, so every later gRPC "
                "call is refused (README, Front ends; found by test_h2_frame_sequences at "
                "FUZZ_CASES=100000). --frontend=native is not affected",
            ),
        ),
        "native",
    ],
)
def test_a_path_that_is_not_utf8_leaves_grpc_serving(tmp_path: Path, frontend: str) -> None:
    server = start_raw(
        write_repo(tmp_path, python=False), "--frontend", frontend, "--allow-metrics=false"
    )
    try:
        headers = [
            (k, b"/inference.GRPCInferenceService/Model\x80Infer" if k == b":path" else v)
            for k, v in _INFER
        ]
        block = bytes(hpack.Encoder().encode(headers))
        data = (
            PREFACE
            + settings()
            + frame(HEADERS, END_HEADERS, 1, block)
            + frame(DATA, END_STREAM, 1, grpc_message(b""))
        )
        out = _raw_exchange(server.grpc_url, data)
        assert b"grpc-status" in out  # (an UNIMPLEMENTED trailer, whatever its text)
        _still_serves(server)
    finally:
        server.stop()


def test_grpc_aio_stopping_by_itself_is_logged_and_http_serves_on(tmp_path: Path) -> None:
    # the known limit above (grpc.aio dies on a :path that is not UTF-8): the log says so in
    # one line, and HTTP keeps serving. Drop this test with the xfail once grpcio guards it.
    server = start_raw(
        write_repo(tmp_path, python=False), "--frontend", "aio", "--allow-metrics=false"
    )
    try:
        headers = [(k, b"/x/\x80" if k == b":path" else v) for k, v in _INFER]
        block = bytes(hpack.Encoder().encode(headers))
        data = PREFACE + settings() + frame(HEADERS, END_HEADERS, 1, block)
        _raw_exchange(server.grpc_url, data)
        line = AIO_GRPC_STOPPED
        out = server.wait_for_lines(lambda lines: any(line in x for x in lines), timeout=30)
        assert line in out, out[-3000:]
        with Http(server.http_url) as client:
            check_add_sub(
                *client.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B
            )
    finally:
        server.stop()


_BAD_OVERRIDES = [
    ("add_sub_nobatch", "BYTES", {}),  # a model in the repository
    ("new_model", "BYTES", {"file:1/model.onnx": b"xx"}),  # with override files
    ("new_model", '{"timeout": [[1], 2]}', {"file:1/f": b"xx"}),
]


def test_a_config_override_that_does_not_parse_is_a_client_error(tmp_path: Path) -> None:
    # Triton 2.51 answers INTERNAL (500) with "failed to poll from model repository" only;
    # the client's mistake is 400 / INVALID_ARGUMENT here, the parse error after Triton's words
    # (issue 18 item 4; found by test_repository_names_and_override_files at FUZZ_CASES=100000)
    server = start_raw(
        write_repo(tmp_path, python=False),
        "--model-control-mode",
        "explicit",
        "--load-model",
        "add_sub",
        "--allow-metrics=false",
    )
    try:
        with Http(server.http_url) as client:
            answers = []
            for name, config, files in _BAD_OVERRIDES:
                params: dict[str, str] = {"config": config}
                params.update({k: base64.b64encode(v).decode() for k, v in files.items()})
                body = json.dumps({"parameters": params}).encode()
                answers.append(client.request("POST", f"/v2/repository/models/{name}/load", body))
            check_add_sub(
                *client.request("POST", "/v2/models/add_sub/infer", infer_body(A, B)), A, B
            )
        with grpc.insecure_channel(server.grpc_url) as channel:
            calls = []
            for name, config, files in _BAD_OVERRIDES:
                r = service_pb2.RepositoryModelLoadRequest(model_name=name)
                r.parameters["config"].string_param = config
                for k, v in files.items():
                    r.parameters[k].bytes_param = v
                calls.append(grpc_unary(channel, "RepositoryModelLoad", r.SerializeToString()))
        _still_serves(server)
    finally:
        server.stop()
    assert [status for status, _ in answers] == [400] * len(answers), answers
    assert [code for code, _, _ in calls] == [grpc.StatusCode.INVALID_ARGUMENT] * len(calls)
    for (name, _, _), (_, text), (_, message, _) in zip(_BAD_OVERRIDES, answers, calls):
        expected = f"failed to load '{name}', failed to poll from model repository: "
        assert json.loads(text)["error"].startswith(expected), text
        assert message.startswith(expected + "failed to parse model configuration JSON"), message
        assert "/tmp" not in message and b"/tmp" not in text  # no server path
