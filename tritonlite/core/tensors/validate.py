"""Request vs model signature: Triton's INVALID_ARG checks and messages.

``prepare`` runs on the event loop before a request is queued. It resolves shared-memory
inputs to views, checks names, datatypes, shapes and batch sizes, and reshapes inputs to what
the framework expects (numpy views, no copies).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import invalid_arg
from tritonlite.contracts.signature import Signature, TensorSpec
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.tensors.shm import SharedMemoryManager


def _fmt(shape: Any) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def _dims_match(dims: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    if len(dims) != len(shape):
        return False
    for d, s in zip(dims, shape):
        if d != s and d != -1:
            return False
    return True


def _resolve_shm(inp: InferInput, shm: SharedMemoryManager, model: str) -> None:
    ref = inp.shm
    assert ref is not None
    view = shm.read(ref.region, ref.offset, ref.byte_size)
    inp.data = datatypes.from_buffer(inp.datatype, inp.shape, view, f"input '{inp.name}'")


def _reshaped(data: np.ndarray[Any, Any], batch: int | None,
              spec: TensorSpec) -> np.ndarray[Any, Any]:
    assert spec.reshape is not None
    target = ([batch] if batch is not None else []) + list(spec.reshape)
    if -1 in spec.reshape:
        # a variable reshape dim takes whatever is left over
        known = 1
        for d in target:
            if d != -1:
                known *= d
        target = [d if d != -1 else (data.size // known if known else 0) for d in target]
    return data.reshape(target)


def prepare(sig: Signature, req: InferRequest, shm: SharedMemoryManager) -> None:
    """Validate ``req`` against ``sig`` in place; raise INVALID_ARG with Triton's wording."""
    model = sig.name
    seen: set[str] = set()
    for inp in req.inputs:
        if inp.name in seen:
            raise invalid_arg(f"input '{inp.name}' already exists in request")
        seen.add(inp.name)
    n_all, n_req = len(sig.inputs), len(sig.required_inputs)
    if not sig.required_inputs <= seen or len(req.inputs) > n_all:
        if n_req == n_all:
            msg = f"expected {n_all} inputs but got {len(req.inputs)} inputs for model '{model}'"
        else:
            msg = (f"expected number of inputs between {n_req} and {n_all} but got "
                   f"{len(req.inputs)} inputs for model '{model}'")
        missing = sorted(sig.required_inputs - seen)
        if missing and len(req.inputs) >= n_req:
            msg += f". Got input(s) {sorted(seen)}, but missing required input(s) {missing}"
        unknown = [i.name for i in req.inputs if i.name not in sig.inputs]
        if unknown:
            raise invalid_arg(f"unexpected inference input '{unknown[0]}' for model '{model}'")
        raise invalid_arg(msg)
    batch: int | None = None
    for inp in req.inputs:
        spec = sig.inputs.get(inp.name)
        if spec is None:
            raise invalid_arg(f"unexpected inference input '{inp.name}' for model '{model}'")
        if inp.datatype != spec.datatype:
            raise invalid_arg(
                f"inference input '{inp.name}' data-type is '{inp.datatype}', but model "
                f"'{model}' expects '{spec.datatype}'"
            )
        shape = inp.shape
        if sig.max_batch_size > 0:
            if len(shape) == 0:
                raise invalid_arg(
                    f"unexpected shape for input '{inp.name}' for model '{model}'. "
                    f"Expected {_fmt(sig.metadata_shape(spec))}, got {_fmt(shape)}"
                )
            b = shape[0]
            if batch is None:
                batch = b
                if b > sig.max_batch_size:
                    raise invalid_arg(
                        f"inference request batch-size must be <= {sig.max_batch_size} "
                        f"for '{model}'"
                    )
                if b < 1 and datatypes.num_elements(shape) != 0:
                    raise invalid_arg(f"inference request batch-size must be >= 1 for '{model}'")
            elif b != batch:
                raise invalid_arg(
                    f"input '{inp.name}' batch size does not match other inputs for '{model}'"
                )
            inner = shape[1:]
        else:
            inner = shape
        if not _dims_match(spec.dims, inner):
            raise invalid_arg(
                f"unexpected shape for input '{inp.name}' for model '{model}'. "
                f"Expected {_fmt(sig.metadata_shape(spec))}, got {_fmt(shape)}"
            )
        if inp.data is None:
            _resolve_shm(inp, shm, model)
        if spec.reshape is not None:
            inp.data = _reshaped(inp.data, batch, spec)  # type: ignore[arg-type]
    req.batch_size = batch if batch is not None and batch > 0 else 1
    if req.outputs is not None:
        held: list[str] | None = None
        for out in req.outputs:
            if out.name not in sig.outputs:
                raise invalid_arg(f"unexpected inference output '{out.name}' for model '{model}'")
            if out.shm is not None:
                if out.classification:
                    raise invalid_arg(
                        f"output '{out.name}' can not set both shared memory and classification"
                    )
                shm.check(out.shm.region, out.shm.offset, out.shm.byte_size)
                if held is None:
                    held = []
                held.append(out.shm.region)
        if held:  # until the response is written: InferenceCore releases it
            shm.hold(req, held)


def fill_raw_input(sig: Signature, req: InferRequest) -> None:
    """Give a raw binary request (body = the single input's bytes) its input, as Triton does."""
    raw = req.raw_input
    assert raw is not None
    if len(sig.inputs) != 1:
        raise invalid_arg(
            f"Raw request must only have 1 input (found {len(sig.inputs)}) to be deduced but got "
            f"{len(sig.inputs)} inputs in '{sig.name}' model configuration"
        )
    spec = next(iter(sig.inputs.values()))
    lead = [1] if sig.max_batch_size > 0 else []
    if spec.datatype == "BYTES":
        if list(spec.dims) != [1]:
            raise invalid_arg(
                "For BYTES datatype raw input, the model must have input shape [1]"
            )
        data = np.empty(1, dtype=object)
        data[0] = bytes(raw)
        shape = tuple(lead + [1])
        req.inputs = [InferInput(spec.name, "BYTES", shape, data.reshape(shape))]
    else:
        size = datatypes.element_size(spec.datatype)
        variable = [i for i, d in enumerate(spec.dims) if d == -1]
        if len(variable) > 1:
            raise invalid_arg(
                "Raw input with data type other than BYTES can be inferred only when the model "
                "has at most one variable-size dimension"
            )
        fixed = 1
        for d in spec.dims:
            if d != -1:
                fixed *= d
        if len(raw) % size or (fixed and (len(raw) // size) % fixed):
            raise invalid_arg(
                f"unexpected total byte size {len(raw)} for raw input '{spec.name}' of model "
                f"'{sig.name}'"
            )
        dims = list(spec.dims)
        if variable:
            dims[variable[0]] = (len(raw) // size) // fixed if fixed else 0
        elif fixed * size != len(raw):
            raise invalid_arg(
                f"unexpected total byte size {len(raw)} for raw input '{spec.name}' of model "
                f"'{sig.name}', expecting {fixed * size}"
            )
        shape = tuple(lead + dims)
        req.inputs = [InferInput(spec.name, spec.datatype, shape,
                                 datatypes.from_buffer(spec.datatype, shape, raw,
                                                       f"input '{spec.name}'"))]
    req.raw_input = None
