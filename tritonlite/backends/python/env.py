"""Python models with ``EXECUTION_ENV_PATH``: each instance runs in a process of that environment.

A python model whose config sets Triton's parameter::

    parameters { key: "EXECUTION_ENV_PATH"
                 value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }

is not imported into the server. ``$$TRITON_MODEL_DIRECTORY`` stands for the model's directory
(``<repo>/<model>``); a relative path is taken from there too. The path names a packed
environment (a tarball, e.g. from conda-pack or a tarred venv: unpacked once into
``$TRITONLITE_PYTHON_ENV_CACHE`` or ``<tmp>/tritonlite-python-envs-<uid>``, in a directory named
by the tarball's SHA-256, and reused by every model and load that names the same bytes) or an
environment directory, used as it is. Its ``bin/python3`` (or ``bin/python``) runs
``env_worker.py``, which imports model.py with a ``triton_python_backend_utils``
stand-in (``env_pb_utils.py``); the environment needs numpy, nothing of tritonlite.
The worker's environment variables are the server's, without ``PYTHONHOME`` / ``PYTHONPATH``
(so nothing of the server's site-packages leaks in), with the environment's ``bin`` first on
``PATH`` and ``VIRTUAL_ENV`` or ``CONDA_PREFIX`` set, as its ``activate`` script would.

Like Triton's stub, there is one worker process per model instance, started by
``new_instance`` and told to ``finalize`` and exit by ``close``. Batches go to it over a Unix
socket pair, tensors as raw bytes (``env_worker.py`` has the protocol); the server's
dynamic batcher, statistics, execution timeout and error paths are the ones every backend
goes through, and the execute results follow the in-process backend's rules and messages
(``backends/python/backend.py``). The model's output (``print``, ``pb_utils.Logger``) goes to the server
log, one line at a time, prefixed with the instance's name.

A worker that dies (killed, crashed, ``sys.exit`` in ``execute``) fails the batch it was running,
or the next one it is sent, with a message that says how it ended; that is a
``BackendFatalError``, so the core takes the instance out of rotation and rebuilds it, which
starts a new worker: the model is not ready while none of its instances is (one instance: until
the new worker's ``initialize`` returns), then serves again. A worker that hangs is left to the
core's execution timeout, which rebuilds the instance; the hung process ends when its call
returns (or with the server: workers exit when their parent is gone).

``auto_complete_config`` runs in the environment too, in a short-lived worker (Triton's
auto-complete stub), with the in-process ``ModelConfig`` (``model_config.py``).

Decoupled models stream as in-process ones do (``backends/python/backend.py``'s rules and messages): the
worker sends each response the moment the model's sender is called, from any of its threads,
during or after ``execute`` (an ``async def execute`` runs in the background on a loop of the
worker's); a reader thread hands them to the requests' streams in order. A worker that dies
with streams open ends each of them with an error.

BLS requests (``InferenceRequest.exec`` / ``async_exec``, decoupled too) travel to the server,
which runs them through its core on a thread named after the instance, as in-process BLS.

UNSUPPORTED with an environment (failing the call with UNSUPPORTED): model management from
model.py, request rescheduling, BF16 tensors. Unpacked
environments stay in the cache directory after the server exits (Triton unpacks each start).

Over 500 lines, one module: ``PythonEnvInstance`` is most of it, one conversation with one
worker (execute, decoupled streams, BLS calls, death) whose halves must change together; the
process itself is ``env_process.py``, the protocol ``env_worker.py``.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import itertools
import json
import logging
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonlite import kernels
from tritonlite.backends.base import (
    BackendFatalError,
    InstanceSpec,
    ModelContext,
    ModelOutputs,
    Result,
)
from tritonlite.backends.python.env_process import WorkerGone, WorkerProcess
from tritonlite.backends.python.env_worker import Packer, unpack
from tritonlite.backends.python.model_config import ModelConfig, apply_changes
from tritonlite.backends.python.model_setup import STREAMED, initialize_args, model_file
from tritonlite.contracts.errors import (
    ErrorCode,
    ErrorResponse,
    TritonliteError,
    internal,
    invalid_arg,
    unsupported,
)
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest

log = logging.getLogger("tritonlite")

ENV_PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
CACHE_VARIABLE = "TRITONLITE_PYTHON_ENV_CACHE"
_unpack_lock = threading.Lock()


def uses_environment(cfg: Any) -> bool:
    """True when a python model's config sets ``EXECUTION_ENV_PATH``."""
    return ENV_PARAMETER in cfg.parameters


# -- the numpy 2 hint for in-process models ----------------------------------------------------

_REMOVED_IN_2 = re.compile(r"`np\.(\w+)` was removed in the NumPy 2\.0 release")
_NO_ATTRIBUTE = re.compile(r"module 'numpy' has no attribute '(\w+)'")
# Removed by NumPy 2.x releases with a plain "has no attribute" message (deprecated in 2.0).
_REMOVED_LATER = frozenset(
    {
        "product",
        "cumproduct",
        "in1d",
        "trapz",
        "msort",
        "row_stack",
        "alltrue",
        "sometrue",
        "round_",
        "asfarray",
    }
)


def numpy2_hint(exc: BaseException) -> str:
    """A sentence to add to a load error caused by NumPy API that numpy 2 removed, else "".

    Looks at ``exc`` and the exceptions it was raised from or during.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, AttributeError):
            text = str(current)
            m = _REMOVED_IN_2.search(text)
            name = m.group(1) if m else None
            if name is None:
                m = _NO_ATTRIBUTE.search(text)
                name = m.group(1) if m and m.group(1) in _REMOVED_LATER else None
            if name is not None:
                return _hint(f"`np.{name}`, NumPy API that NumPy 2 removed")
        if isinstance(current, ImportError) and "compiled using NumPy 1.x" in str(current):
            return _hint("a module compiled for NumPy 1.x")
        current = current.__cause__ or current.__context__
    return ""


def _hint(what: str) -> str:
    try:
        import numpy

        version = numpy.__version__
    except ImportError:  # pragma: no cover - numpy is a dependency
        version = "2"
    return (
        f"\n\nThe model uses {what}; this server runs NumPy {version}. Update the model, or "
        "run it in an environment with numpy<2: set the model's EXECUTION_ENV_PATH "
        "parameter to a packed environment or an environment directory, e.g. parameters "
        '{ key: "EXECUTION_ENV_PATH" value: { string_value: '
        '"$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }'
    )


# -- environments ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Environment:
    """Where a model's environment is: its root directory and its interpreter."""

    root: Path
    python: Path
    source: Path  # what EXECUTION_ENV_PATH named (the tarball or the directory)


def resolve(value: str, model_dir: Path, model_name: str) -> Environment:
    """The environment ``EXECUTION_ENV_PATH`` = ``value`` names (unpacking a tarball once).

    Raises
    ------
    TritonliteError
        INTERNAL (Triton's code for these) when the path does not exist (Triton's message), is
        neither a directory nor a tar archive, the archive cannot be unpacked, or the
        environment has no ``bin/python3``.
    """
    text = value.strip().replace(MODEL_DIRECTORY, str(model_dir))
    where = f"EXECUTION_ENV_PATH of model '{model_name}'"
    if not text:
        raise internal(f"{where} is empty")
    path = Path(text)
    if not path.is_absolute():
        path = model_dir / path
    if path.is_dir():
        root = path
    elif path.is_file():
        if not tarfile.is_tarfile(path):
            raise internal(
                f"{where}: '{path}' is neither a directory nor a tar archive "
                "(e.g. a conda-pack .tar.gz)"
            )
        root = _unpacked(path, where)
    else:  # Triton 2.51's words
        raise internal(f"Failed to get the canonical path for {path}.")
    for name in ("python3", "python"):
        python = root / "bin" / name
        if python.is_file() and os.access(python, os.X_OK):
            return Environment(root, python, path)
    raise internal(f"{where}: the environment '{path}' has no bin/python3")


def _extract(archive: tarfile.TarFile, dest: Path) -> None:
    """Unpack ``archive`` into ``dest``, refusing members that would land outside it but keeping
    absolute symlinks (a tarred venv's ``bin/python`` is one): tarfile's "tar" filter."""
    if hasattr(tarfile, "tar_filter"):
        archive.extractall(dest, filter="tar")
        return
    root = os.path.realpath(dest)  # Python < 3.10.12 has no filters: the same check by hand
    for member in archive.getmembers():
        target = os.path.realpath(os.path.join(root, member.name.lstrip("/")))
        if os.path.commonpath([root, target]) != root:
            raise tarfile.TarError(f"{member.name!r} would be extracted outside the directory")
    archive.extractall(dest)


def cache_dir() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"tritonlite-python-envs-{os.getuid()}"


def _unpacked(tarball: Path, where: str) -> Path:
    """The directory ``tarball`` is unpacked in, unpacking it if no load did yet."""
    digest = hashlib.sha256()
    with tarball.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    cache = cache_dir()
    dest = cache / digest.hexdigest()[:32]
    done = dest / ".tritonlite-unpacked"
    with _unpack_lock:
        if done.is_file():
            return dest
        cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        import fcntl

        with (cache / f"{dest.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another server may be unpacking the same bytes
            if done.is_file():
                return dest
            started = time.monotonic()
            tmp = Path(tempfile.mkdtemp(prefix=f"{dest.name}.", dir=cache))
            try:
                with tarfile.open(tarball) as archive:
                    _extract(archive, tmp)
            except (tarfile.TarError, OSError, ValueError) as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                raise internal(f"{where}: cannot unpack '{tarball}': {exc}") from None
            (tmp / done.name).write_text(str(tarball))
            if dest.exists():
                shutil.rmtree(dest, ignore_errors=True)
            tmp.rename(dest)
            log.info("unpacked %s into %s in %.1f s", tarball, dest, time.monotonic() - started)
    return dest


# -- the backend ---------------------------------------------------------------------------------


class PythonEnvBackend:
    """A python model (one version) whose instances run in ``EXECUTION_ENV_PATH``."""

    def __init__(self, ctx: ModelContext) -> None:
        cfg = ctx.config
        path = model_file(ctx)
        self.ctx = ctx
        self.path = path
        self.env = resolve(cfg.parameters[ENV_PARAMETER].string_value, ctx.model_dir, ctx.name)
        self.outputs = [o.name for o in cfg.output]
        self.decoupled = bool(cfg.model_transaction_policy.decoupled)
        kernels.warmup()  # BYTES outputs go through the kernels; compile now, not on a request
        self.inline = False

    def new_instance(self, spec: InstanceSpec) -> PythonEnvInstance:
        return PythonEnvInstance(self, spec)

    def close(self) -> None:
        pass


class PythonEnvInstance:
    """One worker process running one ``TritonPythonModel``. ``execute`` and ``close`` come
    from the instance's thread; a worker that exits while idle is replaced at once by a thread
    of its own (``_exited``), under ``_lock``, which every use of ``_worker`` holds."""

    def __init__(self, backend: PythonEnvBackend, spec: InstanceSpec) -> None:
        self._backend = backend
        self._spec = spec
        self._name = spec.name
        self._lock = threading.Lock()
        self._closing = False
        # Decoupled: batch id -> its requests, while any of them waits for its final response
        self._streams: dict[int, _Batch] = {}
        self._streams_lock = threading.Lock()
        self._batches = itertools.count(1)
        self._worker = self._start()

    def _start(self) -> WorkerProcess:
        """A worker with the model initialized in it; raises INTERNAL with why not."""
        backend, spec = self._backend, self._spec
        ctx, env = backend.ctx, backend.env
        try:
            worker = WorkerProcess(
                env.python,
                env.root,
                spec.name,
                f"model instance '{spec.name}'",
                on_exit=self._exited,
                streamed=self._streamed,
            )
        except WorkerGone as exc:
            raise internal(str(exc)) from None
        hello = worker.hello
        log.info(
            "model instance '%s' runs in %s (python %s, numpy %s, pid %s)",
            spec.name,
            env.source,
            hello.get("python"),
            hello.get("numpy"),
            hello.get("pid"),
        )
        args = initialize_args(ctx, spec)
        try:
            reply, _ = worker.call(
                {
                    "op": "init",
                    **_model_files(backend.path, ctx.version_dir, ctx.model_dir),
                    "args": args,
                    "decoupled": backend.decoupled,
                },
                [],
                "initialize",
            )
        except WorkerGone as exc:
            worker.stop(finalize=False)
            raise internal(str(exc)) from None
        if "error" in reply:
            worker.stop(finalize=False)
            raise internal(str(reply["error"]))
        return worker

    def _exited(self, worker: WorkerProcess) -> None:
        """On ``worker``'s relay thread when it exited: replace it if it died while idle (a
        death during a call fails that call instead, and the core rebuilds the instance)."""
        if not worker.broken and not self._closing:
            threading.Thread(
                target=self._replace, args=(worker,), daemon=True, name=f"{self._name}-restart"
            ).start()

    def _replace(self, worker: WorkerProcess) -> None:
        with self._lock:
            if self._closing or worker is not getattr(self, "_worker", None) or worker.broken:
                return  # closing, replaced already, failed on a call, or never started
            self._restart_locked(worker)

    def _restart_locked(self, worker: WorkerProcess) -> None:
        """``_lock`` held; raises INTERNAL when the new worker does not start."""
        worker.stop(finalize=False)
        log.warning(
            "the python process of model instance '%s' (pid %d) exited while idle; "
            "starting a new one",
            self._name,
            worker.pid,
        )
        try:
            self._worker = self._start()
        except TritonliteError as exc:
            log.error("model instance '%s' could not restart: %s", self._name, exc.message)
            raise

    def execute(self, requests: list[InferRequest], timing: ExecTiming) -> list[Result]:
        ctx = self._backend.ctx
        packer = Packer()
        metas = []
        try:
            for r in requests:
                names = self._backend.outputs if r.outputs is None else [o.name for o in r.outputs]
                metas.append(
                    {
                        "id": r.id,
                        "correlation_id": r.sequence_id,
                        "flags": (1 if r.sequence_start else 0) | (2 if r.sequence_end else 0),
                        "timeout": r.timeout_us,
                        "model_name": ctx.name,
                        "model_version": ctx.version,
                        "requested": names,
                        "parameters": (
                            json.dumps(r.parameters, separators=(",", ":"), default=str)
                            if r.parameters
                            else "{}"
                        ),
                        "inputs": [
                            packer.add(i.name, i.data) for i in r.inputs if i.data is not None
                        ],
                    }
                )
        except TypeError as exc:
            return [unsupported(f"model '{ctx.name}': {exc}")] * len(requests)
        timing.input_end_ns = time.monotonic_ns()
        batch_id = 0
        if self._backend.decoupled:
            batch_id = next(self._batches)
            for r in requests:
                if r.responder is None:  # only infer_stream runs decoupled models: a guard
                    raise internal("a request of a decoupled model came without a response stream")
                r.responder.begin(timing.input_end_ns)  # response statistics start here
            with self._streams_lock:
                self._streams[batch_id] = _Batch(requests)
        try:
            results = self._run(requests, metas, packer, batch_id, timing)
        except BaseException:
            if batch_id:  # the core ends the batch's requests with the error
                with self._streams_lock:
                    self._streams.pop(batch_id, None)
            raise
        if batch_id:
            with self._streams_lock:
                batch = self._streams[batch_id]
                batch.returned = True
                if batch.failed or not batch.open or batch.gone:
                    del self._streams[batch_id]
            if batch.gone and not batch.failed:  # the worker died once execute answered
                self._orphaned([batch])
        return results

    def _run(
        self,
        requests: list[InferRequest],
        metas: list[dict[str, Any]],
        packer: Packer,
        batch_id: int,
        timing: ExecTiming,
    ) -> list[Result]:
        with self._lock:
            worker = self._worker
            if not worker.alive() and not worker.broken:  # died idle: not replaced yet
                try:
                    self._restart_locked(worker)
                except TritonliteError as exc:
                    raise BackendFatalError(exc.message) from None
                worker = self._worker
            try:
                reply, buf = worker.call(
                    {"op": "execute", "requests": metas, "batch": batch_id}, packer.blobs, "execute"
                )
            except WorkerGone as exc:
                raise BackendFatalError(str(exc)) from None
            if reply.get("exiting"):
                worker.mark_broken()
        timing.infer_end_ns = time.monotonic_ns()
        if "error" in reply:
            code = (
                ErrorCode.UNSUPPORTED if reply.get("code") == "UNSUPPORTED" else ErrorCode.INTERNAL
            )
            message = (
                f"Failed to process the request(s) for model '{self._name}', message: "
                f"{reply['error']}"
            )
            log.error("%s", message)
            if batch_id:  # the core ends each request still open with the error
                with self._streams_lock:
                    self._streams[batch_id].failed = True
            if reply.get("fatal"):
                raise BackendFatalError(message, code)
            return [TritonliteError(code, message)] * len(requests)
        if batch_id:
            return [STREAMED] * len(requests)
        return [_result(out, buf) for out in reply["responses"]]

    def _bls(
        self, worker: WorkerProcess, meta: dict[str, Any], inputs: list[tuple[str, Any]]
    ) -> None:
        """Run the model's BLS request through the core as an in-process model's runs, and
        send the worker its response(s), then ``done`` (or the exception to raise)."""
        from tritonlite.backends.python import pb_utils

        call_id, decoupled = meta["id"], bool(meta["decoupled"])
        try:
            try:
                r = meta["request"]
                request = pb_utils.InferenceRequest(
                    request_id=r["request_id"],
                    correlation_id=r["correlation_id"],
                    inputs=[pb_utils.Tensor(name, array) for name, array in inputs],
                    requested_output_names=r["requested"],
                    model_name=r["model_name"],
                    model_version=r["model_version"],
                    flags=r["flags"],
                    timeout=r["timeout"],
                    parameters=r["parameters"],
                )
                answer = request.exec(decoupled)
                for resp in answer if decoupled else [answer]:
                    packer = Packer()
                    body = _server_response(resp, packer)
                    worker.post({"op": "bls_reply", "id": call_id, "response": body}, packer.blobs)
            except Exception as exc:  # raised in the model, as in-process
                text = (
                    exc.message()
                    if isinstance(exc, pb_utils.TritonModelException)
                    else f"{type(exc).__name__}: {exc}"
                )
                worker.post({"op": "bls_reply", "id": call_id, "raise": text}, [])
                return
            worker.post({"op": "bls_reply", "id": call_id, "done": True}, [])
        except OSError:
            pass  # the worker is gone; its instance hears of it

    def _orphaned(self, batches: list[_Batch]) -> None:
        """Each request still open in ``batches`` ends with an error: its worker is gone."""
        err = internal(
            f"the python process of model instance '{self._name}' exited before "
            "the request's final response"
        )
        for b in batches:
            for req, is_open in zip(b.requests, b.is_open):
                if is_open and req.responder is not None:
                    req.responder.send(err, True)

    def _streamed(self, worker: WorkerProcess, meta: dict[str, Any], buf: bytearray) -> None:
        """On the worker's reader thread: a BLS request, a decoupled response, or the news
        that the worker is gone (each request of a batch whose execute returned, still open,
        then ends with an error; a batch still executing fails through the execute call)."""
        if meta["op"] == "bls":
            inputs = [(d["name"], unpack(d, buf)) for d in meta["request"]["inputs"]]
            threading.Thread(
                target=self._bls, args=(worker, meta, inputs), daemon=True, name=self._name
            ).start()  # (BLS errors name the thread's model)
            return
        if meta["op"] == "is_cancelled":
            with self._streams_lock:
                batch = self._streams.get(meta["batch"])
                req = batch.requests[int(meta["index"])] if batch is not None else None
            cancelled = bool(
                req is not None and req.responder is not None and req.responder.is_cancelled()
            )
            try:
                worker.post({"op": "bls_reply", "id": meta["id"], "cancelled": cancelled}, [])
            except OSError:
                pass
            return
        if meta["op"] == "gone":
            with self._streams_lock:
                for b in self._streams.values():
                    b.gone = True
                orphans = [b for b in self._streams.values() if b.returned and not b.failed]
                self._streams = {k: b for k, b in self._streams.items() if not b.returned}
            self._orphaned(orphans)
            return
        with self._streams_lock:
            batch = self._streams.get(meta["batch"])
            if batch is None or batch.failed:
                return
            index, final = int(meta["index"]), bool(meta["final"])
            req = batch.requests[index]
            if final:
                batch.is_open[index] = False
                batch.open -= 1
                if not batch.open and batch.returned:
                    del self._streams[meta["batch"]]
        body = meta["response"]
        if body is None:
            result: Result | None = None
        elif meta.get("failure"):  # an ``async def execute`` failed after returning
            result = internal(str(body["error"][1]))
        else:
            result = _result(body, buf)
        if req.responder is not None:
            req.responder.send(result, final)

    def is_ready(self) -> bool:
        """The worker is alive (the model's own ``is_ready`` is asked after a failed execute)."""
        return self._worker.alive()

    def close(self) -> None:
        with self._lock:
            self._closing = True
            worker = self._worker
        worker.stop(finalize=True)


class _Batch:
    """A decoupled batch whose requests wait for final responses."""

    __slots__ = ("requests", "is_open", "open", "returned", "failed", "gone")

    def __init__(self, requests: list[InferRequest]) -> None:
        self.requests = requests
        self.is_open = [True] * len(requests)
        self.open = len(requests)
        self.returned = False  # its execute call came back
        self.failed = False  # it failed as a whole: the core ends its open requests
        self.gone = False  # its worker exited


def _result(out: dict[str, Any], buf: bytearray) -> Result:
    """One response from the worker: its error, or its outputs (viewing ``buf``)."""
    error = out.get("error")
    if error is not None:
        kind = ErrorCode[error[0]] if error[0] in ErrorCode.__members__ else ErrorCode.INTERNAL
        return ErrorResponse(kind, str(error[1]))
    outputs = ModelOutputs(parameters=out.get("parameters") or {}, partial=True)
    for desc in out["outputs"]:
        outputs[desc["name"]] = unpack(desc, buf)
    return outputs


def _server_response(resp: Any, packer: Packer) -> dict[str, Any]:
    """An in-process ``pb_utils.InferenceResponse`` (a BLS answer) as the worker reads it."""
    err = resp.error()
    if err is not None:
        return {"error": [err.code().name, err.message()]}
    return {
        "outputs": [packer.add(t.name(), t.as_numpy()) for t in resp.output_tensors()],
        "parameters": dict(resp._parameters),
    }


def _model_files(path: Path, version_dir: Path, model_dir: Path) -> dict[str, str]:
    """What the worker needs to import model.py (and to give it ``pb_utils.ModelConfig``)."""
    return {
        "model_path": str(path),
        "version_dir": str(version_dir),
        "model_dir": str(model_dir),
        "model_config_source": inspect.getsource(ModelConfig),
    }


def auto_complete(cfg: Any, model_dir: Path) -> None:
    """The model's ``auto_complete_config``, run in its environment by a worker of its own
    (as Triton's auto-complete stub runs), merged into ``cfg`` as the in-process one is.

    Raises
    ------
    TritonliteError
        INVALID_ARG when importing model.py or ``auto_complete_config`` fails, or it returns
        something else than a ``pb_utils.ModelConfig`` (the registry makes these INTERNAL);
        INTERNAL when the environment cannot be used.
    """
    from tritonlite.contracts.config import normalize, render_json, select_versions, version_dirs

    available = version_dirs(model_dir)
    if not available:
        return
    version = (select_versions(cfg, available) or available)[-1]
    path = Path(model_dir, str(version), cfg.default_model_filename or "model.py")
    if not path.is_file():
        return  # loading the model reports it
    env = resolve(cfg.parameters[ENV_PARAMETER].string_value, model_dir, cfg.name)
    shown = copy.deepcopy(cfg)
    normalize(shown)
    before = render_json(shown)
    try:
        worker = WorkerProcess(
            env.python, env.root, f"{cfg.name}-autocomplete", f"model '{cfg.name}' (auto-complete)"
        )
    except WorkerGone as exc:
        raise internal(str(exc)) from None
    try:
        reply, _ = worker.call(
            {
                "op": "auto_complete",
                **_model_files(path, path.parent, model_dir),
                "config": json.dumps(before),
            },
            [],
            "auto-complete",
        )
    except WorkerGone as exc:
        raise internal(str(exc)) from None
    finally:
        worker.stop(finalize=False)
    if "error" in reply:
        raise invalid_arg(str(reply["error"]))
    if reply.get("config") is not None:
        apply_changes(cfg, before, reply["config"])
