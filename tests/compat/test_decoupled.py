"""Decoupled python models through the real tritonclient.grpc stream (and perf_analyzer):
several responses per request, ``triton_final_response``, the empty final response only on
request, error responses mid-stream, execute failures, senders used from threads after
execute returns, ``async def execute``, cancellation, statistics, and the refusal of
ModelInfer / HTTP ``/infer``.
"""

from __future__ import annotations

import json
import queue
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import start_server
from decoupled_repo import Stream, build_decoupled_repo, is_final
from repos import run_perf_analyzer
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    repo = build_decoupled_repo(tmp_path_factory.mktemp("decoupled_repo"))
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


def text_inputs(text: str, n: int | None = None) -> list[grpcclient.InferInput]:
    t = grpcclient.InferInput("TEXT", [1], "BYTES")
    t.set_data_from_numpy(np.array([text.encode()], dtype=object))
    if n is None:
        return [t]
    c = grpcclient.InferInput("N", [1], "INT32")
    c.set_data_from_numpy(np.array([n], dtype=np.int32))
    return [t, c]


def repeat_inputs(values: list[int], delays: list[int], wait: int = 0) -> list[Any]:
    arrays = (
        ("IN", np.array(values, np.int32), "INT32"),
        ("DELAY", np.array(delays, np.uint32), "UINT32"),
        ("WAIT", np.array([wait], np.uint32), "UINT32"),
    )
    out = []
    for name, arr, dt in arrays:
        i = grpcclient.InferInput(name, list(arr.shape), dt)
        i.set_data_from_numpy(arr)
        out.append(i)
    return out


def texts(messages: list[tuple[Any, Any]]) -> list[Any]:
    """Each message as its TEXT output, None for an empty response, or ('error', message)."""
    out: list[Any] = []
    for result, error in messages:
        if error is not None:
            out.append(("error", error.message()))
        elif result.as_numpy("TEXT") is None:
            out.append(None)
        else:
            out.append(result.as_numpy("TEXT")[0].decode())
    return out


@pytest.fixture()
def stream(server: Any) -> Iterator[Stream]:
    s = Stream(server.grpc_url)
    yield s
    s.close()


def notes(stream: Stream) -> dict[str, Any]:
    stream.send("dec", text_inputs("report"), "report")
    ((result, error),) = stream.until_final()
    assert error is None
    return json.loads(result.as_numpy("TEXT")[0])  # type: ignore[no-any-return]


def test_repeat_streams_each_element_then_an_empty_final(stream: Stream) -> None:
    stream.send("repeat", repeat_inputs([4, 5, 6], [0, 0, 0]), "r1", empty_final=True)
    got = stream.until_final()
    assert [r.get_response().id for r, _ in got] == ["r1"] * 4
    assert [is_final(r) for r, _ in got] == [False, False, False, True]
    assert [r.as_numpy("OUT").tolist() for r, _ in got[:3]] == [[4], [5], [6]]
    assert [r.as_numpy("IDX").tolist() for r, _ in got[:3]] == [[0], [1], [2]]
    last = got[3][0].get_response()
    # Triton's empty final response: no outputs, the model's version left empty
    assert (last.model_name, last.model_version, list(last.outputs)) == ("repeat", "", [])


def test_no_empty_final_unless_asked(stream: Stream) -> None:
    stream.send("dec", text_inputs("count", 2), "a")
    stream.send("dec", text_inputs("last", 2), "b")  # the last response carries FINAL
    got = stream.until_final(1)
    assert texts(got) == ["count0", "count1", "last0", "last1"]  # one instance: in turn
    assert is_final(got[-1][0]) and got[-1][0].get_response().id == "b"
    # "a" ended with a flags-only final and did not ask for the empty response: nothing came
    with pytest.raises(queue.Empty):
        stream.take(timeout=0.3)


def test_responses_of_concurrent_requests_interleave(stream: Stream) -> None:
    stream.send("repeat", repeat_inputs([1, 2], [0, 600]), "slow", empty_final=True)
    stream.send("repeat", repeat_inputs([9], [150]), "quick", empty_final=True)
    got = stream.until_final(2, timeout=15)
    order = [
        (r.get_response().id, r.as_numpy("OUT").tolist())
        for r, _ in got
        if r.as_numpy("OUT") is not None
    ]
    assert order == [("slow", [1]), ("quick", [9]), ("slow", [2])]


def test_error_responses_mid_stream_keep_it_open(stream: Stream) -> None:
    stream.send("dec", text_inputs("err"), "e")
    assert texts(stream.until_final()) == ["err0", ("error", "bad chunk 1"), "err2"]
    stream.send("dec", text_inputs("errfinal"), "f", empty_final=True)
    assert texts([stream.take()]) == [("error", "no luck")]
    stream.send("dec", text_inputs("last", 1), "g")  # the stream still serves
    assert texts(stream.until_final()) == ["last0"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("raise", "ValueError: boom"),
        (
            "return",
            "Python model 'dec_0' is using the decoupled mode and the execute function "
            "must return None.",
        ),
    ],
)
def test_execute_failures_end_the_request(stream: Stream, text: str, message: str) -> None:
    stream.send("dec", text_inputs(text), text, empty_final=True)
    result, error = stream.take()
    assert result is None
    assert error.message().startswith(
        f"Failed to process the request(s) for model 'dec_0', message: {message}"
    )
    stream.send("dec", text_inputs("count", 1), "after", empty_final=True)
    assert texts(stream.until_final()) == ["count0", None]


def test_sender_misuse_gets_tritons_messages(stream: Stream) -> None:
    stream.send("dec", text_inputs("misuse"), "m", empty_final=True)
    assert texts(stream.until_final()) == [None]
    got = notes(stream)
    assert (
        got["badflag"] == "TritonModelException: Unable to send response. Unsupported flag "
        "provided."
    )
    assert (
        got["noresp"] == "TritonModelException: Inference Response object must be provided "
        "when the response flags is set to zero."
    )
    assert got["final"] == "ok"
    assert (
        got["after"] == "TritonModelException: Unable to send response. Response sender "
        "has been closed."
    )


def test_sender_used_from_a_thread_after_execute_returns(stream: Stream) -> None:
    stream.send("dec", text_inputs("thread", 3), "t", empty_final=True)
    assert texts(stream.until_final()) == ["thread0", "thread1", "thread2", None]
    assert notes(stream)["sent_after_return"] is True


def test_async_execute(stream: Stream) -> None:
    stream.send("dec_async", text_inputs("ok"), "a1", empty_final=True)
    assert texts(stream.until_final()) == ["async0", "async1", None]
    # a failing background execute ends its request with the error (no hang)
    stream.send("dec_async", text_inputs("raise"), "a2", empty_final=True)
    got = [stream.take(), stream.take()]
    assert texts(got)[0] == "async0"
    assert texts(got)[1][0] == "error" and "RuntimeError: async boom" in texts(got)[1][1]


def test_cancelling_the_stream_cancels_the_request(server: Any) -> None:
    s = Stream(server.grpc_url)
    try:
        s.send("dec", text_inputs("cancel"), "c")
        assert texts([s.take(), s.take()]) == ["tick0", "tick1"]
        s.client.stop_stream(cancel_requests=True)
    finally:
        s.client.close()
    check = Stream(server.grpc_url)
    try:
        deadline = time.monotonic() + 10
        while "cancelled" not in (got := notes(check)) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen_by_sender, seen_by_request, ticks = got["cancelled"]
        assert seen_by_sender is True and seen_by_request is True and ticks >= 2
    finally:
        check.close()


def test_model_infer_and_http_infer_refuse_decoupled_models(server: Any) -> None:
    g = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        g.infer("repeat", repeat_inputs([1], [0]))
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert info.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )
    g.close()
    h = httpclient.InferenceServerClient(server.http_url)
    inp = httpclient.InferInput("TEXT", [1], "BYTES")
    inp.set_data_from_numpy(np.array([b"count"], dtype=object))
    with pytest.raises(InferenceServerException) as info:
        h.infer("dec", [inp])
    assert info.value.status() == "501"
    assert info.value.message() == (
        "HTTP end point doesn't support models with decoupled transaction policy"
    )
    assert h.is_model_ready("dec")
    h.close()


def test_bad_inputs_are_errors_on_the_stream(stream: Stream) -> None:
    stream.send("repeat", repeat_inputs([1, 2], [0]), "x", empty_final=True)
    assert texts([stream.take()]) == [
        ("error", "expected DELAY to have 2 elements (one per IN element), got 1")
    ]
    stream.send("dec", [], "y")
    ((result, error),) = [stream.take()]
    assert result is None and "expected number of inputs" in error.message()


def test_statistics_count_each_request_once(server: Any, stream: Stream) -> None:
    g = grpcclient.InferenceServerClient(server.grpc_url)
    before = g.get_inference_statistics("repeat", as_json=True)["model_stats"][0]
    for k in range(3):
        stream.send("repeat", repeat_inputs([1, 2, 3], [0, 0, 0]), f"s{k}", empty_final=True)
        stream.send("repeat", repeat_inputs([1], [0]), f"t{k}", empty_final=True)
    stream.until_final(6)
    after = g.get_inference_statistics("repeat", as_json=True)["model_stats"][0]
    g.close()
    success = int(after["inference_stats"]["success"]["count"]) - int(
        before["inference_stats"]["success"].get("count", 0)
    )
    assert success == 6  # one per request (counted when execute returns), not per response
    assert int(after["execution_count"]) - int(before.get("execution_count", 0)) == 6


def test_perf_analyzer_streams_a_decoupled_model(
    perf_analyzer: str, server: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data.json"
    data.write_text(
        json.dumps(
            {
                "data": [
                    {
                        "IN": {"content": [1, 2, 3], "shape": [3]},
                        "DELAY": {"content": [0, 0, 0], "shape": [3]},
                        "WAIT": {"content": [0], "shape": [1]},
                    }
                ]
            }
        )
    )
    out = run_perf_analyzer(
        perf_analyzer,
        "repeat",
        server.grpc_url,
        "grpc",
        "--streaming",
        "--async",
        "--input-data",
        str(data),
        stability=80,
        timeout=50,
    )
    assert "Detected decoupled model" in out, out
    # three responses per request: the response throughput is about three times the requests'
    found = [float(x) for x in re.findall(r"Response Throughput: ([0-9.]+) infer/sec", out)]
    requests = [float(x) for x in re.findall(r"    Throughput: ([0-9.]+)", out)]
    assert found and requests and found[-1] > 2.5 * requests[-1] > 0, out
