"""Turn a backend's outputs for one request into its InferResponse.

Runs on the instance thread, after execute: picks the requested outputs, undoes reshape,
applies classification and writes shared-memory outputs, so the event loop only encodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonlite.backends.base import ModelOutputs
from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import internal
from tritonlite.contracts.signature import Signature, TensorSpec
from tritonlite.contracts.types import InferOutput, InferRequest, InferResponse, RequestedOutput
from tritonlite.core.tensors.classification import classify
from tritonlite.core.tensors.shm import SharedMemoryManager

_WIRE = datatypes.NATIVE_WIRE


def _unreshape(arr: np.ndarray[Any, Any], spec: TensorSpec, batched: bool) -> np.ndarray[Any, Any]:
    dims = list(spec.dims)
    lead = [arr.shape[0]] if batched and arr.ndim > 0 else []
    if dims.count(-1) > 1:
        return arr
    return arr.reshape(lead + dims)


def _write_shm(shm: SharedMemoryManager, out: RequestedOutput, arr: np.ndarray[Any, Any]) -> None:
    ref = out.shm
    assert ref is not None
    data = datatypes.tensor_bytes(arr)
    if len(data) > ref.byte_size:
        raise internal(
            f"shared memory size specified with the request for output '{out.name}' "
            f"({ref.byte_size} bytes) should be at least {len(data)} bytes to hold the results"
        )
    shm.write(ref.region, ref.offset, data)


def build_response(
    sig: Signature,
    version: str,
    req: InferRequest,
    produced: dict[str, np.ndarray[Any, Any]],
    shm: SharedMemoryManager,
) -> InferResponse:
    batched = sig.max_batch_size > 0
    if req.outputs is None:
        wanted = [RequestedOutput(name, binary=req.binary_data_output) for name in sig.outputs]
    else:
        wanted = req.outputs
    outs: list[InferOutput] = []
    for w in wanted:
        arr = produced.get(w.name)
        if arr is None:
            if isinstance(produced, ModelOutputs) and produced.partial:
                continue
            raise internal(f"output '{w.name}' was not produced by model '{sig.name}'")
        spec = sig.outputs[w.name]
        if spec.reshape is not None:
            arr = _unreshape(arr, spec, batched)
        if w.classification:
            arr = classify(arr, w.classification, batched, spec.labels)
        wire = _WIRE.get(arr.dtype) or datatypes.wire_name_of(arr)  # (the common dtypes: no call)
        shape = arr.shape  # a tuple of Python ints already
        if w.shm is not None:
            _write_shm(shm, w, arr)
            outs.append(InferOutput(w.name, wire, shape, None, shm=w.shm))
        else:
            # (positional, and ``is True`` for a bool | None: per output, no keyword, no call)
            outs.append(InferOutput(w.name, wire, shape, arr, None, w.binary is True))
    params = dict(produced.parameters) if isinstance(produced, ModelOutputs) else {}
    return InferResponse(sig.name, version, req.id, outs, params)
