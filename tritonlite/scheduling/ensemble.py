"""Ensembles (``platform: "ensemble"``): the step graph and the scheduler that runs it.

``EnsembleGraph`` is built once at load from ``ensemble_scheduling``. A request through
``EnsembleScheduler`` runs Triton's ensemble scheduler on the event loop:

* only the steps needed for the requested outputs run (Triton prunes the rest);
* a step starts as soon as every ensemble tensor it reads exists, so independent steps run
  concurrently; each is a normal inference of its composing model, admitted by the core the
  way a client's request is (``EnsembleHost.step_infer``: lookup, validation, the response
  cache when the composing model enables it, its scheduler), so batching and statistics
  apply;
* tensors pass from step to step as the numpy arrays the steps returned (no copies); between
  a batching and a non-batching model the batch dimension is added or dropped as Triton's
  ``ReshapeTensorDims`` does;
* every composing request carries the ensemble request's id, parameters, sequence id and
  flags, priority and timeout;
* the first step error fails the request as ``in ensemble '<name>', <step's message>`` with
  the step's code; outputs that no step can produce end it with Triton's "unexpected deadlock".

An ensemble with a decoupled composing model is decoupled itself (``EnsembleGraph.decoupled``,
set at load): a decoupled step answers 0..N times, each answer runs the steps after it on its
own, and the ensemble sends a response for each set of outputs that completes, through the
request's ``responder`` (the core's stream), then its final flag once no step is running
(``_StreamRun`` says how, as Triton's iteration-counted tensors do it). Decoupled steps run
through ``EnsembleHost.step_stream``, the others through ``step_infer`` as above.

The ensemble's own ``response_cache`` caches its final response in the core, keyed by the
ensemble's inputs.

The scheduler sits below the core: what it needs of it (step admission, the composing models'
signatures, building the final response, the ensemble's statistics) the core hands it as an
``EnsembleHost`` (the loaded ``EnsembleModel``, core/ensemble.py).

Statistics: each step is counted by its composing model; the ensemble counts each request
once, when it ends (a decoupled one: after its final flag), with compute durations that are the
sums of its steps' (Triton's ensemble statistics).
Ownership: the scheduler owns a request from ``enqueue`` until its future resolves.

Over 500 lines, one module: one request's walk through the ensemble graph -- step admission, per-
response fan-out of decoupled steps, completion and the final flag -- is one state machine whose
parts change together.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tritonlite.backends.base import ModelOutputs
from tritonlite.contracts.errors import (
    ErrorCode,
    TritonliteError,
    internal,
    invalid_arg,
)
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import (
    InferInput,
    InferRequest,
    InferResponse,
    RequestedOutput,
    Responder,
)
from tritonlite.scheduling.base import ForwardingScheduler, ForwardStats


class StepItem(Protocol):
    """One answer of a decoupled step (the core's ``StreamResponse``): a response or an error,
    or neither on a flags-only final."""

    @property
    def response(self) -> InferResponse | None: ...
    @property
    def error(self) -> TritonliteError | None: ...
    @property
    def final(self) -> bool: ...


@runtime_checkable
class EnsembleHost(Protocol):
    """What an ensemble's scheduler needs of the core, handed in as the loaded model."""

    name: str

    @property
    def graph(self) -> EnsembleGraph: ...

    @property
    def stats(self) -> ForwardStats: ...

    async def step_infer(self, request: InferRequest) -> InferResponse:
        """Admit one composing request the way the core admits a client's."""
        ...

    def step_stream(self, request: InferRequest) -> AsyncIterator[StepItem]:
        """Run one composing request of a decoupled model: its answers as sent, the last one
        final; errors come as items, never raised."""
        ...

    def composing_signature(self, name: str, version: int) -> Signature:
        """A step's composing model's signature now; raises as a client's lookup would."""
        ...

    def respond(self, request: InferRequest, produced: ModelOutputs) -> InferResponse:
        """The ensemble's response to ``request`` from its output tensors."""
        ...


@dataclass(frozen=True, slots=True)
class Step:
    """One ``ensemble_scheduling.step``: (model input, tensor) and (model output, tensor) maps."""

    index: int
    model_name: str
    model_version: int
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Tensor:
    """An ensemble tensor's value; ``batch_size`` 0 means it has no batch dimension."""

    datatype: str
    data: np.ndarray[Any, Any]
    batch_size: int


class EnsembleGraph:
    """The steps of one ensemble config and which step produces / consumes each tensor."""

    def __init__(self, cfg: Any) -> None:
        self.name: str = cfg.name
        self.batching = cfg.max_batch_size > 0
        self.steps: list[Step] = []
        self.producer: dict[str, int] = {}
        for idx, s in enumerate(cfg.ensemble_scheduling.step):
            step = Step(
                idx,
                s.model_name,
                int(s.model_version),
                tuple(sorted(s.input_map.items())),
                tuple(sorted(s.output_map.items())),
            )
            self.steps.append(step)
            for _, tensor in step.outputs:
                self.producer[tensor] = idx
        # Ensemble output -> the dims it is reported with (reshape shape when set, as Triton).
        self.output_dims: dict[str, tuple[int, ...]] = {
            o.name: tuple(int(d) for d in (o.reshape.shape if o.HasField("reshape") else o.dims))
            for o in cfg.output
        }
        self.composing: list[str] = sorted({s.model_name for s in self.steps})
        # Set at load when a step's model is decoupled (ensemble_deps): the ensemble then
        # answers each request with 0..N responses over the streaming API.
        self.decoupled = bool(cfg.model_transaction_policy.decoupled)
        # Optional ensemble inputs a request may leave out: the steps that read one run
        # without it (Triton marks such a tensor ready with no data).
        self.optional_inputs: tuple[str, ...] = tuple(
            i.name for i in cfg.input if getattr(i, "optional", False)
        )

    def needed_steps(self, outputs: list[str]) -> list[Step]:
        """The steps that must run to produce ``outputs``, in config order."""
        need: set[int] = set()
        todo = [self.producer[o] for o in outputs if o in self.producer]
        while todo:
            idx = todo.pop()
            if idx in need:
                continue
            need.add(idx)
            todo.extend(self.producer[t] for _, t in self.steps[idx].inputs if t in self.producer)
        return [s for s in self.steps if s.index in need]


def reshape_dims(
    config_dims: tuple[int, ...], allow_batching: bool, batch_size: int, shape: tuple[int, ...]
) -> tuple[int, ...]:
    """Triton's ReshapeTensorDims: add or drop the batch dim between (non-)batching models."""
    if allow_batching == (batch_size != 0):
        return shape
    if allow_batching:
        return (1, *shape) if _dims_match(config_dims, shape) else shape
    if not _dims_match(config_dims, shape) and batch_size == 1:
        return shape[1:]
    return shape


def _dims_match(dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return len(dims) == len(shape) and all(d == -1 or d == s for d, s in zip(dims, shape))


def _log_request(req: InferRequest) -> str:
    return f"[request id: {req.id or '<id_unknown>'}] "


class _Timing:
    """The compute durations of one ensemble request's steps, summed (Triton's secondary
    statistics aggregator)."""

    __slots__ = ("input_ns", "infer_ns", "output_ns")

    def __init__(self) -> None:
        self.input_ns = self.infer_ns = self.output_ns = 0

    def add(self, timing: ExecTiming) -> None:
        ci, cinf, co = timing.spans()
        self.input_ns += ci
        self.infer_ns += cinf
        self.output_ns += co

    def as_exec(self) -> ExecTiming:
        a = self.input_ns
        b = a + self.infer_ns
        return ExecTiming(0, a, b, b + self.output_ns)


class _Run:
    """One ensemble request in flight."""

    def __init__(self, sched: EnsembleScheduler, req: InferRequest) -> None:
        self.sched = sched
        self.graph = sched.graph
        self.req = req
        self.timing = _Timing()
        batch = req.batch_size if self.graph.batching else 0
        self.tensors: dict[str, Tensor | None] = {}
        for inp in req.inputs:
            assert inp.data is not None
            self.tensors[inp.name] = Tensor(inp.datatype, inp.data, batch)
        for name in self.graph.optional_inputs:
            self.tensors.setdefault(name, None)

    async def run(self) -> InferResponse:
        graph, req = self.graph, self.req
        wanted = self.wanted()
        pending = graph.needed_steps(wanted)
        running: dict[asyncio.Future[InferResponse], Step] = {}
        try:
            while True:
                for step in [s for s in pending if self._ready(s)]:
                    pending.remove(step)
                    try:
                        step_req = self._request(step, self.tensors)
                    except TritonliteError as exc:
                        raise self._step_error(exc) from None
                    running[asyncio.ensure_future(self.sched.model.step_infer(step_req))] = step
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    step = running.pop(fut)
                    failure = fut.exception()
                    if failure is not None:
                        raise self._step_error(failure)
                    self._consume(step, fut.result())
        except BaseException:
            for fut in running:  # results nobody will read: keep them from being reported
                fut.add_done_callback(_discard)
            raise
        if any(o not in self.tensors for o in wanted):
            raise invalid_arg(
                f"in ensemble '{graph.name}', {_log_request(req)}unexpected deadlock, at least one "
                "output is not set while no more ensemble steps can be made"
            )
        return self._response(wanted)

    def _ready(self, step: Step) -> bool:
        return all(t in self.tensors for _, t in step.inputs)

    def _request(self, step: Step, tensors: Mapping[str, Tensor | None]) -> InferRequest:
        """The composing request of ``step`` over ``tensors`` (ensemble tensor -> value)."""
        req = self.req
        signature = self.sched.model.composing_signature(step.model_name, step.model_version)
        allow_batching = signature.max_batch_size > 0
        inputs: list[InferInput] = []
        for name, tensor_name in step.inputs:
            t = tensors[tensor_name]
            if t is None:  # an optional tensor nobody gave or produced: left out, as in Triton
                continue
            spec = signature.inputs.get(name)
            dims = spec.dims if spec is not None else ()
            shape = reshape_dims(dims, allow_batching, t.batch_size, tuple(t.data.shape))
            data = t.data if shape == t.data.shape else t.data.reshape(shape)
            inputs.append(InferInput(name, t.datatype, shape, data))
        return InferRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            id=req.id,
            inputs=inputs,
            outputs=[RequestedOutput(name, binary=True) for name, _ in step.outputs],
            parameters=dict(req.parameters),
            sequence_id=req.sequence_id,
            sequence_start=req.sequence_start,
            sequence_end=req.sequence_end,
            priority=req.priority,
            timeout_us=req.timeout_us,
            binary_data_output=True,
            on_timing=self.timing.add,
        )

    def _consume(self, step: Step, resp: InferResponse) -> None:
        self.tensors.update(self._produced(step, resp))

    def _produced(self, step: Step, resp: InferResponse) -> list[tuple[str, Tensor | None]]:
        """The ensemble tensors a step's response sets: None for an output it left out (an
        optional input downstream, as in Triton)."""
        signature = self.sched.model.composing_signature(step.model_name, step.model_version)
        batch = 0
        if signature.max_batch_size > 0:
            batch = next((int(o.shape[0]) for o in resp.outputs if o.shape), 1)
        produced = {o.name: o for o in resp.outputs}
        out: list[tuple[str, Tensor | None]] = []
        for name, tensor_name in step.outputs:
            o = produced.get(name)
            out.append(
                (
                    tensor_name,
                    None if o is None or o.data is None else Tensor(o.datatype, o.data, batch),
                )
            )
        return out

    def _step_error(self, exc: BaseException) -> TritonliteError:
        name = self.graph.name
        if isinstance(exc, TritonliteError):
            return TritonliteError(exc.code, f"in ensemble '{name}', {exc.message}")
        return internal(f"in ensemble '{name}', {type(exc).__name__}: {exc}")

    def _response(self, wanted: list[str]) -> InferResponse:
        return self.sched.model.respond(self.req, self._outputs(wanted, self.tensors))

    def _outputs(self, wanted: list[str], tensors: Mapping[str, Tensor | None]) -> ModelOutputs:
        """The ensemble's outputs from ``tensors`` (ensemble tensor -> value)."""
        graph, req = self.graph, self.req
        batching = req.batch_size != 0 and graph.batching
        # Triton's ensemble responses carry the sequence parameters of the tensors' steps.
        params = {
            "sequence_id": req.sequence_id,
            "sequence_start": req.sequence_start,
            "sequence_end": req.sequence_end,
        }
        produced = ModelOutputs(partial=True, parameters=params)
        for name in wanted:
            t = tensors.get(name)
            if t is None:  # "Composing models did not output tensor": left out, as in Triton
                continue
            shape = reshape_dims(
                graph.output_dims[name], batching, t.batch_size, tuple(t.data.shape)
            )
            produced[name] = t.data if shape == t.data.shape else t.data.reshape(shape)
        return produced

    def wanted(self) -> list[str]:
        """The outputs the request asked for (all of the ensemble's when it named none)."""
        req = self.req
        if req.outputs is not None:
            return [o.name for o in req.outputs]
        return list(self.graph.output_dims)


_Event = tuple[Step, InferResponse | None, BaseException | None, bool]


class _StreamRun(_Run):
    """One request of a decoupled ensemble (a step's model is decoupled), as Triton runs it.

    Each answer of a step sets its output tensors once more: an ensemble tensor holds its
    values by *iteration* (its n-th value is iteration n; the request's inputs are iteration
    0). A step runs once for each iteration at which every tensor it reads has a value, so the
    steps after a decoupled one run once per response it sends; the ensemble answers once for
    each iteration at which every requested output has a value. A value is dropped once every
    step that reads it, and the response when it is an output, has taken it.

    The response sent when no step is running any more is the final one. When the last step
    ends with a flags-only final instead, the ensemble ends with a flags-only final too, also
    when it never answered: a decoupled model may answer 0 times, so Triton reports no
    "unexpected deadlock" here. The first error (a step's error response, a failed execution
    or admission) is the request's last answer: the steps still running are cancelled and
    nothing else is sent (Triton 2.51 sends nothing after it either).
    """

    def __init__(self, sched: EnsembleScheduler, req: InferRequest, responder: Responder) -> None:
        super().__init__(sched, req)
        self.responder = responder
        self.want = self.wanted()
        self.readers: dict[str, list[Step]] = {}
        for step in self.graph.needed_steps(self.want):
            for tensor in dict.fromkeys(t for _, t in step.inputs):
                self.readers.setdefault(tensor, []).append(step)
        self.values: dict[str, dict[int, Tensor | None]] = {}
        self.counts: dict[str, int] = {}  # tensor -> its next iteration
        self.refs: dict[tuple[str, int], int] = {}  # (tensor, iteration) -> readers left
        self.events: asyncio.Queue[_Event] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()
        self.running = 0  # step requests whose final answer has not come
        self.ended = False  # the final response went out

    async def run_stream(self) -> None:
        try:
            self._advance([self._add(n, t) for n, t in self.tensors.items()])
            while self.running:
                step, resp, err, final = await self.events.get()
                if final:
                    self.running -= 1
                if err is not None:
                    raise self._step_error(err)
                produced = self._produced(step, resp) if resp is not None else []
                self._advance([self._add(n, t) for n, t in produced])
            if not self.ended:
                self.responder.send(None, True)
        finally:
            for task in list(self.tasks):  # answers nobody will read: stop asking
                task.cancel()

    def _add(self, name: str, value: Tensor | None) -> tuple[str, int]:
        it = self.counts.get(name, 0)
        self.counts[name] = it + 1
        refs = len(self.readers.get(name, ())) + (name in self.want)
        if refs:
            self.values.setdefault(name, {})[it] = value
            self.refs[(name, it)] = refs
        return name, it

    def _has(self, name: str, it: int) -> bool:
        values = self.values.get(name)
        return values is not None and it in values

    def _take(self, name: str, it: int) -> Tensor | None:
        """A reader takes the value; the last one drops it."""
        value = self.values[name][it]
        left = self.refs[(name, it)] - 1
        if left:
            self.refs[(name, it)] = left
        else:
            del self.refs[(name, it)]
            del self.values[name][it]
        return value

    def _advance(self, updated: list[tuple[str, int]]) -> None:
        """Start the steps the ``updated`` values complete, then send the responses they
        complete; the last one is final when no step is left running."""
        launch: dict[tuple[int, int], Step] = {}
        for name, it in updated:
            for step in self.readers.get(name, ()):
                key = (step.index, it)
                if key not in launch and all(self._has(t, it) for _, t in step.inputs):
                    launch[key] = step
        for key in sorted(launch):
            self._launch(launch[key], key[1])
        ready = sorted(
            {
                it
                for name, it in updated
                if name in self.want and all(self._has(o, it) for o in self.want)
            }
        )
        for n, it in enumerate(ready):
            tensors = {o: self._take(o, it) for o in dict.fromkeys(self.want)}
            final = self.running == 0 and n == len(ready) - 1
            self.responder.send(self._outputs(self.want, tensors), final)
            self.ended = final

    def _launch(self, step: Step, it: int) -> None:
        tensors = {t: self._take(t, it) for t in dict.fromkeys(t for _, t in step.inputs)}
        try:
            request = self._request(step, tensors)
            signature = self.sched.model.composing_signature(step.model_name, step.model_version)
        except TritonliteError as exc:
            raise self._step_error(exc) from None
        self.running += 1
        task = asyncio.get_running_loop().create_task(
            self._drive(step, request, signature.decoupled)
        )
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _drive(self, step: Step, request: InferRequest, decoupled: bool) -> None:
        """Run one step request; each of its answers becomes an event for ``run_stream``."""
        put = self.events.put_nowait
        try:
            if not decoupled:
                put((step, await self.sched.model.step_infer(request), None, True))
                return
            final = False
            async for item in self.sched.model.step_stream(request):  # ends after the final
                final = item.final
                put((step, item.response, item.error, final))
            if not final:
                put((step, None, internal(f"model '{step.model_name}' sent no final"), True))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # run_stream stopped asking
                raise
            # Something below gave the step up: still an answer, so run_stream is not left
            # waiting for it.
            err = TritonliteError(ErrorCode.CANCELLED, f"model '{step.model_name}' cancelled")
            put((step, None, err, True))
        except Exception as exc:
            put((step, None, exc, True))


def _discard(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class EnsembleScheduler(ForwardingScheduler):
    """The ensemble's scheduler: each request runs its step graph as one asyncio task."""

    def __init__(self, model: EnsembleHost) -> None:
        super().__init__(model.name)
        self.model = model
        self.graph = model.graph
        self._loop = asyncio.get_running_loop()

    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        self._begin()
        fut: asyncio.Future[InferResponse] = self._loop.create_future()
        task = self._loop.create_task(self._run(request, fut))
        fut.add_done_callback(lambda f: task.cancel() if f.cancelled() else None)
        return fut

    async def _run(self, request: InferRequest, fut: asyncio.Future[InferResponse]) -> None:
        if self.graph.decoupled:
            await self._run_stream(request, fut)
            return
        run = _Run(self, request)
        stats = self.model.stats
        started = time.monotonic_ns()
        try:
            try:
                resp = await run.run()
            except TritonliteError as exc:
                stats.record_failure(time.monotonic_ns() - request.arrival_ns, "OTHER")
                if not fut.done():
                    fut.set_exception(exc)
                return
            except Exception as exc:
                stats.record_failure(time.monotonic_ns() - request.arrival_ns, "OTHER")
                if not fut.done():
                    fut.set_exception(run._step_error(exc))
                return
            timing = run.timing.as_exec()
            stats.record_execution(max(1, request.batch_size), timing)
            stats.record_success(
                time.monotonic_ns() - request.arrival_ns,
                started - request.arrival_ns,
                timing,
                max(1, request.batch_size),
            )
            if not fut.done():
                fut.set_result(resp)
        finally:
            self._end()

    async def _run_stream(self, request: InferRequest, fut: asyncio.Future[InferResponse]) -> None:
        """A decoupled ensemble's request: its responses go to ``request.responder`` (set by
        the core's ``infer_stream``, the only way in: ``infer`` refuses decoupled models);
        ``fut`` only says when it is over. Counted once, when it ends, as Triton counts it."""
        stats = self.model.stats
        started = time.monotonic_ns()
        timing: ExecTiming | None = None
        error: TritonliteError | None = None
        try:
            if request.responder is None:
                raise internal(f"ensemble '{self.model.name}' is decoupled: it streams only")
            run = _StreamRun(self, request, request.responder)
            await run.run_stream()
            timing = run.timing.as_exec()
        except asyncio.CancelledError:  # the client went away
            stats.record_failure(time.monotonic_ns() - request.arrival_ns, "CANCELED")
            raise
        except TritonliteError as exc:
            error = exc
        except Exception as exc:
            error = internal(f"in ensemble '{self.model.name}', {type(exc).__name__}: {exc}")
        finally:
            self._end()
        now = time.monotonic_ns()
        if error is not None:
            stats.record_failure(now - request.arrival_ns, "OTHER")
            if request.responder is not None:
                request.responder.send(error, True)
            elif not fut.done():
                fut.set_exception(error)
        elif timing is not None:
            size = max(1, request.batch_size)
            stats.record_execution(size, timing)
            stats.record_success(
                now - request.arrival_ns, started - request.arrival_ns, timing, size
            )
        if not fut.done():
            fut.set_result(InferResponse(request.model_name, "", request.id))
