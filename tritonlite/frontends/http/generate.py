"""Triton's generate extension: ``/generate`` and ``/generate_stream`` wire JSON.

Request: one JSON object. A key that names a model input becomes that input: a scalar is one
element, a (nested) list its elements in row-major order; the shape is the input's config
shape (a batching model's batch dimension is 1; a ``-1`` dimension takes what is left, the last
one when there are several). ``parameters`` (an object) and every other top-level key become
request parameters, ``id`` (a string) included, which is also the request's id, as in Triton.

Response: one JSON object per response, keys sorted: ``model_name``, ``model_version``, ``id``
when the request had one, and one key per output (a one-element tensor as its value, others as
a flat list; BYTES as UTF-8 strings). ``/generate`` answers one response; a model that gives
none or several gets Triton's "exactly 1 response" error, with status 200 as Triton sends it.
``/generate_stream`` sends server-sent events, ``data: <json>\\n\\n`` per response, an error as
``{"error": ...}``; the status is fixed by the first event (400 when it is an error); a
flags-only final sends nothing. A request refused before it reaches a model (unknown model,
bad inputs) is a plain JSON error with its mapped status. Unlike Triton, which answers 500 to
JSON it cannot convert (a string for an INT32 input, a non-string id), those are 400 here,
with Triton's words for a value of the wrong JSON kind ("Unable to parse JSON bytes array:
attempt to access JSON non-string as string" for a BYTES input, and so on).
A key given twice in one JSON object is 400: for a model input with Triton's message
("input 'X' already exists in request"); Triton keeps the first of other repeated keys and
garbles the request's parameters, tritonlite refuses those too ("duplicate key ...").

A client that goes away mid-stream cancels its request (the model sees ``is_cancelled()``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from tritonlite.contracts.errors import TritonliteError, invalid_arg
from tritonlite.contracts.stream import StreamResponse
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.http_call import HttpRequest, HttpResponse, HttpStream, StreamWriter
from tritonlite.frontends.base.http_errors import STATUS, error
from tritonlite.frontends.http import codec

ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for "
    "model that generates various number of responses"
)
_SSE = "text/event-stream; charset=utf-8"
_PARAM_TYPES = "It should be either 'int', 'bool', or 'string'."
_DISCONNECT_POLL_S = 0.5  # how often a waiting stream checks that its client is still there


def _parameter(key: str, value: Any, where: str) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    raise invalid_arg(f"{where}parameter '{key}' has invalid type. {_PARAM_TYPES}")


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _check_duplicates(body: bytes, doc: dict[str, Any], specs: dict[str, Any]) -> None:
    """INVALID_ARG when an object of ``body`` (already parsed as ``doc``) repeats a key.

    orjson keeps the last of repeated keys silently; this second, stdlib parse sees them."""
    try:
        json.loads(body, object_pairs_hook=_no_duplicates)
    except _Duplicate as dup:
        rid = doc.get("id")
        prefix = f"[request id: {rid if isinstance(rid, str) and rid else '<id_unknown>'}] "
        if dup.key in specs:
            raise invalid_arg(f"{prefix}input '{dup.key}' already exists in request") from None
        raise invalid_arg(f"{prefix}duplicate key '{dup.key}' in the request JSON") from None
    except ValueError:
        pass  # what orjson accepted and json does not (e.g. lone surrogates) is not ours


def _shape(name: str, dims: list[int], count: int) -> list[int]:
    """``dims`` with its -1s filled for ``count`` elements (the last -1 takes what is left)."""
    known = 1
    for d in dims:
        if d != -1:
            known *= d
    wild = [i for i, d in enumerate(dims) if d == -1]
    out = list(dims)
    if wild:
        for i in wild[:-1]:
            out[i] = 1
        if known == 0 or count % known:
            raise invalid_arg(
                f"The schema can not convert input '{name}' to tensor with proper shape"
            )
        out[wild[-1]] = count // known
    elif known != count:
        raise invalid_arg(f"The schema can not convert input '{name}' to tensor with proper shape")
    return out


_NOT_STRING = "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
_NOT_BOOL = "Unable to parse 'data': attempt to access JSON non-boolean as boolean"
_NOT_INT = "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
_NOT_UINT = (
    "Unable to parse 'data': attempt to access JSON non-unsigned-integer as unsigned-integer"
)


def _wrong_kind(datatype: str, v: Any) -> str:
    """Why ``v`` cannot be an element of a ``datatype`` input ("" when it can, or when the
    shared codec decides: floats and ranges)."""
    if datatype == "BYTES":
        return "" if isinstance(v, str) else _NOT_STRING
    if datatype == "BOOL":
        return "" if isinstance(v, bool) else _NOT_BOOL
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if datatype.startswith("INT"):
        return "" if is_int else _NOT_INT
    if datatype.startswith("UINT"):
        return "" if is_int and v >= 0 else _NOT_UINT
    return ""


def _check_types(datatype: str, flat: list[Any]) -> None:
    """Triton's words (its TritonJson accessors' errors) for a JSON value of the wrong kind."""
    if datatype == "BYTES" or datatype == "BOOL" or "INT" in datatype:
        for v in flat:
            why = _wrong_kind(datatype, v)
            if why:
                raise invalid_arg(why)


def _input(spec: dict[str, Any], value: Any, batched: bool) -> InferInput:
    name, datatype = spec["name"], spec["datatype"]
    flat = codec._flatten(value) if isinstance(value, list) else [value]
    _check_types(datatype, flat)
    dims = list(spec["shape"][1:] if batched else spec["shape"])
    shape = tuple(([1] if batched else []) + _shape(name, dims, len(flat)))
    return InferInput(name, datatype, shape, codec.json_to_array(name, datatype, shape, flat))


def decode(core: CoreAPI, body: bytes, name: str, version: int) -> InferRequest:
    """A generate request body -> the InferRequest it asks for (see the module docstring)."""
    if not body.strip():
        raise invalid_arg("failed to parse the request JSON buffer: The document is empty.")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(doc, dict):
        raise invalid_arg("generate request must be a JSON object")
    meta = core.model_metadata(name, version)
    batched = core.model_config(name, version).max_batch_size > 0
    specs = {s["name"]: s for s in meta["inputs"]}
    _check_duplicates(body, doc, specs)
    req = InferRequest(name, version)
    params: dict[str, Any] = {}
    for key, value in doc.items():
        spec = specs.get(key)
        if spec is not None:
            req.inputs.append(_input(spec, value, batched))
        elif key == "parameters":
            if not isinstance(value, dict):
                raise invalid_arg("Expected JSON object for keyword: 'parameters'")
            for k, v in value.items():
                params[k] = _parameter(k, v, "Converting keyword: 'parameters': ")
        else:
            if key == "id":
                if not isinstance(value, str):
                    raise invalid_arg("Unable to parse 'id': expected a string")
                req.id = value
            params[key] = _parameter(key, value, "")
    req.parameters = params
    return req


def _value(name: str, arr: Any) -> Any:
    data = codec.json_data(name, arr)
    values = data if isinstance(data, list) else data.tolist()
    return values[0] if len(values) == 1 else values


def encode(resp: InferResponse) -> bytes:
    """One response as generate's JSON object."""
    doc: dict[str, Any] = {"model_name": resp.model_name, "model_version": resp.model_version}
    if resp.id:
        doc["id"] = resp.id
    for key, value in resp.parameters.items():  # Triton merges the response's parameters in
        doc[key] = value
    for out in resp.outputs:
        if out.data is not None:
            doc[out.name] = _value(out.name, out.data)
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def _error(message: str) -> bytes:
    return orjson.dumps({"error": message})


def _event(item: StreamResponse) -> bytes | None:
    if item.error is not None:
        body = _error(item.error.message)
    elif item.response is not None:
        try:
            body = encode(item.response)
        except TritonliteError as exc:
            body = _error(exc.message)
    else:
        return None
    return b"data: " + body + b"\n\n"


def _refusal(item: StreamResponse) -> HttpResponse:
    assert item.error is not None
    return error(STATUS[item.error.code], item.error.message)


def _json(body: bytes) -> HttpResponse:
    return HttpResponse(200, [body], "application/json")


async def generate(items: AsyncGenerator[StreamResponse, None]) -> HttpResponse:
    """``/generate``: the one response of the request, or why there is not exactly one."""
    answers: list[StreamResponse] = []
    try:
        async for item in items:
            if item.refused:
                return _refusal(item)
            if item.response is not None or item.error is not None:
                answers.append(item)
                if len(answers) > 1:
                    break  # closing ``items`` cancels the rest
    finally:
        await items.aclose()
    if len(answers) != 1:
        return _json(_error(ONE_RESPONSE))
    (only,) = answers
    if only.error is not None:
        return error(400, only.error.message)
    assert only.response is not None
    try:
        return _json(encode(only.response))
    except TritonliteError as exc:
        return error(STATUS[exc.code], exc.message)


async def next_item(
    request: HttpRequest, items: AsyncGenerator[StreamResponse, None]
) -> StreamResponse | None:
    """The next item; None when the stream ended or the client went away meanwhile."""
    step = asyncio.ensure_future(items.__anext__())
    try:
        while True:
            done, _ = await asyncio.wait({step}, timeout=_DISCONNECT_POLL_S)
            if done:
                try:
                    return step.result()
                except StopAsyncIteration:
                    return None
            if request.disconnected():
                return None
    finally:
        if not step.done():
            step.cancel()
            await asyncio.gather(step, return_exceptions=True)


async def generate_stream(
    request: HttpRequest, items: AsyncGenerator[StreamResponse, None]
) -> HttpResponse | HttpStream:
    """``/generate_stream``: one server-sent event per response, as they come.

    The status is fixed by the first item, so it is awaited here; the transport then runs
    ``send`` (always, once), which owns ``items`` from there on and closes it."""
    try:
        first = await next_item(request, items)
    except BaseException:
        await items.aclose()
        raise
    if first is not None and first.refused:
        await items.aclose()
        return _refusal(first)
    status = 400 if first is not None and first.error is not None else 200

    async def send(out: StreamWriter) -> None:
        item = first
        try:
            while item is not None:
                event = _event(item)
                if event is not None:
                    await out.write(event)
                if item.final:
                    break
                item = await next_item(request, items)
        except ConnectionError:  # the client went away; ``finally`` cancels the request
            pass
        finally:
            await items.aclose()

    return HttpStream(status, _SSE, send)
