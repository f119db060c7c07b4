"""Ragged batching's tensors (``backends.batch_io.RaggedIO``) against naive references written
from Triton's rules: what each batch input kind holds, how ragged inputs are laid end to end,
and how a batch output is cut per request by its source input's shape."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonlite._proto import pb
from tritonlite.backends import batch_io
from tritonlite.backends.batch_io import BatchInputSpec, BatchOutputSpec, RaggedIO
from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.memory import StagingPool

pytestmark = pytest.mark.timeout(120)

KINDS = {
    name: int(pb.BatchInput.Kind.Value(name))
    for name in (
        "BATCH_ELEMENT_COUNT",
        "BATCH_ACCUMULATED_ELEMENT_COUNT",
        "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
        "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
        "BATCH_ITEM_SHAPE",
        "BATCH_ITEM_SHAPE_FLATTEN",
    )
}


def _request(**inputs: np.ndarray) -> InferRequest:
    arrays = [InferInput(n, "FP32", tuple(a.shape), a) for n, a in inputs.items()]
    return InferRequest("m", inputs=arrays, batch_size=next(iter(inputs.values())).shape[0])


def _reference(kind: str, shapes: list[tuple[int, ...]]) -> np.ndarray:
    """Triton's batch input, written out loop by loop."""
    counts = [math.prod(s) for s in shapes]
    if kind == "BATCH_ELEMENT_COUNT":
        return np.array(counts)
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        return np.array([sum(counts[: k + 1]) for k in range(len(counts))])
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        return np.array([sum(counts[:k]) for k in range(len(counts) + 1)])
    if kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        return np.zeros(max(counts))
    rows = []
    for s in shapes:
        for _ in range(s[0]):
            rows.append(list(s[1:]))
    table = np.array(rows).reshape(len(rows), len(shapes[0]) - 1)
    return table if kind == "BATCH_ITEM_SHAPE" else table.reshape(-1)


# A batch of ragged requests: each has its own batch size and dims of one shared rank.
batches = st.integers(1, 3).flatmap(
    lambda rank: st.lists(
        st.tuples(st.integers(1, 3), *[st.integers(0, 5)] * rank), min_size=1, max_size=6
    )
)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@settings(max_examples=60, deadline=None)
@given(shapes=batches)
def test_batch_input_kinds_match_reference(kind: str, dtype: Any, shapes: list[tuple]) -> None:
    requests = [_request(X=np.zeros(s, np.float32)) for s in shapes]
    spec = BatchInputSpec(KINDS[kind], ("T",), np.dtype(dtype), "X")
    got = batch_io.batch_input_value(spec, requests)
    want = _reference(kind, shapes).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(shapes=batches)
def test_batch_output_scatters_back_each_request(shapes: list[tuple]) -> None:
    rng = np.random.default_rng(len(shapes))
    sent = [rng.random(s, dtype=np.float32) for s in shapes]
    requests = [_request(X=a) for a in sent]
    produced = np.concatenate([a.reshape(-1) for a in sent])
    spec = BatchOutputSpec("X", (-1,) * len(shapes[0]))
    views = batch_io.scatter_by_source(produced, "Y", spec, requests)
    for view, a in zip(views, sent, strict=True):
        assert view.shape == a.shape
        np.testing.assert_array_equal(view, a)


def test_batch_output_keeps_fixed_dims_and_refuses_short_outputs() -> None:
    requests = [_request(X=np.zeros((1, 3), np.float32)), _request(X=np.zeros((1, 2), np.float32))]
    spec = BatchOutputSpec("X", (-1, -1, 2))  # [-1] + dims [-1, 2]
    views = batch_io.scatter_by_source(np.arange(10.0), "Y", spec, requests)
    assert [v.shape for v in views] == [(1, 3, 2), (1, 2, 2)]
    np.testing.assert_array_equal(views[1].reshape(-1), [6.0, 7.0, 8.0, 9.0])
    with pytest.raises(TritonliteError, match="batch output 'Y' has 9 elements"):
        batch_io.scatter_by_source(np.arange(9.0), "Y", spec, requests)


CONFIG = """
name: "m"
max_batch_size: 8
input [ { name: "R" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true },
        { name: "F" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "PLAIN" data_type: TYPE_FP32 dims: [ 2 ] } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: ["I", "J"]
                data_type: TYPE_INT32 source_input: "R" } ]
batch_output [ { target_name: "OUT" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "R" } ]
"""


def _ragged() -> RaggedIO:
    io = RaggedIO.for_config(text_format.Parse(CONFIG, pb.ModelConfig()))
    assert io is not None
    return io


def _identity(a: np.ndarray, name: str) -> np.ndarray:
    return a


def test_for_config_is_none_without_ragged_or_batch_io() -> None:
    plain = text_format.Parse(
        'max_batch_size: 8 input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]',
        pb.ModelConfig(),
    )
    assert RaggedIO.for_config(plain) is None
    io = _ragged()
    assert io.ragged == {"R"}
    assert io.batch_outputs == {"OUT": BatchOutputSpec("R", (-1, -1))}


@pytest.mark.parametrize("count", [1, 3])
def test_feed_and_per_request(count: int) -> None:
    io = _ragged()
    rs = [np.arange(k + 2, dtype=np.float32).reshape(1, k + 2) + 10 * k for k in range(count)]
    fs = [np.full((1, 2), k, np.float32) for k in range(count)]
    requests = [_request(R=r, F=f) for r, f in zip(rs, fs, strict=True)]
    feed: dict[str, Any] = {}
    leases: list[Any] = []
    pool = StagingPool(pinned=False)
    io.feed(requests, feed, pool, leases, _identity)
    np.testing.assert_array_equal(feed["R"], np.concatenate([r.reshape(-1) for r in rs]))
    assert feed["R"].ndim == 1
    np.testing.assert_array_equal(feed["F"], np.concatenate(fs))
    offsets = np.cumsum([0] + [r.size for r in rs]).astype(np.int32)
    for target in ("I", "J"):
        assert feed[target].dtype == np.int32
        np.testing.assert_array_equal(feed[target], offsets)
    produced = {"OUT": feed["R"] * 2, "PLAIN": feed["F"] + 1}
    outs = io.per_request(produced, requests)
    for out, r, f in zip(outs, rs, fs, strict=True):
        np.testing.assert_array_equal(out["OUT"], r * 2)
        np.testing.assert_array_equal(out["PLAIN"], f + 1)
    for lease in leases:
        lease.release()
    pool.close()
