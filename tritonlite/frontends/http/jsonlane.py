"""The JSON lane: a JSON infer request that is only its inputs, answered without the request
and response objects.

The commonest JSON client sends ``{"inputs": [{"name", "datatype", "shape", "data"}, ...]}``
and nothing else (no id, parameters or requested outputs: every output comes back as JSON).
The ``infer`` handler asks ``answer`` for such a body unless headers are forwarded as
parameters (``--http-header-forward-pattern``).
``answer`` reads such a document's inputs straight into arrays (``jsondata.plain_inputs``),
hands them to the model's single-request lane (``CoreAPI.infer_plain``: taken only once
that lane has seen the same input structure pass validation, so nothing here raises for a
bad request) and writes the response document from the output arrays -- the bytes
``codec.encode_infer`` writes for the same response. Anything else (another form, an error
to word, a structure not seen yet, a lane that would not answer now) is None with nothing
done: the handler then decodes the same document into a request and takes the general path.
False: the lane ran the request and the run failed; the handler then takes ``CoreAPI.infer``
at once (not ``infer_now``), so that the request is run once more at most.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.http_call import HttpResponse
from tritonlite.frontends.http import codec, jsondata
from tritonlite.frontends.http.codec import json_data

__all__ = ["PARSED", "answer", "ask", "response"]

_plain_inputs = jsondata.plain_inputs
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_JSON = "application/json"


def answer(core: CoreAPI, doc: Any, name: str, version: int) -> bytes | Literal[False] | None:
    """The response body of ``doc`` (a parsed JSON request body) for model ``name``
    ``version``, or None, or False (see the module's docstring)."""
    if type(doc) is not dict or len(doc) != 1:
        return None
    plain = _plain_inputs(doc.get("inputs"))
    if plain is None:
        return None
    got = core.infer_plain(name, version, plain[0], plain[1])
    if got is None or got is False:
        return got
    model_name, model_version, outs = got
    heads = _HEADS
    top = heads.get((model_name, model_version))
    if top is None:
        top = _remember((model_name, model_version), _top(model_name, model_version))
    parts = [top]
    for o, dt, arr in outs:
        frame = (o, dt, arr.shape)
        head = heads.get(frame)
        if head is None:
            head = _remember(frame, _head(o, dt, arr.shape))
        parts.append(head)
        parts.append(orjson.dumps(json_data(o, arr), option=_NUMPY))
        parts.append(b"},")
    if outs:
        parts[-1] = b"}]}"
    else:
        parts.append(b"]}")
    return b"".join(parts)


# The response document written in pieces, each by orjson (so each is the bytes it writes for
# the whole document): the top up to the outputs' list, and each output's members but its
# data, by model name and version or by output name, datatype and shape.
_HEADS: dict[tuple[Any, ...], bytes] = {}
_HEADS_MAX = 1024  # entries; the record starts over when full


def _remember(key: tuple[Any, ...], piece: bytes) -> bytes:
    if len(_HEADS) >= _HEADS_MAX:
        _HEADS.clear()
    _HEADS[key] = piece
    return piece


def _top(model_name: str, model_version: str) -> bytes:
    """``{"model_name":..,"model_version":..,"outputs":[``."""
    whole = orjson.dumps({"model_name": model_name, "model_version": model_version, "outputs": []})
    return whole[:-2]  # (less its "]}")


def _head(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    """``{"name":..,"datatype":..,"shape":[..],"data":`` (a shape tuple is written as the
    list encode_infer makes)."""
    whole = orjson.dumps({"name": name, "datatype": datatype, "shape": shape})
    return whole[:-1] + b',"data":'


def ask(core: CoreAPI, body: bytes, name: str, version: int) -> tuple[Any, Any]:
    """``body`` parsed (None where it is not JSON: the general decode words that) and
    ``answer``'s verdict on it."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    return doc, answer(core, doc, name, version)


def response(body: bytes, accept: str | None) -> HttpResponse:
    """``infer``'s response for ``answer``'s body, compressed as ``accept`` asks."""
    if accept is not None:
        picked = codec.pick_encoding(accept)
        if picked is not None:
            return HttpResponse(
                200, [codec.compress(body, picked)], _JSON, {"Content-Encoding": picked}
            )
    return HttpResponse(200, [body], _JSON)


class Parsed:
    """A body ``json_infer`` parsed and did not answer, for the ``infer`` handler that takes
    it next on the same loop turn: the body (identity: the same bytes object), its document
    and what ``answer`` said (None, or False: its run failed)."""

    __slots__ = ("body", "doc", "plain")

    def __init__(self) -> None:
        self.body: Any = None
        self.doc: Any = None
        self.plain: Any = None


PARSED = Parsed()  # one: the native transport and the handler run on one loop
