"""The OpenAI-compatible endpoints over raw HTTP: the server-sent-event framing, every error
case (OpenAI's error shape, never a traceback), a client leaving mid-stream, and statistics
and metrics counting these requests like any other."""

from __future__ import annotations

import http.client
import json
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import Server, start_server, wait_until
from openai_repo import build_openai_repo

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = build_openai_repo(tmp_path_factory.mktemp("openai_http_repo"))
    s = start_server(repo)
    yield s
    s.stop()


def _conn(server: Server) -> http.client.HTTPConnection:
    url = urlsplit(f"http://{server.http_url}")
    return http.client.HTTPConnection(url.hostname, url.port, timeout=20)


def call(
    server: Server, method: str, path: str, body: Any = None
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; ``body`` a JSON-able value or raw bytes."""
    conn = _conn(server)
    try:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(method, path, body=data)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def events(body: bytes) -> list[Any]:
    """The events of an SSE body, checking the framing: ``data: ...\\n\\n`` each, [DONE] last."""
    assert body.endswith(b"data: [DONE]\n\n"), body
    chunks = body.split(b"\n\n")
    assert chunks[-1] == b"" and all(c.startswith(b"data: ") for c in chunks[:-1]), body
    assert sum(c == b"data: [DONE]" for c in chunks) == 1
    return [json.loads(c[len(b"data: ") :]) for c in chunks[:-2]]


USER = [{"role": "user", "content": "x"}]


def test_completion_stream_framing(server: Server) -> None:
    status, headers, body = call(
        server, "POST", "/v1/completions", {"model": "textgen", "prompt": "a b c", "stream": True}
    )
    assert status == 200
    assert headers["content-type"] == "text/event-stream; charset=utf-8"
    assert headers.get("cache-control") == "no-cache"
    got = events(body)
    # one chunk per model response, then the closing chunk
    assert [e["choices"][0]["text"] for e in got] == ["c", " b", " a", ""]
    assert [e["choices"][0]["finish_reason"] for e in got] == [None, None, None, "stop"]
    assert {e["object"] for e in got} == {"text_completion"} and len({e["id"] for e in got}) == 1
    assert all(set(e) == {"id", "object", "created", "model", "choices"} for e in got)


def test_chat_stream_framing(server: Server) -> None:
    status, _, body = call(
        server,
        "POST",
        "/v1/chat/completions",
        {
            "model": "textgen",
            "messages": [{"role": "user", "content": "a b"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    got = events(body)
    assert status == 200 and {e["object"] for e in got} == {"chat.completion.chunk"}
    assert [e["choices"][0]["delta"] for e in got[:-1]] == [
        {"role": "assistant", "content": "b"},
        {"content": " a"},
        {},
    ]
    assert got[-1]["choices"] == [] and got[-1]["usage"]["completion_tokens"] == 2


def test_a_model_error_mid_stream_is_an_error_event(server: Server) -> None:
    status, _, body = call(
        server,
        "POST",
        "/v1/completions",
        {"model": "ticker", "prompt": "fail-late", "stream": True},
    )
    got = events(body)
    assert status == 200 and got[0]["choices"][0]["text"] == "partial"
    assert got[1]["error"]["message"] == "failed after one chunk"
    assert got[1]["error"]["type"] == "server_error"


def test_no_response_at_all(server: Server) -> None:
    status, _, body = call(
        server, "POST", "/v1/completions", {"model": "ticker", "prompt": "nothing", "stream": True}
    )
    assert status == 200 and [e["choices"][0]["text"] for e in events(body)] == [""]
    status, _, body = call(
        server, "POST", "/v1/completions", {"model": "ticker", "prompt": "nothing"}
    )
    doc = json.loads(body)
    assert status == 200 and doc["choices"][0]["text"] == ""
    assert doc["usage"]["completion_tokens"] == 0


def test_embeddings_base64_is_little_endian_fp32(server: Server) -> None:
    import base64

    import numpy as np

    status, _, body = call(
        server,
        "POST",
        "/v1/embeddings",
        {"model": "embed_flat", "input": "aha", "encoding_format": "base64"},
    )
    assert status == 200
    (item,) = json.loads(body)["data"]
    np.testing.assert_array_equal(
        np.frombuffer(base64.b64decode(item["embedding"]), "<f4"), [3, 2, 1]
    )


def test_models_routes(server: Server) -> None:
    status, _, body = call(server, "GET", "/v1/models")
    doc = json.loads(body)
    assert status == 200 and doc["object"] == "list"
    assert all(set(m) == {"id", "object", "created", "owned_by"} for m in doc["data"])
    status, _, body = call(server, "GET", "/v1/models/upper")
    assert (status, json.loads(body)["id"]) == (200, "upper")
    status, _, body = call(server, "GET", "/v1/models/embed_wrong%2Fx")
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"
    status, _, _ = call(server, "POST", "/v1/models")
    assert status == 405


CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
EMB = "/v1/embeddings"
BAD: list[tuple[str, Any, int, str | None, str]] = [
    # (path, body, status, param, a piece of the message)
    (COMP, b"", 400, None, "empty"),
    (COMP, b"{not json", 400, None, "not valid JSON"),
    (CHAT, b"[1, 2]", 400, None, "JSON object"),
    (COMP, {"prompt": "x"}, 400, "model", "'model' is required"),
    (COMP, {"model": "absent", "prompt": "x"}, 404, "model", "does not exist"),
    (CHAT, {"model": "absent", "messages": USER}, 404, "model", "does not exist"),
    (EMB, {"model": "absent", "input": "x"}, 404, "model", "does not exist"),
    (COMP, {"model": "embed_chars", "prompt": "x"}, 400, "model", "output 'text_output'"),
    (COMP, {"model": "embed_flat", "prompt": "x"}, 400, "model", "text generation contract"),
    (EMB, {"model": "textgen", "input": "x"}, 400, "model", "output 'embedding'"),
    (COMP, {"model": "needs_extra", "prompt": "x"}, 400, "model", "input 'EXTRA'"),
    (COMP, {"model": "textgen", "prompt": ["a", "b"]}, 400, "prompt", "several strings"),
    (COMP, {"model": "textgen", "prompt": [1, 2]}, 400, "prompt", "token-id"),
    (COMP, {"model": "textgen", "prompt": "x", "n": 2}, 400, "n", "'n' must be 1"),
    (COMP, {"model": "textgen", "prompt": "x", "logprobs": 2}, 400, "logprobs", "log prob"),
    (COMP, {"model": "textgen", "prompt": "x", "echo": True}, 400, "echo", "echo"),
    (COMP, {"model": "textgen", "prompt": "x", "suffix": "y"}, 400, "suffix", "suffix"),
    (COMP, {"model": "textgen", "prompt": "x", "best_of": 3}, 400, "best_of", "best_of"),
    (COMP, {"model": "textgen", "prompt": "x", "temperature": 3}, 400, "temperature", "from 0"),
    (COMP, {"model": "textgen", "prompt": "x", "top_p": "1"}, 400, "top_p", "number"),
    (COMP, {"model": "textgen", "prompt": "x", "max_tokens": 0}, 400, "max_tokens", ">= 1"),
    (COMP, {"model": "textgen", "prompt": "x", "seed": 1.5}, 400, "seed", "integer"),
    (COMP, {"model": "textgen", "prompt": "x", "seed": 2**63}, 400, "seed", "64 bits"),
    (COMP, {"model": "textgen", "prompt": "x", "max_tokens": 2**40}, 400, "max_tokens", "INT32"),
    (COMP, {"model": "textgen", "prompt": "x", "max_tokens": 2.0}, 400, "max_tokens", "integer"),
    (COMP, {"model": "textgen", "prompt": "x", "stop": [1]}, 400, "stop", "list of up to 4"),
    (
        CHAT,
        {"model": "textgen", "messages": [{"role": "user", "content": [{"text": "x"}]}]},
        400,
        "messages[0].content",
        "parts must be",
    ),
    (COMP, {"model": "textgen", "prompt": "x", "stop": ["a"] * 5}, 400, "stop", "up to 4"),
    (COMP, {"model": "upper", "prompt": "x", "stop": "a"}, 400, "stop", "no 'stop' input"),
    (COMP, {"model": "textgen", "prompt": "x", "stream": "yes"}, 400, "stream", "boolean"),
    (
        COMP,
        {"model": "textgen", "prompt": "x", "stream_options": {"include_usage": True}},
        400,
        "stream_options",
        "only allowed",
    ),
    (
        COMP,
        {"model": "textgen", "prompt": "x", "presence_penalty": 1},
        400,
        "presence_penalty",
        "penalt",
    ),
    (COMP, {"model": "textgen", "prompt": "x", "logit_bias": {"1": 2}}, 400, "logit_bias", "bias"),
    (CHAT, {"model": "textgen"}, 400, "messages", "non-empty list"),
    (CHAT, {"model": "textgen", "messages": []}, 400, "messages", "non-empty list"),
    (CHAT, {"model": "textgen", "messages": ["hi"]}, 400, "messages[0]", "object"),
    (
        CHAT,
        {"model": "textgen", "messages": [{"role": "bot", "content": "x"}]},
        400,
        "messages[0].role",
        "one of",
    ),
    (
        CHAT,
        {"model": "textgen", "messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]},
        400,
        "messages[0]",
        "tool",
    ),
    (
        CHAT,
        {
            "model": "textgen",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
                }
            ],
        },
        400,
        "messages[0].content",
        "only text",
    ),
    (
        CHAT,
        {"model": "textgen", "messages": [{"role": "user", "content": 3}]},
        400,
        "messages[0].content",
        "string",
    ),
    (
        CHAT,
        {
            "model": "textgen",
            "messages": USER,
            "tools": [{"type": "function", "function": {"name": "f"}}],
        },
        400,
        "tools",
        "tool and function calling",
    ),
    (
        CHAT,
        {"model": "textgen", "messages": USER, "tool_choice": "auto"},
        400,
        "tool_choice",
        "tool",
    ),
    (
        CHAT,
        {"model": "textgen", "messages": USER, "functions": [{"name": "f"}]},
        400,
        "functions",
        "function",
    ),
    (CHAT, {"model": "textgen", "messages": USER, "logprobs": True}, 400, "logprobs", "log prob"),
    (
        CHAT,
        {"model": "textgen", "messages": USER, "top_logprobs": 2},
        400,
        "top_logprobs",
        "log prob",
    ),
    (CHAT, {"model": "textgen", "messages": USER, "n": 3}, 400, "n", "'n' must be 1"),
    (
        CHAT,
        {"model": "textgen", "messages": USER, "response_format": {"type": "json_object"}},
        400,
        "response_format",
        "JSON modes",
    ),
    (
        CHAT,
        {"model": "textgen", "messages": USER, "modalities": ["audio"]},
        400,
        "modalities",
        "text",
    ),
    (CHAT, {"model": "broken_chat", "messages": USER}, 400, "model", "does not compile"),
    (
        CHAT,
        {"model": "picky_chat", "messages": [{"role": "system", "content": "s"}]},
        400,
        "messages",
        "no system messages here",
    ),
    (EMB, {"model": "embed_chars"}, 400, "input", "'input'"),
    (EMB, {"model": "embed_chars", "input": [[1, 2]]}, 400, "input", "token ids"),
    (EMB, {"model": "embed_chars", "input": []}, 400, "input", "non-empty"),
    (
        EMB,
        {"model": "embed_chars", "input": "x", "encoding_format": "int8"},
        400,
        "encoding_format",
        "base64",
    ),
    (EMB, {"model": "embed_chars", "input": "x", "dimensions": 8}, 400, "dimensions", "fixed"),
    (COMP, {"model": "ticker", "prompt": "fail"}, 500, None, "the model says no"),
    (COMP, {"model": "ticker", "prompt": "fail", "stream": True}, 500, None, "the model says no"),
    (COMP, {"model": "ticker", "prompt": "raise"}, 500, None, "the model raised"),
    (EMB, {"model": "embed_wrong", "input": ["a", "b"]}, 500, None, "expected [2, d]"),
]


@pytest.mark.parametrize(("path", "body", "status", "param", "message"), BAD)
def test_errors(
    server: Server, path: str, body: Any, status: int, param: str | None, message: str
) -> None:
    got, headers, raw = call(server, "POST", path, body)
    assert got == status, raw
    assert headers["content-type"] == "application/json"
    assert b"Traceback" not in raw
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert message in error["message"]
    assert error["param"] == param
    assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error")


def test_the_server_keeps_serving_after_errors(server: Server) -> None:
    for _, body, _, _, _ in BAD[:10]:
        call(server, "POST", CHAT, body)
    status, _, body = call(server, "POST", COMP, {"model": "textgen", "prompt": "still here"})
    assert status == 200 and json.loads(body)["choices"][0]["text"] == "here still"


def _report(server: Server) -> dict[str, Any]:
    status, _, body = call(server, "POST", COMP, {"model": "ticker", "prompt": "report"})
    assert status == 200
    return json.loads(json.loads(body)["choices"][0]["text"])  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", [COMP, CHAT])
@pytest.mark.parametrize("stream", [True, False])
def test_client_leaving_cancels_the_request(server: Server, path: str, stream: bool) -> None:
    key = f"leave-{path.count('/')}-{stream}"
    doc: dict[str, Any] = {"model": "ticker", "stream": stream}
    if path == COMP:
        doc["prompt"] = key
    else:
        doc["messages"] = [{"role": "user", "content": key}]
    conn = _conn(server)
    conn.request("POST", path, body=json.dumps(doc).encode())
    noted = f"user: {key}\nassistant:" if path == CHAT else key
    if stream:
        resp = conn.getresponse()
        assert resp.status == 200 and resp.readline().startswith(b"data: ")  # it is streaming
    else:
        wait_until(lambda: _report(server).get(noted) == "running", 15)
    conn.sock.close()  # type: ignore[union-attr]
    conn.close()
    wait_until(lambda: isinstance(_report(server).get(noted), list), 15)
    cancelled, ticks = _report(server)[noted]
    assert cancelled and ticks < 500


def _stats(server: Server, model: str) -> dict[str, Any]:
    status, _, body = call(server, "GET", f"/v2/models/{model}/stats")
    assert status == 200
    return json.loads(body)["model_stats"][0]["inference_stats"]  # type: ignore[no-any-return]


def _metric(server: Server, name: str, model: str) -> float:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and f'model="{model}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_statistics_and_metrics_count_these_requests(server: Server) -> None:
    before = _stats(server, "upper")["success"]["count"]
    before_metric = _metric(server, "nv_inference_request_success", "upper")
    call(server, "POST", COMP, {"model": "upper", "prompt": "a"})
    call(server, "POST", COMP, {"model": "upper", "prompt": "a", "stream": True})
    call(server, "POST", CHAT, {"model": "upper", "messages": USER})
    assert _stats(server, "upper")["success"]["count"] == before + 3
    wait_until(
        lambda: _metric(server, "nv_inference_request_success", "upper") >= before_metric + 3, 10
    )
    emb = _stats(server, "embed_chars")["success"]["count"]
    call(server, "POST", EMB, {"model": "embed_chars", "input": ["x"] * 9})  # 8 + 1
    assert _stats(server, "embed_chars")["success"]["count"] == emb + 2
