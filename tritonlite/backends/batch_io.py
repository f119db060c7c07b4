"""A batch's tensors on their way into and out of a backend (ONNX Runtime, PyTorch, TensorRT).

``stage`` lays the requests' parts of one input end to end along dim 0 in a staging buffer of
the instance's pool (a single part is copied, so the backend gets writable, contiguous memory
it owns); the lease goes into ``leases``, which the caller releases once the backend no longer
reads the buffer. ``per_request`` hands each request its rows of every batch output as views.
``to_torch`` / ``to_numpy`` cross between numpy and torch without copies, BF16 included (numpy
has no bfloat16 of its own: the bits travel as int16).

``RaggedIO`` is Triton's ragged batching for a model whose config has ragged inputs
(``allow_ragged_batch``), ``batch_input`` or ``batch_output``: each ragged input reaches the
backend as one 1-D tensor, the requests' elements end to end; each batch input is computed from
the batch's requests (Triton's ``BackendInputCollector::ProcessBatchInput``); each batch output
is cut into per-request tensors shaped after the request's source input
(``BackendOutputResponder::ProcessBatchOutput``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonlite import kernels
from tritonlite._proto import pb
from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import internal, unsupported
from tritonlite.contracts.types import InferRequest
from tritonlite.memory import StagingPool

Array = np.ndarray[Any, Any]

# pb.BatchInput.Kind numbers (model_config.proto).
ELEMENT_COUNT = 0
ACCUMULATED_ELEMENT_COUNT = 1
ACCUMULATED_ELEMENT_COUNT_WITH_ZERO = 2
MAX_ELEMENT_COUNT_AS_SHAPE = 3
ITEM_SHAPE = 4
ITEM_SHAPE_FLATTEN = 5


def stage(parts: list[Array], pool: StagingPool, leases: list[Any]) -> Array:
    first = parts[0]
    if len(parts) == 1:
        shape = tuple(first.shape)
    else:
        shape = (sum(p.shape[0] for p in parts), *first.shape[1:])
    lease = pool.acquire(max(1, math.prod(shape) * first.dtype.itemsize))
    leases.append(lease)
    buf = lease.view(first.dtype, shape)
    if len(parts) == 1:
        np.copyto(buf, first)
    else:
        kernels.gather_into(buf, parts)
    return buf


def per_request(produced: dict[str, Array], requests: list[InferRequest]) -> list[dict[str, Array]]:
    if len(requests) == 1:
        return [produced]
    sizes = [r.batch_size for r in requests]
    split = {n: kernels.split_views(a, sizes) for n, a in produced.items()}
    return [{n: split[n][k] for n in produced} for k in range(len(requests))]


@dataclass(frozen=True, slots=True)
class BatchInputSpec:
    """One ``batch_input`` entry: what to compute, from which input, under which names."""

    kind: int
    targets: tuple[str, ...]
    dtype: np.dtype[Any]
    source: str


@dataclass(frozen=True, slots=True)
class BatchOutputSpec:
    """One ``batch_output`` target: its source input and its shape template (``[-1] + dims``
    for a batching model, -1 where the request's source input gives the size)."""

    source: str
    shape: tuple[int, ...]


def _source_shape(request: InferRequest, name: str) -> tuple[int, ...]:
    for inp in request.inputs:
        if inp.name == name:
            return tuple(inp.shape)
    raise internal(f"batch input or output source '{name}' is missing from the request")


def batch_input_value(spec: BatchInputSpec, requests: list[InferRequest]) -> Array:
    """The tensor Triton computes for ``spec`` over ``requests`` (in batch order).

    Element counts are over each request's whole source shape (its batch dim included);
    ``BATCH_ITEM_SHAPE`` rows are the source shape without the batch dim, once per batch item.
    """
    shapes = [_source_shape(r, spec.source) for r in requests]
    kind = spec.kind
    if kind in (ITEM_SHAPE, ITEM_SHAPE_FLATTEN):
        rows = [s[1:] for s in shapes for _ in range(s[0] if s else 0)]
        width = len(shapes[-1]) - 1 if shapes and shapes[-1] else 0
        table = np.array(rows, dtype=spec.dtype).reshape(len(rows), width)
        return table.reshape(-1) if kind == ITEM_SHAPE_FLATTEN else table
    counts = [math.prod(s) for s in shapes]
    if kind == ELEMENT_COUNT:
        return np.array(counts, dtype=spec.dtype)
    if kind == ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(counts, dtype=np.int64).astype(spec.dtype)
    if kind == ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        return np.cumsum([0, *counts], dtype=np.int64).astype(spec.dtype)
    if kind == MAX_ELEMENT_COUNT_AS_SHAPE:
        # Only the shape carries the information (Triton leaves the values unset).
        return np.zeros(max(counts, default=0), dtype=spec.dtype)
    raise internal(f"unsupported batch input kind {kind}")


def scatter_by_source(
    produced: Array, name: str, spec: BatchOutputSpec, requests: list[InferRequest]
) -> list[Array]:
    """Cut a batch output into per-request views: request k gets the next
    ``prod(shape_k)`` elements, ``shape_k`` being the template with each -1 replaced by the
    same dim of request k's source input."""
    flat = produced.reshape(-1)
    template = spec.shape
    wild = [i for i, d in enumerate(template) if d == -1]
    every = len(wild) == len(template)  # the usual [-1, -1, ...]: the source shape itself
    out: list[Array] = []
    offset = 0
    for r in requests:
        src = _source_shape(r, spec.source)
        if wild and wild[-1] >= len(src):
            raise internal(
                f"batch output '{name}' has more dims than its source input '{spec.source}'"
            )
        if every and len(src) == len(template):
            shape = src
        else:
            filled = list(template)
            for i in wild:
                filled[i] = src[i]
            shape = tuple(filled)
        count = math.prod(shape)
        if offset + count > flat.shape[0]:
            raise internal(
                f"batch output '{name}' has {flat.shape[0]} elements, fewer than the shapes "
                f"of source input '{spec.source}' in the batch need"
            )
        out.append(flat[offset : offset + count].reshape(shape))
        offset += count
    return out


def refuse_ragged(cfg: Any, backend: str) -> None:
    """UNSUPPORTED for a config with ragged inputs, ``batch_input`` or ``batch_output`` on a
    backend that does not lay them out (only ONNX Runtime does, through ``RaggedIO``)."""
    ragged = [t.name for t in cfg.input if t.allow_ragged_batch]
    what = (
        (["allow_ragged_batch on " + ", ".join(f"'{n}'" for n in ragged)] if ragged else [])
        + (["batch_input"] if len(cfg.batch_input) else [])
        + (["batch_output"] if len(cfg.batch_output) else [])
    )
    if what:
        raise unsupported(
            f"model '{cfg.name}': ragged batching ({', '.join(what)}) is not supported by "
            f"tritonlite's {backend} backend; the onnxruntime backend supports it"
        )


class RaggedIO:
    """Ragged inputs, batch inputs and batch outputs of one model (see the module notes).

    Built once per instance by ``for_config``, which returns None for a model that has none of
    them, so such models keep the plain path.
    """

    __slots__ = ("ragged", "batch_inputs", "batch_outputs")

    def __init__(
        self,
        ragged: frozenset[str],
        batch_inputs: tuple[BatchInputSpec, ...],
        batch_outputs: dict[str, BatchOutputSpec],
    ) -> None:
        self.ragged = ragged
        self.batch_inputs = batch_inputs
        self.batch_outputs = batch_outputs

    @classmethod
    def for_config(cls, cfg: Any) -> RaggedIO | None:
        # Flattened even without batching, as Triton's backends do (the model takes [-1]).
        ragged = frozenset(t.name for t in cfg.input if t.allow_ragged_batch)
        batched = int(cfg.max_batch_size) > 0
        inputs = tuple(
            BatchInputSpec(
                int(bi.kind),
                tuple(bi.target_name),
                np.dtype(np.float32 if bi.data_type == _FP32 else np.int32),
                bi.source_input[0],
            )
            for bi in cfg.batch_input
        )
        outputs: dict[str, BatchOutputSpec] = {}
        dims = {o.name: o for o in cfg.output}
        for bo in cfg.batch_output:
            for target in bo.target_name:
                o = dims.get(target)
                if o is None:
                    continue
                shape = list(o.reshape.shape) if o.HasField("reshape") else list(o.dims)
                outputs[target] = BatchOutputSpec(
                    bo.source_input[0], tuple(([-1] if batched else []) + shape)
                )
        if not (ragged or inputs or outputs):
            return None
        return cls(ragged, inputs, outputs)

    def feed(
        self,
        requests: list[InferRequest],
        feed: dict[str, Any],
        pool: StagingPool,
        leases: list[Any],
        convert: Callable[[Array, str], Array],
    ) -> None:
        """Fill ``feed`` with the batch's inputs: ragged ones flattened and concatenated, the
        others concatenated along dim 0 (staged), then the batch inputs. ``convert`` turns a
        BYTES tensor into what the backend takes."""
        for i, first in enumerate(requests[0].inputs):
            name = first.name
            parts: list[Array] = [r.inputs[i].data for r in requests]  # type: ignore[misc]
            if name in self.ragged:
                parts = [p.reshape(-1) for p in parts]
            if parts[0].dtype == object:
                feed[name] = convert(
                    parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0), name
                )
            elif len(parts) == 1:
                feed[name] = parts[0]
            else:
                feed[name] = stage(parts, pool, leases)
        for spec in self.batch_inputs:
            value = batch_input_value(spec, requests)
            for target in spec.targets:
                feed[target] = value

    def per_request(
        self, produced: dict[str, Array], requests: list[InferRequest]
    ) -> list[dict[str, Array]]:
        """Each request's outputs: batch outputs scattered by source shape, the others split
        along dim 0 by batch size (as ``per_request``)."""
        plain = {n: a for n, a in produced.items() if n not in self.batch_outputs}
        result = per_request(plain, requests)
        for name, spec in self.batch_outputs.items():
            arr = produced.get(name)
            if arr is None:
                continue
            for k, view in enumerate(scatter_by_source(arr, name, spec, requests)):
                result[k][name] = view
        return result


_FP32 = int(pb.DataType.values_by_name["TYPE_FP32"].number)


def to_torch(torch: Any, arr: Array) -> Any:
    if arr.dtype == datatypes.numpy_dtype("BF16"):
        return torch.from_numpy(np.ascontiguousarray(arr).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def to_numpy(torch: Any, t: Any) -> Array:
    """A CPU tensor's data as numpy (a view)."""
    if t.dtype == torch.bfloat16:
        out: Array = t.contiguous().view(torch.int16).numpy().view(datatypes.numpy_dtype("BF16"))
        return out
    arr: Array = t.numpy()
    return arr
