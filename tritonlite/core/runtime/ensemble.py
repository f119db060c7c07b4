"""The ensemble as the core loads it: ``EnsembleBackend`` (its graph, no instances) and
``EnsembleModel``, the loaded version, which is also its scheduler's ``EnsembleHost``
(scheduling/ensemble.py runs the step graph).

A step of a decoupled composing model runs as the core's ``infer_stream`` runs a client's
request (``EnsembleModel.step_stream``); the repository's ``step_infer`` is the core's step
admission, which offers that as its ``stream``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from tritonlite.backends.base import ModelOutputs
from tritonlite.contracts.errors import TritonliteError, internal, unsupported
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.types import InferRequest, InferResponse
from tritonlite.core.observability.stats import ModelStats
from tritonlite.core.runtime.model import Model
from tritonlite.core.tensors.outputs import build_response
from tritonlite.scheduling.ensemble import EnsembleGraph, EnsembleScheduler, StepItem


class ComposingModels(Protocol):
    """Where an ensemble finds its composing models and admits its steps (the repository)."""

    step_infer: Callable[[InferRequest], Awaitable[InferResponse]]

    def get(self, name: str, version: int = -1) -> Model: ...


@runtime_checkable
class StepStreams(Protocol):
    """A step admission that also runs decoupled composing requests (the core's)."""

    def stream(self, request: InferRequest) -> AsyncIterator[StepItem]: ...


class _EnsembleStats(ModelStats):
    """An ensemble's statistics: no per-response entries (Triton's ensembles report none, even
    when decoupled; each composing model reports its own)."""

    __slots__ = ()

    def record_response(self, index: int, outcome: str, infer_ns: int, output_ns: int) -> None:
        return None


class EnsembleBackend:
    """What an ensemble has in place of a backend: its graph and the repository it runs in."""

    def __init__(self, graph: EnsembleGraph, repository: ComposingModels) -> None:
        self.graph = graph
        self.repository = repository

    def new_instance(self, spec: Any) -> Any:
        raise internal(f"ensemble '{self.graph.name}' has no instances")

    def close(self) -> None:
        """Nothing to release: the composing models are loaded and unloaded on their own."""


class EnsembleModel(Model):
    """A loaded ensemble version: no instances; ready while every composing model is. Its
    scheduler's ``EnsembleHost``: steps are admitted by the core's one admission path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stats = _EnsembleStats(self.stats.latency)

    @property
    def graph(self) -> EnsembleGraph:
        backend = self.backend
        assert isinstance(backend, EnsembleBackend)
        return backend.graph

    @property
    def _repository(self) -> ComposingModels:
        backend = self.backend
        assert isinstance(backend, EnsembleBackend)
        return backend.repository

    async def step_infer(self, request: InferRequest) -> InferResponse:
        return await self._repository.step_infer(request)

    def step_stream(self, request: InferRequest) -> AsyncIterator[StepItem]:
        admit = self._repository.step_infer
        if not isinstance(admit, StepStreams):  # a repository built without the core
            raise unsupported(f"ensemble '{self.name}' cannot run decoupled steps here")
        return admit.stream(request)

    def composing_signature(self, name: str, version: int) -> Signature:
        return self._repository.get(name, version).signature

    def respond(self, request: InferRequest, produced: ModelOutputs) -> InferResponse:
        sig = self.output_signature(request)
        return build_response(sig, self.version_str, request, produced, self.shm)

    def output_signature(self, request: InferRequest) -> Signature:
        """Asked for classes, an ensemble output without a ``label_filename`` of its own takes
        the labels of the composing model output it is mapped from, as Triton's does."""
        if request.outputs is None or not any(o.classification for o in request.outputs):
            return self.signature
        return self._labelled()

    def _labelled(self) -> Signature:
        outputs = dict(self.signature.outputs)
        for name, spec in outputs.items():
            if not spec.labels:
                labels = self._composing_labels(name)
                if labels:
                    outputs[name] = dataclasses.replace(spec, labels=labels)
        return dataclasses.replace(self.signature, outputs=outputs)

    def _composing_labels(self, tensor: str) -> tuple[str, ...]:
        for step in self.graph.steps:
            for model_output, produced in step.outputs:
                if produced != tensor:
                    continue
                try:
                    model = self._repository.get(step.model_name, step.model_version)
                except TritonliteError:
                    return ()
                sig = model._labelled() if isinstance(model, EnsembleModel) else model.signature
                spec = sig.outputs.get(model_output)
                return spec.labels if spec is not None else ()
        return ()

    @property
    def ready(self) -> bool:
        backend = self.backend
        assert isinstance(backend, EnsembleBackend)
        repo = backend.repository
        for step in backend.graph.steps:
            try:
                repo.get(step.model_name, step.model_version)
            except TritonliteError:
                return False
        return True

    async def drain(self, timeout_s: float | None = None) -> None:
        sched = self.scheduler
        assert isinstance(sched, EnsembleScheduler)
        try:
            await asyncio.wait_for(sched.wait_idle(), timeout_s)
        except asyncio.TimeoutError:
            pass
