"""ONNX Runtime backend (``onnxruntime_onnx``): one InferenceSession per instance.

Sessions are configured from config ``parameters`` (string values) under the names Triton's
ONNX Runtime backend reads: ``intra_op_thread_count``, ``inter_op_thread_count`` (0 or less:
ORT's own default), ``execution_mode`` (0 sequential, 1 parallel), ``enable_mem_arena``,
``enable_mem_pattern``, ``session.use_device_allocator_for_initializers``. Thread spinning takes
ONNX Runtime's own session keys as parameter names, the way Triton passes that last one:
``session.intra_op.allow_spinning`` and ``session.inter_op.allow_spinning`` ("1" spins). Both
default to off here (ORT's default is on) so that idle ORT threads do not compete with the
event loop for a core; ``tritonlite tune`` measures both ways. A value that does not parse fails
the load with Triton's wording, naming the parameter (``session_settings``).

How a batch leaves the event loop, for sessions on the CPU provider alone with an intra-op
pool (``intra_op_thread_count`` >= 2) and tensors numpy hands over as they are
(``takes_next``): each batch runs with ``run`` on the instance thread, split evenly over that
thread and the pool's other threads as in Triton (whose backend calls ``Run`` on its instance
thread, one batch at a time), and its responses are built on the loop from the arrays the run
returned. With no batcher the thread also holds the next request and starts it as a run
returns (the core's ``thread+next``); under a dynamic or sequence batcher it runs one batch at
a time and the batcher forms the next when it frees (``thread+batch``).

Other sessions (one intra-op thread, string or BF16 tensors, a GPU provider) run their batches
on their instance thread (``execute``), one at a time. ``intra_op_thread_count`` is the
parallelism of a ``run`` as in Triton: that thread and ``intra_op_thread_count - 1`` pool
threads share each operator. Measured on the 4 x 1024² MLP, 2 shared cores (bench/RESULTS.md,
"Issue 31, round 3" and "round 4"): ``run_async``, which batched models used before, runs the
graph on one pool thread without the intra-op split: a batch of 8 took 1,020 µs there against
574 µs with ``run`` (in process), and in the server the compute per batch fell by a third to a
half. Spinning stays off: with ``run`` on the instance thread it raised the CPU per request
1.5-2.2x and lowered throughput in every paired round.

A run failure fails its batch; one that leaves the session unusable (``run_error``: an
execution-provider failure, a CUDA error) is a ``BackendFatalError``, so the instance is
rebuilt with a new session.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonlite import kernels
from tritonlite._proto import pb
from tritonlite.backends import batch_io
from tritonlite.backends.base import BackendFatalError, InstanceSpec, ModelContext, Result
from tritonlite.backends.ort_providers import providers_for
from tritonlite.contracts.errors import TritonliteError, internal, invalid_arg, unavailable
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest
from tritonlite.memory import StagingPool

log = logging.getLogger("tritonlite")

_ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16
try:
    import ml_dtypes

    _BF16: Any = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _BF16 = None


def _param(config: Any, key: str) -> str | None:
    if key in config.parameters:
        return str(config.parameters[key].string_value)
    return None


# The config ``parameters`` that shape a session (see the module docstring).
INTRA_OP_THREADS = "intra_op_thread_count"
INTER_OP_THREADS = "inter_op_thread_count"
EXECUTION_MODE = "execution_mode"
INTRA_OP_SPINNING = "session.intra_op.allow_spinning"
INTER_OP_SPINNING = "session.inter_op.allow_spinning"
MEM_ARENA = "enable_mem_arena"
MEM_PATTERN = "enable_mem_pattern"
DEVICE_ALLOCATOR_FOR_INITIALIZERS = "session.use_device_allocator_for_initializers"

_TRUE = ("true", "on", "1")  # Triton's ParseBoolValue, case-insensitive
_FALSE = ("false", "off", "0")


@dataclass(frozen=True)
class SessionSettings:
    """What a model's config asks of its ORT sessions (``session_settings``).

    ``intra_op_threads``/``inter_op_threads`` 0 leave the count to ORT; ``None`` for the
    memory settings leaves ORT's default.
    """

    intra_op_threads: int
    inter_op_threads: int
    parallel: bool = False
    intra_op_spinning: bool = False
    inter_op_spinning: bool = False
    mem_arena: bool | None = None
    mem_pattern: bool | None = None
    device_allocator_for_initializers: bool | None = None


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, as ``taskset`` or a cpuset sets it),
    else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def default_intra_op_threads(cores: int) -> int:
    """Intra-op threads when ``intra_op_thread_count`` is unset: every core but the event
    loop's, and at least 2 (a run on the instance thread shares each operator with the pool)."""
    return max(2, cores - 1)


def _int_setting(cfg: Any, key: str) -> int | None:
    text = _param(cfg, key)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise invalid_arg(
            f"parameter '{key}': failed to convert '{text}' to integral number"
        ) from None


def _bool_setting(cfg: Any, key: str) -> bool | None:
    text = _param(cfg, key)
    if text is None:
        return None
    if text.strip().lower() in _TRUE:
        return True
    if text.strip().lower() in _FALSE:
        return False
    raise invalid_arg(f"parameter '{key}': failed to convert '{text}' to boolean")


def session_settings(cfg: Any, cores: int | None = None) -> SessionSettings:
    """The session settings ``cfg``'s parameters ask for; INVALID_ARG (the load fails) for a
    value that does not parse, in the words of Triton's backend with the parameter named."""
    cores = cores if cores is not None else available_cores()
    intra = _int_setting(cfg, INTRA_OP_THREADS)
    inter = _int_setting(cfg, INTER_OP_THREADS)
    mode = _int_setting(cfg, EXECUTION_MODE)
    if mode not in (None, 0, 1):
        raise invalid_arg(
            "Invalid configuration value provided. Expected values for execution_mode are 0 "
            f"or 1 but got {mode} ."
        )
    return SessionSettings(
        intra_op_threads=default_intra_op_threads(cores) if intra is None else max(0, intra),
        inter_op_threads=1 if inter is None else max(0, inter),
        parallel=mode == 1,
        intra_op_spinning=bool(_bool_setting(cfg, INTRA_OP_SPINNING)),
        inter_op_spinning=bool(_bool_setting(cfg, INTER_OP_SPINNING)),
        mem_arena=_bool_setting(cfg, MEM_ARENA),
        mem_pattern=_bool_setting(cfg, MEM_PATTERN),
        device_allocator_for_initializers=_bool_setting(cfg, DEVICE_ALLOCATOR_FOR_INITIALIZERS),
    )


def session_options(settings: SessionSettings) -> Any:
    """An ``onnxruntime.SessionOptions`` carrying ``settings``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = settings.intra_op_threads
    opts.inter_op_num_threads = settings.inter_op_threads
    if settings.parallel:
        opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    opts.add_session_config_entry(INTRA_OP_SPINNING, "1" if settings.intra_op_spinning else "0")
    opts.add_session_config_entry(INTER_OP_SPINNING, "1" if settings.inter_op_spinning else "0")
    if settings.mem_arena is not None:
        opts.enable_cpu_mem_arena = settings.mem_arena
    if settings.mem_pattern is not None:
        opts.enable_mem_pattern = settings.mem_pattern
    if settings.device_allocator_for_initializers is not None:
        opts.add_session_config_entry(
            DEVICE_ALLOCATOR_FOR_INITIALIZERS,
            "1" if settings.device_allocator_for_initializers else "0",
        )
    return opts


def model_path(ctx: ModelContext) -> Path:
    path = ctx.version_dir / (ctx.config.default_model_filename or "model.onnx")
    if path.is_dir():
        path = path / "model.onnx"
    return path


# Failures that leave a session unusable: its execution provider failed, or the device context
# it runs in is broken (CUDA errors are sticky: every later call on that context fails too).
_FATAL_TYPES = ("EPFail", "DeviceReset", "EngineError")
_FATAL_MARKERS = (
    "CUDA failure",
    "CUDA error",
    "cudaError",
    "CUDNN failure",
    "CUBLAS failure",
    "illegal memory access",
    "device-side assert",
    "TensorRT EP execute",
)


def run_error(exc: Exception) -> TritonliteError:
    """An exception from ``InferenceSession.run`` as the error the batch fails with:
    ``BackendFatalError`` for the failures above, INTERNAL (this batch only) otherwise."""
    text = f"onnx runtime error: {exc}"
    if type(exc).__name__ in _FATAL_TYPES or any(m in str(exc) for m in _FATAL_MARKERS):
        return BackendFatalError(text)
    return internal(text)


def _to_ort_input(arr: np.ndarray[Any, Any], name: str = "") -> np.ndarray[Any, Any]:
    """A BYTES tensor as ORT's Python binding takes a string tensor: ``str`` elements (it
    stores repr() of ``bytes`` objects). ORT's Python API moves string tensors as text both
    ways (outputs come back as ``str``), so bytes that are not UTF-8 cannot pass through
    unchanged: they are refused (INVALID_ARG), never replaced."""
    if arr.dtype.kind == "O":
        out = np.empty(arr.shape, dtype=object)
        flat = out.reshape(-1)
        for i, item in enumerate(arr.reshape(-1).tolist()):
            if isinstance(item, bytes):
                try:
                    flat[i] = item.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _not_utf8(name, i, exc) from None
            else:
                flat[i] = str(item)
        return out
    return arr


def _not_utf8(name: str, index: int, exc: UnicodeDecodeError) -> TritonliteError:
    return invalid_arg(
        f"input '{name}': element {index} of the BYTES tensor is not valid UTF-8 (byte "
        f"{exc.start}); the ONNX Runtime backend passes string tensors as UTF-8 text only"
    )


def _utf8_problem(requests: list[InferRequest]) -> dict[int, TritonliteError]:
    """The requests of a batch whose BYTES inputs ORT cannot take, by index, with why."""
    bad: dict[int, TritonliteError] = {}
    for k, r in enumerate(requests):
        for inp in r.inputs:
            if inp.data is not None and inp.data.dtype.kind == "O":
                try:
                    _to_ort_input(inp.data, inp.name)
                except TritonliteError as exc:
                    bad[k] = exc
                    break
    return bad


def _release(feed: dict[str, Any], leases: list[Any]) -> None:
    """A run's inputs are no longer needed: drop them, then hand the staging buffers back."""
    feed.clear()
    for lease in leases:
        lease.release()


def _from_ort_output(value: Any) -> np.ndarray[Any, Any]:
    arr: np.ndarray[Any, Any] = np.asarray(value)
    if arr.dtype.kind in ("O", "U"):
        out = np.empty(arr.shape, dtype=object)
        flat = out.reshape(-1)
        for i, item in enumerate(arr.reshape(-1).tolist()):
            flat[i] = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        return out
    return arr


class OnnxRuntimeInstance:
    thread_agnostic = True  # an ORT session may run on any thread

    def __init__(
        self,
        ctx: ModelContext,
        spec: InstanceSpec,
        settings: SessionSettings | None = None,
        plain_io: bool = False,
    ) -> None:
        """``plain_io``: the model's inputs and outputs are all tensors numpy hands to ORT as
        they are (no string, no BF16), as read from the file before the session is built."""
        import onnxruntime as ort

        cfg = ctx.config
        settings = settings or session_settings(cfg)
        providers = providers_for(cfg, spec.kind, spec.device_id, ort.get_available_providers())
        # How batches leave the event loop (confirmed on the session below): for tensors numpy
        # hands over as they are, on the CPU provider alone, with an intra-op pool, each batch
        # runs with ``run`` on the instance's thread and the loop builds its responses
        # (``takes_next``; the core holds the next batch there only with no batcher).
        off_loop = (
            plain_io
            and settings.intra_op_threads >= 2
            and [p for p, _ in providers] == ["CPUExecutionProvider"]
        )
        opts = session_options(settings)
        path = model_path(ctx)
        try:
            self._session = ort.InferenceSession(
                str(path),
                sess_options=opts,
                providers=[p for p, _ in providers],
                provider_options=[o for _, o in providers],
            )
        except Exception as exc:  # ORT raises its own exception types
            raise unavailable(
                f"failed to load '{path.name}' for model '{ctx.name}': {exc}"
            ) from exc
        self._batched = cfg.max_batch_size > 0
        model_outputs = {o.name for o in self._session.get_outputs()}
        self._outputs = [o.name for o in cfg.output if o.name in model_outputs]
        # Implicit-state outputs are not config outputs; the sequence batcher keeps them.
        self._outputs += [
            s.output_name
            for s in cfg.sequence_batching.state
            if s.output_name in model_outputs and s.output_name not in self._outputs
        ]
        bf16 = pb.DataType.values_by_name["TYPE_BF16"].number
        self._bf16_outputs = {o.name for o in cfg.output if o.data_type == bf16}
        self._bf16 = bool(self._bf16_outputs) or any(t.data_type == bf16 for t in cfg.input)
        self._staging = StagingPool()
        self._ragged = batch_io.RaggedIO.for_config(cfg)  # None: no ragged or batch IO
        # No string tensor on either side: inputs go to ORT and outputs come back as they are.
        self._plain = all(
            t.type.startswith("tensor(") and t.type != "tensor(string)"
            for t in (*self._session.get_inputs(), *self._session.get_outputs())
        )
        # One request with plain tensors needs neither staging nor conversion (``execute_one``).
        self.executes_one = self._plain and not self._bf16 and self._ragged is None
        # The core's single-request lane calls the bound session itself: ``InferenceSession.run``
        # only adds checks of the feed (the core validated it) and, off the CPU provider, a
        # provider fallback -- so only there, and anything it raises goes to ``execute_one``.
        self.bound_run: tuple[Callable[..., list[Any]], list[str]] | None = None
        if self.executes_one and self._session.get_providers() == ["CPUExecutionProvider"]:
            bound = getattr(self._session, "_sess", None)
            if bound is not None:
                self.bound_run = (bound.run, list(self._outputs))
        cpu_plain = (
            self._plain
            and not self._bf16
            and self._session.get_providers() == ["CPUExecutionProvider"]
        )
        self.takes_next = off_loop and cpu_plain
        # The intra-op pool spans the cores (its default): instances cannot run side by side
        # on cores of their own.
        self.fills_cores = self.takes_next and settings.intra_op_threads >= available_cores() - 1

    def execute_one(self, request: InferRequest, timing: ExecTiming) -> Result:
        """One request alone (``executes_one`` sessions): its own arrays go to the session and
        the session's arrays come back as its outputs, with no staging and no batch lists."""
        feed = {inp.name: inp.data for inp in request.inputs}
        timing.input_end_ns = time.monotonic_ns()
        try:
            values = self._session.run(self._outputs, feed)
        except Exception as exc:  # ORT raises its own exception types
            raise run_error(exc) from None
        timing.infer_end_ns = time.monotonic_ns()
        return dict(zip(self._outputs, values))

    def execute(self, requests: list[InferRequest], timing: ExecTiming) -> list[Result]:
        if not self._plain and len(requests) > 1:
            bad = _utf8_problem(requests)
            if bad:  # fail those requests alone, not the batch they share
                good = [r for k, r in enumerate(requests) if k not in bad]
                done = iter(self.execute(good, timing) if good else [])
                return [bad[k] if k in bad else next(done) for k in range(len(requests))]
        feed: dict[str, Any] = {}
        leases: list[Any] = []
        try:
            self._feed(requests, feed, leases)
            timing.input_end_ns = time.monotonic_ns()
            values = self._run(feed)
            timing.infer_end_ns = time.monotonic_ns()
        finally:
            _release(feed, leases)
        return self._results(values, requests)

    def _feed(self, requests: list[InferRequest], feed: dict[str, Any], leases: list[Any]) -> None:
        """Fill ``feed`` with the run's inputs: one request's arrays as they are, or each input
        of a batch (requests share non-batch shapes by construction) gathered along dim 0 into
        a reused staging buffer, whose lease goes on ``leases``."""
        if self._ragged is not None:
            self._ragged.feed(requests, feed, self._staging, leases, _to_ort_input)
            return
        if len(requests) == 1:
            plain = self._plain
            for inp in requests[0].inputs:
                feed[inp.name] = inp.data if plain else _to_ort_input(inp.data, inp.name)  # type: ignore[arg-type]
            return
        for i, first in enumerate(requests[0].inputs):
            parts = [r.inputs[i].data for r in requests]
            if first.data.dtype == object:  # type: ignore[union-attr]
                feed[first.name] = _to_ort_input(
                    np.concatenate(parts, axis=0),  # type: ignore[arg-type]
                    first.name,
                )
                continue
            feed[first.name] = batch_io.stage(parts, self._staging, leases)  # type: ignore[arg-type]

    def _results(self, values: list[Any], requests: list[InferRequest]) -> list[Result]:
        """ORT's outputs as each request's arrays (views of the batch's)."""
        if self._plain:
            produced = dict(zip(self._outputs, values))
        else:
            produced = {n: _from_ort_output(v) for n, v in zip(self._outputs, values)}
        if self._ragged is not None:
            return self._ragged.per_request(produced, requests)  # type: ignore[return-value]
        return batch_io.per_request(produced, requests)  # type: ignore[return-value]

    def _run(self, feed: dict[str, Any]) -> list[Any]:
        try:
            if self._bf16:
                return self._run_bound(feed)
            return self._session.run(self._outputs, feed)  # type: ignore[no-any-return]
        except Exception as exc:  # ORT raises its own exception types
            raise run_error(exc) from None

    def _run_bound(self, feed: dict[str, Any]) -> list[Any]:
        # ORT's Python API has no numpy bfloat16: BF16 tensors travel as OrtValues over their
        # 16-bit patterns, and outputs are read back from ORT's buffers.
        import onnxruntime as ort

        binding = self._session.io_binding()
        for name, arr in feed.items():
            if arr.dtype == _BF16:
                bits = np.ascontiguousarray(arr).view(np.uint16)
                binding.bind_ortvalue_input(
                    name,
                    ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                        bits, onnx_element_type=_ONNX_BFLOAT16
                    ),
                )
            else:
                binding.bind_cpu_input(name, np.ascontiguousarray(arr))
        for name in self._outputs:
            binding.bind_output(name, "cpu")
        self._session.run_with_iobinding(binding)
        values = []
        for name, value in zip(self._outputs, binding.get_outputs()):
            if name in self._bf16_outputs:
                shape = tuple(value.shape())
                count = math.prod(shape)
                raw: Any = (ctypes.c_uint16 * count).from_address(value.data_ptr()) if count else []
                values.append(np.array(raw, dtype=np.uint16).view(_BF16).reshape(shape))
            else:
                values.append(value.numpy())
        return values

    def close(self) -> None:
        self._session = None  # closed: a later run fails
        self.bound_run = None
        self._staging.close()


class OnnxRuntimeBackend:
    def __init__(self, ctx: ModelContext) -> None:
        self._ctx = ctx
        path = model_path(ctx)
        if not path.exists():
            raise unavailable(
                f"unable to find '{path}' for model '{ctx.name}' version {ctx.version}"
            )
        from tritonlite.backends.onnx_io import check_config, read_onnx_io

        self._settings = session_settings(ctx.config)  # a bad parameter fails the load here
        io = read_onnx_io(path)
        check_config(ctx.config, io)
        self._plain_io = all(
            t.data_type not in ("TYPE_STRING", "TYPE_BF16") for t in (*io.inputs, *io.outputs)
        )
        kernels.warmup()  # compile now, never on a request

    def new_instance(self, spec: InstanceSpec) -> OnnxRuntimeInstance:
        return OnnxRuntimeInstance(self._ctx, spec, self._settings, self._plain_io)

    def close(self) -> None:
        return None
