"""Client errors cost one log line at most, rate-limited, and count by reason (issue 18 item 7).

1,000 bad HTTP requests of several kinds (bad JSON, unknown model, unknown path, wrong method,
an upload past ``--http-max-input-size``) and 300 bad gRPC calls against a real server on each
front end: ``tritonlite_rejected_requests_total{protocol, reason}`` must equal what the client
saw, by reason; the log must hold no traceback and at most ``burst + 1`` lines per reason; the
server must still answer a correct inference. The limiter and the reason tables are also tested
on their own (a fake clock).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import Server
from faultkit import Http, check_add_sub, grpc_unary, infer_body, rejected, scrape, write_repo

from tritonlite.frontends.base.grpc_errors import grpc_reason
from tritonlite.frontends.base.grpc_errors import rejected as grpc_rejected
from tritonlite.frontends.base.rejects import REASONS, Rejects, http_reason
from tritonlite.logs import RateLimitedLog

pytestmark = pytest.mark.timeout(180)

BURST = 10  # Rejects' default burst per (protocol, reason) and minute
N_HTTP = 1000
N_GRPC = 300


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _logger() -> tuple[logging.Logger, _Records]:
    logger = logging.getLogger(f"tritonlite.test.rejects.{id(object())}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    rec = _Records()
    logger.handlers[:] = [rec]
    return logger, rec


def test_limiter_writes_a_burst_then_one_summary_per_interval() -> None:
    now = [100.0]
    logger, rec = _logger()
    lim = RateLimitedLog(logger, burst=3, interval_s=10.0, clock=lambda: now[0])
    written = [lim.log("k", "line %d", i) for i in range(50)]
    assert written == [True] * 3 + [False] * 47
    assert rec.lines == ["line 0", "line 1", "line 2"]
    assert lim.suppressed("k") == 47
    lim.log("other", "another key has its own burst")
    assert len(rec.lines) == 4
    now[0] += 10.0
    assert lim.log("k", "next window")
    assert rec.lines[4:] == ["suppressed 47 similar k messages in the last 10s", "next window"]
    lim.log("k", "x")
    lim.log("k", "y")
    lim.log("k", "z")
    lim.flush()
    assert rec.lines[-1] == "suppressed 1 similar k messages in the last 10s"
    lim.flush()  # nothing pending: nothing written
    assert rec.lines[-1] == "suppressed 1 similar k messages in the last 10s"


def test_limiter_summary_comes_from_a_timer_on_the_loop() -> None:
    import asyncio

    logger, rec = _logger()
    lim = RateLimitedLog(logger, burst=1, interval_s=0.05)

    async def flood() -> None:
        for _ in range(20):
            lim.log("k", "flood")
        while not rec.lines[-1].startswith("suppressed"):
            await asyncio.sleep(0.01)

    asyncio.run(asyncio.wait_for(flood(), 5))
    assert rec.lines == ["flood", "suppressed 19 similar k messages in the last 0.05s"]


def test_reason_tables() -> None:
    assert http_reason(200) is None and http_reason(500) is None
    assert [http_reason(s) for s in (400, 404, 405, 408, 413, 431, 501, 503, 418)] == [
        "bad_request",
        "not_found",
        "unsupported",
        "timeout",
        "too_large",
        "too_large",
        "unsupported",
        "unavailable",
        "bad_request",
    ]
    assert grpc_reason(0) is None and grpc_reason(13) is None and grpc_reason(1) is None
    assert [grpc_reason(s) for s in (3, 5, 12, 8, 4, 14)] == [
        "bad_request",
        "not_found",
        "unsupported",
        "too_large",
        "timeout",
        "unavailable",
    ]
    assert {http_reason(s) for s in range(400, 600)} - {None} <= set(REASONS)


def test_rejects_count_and_log_one_sanitised_line() -> None:
    logger, rec = _logger()
    r = Rejects(logger, burst=2)
    r.http(400, "bad\nline\x00" + "x" * 500)
    r.http(500, "a server error is not a rejection")
    grpc_rejected(3, "bad", rejects=r)
    grpc_rejected(13, "internal", rejects=r)
    r.note("grpc", "protocol_error", "frame")
    assert r.count("http") == 1 and r.count("grpc") == 2
    assert r.count("grpc", "protocol_error") == 1
    assert len(rec.lines) == 3 and "\n" not in rec.lines[0] and "\x00" not in rec.lines[0]
    assert rec.lines[0].endswith("...") and len(rec.lines[0]) < 300
    with pytest.raises(ValueError):
        r.note("http", "no_such_reason", "")
    fam = next(r.collect())
    assert len(fam.samples) == 2 * len(REASONS)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_repo(tmp_path_factory.mktemp("rejects"), python=False)


def _http_kinds(n: int) -> list[tuple[str, str, bytes]]:
    kinds = [
        ("POST", "/v2/models/add_sub/infer", b"{"),
        ("POST", "/v2/models/add_sub/infer", b'{"inputs": [{"name": "INPUT0"}]}'),
        ("POST", "/v2/models/no_such_model/infer", infer_body([1] * 4, [1] * 4)),
        ("GET", "/v2/no/such/path", b""),
        ("DELETE", "/v2/models/add_sub", b""),
        ("GET", "/v2/models/add_sub/versions/x1", b""),
    ]
    return [kinds[i % len(kinds)] for i in range(n)]


def _log_lines(server: Server, pattern: str, at_least: int = 1) -> list[str]:
    """The lines matching ``pattern`` once ``at_least`` of them reached the drain thread (a
    reply can reach the client before the line the server logged with it), or after 10 s."""
    out = server.wait_for_lines(
        lambda lines: sum(1 for x in lines if re.search(pattern, x)) >= at_least
    )
    return [line for line in out.splitlines() if re.search(pattern, line)]


@pytest.mark.parametrize("frontend", ["aio", "native"])
def test_http_flood_is_counted_by_reason_and_logged_bounded(
    server_factory: Callable[..., Server], repo: Path, frontend: str
) -> None:
    server = server_factory(repo, "--frontend", frontend, "--http-max-input-size", "4096")
    with Http(server.http_url) as client:
        seen = _flood_http(client)
    assert sum(seen.values()) == N_HTTP and "?" not in seen
    assert rejected(scrape(server.metrics_url), "http") == dict(seen)
    logged = _log_lines(server, r"rejected http request", len(seen) * BURST)
    assert len(logged) == len(seen) * BURST
    lines = _log_lines(server, r"rejected http request|suppressed \d+ similar http/")
    assert 0 < len(lines) <= len(seen) * (BURST + 1), lines
    assert "Traceback" not in server.output()


def _flood_http(client: Http) -> Counter[str]:
    seen: Counter[str] = Counter()
    for method, path, body in _http_kinds(N_HTTP - 10):
        status, _ = client.request(method, path, body or None)
        assert 400 <= status < 500, (method, path, status)
        seen[http_reason(status) or "?"] += 1
    for _ in range(10):  # past the input limit: refused, the connection may close
        status, _ = client.request("POST", "/v2/models/add_sub/infer", b"[" * 8192)
        assert status == 413
        seen["too_large"] += 1
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]
    check_add_sub(*client.request("POST", "/v2/models/add_sub/infer", infer_body(a, b)), a, b)
    return seen


def _grpc_kinds(n: int) -> list[tuple[str, bytes]]:
    from tritonclient.grpc import service_pb2

    unknown = service_pb2.ModelInferRequest(model_name="no_such_model").SerializeToString()
    kinds = [
        ("ModelInfer", b"\xff\xff\xff\xff"),  # not a protobuf
        ("ModelInfer", unknown),
        ("ModelConfig", service_pb2.ModelConfigRequest(name="no_such").SerializeToString()),
        ("NoSuchMethod", b""),
    ]
    return [kinds[i % len(kinds)] for i in range(n)]


@pytest.mark.parametrize("frontend", ["aio", "native"])
def test_grpc_flood_is_counted_by_reason_and_logged_bounded(
    server_factory: Callable[..., Server], repo: Path, frontend: str
) -> None:
    server = server_factory(repo, "--frontend", frontend)
    seen: Counter[str] = Counter()
    with grpc.insecure_channel(server.grpc_url) as channel:
        for method, payload in _grpc_kinds(N_GRPC):
            code, message, _ = grpc_unary(channel, method, payload)
            assert code not in (grpc.StatusCode.OK, grpc.StatusCode.INTERNAL), (method, message)
            seen[grpc_reason(code.value[0]) or "?"] += 1
    assert "?" not in seen
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]
    with Http(server.http_url) as client:
        check_add_sub(*client.request("POST", "/v2/models/add_sub/infer", infer_body(a, b)), a, b)
    assert rejected(scrape(server.metrics_url), "grpc") == dict(seen)
    lines = _log_lines(server, r"rejected grpc request|suppressed \d+ similar grpc/")
    assert 0 < len(lines) <= len(seen) * (BURST + 1), lines
    assert "Traceback" not in server.output()


def _put_error(errors: Any, result: Any, error: Any) -> None:
    errors.put(error)


@pytest.mark.parametrize("frontend", ["aio", "native"])
def test_grpc_stream_errors_are_counted_once(
    server_factory: Callable[..., Server], repo: Path, frontend: str
) -> None:
    # an error sent on the stream counts once; one that ends the stream (triton_grpc_error)
    # counts once too, by the call's status
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    server = server_factory(repo, "--frontend", frontend)
    x = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    x.set_data_from_numpy(np.ones((1, 4), np.float32))
    for headers, n in ((None, 3), ({"triton_grpc_error": "true"}, 1)):
        got: queue.Queue[Any] = queue.Queue()
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.start_stream(callback=partial(_put_error, got), headers=headers)
            for _ in range(n):
                client.async_stream_infer("no_such_model", [x])
            errors = [got.get(timeout=30) for _ in range(n)]
            client.stop_stream()
        assert all(e is not None for e in errors), errors
    assert rejected(scrape(server.metrics_url), "grpc") == {"not_found": 4}
