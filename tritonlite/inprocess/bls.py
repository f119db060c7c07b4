"""BLS: a Python model's ``pb_utils.InferenceRequest`` run through this server's core.

``execute`` (``InferenceRequest.exec``) blocks the model's thread until the response is back;
``execute_async`` (``async_exec``) returns an ``asyncio.Future`` on the caller's running loop
(an ``async def execute`` runs on its instance's own loop, never on the server's). Both hand the
request to the server's event loop through the in-process bridge (``inprocess/bridge.py``),
where it takes the path a client request takes, through the core's admission
(``InferenceCore.infer``, or ``infer_stream`` with ``decoupled=True``): one model lookup,
validation, the response cache, the model's scheduler and its statistics; BLS's own wording of
a refusal goes in as data (``REFUSAL``). With ``decoupled=True`` the result is a
``ResponseIterator`` of every response.

What the model gets back follows Triton's python_backend (checked against Triton 2.51):

* errors never raise: the response ``has_error()``, with code INTERNAL whatever the cause;
* a request refused before it reaches the model (unknown or unready model, a decoupled model
  without ``decoupled=True``, a validation failure) reads ``Model <name> - Error when running
  inference: <reason>``, the model-not-ready reason being ``Failed for execute the inference
  request. Model '<name>' is not ready.``; a failure while the model runs carries the target's
  own message;
* no requested outputs means every output of the target model;
* output tensors view the response's arrays (no copy); a read-only array is copied the first
  time ``as_numpy()`` (or DLPack) touches it, so the model always gets writable memory and a
  cached response is never changed. Inputs travel as read-only views of the caller's arrays,
  so the target cannot change them either.

The request's ``timeout`` (microseconds) becomes the core request's timeout, which the target's
scheduler applies exactly as it applies a client's (Triton does not bound ``exec`` itself).

A model that calls itself (or a cycle of models) while no instance of the target is free waits,
as in Triton, until one is: with a single instance, forever (a ``timeout`` only bounds the
inner request's time in a queue whose policy allows it). Only the calling instance waits; the
server keeps serving everything else, and at shutdown ``--exit-timeout-secs`` bounds the wait
for it, as in Triton, after which the server exits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonlite.backends.python import pb_utils
from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import ErrorCode, Refusal, TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse, RequestedOutput
from tritonlite.inprocess.bridge import LoopBridge

if TYPE_CHECKING:
    from tritonlite.core.api import CoreAPI


class _Refused(Exception):
    """The request never reached the target model; Triton prefixes these messages."""


# -- conversions --------------------------------------------------------------------------------


def _bytes_array(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """An object array of ``bytes`` (what the core's BYTES tensors hold) for any BYTES array."""
    if data.dtype == np.object_ and all(type(v) is bytes for v in data.flat):
        return data
    out = np.empty(data.shape, dtype=np.object_)
    out.flat[:] = [datatypes.as_bytes_element(v) for v in data.flat]
    return out


def _read_only(data: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    view = data.view()
    view.flags.writeable = False
    return view


def core_request(request: pb_utils.InferenceRequest) -> InferRequest:
    """The core's request for a BLS request; raises TritonliteError for an unusable tensor."""
    inputs: list[InferInput] = []
    for tensor in request.inputs():
        data = tensor._array
        wire = datatypes.wire_name_of(data)
        if wire == "BYTES":
            data = _bytes_array(data)
        inputs.append(
            InferInput(tensor.name(), wire, tuple(int(d) for d in data.shape), _read_only(data))
        )
    # Triton adds them from a std::set: sorted, without repeats; none means every output.
    names = sorted(request.requested_output_names())
    flags = request.flags()
    return InferRequest(
        model_name=request._model_name,
        model_version=request._model_version,
        id=request.request_id(),
        inputs=inputs,
        outputs=[RequestedOutput(n) for n in names] or None,
        parameters=json.loads(request.parameters()),
        sequence_id=request.correlation_id(),
        sequence_start=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START),
        sequence_end=bool(flags & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END),
        timeout_us=request.timeout(),
    )


def pb_response(response: InferResponse) -> pb_utils.InferenceResponse:
    """The model's view of a core response: tensors over the response's own arrays."""
    tensors = [
        pb_utils.Tensor._of_input(o.name, _bytes_array(o.data) if o.datatype == "BYTES" else o.data)
        for o in response.outputs
        if o.data is not None
    ]
    out = pb_utils.InferenceResponse(tensors)
    params = response.parameters
    if params and all(isinstance(v, (bool, int, float, str)) for v in params.values()):
        out._parameters = dict(params)
        out._parameters_json = json.dumps(params)
    return out


def error_response(message: str) -> pb_utils.InferenceResponse:
    """A BLS error response; Triton's python backend reports every BLS error as INTERNAL."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message))


def _failed(model_name: str, exc: BaseException) -> pb_utils.InferenceResponse:
    if isinstance(exc, _Refused):
        return error_response(f"Model {model_name} - Error when running inference: {exc}")
    if isinstance(exc, TritonliteError):
        return error_response(exc.message)
    return error_response(
        f"BLS request to model '{model_name}' failed: {type(exc).__name__}: {exc}"
    )


# -- on the server's loop -------------------------------------------------------------------------


# Triton's python_backend words a BLS request refused before it reaches the model so; the
# core's admission applies it (the same lookup, validation and intake as a client's request).
REFUSAL = Refusal(
    unknown_model="Failed for execute the inference request. Model '{name}' is not ready.",
    decoupled=(
        "Model {name} is using the decoupled. The current BLS request call doesn't support "
        "models using the decoupled transaction policy. Please use 'decoupled=True' "
        "argument to the 'exec' or 'async_exec' calls for decoupled models.'"
    ),
    prefix="Model {name} - Error when running inference: ",
)


def _release_trace(request: InferRequest) -> None:
    trace = getattr(request, "trace", None)
    if trace is not None:
        trace.release()


async def _infer(core: CoreAPI, request: InferRequest) -> InferResponse:
    """A unary BLS call: one ``infer`` through the core's admission."""
    response = await core.infer(request, refusal=REFUSAL)
    _release_trace(request)
    return response


async def _pump(core: CoreAPI, request: InferRequest, sink: queue.SimpleQueue[Any]) -> None:
    """Put every response of a ``decoupled=True`` call (then ``_END``) into ``sink``, whatever
    the target (a non-decoupled one answers once); never raises."""
    name = request.model_name
    try:
        async for item in core.infer_stream(request, refusal=REFUSAL):
            if item.error is not None:
                sink.put(_failed(name, item.error))
            elif item.response is not None:
                sink.put(item.response)
            else:  # a flags-only final: Triton's iterator yields an empty response
                sink.put(pb_utils.InferenceResponse())
        _release_trace(request)
    except Exception as exc:
        sink.put(_failed(name, exc))
    sink.put(_END)


_END = object()


class ResponseIterator:
    """The responses of a ``decoupled=True`` BLS request, in order; the last may be empty."""

    def __init__(
        self,
        model_name: str,
        sink: queue.SimpleQueue[Any],
        pending: concurrent.futures.Future[None] | None,
    ) -> None:
        self._model_name = model_name
        self._sink = sink
        self._pending = pending
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> pb_utils.InferenceResponse:
        if self._done:
            raise StopIteration
        item = self._sink.get()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, pb_utils.InferenceResponse):
            return item
        return pb_response(item)

    def cancel(self) -> None:
        """Stop waiting for more responses (the target model is not interrupted)."""
        if self._pending is not None:
            self._pending.cancel()
        self._done = True


# -- the model's side ---------------------------------------------------------------------------


def _refuse_on_loop(bridge: LoopBridge) -> None:
    if bridge.is_loop_thread():
        raise pb_utils.TritonModelException(
            "BLS requests cannot be made from the server's event loop thread"
        )


def execute(bridge: LoopBridge, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
    """``InferenceRequest.exec``: the response, or with ``decoupled`` a ResponseIterator."""
    _refuse_on_loop(bridge)
    name = request._model_name
    try:
        core_req = core_request(request)
    except TritonliteError as exc:
        response = _failed(name, _Refused(exc.message))
        return _single(name, response) if decoupled else response
    if decoupled:
        sink: queue.SimpleQueue[Any] = queue.SimpleQueue()
        try:
            pending = bridge.submit(lambda core: _pump(core, core_req, sink))
        except TritonliteError as exc:
            return _single(name, _failed(name, exc))
        return ResponseIterator(name, sink, pending)
    try:
        return pb_response(bridge.call(lambda core: _infer(core, core_req)))
    except Exception as exc:
        return _failed(name, exc)


def _single(name: str, response: pb_utils.InferenceResponse) -> ResponseIterator:
    sink: queue.SimpleQueue[Any] = queue.SimpleQueue()
    sink.put(response)
    sink.put(_END)
    return ResponseIterator(name, sink, None)


def execute_async(
    bridge: LoopBridge, request: pb_utils.InferenceRequest, decoupled: bool
) -> asyncio.Future[Any]:
    """``InferenceRequest.async_exec``: a future on the running loop, as Triton returns one."""
    loop = asyncio.get_running_loop()  # RuntimeError outside a coroutine, as in Triton
    _refuse_on_loop(bridge)
    name = request._model_name
    out: asyncio.Future[Any] = loop.create_future()
    if decoupled:  # the iterator starts at once; iterating it waits, as Triton's does
        out.set_result(execute(bridge, request, True))
        return out
    try:
        core_req = core_request(request)
        pending = bridge.submit(lambda core: _infer(core, core_req))
    except TritonliteError as exc:
        refused = _Refused(exc.message) if exc.code == ErrorCode.INVALID_ARG else exc
        out.set_result(_failed(name, refused))
        return out

    def settle(done: concurrent.futures.Future[InferResponse]) -> None:
        if out.done():  # the caller cancelled it
            return
        exc = done.exception() if not done.cancelled() else asyncio.CancelledError()
        out.set_result(_failed(name, exc) if exc is not None else pb_response(done.result()))

    def hand_over(done: concurrent.futures.Future[InferResponse]) -> None:
        try:
            loop.call_soon_threadsafe(settle, done)
        except RuntimeError:  # the caller's loop is gone: nobody waits for this response
            pass

    pending.add_done_callback(hand_over)
    return out
