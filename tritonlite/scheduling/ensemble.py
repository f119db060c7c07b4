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

The ensemble's own ``response_cache`` caches its final response in the core, keyed by the
ensemble's inputs.

The scheduler sits below the core: what it needs of it (step admission, the composing models'
signatures, building the final response, the ensemble's statistics) the core hands it as an
``EnsembleHost`` (the loaded ``EnsembleModel``, core/ensemble.py).

Statistics: each step is counted by its composing model; the ensemble counts each request
once with compute durations that are the sums of its steps' (Triton's ensemble statistics).
Ownership: the scheduler owns a request from ``enqueue`` until its future resolves.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tritonlite.backends.base import ModelOutputs
from tritonlite.contracts.errors import (
    TritonliteError,
    internal,
    invalid_arg,
    rejected,
    unavailable,
)
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse, RequestedOutput


class EnsembleStats(Protocol):
    """The ensemble's own statistics (the core's ``ModelStats``)."""

    def record_failure(self, total_ns: int, reason: str) -> None: ...
    def record_execution(self, batch_size: int, timing: ExecTiming) -> Any: ...
    def record_success(
        self, total_ns: int, queue_ns: int, timing: ExecTiming | None, batch_size: int
    ) -> None: ...


@runtime_checkable
class EnsembleHost(Protocol):
    """What an ensemble's scheduler needs of the core, handed in as the loaded model."""

    name: str

    @property
    def graph(self) -> EnsembleGraph: ...

    @property
    def stats(self) -> EnsembleStats: ...

    async def step_infer(self, request: InferRequest) -> InferResponse:
        """Admit one composing request the way the core admits a client's."""
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
        wanted = (
            [o.name for o in req.outputs] if req.outputs is not None else list(graph.output_dims)
        )
        pending = graph.needed_steps(wanted)
        running: dict[asyncio.Future[InferResponse], Step] = {}
        try:
            while True:
                for step in [s for s in pending if self._ready(s)]:
                    pending.remove(step)
                    try:
                        step_req = self._request(step)
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

    def _request(self, step: Step) -> InferRequest:
        req = self.req
        signature = self.sched.model.composing_signature(step.model_name, step.model_version)
        allow_batching = signature.max_batch_size > 0
        inputs: list[InferInput] = []
        for name, tensor_name in step.inputs:
            t = self.tensors[tensor_name]
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
        signature = self.sched.model.composing_signature(step.model_name, step.model_version)
        batch = 0
        if signature.max_batch_size > 0:
            batch = next((int(o.shape[0]) for o in resp.outputs if o.shape), 1)
        produced = {o.name: o for o in resp.outputs}
        for name, tensor_name in step.outputs:
            out = produced.get(name)
            if out is None or out.data is None:
                self.tensors[tensor_name] = None
            else:
                self.tensors[tensor_name] = Tensor(out.datatype, out.data, batch)

    def _step_error(self, exc: BaseException) -> TritonliteError:
        name = self.graph.name
        if isinstance(exc, TritonliteError):
            return TritonliteError(exc.code, f"in ensemble '{name}', {exc.message}")
        return internal(f"in ensemble '{name}', {type(exc).__name__}: {exc}")

    def _response(self, wanted: list[str]) -> InferResponse:
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
            t = self.tensors.get(name)
            if t is None:  # "Composing models did not output tensor": left out, as in Triton
                continue
            shape = reshape_dims(
                graph.output_dims[name], batching, t.batch_size, tuple(t.data.shape)
            )
            produced[name] = t.data if shape == t.data.shape else t.data.reshape(shape)
        return self.sched.model.respond(req, produced)


def _discard(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class EnsembleScheduler:
    """The ensemble's scheduler: each request runs its step graph as one asyncio task."""

    def __init__(self, model: EnsembleHost) -> None:
        self.model = model
        self.graph = model.graph
        self._inflight = 0
        self._stopped = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop = asyncio.get_running_loop()

    def enqueue(self, request: InferRequest) -> asyncio.Future[InferResponse]:
        if self._stopped:
            raise rejected(unavailable(f"model '{self.model.name}' is unloading"))
        self._inflight += 1
        self._idle.clear()
        fut: asyncio.Future[InferResponse] = self._loop.create_future()
        task = self._loop.create_task(self._run(request, fut))
        fut.add_done_callback(lambda f: task.cancel() if f.cancelled() else None)
        return fut

    async def _run(self, request: InferRequest, fut: asyncio.Future[InferResponse]) -> None:
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
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    def instance_free(self) -> None:
        """Ensembles have no instances of their own."""

    def inflight(self) -> int:
        return self._inflight

    def stop(self) -> None:
        """Refuse new requests; those in flight finish (their steps are already queued)."""
        self._stopped = True

    async def wait_idle(self) -> None:
        await self._idle.wait()
