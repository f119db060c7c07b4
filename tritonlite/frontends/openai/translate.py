"""OpenAI parameters -> ``InferRequest``; model responses -> OpenAI objects and stream chunks.

Token counts (``usage``): a model with an integer ``num_tokens`` output reports the tokens of
each response; otherwise each response that carries text counts as one token. Prompt tokens
are the whitespace-separated words of the prompt (of the rendered chat prompt for chat, of
every input string for embeddings). ``finish_reason`` is "length" once the completion tokens
reach ``max_tokens`` (the request is then ended, whether or not the model took ``max_tokens``),
else "stop".
"""

from __future__ import annotations

import base64
import secrets
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tritonlite.contracts.datatypes import numpy_dtype
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse
from tritonlite.frontends.openai.body import Embedding, Generation
from tritonlite.frontends.openai.contract import EmbeddingModel, TextModel
from tritonlite.frontends.openai.errors import OpenAIError, bad

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _array(datatype: str, shape: tuple[int, ...], values: list[Any]) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        return np.array([v.encode() for v in values], dtype=object).reshape(shape)
    return np.array(values, dtype=numpy_dtype(datatype)).reshape(shape)


def text_request(model: TextModel, gen: Generation) -> InferRequest:
    """The request for ``gen.prompt``, with the optional inputs the model declares."""
    req = InferRequest(model.name, model.version)
    text = np.array([gen.prompt.encode()], dtype=object).reshape(model.text_shape)
    req.inputs.append(InferInput("text_input", "BYTES", model.text_shape, text))
    if gen.stop and "stop" not in model.inputs:
        raise bad(
            f"'stop' is not supported by model '{model.name}': it has no 'stop' input",
            "stop",
            "unsupported_parameter",
        )
    values: dict[str, Any] = {
        "max_tokens": gen.max_tokens,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "seed": gen.seed,
        "stream": gen.stream,
    }
    for key, spec in model.inputs.items():
        if key == "stop":
            if not gen.stop:
                continue
            shape = _fill(spec.shape, len(gen.stop))
            if shape is None:
                raise bad(f"model '{model.name}' takes {list(spec.shape)} stop strings", "stop")
            req.inputs.append(
                InferInput(key, spec.datatype, shape, _array(spec.datatype, shape, gen.stop))
            )
            continue
        value = values[key]
        if value is None:
            continue
        try:
            array = _array(spec.datatype, spec.shape, [value])
        except OverflowError:
            raise bad(
                f"'{key}' is out of range for model '{model.name}' ({spec.datatype} input)", key
            ) from None
        req.inputs.append(InferInput(key, spec.datatype, spec.shape, array))
    return req


def _fill(shape: tuple[int, ...], count: int) -> tuple[int, ...] | None:
    """``shape`` with its -1 taking ``count`` elements; None when that cannot hold them."""
    known = 1
    for d in shape:
        known *= 1 if d == -1 else d
    if -1 in shape:
        if count % known:
            return None
        return tuple(count // known if d == -1 else d for d in shape)
    return shape if known == count else None


def _output(resp: InferResponse, name: str) -> np.ndarray[Any, Any] | None:
    for out in resp.outputs:
        if out.name == name:
            return out.data
    return None


def text_of(resp: InferResponse, counts_tokens: bool) -> tuple[str, int]:
    """The text of one response and its tokens (see the module docstring)."""
    data = _output(resp, "text_output")
    if data is None or data.size == 0:
        return "", 0
    text = "".join(
        (v if isinstance(v, bytes) else str(v).encode()).decode("utf-8", "replace")
        for v in data.reshape(-1)
    )
    if counts_tokens:
        tokens = _output(resp, "num_tokens")
        if tokens is not None:
            return text, int(tokens.sum())
    return text, 1 if text else 0


@dataclass(slots=True)
class Progress:
    """One generation as its responses arrive."""

    model: str
    chat: bool
    max_tokens: int | None
    prompt_tokens: int
    id: str = ""
    created: int = 0
    tokens: int = 0
    first: bool = True

    def __post_init__(self) -> None:
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())

    def add(self, tokens: int) -> bool:
        """Count a response's tokens; True once ``max_tokens`` is reached."""
        self.tokens += tokens
        return self.max_tokens is not None and self.tokens >= self.max_tokens

    def finish_reason(self) -> str:
        return (
            "length" if self.max_tokens is not None and self.tokens >= self.max_tokens else "stop"
        )

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.tokens,
            "total_tokens": self.prompt_tokens + self.tokens,
        }

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, text: str) -> bytes:
        """The non-streamed answer."""
        doc = self._head("chat.completion" if self.chat else "text_completion")
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = self.finish_reason()
        doc["choices"] = [choice]
        doc["usage"] = self.usage()
        return orjson.dumps(doc)

    def chunk(self, text: str, finish: str | None = None) -> bytes:
        """One server-sent event carrying ``text`` (or the closing one with ``finish``)."""
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            delta: dict[str, str] = {}
            if self.first:
                delta["role"] = "assistant"
            if finish is None:
                delta["content"] = text
            choice["delta"] = delta
            doc = self._head("chat.completion.chunk")
        else:
            choice["text"] = text
            doc = self._head("text_completion")
        self.first = False
        choice["logprobs"] = None
        choice["finish_reason"] = finish
        doc["choices"] = [choice]
        return b"data: " + orjson.dumps(doc) + b"\n\n"

    def usage_chunk(self) -> bytes:
        doc = self._head("chat.completion.chunk" if self.chat else "text_completion")
        doc["choices"] = []
        doc["usage"] = self.usage()
        return b"data: " + orjson.dumps(doc) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def error_event(exc: OpenAIError) -> bytes:
    return b"data: " + exc.body() + b"\n\n"


def words(text: str) -> int:
    return len(text.split())


def embedding_requests(model: EmbeddingModel, emb: Embedding) -> list[InferRequest]:
    """One request per ``max_batch`` strings (all in one for a non-batching model)."""
    step = model.max_batch or len(emb.inputs)
    out: list[InferRequest] = []
    for start in range(0, len(emb.inputs), step):
        part = emb.inputs[start : start + step]
        shape = (len(part), *model.shape_tail)
        req = InferRequest(model.name, model.version)
        req.inputs.append(InferInput("text_input", "BYTES", shape, _array("BYTES", shape, part)))
        out.append(req)
    return out


def embedding_rows(resp: InferResponse, count: int) -> np.ndarray[Any, Any]:
    """The ``[count, d]`` FP32 ``embedding`` of one response; 500 for any other shape."""
    data = _output(resp, "embedding")
    if data is None or data.ndim != 2 or data.shape[0] != count:
        shape = None if data is None else list(data.shape)
        raise OpenAIError(
            500,
            f"model '{resp.model_name}' answered 'embedding' of shape {shape}, expected [{count}, d]",
        )
    return np.ascontiguousarray(data, dtype=np.float32)


def embeddings(emb: Embedding, rows: list[np.ndarray[Any, Any]]) -> bytes:
    """The ``/v1/embeddings`` answer for the per-request ``rows``."""
    data: list[dict[str, Any]] = []
    for row in (r for block in rows for r in block):
        vector: Any = base64.b64encode(row.astype("<f4").tobytes()).decode() if emb.base64 else row
        data.append({"object": "embedding", "index": len(data), "embedding": vector})
    tokens = sum(words(s) for s in emb.inputs)
    doc = {
        "object": "list",
        "data": data,
        "model": emb.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return orjson.dumps(doc, option=_NUMPY)
