"""The OpenAI-compatible endpoints driven by the official ``openai`` Python SDK, sync and async,
streamed and not, against a real server serving the bundled ``textgen`` and ``embed_chars``."""

from __future__ import annotations

import asyncio
import base64
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest
from conftest import Server, start_server
from openai_repo import build_openai_repo, embed_flat_reference

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = build_openai_repo(tmp_path_factory.mktemp("openai_repo"))
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


def _base(server: Server) -> str:
    return f"http://{server.http_url}/v1"


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=_base(server), api_key="unused", max_retries=0, timeout=30)
    yield c
    c.close()


def embed_chars(text: str) -> np.ndarray:
    """What ``tools/examples/embed_chars`` computes, written again here."""
    padded = f"  {text.lower()} "
    v = np.zeros(64, np.float32)
    for i in range(len(padded) - 2):
        v[zlib.crc32(padded[i : i + 3].encode()) % 64] += 1
    return v / np.linalg.norm(v)


def test_models(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == sorted(ids) and {"textgen", "embed_chars", "ticker"} <= set(ids)
    model = client.models.retrieve("textgen")
    assert (model.id, model.object, model.owned_by) == ("textgen", "model", "tritonlite")
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("absent")
    assert "'absent' does not exist" in str(info.value)
    assert client.models.retrieve("textgen/1").id == "textgen/1"  # name/version: one version
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("textgen/7")


def test_a_version_by_name_slash_version(client: openai.OpenAI) -> None:
    r = client.completions.create(model="textgen/1", prompt="x y")
    assert (r.model, r.choices[0].text) == ("textgen/1", "y x")
    e = client.embeddings.create(model="embed_chars/1", input="abc")
    np.testing.assert_allclose(e.data[0].embedding, embed_chars("abc"), rtol=1e-6)
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(
            model="textgen/2", messages=[{"role": "user", "content": "x"}]
        )
    assert "'textgen/2' does not exist" in info.value.message


def test_completion(client: openai.OpenAI) -> None:
    r = client.completions.create(model="textgen", prompt="hello big world")
    assert r.object == "text_completion" and r.model == "textgen" and r.id.startswith("cmpl-")
    (choice,) = r.choices
    assert (choice.text, choice.finish_reason, choice.index) == ("world big hello", "stop", 0)
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 3, 6)


def test_completion_parameters_reach_the_model(client: openai.OpenAI) -> None:
    r = client.completions.create(model="textgen", prompt="a b c d e", max_tokens=2)
    assert (r.choices[0].text, r.choices[0].finish_reason) == ("e d", "length")
    r = client.completions.create(model="textgen", prompt="a b cx d e", stop=["x"])
    assert (r.choices[0].text, r.choices[0].finish_reason) == ("e d", "stop")
    r = client.completions.create(model="textgen", prompt="a b c d", top_p=0.5)
    assert r.choices[0].text == "d c"
    words = "a b c d e f g h".split()
    shuffled = [
        client.completions.create(model="textgen", prompt=" ".join(words), temperature=1.0, seed=s)
        for s in (7, 7, 8)
    ]
    texts = [r.choices[0].text for r in shuffled]
    assert texts[0] == texts[1] and sorted(texts[0].split()) == words


def test_completion_stream(client: openai.OpenAI) -> None:
    chunks = list(client.completions.create(model="textgen", prompt="one two three", stream=True))
    assert [c.choices[0].text for c in chunks] == ["three", " two", " one", ""]
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, "stop"]
    assert len({c.id for c in chunks}) == 1


def test_chat(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="textgen",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "red green blue"}]},
        ],
    )
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    (choice,) = r.choices
    assert (choice.message.role, choice.message.content) == ("assistant", "blue green red")
    assert choice.finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens == 3
    # the template's rendering: <|system|> be brief <|user|> red green blue <|assistant|>
    assert r.usage.prompt_tokens == 8


def test_chat_stream_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="textgen",
        messages=[{"role": "user", "content": "x y"}],
        stream=True,
        stream_options={"include_usage": True},
        max_completion_tokens=5,
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert [d.content for d in deltas] == ["y", " x", None]
    assert deltas[0].role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 2


def test_max_tokens_ends_a_stream(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="ticker", messages=[{"role": "user", "content": "long"}], stream=True, max_tokens=3
    )
    chunks = list(stream)
    assert [c.choices[0].delta.content for c in chunks] == ["t0 ", "t1 ", "t2 ", None]
    assert chunks[-1].choices[0].finish_reason == "length"


def test_non_decoupled_model(client: openai.OpenAI) -> None:
    r = client.completions.create(model="upper", prompt="shout this")
    assert r.choices[0].text == "SHOUT THIS"
    assert r.usage is not None and r.usage.completion_tokens == 1  # one response, one token
    chunks = list(client.completions.create(model="upper", prompt="ab", stream=True))
    assert [c.choices[0].text for c in chunks] == ["AB", ""]


def test_embeddings(client: openai.OpenAI) -> None:
    texts = [f"sentence number {i}" for i in range(11)]  # 2 requests of up to 8 strings
    r = client.embeddings.create(model="embed_chars", input=texts)
    assert r.model == "embed_chars" and [d.index for d in r.data] == list(range(11))
    got = np.array([d.embedding for d in r.data], np.float32)
    np.testing.assert_allclose(got, np.stack([embed_chars(t) for t in texts]), rtol=1e-6)
    assert r.usage.prompt_tokens == 33
    one = client.embeddings.create(model="embed_chars", input="Hello there")
    np.testing.assert_allclose(one.data[0].embedding, embed_chars("Hello there"), rtol=1e-6)
    flat = client.embeddings.create(model="embed_flat", input=["a", "banana"])
    np.testing.assert_array_equal(
        [d.embedding for d in flat.data], embed_flat_reference(["a", "banana"])
    )


def test_embeddings_base64(client: openai.OpenAI) -> None:
    r = client.embeddings.create(model="embed_chars", input=["abc"], encoding_format="base64")
    data: Any = r.data[0].embedding  # asked for explicitly, the SDK leaves it encoded
    vector = np.frombuffer(base64.b64decode(data), "<f4")
    np.testing.assert_allclose(vector, embed_chars("abc"), rtol=1e-6)


def test_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="absent", prompt="x")
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="textgen", messages=[{"role": "user", "content": "x"}], n=2
        )
    assert bad.value.body["param"] == "n"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as bad:
        client.embeddings.create(model="textgen", input="x")
    assert "embedding contract" in bad.value.message
    with pytest.raises(openai.InternalServerError) as failed:
        client.completions.create(model="ticker", prompt="fail")
    assert "the model says no" in failed.value.message
    with pytest.raises(openai.InternalServerError):
        list(client.completions.create(model="ticker", prompt="fail", stream=True))
    stream = client.completions.create(model="ticker", prompt="fail-late", stream=True)
    with pytest.raises(openai.APIError) as late:
        for _ in stream:
            pass
    assert "failed after one chunk" in str(late.value)


def test_async_client(server: Server) -> None:
    async def main() -> tuple[Any, ...]:
        async with openai.AsyncOpenAI(base_url=_base(server), api_key="x", max_retries=0) as c:
            whole = await c.chat.completions.create(
                model="textgen", messages=[{"role": "user", "content": "p q r"}]
            )
            stream = await c.completions.create(model="textgen", prompt="p q r", stream=True)
            texts = [chunk.choices[0].text async for chunk in stream]
            emb, models = await asyncio.gather(
                c.embeddings.create(model="embed_chars", input=["p", "q"]), c.models.list()
            )
            return whole, texts, emb, models

    whole, texts, emb, models = asyncio.run(main())
    assert whole.choices[0].message.content == "r q p"
    assert texts == ["r", " q", " p", ""]
    np.testing.assert_allclose(emb.data[1].embedding, embed_chars("q"), rtol=1e-6)
    assert "textgen" in [m.id for m in models.data]
