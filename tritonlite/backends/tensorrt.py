"""TensorRT backend (``tensorrt_plan``): a serialized engine, deserialized once per instance.

Each instance owns its engine, one execution context and one CUDA stream on its device (torch
provides the stream and the device buffers). A batch's inputs are gathered into the instance's
pinned staging buffers, copied to the device on the stream, run with ``execute_async_v3``, and
the outputs copied back on the same stream; only that stream is synchronized. The optimization
profile is the first (among the instance group's ``profile`` list, when given) whose
min..max shapes hold the batch (``trt_profiles``).

Import-guarded: without the ``tensorrt`` package, a CUDA build of torch or a CUDA device the
model fails to load with UNAVAILABLE saying which, and the rest of the server serves.
"""

from __future__ import annotations

import importlib.util
import time
from typing import Any

from tritonlite import kernels
from tritonlite._proto import pb
from tritonlite.backends import batch_io, trt_profiles
from tritonlite.backends.base import InstanceSpec, ModelContext, Result
from tritonlite.contracts.errors import internal, invalid_arg, unavailable
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferRequest
from tritonlite.memory import StagingPool

_TYPE_NAMES = {v.number: v.name for v in pb.DataType.values}


def _imports(model: str) -> tuple[Any, Any]:
    if importlib.util.find_spec("tensorrt") is None:
        raise unavailable(
            f"model '{model}' needs the 'tensorrt' package, which is not installed "
            "in this server's environment"
        )
    if importlib.util.find_spec("torch") is None:
        raise unavailable(
            f"model '{model}': the tensorrt backend uses torch for CUDA streams "
            "and device memory, and torch is not installed"
        )
    import tensorrt as trt
    import torch

    if not torch.cuda.is_available():
        raise unavailable(
            f"model '{model}' is a TensorRT plan, which needs a CUDA device; none is available"
        )
    return trt, torch


def _torch_dtype(torch: Any, trt: Any, dtype: Any) -> Any:
    table = {
        trt.float32: torch.float32,
        trt.float16: torch.float16,
        trt.int8: torch.int8,
        trt.int32: torch.int32,
        trt.bool: torch.bool,
        trt.uint8: torch.uint8,
    }
    for name, tdt in (("int64", torch.int64), ("bf16", torch.bfloat16)):
        if hasattr(trt, name):
            table[getattr(trt, name)] = tdt
    if dtype not in table:
        raise unavailable(f"TensorRT data type {dtype} is not supported by this server")
    return table[dtype]


def _bounds(shapes: Any) -> tuple[trt_profiles.Shape, trt_profiles.Shape, trt_profiles.Shape]:
    """An input's (min, opt, max) from ``get_tensor_profile_shape``, as int tuples."""
    lo, opt, hi = (tuple(int(d) for d in s) for s in shapes)
    return lo, opt, hi


class TensorRTInstance:
    def __init__(self, backend: TensorRTBackend, spec: InstanceSpec) -> None:
        trt, torch = backend.trt, backend.torch
        ctx = backend.ctx
        if spec.kind != "GPU":
            raise unavailable(
                f"instance '{spec.name}' of TensorRT model '{ctx.name}' is "
                f"KIND_{spec.kind}: TensorRT plans run on GPUs only"
            )
        self._trt, self._torch = trt, torch
        self._name = ctx.name
        self._device = torch.device("cuda", spec.device_id)
        with torch.cuda.device(self._device):
            self._engine = backend.runtime.deserialize_cuda_engine(backend.plan)
            if self._engine is None:
                raise unavailable(
                    f"unable to deserialize the TensorRT plan of model "
                    f"'{ctx.name}' on GPU {spec.device_id}"
                )
            self._context = self._engine.create_execution_context()
            self._stream = torch.cuda.Stream(device=self._device)
        io = trt.TensorIOMode
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        self._inputs = [n for n in names if self._engine.get_tensor_mode(n) == io.INPUT]
        self._outputs = [n for n in names if self._engine.get_tensor_mode(n) == io.OUTPUT]
        self._dtypes = {
            n: _torch_dtype(torch, trt, self._engine.get_tensor_dtype(n)) for n in names
        }
        dynamic = [n for n in self._inputs if -1 in tuple(self._engine.get_tensor_shape(n))]
        self._profiles: list[trt_profiles.ProfileShapes] = [
            {n: _bounds(self._engine.get_tensor_profile_shape(n, p)) for n in dynamic}
            for p in range(self._engine.num_optimization_profiles)
        ]
        group = next((g for g in ctx.config.instance_group if spec.name.startswith(g.name)), None)
        self._allowed = [int(p) for p in group.profile] if group is not None else []
        self._profile = -1
        self._staging = StagingPool()
        backend.check_io(self._inputs, self._outputs, self._dtypes)

    def execute(self, requests: list[InferRequest], timing: ExecTiming) -> list[Result]:
        torch = self._torch
        leases: list[Any] = []
        try:
            with torch.cuda.device(self._device), torch.cuda.stream(self._stream):
                shapes, device_inputs = self._inputs_on_device(requests, leases)
                index = trt_profiles.choose(shapes, self._profiles, self._allowed)
                if index is None and self._profiles:
                    raise invalid_arg(
                        f"model '{self._name}': " + trt_profiles.describe(shapes, self._profiles)
                    )
                handle = self._stream.cuda_stream
                if index is not None and index != self._profile:
                    self._context.set_optimization_profile_async(index, handle)
                    self._profile = index
                for name, t in device_inputs.items():
                    self._context.set_input_shape(name, tuple(t.shape))
                    self._context.set_tensor_address(name, t.data_ptr())
                timing.input_end_ns = time.monotonic_ns()
                outputs = {}
                for name in self._outputs:
                    shape = tuple(self._context.get_tensor_shape(name))
                    t = torch.empty(shape, dtype=self._dtypes[name], device=self._device)
                    self._context.set_tensor_address(name, t.data_ptr())
                    outputs[name] = t
                if not self._context.execute_async_v3(handle):
                    raise internal(f"TensorRT execution of model '{self._name}' failed")
                host = {}
                for name, t in outputs.items():
                    h = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                    h.copy_(t, non_blocking=True)
                    host[name] = h
                self._stream.synchronize()
            timing.infer_end_ns = time.monotonic_ns()
        finally:
            for lease in leases:
                lease.release()
        produced = {n: batch_io.to_numpy(torch, h) for n, h in host.items()}
        return batch_io.per_request(produced, requests)  # type: ignore[return-value]

    def _inputs_on_device(
        self, requests: list[InferRequest], leases: list[Any]
    ) -> tuple[dict[str, tuple[int, ...]], dict[str, Any]]:
        torch = self._torch
        shapes: dict[str, tuple[int, ...]] = {}
        on_device: dict[str, Any] = {}
        for i, first in enumerate(requests[0].inputs):
            parts = [r.inputs[i].data for r in requests]
            data = first.data
            assert data is not None
            buf = batch_io.stage(parts, self._staging, leases)  # type: ignore[arg-type]
            shapes[first.name] = tuple(int(d) for d in buf.shape)
            on_device[first.name] = batch_io.to_torch(torch, buf).to(
                self._device, non_blocking=True
            )
        return shapes, on_device

    def close(self) -> None:
        self._context = None
        self._engine = None
        self._staging.close()


class TensorRTBackend:
    def __init__(self, ctx: ModelContext) -> None:
        self.ctx = ctx
        path = ctx.version_dir / (ctx.config.default_model_filename or "model.plan")
        if not path.is_file():
            raise unavailable(
                f"unable to find '{path}' for model '{ctx.name}' version {ctx.version}"
            )
        batch_io.refuse_ragged(ctx.config, "tensorrt")
        self.trt, self.torch = _imports(ctx.name)
        self.plan = path.read_bytes()
        self.runtime = self.trt.Runtime(self.trt.Logger(self.trt.Logger.WARNING))
        kernels.warmup()

    def check_io(self, inputs: list[str], outputs: list[str], dtypes: dict[str, Any]) -> None:
        """Config tensors must be engine tensors of the same data type."""
        torch = self.torch
        names = {
            torch.float32: "TYPE_FP32",
            torch.float16: "TYPE_FP16",
            torch.int8: "TYPE_INT8",
            torch.int32: "TYPE_INT32",
            torch.int64: "TYPE_INT64",
            torch.bool: "TYPE_BOOL",
            torch.uint8: "TYPE_UINT8",
            torch.bfloat16: "TYPE_BF16",
        }
        cfg = self.ctx.config
        for kind, tensors, engine_names in (
            ("input", cfg.input, inputs),
            ("output", cfg.output, outputs),
        ):
            for t in tensors:
                if t.name not in engine_names:
                    raise invalid_arg(
                        f"unable to load model '{cfg.name}', configuration {kind} "
                        f"'{t.name}' is not an {kind} of the TensorRT engine "
                        f"({', '.join(engine_names)})"
                    )
                want, got = _TYPE_NAMES[t.data_type], names.get(dtypes[t.name], "?")
                if want != got:
                    raise invalid_arg(
                        f"unexpected datatype {want} for {kind} '{t.name}' of "
                        f"model '{cfg.name}': the engine has {got}"
                    )

    def new_instance(self, spec: InstanceSpec) -> TensorRTInstance:
        return TensorRTInstance(self, spec)

    def close(self) -> None:
        self.plan = b""
