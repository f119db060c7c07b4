"""A server paused past a sequence's idle time (SIGSTOP, or a machine that does not run it).

The loop runs its timers before it reads its sockets, so after a pause the sequence reaper
would run first and expire a sequence whose next request already waits in the socket. The
request arrived in time; the server did not read it. The reaper waits as long as it was late
(once), so that request continues its sequence; a sequence that really sent nothing still
expires. Each case repeats, over HTTP and gRPC, on both front ends.
"""

from __future__ import annotations

import concurrent.futures as cf
import http.client
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import Server, start_server
from tritonclient.utils import InferenceServerException

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scheduling"))
from test_sequence import write_acc_onnx  # noqa: E402

pytestmark = pytest.mark.timeout(180)

IDLE_S = 0.3
PAUSE_S = 1.2  # four idle times: the reaper's timer is long overdue when the server resumes
ROUNDS = 3


@pytest.fixture(scope="module", params=["aio", "native"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("pause_repo")
    write_acc_onnx(repo, "acc", sequence=f"max_sequence_idle_microseconds: {int(IDLE_S * 1e6)}")
    s = start_server(
        repo, "--frontend", request.param, "--allow-metrics=false", "--log-verbose", "1"
    )
    yield s
    s.stop()


def _http_infer(server: Server) -> Callable[..., float]:
    host, port = server.http_url.rsplit(":", 1)

    def infer(seq: int, value: float, start: bool = False) -> float:
        # a plain KServe v2 JSON request (as curl sends it): tritonclient.http runs on gevent,
        # whose hub belongs to one thread, and the paused request is sent from another
        body = {
            "parameters": {"sequence_id": seq, "sequence_start": start},
            "inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [1, 1], "data": [value]}],
        }
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("POST", "/v2/models/acc/infer", json.dumps(body))
            resp = conn.getresponse()
            answer = json.loads(resp.read())
        finally:
            conn.close()
        if resp.status != 200:
            raise InferenceServerException(answer["error"])
        return float(answer["outputs"][0]["data"][0])

    return infer


def _grpc_infer(server: Server) -> Callable[..., float]:
    client = grpcclient.InferenceServerClient(server.grpc_url)

    def infer(seq: int, value: float, start: bool = False) -> float:
        inp = grpcclient.InferInput("INPUT", [1, 1], "FP32")
        inp.set_data_from_numpy(np.full((1, 1), value, np.float32))
        r = client.infer("acc", [inp], sequence_id=seq, sequence_start=start, client_timeout=30)
        return float(r.as_numpy("OUTPUT")[0, 0])

    return infer


CLIENTS = {"http": _http_infer, "grpc": _grpc_infer}


def _paused(server: Server, during: Callable[[], Any] | None = None) -> Any:
    """Stop the server for ``PAUSE_S``; ``during`` runs in a thread started while it is stopped
    (its request waits in the server's socket); what it returned."""
    with cf.ThreadPoolExecutor(1) as pool:
        server.proc.send_signal(signal.SIGSTOP)
        try:
            fut = pool.submit(during) if during is not None else None
            time.sleep(PAUSE_S)  # the fault itself: how long the server does not run
        finally:
            server.proc.send_signal(signal.SIGCONT)
        return fut.result(timeout=60) if fut is not None else None


def _started(
    server: Server, protocol: str, first: int
) -> Iterator[tuple[Callable[..., float], int]]:
    """``ROUNDS`` new sequences, each started with 1.0: the client and the sequence ID."""
    infer = CLIENTS[protocol](server)
    for seq in range(first, first + ROUNDS):
        assert infer(seq, 1.0, start=True) == 1.0
        yield infer, seq


@pytest.mark.parametrize("protocol", list(CLIENTS))
def test_a_request_that_waited_out_a_pause_continues_its_sequence(
    server: Server, protocol: str
) -> None:
    for infer, seq in _started(server, protocol, 1000 if protocol == "http" else 2000):
        assert _paused(server, lambda: infer(seq, 2.0)) == 3.0  # noqa: B023 (called at once)
        assert infer(seq, 4.0) == 7.0  # the sequence lives on, with its state


@pytest.mark.parametrize("protocol", list(CLIENTS))
def test_a_sequence_that_sent_nothing_still_expires_after_a_pause(
    server: Server, protocol: str
) -> None:
    for infer, seq in _started(server, protocol, 3000 if protocol == "http" else 4000):
        _paused(server)
        # the reaper's wait after the pause, then its pass (logged at --log-verbose 1)
        line = f"sequence {seq} of model 'acc': max sequence idle exceeded"
        assert line in server.wait_for_lines(lambda ls, s=line: any(s in x for x in ls), 30)
        with pytest.raises(InferenceServerException, match="must specify the START flag"):
            infer(seq, 0.0)
        assert infer(seq, 5.0, start=True) == 5.0
