"""Which models the OpenAI endpoints can serve, read from a model's config once per config.

A model id is a model's name, or ``name/version`` for one version of it.

Text generation (completions, chat): a BYTES input ``text_input`` holding one element and a
BYTES output ``text_output``; optional inputs filled from the request when the model declares
them: ``max_tokens`` (integer), ``temperature``, ``top_p`` (floating), ``stop`` (BYTES),
``seed`` (integer), ``stream`` (BOOL); an optional integer output ``num_tokens`` reports the
tokens of each response. Any other input must be ``optional: true``. Chat renders its messages
with the config's ``chat_template`` parameter (``template.py``).

Embeddings: a BYTES input ``text_input`` and an FP32 output ``embedding``. A batching model
(``max_batch_size`` > 0, ``text_input`` dims ``[1]``) takes up to ``max_batch_size`` strings a
request, as ``[k, 1]`` -> ``embedding [k, d]``; a non-batching one takes them all as ``[n]``
(dims ``[-1]``) -> ``embedding [n, d]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tritonlite.contracts.errors import TritonliteError
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.openai.errors import OpenAIError, bad, from_core, unknown_model
from tritonlite.frontends.openai.template import Template, compile_template

T = TypeVar("T")

_INTS = ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64")
_FLOATS = ("FP16", "FP32", "FP64", "BF16")
# the optional generation inputs and the datatypes each may be declared with
OPTIONAL: dict[str, tuple[str, ...]] = {
    "max_tokens": _INTS,
    "temperature": _FLOATS,
    "top_p": _FLOATS,
    "stop": ("BYTES",),
    "seed": _INTS,
    "stream": ("BOOL",),
}


@dataclass(slots=True)
class Spec:
    datatype: str
    shape: tuple[int, ...]  # the request's shape; -1 left where the element count goes


@dataclass(slots=True)
class TextModel:
    name: str
    text_shape: tuple[int, ...]
    version: int = -1  # the id's ``name/version``; -1: the highest ready version
    inputs: dict[str, Spec] = field(default_factory=dict)  # the optional ones it declares
    counts_tokens: bool = False  # it has a ``num_tokens`` output
    template: Template | None = None  # None until a chat request needs it
    template_error: str = ""


@dataclass(slots=True)
class EmbeddingModel:
    name: str
    max_batch: int  # strings per request; 0: all of them in one
    shape_tail: tuple[int, ...]  # after the string count: (1,) batching, () otherwise
    version: int = -1


def _not_following(name: str, what: str, detail: str) -> OpenAIError:
    return bad(
        f"model '{name}' does not follow the {what} contract: {detail}",
        "model",
        "model_not_supported",
    )


def split_id(model_id: str) -> tuple[str, int]:
    """A model id, ``name`` or ``name/version`` -> (name, version; -1 for the highest ready)."""
    name, _, version = model_id.rpartition("/")
    if name and version.isdigit() and version.isascii():
        return name, int(version)
    return model_id, -1


def _lookup(core: CoreAPI, model_id: str) -> tuple[dict[str, Any], Any]:
    name, version = split_id(model_id)
    try:
        return core.model_metadata(name, version), core.model_config(name, version)
    except TritonliteError as exc:
        if exc.code.name == "NOT_FOUND":
            raise unknown_model(model_id) from None
        raise from_core(exc, True) from None


def _request_shape(name: str, spec: dict[str, Any], batched: bool) -> tuple[int, ...]:
    dims = list(spec["shape"][1:] if batched else spec["shape"])
    return tuple(([1] if batched else []) + dims)


def _text(name: str, version: int, meta: dict[str, Any], config: Any) -> TextModel:
    what = "text generation"
    ins = {s["name"]: s for s in meta["inputs"]}
    outs = {s["name"]: s for s in meta["outputs"]}
    batched = config.max_batch_size > 0
    text = ins.get("text_input")
    if text is None or text["datatype"] != "BYTES":
        raise _not_following(name, what, "it has no BYTES (TYPE_STRING) input 'text_input'")
    out = outs.get("text_output")
    if out is None or out["datatype"] != "BYTES":
        raise _not_following(name, what, "it has no BYTES (TYPE_STRING) output 'text_output'")
    shape = tuple(1 if d == -1 else d for d in _request_shape(name, text, batched))
    if any(d != 1 for d in shape):
        raise _not_following(
            name, what, f"'text_input' must hold one string, its shape is {list(text['shape'])}"
        )
    model = TextModel(name, shape, version)
    optional = {i.name for i in config.input if i.optional}
    for key, spec in ins.items():
        if key == "text_input":
            continue
        types = OPTIONAL.get(key)
        if types is None:
            if key not in optional:
                raise _not_following(
                    name, what, f"its input '{key}' is neither a contract input nor optional"
                )
            continue
        if spec["datatype"] not in types:
            raise _not_following(
                name,
                what,
                f"input '{key}' must be one of {', '.join(types)}, it is {spec['datatype']}",
            )
        req = _request_shape(name, spec, batched)
        if key != "stop" and any(d not in (1, -1) for d in req):
            raise _not_following(name, what, f"input '{key}' must hold one value")
        model.inputs[key] = Spec(
            spec["datatype"], tuple(1 if d == -1 and key != "stop" else d for d in req)
        )
    tokens = outs.get("num_tokens")
    model.counts_tokens = tokens is not None and tokens["datatype"] in _INTS
    source = (
        config.parameters["chat_template"].string_value
        if "chat_template" in config.parameters
        else ""
    )
    try:
        model.template = compile_template(source)
    except ValueError as exc:
        model.template_error = f"model '{name}' has a chat_template that does not compile: {exc}"
    return model


def _embedding(name: str, version: int, meta: dict[str, Any], config: Any) -> EmbeddingModel:
    what = "embedding"
    ins = {s["name"]: s for s in meta["inputs"]}
    outs = {s["name"]: s for s in meta["outputs"]}
    text = ins.get("text_input")
    if text is None or text["datatype"] != "BYTES":
        raise _not_following(name, what, "it has no BYTES (TYPE_STRING) input 'text_input'")
    emb = outs.get("embedding")
    if emb is None or emb["datatype"] != "FP32":
        raise _not_following(name, what, "it has no FP32 output 'embedding'")
    required = {i.name for i in config.input if not i.optional} - {"text_input"}
    if required:
        raise _not_following(name, what, f"its inputs {sorted(required)} are not part of it")
    dims = list(text["shape"][1:] if config.max_batch_size > 0 else text["shape"])
    if config.max_batch_size > 0:
        if dims != [1]:
            raise _not_following(name, what, "a batching model's 'text_input' must have dims [1]")
        return EmbeddingModel(name, config.max_batch_size, (1,), version)
    if dims != [-1]:
        raise _not_following(name, what, "a non-batching model's 'text_input' must have dims [-1]")
    return EmbeddingModel(name, 0, (), version)


class Contracts:
    """The contract of each model, rebuilt when the model's config object changes (a reload)."""

    __slots__ = ("_text", "_embedding")

    def __init__(self) -> None:
        self._text: dict[str, tuple[Any, TextModel | OpenAIError]] = {}
        self._embedding: dict[str, tuple[Any, EmbeddingModel | OpenAIError]] = {}

    def text(self, core: CoreAPI, model_id: str) -> TextModel:
        """The text-generation contract of ``model_id`` (404 unknown, 400 not following)."""
        return self._get(self._text, _text, core, model_id)

    def embedding(self, core: CoreAPI, model_id: str) -> EmbeddingModel:
        """The embedding contract of ``model_id`` (404 unknown, 400 not following)."""
        return self._get(self._embedding, _embedding, core, model_id)

    @staticmethod
    def _get(
        cache: dict[str, tuple[Any, T | OpenAIError]],
        build: Callable[[str, int, dict[str, Any], Any], T],
        core: CoreAPI,
        model_id: str,
    ) -> T:
        name, version = split_id(model_id)
        try:
            config = core.model_config(name, version)
        except TritonliteError as exc:
            if exc.code.name == "NOT_FOUND":
                raise unknown_model(model_id) from None
            raise from_core(exc, True) from None
        hit = cache.get(model_id)
        if hit is None or hit[0] is not config:
            meta, config = _lookup(core, model_id)
            try:
                found: T | OpenAIError = build(name, version, meta, config)
            except OpenAIError as exc:
                found = exc
            if len(cache) > 1024:
                cache.clear()
            hit = cache[model_id] = (config, found)
        kept = hit[1]
        if isinstance(kept, OpenAIError):  # a fresh one: a raised exception keeps its traceback
            raise OpenAIError(kept.status, kept.message, kept.param, kept.code)
        return kept
