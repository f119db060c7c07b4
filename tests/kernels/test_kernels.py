"""Kernels: every API call on the Numba twin and the plain twin, against naive references."""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonlite import kernels
from tritonlite.kernels import BytesFormatError, KernelSet, _plain, _raw, pack_shapes

LAYOUT = _raw.probe_layout()
# The plain twin of the struct-reading gather, which the default plain set leaves to numpy.
PLAIN_RAW = KernelSet(kernels.PLAIN.impl, jitted=False, layout=LAYOUT, raw_gather=True)
NO_NUMBA = "Numba twin is off (TRITONLITE_NO_NUMBA=1 or numba not importable)"


def _numba() -> KernelSet:
    if kernels.JIT is None:
        pytest.skip(NO_NUMBA)
    return kernels.JIT


@pytest.fixture(params=["numba", "plain"])
def ks(request: pytest.FixtureRequest) -> KernelSet:
    return _numba() if request.param == "numba" else kernels.PLAIN


@pytest.fixture(params=["numba", "plain", "plain-raw"])
def gk(request: pytest.FixtureRequest) -> KernelSet:
    """Gather: the Numba twin, the plain set (numpy path) and the plain struct-reading twin."""
    if request.param == "numba":
        return _numba()
    return kernels.PLAIN if request.param == "plain" else PLAIN_RAW


def test_numba_active_follows_env() -> None:
    if os.environ.get("TRITONLITE_NO_NUMBA") == "1":
        assert not kernels.NUMBA_ACTIVE and kernels.JIT is None
    assert kernels.describe().startswith("kernels: ")


def test_layout_probe_holds_on_this_interpreter() -> None:
    assert LAYOUT is not None  # CPython 3.11 / numpy 2 on 64-bit little-endian


def test_warmup(ks: KernelSet) -> None:
    ks.warmup()
    ks.warmup()  # a second call (another model loading) finds it warm
    assert ks._warm
    if ks.jitted:  # every kernel of the Numba twin is compiled, not left to the first request
        dispatchers = {n: f for n, f in vars(ks.impl).items() if hasattr(f, "signatures")}
        assert set(dispatchers) >= {"shape_prefix_len", "shape_group_ids", "batch_offsets"}
        assert all(f.signatures for f in dispatchers.values()), [
            n for n, f in dispatchers.items() if not f.signatures
        ]
    out = np.empty((3, 2), dtype=np.float32)
    assert ks.gather_into(out, [np.ones((1, 2), np.float32), np.zeros((2, 2), np.float32)]) == 3
    assert out.tolist() == [[1, 1], [0, 0], [0, 0]]


# -- shape grouping ---------------------------------------------------------------------------

_shape_lists = st.lists(
    st.lists(st.integers(0, 3), min_size=0, max_size=3).map(tuple), min_size=0, max_size=12
)


@settings(max_examples=80, deadline=None)
@given(shapes=_shape_lists)
def test_shape_grouping_matches_reference(shapes: list[tuple[int, ...]]) -> None:
    packed = pack_shapes(shapes)
    want_prefix = 0
    for shape in shapes:
        if shape != shapes[0]:
            break
        want_prefix += 1
    first: dict[tuple[int, ...], int] = {}
    want_ids = [first.setdefault(shape, len(first)) for shape in shapes]
    want_heads = [shapes.index(shape) for shape in first]
    for impl in _sets():
        assert impl.shape_prefix_len(packed) == want_prefix
        ids, heads = impl.shape_group_ids(packed)
        assert ids.tolist() == want_ids
        assert heads.tolist() == want_heads


def test_shape_grouping_rank_padding(ks: KernelSet) -> None:
    packed = pack_shapes([(2, 3), (2, 3, -1), (2,), (2, 3)])
    assert ks.shape_prefix_len(packed) == 2  # (2, 3) padded equals (2, 3, -1): caller's contract
    ids, heads = ks.shape_group_ids(pack_shapes([(2, 3), (2,), (2, 3)]))
    assert ids.tolist() == [0, 1, 0] and heads.tolist() == [0, 1]
    with pytest.raises(ValueError):
        ks.shape_prefix_len(np.zeros(3, dtype=np.int64))


def _sets() -> list[KernelSet]:
    return [kernels.PLAIN] + ([kernels.JIT] if kernels.JIT is not None else [])


def _gather_sets() -> list[KernelSet]:
    return _sets() + [PLAIN_RAW]


# -- gather -----------------------------------------------------------------------------------

_dtypes = st.sampled_from(
    [np.uint8, np.int16, np.int32, np.float32, np.float64, np.bool_, np.complex64]
)


@settings(max_examples=60, deadline=None)
@given(
    dtype=_dtypes,
    trailing=st.lists(st.integers(0, 3), max_size=3).map(tuple),
    rows=st.lists(st.integers(0, 3), max_size=10),
    spare=st.integers(0, 2),
    seed=st.integers(0, 2**32 - 1),
)
def test_gather_matches_concatenate(
    dtype: Any, trailing: tuple[int, ...], rows: list[int], spare: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    parts = [
        (rng.integers(0, 100, size=(r, *trailing)) % (2 if dtype is np.bool_ else 100)).astype(
            dtype
        )
        for r in rows
    ]
    total = sum(rows)
    for impl in _gather_sets():
        out = np.full((total + spare, *trailing), 7, dtype=dtype)
        assert impl.gather_into(out, parts) == total
        if parts:
            np.testing.assert_array_equal(out[:total], np.concatenate(parts))
        np.testing.assert_array_equal(out[total:], np.full((spare, *trailing), 7, dtype=dtype))


def test_gather_many_tiny_and_zero_size_parts(gk: KernelSet) -> None:
    parts = [np.full((i % 2, 3), i, dtype=np.float32) for i in range(301)]
    out = np.zeros((150, 3), dtype=np.float32)
    assert gk.gather_into(out, parts) == 150
    np.testing.assert_array_equal(out, np.concatenate(parts))
    assert gk.gather_into(out, []) == 0


def test_gather_takes_odd_parts_through_numpy(gk: KernelSet) -> None:
    class Sub(np.ndarray):
        pass

    base = np.arange(24, dtype=np.int32).reshape(6, 4)
    strided = base[::2]  # not contiguous
    sub = base[:1].view(Sub)
    swapped = base[:1].astype(">i4").astype(np.int32)  # same dtype, maybe another descr object
    out = np.zeros((8, 4), dtype=np.int32)
    assert gk.gather_into(out, [strided, sub, swapped, base[1:2]]) == 6
    np.testing.assert_array_equal(out[:6], np.concatenate([strided, sub, swapped, base[1:2]]))


def test_gather_object_dtype_keeps_references(gk: KernelSet) -> None:
    parts = [np.array([b"a"], dtype=object), np.array([b"bc", b""], dtype=object)]
    out = np.empty(3, dtype=object)
    assert gk.gather_into(out, parts) == 3
    assert out.tolist() == [b"a", b"bc", b""]


@pytest.mark.parametrize(
    "parts, message",
    [
        ([np.zeros((1, 3), np.float64)], "dtype"),
        ([np.zeros((1, 4), np.float32)], "shape"),
        ([np.zeros(3, np.float32)], "shape"),
        ([np.zeros((3, 3), np.float32), np.zeros((2, 3), np.float32)], "rows"),
        ([[1.0, 2.0, 3.0]], "ndarray"),
    ],
)
def test_gather_rejects_bad_parts_and_copies_nothing(
    gk: KernelSet, parts: list[Any], message: str
) -> None:
    out = np.full((4, 3), 5, dtype=np.float32)
    with pytest.raises(ValueError, match=message):
        gk.gather_into(out, parts)
    assert (out == 5).all()


def test_gather_rejects_bad_out(gk: KernelSet) -> None:
    parts = [np.zeros((1, 2), np.float32)]
    readonly = np.zeros((2, 2), np.float32)
    readonly.flags.writeable = False
    for out in (np.zeros((2, 4), np.float32)[:, ::2], readonly, np.float32(0)):
        with pytest.raises(ValueError):
            gk.gather_into(out, parts)  # type: ignore[arg-type]


# -- scatter ----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 4), max_size=10), spare=st.integers(0, 2))
def test_split_views_are_views(sizes: list[int], spare: int) -> None:
    buf = np.arange((sum(sizes) + spare) * 2, dtype=np.int64).reshape(-1, 2)
    for impl in _sets():
        views = impl.split_views(buf, sizes)
        start = 0
        for view, size in zip(views, sizes, strict=True):
            assert view.shape == (size, 2)
            np.testing.assert_array_equal(view, buf[start : start + size])
            assert size == 0 or np.shares_memory(view, buf)
            start += size


def test_split_views_rejects_bad_sizes(ks: KernelSet) -> None:
    buf = np.zeros((4, 2))
    with pytest.raises(ValueError):
        ks.split_views(buf, [2, -1])
    with pytest.raises(ValueError):
        ks.split_views(buf, [3, 2])


# -- BYTES ------------------------------------------------------------------------------------


def _ref_encode(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(x)) + x for x in items)


def _ref_decode(buf: bytes) -> list[bytes] | int:
    out, pos = [], 0
    while pos < len(buf):
        if len(buf) - pos < 4:
            return _plain.BYTES_TRUNCATED_PREFIX
        (n,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if n > len(buf) - pos:
            return _plain.BYTES_OVERRUN
        out.append(buf[pos : pos + n])
        pos += n
    return out


@settings(max_examples=80, deadline=None)
@given(items=st.lists(st.binary(max_size=20), max_size=12))
def test_bytes_roundtrip(items: list[bytes]) -> None:
    want = _ref_encode(items)
    for impl in _sets():
        encoded = impl.encode_bytes(items)
        assert encoded == want
        assert impl.decode_bytes(encoded).tolist() == items
        assert impl.decode_bytes(bytearray(encoded), len(items)).tolist() == items
        starts, lengths = impl.bytes_offsets(np.frombuffer(encoded, np.uint8))
        assert [encoded[s : s + n] for s, n in zip(starts, lengths, strict=True)] == items


@settings(max_examples=150, deadline=None)
@given(buf=st.binary(max_size=40) | st.lists(st.binary(max_size=6), max_size=5).map(_ref_encode))
def test_bytes_decode_matches_reference_on_any_buffer(buf: bytes) -> None:
    want = _ref_decode(buf)
    for impl in _sets():
        if isinstance(want, int):
            with pytest.raises(BytesFormatError) as info:
                impl.bytes_offsets(buf)
            assert info.value.code == want
        else:
            assert impl.decode_bytes(buf).tolist() == want


@pytest.mark.parametrize(
    "buf, count, code",
    [
        (b"\x01\x00\x00", None, _plain.BYTES_TRUNCATED_PREFIX),
        (b"\x05\x00\x00\x00abc", None, _plain.BYTES_OVERRUN),
        (b"\xff\xff\xff\xffabc", None, _plain.BYTES_OVERRUN),
        (b"\x01\x00\x00\x00a\x00\x00", None, _plain.BYTES_TRUNCATED_PREFIX),
        (b"\x01\x00\x00\x00a", 2, _plain.BYTES_COUNT_MISMATCH),
        (b"\x01\x00\x00\x00a\x00\x00\x00\x00", 1, _plain.BYTES_COUNT_MISMATCH),
        (b"", 1, _plain.BYTES_COUNT_MISMATCH),
    ],
)
def test_bytes_malformed(ks: KernelSet, buf: bytes, count: int | None, code: int) -> None:
    with pytest.raises(BytesFormatError) as info:
        ks.bytes_offsets(buf, count)
    assert info.value.code == code
    assert isinstance(info.value, ValueError) and info.value.message


def test_bytes_empty_tensor(ks: KernelSet) -> None:
    assert ks.encode_bytes([]) == b""
    starts, lengths = ks.bytes_offsets(b"", 0)
    assert starts.size == 0 and lengths.size == 0
    assert ks.decode_bytes(b"").shape == (0,)


def test_encode_bytes_accepts_arrays_and_text(ks: KernelSet) -> None:
    obj = np.array([[b"a", "é"], [bytearray(b"xy"), 7]], dtype=object)
    assert ks.encode_bytes(obj) == _ref_encode([b"a", "é".encode(), b"xy", b"7"])
    fixed = np.array([b"ab", b"c"], dtype="S2")
    assert ks.encode_bytes(fixed) == _ref_encode([b"ab", b"c"])
    assert ks.encode_bytes(np.array(["hi"])) == _ref_encode([b"hi"])


class _Ticker:
    """A thread that counts while it holds the GIL, letting it go after each count: its count
    moves while the caller is inside a call only if that call let the GIL go."""

    def __init__(self) -> None:
        self.count = 0
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop:
            self.count += 1
            time.sleep(0)


@contextlib.contextmanager
def _ticking() -> Iterator[_Ticker]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(10.0)  # no forced switch: the ticker runs only where the GIL is let go
    ticker = _Ticker()
    ticker.thread.start()
    try:
        while ticker.count == 0:
            time.sleep(0.001)
        yield ticker
    finally:
        ticker.stop = True
        sys.setswitchinterval(old)
        ticker.thread.join()


def test_small_calls_hold_the_gil_and_big_gathers_let_it_go() -> None:
    """A request-sized gather (a dynamic batch of small tensors) and the batch's split hold the
    GIL: an instance thread that let it go would wait behind the event loop to take it back. A
    gather of ``GATHER_NOGIL_MIN`` bytes or more lets it go, so the loop runs meanwhile."""
    from tritonlite.kernels.api import GATHER_NOGIL_MIN

    ks = _numba()
    ks.warmup()
    width = 1024
    small = np.empty((16, width), np.float32)
    assert small.nbytes < GATHER_NOGIL_MIN
    small_parts = [np.ones((1, width), np.float32) for _ in range(16)]
    rows = GATHER_NOGIL_MIN // (4 * width) * 64  # 64 x the threshold: milliseconds of copying
    big = np.empty((rows, width), np.float32)
    big_parts = [np.ones((rows // 4, width), np.float32) for _ in range(4)]
    with _ticking() as ticker:
        before = ticker.count
        for _ in range(200):
            ks.gather_into(small, small_parts)
            ks.split_views(small, [1] * 16)
            ks.shape_prefix_len(np.zeros((16, 2), np.int64))
        held = ticker.count - before
        before = ticker.count
        for _ in range(50):  # (until the ticker got a CPU while a copy let the GIL go)
            ks.gather_into(big, big_parts)
            if ticker.count != before:
                break
        moved = ticker.count - before
    assert held == 0
    assert moved > 0
    np.testing.assert_array_equal(big, 1.0)
    np.testing.assert_array_equal(small, 1.0)
