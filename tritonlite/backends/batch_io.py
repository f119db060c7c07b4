"""A batch's tensors on their way into and out of a backend (ONNX Runtime, PyTorch, TensorRT).

``stage`` lays the requests' parts of one input end to end along dim 0 in a staging buffer of
the instance's pool (a single part is copied, so the backend gets writable, contiguous memory
it owns); the lease goes into ``leases``, which the caller releases once the backend no longer
reads the buffer. ``per_request`` hands each request its rows of every batch output as views.
``to_torch`` / ``to_numpy`` cross between numpy and torch without copies, BF16 included (numpy
has no bfloat16 of its own: the bits travel as int16).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tritonlite import kernels
from tritonlite.contracts import datatypes
from tritonlite.contracts.types import InferRequest
from tritonlite.memory import StagingPool

Array = np.ndarray[Any, Any]


def stage(parts: list[Array], pool: StagingPool, leases: list[Any]) -> Array:
    first = parts[0]
    if len(parts) == 1:
        shape = tuple(first.shape)
    else:
        shape = (sum(p.shape[0] for p in parts), *first.shape[1:])
    lease = pool.acquire(max(1, int(np.prod(shape)) * first.dtype.itemsize))
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
