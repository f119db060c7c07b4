"""Model warm-up (the config's ``model_warmup``): samples built at load, run on each instance.

Triton's rules, followed here:

* a sample with ``batch_size: 0`` is skipped; otherwise it is ``batch_size`` requests of batch
  1 (shape ``[1] + dims`` when the model batches, ``dims`` when it does not) run together as
  one batch, ``count`` times (0 counts as once, the config's documented default);
* every dim must be fixed (no -1); data is ``zero_data`` (zeros; empty strings for BYTES),
  ``random_data`` (random bytes; zeros for BYTES) or ``input_data_file``, a file under
  ``<model>/warmup/`` holding the raw bytes of one batch-1 tensor (length-prefixed elements
  for BYTES); a sample input that is not a model input (a sequence control, say) is passed to
  the model as it is;
* outputs are not checked; any error fails the warm-up with ``failed to run warmup sample
  '<name>': <error>; ...`` (one error per failed request), which fails the model's load.

Warm-up runs on the instance's own thread and bypasses the scheduler. Its runs at load count
in the model's statistics, as Triton's do (successes with their compute times, no queue time:
``record_runs``); the periodic health probe (core/health.py) runs the same samples and counts in
no statistics.

Load-failure messages are Triton's, word for word (its ``[request id: <id_unknown>] `` prefix
and the missing space in "...<file>only has..." included).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonlite._proto import pb
from tritonlite.backends.base import BackendInstance
from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import TritonliteError, invalid_arg
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.observability.stats import ModelStats
from tritonlite.core.tensors import validate
from tritonlite.core.tensors.shm import SharedMemoryManager

WARMUP_DIR = "warmup"  # Triton's folder for input_data_file, under the model directory
_NO_SHM = SharedMemoryManager()  # warm-up inputs never name shared memory
_NO_ID = "[request id: <id_unknown>] "  # how Triton's messages name a warm-up request


@dataclass(frozen=True, slots=True)
class _Tensor:
    name: str
    datatype: str  # wire name
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any]
    is_model_input: bool


@dataclass(frozen=True, slots=True)
class WarmupSample:
    """One ``model_warmup`` entry, ready to run: ``batch_size`` requests, ``count`` times."""

    name: str
    batch_size: int
    count: int
    tensors: tuple[_Tensor, ...]

    def requests(self, signature: Signature) -> list[InferRequest]:
        """Fresh, validated requests for one run (the arrays are shared, never written)."""
        out = []
        for _ in range(self.batch_size):
            req = InferRequest(signature.name, outputs=None)
            extra: list[InferInput] = []
            for t in self.tensors:
                inp = InferInput(t.name, t.datatype, t.shape, t.data)
                (req.inputs if t.is_model_input else extra).append(inp)
            validate.prepare(signature, req, _NO_SHM)
            req.inputs += extra
            out.append(req)
        return out


def _data(
    name: str, wire: str, dims: tuple[int, ...], inp: Any, model_dir: Path
) -> np.ndarray[Any, Any]:
    count = datatypes.num_elements(dims)
    kind = inp.WhichOneof("input_data_type")
    if kind == "zero_data" or (kind == "random_data" and wire == "BYTES"):
        if wire == "BYTES":
            arr = np.empty(count, dtype=object)
            arr[:] = [b""] * count
            return arr.reshape(dims)
        return np.zeros(dims, dtype=datatypes.numpy_dtype(wire))
    if kind == "random_data":
        dt = datatypes.numpy_dtype(wire)
        rng = np.random.default_rng()
        if dt == np.bool_:
            return rng.integers(0, 2, size=dims).astype(np.bool_)
        raw = rng.integers(0, 256, size=count * dt.itemsize, dtype=np.uint8)
        return raw.view(dt).reshape(dims)
    if kind == "input_data_file":
        path = model_dir / WARMUP_DIR / inp.input_data_file
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise invalid_arg(f"failed to open text file for read {path}: {exc.strerror}") from None
        if wire == "BYTES":
            return datatypes.deserialize_bytes(blob, count).reshape(dims)
        dt = datatypes.numpy_dtype(wire)
        need = count * dt.itemsize
        if len(blob) < need:
            raise invalid_arg(
                f"{_NO_ID}warmup setting expects {need} bytes, but the data "
                f"provided from {inp.input_data_file}only has {len(blob)} bytes"
            )
        return np.frombuffer(blob, dtype=dt, count=count).reshape(dims)
    raise invalid_arg(f"{_NO_ID}warmup setting expects input '{name}' to have input_data_type set")


def build_samples(config: Any, model_dir: Path, signature: Signature) -> list[WarmupSample]:
    """The config's ``model_warmup`` entries as samples; INVALID_ARG for a bad entry.

    Each sample's requests are validated against the model here, so a sample that does not
    fit the model fails the load before any instance runs it.
    """
    batched = signature.max_batch_size > 0
    samples = []
    for w in config.model_warmup:
        if w.batch_size == 0:
            continue
        tensors = []
        for name in sorted(w.inputs):
            inp = w.inputs[name]
            dims = tuple(int(d) for d in inp.dims)
            if any(d < 0 for d in dims):
                raise invalid_arg(
                    "warmup setting expects all variable-size dimensions are "
                    f"specified for input '{name}'"
                )
            wire = datatypes.config_to_wire(pb.DataType.values_by_number[inp.data_type].name)
            data = _data(name, wire, dims, inp, model_dir)
            is_input = name in signature.inputs
            shape = ((1,) + dims) if batched and is_input else dims
            tensors.append(_Tensor(name, wire, shape, data.reshape(shape), is_input))
        sample = WarmupSample(w.name, int(w.batch_size), max(1, int(w.count)), tuple(tensors))
        sample.requests(signature)  # validate now: a sample that cannot run fails the load
        samples.append(sample)
    return samples


def run_samples(
    impl: BackendInstance, samples: list[WarmupSample], signature: Signature
) -> list[tuple[int, ExecTiming]]:
    """Run every sample on the calling (instance) thread; raise INVALID_ARG on a failure.

    Returns each run as (requests in it, its timing), for ``record_runs``.
    """
    runs = []
    for sample in samples:
        for _ in range(sample.count):
            requests = sample.requests(signature)
            timing = ExecTiming(start_ns=time.monotonic_ns())
            try:
                results = impl.execute(requests, timing)
                if len(results) != len(requests):
                    raise invalid_arg(
                        f"returned {len(results)} responses for {len(requests)} requests"
                    )
                errors = [r.message for r in results if isinstance(r, TritonliteError)]
            except TritonliteError as exc:
                errors = [exc.message] * len(requests)
            except Exception as exc:
                errors = [f"{type(exc).__name__}: {exc}"] * len(requests)
            if errors:
                raise invalid_arg(
                    f"failed to run warmup sample '{sample.name}': "
                    + "".join(f"{e}; " for e in errors)
                )
            timing.end_ns = time.monotonic_ns()
            runs.append((len(requests), timing))
    return runs


def record_runs(stats: ModelStats, runs: list[tuple[int, ExecTiming]]) -> None:
    """Count load-time warm-up runs in ``stats`` the way Triton does (on the event loop)."""
    for n, timing in runs:
        stats.record_execution(n, timing)
        for _ in range(n):
            stats.record_success(timing.end_ns - timing.start_ns, 0, timing)
