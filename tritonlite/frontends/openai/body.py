"""OpenAI request bodies -> checked parameters; what tritonlite does not do is a 400 naming it.

Unknown keys are ignored (the SDKs add their own, e.g. ``user``); a known feature that is not
built (tools, logprobs, ``n`` > 1, images, audio, penalties, logit bias, JSON mode, ``echo``,
``suffix``, token-id prompts) is refused with ``param`` set to the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from tritonlite.frontends.openai.errors import bad


@dataclass(slots=True)
class Generation:
    """What a completions or chat request asks of a text model."""

    model: str
    prompt: str = ""  # completions: the prompt; chat: filled by rendering ``messages``
    messages: list[dict[str, str]] = field(default_factory=list)  # chat, contents as text
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False


@dataclass(slots=True)
class Embedding:
    model: str
    inputs: list[str]
    base64: bool = False


def parse(body: bytes) -> dict[str, Any]:
    """The request JSON object, or 400."""
    if not body.strip():
        raise bad("The request body is empty; expected a JSON object")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad(f"The request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise bad("The request body must be a JSON object")
    return doc


def model_name(doc: dict[str, Any]) -> str:
    name = doc.get("model")
    if not isinstance(name, str) or not name:
        raise bad("'model' is required and must be a non-empty string", "model")
    return name


def _refuse(doc: dict[str, Any], key: str, what: str, allowed: tuple[Any, ...] = (None,)) -> None:
    value = doc.get(key)
    if value is not None and value not in allowed and key in doc:
        raise bad(f"'{key}' is not supported: {what}", key, "unsupported_parameter")


def _number(doc: dict[str, Any], key: str, low: float, high: float) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise bad(f"'{key}' must be a number from {low:g} to {high:g}, got {value!r}", key)
    return float(value)


def _int(doc: dict[str, Any], key: str, low: int) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise bad(f"'{key}' must be an integer >= {low}, got {value!r}", key)
    return value


def _sampling(doc: dict[str, Any], out: Generation, max_key: str = "max_tokens") -> None:
    n = doc.get("n")
    if n is not None and n != 1:
        raise bad(
            "'n' must be 1: one choice per request is supported", "n", "unsupported_parameter"
        )
    for key in ("presence_penalty", "frequency_penalty"):
        _refuse(doc, key, "penalties are not implemented", (None, 0, 0.0))
    _refuse(doc, "logit_bias", "logit bias is not implemented", (None, {}))
    out.max_tokens = _int(doc, max_key, 1) if doc.get(max_key) is not None else None
    out.temperature = _number(doc, "temperature", 0.0, 2.0)
    out.top_p = _number(doc, "top_p", 0.0, 1.0)
    seed = doc.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise bad(f"'seed' must be an integer, got {seed!r}", "seed")
    if seed is not None and not -(2**63) <= seed < 2**63:
        raise bad("'seed' must fit in 64 bits", "seed")
    out.seed = seed
    stop = doc.get("stop")
    if isinstance(stop, str):
        out.stop = [stop]
    elif isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop):
        out.stop = list(stop)
    elif stop is not None:
        raise bad("'stop' must be a string or a list of up to 4 strings", "stop")
    stream = doc.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise bad("'stream' must be a boolean", "stream")
    out.stream = bool(stream)
    options = doc.get("stream_options")
    if options is not None:
        if not isinstance(options, dict) or not isinstance(
            options.get("include_usage", False), bool
        ):
            raise bad(
                "'stream_options' must be an object with a boolean 'include_usage'",
                "stream_options",
            )
        if not out.stream:
            raise bad("'stream_options' is only allowed when 'stream' is true", "stream_options")
        out.include_usage = bool(options.get("include_usage", False))


def completion(doc: dict[str, Any]) -> Generation:
    """``POST /v1/completions``."""
    out = Generation(model_name(doc))
    prompt = doc.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt) and prompt:
        raise bad(
            "'prompt' lists of several strings are not supported: send one request each",
            "prompt",
            "unsupported_parameter",
        )
    if not isinstance(prompt, str):
        raise bad("'prompt' must be a string (token-id prompts are not supported)", "prompt")
    out.prompt = prompt
    _refuse(doc, "logprobs", "log probabilities are not implemented")
    _refuse(doc, "echo", "echoing the prompt is not implemented", (None, False))
    _refuse(doc, "suffix", "suffixes (insertion) are not implemented", (None, ""))
    _refuse(doc, "best_of", "'best_of' must be 1", (None, 1))
    _sampling(doc, out)
    return out


def _content(i: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise bad(
            f"'messages[{i}].content' must be a string or a list of parts", f"messages[{i}].content"
        )
    texts: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("image_url", "input_audio", "file", "image"):
            raise bad(
                f"'messages[{i}].content' has a part of type '{kind}': only text is supported",
                f"messages[{i}].content",
                "unsupported_content",
            )
        else:
            raise bad(
                f"'messages[{i}].content' parts must be {{'type': 'text', 'text': ...}}",
                f"messages[{i}].content",
            )
    return "".join(texts)


_ROLES = ("system", "developer", "user", "assistant")


def chat(doc: dict[str, Any]) -> Generation:
    """``POST /v1/chat/completions``."""
    out = Generation(model_name(doc))
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty list", "messages")
    for key in ("tools", "functions", "tool_choice", "function_call", "parallel_tool_calls"):
        _refuse(doc, key, "tool and function calling are not implemented", (None, [], "none"))
    _refuse(doc, "logprobs", "log probabilities are not implemented", (None, False))
    _refuse(doc, "top_logprobs", "log probabilities are not implemented", (None, 0))
    _refuse(doc, "audio", "audio output is not implemented")
    modalities = doc.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise bad("'modalities' must be ['text']", "modalities", "unsupported_parameter")
    fmt = doc.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise bad(
            "'response_format' must be {'type': 'text'}: JSON modes are not implemented",
            "response_format",
            "unsupported_parameter",
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise bad(f"'messages[{i}]' must be an object", f"messages[{i}]")
        role = message.get("role")
        if role == "tool" or message.get("tool_calls") or message.get("function_call"):
            raise bad(
                f"'messages[{i}]': tool messages and tool calls are not supported",
                f"messages[{i}]",
                "unsupported_parameter",
            )
        if role not in _ROLES:
            raise bad(
                f"'messages[{i}].role' must be one of {', '.join(_ROLES)}", f"messages[{i}].role"
            )
        out.messages.append({"role": role, "content": _content(i, message.get("content"))})
    max_key = (
        "max_completion_tokens" if doc.get("max_completion_tokens") is not None else "max_tokens"
    )
    _sampling(doc, out, max_key)
    return out


def embedding(doc: dict[str, Any]) -> Embedding:
    """``POST /v1/embeddings``."""
    name = model_name(doc)
    value = doc.get("input")
    inputs = [value] if isinstance(value, str) else value
    if not isinstance(inputs, list) or not inputs or not all(isinstance(s, str) for s in inputs):
        raise bad(
            "'input' must be a string or a non-empty list of strings (token ids are not supported)",
            "input",
        )
    fmt = doc.get("encoding_format", "float")
    if fmt not in ("float", "base64", None):
        raise bad("'encoding_format' must be 'float' or 'base64'", "encoding_format")
    if doc.get("dimensions") is not None:
        raise bad(
            "'dimensions' is not supported: the model's embedding size is fixed",
            "dimensions",
            "unsupported_parameter",
        )
    return Embedding(name, inputs, fmt == "base64")
