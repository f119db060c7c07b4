"""The OpenAI-compatible routes: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``
and ``/v1/embeddings``; the translation itself is ``frontends/openai/``.

Each handler reads the body, asks ``frontends/openai`` for the model's contract and the
request, runs it through ``CoreAPI.infer_stream`` (as ``/generate_stream`` does, so statistics
and metrics count it like any request) and encodes what comes back. Every error is OpenAI's
shape; an unexpected one is logged and answered 500 without its traceback. A streamed answer
is ``text/event-stream``: one ``data:`` chunk per model response, written as it arrives, then
a closing chunk with ``finish_reason`` (and a usage chunk when asked), then ``data: [DONE]``.
The status is fixed before the first chunk: a request whose first item is an error is a plain
JSON error. A client that leaves (or a reached ``max_tokens``) closes the stream of items,
which cancels the request: the model's response sender sees ``is_cancelled()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncGenerator, Awaitable
from urllib.parse import unquote

import numpy as np
import orjson

from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.stream import StreamResponse
from tritonlite.contracts.types import InferRequest
from tritonlite.core.api import CoreAPI
from tritonlite.frontends.base.http_call import (
    HttpError,
    HttpRequest,
    HttpResponse,
    HttpStream,
    StreamWriter,
)
from tritonlite.frontends.base.rejects import REJECTS
from tritonlite.frontends.http.generate import next_item
from tritonlite.frontends.openai import body, template, translate
from tritonlite.frontends.openai.contract import Contracts, TextModel, split_id
from tritonlite.frontends.openai.errors import OpenAIError, bad, from_core, unknown_model

log = logging.getLogger("tritonlite")

_JSON = "application/json"
_SSE = "text/event-stream; charset=utf-8"
_NO_CACHE = {"Cache-Control": "no-cache"}
_CREATED = int(time.time())  # ``created`` of every model object: when this server started
_CONTRACTS = Contracts()  # keyed by model name and config object, so servers never share one
Response = HttpResponse | HttpStream


def _answer(doc: bytes) -> HttpResponse:
    return HttpResponse(200, [doc], _JSON)


def _error(exc: OpenAIError) -> HttpResponse:
    REJECTS.http(exc.status, exc.message)
    return HttpResponse(exc.status, [exc.body()], _JSON)


async def _guard(request: HttpRequest, work: Awaitable[Response]) -> Response:
    try:
        return await work
    except OpenAIError as exc:
        return _error(exc)
    except TritonliteError as exc:
        return _error(from_core(exc, True))
    except HttpError as exc:
        return _error(OpenAIError(exc.status, exc.message))
    except Exception as exc:
        log.exception("unexpected error handling %s %s", request.method, request.path)
        return _error(OpenAIError(500, f"internal error: {type(exc).__name__}"))


def _model_object(name: str) -> dict[str, object]:
    return {"id": name, "object": "model", "created": _CREATED, "owned_by": "tritonlite"}


# -- handlers (the route table is app.py's) -------------------------------------------------------
async def openai_models(request: HttpRequest, core: CoreAPI, m: re.Match[str]) -> Response:
    names = sorted({row["name"] for row in core.repository_index(ready_only=True)})
    return _answer(orjson.dumps({"object": "list", "data": [_model_object(n) for n in names]}))


async def openai_model(request: HttpRequest, core: CoreAPI, m: re.Match[str]) -> Response:
    model_id = unquote(m.group(1))
    try:
        ready = core.model_ready(*split_id(model_id))
    except TritonliteError:
        ready = False
    if not ready:
        return _error(unknown_model(model_id))
    return _answer(orjson.dumps(_model_object(model_id)))


async def openai_completions(request: HttpRequest, core: CoreAPI, m: re.Match[str]) -> Response:
    return await _guard(request, _completions(request, core))


async def openai_chat(request: HttpRequest, core: CoreAPI, m: re.Match[str]) -> Response:
    return await _guard(request, _chat(request, core))


async def openai_embeddings(request: HttpRequest, core: CoreAPI, m: re.Match[str]) -> Response:
    return await _guard(request, _embeddings(request, core))


# -- generation -----------------------------------------------------------------------------------
async def _completions(request: HttpRequest, core: CoreAPI) -> Response:
    gen = body.completion(body.parse(await request.read()))
    return await _generate(request, core, _CONTRACTS.text(core, gen.model), gen, chat=False)


async def _chat(request: HttpRequest, core: CoreAPI) -> Response:
    gen = body.chat(body.parse(await request.read()))
    model = _CONTRACTS.text(core, gen.model)
    if model.template is None:
        raise bad(model.template_error, "model", "model_not_supported")
    gen.prompt = template.render(model.template, gen.messages)
    return await _generate(request, core, model, gen, chat=True)


async def _generate(
    request: HttpRequest, core: CoreAPI, model: TextModel, gen: body.Generation, chat: bool
) -> Response:
    req = translate.text_request(model, gen)
    progress = translate.Progress(gen.model, chat, gen.max_tokens, translate.words(gen.prompt))
    items = core.infer_stream(req)
    if not gen.stream:
        return await _whole(request, items, model, progress)
    try:
        first = await next_item(request, items)
        if first is not None and first.error is not None:
            raise from_core(first.error, first.refused)
    except BaseException:
        await items.aclose()
        raise

    async def send(out: StreamWriter) -> None:
        item = first
        try:
            while item is not None:
                if item.error is not None:
                    await out.write(translate.error_event(from_core(item.error, False)))
                    await out.write(translate.DONE)
                    return
                done = item.final
                if item.response is not None:
                    text, tokens = translate.text_of(item.response, model.counts_tokens)
                    if text:
                        await out.write(progress.chunk(text))
                    done = progress.add(tokens) or done
                if done:
                    break
                item = await next_item(request, items)
            await out.write(progress.chunk("", progress.finish_reason()))
            if gen.include_usage:
                await out.write(progress.usage_chunk())
            await out.write(translate.DONE)
        except ConnectionError:  # the client went away; ``finally`` cancels the request
            pass
        except Exception as exc:  # the status is sent: the error goes as an event
            log.exception("unexpected error streaming %s %s", request.method, request.path)
            failed = OpenAIError(500, f"internal error: {type(exc).__name__}")
            with contextlib.suppress(ConnectionError):
                await out.write(translate.error_event(failed) + translate.DONE)
        finally:
            await items.aclose()

    return HttpStream(200, _SSE, send, _NO_CACHE)


async def _whole(
    request: HttpRequest,
    items: AsyncGenerator[StreamResponse, None],
    model: TextModel,
    progress: translate.Progress,
) -> Response:
    texts: list[str] = []
    try:
        while (item := await next_item(request, items)) is not None:
            if item.error is not None:
                raise from_core(item.error, item.refused)
            if item.response is not None:
                text, tokens = translate.text_of(item.response, model.counts_tokens)
                texts.append(text)
                if progress.add(tokens):
                    break  # closing ``items`` ends the request
            if item.final or request.disconnected():  # (a fast stream never lets
                break  # ``next_item`` time out, where it looks for a departed client)
    finally:
        await items.aclose()
    return _answer(progress.whole("".join(texts)))


# -- embeddings -----------------------------------------------------------------------------------
async def _embeddings(request: HttpRequest, core: CoreAPI) -> Response:
    emb = body.embedding(body.parse(await request.read()))
    model = _CONTRACTS.embedding(core, emb.model)
    reqs = translate.embedding_requests(model, emb)
    rows = await asyncio.gather(*(_embed(request, core, r) for r in reqs), return_exceptions=True)
    for got in rows:
        if isinstance(got, BaseException):
            raise got
    return _answer(translate.embeddings(emb, rows))  # type: ignore[arg-type]


async def _embed(request: HttpRequest, core: CoreAPI, req: InferRequest) -> np.ndarray:
    count = req.inputs[0].shape[0]
    items = core.infer_stream(req)
    try:
        while (item := await next_item(request, items)) is not None:
            if item.error is not None:
                raise from_core(item.error, item.refused)
            if item.response is not None:
                return translate.embedding_rows(item.response, count)
            if item.final:
                break
    finally:
        await items.aclose()
    if request.disconnected():
        raise OpenAIError(400, "the client went away")
    raise OpenAIError(500, f"model '{req.model_name}' sent no response")
