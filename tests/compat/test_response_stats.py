"""The statistics extension's ``response_stats`` through the real tritonclient (HTTP and gRPC).

A decoupled model's responses are counted per index within their request ("0", "1", ...):
a response is a ``success`` (with ``compute_infer`` and ``compute_output``), an error response
a ``fail``, the flags-only final an ``empty_response`` (whether or not the client asked to see
it), a response sent after the client left a ``cancel``. Counts add up over requests; models
that are not decoupled report none, as Triton's backends report them only for decoupled
responses. The models are ``tests/compat/decoupled_repo.py``'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server, wait_until
from decoupled_repo import Stream, build_decoupled_repo
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(90)

NAMES = ("compute_infer", "compute_output", "success", "fail", "empty_response", "cancel")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = start_server(
        build_decoupled_repo(tmp_path_factory.mktemp("response_stats_repo")),
        "--allow-metrics=false",
    )
    yield s
    s.stop()


@pytest.fixture()
def stream(server: Server) -> Iterator[Stream]:
    s = Stream(server.grpc_url)
    yield s
    s.close()


def _tensor(name: str, arr: np.ndarray, datatype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(arr.shape), datatype)
    t.set_data_from_numpy(arr)
    return t


def repeat_inputs(values: list[int], delays_ms: list[int], wait_ms: int = 0) -> list[Any]:
    return [
        _tensor("IN", np.array(values, np.int32), "INT32"),
        _tensor("DELAY", np.array(delays_ms, np.uint32), "UINT32"),
        _tensor("WAIT", np.array([wait_ms], np.uint32), "UINT32"),
    ]


def text_inputs(text: str, n: int | None = None) -> list[Any]:
    out = [_tensor("TEXT", np.array([text.encode()], dtype=object), "BYTES")]
    if n is not None:
        out.append(_tensor("N", np.array([n], np.int32), "INT32"))
    return out


def response_stats(server: Server, model: str) -> dict[str, dict[str, dict[str, int]]]:
    """``response_stats`` as HTTP reports it, after checking gRPC (JSON and protobuf) agrees.

    The three are read one after the other; a stream still finishing may move the statistics
    between two reads, so they are read again (a few times, briefly) until they agree."""
    h = httpclient.InferenceServerClient(server.http_url)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for _ in range(40):
            http = h.get_inference_statistics(model)["model_stats"][0]["response_stats"]
            as_json = g.get_inference_statistics(model, as_json=True)["model_stats"][0]
            message = g.get_inference_statistics(model).model_stats[0]
            grpc_json = {
                key: {
                    n: {
                        "count": int(v.get(n, {}).get("count", 0)),
                        "ns": int(v.get(n, {}).get("ns", 0)),
                    }
                    for n in NAMES
                }
                for key, v in as_json.get("response_stats", {}).items()
            }
            grpc_pb = {
                key: {n: {"count": getattr(v, n).count, "ns": getattr(v, n).ns} for n in NAMES}
                for key, v in message.response_stats.items()
            }
            if http == grpc_json == grpc_pb:
                break
            time.sleep(0.05)
    finally:
        h.close()
        g.close()
    assert http == grpc_json == grpc_pb
    for per_index in http.values():
        assert set(per_index) == set(NAMES)
    return dict(http)


def counts(stats: dict[str, dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """Each index's non-zero counts."""
    return {k: {n: d["count"] for n, d in v.items() if d["count"]} for k, v in stats.items()}


def delta(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for key, names in after.items():
        diff = {n: c - before.get(key, {}).get(n, 0) for n, c in names.items()}
        diff = {n: c for n, c in diff.items() if c}
        if diff:
            out[key] = diff
    return out


SUCCESS = {"compute_infer": 1, "compute_output": 1, "success": 1}
EMPTY = {"compute_infer": 1, "empty_response": 1}
FAIL = {"compute_infer": 1, "fail": 1}


def test_repeat_counts_each_index_and_the_empty_final(server: Server, stream: Stream) -> None:
    assert response_stats(server, "repeat") == {}
    # delays longer than a loaded machine's scheduling stalls (79 ms seen under make test),
    # which would make the undelayed response look slower than a short-delayed one
    got = stream.run("repeat", repeat_inputs([7, 8, 9], [300, 0, 150]))
    assert [r.as_numpy("OUT") for r, _ in got[:3]] == [[7], [8], [9]]
    stats = response_stats(server, "repeat")
    assert counts(stats) == {"0": SUCCESS, "1": SUCCESS, "2": SUCCESS, "3": EMPTY}
    # compute_infer of a response is the time since the previous one (the model's DELAY)
    assert stats["0"]["compute_infer"]["ns"] >= 300_000_000
    assert stats["2"]["compute_infer"]["ns"] >= 150_000_000
    assert stats["1"]["compute_infer"]["ns"] < stats["2"]["compute_infer"]["ns"]
    for key in "012":
        s = stats[key]
        assert s["success"]["ns"] == s["compute_infer"]["ns"] + s["compute_output"]["ns"]
        assert s["compute_output"]["ns"] > 0
    assert stats["3"]["empty_response"]["ns"] == stats["3"]["compute_infer"]["ns"]

    # a second request adds to the same indexes; its empty final lands at its own index
    stream.run("repeat", repeat_inputs([1], [0], wait_ms=40))
    stats = response_stats(server, "repeat")
    assert counts(stats) == {
        "0": {"compute_infer": 2, "compute_output": 2, "success": 2},
        "1": {"compute_infer": 2, "compute_output": 1, "success": 1, "empty_response": 1},
        "2": SUCCESS,
        "3": EMPTY,
    }
    assert stats["1"]["empty_response"]["ns"] >= 40_000_000


def test_empty_final_is_counted_when_the_client_does_not_see_it(
    server: Server, stream: Stream
) -> None:
    before = counts(response_stats(server, "repeat"))
    # without enable_empty_final_response the client gets only the two responses
    got = stream.run("repeat", repeat_inputs([4, 5], [0, 0]), empty_final=False, expect=2)
    assert [r.as_numpy("OUT") for r, _ in got] == [[4], [5]]

    def settled() -> bool:
        return "2" in delta(before, counts(response_stats(server, "repeat")))

    wait_until(settled, 10)
    assert delta(before, counts(response_stats(server, "repeat"))) == {
        "0": SUCCESS,
        "1": SUCCESS,
        "2": EMPTY,
    }


def test_error_responses_are_failures_at_their_index(server: Server, stream: Stream) -> None:
    before = counts(response_stats(server, "dec"))
    got = stream.run("dec", text_inputs("err"))
    assert [e is not None for _, e in got] == [False, True, False]
    assert delta(before, counts(response_stats(server, "dec"))) == {
        "0": SUCCESS,
        "1": FAIL,
        "2": SUCCESS,
    }

    before = counts(response_stats(server, "dec"))
    stream.run("dec", text_inputs("errfinal"), expect=1)
    stream.run("dec", text_inputs("last", 2))  # the final rides on the last response
    assert delta(before, counts(response_stats(server, "dec"))) == {
        "0": {"compute_infer": 2, "compute_output": 1, "success": 1, "fail": 1},
        "1": SUCCESS,
    }


def test_responses_from_a_thread_after_execute_returns(server: Server, stream: Stream) -> None:
    before = counts(response_stats(server, "dec"))
    stream.run("dec", text_inputs("thread", 2))
    assert delta(before, counts(response_stats(server, "dec"))) == {
        "0": SUCCESS,
        "1": SUCCESS,
        "2": EMPTY,
    }
    before = counts(response_stats(server, "dec_async"))
    stream.run("dec_async", text_inputs("ok"))
    assert delta(before, counts(response_stats(server, "dec_async"))) == {
        "0": SUCCESS,
        "1": SUCCESS,
        "2": EMPTY,
    }


def test_a_failed_execute_is_a_failed_response(server: Server, stream: Stream) -> None:
    before = counts(response_stats(server, "dec"))
    ((result, error),) = stream.run("dec", text_inputs("raise"), expect=1)
    assert result is None and "ValueError: boom" in error.message()
    assert delta(before, counts(response_stats(server, "dec"))) == {"0": FAIL}
    # an async execute that fails after one response: the error is its second response
    before = counts(response_stats(server, "dec_async"))
    got = stream.run("dec_async", text_inputs("raise"), expect=2)
    assert got[0][1] is None and "async boom" in got[1][1].message()
    assert delta(before, counts(response_stats(server, "dec_async"))) == {"0": SUCCESS, "1": FAIL}


def test_sender_misuse_and_refused_requests_count_nothing(server: Server, stream: Stream) -> None:
    before = counts(response_stats(server, "dec"))
    # four sends: a bad flag and a missing response raise in the model, the final flag goes,
    # a send after it raises: one empty final at index 0, nothing else
    stream.run("dec", text_inputs("misuse"))
    assert delta(before, counts(response_stats(server, "dec"))) == {"0": EMPTY}
    before = counts(response_stats(server, "dec"))
    before_repeat = counts(response_stats(server, "repeat"))
    ((result, error),) = stream.run("dec", [], expect=1)  # refused by validation: never ran
    assert result is None and "expected number of inputs" in error.message()
    bad = repeat_inputs([1], [0])
    bad[1] = _tensor("DELAY", np.array([0.5], np.float32), "FP32")
    ((result, error),) = stream.run("repeat", bad, expect=1)
    assert result is None and "DELAY" in error.message()
    assert delta(before, counts(response_stats(server, "dec"))) == {}
    assert delta(before_repeat, counts(response_stats(server, "repeat"))) == {}


def test_responses_after_the_client_left_are_cancels(server: Server) -> None:
    before = counts(response_stats(server, "dec"))
    s = Stream(server.grpc_url)
    try:
        s.run("dec", text_inputs("cancel"), empty_final=False, expect=2)
    finally:
        s.close(cancel=True)
    # the model ticks until it sees the cancellation, notes how many ticks it sent, then
    # sends its final flag, which nobody receives (each "report" is one more response "0")
    check = Stream(server.grpc_url)
    notes: dict[str, Any] = {}
    try:

        def noted() -> bool:
            ((result, _),) = check.run("dec", text_inputs("report"), expect=1)
            notes.update(json.loads(result.as_numpy("TEXT")[0]))
            return "cancelled" in notes

        wait_until(noted, 10)
    finally:
        check.close()
    ticks = notes["cancelled"][2]
    final = str(ticks)
    wait_until(lambda: final in delta(before, counts(response_stats(server, "dec"))), 10)
    d = delta(before, counts(response_stats(server, "dec")))
    assert set(d) == {str(i) for i in range(ticks + 1)}
    assert d[final] == {"cancel": 1}  # a flag nobody waits for: no compute, only the cancel
    assert d["0"]["success"] >= 2 and "cancel" not in d["0"]
    assert d["1"] == SUCCESS
    for i in range(2, ticks):  # ticks the client saw, or sent after it left
        assert d[str(i)] in (SUCCESS, {"cancel": 1}), d


def test_models_that_are_not_decoupled_report_none(server: Server) -> None:
    for protocol, mod in (("http", httpclient), ("grpc", grpcclient)):
        url = server.http_url if protocol == "http" else server.grpc_url
        client = mod.InferenceServerClient(url)
        t = mod.InferInput("TEXT", [1], "BYTES")
        t.set_data_from_numpy(np.array([b"hi"], dtype=object))
        client.infer("plain", [t])
        f = mod.InferInput("TEXT", [1], "BYTES")
        f.set_data_from_numpy(np.array([b"fail"], dtype=object))
        with pytest.raises(InferenceServerException, match="asked to fail"):
            client.infer("plain", [f])
        client.close()
    assert response_stats(server, "plain") == {}


def test_statistics_of_unknown_models_are_errors(server: Server) -> None:
    h = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="requested model 'nope' is not available"):
        h.get_inference_statistics("nope")
    h.close()


def _inference(server: Server, model: str) -> dict[str, Any]:
    h = httpclient.InferenceServerClient(server.http_url)
    try:
        return dict(h.get_inference_statistics(model)["model_stats"][0])
    finally:
        h.close()


def test_a_decoupled_request_counts_when_its_final_response_is_sent(server: Server) -> None:
    """As in Triton, whose statistics come from a request's release: the request (success,
    compute_infer) and its batch (execution_count, batch_stats) count at its final response,
    after ``execute`` returned, and compute_infer spans the whole stream."""
    before = _inference(server, "repeat")
    s = Stream(server.grpc_url)
    try:
        s.client.async_stream_infer(
            "repeat", repeat_inputs([1, 2, 3], [150, 150, 150]), enable_empty_final_response=True
        )
        first, _ = s.results.get(timeout=20)
        assert first.as_numpy("OUT") == [1]
        mid = _inference(server, "repeat")  # execute returned long ago; the stream is open
        assert (
            mid["inference_stats"]["success"]["count"]
            == before["inference_stats"]["success"]["count"]
        )
        assert mid["execution_count"] == before["execution_count"]
        s.until_final(1, timeout=20)
    finally:
        s.close()

    def counted() -> bool:
        now = int(_inference(server, "repeat")["execution_count"])
        return now == int(before["execution_count"]) + 1

    wait_until(counted, 10)
    after = _inference(server, "repeat")
    ok = {
        k: after["inference_stats"][k]["count"] - before["inference_stats"][k]["count"]
        for k in ("success", "compute_infer", "fail")
    }
    assert ok == {"success": 1, "compute_infer": 1, "fail": 0}
    infer_ns = (
        after["inference_stats"]["compute_infer"]["ns"]
        - before["inference_stats"]["compute_infer"]["ns"]
    )
    success_ns = (
        after["inference_stats"]["success"]["ns"] - before["inference_stats"]["success"]["ns"]
    )
    assert infer_ns >= 450_000_000  # the three 150 ms delays
    assert success_ns >= infer_ns
    assert after["inference_count"] == before["inference_count"] + 1
