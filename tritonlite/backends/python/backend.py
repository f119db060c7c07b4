"""Python backend (``backend: "python"``): Triton's ``TritonPythonModel`` classes, in this process.

One ``PythonBackend`` per loaded version imports ``<version>/model.py`` (``python_loader`` keeps
models' imports apart) and makes one ``TritonPythonModel()`` per model instance, each with its
own thread: the core runs ``new_instance``, ``execute`` and ``close`` of an instance on one
thread, so ``initialize``, ``execute`` and ``finalize`` all run on it, as they run on the one
thread of Triton's stub process (thread-local state such as a CUDA device or torch's grad mode
set in ``initialize`` holds in ``execute``). ``async def execute`` runs on a per-instance event
loop on a second thread, created on first use, as in Triton. One exception, for speed: once a
model's recent executes took under 300 us, the core runs them on its event loop thread (the
thread hand-offs cost more than that; core/model.py ``INLINE_MAX_NS``), unless the model could
block the loop (decoupled, ``async def execute``, BLS calls in its sources) or its config sets
``TRITONLITE_INLINE_EXECUTE: "false"``; ``get_model_dir()`` still answers its own directory.

Results follow Triton's stub: one ``InferenceResponse`` per request in order (or None when the
request's response sender already sent it); an exception, a non-list or a wrong count fails the
whole batch with ``Failed to process the request(s) for model '<instance>', message: ...``
(INTERNAL); a response's ``TritonError`` fails its request alone with the error's code. Outputs
the client did not request are dropped and requested ones the model did not return are left out;
response parameters go into the response.

Decoupled models (``model_transaction_policy { decoupled: true }``) answer through
``request.get_response_sender()``: each ``send`` goes straight to the request's
``ResponseStream`` (core/stream.py), from ``execute`` or from any thread after it returns;
``execute`` must return None (Triton's check and message). Each response's statistics
(``response_stats``) are taken by the stream: compute infer from ``execute``'s start or the
previous response, compute output while the response is built. An ``async def execute`` of a
decoupled model runs in the background on the instance's event loop, so the instance takes its
next batch at once, as in Triton. When a decoupled execute fails, every request not yet
finished gets the error as its final response and its sender is closed; an async one that
fails does the same (Triton only logs it, leaving such requests open).

UNSUPPORTED: request rescheduling (its request fails). BLS requests a model makes run through
the server's core (``backends/bls.py``). A model whose config sets ``EXECUTION_ENV_PATH`` is
not imported here: its instances run in worker processes of that environment
(``backends/python/env.py``).

Fatal errors (the instance is taken out of rotation and rebuilt: a fresh ``TritonPythonModel``
with ``initialize`` called again, see backends/base.py): ``execute`` raising ``SystemExit`` or
``MemoryError`` (what ends Triton's stub process, which Triton restarts), or raising anything
while the model's own ``is_ready()``, asked right then, returns False: that is how a model
says an error left it unusable. Every other exception fails the batch only.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from _thread import get_ident
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import CoroutineType
from typing import Any

from tritonlite import kernels
from tritonlite.backends.base import (
    BackendFatalError,
    InstanceSpec,
    ModelContext,
    ModelOutputs,
    Result,
)
from tritonlite.backends.python import loader as python_loader
from tritonlite.backends.python import pb_core, pb_utils
from tritonlite.backends.python.env import PythonEnvBackend, PythonEnvInstance, uses_environment
from tritonlite.backends.python.loader import ModelScope, describe
from tritonlite.backends.python.model_setup import STREAMED, initialize_args, model_file
from tritonlite.contracts.errors import (
    ErrorCode,
    ErrorResponse,
    TritonliteError,
    internal,
    unsupported,
)
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest

log = logging.getLogger("tritonlite")

pb_utils._install()
pb_utils._caller_model_dir = python_loader.caller_model_dir

_READY_TIMEOUT_S = 5.0  # Triton's bound on a model's is_ready()
_probes = ThreadPoolExecutor(max_workers=4, thread_name_prefix="python-is-ready")


# A fast model's execute may run on the server's event loop thread instead of its instance
# thread (see ``PythonInstance.thread_agnostic``); this config parameter, "false", forbids it.
INLINE_PARAMETER = "TRITONLITE_INLINE_EXECUTE"


def _may_run_inline(cfg: Any, cls: type, version_dir: Path) -> bool:
    """Whether this model's execute may run on the event loop when it is fast: not decoupled,
    a plain (not async) execute, no BLS requests in its sources (a BLS call blocks on the
    loop), and not opted out with ``TRITONLITE_INLINE_EXECUTE: "false"``."""
    if cfg.model_transaction_policy.decoupled:
        return False
    if INLINE_PARAMETER in cfg.parameters and cfg.parameters[
        INLINE_PARAMETER
    ].string_value.strip().lower() in ("false", "0", "no"):
        return False
    if inspect.iscoroutinefunction(getattr(cls, "execute", None)):
        return False
    for source in version_dir.rglob("*.py"):
        try:
            text = source.read_text(errors="replace")
        except OSError:
            return False
        if "InferenceRequest(" in text or "exec(" in text:
            return False
    return True


class PythonBackend:
    def __init__(self, ctx: ModelContext) -> None:
        pb_utils.attach_server(ctx.server)
        cfg = ctx.config
        name = ctx.name
        self.decoupled = bool(cfg.model_transaction_policy.decoupled)
        # A model with its own environment runs in worker processes (backends/python/env.py).
        self.env_backend = PythonEnvBackend(ctx) if uses_environment(cfg) else None
        if self.env_backend is not None:
            return
        path = model_file(ctx)
        self.ctx = ctx
        self.path = path
        self.scope = ModelScope(name, ctx.version, ctx.model_dir, path)
        try:
            module = self.scope.load()
        except Exception as exc:
            self.scope.close()
            raise internal(describe(exc)) from None
        cls = getattr(module, "TritonPythonModel", None)
        if cls is None:
            self.scope.close()
            raise internal(
                f"AttributeError: module '{module.__name__}' has no attribute 'TritonPythonModel'"
            )
        self.model_class = cls
        self.outputs = [o.name for o in cfg.output]
        self.inline = _may_run_inline(cfg, cls, ctx.version_dir)
        kernels.warmup()  # BYTES outputs go through the kernels; compile now, not on a request

    def new_instance(self, spec: InstanceSpec) -> PythonInstance | PythonEnvInstance:
        if self.env_backend is not None:
            return self.env_backend.new_instance(spec)
        return PythonInstance(self, spec)

    def close(self) -> None:
        if self.env_backend is None:
            self.scope.close()


class PythonInstance:
    """One ``TritonPythonModel`` object and the thread it runs on."""

    def __init__(self, backend: PythonBackend, spec: InstanceSpec) -> None:
        self._backend = backend
        self._ctx = backend.ctx
        self._name = spec.name
        self._scope = backend.scope
        self._model: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._ident = threading.get_ident()  # the instance's thread (see the module docstring)
        self._initialize(spec)

    @property
    def thread_agnostic(self) -> bool:
        """The core may run a short ``execute`` on its event loop thread (as it does short ONNX
        batches): two thread hand-offs cost more than a fast model's execute. Only models that
        cannot block on the loop qualify (see ``_may_run_inline``); ``initialize`` and
        ``finalize`` always run on the instance thread."""
        return self._backend.inline

    # -- model thread ------------------------------------------------------------------------
    def _initialize(self, spec: InstanceSpec) -> None:
        ctx = self._ctx
        pb_utils._runtime.model_dir = self._scope.version_dir
        args = initialize_args(ctx, spec)
        # No scope lock here: models initialize in parallel (loading weights can take minutes);
        # sibling imports made now reach the model's files through the loader's finder.
        try:
            self._model = self._backend.model_class()
            init = getattr(self._model, "initialize", None)
            if init is not None:
                ret = init(args)
                if inspect.iscoroutine(ret):
                    self._run_coroutine(ret)
        except Exception as exc:
            raise internal(describe(exc)) from None
        finally:
            python_loader.sweep()

    def execute(self, requests: list[InferRequest], timing: ExecTiming) -> list[Result]:
        if get_ident() != self._ident:  # run inline on the loop thread
            runtime = pb_utils._runtime
            saved = runtime.model_dir
            runtime.model_dir = self._scope.version_dir
            try:
                return self._execute_here(requests, timing)
            finally:
                runtime.model_dir = saved
        return self._execute_here(requests, timing)

    def _execute_here(self, requests: list[InferRequest], timing: ExecTiming) -> list[Result]:
        ctx = self._ctx
        default_outputs = self._backend.outputs
        of_core = pb_utils.InferenceRequest._of_core
        name, version = ctx.name, ctx.version
        batch = [of_core(r, default_outputs, name, version) for r in requests]
        decoupled = self._backend.decoupled
        if decoupled:
            for pb_req, core_req in zip(batch, requests):
                pb_req._sender = _decoupled_sender(core_req)
        timing.input_end_ns = time.monotonic_ns()
        if decoupled:
            for core_req in requests:
                if core_req.responder is not None:  # response statistics start here
                    core_req.responder.begin(timing.input_end_ns)
        try:
            ret = pb_core.execute_function(self._model, str(self._backend.path))(batch)
            if decoupled:
                if inspect.iscoroutine(ret):
                    self._run_in_background(ret, batch, requests)
                elif ret is not None:
                    raise pb_core.decoupled_returned(self._name)
                timing.infer_end_ns = time.monotonic_ns()
                return [STREAMED] * len(requests)
            if type(ret) is CoroutineType:
                ret = self._run_coroutine(ret)
            timing.infer_end_ns = time.monotonic_ns()
            return self._results(batch, ret)
        except (SystemExit, MemoryError) as exc:
            # What would end Triton's stub process (which Triton then restarts): fatal.
            raise BackendFatalError(self._failure(exc).message) from None
        except Exception as exc:
            timing.infer_end_ns = timing.infer_end_ns or time.monotonic_ns()
            err = self._failure(exc)
            log.error("%s", err.message)
            if decoupled:
                # The core ends each request still open with ``err``; no more sends after it.
                for pb_req in batch:
                    pb_req.get_response_sender()._close()
            if getattr(self._model, "is_ready", None) is not None and not self.is_ready():
                raise BackendFatalError(
                    f"{err.message}\n(and its is_ready() is now False)"
                ) from exc
            return [err] * len(requests)
        finally:
            python_loader.sweep()

    def _run_in_background(
        self, coro: Any, batch: list[pb_utils.InferenceRequest], requests: list[InferRequest]
    ) -> None:
        """A decoupled ``async def execute``: not awaited; a failure ends the open requests."""
        fut = asyncio.run_coroutine_threadsafe(coro, self._event_loop())

        def done(f: Any) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if exc is None:
                return
            err = self._failure(exc)
            log.error("%s", err.message)
            for pb_req, core_req in zip(batch, requests):
                if pb_req.get_response_sender()._close() and core_req.responder is not None:
                    core_req.responder.send(err, True)

        fut.add_done_callback(done)

    def _failure(self, exc: BaseException) -> TritonliteError:
        text, unsupported_feature = pb_core.execute_failure(exc, describe)
        kind = ErrorCode.UNSUPPORTED if unsupported_feature else ErrorCode.INTERNAL
        return TritonliteError(
            kind, f"Failed to process the request(s) for model '{self._name}', message: {text}"
        )

    def _results(self, batch: list[pb_utils.InferenceRequest], ret: Any) -> list[Result]:
        results: list[Result] = []
        for req, resp in zip(batch, pb_core.execute_results(ret, len(batch))):
            sender = req._sender  # made only if the model asked for it
            sent = sender.response if sender is not None else None
            reschedule = bool(req._release_flags & pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            if resp is not None:
                if reschedule:
                    raise pb_core.BatchError(
                        "Expected a None object in the execute function return list for "
                        f"reschduled request, found type '{type(resp)}'."
                    )
                resp = pb_core.returned_response(resp, sent)
            elif reschedule:
                results.append(
                    unsupported(
                        f"model '{self._name}' asked to reschedule a request "
                        "(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE): not supported yet"
                    )
                )
                continue
            else:
                resp = sent
            if resp is None:
                results.append(
                    internal(
                        f"Failed to process the request(s) for model '{self._name}', message: "
                        + pb_core.NO_RESPONSE
                    )
                )
                continue
            results.append(_result(resp))
        return results

    def _run_coroutine(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._event_loop()).result()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            model_dir = self._scope.version_dir

            def run() -> None:
                pb_utils._runtime.model_dir = model_dir
                asyncio.set_event_loop(loop)
                loop.run_forever()

            self._loop_thread = threading.Thread(
                target=run, name=f"{self._name}-asyncio", daemon=True
            )
            self._loop_thread.start()
            self._loop = loop
            if threading.get_ident() == self._ident:
                asyncio.set_event_loop(loop)
        return self._loop

    def _finalize(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=5.0)
            if not loop.is_running():
                loop.close()
        fn = getattr(self._model, "finalize", None)
        if fn is not None:
            try:
                ret = fn()
                if inspect.iscoroutine(ret):
                    asyncio.run(ret)
            except Exception as exc:
                log.error("finalize of model instance '%s' failed: %s", self._name, describe(exc))
            finally:
                python_loader.sweep()
        self._model = None

    # -- other threads ---------------------------------------------------------------------
    def is_ready(self) -> bool:
        """The model's own ``is_ready()`` (sync or async), bounded by 5 s; True without one."""
        fn = getattr(self._model, "is_ready", None)
        if fn is None:
            return True

        def probe() -> Any:
            pb_utils._runtime.model_dir = self._scope.version_dir
            ret = fn()
            if inspect.iscoroutine(ret):
                loop = self._event_loop()
                ret = asyncio.run_coroutine_threadsafe(ret, loop).result(_READY_TIMEOUT_S)
            return ret

        try:
            ready = _probes.submit(probe).result(timeout=_READY_TIMEOUT_S)
        except Exception as exc:
            log.warning(
                "is_ready() of model instance '%s' failed: %s",
                self._name,
                describe(exc) if not isinstance(exc, TimeoutError) else "timed out",
            )
            return False
        if not isinstance(ready, bool):
            log.warning(
                "is_ready() of model instance '%s' returned %s, not a bool",
                self._name,
                type(ready).__name__,
            )
            return False
        return ready

    def close(self) -> None:
        self._finalize()


def _decoupled_sender(req: InferRequest) -> pb_utils.InferenceResponseSender:
    stream = req.responder
    if stream is None:  # only infer_stream runs decoupled models; a guard, not a path
        raise internal("a request of a decoupled model came without a response stream")

    def deliver(resp: pb_utils.InferenceResponse | None, final: bool) -> None:
        stream.send(None if resp is None else _result(resp), final)

    return pb_utils.InferenceResponseSender(True, deliver, stream.is_cancelled)


def _result(resp: pb_utils.InferenceResponse) -> Result:
    err = resp._error
    if err is not None:
        return ErrorResponse(ErrorCode[err.code().name], err.message())
    outputs = ModelOutputs(parameters=resp._parameters, partial=True)
    for tensor in resp._tensors:
        outputs[tensor._name] = tensor._array
    return outputs
