"""Request vs model signature: Triton's INVALID_ARG checks and messages.

``prepare`` runs on the event loop before a request is queued. It resolves shared-memory
inputs to views, checks names, datatypes, shapes and batch sizes, and reshapes inputs to what
the framework expects (numpy views, no copies).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonlite.contracts import datatypes
from tritonlite.contracts.datatypes import Misfit
from tritonlite.contracts.errors import TritonliteError, invalid_arg
from tritonlite.contracts.signature import Signature, TensorSpec
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.tensors.shm import SharedMemoryManager

_PROVEN_MAX = 8  # signatures remembered per header (a reload makes a new one)


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


def _reshaped(
    data: np.ndarray[Any, Any], batch: int | None, spec: TensorSpec
) -> np.ndarray[Any, Any]:
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


def log_request(req: InferRequest) -> str:
    """Triton's prefix for a request's errors (``InferenceRequest::LogRequest``)."""
    return f"[request id: {req.id or '<id_unknown>'}] "


def _names(names: list[str]) -> str:
    # Triton joins "'a'," pieces and pops the last character, so an empty list shows as "]"
    return "[" + ",".join(f"'{n}'" for n in names) + "]" if names else "]"


def _count_error(
    sig: Signature, req: InferRequest, visit: list[InferInput], seen: set[str]
) -> TritonliteError:
    n_all, n_req, n = len(sig.inputs), len(sig.required_inputs), len(req.inputs)
    if n_req == n_all:
        head = f"expected {n_all} inputs but got {n} inputs for model '{sig.name}'"
    else:
        head = (
            f"expected number of inputs between {n_req} and {n_all} but got {n} inputs "
            f"for model '{sig.name}'"
        )
    got = "[" + ",".join(f"'{i.name}'" for i in visit) + "]"
    missing = [name for name in sig.inputs if name in sig.required_inputs and name not in seen]
    return invalid_arg(
        f"{log_request(req)}{head}. Got input(s) {got}, but missing required "
        f"input(s) {_names(missing)}. Please provide all required input(s)."
    )


def prepare(sig: Signature, req: InferRequest, shm: SharedMemoryManager) -> None:
    """Validate ``req`` against ``sig`` in place; raise INVALID_ARG with Triton's wording.

    The checks run in Triton's order (its front end, then ``InferenceRequest::Normalize``, then
    its input byte sizes), so a request with several faults names the one Triton names: one
    pass finds a good request good; anything else takes ``_ordered``, which raises the error
    Triton raises first. A request rebuilt from a header that passed for ``sig`` before
    (``req.proven``) has nothing left to check.
    """
    proven = req.proven
    if proven is not None:
        hit = proven.get(id(sig))
        if hit is not None and hit[0] is sig:  # this header's requests passed for this model
            req.batch_size = hit[1]
            return
    model = sig.name
    seen: set[str] = set()
    held: list[str] | None = None
    for inp in req.inputs:  # (Triton's front end adds them in request order)
        if inp.name in seen:
            raise invalid_arg(f"{log_request(req)}input '{inp.name}' already exists in request")
        seen.add(inp.name)
        if inp.data is None:
            _resolve_shm(inp, shm, model)
            assert inp.shm is not None
            if held is None:
                held = []
            held.append(inp.shm.region)
    batch = _good_batch(sig, req, seen)
    good = batch >= 0
    if not good:
        batch = _ordered(sig, req, seen)
    req.batch_size = batch if batch > 0 else 1
    if req.outputs is not None:
        for out in req.outputs:
            if out.shm is not None:
                if out.classification:
                    raise invalid_arg(
                        f"output '{out.name}' can not set both shared memory and classification"
                    )
                shm.check(out.shm.region, out.shm.offset, out.shm.byte_size)
                if held is None:
                    held = []
                held.append(out.shm.region)
    if held:  # inputs and outputs, until the response is written: InferenceCore releases it
        shm.hold(req, held)
    elif good and proven is not None:
        # The checks read only what a template fixes (names, datatypes, shapes, outputs) and
        # ``sig``: the next request of the same header and signature passes them too.
        if len(proven) >= _PROVEN_MAX:
            proven.clear()
        proven[id(sig)] = (sig, req.batch_size)


def _good_batch(sig: Signature, req: InferRequest, seen: set[str]) -> int:
    """The batch size of a request that passes every check and needs no reshape (0 for a
    non-batching model); -1 for any other, which ``_ordered`` then looks at."""
    inputs = sig.inputs
    if len(req.inputs) > len(inputs) or not sig.required_inputs <= seen:
        return -1
    if req.outputs is not None:
        for out in req.outputs:
            if out.name not in sig.outputs:
                return -1
    batching = sig.max_batch_size > 0
    batch = 0
    for inp in req.inputs:
        spec = inputs.get(inp.name)
        shape = inp.shape
        data = inp.data
        if (
            spec is None
            or spec.reshape is not None
            or inp.datatype != spec.datatype
            or data is None
            or data.shape != shape
            or type(data) is Misfit
        ):
            return -1
        if batching:
            if not shape or (batch and shape[0] != batch):
                return -1
            batch = shape[0]
            shape = shape[1:]
        if shape != spec.dims and not _dims_match(spec.dims, shape):  # (equal: no call)
            return -1
    if batching and not 0 < batch <= sig.max_batch_size:
        return -1
    return batch


def _ordered(sig: Signature, req: InferRequest, seen: set[str]) -> int:
    """Triton's checks in Triton's order; the batch size if they all pass.

    Triton keeps a request's inputs in a ``std::unordered_map``; libstdc++ walks one newest
    first (while names fall in distinct buckets), so the inputs are visited in reverse.
    """
    model = sig.name
    if req.outputs is not None:
        for out in req.outputs:
            if out.name not in sig.outputs:
                raise invalid_arg(f"unexpected inference output '{out.name}' for model '{model}'")
    visit = req.inputs[::-1]
    if not len(sig.required_inputs) <= len(visit) <= len(sig.inputs):
        raise _count_error(sig, req, visit, seen)
    batch = 0
    if sig.max_batch_size > 0:
        for inp in visit:
            if inp.name not in sig.inputs:
                raise invalid_arg(f"unexpected inference input '{inp.name}' for model '{model}'")
            if len(inp.shape) == 0:
                raise invalid_arg(
                    f"{log_request(req)}input '{inp.name}' has no shape but model "
                    f"requires batch dimension for '{model}'"
                )
            if batch == 0:  # (0 is "not set yet" in Triton too)
                batch = inp.shape[0]
            elif inp.shape[0] != batch:
                raise invalid_arg(
                    f"{log_request(req)}input '{inp.name}' batch size does not "
                    f"match other inputs for '{model}'"
                )
        if batch > sig.max_batch_size:
            raise invalid_arg(
                f"{log_request(req)}inference request batch-size must be <= "
                f"{sig.max_batch_size} for '{model}'"
            )
    for inp in visit:
        spec = sig.inputs.get(inp.name)
        if spec is None:
            raise invalid_arg(f"unexpected inference input '{inp.name}' for model '{model}'")
        if inp.datatype != spec.datatype:
            raise invalid_arg(
                f"{log_request(req)}inference input '{inp.name}' data-type is '{inp.datatype}', "
                f"but model '{model}' expects '{spec.datatype}'"
            )
        inner = inp.shape[1:] if sig.max_batch_size > 0 else inp.shape
        if not _dims_match(spec.dims, inner):
            raise invalid_arg(
                f"{log_request(req)}unexpected shape for input '{inp.name}' for model "
                f"'{model}'. Expected {_fmt(sig.metadata_shape(spec))}, got {_fmt(inp.shape)}. "
                + (_BATCH_NOTE if sig.max_batch_size > 0 else "")
            )
    if not sig.required_inputs <= seen and sig.platform != "ensemble":
        # Triton counts inputs only, and runs the model without a required one when an
        # optional one takes its place; tritonlite refuses it, as Triton words a count error.
        # (An ensemble runs: its scheduler ends it with Triton's "unexpected deadlock".)
        raise _count_error(sig, req, visit, seen)
    for inp in visit:
        spec = sig.inputs[inp.name]
        data = inp.data
        assert data is not None
        # a batch size of 0 leaves Triton no batch dimension: it sizes the inner shape
        elements = (
            datatypes.num_elements(inp.shape)
            if sig.max_batch_size <= 0
            else (batch or 1) * datatypes.num_elements(inp.shape[1:])
        )
        if spec.datatype == "BYTES":
            if isinstance(data, Misfit):
                raise _bytes_error(req, inp.name, model, bytes(data.raw), elements)
        else:
            expected = elements * datatypes.element_size(spec.datatype)
            got = data.got if isinstance(data, Misfit) else data.nbytes
            if got != expected:
                raise byte_size_error(req, inp.name, model, expected, got)
        if spec.reshape is not None:
            inp.data = _reshaped(data, batch or None, spec)
    return batch


_BATCH_NOTE = (
    "NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to "
    "be prepended to each input shape. If you want to specify the full shape including the "
    "batch dim in your input dims config, try setting max_batch_size to zero. See the model "
    "configuration docs for more info on max_batch_size."
)


def _bytes_error(
    req: InferRequest, name: str, model: str, buf: bytes, count: int
) -> TritonliteError:
    """What Triton says of a BYTES buffer that is not ``count`` length-prefixed elements
    (``ValidateBytesInputs``: it walks the buffer, then compares the count, then the tail)."""
    pos, n, checked, left, length = 0, len(buf), 0, 0, 0
    while pos < n:
        if not left:
            if n - pos < 4:
                return invalid_arg(
                    f"{log_request(req)}incomplete string length indicator for inference input "
                    f"'{name}' for model '{model}', expecting 4 bytes but only {n - pos} bytes "
                    "available. Please make sure the string length indicator is in one buffer."
                )
            checked += 1
            if checked > count:
                return invalid_arg(
                    f"{log_request(req)}unexpected number of string elements {checked} for "
                    f"inference input '{name}' for model '{model}', expecting {count}"
                )
            length = left = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        take = min(left, n - pos)
        pos += take
        left -= take
    if checked < count:
        return invalid_arg(
            f"{log_request(req)}expected {count} string elements for inference "
            f"input '{name}' for model '{model}', got {checked}"
        )
    return invalid_arg(
        f"incomplete string data for inference input '{name}', expecting string "
        f"of length {length} but only {length - left} bytes available"
    )


def byte_size_error(
    req: InferRequest, name: str, model: str, expected: int, got: int
) -> TritonliteError:
    """Triton's INVALID_ARG for an input whose bytes do not fill its shape."""
    return invalid_arg(
        f"{log_request(req)}input byte size mismatch for input '{name}' for "
        f"model '{model}'. Expected {expected}, got {got}"
    )


def fill_raw_input(sig: Signature, req: InferRequest) -> None:
    """Give a raw binary request (body = the single input's bytes) its input, as Triton does:
    the model's one input, its shape deduced from the byte count along at most one
    variable-size dimension. Errors name the input ``raw_input``, as Triton's do."""
    raw = req.raw_input
    assert raw is not None
    if len(sig.inputs) != 1:
        raise invalid_arg(
            f"{log_request(req)}Raw request must only have 1 input (found 1) to be deduced but "
            f"got {len(sig.inputs)} inputs in '{sig.name}' model configuration"
        )
    spec = next(iter(sig.inputs.values()))
    dims = ([1] if sig.max_batch_size > 0 else []) + list(spec.dims)
    variable = [i for i, d in enumerate(dims) if d == -1]
    if len(variable) > 1:
        raise invalid_arg(
            f"{log_request(req)}The shape of the raw input '{spec.name}' can not be deduced "
            "because there are more than one variable-sized dimension"
        )
    fixed = datatypes.num_elements(tuple(d for d in spec.dims if d != -1))
    if spec.datatype == "BYTES":
        if variable or fixed != 1:
            raise invalid_arg(
                f"{log_request(req)}For BYTE datatype raw input '{spec.name}', the "
                "model must have input shape [1]"
            )
        data = np.empty(1, dtype=object)
        data[0] = bytes(raw)
        shape = tuple(dims)
        req.inputs = [InferInput(spec.name, "BYTES", shape, data.reshape(shape))]
    else:
        size = datatypes.element_size(spec.datatype)
        if variable:
            dims[variable[0]] = len(raw) // fixed // size if fixed else 0
        shape = tuple(dims)
        expected = datatypes.num_elements(shape) * size
        if expected != len(raw):
            raise byte_size_error(req, "raw_input", sig.name, expected, len(raw))
        req.inputs = [
            InferInput(
                spec.name,
                spec.datatype,
                shape,
                datatypes.from_buffer(spec.datatype, shape, raw, f"input '{spec.name}'"),
            )
        ]
    req.raw_input = None
