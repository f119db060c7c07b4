"""HPACK (RFC 7541): the same tests on the pure and the compiled twin.

The RFC's Appendix C examples byte for byte; property tests with the ``hpack`` package as the
oracle in both directions (dynamic table state carried over a sequence of blocks); malformed
blocks, a seeded fuzz run and an HPACK bomb, where only ``HpackError`` may escape.
"""

from __future__ import annotations

import os
import random
import time
from types import ModuleType
from typing import Any

import hpack as oracle
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritonlite.frontends.wire import _hpack_py, hpack
from tritonlite.frontends.wire._hpack_py import HeaderListTooLarge, HpackError

REQUIRE = os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"


def _compiled_module() -> ModuleType | None:
    try:
        from tritonlite.frontends.wire import _hpack_c
    except ImportError as exc:
        if REQUIRE:
            raise AssertionError(
                "TRITONLITE_REQUIRE_EXTENSIONS=1 but _hpack_c is not built"
            ) from exc
        return None
    return _hpack_c


COMPILED = _compiled_module()
NOT_BUILT = "compiled twin tritonlite.frontends.wire._hpack_c is not built (pip install -e .)"


@pytest.fixture(params=["pure", "compiled"])
def H(request: pytest.FixtureRequest) -> Any:
    if request.param == "pure":
        return _hpack_py
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    return COMPILED


def test_twins_are_what_they_claim() -> None:
    assert _hpack_py.COMPILED is False
    assert hpack.HpackError is HpackError and hpack.HeaderListTooLarge is HeaderListTooLarge
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    assert COMPILED.COMPILED is True
    assert COMPILED.__file__ != _hpack_py.__file__
    # one exception class for both builds, so the H2 layer's except clauses catch either
    assert COMPILED.HpackError is HpackError
    assert COMPILED.HeaderListTooLarge is HeaderListTooLarge
    if os.environ.get("TRITONLITE_NO_EXTENSIONS") != "1":
        assert hpack.Decoder is COMPILED.Decoder and hpack.ACCELERATED
        assert "compiled" in hpack.describe()


def _hex(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


# --- RFC 7541 Appendix C ---------------------------------------------------------------------

REQUESTS = [
    [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
    ],
    [
        (b":method", b"GET"),
        (b":scheme", b"http"),
        (b":path", b"/"),
        (b":authority", b"www.example.com"),
        (b"cache-control", b"no-cache"),
    ],
    [
        (b":method", b"GET"),
        (b":scheme", b"https"),
        (b":path", b"/index.html"),
        (b":authority", b"www.example.com"),
        (b"custom-key", b"custom-value"),
    ],
]
REQUEST_TABLE_SIZES = [57, 110, 164]
C3 = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
]
C4 = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
]
_DATE1 = b"Mon, 21 Oct 2013 20:13:21 GMT"
_DATE2 = b"Mon, 21 Oct 2013 20:13:22 GMT"
_LOC = b"https://www.example.com"
_COOKIE = b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
RESPONSES = [
    [(b":status", b"302"), (b"cache-control", b"private"), (b"date", _DATE1), (b"location", _LOC)],
    [(b":status", b"307"), (b"cache-control", b"private"), (b"date", _DATE1), (b"location", _LOC)],
    [
        (b":status", b"200"),
        (b"cache-control", b"private"),
        (b"date", _DATE2),
        (b"location", _LOC),
        (b"content-encoding", b"gzip"),
        (b"set-cookie", _COOKIE),
    ],
]
RESPONSE_TABLE_SIZES = [222, 222, 215]
C5 = [
    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133"
    "2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70"
    "6c65 2e63 6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d"
    "54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049"
    "5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e"
    "3d31",
]
C6 = [
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6"
    "2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab"
    "77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f"
    "9587 3160 65c0 03ed 4ee5 b106 3d50 07",
]


@pytest.mark.parametrize(
    ("block", "header", "table_size", "encoder_kwargs"),
    [
        # C.2.1 literal with indexing, C.2.2 without indexing, C.2.3 never indexed, C.2.4 indexed
        (
            "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
            (b"custom-key", b"custom-header"),
            55,
            {},
        ),
        (
            "040c 2f73 616d 706c 652f 7061 7468",
            (b":path", b"/sample/path"),
            0,
            {"unindexed_names": frozenset([b":path"])},
        ),
        (
            "1008 7061 7373 776f 7264 0673 6563 7265 74",
            (b"password", b"secret"),
            0,
            {"sensitive_names": frozenset([b"password"])},
        ),
        ("82", (b":method", b"GET"), 0, {}),
    ],
    ids=["C.2.1", "C.2.2", "C.2.3", "C.2.4"],
)
def test_rfc_c2_literal_and_indexed_fields(
    H: Any, block: str, header: tuple[bytes, bytes], table_size: int, encoder_kwargs: Any
) -> None:
    d = H.Decoder()
    assert d.decode(_hex(block)) == [header]
    assert d.table_size == table_size
    e = H.Encoder(**encoder_kwargs)
    assert e.encode([header], huffman=False) == _hex(block)
    assert e.table_size == table_size


@pytest.mark.parametrize(
    ("blocks", "huffman", "lists", "sizes", "table"),
    [
        (C3, False, REQUESTS, REQUEST_TABLE_SIZES, 4096),
        (C4, True, REQUESTS, REQUEST_TABLE_SIZES, 4096),
        (C5, False, RESPONSES, RESPONSE_TABLE_SIZES, 256),
        (C6, True, RESPONSES, RESPONSE_TABLE_SIZES, 256),
    ],
    ids=["C.3", "C.4", "C.5", "C.6"],
)
def test_rfc_c3_to_c6_sequences_byte_for_byte(
    H: Any, blocks: list[str], huffman: bool, lists: Any, sizes: list[int], table: int
) -> None:
    d = H.Decoder(max_table_size=table)
    e = H.Encoder(max_table_size=table, unindexed_names=frozenset())
    for block, headers, size in zip(blocks, lists, sizes):
        assert d.decode(_hex(block)) == headers
        assert d.table_size == size
        assert e.encode(headers, huffman=huffman) == _hex(block)
        assert e.table_size == size


# --- integers, strings, table sizes ----------------------------------------------------------


def _int(value: int, prefix: int, flags: int = 0) -> bytes:
    """An HPACK integer, written from RFC 7541 5.1's pseudo-code (independent of the twins)."""
    mask = (1 << prefix) - 1
    if value < mask:
        return bytes([flags | value])
    out = [flags | mask]
    value -= mask
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def test_rfc_c1_integers_through_size_updates(H: Any) -> None:
    # C.1.2: 1337 with a 5-bit prefix is 1f 9a 0a; a size update has a 5-bit prefix
    assert _int(1337, 5, 0x20) == b"\x3f\x9a\x0a"
    d = H.Decoder(max_table_size=2000)
    assert d.decode(b"\x3f\x9a\x0a\x82") == [(b":method", b"GET")]
    assert d.table_capacity == 1337
    # redundant zero continuation bytes within the limit are still one integer
    assert d.decode(b"\x3f\x80\x80\x00\x82") == [(b":method", b"GET")]
    assert d.table_capacity == 31


def test_decode_accepts_bytearray_and_memoryview(H: Any) -> None:
    block = _hex(C4[0])
    assert H.Decoder().decode(bytearray(block)) == REQUESTS[0]
    assert H.Decoder().decode(memoryview(b"xx" + block)[2:]) == REQUESTS[0]
    assert H.Decoder().decode(b"") == []


def test_eviction_and_oversized_entry(H: Any) -> None:
    d = H.Decoder(max_table_size=100)
    d.decode(b"\x3f\x45")  # size update to 100
    d.decode(b"\x40\x01a\x01b")  # 34 bytes
    d.decode(b"\x40\x01c\x01d")  # 68
    d.decode(b"\x40\x01e\x01f")  # 102 > 100: a:b is evicted
    assert d.table_size == 68
    assert d.decode(b"\xbe\xbf") == [(b"e", b"f"), (b"c", b"d")]
    with pytest.raises(HpackError):
        d.decode(b"\xc0")
    # an entry larger than the table empties it (RFC 7541 4.4)
    d.decode(b"\x40\x01x\x7f\x00" + b"y" * 127)
    assert d.table_size == 0
    with pytest.raises(HpackError):
        d.decode(b"\xbe")


def test_size_updates(H: Any) -> None:
    d = H.Decoder()
    d.decode(_hex(C3[0]))
    d.decode(b"\x20\x3f\xe1\x1f")  # two updates at the start: 0 (empties), then 4096
    assert d.table_size == 0 and d.table_capacity == 4096
    # lowering our setting below the table's size makes an update required
    d.decode(_hex(C3[0]))
    d.max_table_size = 100
    with pytest.raises(HpackError, match="required"):
        d.decode(b"\x82")
    assert d.decode(b"\x3f\x45\x82") == [(b":method", b"GET")]
    assert d.table_capacity == 100 and d.table_size == 57
    with pytest.raises(HpackError, match="exceeds the maximum"):
        d.decode(b"\x3f\x46")
    # raising it needs no update
    d.max_table_size = 4096
    assert d.decode(b"\x82") == [(b":method", b"GET")]


def test_encoder_signals_table_size_changes(H: Any) -> None:
    e = H.Encoder()
    e.encode([(b"x-a", b"1")])
    assert e.table_size == 36
    e.set_max_table_size(0)
    e.set_max_table_size(100)
    assert e.table_size == 0
    # the smallest size since the last block, then the final one (RFC 7541 4.2)
    assert e.encode([(b":method", b"GET")]) == b"\x20\x3f\x45\x82"
    assert e.encode([(b":method", b"GET")]) == b"\x82"
    # above the constructor's bound the table stays where it is: nothing to signal
    e2 = H.Encoder(max_table_size=4096)
    e2.set_max_table_size(65536)
    assert e2.encode([(b":method", b"GET")]) == b"\x82"
    e3 = H.Encoder(max_table_size=8192)
    e3.set_max_table_size(65536)
    assert e3.encode([]) == _int(8192, 5, 0x20)
    ref = oracle.Decoder()
    ref.max_allowed_table_size = 65536
    assert ref.decode(_int(8192, 5, 0x20)) == []


def test_encoder_indexes_grpc_response_fields(H: Any) -> None:
    e = H.Encoder()
    ours = H.Decoder()
    ref = oracle.Decoder()
    headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
    trailers = [(b"grpc-status", b"0")]
    error = [(b"grpc-status", b"3"), (b"grpc-message", b"unexpected inference input 'x'")]
    sizes = []
    for fields in [headers, trailers, headers, trailers, error, error]:
        block = e.encode(fields)
        sizes.append(len(block))
        assert ours.decode(block) == fields
        assert [tuple(h) for h in ref.decode(block, raw=True)] == fields
    # from the second call on: :status 200 (static) + content-type (dynamic), grpc-status 0
    assert sizes[2:4] == [2, 1]
    # grpc-message changes per call, so it is never indexed: a literal every time
    assert sizes[5] == sizes[4] - 2  # only "grpc-status: 3" (3 bytes) became an index
    assert ours.table_size == ref.header_table._current_size == e.table_size


def test_huffman_only_when_not_longer(H: Any) -> None:
    e = H.Encoder()
    # bytes >= 0x80 take 19-30 bits each: raw is shorter
    raw = bytes(range(200, 216))
    block = e.encode([(b"x-raw", raw)])
    assert block[:2] == b"\x40\x84"  # the name: Huffman, 4 bytes instead of 5
    assert block[6:] == b"\x10" + raw  # the value: raw
    assert oracle.Decoder().decode(block, raw=True) == [(b"x-raw", raw)]
    assert H.Decoder().decode(H.Encoder().encode([(b"x-raw", raw)], huffman=False)) == [
        (b"x-raw", raw)
    ]


# --- header list size and the HPACK bomb -----------------------------------------------------


def test_header_list_size_limit_is_inclusive(H: Any) -> None:
    headers = [(b"x-a", b"1" * 61)]  # 3 + 61 + 32 = 96
    block = oracle.Encoder().encode(headers)
    assert H.Decoder(max_header_list_size=96).decode(block) == headers
    with pytest.raises(HeaderListTooLarge):
        H.Decoder(max_header_list_size=95).decode(block)


def test_hpack_bomb_stops_at_max_header_list_size(H: Any) -> None:
    refs = 20000
    value = b"v" * 4096
    block = _int(8192, 5, 0x20) + b"\x40\x05x-big" + _int(len(value), 7) + value + b"\xbe" * refs
    d = H.Decoder(max_table_size=8192)
    t0 = time.monotonic()
    with pytest.raises(HeaderListTooLarge):
        d.decode(block)
    # the 80 MiB list is never built: the time is that of reading ~24 KB
    assert time.monotonic() - t0 < 2.0
    # the block was read to its end, so the table is still in step with the peer's encoder
    assert d.decode(b"\xbe") == [(b"x-big", value)]
    assert d.table_size == 4096 + 5 + 32


# --- malformed blocks ------------------------------------------------------------------------

MALFORMED = [
    ("truncated integer", b"\xff"),
    ("truncated continuation", b"\xff\x80\x80"),
    ("integer too long", b"\xff" + b"\x80" * 5 + b"\x01"),
    ("integer too large", b"\xff" + b"\xff" * 4 + b"\x0f"),
    # a fifth digit that overflows a 32-bit C int (found by the fuzz test: a negative size)
    ("size update with a high fifth digit", b"\x3f\x8f\xe2\xff\x95\x0d"),
    ("index with a high fifth digit", b"\xff\x8f\xe2\xff\x95\x0d"),
    ("index 0", b"\x80"),
    ("index 0 after a field", b"\x82\x80"),
    ("index past the static table", b"\xbe"),
    ("index far past", b"\xff\xff\xff\xff\x0f"),
    ("literal name index past the table", b"\x7e\x01a"),
    ("literal name index 0 for no-index", b"\x0f\x30\x01a"),
    ("size update above max", _int(4097, 5, 0x20)),
    ("size update after a field", b"\x82\x20"),
    ("size update at the end", b"\x82\x3f\xe1\x1f"),
    ("string length past the end", b"\x40\x05abc"),
    ("value length past the end", b"\x00\x01a\x05ab"),
    ("huffman length past the end", b"\x41\x85\x1f"),
    ("missing name", b"\x40"),
    ("missing value", b"\x41"),
    ("missing value after name", b"\x00\x01a"),
    ("huffman padding of zeros", b"\x41\x81\x18"),
    ("huffman padding longer than 7 bits", b"\x41\x82\x1f\xff"),
    ("huffman EOS", b"\x41\x84\xff\xff\xff\xff"),
    ("huffman EOS then symbol", b"\x41\x85\xff\xff\xff\xfc\x1f"),
    ("huffman all-ones byte only", b"\x41\x81\xff"),
]


@pytest.mark.parametrize("block", [b for _, b in MALFORMED], ids=[n for n, _ in MALFORMED])
def test_malformed_blocks_raise_hpack_error(H: Any, block: bytes) -> None:
    d = H.Decoder()
    with pytest.raises(HpackError) as info:
        d.decode(block)
    assert type(info.value) is HpackError
    # the oracle agrees that these are not valid blocks
    with pytest.raises(oracle.HPACKError):
        oracle.Decoder().decode(block, raw=True)


def test_valid_huffman_edge_cases(H: Any) -> None:
    d = H.Decoder()
    assert d.decode(b"\x41\x80") == [(b":authority", b"")]  # empty Huffman string
    assert d.decode(b"\x41\x81\x1f") == [(b":authority", b"a")]  # 5 bits + 3 bits of padding
    # a 30-bit code (byte 10) padded with 2 ones
    assert d.decode(b"\x41\x84" + _hex("ffff fff3")) == [(b":authority", b"\n")]


# --- property tests against the hpack package ------------------------------------------------

NAMES = st.one_of(
    st.sampled_from([n for n, _ in _hpack_py.STATIC_TABLE]),
    st.sampled_from([b"x-a", b"x-b", b"grpc-status", b"grpc-timeout", b"te", b"grpc-message"]),
    st.binary(min_size=1, max_size=12).map(lambda b: bytes(c | 0x20 for c in b)),
)
VALUES = st.one_of(
    st.sampled_from([v for _, v in _hpack_py.STATIC_TABLE] + [b"0", b"application/grpc"]),
    st.binary(max_size=64),
    st.text(max_size=40).map(lambda s: s.encode()),
)
FIELDS = st.tuples(NAMES, VALUES)
BLOCKS = st.lists(
    st.tuples(
        st.lists(FIELDS, max_size=12),
        st.booleans(),
        st.one_of(st.none(), st.sampled_from([0, 64, 256, 1024, 4096])),
    ),
    min_size=1,
    max_size=8,
)
PROPERTY = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@PROPERTY
@given(blocks=BLOCKS, sensitive=st.booleans())
def test_oracle_encoder_to_our_decoder(H: Any, blocks: Any, sensitive: bool) -> None:
    enc = oracle.Encoder()
    dec = H.Decoder()
    for headers, huffman, table_size in blocks:
        if table_size is not None:
            enc.header_table_size = table_size
        fields = [
            oracle.NeverIndexedHeaderTuple(n, v) if sensitive and i % 3 == 0 else (n, v)
            for i, (n, v) in enumerate(headers)
        ]
        block = enc.encode(fields, huffman=huffman)
        assert dec.decode(block) == headers
        assert dec.table_size == enc.header_table._current_size


@PROPERTY
@given(blocks=BLOCKS)
def test_our_encoder_to_oracle_decoder(H: Any, blocks: Any) -> None:
    enc = H.Encoder()
    ref = oracle.Decoder()
    ours = H.Decoder()
    for headers, huffman, table_size in blocks:
        if table_size is not None:
            enc.set_max_table_size(table_size)
        block = enc.encode(headers, huffman=huffman)
        assert [tuple(h) for h in ref.decode(block, raw=True)] == headers
        assert ours.decode(block) == headers
        assert enc.table_size == ref.header_table._current_size == ours.table_size


# --- fuzzing ---------------------------------------------------------------------------------


def _fuzz_blocks(seed: int) -> Any:
    """Valid blocks from the oracle, then mutated ones and random bytes (an endless stream)."""
    rng = random.Random(seed)
    names = [n for n, _ in _hpack_py.STATIC_TABLE] + [b"x-a", b"grpc-status", b"x-custom-name"]
    enc = oracle.Encoder()
    while True:
        headers = [
            (rng.choice(names), rng.randbytes(rng.randrange(0, 24)))
            for _ in range(rng.randrange(0, 6))
        ]
        block = bytearray(enc.encode(headers, huffman=rng.random() < 0.7))
        kind = rng.randrange(6)
        if kind == 0:
            yield bytes(block)
            continue
        if kind == 1:
            yield rng.randbytes(rng.randrange(0, 32))
            continue
        for _ in range(rng.randrange(1, 4)):
            if not block:
                break
            i = rng.randrange(len(block))
            op = rng.randrange(4)
            if op == 0:
                block[i] ^= 1 << rng.randrange(8)
            elif op == 1:
                block[i] = rng.randrange(256)
            elif op == 2:
                del block[i:]
            else:
                block[i:i] = rng.randbytes(rng.randrange(1, 4))
        yield bytes(block)


def _outcome(decoder: Any, block: bytes) -> Any:
    try:
        return decoder.decode(block)
    except HeaderListTooLarge:
        return "too large"
    except HpackError:
        return "error"


def test_fuzz_only_hpack_error_escapes(H: Any) -> None:
    budget_s = 5.0  # past the minimum; pytest's timeout bounds a very slow machine
    minimum = 20000
    deadline = time.monotonic() + budget_s
    decoder = H.Decoder(max_header_list_size=256)
    fresh = 0
    n = 0
    seen = {"ok": 0, "error": 0, "too large": 0}
    for block in _fuzz_blocks(seed=7541):
        if fresh == 0:
            decoder = H.Decoder(max_header_list_size=256)
            fresh = 50  # carry table state across some blocks, then start over
        fresh -= 1
        out = _outcome(decoder, block)
        seen[out if isinstance(out, str) else "ok"] += 1
        n += 1
        if n >= minimum and (n >= 60000 or time.monotonic() > deadline):
            break
    assert n >= minimum
    assert min(seen.values()) > 0, seen


def test_fuzz_twins_agree() -> None:
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    pure = _hpack_py.Decoder(max_header_list_size=256)
    comp = COMPILED.Decoder(max_header_list_size=256)
    stream = _fuzz_blocks(seed=20)
    for i in range(5000):
        if i % 40 == 0:
            pure = _hpack_py.Decoder(max_header_list_size=256)
            comp = COMPILED.Decoder(max_header_list_size=256)
        block = next(stream)
        assert _outcome(pure, block) == _outcome(comp, block), block.hex()
        assert pure.table_size == comp.table_size
