"""InferenceCore: the only API the front ends call.

Every method either returns plain data (dicts in the HTTP JSON shape, which gRPC converts to
messages) or raises TritonliteError. Front ends hold no behaviour of their own.

Over 500 lines, one module: ``InferenceCore`` is the facade of every endpoint; each method is a few
lines that call the sub-packages, and one class keeps the front ends' whole API in view.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Literal

import tritonlite
from tritonlite.backends.base import Readiness, ServerAccess
from tritonlite.contracts import config as model_config
from tritonlite.contracts.errors import (
    ErrorCode,
    Refusal,
    Rejected,
    TritonliteError,
    invalid_arg,
    unavailable,
    unsupported,
)
from tritonlite.contracts.stream import StreamResponse
from tritonlite.contracts.types import InferRequest, InferResponse, PlainAnswer
from tritonlite.core.core_options import CoreOptions
from tritonlite.core.models import lifecycle as lc
from tritonlite.core.models.overrides import decode_override_file
from tritonlite.core.models.repository import ModelRepository, control_error
from tritonlite.core.observability import latency
from tritonlite.core.observability.pressure import MemoryPressure
from tritonlite.core.observability.settings import LogSettings, TraceSettings
from tritonlite.core.observability.snapshot import MetricsSnapshot, snapshot
from tritonlite.core.observability.sysinfo import Samplers
from tritonlite.core.request.cache import ResponseCache
from tritonlite.core.request.stream import ResponseStream, is_decoupled
from tritonlite.core.runtime.arrivals import ARRIVALS
from tritonlite.core.runtime.lane import DirectLane
from tritonlite.core.runtime.model import Model
from tritonlite.core.runtime.split import SplitModel
from tritonlite.core.tensors import validate
from tritonlite.core.tensors.shm import SharedMemoryManager

log = logging.getLogger("tritonlite")

EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


# What ``infer`` says for a decoupled model; each front end names itself as Triton does.
DECOUPLED_REFUSAL = "Inference doesn't support models with decoupled transaction policy"


def _worded(exc: TritonliteError, refusal: Refusal | None, name: str) -> TritonliteError:
    """A refused request's error as its caller words it (unchanged without a ``refusal``)."""
    return exc if refusal is None else refusal.word(exc, name)


def _instances_ready(model: Any) -> bool:
    """Backend instances' own readiness probes (a python model's ``is_ready()``), if any."""
    for inst in model.instances:
        impl = inst.impl
        if inst.healthy and isinstance(impl, Readiness) and not impl.is_ready():
            return False
    return True


class _StepAdmission:
    """How ensembles admit their steps (handed to the repository as its ``step_infer``): a
    call runs one composing request as ``InferenceCore.step_infer``; ``stream`` runs one of a
    decoupled composing model as ``infer_stream`` (core/runtime/ensemble.py)."""

    __slots__ = ("_core",)

    def __init__(self, core: InferenceCore) -> None:
        self._core = core

    def __call__(self, request: InferRequest) -> Awaitable[InferResponse]:
        return self._core.step_infer(request)

    def stream(self, request: InferRequest) -> AsyncGenerator[StreamResponse, None]:
        return self._core.infer_stream(request)


class InferenceCore:
    def __init__(
        self,
        options: CoreOptions,
        *,
        in_process: Callable[[InferenceCore], ServerAccess] | None = None,
    ) -> None:
        """``in_process``: the in-process layer's server access (``inprocess.InProcessServer``),
        made from the core on the loop at ``start``; without it model code cannot reach the
        server (BLS requests fail as UNAVAILABLE)."""
        self.options = options
        self._in_process = in_process
        self.shm = SharedMemoryManager()
        self.trace = TraceSettings(
            options.trace_level,
            options.trace_rate,
            options.trace_count,
            options.trace_log_frequency,
            options.trace_file,
        )
        self.logging = LogSettings(
            options.log_verbose,
            options.log_info,
            options.log_warning,
            options.log_error,
            options.log_format,
            options.log_file,
        )
        self.live = True
        self.exiting = False
        self.stopping = False  # the stop signal came: not ready, though still admitting
        self.started = False
        # Decoupled requests still streaming after their execute returned: in flight until
        # their final response, so a graceful stop waits for them too (drain_streams).
        self.open_streams: set[ResponseStream] = set()
        # Memory pressure sheds the cache's inserts and the histograms' observations; both read
        # this one flag (core/pressure.py), sampled from start() to stop().
        self.pressure = MemoryPressure(
            options.memory_pressure_threshold, options.metrics_interval_ms / 1000.0
        )
        # One response cache for every model that enables it (PROTOCOL §3.4); None: no cache,
        # and models asking for one load and run uncached, as in Triton.
        self.cache = (
            ResponseCache(options.response_cache_byte_size, self.pressure)
            if options.response_cache_byte_size > 0
            else None
        )
        mc = options.metrics_config
        recorder = latency.recorder_factory(
            options.allow_metrics and mc.summary_latencies,
            mc.histogram_buckets_us if options.allow_metrics and mc.histogram_latencies else None,
            self.pressure,
        )
        self.repository = ModelRepository(options, self.shm, _StepAdmission(self), recorder)
        # CPU/GPU readings for /metrics: polled only while the metrics service runs
        self.samplers = Samplers(
            options.allow_cpu_metrics, options.allow_gpu_metrics, options.metrics_interval_ms
        )

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> list[str]:
        """Load the startup models; returns the names that failed to load."""
        if self._in_process is not None:  # before loading: a model's initialize may use it
            self.repository.server = self._in_process(self)
        self.pressure.start()
        failed = await self.repository.startup()
        self.started = True
        return failed

    async def stop(self) -> None:
        self.exiting = True
        await self.repository.shutdown()
        await self.pressure.stop()
        self.shm.close()
        self.trace.close()

    # -- health and metadata ------------------------------------------------------------------
    def is_live(self) -> bool:
        return self.live and not self.exiting

    def is_ready(self) -> bool:
        if self.exiting or self.stopping or not self.started:
            return False
        if not self.options.strict_readiness:
            return True
        return self.repository.all_ready()

    def server_metadata(self) -> dict[str, Any]:
        return {
            "name": self.options.server_id,
            "version": tritonlite.TRITON_VERSION,
            "extensions": list(EXTENSIONS),
        }

    def model_ready(self, name: str, version: int) -> bool:
        """True if ready; raises NOT_FOUND when the model (or version) is unknown."""
        entry = self.repository.models.get(name)
        if entry is None or not entry.versions:
            raise TritonliteError(
                ErrorCode.NOT_FOUND, f"Request for unknown model: '{name}' is not found"
            )
        if version < 0:
            return any(s.is_ready and _instances_ready(s.model) for s in entry.versions.values())
        st = entry.versions.get(version)
        if st is None:
            raise TritonliteError(
                ErrorCode.NOT_FOUND,
                f"Request for unknown model: '{name}' version {version} is not found",
            )
        return st.is_ready and _instances_ready(st.model)

    def model_metadata(self, name: str, version: int) -> dict[str, Any]:
        model = self.repository.get(name, version)
        sig = model.signature
        if version < 0:
            entry = self.repository.models[name]
            versions = [str(v) for v in sorted(entry.versions) if entry.versions[v].is_ready]
        else:
            versions = [str(version)]
        return {
            "name": name,
            "versions": versions,
            "platform": sig.platform,
            "inputs": [
                {"name": s.name, "datatype": s.datatype, "shape": sig.metadata_shape(s)}
                for s in sig.inputs.values()
            ],
            "outputs": [
                {"name": s.name, "datatype": s.datatype, "shape": sig.metadata_shape(s)}
                for s in sig.outputs.values()
            ],
        }

    def model_config(self, name: str, version: int) -> Any:
        """The normalized ``pb.ModelConfig`` message."""
        return self.repository.get(name, version).config

    def model_config_json(self, name: str, version: int) -> bytes:
        return model_config.render_json_bytes(self.model_config(name, version))

    # -- inference ------------------------------------------------------------------------------
    async def infer(
        self,
        request: InferRequest,
        decoupled_message: str = DECOUPLED_REFUSAL,
        *,
        refusal: Refusal | None = None,
    ) -> InferResponse:
        """Run one request. When it comes back with ``request.trace`` set (it was sampled for
        tracing), the caller owns that trace: it adds its front-end stamps and calls
        ``release()`` once the response is sent. On an error the core releases it.

        ``refusal``: the caller's wording of a request refused before it reached the model
        (BLS); it then replaces ``decoupled_message`` too."""
        if refusal is not None:
            return await self._infer_worded(request, refusal)
        if self.exiting:
            raise unavailable("Server is exiting")
        model = self.repository.get(request.model_name, request.model_version)
        if model.signature.decoupled:  # (``is_decoupled``, read in place: every request asks)
            raise unsupported(decoupled_message)
        return await self._run(model, request)

    def arrivals(self) -> int:
        """How many inference requests have gone to a model so far (``ARRIVALS``)."""
        return ARRIVALS.n

    def infer_now(self, request: InferRequest) -> InferResponse | None:
        """``infer``'s response, computed now on this thread by the model's single-request lane
        (``core/runtime/lane.py``: a model without batching whose run stays on the loop,
        nothing queued); None when the request must take ``infer`` (tracing, the response
        cache, anything the lane does not cover), with nothing done. Raises what ``infer``
        raises for an unknown model or a request that fails validation."""
        lane = self._lane(request.model_name, request.model_version)
        return None if lane is None else lane.run(request)

    def infer_plain(
        self, name: str, version: int, key: tuple[Any, ...], feed: dict[str, Any]
    ) -> PlainAnswer | Literal[False] | None:
        """``infer_now`` for a request that is only its inputs -- no id, parameters or
        requested outputs: every output is answered -- given as ``key``, its inputs' ``(name,
        datatype, shape)`` in order, and ``feed``, their arrays by name, each of its shape:
        ``(model name, version, [(output name, datatype, array), ...])``. None, with nothing
        done, when ``infer_now`` would not answer it or when its lane has not yet seen that
        structure pass validation (the caller then builds the request and takes
        ``infer_now``/``infer``, which word every error). False when the lane ran it and the
        run failed (nothing recorded): the caller then takes ``infer`` at once, never
        ``infer_now``, so that the request runs once more at most. Raises what ``infer``
        raises for an unknown model."""
        lane = self._lane(name, version)
        return None if lane is None else lane.run_plain(key, feed)

    def _lane(self, name: str, version: int) -> DirectLane | None:
        """The single-request lane of model ``name`` ``version`` when a request may take it
        (not while exiting or tracing, nor for a model whose responses are cached), else None;
        a request it returns a lane for is counted in ``ARRIVALS``, as admission counts the
        others. Raises what ``infer`` raises for an unknown model."""
        if self.exiting or self.trace.enabled:
            return None
        repository = self.repository
        key = (name, version)
        kept = repository.kept.get(key)
        if kept is not None and kept[0].ready:
            lane = kept[1]
        else:
            model = repository.get(name, version)
            lane = model.lane
            if lane is None or (self.cache is not None and model.response_cache):
                lane = None
            repository.keep(name, version, model, lane)
        if lane is not None:
            ARRIVALS.n += 1
        return lane

    async def _infer_worded(self, request: InferRequest, refusal: Refusal) -> InferResponse:
        """``infer`` for a caller that words its refusals (``refusal``)."""
        name = request.model_name
        admitted = [False]
        try:
            if self.exiting:
                raise unavailable("Server is exiting")
            model = self._lookup(request, refusal)
            if is_decoupled(model):
                raise unsupported(refusal.decoupled.replace("{name}", name))
            return await self._run(model, request, admitted)
        except TritonliteError as exc:
            if admitted[0] and not isinstance(exc, Rejected):
                raise  # the model's failure, in its own words
            raise _worded(exc, refusal, name) from None

    def _lookup(self, request: InferRequest, refusal: Refusal | None) -> Model:
        """The one model lookup of a request, its failure worded by ``refusal`` when given."""
        try:
            return self.repository.get(request.model_name, request.model_version)
        except TritonliteError as exc:
            if refusal is None:
                raise
            message = refusal.unknown_model.replace("{name}", request.model_name)
            raise TritonliteError(exc.code, message) from None

    async def step_infer(self, request: InferRequest) -> InferResponse:
        """An ensemble step's composing request (the ensemble scheduler calls it through its
        ``EnsembleHost``): admitted as a client's request is, without a trace of its own."""
        model = self.repository.get(request.model_name, request.model_version)
        return await self._run(model, request, traced=False)

    def _validate(self, model: Model, request: InferRequest) -> None:
        """Admission's validation and arrival stamp (see ``_run``)."""
        if request.raw_input is not None:
            validate.fill_raw_input(model.signature, request)
        validate.prepare(model.signature, request, self.shm)
        request.arrival_ns = time.monotonic_ns()

    async def _run(
        self,
        model: Model,
        request: InferRequest,
        admitted: list[bool] | None = None,
        traced: bool = True,
    ) -> InferResponse:
        """The one admission path once the model is known (``infer``, ``infer_stream``,
        ensemble steps; BLS comes through ``infer_stream``): validation, the arrival stamp,
        then the response cache or the model's scheduler. ``admitted[0]`` is set once the
        request passed validation (what tells a refused request from a failed one).

        The request starts (``arrival_ns``, the trace's REQUEST_START) once it is validated:
        Triton captures its request start in ``InferAsync``, after the model lookup
        (``TRITONSERVER_InferenceRequestNew``) and ``PrepareForInference``, so its statistics'
        request duration, and the overhead perf_analyzer derives from it, leave both out.
        """
        trace = (
            self.trace.sample(model.name, model.version, request.id)
            if traced and self.trace.enabled
            else None
        )
        if trace is not None:
            request.trace = trace
        try:
            # A request that fails validation never reaches the model: Triton leaves it out
            # of the model's statistics.
            if request.raw_input is not None:  # (``_validate``, written out)
                validate.fill_raw_input(model.signature, request)
            validate.prepare(model.signature, request, self.shm)
            request.arrival_ns = time.monotonic_ns()
            if trace is not None:
                trace.stamp("REQUEST_START", request.arrival_ns)
            if admitted is not None:
                admitted[0] = True
            if self.cache is not None and model.response_cache:
                response = await self.cache.infer(model, request, self.shm)
                if trace is not None:
                    trace.end(time.monotonic_ns())
                return response
            ARRIVALS.n += 1
            return await model.scheduler.enqueue(request)
        except BaseException:
            if trace is not None:
                if trace.stamps:  # refused by validation: it never started (no core stamps)
                    trace.end(time.monotonic_ns())
                trace.release()
            raise
        finally:
            if self.shm.holding:  # its response is written (or never will be)
                self.shm.release(request)

    async def infer_stream(
        self, request: InferRequest, *, refusal: Refusal | None = None
    ) -> AsyncGenerator[StreamResponse, None]:
        """Run one request of any model; yields its responses as they come (``StreamResponse``).

        Contract, for every model:

        - the last item has ``final`` True and no other does; nothing follows it;
        - errors never raise out of the iterator: a request that cannot run (unknown model,
          bad inputs, queue full, a failed execution) yields one error item, ``final`` True,
          with ``refused`` True when the request never got past lookup, validation and the
          scheduler's intake (``Rejected``: a full queue, a sequence without START); a
          decoupled model's error response is an error item, final or not as it was sent;
        - a model that ends its request without a last response (a flags-only final) yields
          ``StreamResponse(None, None, final=True)``: the front end decides whether the client
          sees an empty response (gRPC's ``triton_enable_empty_final_response``) or nothing;
        - a non-decoupled model yields exactly one item: its response or its error, ``final``;
          such a request is traced as ``infer`` traces it (``request.trace``, once set, is the
          caller's to release);
        - closing the iterator early (``aclose``, or cancelling the task iterating it) cancels
          the request: a queued one never runs, a running decoupled one sees
          ``is_cancelled()`` and whatever it sends afterwards is dropped.

        Statistics are kept as for ``infer``: a request counts once, when its execution ends;
        for a decoupled model, as in Triton, when its final response is sent (core/stream.py),
        so its compute_infer spans the whole stream.

        ``refusal``: the caller's wording of the refused items' errors (BLS), as for ``infer``.
        """
        try:
            if self.exiting:
                raise unavailable("Server is exiting")
            model = self._lookup(request, refusal)
            decoupled = is_decoupled(model)
            if decoupled:
                self._validate(model, request)
        except TritonliteError as exc:
            if self.shm.holding:
                self.shm.release(request)
            yield StreamResponse(
                None, _worded(exc, refusal, request.model_name), True, refused=True
            )
            return
        if not decoupled:
            admitted = [False]
            try:
                response = await self._run(model, request, admitted)
            except TritonliteError as exc:
                refused = not admitted[0] or isinstance(exc, Rejected)
                if refused:
                    exc = _worded(exc, refusal, request.model_name)
                yield StreamResponse(None, exc, True, refused=refused)
                return
            yield StreamResponse(response, None, True)
            return
        stream = ResponseStream(asyncio.get_running_loop(), model, request)
        request.responder = stream
        try:
            fut = model.scheduler.enqueue(request)
        except Rejected as exc:
            self.shm.release(request)
            yield StreamResponse(
                None, _worded(exc, refusal, request.model_name), True, refused=True
            )
            return
        early = fut.exception() if fut.done() and not fut.cancelled() else None
        if isinstance(early, Rejected):  # refused by the scheduler's intake, as above
            self.shm.release(request)
            yield StreamResponse(
                None, _worded(early, refusal, request.model_name), True, refused=True
            )
            return
        fut.add_done_callback(stream.executed)
        finished = False
        self.open_streams.add(stream)
        try:
            while not finished:
                item = await stream.get()
                finished = item.final
                yield item
        finally:
            self.open_streams.discard(stream)
            if self.shm.holding:
                self.shm.release(request)
            if not finished:
                stream.cancel()
                if not fut.done():
                    fut.cancel()  # a queued request is skipped; a running one runs on

    async def drain_streams(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the open decoupled streams to end; True if none is left."""
        deadline = time.monotonic() + timeout_s
        while self.open_streams and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return not self.open_streams

    # -- metrics read-model --------------------------------------------------------------------
    def metrics_snapshot(self) -> MetricsSnapshot:
        """What ``/metrics`` shows, as plain rows (core/observability/snapshot.py)."""
        repo = self.repository
        ready = repo.ready_models()
        # instance health: every loaded version, ready or not (all its instances may be down)
        loaded = [
            st.model
            for entry in sorted(repo.models.values(), key=lambda e: e.name)
            for _, st in sorted(entry.versions.items())
            if st.model is not None and st.state == lc.READY
        ]
        cache = self.cache
        return snapshot(
            ready,
            loaded,
            [m for m in ready if isinstance(m, SplitModel)],
            cache_on=lambda m: cache is not None and m.response_cache,
            quantiles=[q for q, _ in self.options.metrics_config.summary_quantiles],
            pressure=self.pressure,
            samplers=self.samplers,
        )

    async def start_sampling(self) -> None:
        """Open the CPU/GPU samplers the options ask for and poll them (the metrics service's
        start)."""
        await self.samplers.start()

    async def stop_sampling(self) -> None:
        await self.samplers.stop()

    # -- statistics -------------------------------------------------------------------------------
    def statistics(self, name: str = "", version: int = -1) -> dict[str, Any]:
        if name:
            try:
                models = self.repository.ready_models(name, version)
                if version < 0:  # every loaded version, as Triton answers
                    models = [m for m in self.repository.ready_models() if m.name == name]
            except TritonliteError:
                if version >= 0 and name in self.repository.models:
                    raise invalid_arg(
                        f"requested model version is not available for model '{name}'"
                    ) from None
                raise invalid_arg(f"requested model '{name}' is not available") from None
        else:
            models = self.repository.ready_models()
        return {"model_stats": [m.stats.to_dict(m.name, m.version_str) for m in models]}

    # -- model repository -------------------------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return self.repository.index(ready_only)

    async def load_model(self, name: str, parameters: dict[str, Any]) -> None:
        """Explicit load; ``parameters`` values: str (HTTP/gRPC string) or bytes (gRPC file:)."""
        if self.options.model_control_mode != "explicit":
            raise control_error(self.options.model_control_mode)
        config_json: str | None = None
        files: dict[str, bytes] = {}
        for key, value in parameters.items():
            if key == "config":
                if not isinstance(value, str):
                    raise invalid_arg("load parameter 'config' must be a string holding JSON")
                config_json = value
            elif key.startswith("file:"):
                rel, content = decode_override_file(key, value)
                files[rel] = content
            else:
                raise invalid_arg(f"unrecognized load parameter '{key}'")
        await self.repository.load(name, config_json, files or None)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        if self.options.model_control_mode != "explicit":
            raise control_error(self.options.model_control_mode)
        await self.repository.unload(name, unload_dependents)

    # -- shared memory ----------------------------------------------------------------------------
    def _check_shm_allowed(self, peer_is_local: bool, what: str = "registration") -> None:
        policy = self.options.allow_client_shm
        if policy == "false" or (policy == "local" and not peer_is_local):
            raise unsupported(
                f"shared memory {what} is not allowed from this client "
                f"(--allow-client-shm={policy})"
            )

    def _check_shm_peer(self, peer_is_local: bool, what: str) -> None:
        """Status and unregistration: refused to a non-local peer under ``local`` (it would
        see or drop local clients' regions). Under ``false`` nothing is registered, and both
        answer as usual (perf_analyzer unregisters everything at start-up)."""
        if self.options.allow_client_shm == "local" and not peer_is_local:
            self._check_shm_allowed(peer_is_local, what)

    def system_shm_status(self, name: str = "", peer_is_local: bool = True) -> list[dict[str, Any]]:
        self._check_shm_peer(peer_is_local, "status")
        return self.shm.system_status(name)

    def unregister_system_shm(self, name: str = "", peer_is_local: bool = True) -> None:
        self._check_shm_peer(peer_is_local, "unregistration")
        self.shm.unregister_system(name)

    def cuda_shm_status(self, name: str = "", peer_is_local: bool = True) -> list[dict[str, Any]]:
        self._check_shm_peer(peer_is_local, "status")
        return self.shm.cuda_status(name)

    def unregister_cuda_shm(self, name: str = "", peer_is_local: bool = True) -> None:
        self._check_shm_peer(peer_is_local, "unregistration")
        self.shm.unregister_cuda(name)

    def register_system_shm(
        self, name: str, key: str, offset: int, byte_size: int, peer_is_local: bool
    ) -> None:
        self._check_shm_allowed(peer_is_local)
        self.shm.register_system(name, key, offset, byte_size)

    def register_cuda_shm(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int, peer_is_local: bool
    ) -> None:
        self._check_shm_allowed(peer_is_local)
        self.shm.register_cuda(name, raw_handle, device_id, byte_size)
