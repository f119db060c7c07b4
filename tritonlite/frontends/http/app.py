"""The HTTP front end: Triton's route matcher, then decode -> one core call -> encode.

Routes are matched on the raw path with Triton's own patterns (PROTOCOL §1.1); anything else
is 404 ``{"error":"Not Found"}`` and a wrong method 405. Handlers are written against the call
interface (``frontends/base/http_call.py``), not a framework: ``make_dispatch`` is what both
transports run, aiohttp's low-level server (``aio.py``) and the native HTTP/1.1 layer
(``frontends/wire/http1.py``). ``Expect: 100-continue`` is the transport's (sent on the first
``read()``); an unknown expectation is 417 here. The native layer also asks
``make_json_infer``'s call first for a complete POST body: the JSON lane's answer to an
infer request, without the request's coroutines (anything else goes to ``dispatch``).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

import orjson

from tritonlite.contracts.errors import TritonliteError, invalid_arg, unsupported
from tritonlite.contracts.versions import parse_version
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base import restrict
from tritonlite.frontends.base.forward import HeaderForward, http_forward
from tritonlite.frontends.base.http_call import (
    Dispatch,
    HttpError,
    HttpRequest,
    HttpResponse,
    HttpStream,
    JsonInfer,
)
from tritonlite.frontends.base.http_errors import STATUS, error
from tritonlite.frontends.http import codec, jsonlane
from tritonlite.frontends.http import generate as gen
from tritonlite.frontends.http import openai as oai
from tritonlite.frontends.http.tracing import traced
from tritonlite.options import ServerOptions

log = logging.getLogger("tritonlite")

Request = HttpRequest
Response = HttpResponse | HttpStream
Handler = Callable[[Request, CoreAPI, "re.Match[str]"], Awaitable[Response]]

_JSON = "application/json"
_DECOUPLED = "HTTP end point doesn't support models with decoupled transaction policy"


def _json(doc: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status, [orjson.dumps(doc)], _JSON)


def _empty(status: int = 200) -> HttpResponse:
    return HttpResponse(status)


async def _body_json(request: Request, *, allow_empty: bool = True) -> Any:
    body = await request.read()
    if not body.strip():
        if allow_empty:
            return {}
        raise invalid_arg("request body must not be empty")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(doc, dict):
        raise invalid_arg("request body must be a JSON object")
    return doc


def _version(m: re.Match[str], group: int = 2) -> int:
    v = m.group(group)
    return parse_version(v) if v is not None else -1


def _name(m: re.Match[str], group: int = 1) -> str:
    name = m.group(group)
    return unquote(name) if "%" in name else name


def _peer_is_local(request: Request) -> bool:
    peer = request.peer
    if not peer or not isinstance(peer, tuple):
        return True  # unix socket
    try:
        return ipaddress.ip_address(peer[0]).is_loopback
    except ValueError:
        return False


# -- handlers -------------------------------------------------------------------------------------
async def live(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    return _empty(200) if core.is_live() else error(503, "Server is not live")


async def ready(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    if core.exiting:
        return error(503, "Server is exiting")
    return _empty(200 if core.is_ready() else 400)


async def server_metadata(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    return _json(core.server_metadata())


async def model_metadata(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    return _json(core.model_metadata(_name(m), _version(m)))


async def model_ready(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    # Triton answers 400 "Model version not ready" for unknown models and versions too.
    try:
        ready = core.model_ready(_name(m), _version(m))
    except TritonliteError:
        ready = False
    return _empty(200) if ready else error(400, "Model version not ready")


async def model_config(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    return HttpResponse(200, [core.model_config_json(_name(m), _version(m))], _JSON)


async def model_stats(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    name = _name(m) if m.lastindex and m.group(1) is not None else ""
    return _json(core.statistics(name, _version(m) if name else -1))


async def all_stats(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    return _json(core.statistics())


async def infer(
    request: Request, core: CoreAPI, m: re.Match[str], forward: HeaderForward | None = None
) -> HttpResponse:
    recv_start = time.monotonic_ns() if core.trace.enabled else 0
    fields = request.headers
    encoding = fields.get("Content-Encoding")
    if encoding is not None:
        encoding = encoding.strip().lower()
        if encoding not in ("identity", "gzip", "deflate", ""):
            return error(
                501,
                f"Unsupported compression type '{encoding}'",
                {"Accept-Encoding": "gzip, deflate"},
            )
    body = await request.read()
    recv_end = time.monotonic_ns() if recv_start else 0
    header = fields.get("Inference-Header-Content-Length")
    name = m.group(1)  # (``_name`` and ``_version``, written out: every request comes here)
    if "%" in name:
        name = unquote(name)
    v = m.group(2)
    version = parse_version(v) if v is not None else -1
    if header is not None:
        try:
            header_len = int(header)
        except ValueError:
            raise invalid_arg(f"invalid Inference-Header-Content-Length '{header}'") from None
    else:
        header_len = None
    ran = False  # the JSON lane ran it and the run failed: the general path at once
    if header_len == 0 or (header_len is None and not body):
        # Triton reads an empty body as a raw input of 0 bytes, not as JSON, header or not
        req = codec.raw_binary_request(name, version, body)
    elif header_len is None and forward is None:
        parsed = jsonlane.PARSED
        if body is parsed.body:  # ``json_infer`` parsed it and asked the lane: left to us
            doc, plain = parsed.doc, parsed.plain
            parsed.body = parsed.doc = None
        else:
            doc, plain = jsonlane.ask(core, body, name, version)
        if plain is not None:
            if plain is not False:
                return jsonlane.response(plain, fields.get("Accept-Encoding"))
            ran = True
        if doc is None:
            req = codec.decode_infer(body, header_len, name, version)
        else:
            req = codec.decode_json(doc, body, name, version)
    else:
        req = codec.decode_infer(body, header_len, name, version)
    if forward is not None:
        forward.http(fields, req.parameters)
    # the commonest request, answered at once; None: not covered
    resp = None if ran else core.infer_now(req)
    if resp is None:
        resp = await core.infer(req, _DECOUPLED)
    parts, head_len, has_binary = codec.encode_infer(resp)
    headers: dict[str, str] | None = None
    if has_binary:
        headers = {"Inference-Header-Content-Length": str(head_len)}
        content_type = "application/octet-stream"
    else:
        content_type = _JSON
    accept = fields.get("Accept-Encoding")
    if accept is not None:
        picked = codec.pick_encoding(accept)
        if picked is not None:
            parts = [codec.compress(b"".join(parts), picked)]
            headers = headers or {}
            headers["Content-Encoding"] = picked
    out = HttpResponse(200, parts, content_type, headers)
    if req.trace is not None:
        return traced(out, req.trace, (recv_start, recv_end))
    return out


_SKIP = ("expect", "content-encoding", "inference-header-content-length")


def make_json_infer(core: CoreAPI, options: ServerOptions | None = None) -> JsonInfer | None:
    """The native HTTP/1.1 transport's call for a complete POST body before ``dispatch``:
    ``json_infer(path, headers, body)`` is ``dispatch``'s response for an infer request whose
    JSON body the JSON lane answers (``jsonlane.answer``), without the request's coroutines
    and header mapping; None, with nothing answered, for anything else (``dispatch`` then
    takes it as before; a document it parsed goes along, ``jsonlane.PARSED``). ``headers``: the
    request's, lower-case names. None (no such call) where headers are forwarded as
    parameters or an API is restricted."""
    if options is not None and (restrict.http_restrictions(options) or http_forward(options)):
        return None
    parsed = jsonlane.PARSED

    def json_infer(path: str, headers: dict[str, str], body: Any) -> HttpResponse | None:
        if type(body) is not bytes or not body:
            return None
        for key in _SKIP:
            if key in headers:
                return None
        found = _match(path)
        if found is None or found[1].get("POST") is not infer:
            return None
        m = found[0]
        name = m.group(1)
        if "%" in name:
            name = unquote(name)
        v = m.group(2)
        try:
            version = parse_version(v) if v is not None else -1
            doc, plain = jsonlane.ask(core, body, name, version)
        except TritonliteError:
            return None  # nothing done: ``dispatch`` words it
        if plain is None or plain is False:
            parsed.body, parsed.doc, parsed.plain = body, doc, plain
            return None
        return jsonlane.response(plain, headers.get("accept-encoding"))

    return json_infer


async def generate(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    req = gen.decode(core, await request.read(), _name(m), _version(m))
    return await gen.generate(core.infer_stream(req))


async def generate_stream(request: Request, core: CoreAPI, m: re.Match[str]) -> Response:
    req = gen.decode(core, await request.read(), _name(m), _version(m))
    return await gen.generate_stream(request, core.infer_stream(req))


async def repo_index(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    doc = await _body_json(request)
    ready_only = doc.get("ready", False)
    if not isinstance(ready_only, bool):
        raise invalid_arg("'ready' must be a boolean")
    return _json(core.repository_index(ready_only))


def _load_params(doc: dict[str, Any]) -> dict[str, Any]:
    params = doc.get("parameters", {})
    if not isinstance(params, dict):
        raise invalid_arg("'parameters' must be a JSON object")
    return params


async def repo_load(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    if m.group(1) is not None:
        raise unsupported("'repository_name' specification is not supported")
    params = _load_params(await _body_json(request))
    for key, value in params.items():
        if not isinstance(value, str):
            raise invalid_arg(f"load parameter '{key}' must be a string")
    await core.load_model(_name(m, 2), params)
    return _empty(200)


async def repo_unload(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    if m.group(1) is not None:
        raise unsupported("'repository_name' specification is not supported")
    params = _load_params(await _body_json(request))
    dependents = params.get("unload_dependents", False)
    if not isinstance(dependents, bool):
        raise invalid_arg("'unload_dependents' must be a boolean")
    await core.unload_model(_name(m, 2), dependents)
    return _empty(200)


def _region(m: re.Match[str]) -> str:
    return unquote(m.group(1)) if m.group(1) is not None else ""


async def sys_shm(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    action, region = m.group(2), _region(m)
    if action == "status":
        return _json(core.shm.system_status(region))
    if action == "unregister":
        core.shm.unregister_system(region)
        return _empty(200)
    doc = await _body_json(request, allow_empty=False)
    key, offset, size = doc.get("key"), doc.get("offset", 0), doc.get("byte_size")
    if not isinstance(key, str):
        raise invalid_arg("shared memory register request must contain a string 'key'")
    if not codec._is_uint(size) or not codec._is_uint(offset):
        raise invalid_arg("'byte_size' and 'offset' must be unsigned integers")
    core.register_system_shm(region, key, offset, size, _peer_is_local(request))
    return _empty(200)


async def cuda_shm(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    import base64
    import binascii

    action, region = m.group(2), _region(m)
    if action == "status":
        return _json(core.shm.cuda_status(region))
    if action == "unregister":
        core.shm.unregister_cuda(region)
        return _empty(200)
    doc = await _body_json(request, allow_empty=False)
    handle, device, size = doc.get("raw_handle"), doc.get("device_id", 0), doc.get("byte_size")
    if not isinstance(handle, dict) or not isinstance(handle.get("b64"), str):
        raise invalid_arg(
            "CUDA shared memory register request must contain 'raw_handle': {'b64': ...}"
        )
    if not codec._is_uint(size) or not codec._is_uint(device):
        raise invalid_arg("'byte_size' and 'device_id' must be unsigned integers")
    try:
        raw = base64.b64decode(handle["b64"], validate=True)
    except (binascii.Error, ValueError):
        raise invalid_arg(
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
        ) from None
    core.register_cuda_shm(region, raw, device, size, _peer_is_local(request))
    return _empty(200)


async def trace_setting(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    model = _name(m) if m.lastindex and m.group(1) is not None else ""
    if model and model not in core.repository.models:
        raise invalid_arg(f"Request for unknown model : {model}")
    if request.method == "GET":
        return _json(core.trace.get(model))
    return _json(core.trace.update(await _body_json(request), model))


async def logging_setting(request: Request, core: CoreAPI, m: re.Match[str]) -> HttpResponse:
    if request.method == "GET":
        return _json(core.logging.get())
    return _json(core.logging.update(await _body_json(request)))


# -- routing --------------------------------------------------------------------------------------
_MODEL = r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
_ROUTES: list[tuple[re.Pattern[str], dict[str, Handler]]] = [
    (re.compile(r"/v2/models/stats"), {"GET": all_stats}),
    (re.compile(r"/v2/logging"), {"GET": logging_setting, "POST": logging_setting}),
    (re.compile(_MODEL), {"GET": model_metadata}),
    (re.compile(_MODEL + r"/infer"), {"POST": infer}),
    (re.compile(_MODEL + r"/generate"), {"POST": generate}),
    (re.compile(_MODEL + r"/generate_stream"), {"POST": generate_stream}),
    (re.compile(_MODEL + r"/ready"), {"GET": model_ready}),
    (re.compile(_MODEL + r"/config"), {"GET": model_config}),
    (re.compile(_MODEL + r"/stats"), {"GET": model_stats}),
    (
        re.compile(r"/v2/models/([^/]+)/trace/setting"),
        {"GET": trace_setting, "POST": trace_setting},
    ),
    (re.compile(r"/v2"), {"GET": server_metadata}),
    (re.compile(r"/v2/health/live"), {"GET": live}),
    (re.compile(r"/v2/health/ready"), {"GET": ready}),
    (re.compile(r"/v2/systemsharedmemory(?:/region/([^/]+))?/(status)"), {"GET": sys_shm}),
    (
        re.compile(r"/v2/systemsharedmemory(?:/region/([^/]+))?/(register|unregister)"),
        {"POST": sys_shm},
    ),
    (re.compile(r"/v2/cudasharedmemory(?:/region/([^/]+))?/(status)"), {"GET": cuda_shm}),
    (
        re.compile(r"/v2/cudasharedmemory(?:/region/([^/]+))?/(register|unregister)"),
        {"POST": cuda_shm},
    ),
    (re.compile(r"/v2/repository(?:/([^/]+))?/index"), {"POST": repo_index}),
    (re.compile(r"/v2/repository(?:/([^/]+))?/models/([^/]+)/load"), {"POST": repo_load}),
    (re.compile(r"/v2/repository(?:/([^/]+))?/models/([^/]+)/unload"), {"POST": repo_unload}),
    (re.compile(r"/v2/trace/setting"), {"GET": trace_setting, "POST": trace_setting}),
    (re.compile(r"/v1/models"), {"GET": oai.openai_models}),
    (re.compile(r"/v1/models/([^/]+(?:/[0-9]+)?)"), {"GET": oai.openai_model}),
    (re.compile(r"/v1/completions"), {"POST": oai.openai_completions}),
    (re.compile(r"/v1/chat/completions"), {"POST": oai.openai_chat}),
    (re.compile(r"/v1/embeddings"), {"POST": oai.openai_embeddings}),
]


_Found = tuple["re.Match[str]", dict[str, Handler]] | None
_MATCHED: dict[str, _Found] = {}  # clients repeat their paths; a match object is immutable
_MATCHED_MAX = 4096


def _match(path: str) -> _Found:
    found = _MATCHED.get(path)
    if found is not None or path in _MATCHED:
        return found
    for pattern, methods in _ROUTES:
        m = pattern.fullmatch(path)
        if m is not None:
            found = (m, methods)
            break
    if len(_MATCHED) >= _MATCHED_MAX:
        _MATCHED.clear()
    _MATCHED[path] = found
    return found


def _guards(restrictions: restrict.Restrictions) -> dict[int, restrict.Restriction]:
    """id(route's methods) -> the restriction of its group, for the restricted routes.

    Raises RuntimeError for a handler without a group (``restrict.HTTP_HANDLER_GROUPS``)."""
    out: dict[int, restrict.Restriction] = {}
    for _, methods in _ROUTES:
        groups = {
            restrict.group_of(restrict.HTTP_HANDLER_GROUPS, h.__name__, "HTTP handler")
            for h in methods.values()
        }
        if len(groups) != 1:
            raise RuntimeError(f"one HTTP route serves several restriction groups: {groups}")
        restriction = restrictions.get(groups.pop())
        if restriction is not None:
            out[id(methods)] = restriction
    return out


def make_dispatch(core: CoreAPI, options: ServerOptions | None = None) -> Dispatch:
    """The one entry point every HTTP transport calls with each request.

    ``options`` bring ``--http-restricted-api`` and ``--http-header-forward-pattern``
    (ValueError if malformed); without them nothing is restricted or forwarded.
    """
    guards = _guards(restrict.http_restrictions(options) if options is not None else {})
    forward = http_forward(options) if options is not None else None

    async def dispatch(request: HttpRequest) -> HttpResponse | HttpStream:
        expect = request.headers.get("Expect")
        if expect and request.version >= (1, 1) and expect.lower() != "100-continue":
            return error(417, f"Unknown Expect: {expect}")
        found = _match(request.path)
        if found is None:
            return error(404, "Not Found")
        m, methods = found
        if guards:
            restriction = guards.get(id(methods))
            if restriction is not None:
                denied = restrict.http_denied(restriction, request.headers)
                if denied is not None:
                    return error(403, denied)
        handler = methods.get(request.method)
        if handler is None:
            return error(405, "Method Not Allowed")
        try:
            if forward is not None and handler is infer:
                return await infer(request, core, m, forward)
            return await handler(request, core, m)
        except TritonliteError as exc:
            return error(STATUS[exc.code], exc.message)
        except HttpError as exc:
            return error(exc.status, exc.message)
        except Exception as exc:
            log.exception("unexpected error handling %s %s", request.method, request.path)
            return error(500, f"internal error: {type(exc).__name__}: {exc}")

    return dispatch
