"""PyTorch backend (``pytorch_libtorch``): TorchScript ``model.pt`` files, one module per instance.

A ``default_model_filename`` ending in ``.pt2`` is a ``torch.export.save`` program instead: it is
loaded with ``torch.export.load`` and called the same way (inputs by ``forward``'s argument names,
``<name>__<index>`` or config order; export with a dynamic batch dimension to batch it).
AOTInductor packages are not supported (they fail to load with torch's message).

Triton's PyTorch backend semantics (``pytorch_io`` holds the naming rules): inputs by forward
argument name, ``<name>__<index>`` or config order, a single ``Dict[str, Tensor]`` argument by
name; outputs by index into the returned tensor / tuple / list; TYPE_STRING as ``List[str]``
(one dimension, the batch dimension included). Config ``parameters`` as Triton names them:
``INFERENCE_MODE`` (default true), ``DISABLE_OPTIMIZED_EXECUTION``, ``INTRA_OP_THREAD_COUNT``,
``INTER_OP_THREAD_COUNT``, ``ENABLE_JIT_EXECUTOR``, ``ENABLE_JIT_PROFILING``,
``ENABLE_TENSOR_FUSER``, ``ENABLE_CACHE_CLEANING``; the thread counts and JIT switches are
process-wide in libtorch, as they are in Triton. ``ENABLE_NVFUSER`` is accepted and ignored
(libtorch removed NvFuser); ``ENABLE_WEIGHT_SHARING`` is accepted (each instance loads its own
copy of the weights).

Devices: KIND_CPU and KIND_MODEL run on the CPU; KIND_GPU runs on ``cuda:<device_id>`` with one
CUDA stream per instance (inputs copied from the pinned staging buffers on that stream, outputs
copied back on it, only that stream synchronized). Without torch the model fails to load with
UNAVAILABLE naming the missing package; a KIND_GPU instance without a CUDA device likewise.
"""

from __future__ import annotations

import inspect
import logging
import time
from contextlib import nullcontext
from typing import Any

import numpy as np

from tritonlite import kernels
from tritonlite._proto import pb
from tritonlite.backends import batch_io
from tritonlite.backends import pytorch_io as io
from tritonlite.backends.base import InstanceSpec, ModelContext, Result
from tritonlite.contracts.errors import TritonliteError, internal, invalid_arg, unavailable
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest
from tritonlite.memory import StagingPool

log = logging.getLogger("tritonlite")

_TYPE_NAMES = {v.number: v.name for v in pb.DataType.values}
_BOOL_PARAMS = (
    "INFERENCE_MODE",
    "DISABLE_OPTIMIZED_EXECUTION",
    "ENABLE_JIT_EXECUTOR",
    "ENABLE_JIT_PROFILING",
    "ENABLE_TENSOR_FUSER",
    "ENABLE_CACHE_CLEANING",
    "ENABLE_NVFUSER",
    "ENABLE_WEIGHT_SHARING",
)


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise unavailable(
            "the pytorch backend needs the 'torch' package, which is not installed "
            "in this server's environment (pip install torch)"
        ) from None
    return torch


def _bool_param(cfg: Any, key: str, default: bool) -> bool:
    if key not in cfg.parameters:
        return default
    text = cfg.parameters[key].string_value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise invalid_arg(
        f"failed to parse parameter '{key}' of model '{cfg.name}': "
        f"'{cfg.parameters[key].string_value}' is not a boolean"
    )


def _int_param(cfg: Any, key: str) -> int | None:
    if key not in cfg.parameters:
        return None
    text = cfg.parameters[key].string_value.strip()
    try:
        return int(text)
    except ValueError:
        raise invalid_arg(
            f"failed to parse parameter '{key}' of model '{cfg.name}': '{text}' is not an integer"
        ) from None


def _kind(type_: Any) -> str:
    name = str(type_.kind())
    return name[:-4] if name.endswith("Type") else name


def forward_arguments(module: Any) -> list[io.Argument]:
    """``forward``'s parameters after ``self`` of a loaded TorchScript or exported module."""
    if not hasattr(module, "_c"):  # torch.export: plain Python signature, tensors only
        params = inspect.signature(module.forward).parameters.values()
        return [
            io.Argument(p.name, "Tensor")
            for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    schema = module._c._get_method("forward").schema
    args = list(schema.arguments)
    if args and _kind(args[0].type) == "Class":
        args = args[1:]
    return [io.Argument(a.name, _kind(a.type)) for a in args]


class _Settings:
    """The model-wide parameters, parsed once per loaded version."""

    def __init__(self, torch: Any, cfg: Any) -> None:
        for key in _BOOL_PARAMS:
            _bool_param(cfg, key, False)  # reject malformed values at load
        self.inference_mode = _bool_param(cfg, "INFERENCE_MODE", True)
        self.optimized = not _bool_param(cfg, "DISABLE_OPTIMIZED_EXECUTION", False)
        self.cache_cleaning = _bool_param(cfg, "ENABLE_CACHE_CLEANING", False)
        intra = _int_param(cfg, "INTRA_OP_THREAD_COUNT")
        inter = _int_param(cfg, "INTER_OP_THREAD_COUNT")
        if intra is not None and intra > 0:
            torch.set_num_threads(intra)
            log.info("Intra op thread count is set to %d for model '%s'", intra, cfg.name)
        if inter is not None and inter > 0:
            try:
                torch.set_num_interop_threads(inter)
                log.info("Inter op thread count is set to %d for model '%s'", inter, cfg.name)
            except RuntimeError as exc:  # libtorch allows it once, before inter-op work starts
                log.warning("INTER_OP_THREAD_COUNT of model '%s' not applied: %s", cfg.name, exc)
        if "ENABLE_JIT_EXECUTOR" in cfg.parameters:
            torch._C._jit_set_profiling_executor(_bool_param(cfg, "ENABLE_JIT_EXECUTOR", True))
        if "ENABLE_JIT_PROFILING" in cfg.parameters:
            torch._C._jit_set_profiling_mode(_bool_param(cfg, "ENABLE_JIT_PROFILING", True))
        if "ENABLE_TENSOR_FUSER" in cfg.parameters:
            torch._C._jit_set_texpr_fuser_enabled(_bool_param(cfg, "ENABLE_TENSOR_FUSER", True))


class PyTorchInstance:
    def __init__(self, backend: PyTorchBackend, spec: InstanceSpec) -> None:
        torch = backend.torch
        ctx = backend.ctx
        self._torch = torch
        self._settings = backend.settings
        self._name = ctx.name
        if spec.kind == "GPU":
            if not torch.cuda.is_available() or spec.device_id >= torch.cuda.device_count():
                raise unavailable(
                    f"instance '{spec.name}' of model '{ctx.name}' asks for GPU "
                    f"{spec.device_id}, but torch sees no such CUDA device"
                )
            self._device = torch.device("cuda", spec.device_id)
            self._stream: Any = torch.cuda.Stream(device=self._device)
        else:
            self._device = torch.device("cpu")
            self._stream = None
        self.thread_agnostic = self._stream is None  # a CPU module runs on any thread
        try:
            if backend.path.suffix == ".pt2":
                self._module = _load_exported(torch, backend.path, self._device)
            else:
                self._module = torch.jit.load(str(backend.path), map_location=self._device)
                self._module.eval()
        except TritonliteError:
            raise
        except Exception as exc:  # torch raises its own error types
            raise internal(f"failed to load model '{ctx.name}': {exc}") from None
        layout = backend.layout(self._module)
        self._layout = layout
        self._outputs = backend.outputs
        self._staging = StagingPool()

    # -- inputs ---------------------------------------------------------------------------
    def _to_torch(self, arr: np.ndarray[Any, Any]) -> Any:
        t = batch_io.to_torch(self._torch, arr)
        if self._stream is not None:
            t = t.to(self._device, non_blocking=True)
        return t

    def _batch_inputs(self, requests: list[InferRequest], leases: list[Any]) -> dict[str, Any]:
        """Input name -> torch tensor (or list of str) for the whole batch."""
        out: dict[str, Any] = {}
        for i, first in enumerate(requests[0].inputs):
            parts = [r.inputs[i].data for r in requests]
            data = first.data
            assert data is not None
            if data.dtype == object:
                items = [x for p in parts for x in p.reshape(-1).tolist()]  # type: ignore[union-attr]
                out[first.name] = [
                    x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in items
                ]
                continue
            if len(parts) == 1 and data.flags.writeable and data.flags.c_contiguous:
                out[first.name] = self._to_torch(data)
                continue
            buf = batch_io.stage(parts, self._staging, leases)  # type: ignore[arg-type]
            out[first.name] = self._to_torch(buf)
        return out

    def _call(self, inputs: dict[str, Any]) -> Any:
        torch = self._torch
        layout = self._layout
        grad = torch.inference_mode() if self._settings.inference_mode else torch.no_grad()
        with grad, torch.jit.optimized_execution(self._settings.optimized):
            if layout.as_dict:
                return self._module({k: v for k, v in inputs.items() if k in layout.positions})
            args: list[Any] = [None] * layout.count
            for name, value in inputs.items():
                pos = layout.positions.get(name)
                if pos is None:
                    raise invalid_arg(f"unexpected input '{name}' for model '{self._name}'")
                args[pos] = value
            return self._module(*args)

    # -- outputs --------------------------------------------------------------------------
    def _flatten(self, value: Any) -> list[Any]:
        torch = self._torch
        if isinstance(value, torch.Tensor):
            return [value]
        if isinstance(value, tuple):
            return list(value)
        if isinstance(value, list):
            if all(isinstance(v, torch.Tensor) for v in value):
                return list(value)
            return [value]  # a List[str] output
        raise internal(
            f"model '{self._name}' returned {type(value).__name__}; expected a "
            "tensor, a tuple or a list"
        )

    def _to_numpy(self, name: str, value: Any) -> np.ndarray[Any, Any]:
        torch = self._torch
        expected = self._outputs[name][1]
        if isinstance(value, list):
            if expected != "TYPE_STRING":
                raise io.dtype_mismatch(name, expected, "TYPE_STRING")
            arr = np.empty(len(value), dtype=object)
            for i, s in enumerate(value):
                arr[i] = s.encode("utf-8") if isinstance(s, str) else bytes(s)
            return arr
        if not isinstance(value, torch.Tensor):
            raise internal(
                f"output '{name}' of model '{self._name}' is a {type(value).__name__}, not a tensor"
            )
        got = io.CONFIG_DTYPES.get(str(value.dtype).removeprefix("torch."), str(value.dtype))
        if got != expected:
            raise io.dtype_mismatch(name, expected, got)
        t = value.detach()
        if t.device.type != "cpu":
            t = t.to("cpu", non_blocking=True)
        return batch_io.to_numpy(torch, t)

    def execute(self, requests: list[InferRequest], timing: ExecTiming) -> list[Result]:
        torch = self._torch
        leases: list[Any] = []
        stream_ctx = torch.cuda.stream(self._stream) if self._stream is not None else nullcontext()
        try:
            with stream_ctx:
                inputs = self._batch_inputs(requests, leases)
                timing.input_end_ns = time.monotonic_ns()
                try:
                    value = self._call(inputs)
                except TritonliteError:
                    raise
                except Exception as exc:  # TorchScript raises torch.jit.Error and friends
                    raise internal(f"PyTorch execute failure: {exc}") from None
                inputs.clear()
                flat = self._flatten(value)
                produced = self._read_outputs(requests, flat)
                if self._stream is not None:
                    self._stream.synchronize()
            timing.infer_end_ns = time.monotonic_ns()
        finally:
            for lease in leases:
                lease.release()
            if self._settings.cache_cleaning and self._stream is not None:
                torch.cuda.empty_cache()
        return batch_io.per_request(produced, requests)  # type: ignore[return-value]

    def _read_outputs(
        self, requests: list[InferRequest], flat: list[Any]
    ) -> dict[str, np.ndarray[Any, Any]]:
        wanted: set[str] = set()
        for r in requests:
            if r.outputs is None:
                wanted.update(self._outputs)
            else:
                wanted.update(o.name for o in r.outputs)
        wanted.update(n for n in self._outputs if self._outputs[n][2])  # state outputs
        produced: dict[str, np.ndarray[Any, Any]] = {}
        for name in self._outputs:
            if name not in wanted:
                continue
            index = self._outputs[name][0]
            if index < 0 or index >= len(flat):
                raise io.missing_output(name, len(flat))
            produced[name] = self._to_numpy(name, flat[index])
        return produced

    def close(self) -> None:
        self._module = None
        self._staging.close()


def _load_exported(torch: Any, path: Any, device: Any) -> Any:
    """A ``torch.export.save`` program (``.pt2``), as a callable module on ``device``."""
    program = torch.export.load(str(path))
    module = program.module()
    return module.to(device)


class PyTorchBackend:
    def __init__(self, ctx: ModelContext) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.path = ctx.version_dir / (cfg.default_model_filename or "model.pt")
        if not self.path.is_file():
            raise unavailable(
                f"unable to find '{self.path}' for model '{ctx.name}' version {ctx.version}"
            )
        batch_io.refuse_ragged(cfg, "pytorch")
        self.torch = _import_torch()
        self.settings = _Settings(self.torch, cfg)
        batched = cfg.max_batch_size > 0
        for kind, tensors in (("input", cfg.input), ("output", cfg.output)):
            for t in tensors:
                type_name = _TYPE_NAMES[t.data_type]
                io.check_dtype(type_name, t.name, kind, ctx.name)
                if type_name == "TYPE_STRING":
                    dims = list(t.reshape.shape) if t.HasField("reshape") else list(t.dims)
                    io.check_string_dims(dims, batched, t.name, kind, ctx.name)
        self._controls = [ci.name for ci in cfg.sequence_batching.control_input]
        self._states_in = [s.input_name for s in cfg.sequence_batching.state]
        config_outputs = [o.name for o in cfg.output]
        state_outputs = [s.output_name for s in cfg.sequence_batching.state]
        positions = io.output_positions([*config_outputs, *state_outputs], ctx.name)
        types = {o.name: _TYPE_NAMES[o.data_type] for o in cfg.output}
        types.update({s.output_name: _TYPE_NAMES[s.data_type] for s in cfg.sequence_batching.state})
        # name -> (index in forward's result, config type, is a state output)
        self.outputs: dict[str, tuple[int, str, bool]] = {
            n: (positions[n], types[n], n in state_outputs) for n in positions
        }
        kernels.warmup()

    def layout(self, module: Any) -> io.InputLayout:
        cfg = self.ctx.config
        return io.input_layout(
            [i.name for i in cfg.input],
            self._controls,
            self._states_in,
            forward_arguments(module),
            self.ctx.name,
        )

    def new_instance(self, spec: InstanceSpec) -> PyTorchInstance:
        return PyTorchInstance(self, spec)

    def close(self) -> None:
        return None
