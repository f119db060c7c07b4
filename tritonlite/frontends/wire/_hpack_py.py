# cython: language_level=3, annotation_typing=False, boundscheck=False, wraparound=False
"""HPACK (RFC 7541): header compression for HTTP/2, with the dynamic table and Huffman coding.

This file is the single source of two builds. Run as Python it is ``_hpack_py``; setup.py
compiles the same file with Cython into ``tritonlite.frontends.wire._hpack_c``, taking its C
types from ``_hpack_c.pxd`` beside it. Only ``wire/hpack.py`` chooses between the two.

The inner loops read ``bytes`` through an index (a ``const unsigned char*`` once compiled) and
write into a ``bytearray``, so the compiled build runs them without Python objects.

Errors: every malformed block raises ``HpackError`` (HTTP/2 COMPRESSION_ERROR, a connection
error) and nothing else. A block whose decoded list exceeds ``max_header_list_size`` (RFC 9113
6.5.2: name + value + 32 per field) raises ``HeaderListTooLarge`` once the whole block has been
read: the fields past the limit are never collected, but the dynamic table stays in step with
the peer's encoder (RFC 9113 10.5.1), so the connection may go on (with a 431 or a stream
reset for that request).

Over 500 lines, one module: most of it is RFC 7541's data (the static table and the 257-symbol
Huffman code), and the encoder and decoder are compiled into one extension that reads those tables
as C arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    import cython
except ImportError:  # Cython is a build-time dependency; the pure twin runs without it

    class _CythonShim:
        compiled = False

    cython = _CythonShim()

COMPILED: bool = bool(cython.compiled)

if TYPE_CHECKING or not cython.compiled:

    class HpackError(Exception):
        """A malformed header block: HTTP/2 COMPRESSION_ERROR (a connection error)."""

    class HeaderListTooLarge(HpackError):  # noqa: N818 - the name is the H2 layer's API
        """The decoded header list exceeds ``max_header_list_size`` (RFC 9113 6.5.2 size)."""

else:
    # One exception class for both twins, so a caller's except clause catches either build.
    from tritonlite.frontends.wire._hpack_py import HeaderListTooLarge, HpackError


__all__ = [
    "COMPILED",
    "DEFAULT_SENSITIVE_NAMES",
    "DEFAULT_UNINDEXED_NAMES",
    "STATIC_TABLE",
    "Decoder",
    "Encoder",
    "HeaderListTooLarge",
    "HpackError",
]

# The protocol's initial dynamic table size (SETTINGS_HEADER_TABLE_SIZE's initial value).
DEFAULT_TABLE_SIZE = 4096
# Integers on the wire stay below 2**32 and take at most 5 continuation bytes (7 bits each).
_INT_MAX = 0xFFFFFFFF
_INT_MAX_SHIFT = 35
# Huffman decoder transition flags; integer values are used so they can be cythonized
_HD_EMIT = 1
_HD_FAIL = 2

# RFC 7541 Appendix A.
STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)

_STATIC = STATIC_TABLE
_STATIC_FULL: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAME: dict[bytes, int] = {}
for _i, _entry in enumerate(STATIC_TABLE, 1):
    _STATIC_FULL.setdefault(_entry, _i)
    _STATIC_NAME.setdefault(_entry[0], _i)

# Fields whose values change from message to message: indexing them only evicts useful entries.
DEFAULT_UNINDEXED_NAMES = frozenset(
    (
        b"content-length",
        b"date",
        b"grpc-timeout",
        b"grpc-message",
        b"etag",
        b"last-modified",
        b"age",
        b"expires",
    )
)
# Fields an intermediary must never index either (RFC 7541 7.1.3).
DEFAULT_SENSITIVE_NAMES = frozenset((b"authorization", b"proxy-authorization"))

# RFC 7541 Appendix B: the code (right-aligned) and bit length of each symbol; 256 is EOS.
_HUFFMAN_CODES = (
    0x1FF8,
    0x7FFFD8,
    0xFFFFFE2,
    0xFFFFFE3,
    0xFFFFFE4,
    0xFFFFFE5,
    0xFFFFFE6,
    0xFFFFFE7,
    0xFFFFFE8,
    0xFFFFEA,
    0x3FFFFFFC,
    0xFFFFFE9,
    0xFFFFFEA,
    0x3FFFFFFD,
    0xFFFFFEB,
    0xFFFFFEC,
    0xFFFFFED,
    0xFFFFFEE,
    0xFFFFFEF,
    0xFFFFFF0,
    0xFFFFFF1,
    0xFFFFFF2,
    0x3FFFFFFE,
    0xFFFFFF3,
    0xFFFFFF4,
    0xFFFFFF5,
    0xFFFFFF6,
    0xFFFFFF7,
    0xFFFFFF8,
    0xFFFFFF9,
    0xFFFFFFA,
    0xFFFFFFB,
    0x14,
    0x3F8,
    0x3F9,
    0xFFA,
    0x1FF9,
    0x15,
    0xF8,
    0x7FA,
    0x3FA,
    0x3FB,
    0xF9,
    0x7FB,
    0xFA,
    0x16,
    0x17,
    0x18,
    0x0,
    0x1,
    0x2,
    0x19,
    0x1A,
    0x1B,
    0x1C,
    0x1D,
    0x1E,
    0x1F,
    0x5C,
    0xFB,
    0x7FFC,
    0x20,
    0xFFB,
    0x3FC,
    0x1FFA,
    0x21,
    0x5D,
    0x5E,
    0x5F,
    0x60,
    0x61,
    0x62,
    0x63,
    0x64,
    0x65,
    0x66,
    0x67,
    0x68,
    0x69,
    0x6A,
    0x6B,
    0x6C,
    0x6D,
    0x6E,
    0x6F,
    0x70,
    0x71,
    0x72,
    0xFC,
    0x73,
    0xFD,
    0x1FFB,
    0x7FFF0,
    0x1FFC,
    0x3FFC,
    0x22,
    0x7FFD,
    0x3,
    0x23,
    0x4,
    0x24,
    0x5,
    0x25,
    0x26,
    0x27,
    0x6,
    0x74,
    0x75,
    0x28,
    0x29,
    0x2A,
    0x7,
    0x2B,
    0x76,
    0x2C,
    0x8,
    0x9,
    0x2D,
    0x77,
    0x78,
    0x79,
    0x7A,
    0x7B,
    0x7FFE,
    0x7FC,
    0x3FFD,
    0x1FFD,
    0xFFFFFFC,
    0xFFFE6,
    0x3FFFD2,
    0xFFFE7,
    0xFFFE8,
    0x3FFFD3,
    0x3FFFD4,
    0x3FFFD5,
    0x7FFFD9,
    0x3FFFD6,
    0x7FFFDA,
    0x7FFFDB,
    0x7FFFDC,
    0x7FFFDD,
    0x7FFFDE,
    0xFFFFEB,
    0x7FFFDF,
    0xFFFFEC,
    0xFFFFED,
    0x3FFFD7,
    0x7FFFE0,
    0xFFFFEE,
    0x7FFFE1,
    0x7FFFE2,
    0x7FFFE3,
    0x7FFFE4,
    0x1FFFDC,
    0x3FFFD8,
    0x7FFFE5,
    0x3FFFD9,
    0x7FFFE6,
    0x7FFFE7,
    0xFFFFEF,
    0x3FFFDA,
    0x1FFFDD,
    0xFFFE9,
    0x3FFFDB,
    0x3FFFDC,
    0x7FFFE8,
    0x7FFFE9,
    0x1FFFDE,
    0x7FFFEA,
    0x3FFFDD,
    0x3FFFDE,
    0xFFFFF0,
    0x1FFFDF,
    0x3FFFDF,
    0x7FFFEB,
    0x7FFFEC,
    0x1FFFE0,
    0x1FFFE1,
    0x3FFFE0,
    0x1FFFE2,
    0x7FFFED,
    0x3FFFE1,
    0x7FFFEE,
    0x7FFFEF,
    0xFFFEA,
    0x3FFFE2,
    0x3FFFE3,
    0x3FFFE4,
    0x7FFFF0,
    0x3FFFE5,
    0x3FFFE6,
    0x7FFFF1,
    0x3FFFFE0,
    0x3FFFFE1,
    0xFFFEB,
    0x7FFF1,
    0x3FFFE7,
    0x7FFFF2,
    0x3FFFE8,
    0x1FFFFEC,
    0x3FFFFE2,
    0x3FFFFE3,
    0x3FFFFE4,
    0x7FFFFDE,
    0x7FFFFDF,
    0x3FFFFE5,
    0xFFFFF1,
    0x1FFFFED,
    0x7FFF2,
    0x1FFFE3,
    0x3FFFFE6,
    0x7FFFFE0,
    0x7FFFFE1,
    0x3FFFFE7,
    0x7FFFFE2,
    0xFFFFF2,
    0x1FFFE4,
    0x1FFFE5,
    0x3FFFFE8,
    0x3FFFFE9,
    0xFFFFFFD,
    0x7FFFFE3,
    0x7FFFFE4,
    0x7FFFFE5,
    0xFFFEC,
    0xFFFFF3,
    0xFFFED,
    0x1FFFE6,
    0x3FFFE9,
    0x1FFFE7,
    0x1FFFE8,
    0x7FFFF3,
    0x3FFFEA,
    0x3FFFEB,
    0x1FFFFEE,
    0x1FFFFEF,
    0xFFFFF4,
    0xFFFFF5,
    0x3FFFFEA,
    0x7FFFF4,
    0x3FFFFEB,
    0x7FFFFE6,
    0x3FFFFEC,
    0x3FFFFED,
    0x7FFFFE7,
    0x7FFFFE8,
    0x7FFFFE9,
    0x7FFFFEA,
    0x7FFFFEB,
    0xFFFFFFE,
    0x7FFFFEC,
    0x7FFFFED,
    0x7FFFFEE,
    0x7FFFFEF,
    0x7FFFFF0,
    0x3FFFFEE,
    0x3FFFFFFF,
)
_HUFFMAN_LENGTHS = (
    13,
    23,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    24,
    30,
    28,
    28,
    30,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    30,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    28,
    6,
    10,
    10,
    12,
    13,
    6,
    8,
    11,
    10,
    10,
    8,
    11,
    8,
    6,
    6,
    6,
    5,
    5,
    5,
    6,
    6,
    6,
    6,
    6,
    6,
    6,
    7,
    8,
    15,
    6,
    12,
    10,
    13,
    6,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    7,
    8,
    7,
    8,
    13,
    19,
    13,
    14,
    6,
    15,
    5,
    6,
    5,
    6,
    5,
    6,
    6,
    6,
    5,
    7,
    7,
    6,
    6,
    6,
    5,
    6,
    7,
    6,
    5,
    5,
    6,
    7,
    7,
    7,
    7,
    7,
    15,
    11,
    14,
    13,
    28,
    20,
    22,
    20,
    20,
    22,
    22,
    22,
    23,
    22,
    23,
    23,
    23,
    23,
    23,
    24,
    23,
    24,
    24,
    22,
    23,
    24,
    23,
    23,
    23,
    23,
    21,
    22,
    23,
    22,
    23,
    23,
    24,
    22,
    21,
    20,
    22,
    22,
    23,
    23,
    21,
    23,
    22,
    22,
    24,
    21,
    22,
    23,
    23,
    21,
    21,
    22,
    21,
    23,
    22,
    23,
    23,
    20,
    22,
    22,
    22,
    23,
    22,
    22,
    23,
    26,
    26,
    20,
    19,
    22,
    23,
    22,
    25,
    26,
    26,
    26,
    27,
    27,
    26,
    24,
    25,
    19,
    21,
    26,
    27,
    27,
    26,
    27,
    24,
    21,
    21,
    26,
    26,
    28,
    27,
    27,
    27,
    20,
    24,
    20,
    21,
    22,
    21,
    21,
    23,
    22,
    22,
    25,
    25,
    24,
    24,
    26,
    23,
    26,
    27,
    26,
    26,
    27,
    27,
    27,
    27,
    27,
    28,
    27,
    27,
    27,
    27,
    27,
    26,
    30,
)


def _build_encode_tables() -> tuple[bytes, bytes]:
    """Codes as 4 big-endian bytes per symbol, and lengths as one byte per symbol (0-255)."""
    codes = b"".join(code.to_bytes(4, "big") for code in _HUFFMAN_CODES[:256])
    return codes, bytes(_HUFFMAN_LENGTHS[:256])


def _build_decode_tables() -> tuple[bytes, bytes, bytes, bytes]:
    """A 4-bit state machine over the Huffman tree (nghttp2's scheme).

    States are the tree's 256 inner nodes (0 is the root). For ``state * 16 + nibble`` the
    tables give the next state, the flags (``_HD_EMIT``: a symbol was completed; ``_HD_FAIL``:
    EOS was decoded) and the symbol. A nibble completes at most one symbol because the
    shortest code has 5 bits. ``accept[state]`` says the bits read since the last symbol are
    valid padding: at most 7 bits, all ones (a prefix of EOS).
    """
    zero: list[int | None] = [None]
    one: list[int | None] = [None]
    # children: >= 0 an inner node, < 0 the leaf of symbol -(child + 1)
    for sym in range(257):
        code, length = _HUFFMAN_CODES[sym], _HUFFMAN_LENGTHS[sym]
        node = 0
        for shift in range(length - 1, -1, -1):
            side = one if (code >> shift) & 1 else zero
            if shift == 0:
                assert side[node] is None
                side[node] = -(sym + 1)
            else:
                child = side[node]
                if child is None:
                    child = len(zero)
                    zero.append(None)
                    one.append(None)
                    side[node] = child
                assert child >= 0
                node = child
    assert len(zero) == 256 and None not in zero and None not in one
    nxt = bytearray(256 * 16)
    flags = bytearray(256 * 16)
    syms = bytearray(256 * 16)
    for state in range(256):
        for nibble in range(16):
            node, flag, out = state, 0, 0
            for shift in (3, 2, 1, 0):
                side = one if (nibble >> shift) & 1 else zero
                child = side[node]
                assert child is not None
                if child >= 0:
                    node = child
                    continue
                node = 0
                if child == -257:
                    flag |= _HD_FAIL
                else:
                    assert not flag & _HD_EMIT
                    flag |= _HD_EMIT
                    out = -(child + 1)
            nxt[state * 16 + nibble] = node
            flags[state * 16 + nibble] = flag
            syms[state * 16 + nibble] = out
    accept = bytearray(256)
    node = 0
    for _depth in range(8):
        accept[node] = 1
        child = one[node]
        assert child is not None and child > 0
        node = child
    return bytes(nxt), bytes(flags), bytes(syms), bytes(accept)


_HE_CODES, _HE_LENGTHS = _build_encode_tables()
_HD_NEXT, _HD_FLAGS, _HD_SYM, _HD_ACCEPT = _build_decode_tables()


def _huffman_decode(data: bytes, start: int, length: int) -> bytes:
    """Decode ``data[start:start + length]``; ``HpackError`` on EOS or bad padding."""
    out = bytearray(length * 8 // 5 + 1)
    p = data
    o = out
    nxt = _HD_NEXT
    flags = _HD_FLAGS
    syms = _HD_SYM
    state = 0
    j = 0
    for i in range(start, start + length):
        byte = p[i]
        t = (state << 4) | (byte >> 4)
        flag = flags[t]
        if flag & _HD_FAIL:
            raise HpackError("Huffman-coded string contains EOS")
        if flag & _HD_EMIT:
            o[j] = syms[t]
            j += 1
        state = nxt[t]
        t = (state << 4) | (byte & 15)
        flag = flags[t]
        if flag & _HD_FAIL:
            raise HpackError("Huffman-coded string contains EOS")
        if flag & _HD_EMIT:
            o[j] = syms[t]
            j += 1
        state = nxt[t]
    accept = _HD_ACCEPT
    if not accept[state]:
        raise HpackError("invalid Huffman padding")
    if not cython.compiled:
        return bytes(out[:j])
    return o[:j]  # type: ignore[return-value]  # compiled, a C slice is already bytes


def _huffman_length(s: bytes) -> int:
    """Bytes that ``s`` takes Huffman-coded."""
    lengths = _HE_LENGTHS
    lp = lengths
    bits = 0
    for c in s:
        bits += lp[c]
    return (bits + 7) >> 3


def _put_int(out: bytearray, flags: int, prefix: int, value: int) -> None:
    """Append ``value`` as an HPACK integer with a ``prefix``-bit prefix, ORed with ``flags``."""
    mask = (1 << prefix) - 1
    if value < mask:
        out.append(flags | value)
        return
    out.append(flags | mask)
    value -= mask
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_string(out: bytearray, s: bytes, huffman: bool) -> None:
    """Append a string literal, Huffman-coded when that is not longer and ``huffman`` is set."""
    n = len(s)
    if huffman and n:
        hlen = _huffman_length(s)
        if hlen <= n:
            _put_int(out, 0x80, 7, hlen)
            codes = _HE_CODES
            lengths = _HE_LENGTHS
            cp = codes
            lp = lengths
            acc = 0
            nacc = 0
            for c in s:
                k = c * 4
                code = (cp[k] << 24) | (cp[k + 1] << 16) | (cp[k + 2] << 8) | cp[k + 3]
                bits = lp[c]
                acc = (acc << bits) | code
                nacc += bits
                while nacc >= 8:
                    nacc -= 8
                    out.append((acc >> nacc) & 0xFF)
                acc &= (1 << nacc) - 1
            if nacc:
                # pad with the most significant bits of EOS (all ones)
                out.append(((acc << (8 - nacc)) | ((1 << (8 - nacc)) - 1)) & 0xFF)
            return
    _put_int(out, 0, 7, n)
    out += s


class Decoder:
    """Decodes header blocks of one HTTP/2 connection (one direction), in order.

    Parameters
    ----------
    max_table_size
        Our SETTINGS_HEADER_TABLE_SIZE: a dynamic table size update above it is an error.
        Settable (assign once the peer has acknowledged a new value); lowering it below the
        current table size makes a size update required at the start of the next block. The
        table starts at ``min(max_table_size, 4096)``.
    max_header_list_size
        Our SETTINGS_MAX_HEADER_LIST_SIZE (settable): a block whose fields exceed it raises
        ``HeaderListTooLarge`` after the block has been read.
    """

    def __init__(
        self, max_table_size: int = DEFAULT_TABLE_SIZE, max_header_list_size: int = 65536
    ) -> None:
        if max_table_size < 0 or max_header_list_size < 0:
            raise ValueError("max_table_size and max_header_list_size must be >= 0")
        self._entries: list[tuple[bytes, bytes]] = []
        self._size = 0
        self._capacity = min(max_table_size, DEFAULT_TABLE_SIZE)
        self._max_table_size = max_table_size
        self._update_required = False
        self._pos = 0
        self.max_header_list_size = max_header_list_size

    @property
    def max_table_size(self) -> int:
        """Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may set."""
        return self._max_table_size

    @max_table_size.setter
    def max_table_size(self, size: int) -> None:
        if size < 0:
            raise ValueError("max_table_size must be >= 0")
        self._max_table_size = size
        # RFC 7541 4.2: the peer's next block must start by shrinking the table to fit.
        self._update_required = self._capacity > size

    @property
    def table_size(self) -> int:
        """Bytes the dynamic table holds now (RFC 7541 4.1: name + value + 32 per entry)."""
        return self._size

    @property
    def table_capacity(self) -> int:
        """The dynamic table's maximum size, as the peer's last size update set it."""
        return self._capacity

    def decode(self, block: bytes | bytearray | memoryview) -> list[tuple[bytes, bytes]]:
        """Decode one complete header block into ``(name, value)`` pairs, in order.

        Raises
        ------
        HpackError
            The block is malformed (connection error COMPRESSION_ERROR).
        HeaderListTooLarge
            The fields exceed ``max_header_list_size``; the block was still read to its end.
        """
        data: bytes = block if type(block) is bytes else bytes(block)
        p = data
        end = len(data)
        headers: list[tuple[bytes, bytes]] = []
        limit = self.max_header_list_size
        total = 0
        over = False
        seen = False
        self._pos = 0
        if self._update_required and (end == 0 or (p[0] & 0xE0) != 0x20):
            raise HpackError("dynamic table size update required at the start of the block")
        while self._pos < end:
            byte = p[self._pos]
            if byte & 0x80:
                entry = self._entry(self._int(p, end, 7))
            elif byte & 0x40:
                name = self._name(p, end, self._int(p, end, 6))
                entry = (name, self._string(p, end))
                self._add(entry)
            elif byte & 0x20:
                if seen:
                    raise HpackError("dynamic table size update after a header field")
                size = self._int(p, end, 5)
                if size > self._max_table_size:
                    raise HpackError(
                        f"dynamic table size update to {size} exceeds the maximum "
                        f"{self._max_table_size}"
                    )
                self._capacity = size
                self._evict()
                self._update_required = False
                continue
            else:
                # literal without indexing (0000) or never indexed (0001)
                name = self._name(p, end, self._int(p, end, 4))
                entry = (name, self._string(p, end))
            seen = True
            if not over:
                total += len(entry[0]) + len(entry[1]) + 32
                if total > limit:
                    over = True
                    headers = []
                else:
                    headers.append(entry)
        if over:
            raise HeaderListTooLarge(
                f"header list exceeds max_header_list_size {limit} "
                "(RFC 9113 6.5.2: name + value + 32 per field)"
            )
        return headers

    def _int(self, p: bytes, end: int, prefix: int) -> int:
        """Read the integer at ``self._pos`` (``< end``) with a ``prefix``-bit prefix."""
        pos = self._pos
        mask = (1 << prefix) - 1
        value = p[pos] & mask
        pos += 1
        if value == mask:
            shift = 0
            while True:
                if pos >= end:
                    raise HpackError("truncated integer")
                byte = p[pos]
                pos += 1
                # a 64-bit digit: a C int would overflow at shift 28
                digit = byte & 0x7F
                value += digit << shift
                shift += 7
                if not byte & 0x80:
                    break
                if shift >= _INT_MAX_SHIFT:
                    raise HpackError("integer too long")
            if value > _INT_MAX:
                raise HpackError("integer too large")
        self._pos = pos
        return value

    def _string(self, p: bytes, end: int) -> bytes:
        """Read the string literal at ``self._pos``."""
        pos = self._pos
        if pos >= end:
            raise HpackError("truncated string literal")
        huffman = p[pos] & 0x80
        length = self._int(p, end, 7)
        pos = self._pos
        if length > end - pos:
            raise HpackError("string literal runs past the end of the block")
        self._pos = pos + length
        if huffman:
            return _huffman_decode(p, pos, length)
        return p[pos : pos + length]

    def _name(self, p: bytes, end: int, index: int) -> bytes:
        """The name of a literal field: a new literal when ``index`` is 0, else an entry's."""
        if index == 0:
            return self._string(p, end)
        entry = self._entry(index)
        return entry[0]

    def _entry(self, index: int) -> tuple[bytes, bytes]:
        if index <= 0:
            raise HpackError("index 0 is not a header field")
        if index <= 61:
            return _STATIC[index - 1]
        i = index - 62
        n = len(self._entries)
        if i >= n:
            raise HpackError(f"index {index} is beyond the header table ({61 + n} entries)")
        return self._entries[n - 1 - i]

    def _add(self, entry: tuple[bytes, bytes]) -> None:
        size = len(entry[0]) + len(entry[1]) + 32
        if size > self._capacity:
            # RFC 7541 4.4: an entry larger than the table empties it and is not added
            self._entries.clear()
            self._size = 0
            return
        self._entries.append(entry)
        self._size += size
        self._evict()

    def _evict(self) -> None:
        n = 0
        entries = self._entries
        while self._size > self._capacity:
            entry = entries[n]
            self._size -= len(entry[0]) + len(entry[1]) + 32
            n += 1
        if n:
            del entries[:n]


class Encoder:
    """Encodes header blocks of one HTTP/2 connection (one direction), in order.

    Fields in the static table are indexed; other fields are added to the dynamic table
    (incremental indexing), so a repeated field such as ``content-type: application/grpc``
    costs one byte from its second use on. Not added: fields named in ``unindexed_names``
    (values that change per message: ``content-length``, ``grpc-timeout``, ``grpc-message``,
    ...), fields that would take over half the table, and fields named in
    ``sensitive_names``, which are sent as never-indexed literals. Strings are Huffman-coded
    when ``huffman`` is set and that is not longer.

    Parameters
    ----------
    max_table_size
        The most table this encoder will use. The table starts at ``min(max_table_size, 4096)``
        (4096 being the peer's initial SETTINGS_HEADER_TABLE_SIZE; using less than the peer
        allows needs no signal) and follows ``set_max_table_size`` up to this bound.
    unindexed_names, sensitive_names
        Lower-case field names sent as literals without indexing / never indexed.
    """

    def __init__(
        self,
        max_table_size: int = DEFAULT_TABLE_SIZE,
        *,
        unindexed_names: frozenset[bytes] = DEFAULT_UNINDEXED_NAMES,
        sensitive_names: frozenset[bytes] = DEFAULT_SENSITIVE_NAMES,
    ) -> None:
        if max_table_size < 0:
            raise ValueError("max_table_size must be >= 0")
        self._limit = max_table_size
        self._capacity = min(max_table_size, DEFAULT_TABLE_SIZE)
        self._pending = False
        self._pending_min = self._capacity
        self._unindexed = frozenset(unindexed_names)
        self._sensitive = frozenset(sensitive_names)
        # entries[i] was the (first + i)-th insertion; the newest is last
        self._entries: list[tuple[bytes, bytes]] = []
        self._first = 0
        self._size = 0
        self._full: dict[tuple[bytes, bytes], int] = {}
        self._names: dict[bytes, int] = {}

    @property
    def table_size(self) -> int:
        """Bytes the dynamic table holds now."""
        return self._size

    @property
    def table_capacity(self) -> int:
        """The dynamic table's maximum size (the last one signalled, or pending)."""
        return self._capacity

    def set_max_table_size(self, size: int) -> None:
        """Take the peer's SETTINGS_HEADER_TABLE_SIZE; the next block signals the change."""
        if size < 0:
            raise ValueError("max_table_size must be >= 0")
        capacity = min(size, self._limit)
        if not self._pending:
            if capacity == self._capacity:
                return
            self._pending = True
            self._pending_min = capacity
        elif capacity < self._pending_min:
            self._pending_min = capacity
        self._capacity = capacity
        self._evict()

    def encode(self, headers: list[tuple[bytes, bytes]], huffman: bool = True) -> bytes:
        """Encode one header block: ``(name, value)`` pairs of ``bytes``, in order."""
        out = bytearray()
        if self._pending:
            # RFC 7541 4.2: the smallest size since the last block, then the final one
            if self._pending_min < self._capacity:
                _put_int(out, 0x20, 5, self._pending_min)
            _put_int(out, 0x20, 5, self._capacity)
            self._pending = False
        for header in headers:
            name = header[0]
            value = header[1]
            key = (name, value)
            index = _STATIC_FULL.get(key, 0)
            if index:
                _put_int(out, 0x80, 7, index)
                continue
            k = self._full.get(key, -1)
            if k >= 0:
                _put_int(out, 0x80, 7, self._index(k))
                continue
            index = _STATIC_NAME.get(name, 0)
            if not index:
                k = self._names.get(name, -1)
                if k >= 0:
                    index = self._index(k)
            size = len(name) + len(value) + 32
            if size * 2 > self._capacity or name in self._unindexed or name in self._sensitive:
                _put_int(out, 0x10 if name in self._sensitive else 0, 4, index)
                if not index:
                    _put_string(out, name, huffman)
                _put_string(out, value, huffman)
                continue
            _put_int(out, 0x40, 6, index)
            if not index:
                _put_string(out, name, huffman)
            _put_string(out, value, huffman)
            self._add(key, size)
        return bytes(out)

    def _index(self, k: int) -> int:
        """The HPACK index of the ``k``-th insertion (which must still be in the table)."""
        return 62 + self._first + len(self._entries) - 1 - k

    def _add(self, entry: tuple[bytes, bytes], size: int) -> None:
        k = self._first + len(self._entries)
        self._entries.append(entry)
        self._size += size
        self._full[entry] = k
        self._names[entry[0]] = k
        self._evict()

    def _evict(self) -> None:
        n = 0
        entries = self._entries
        while self._size > self._capacity:
            entry = entries[n]
            self._size -= len(entry[0]) + len(entry[1]) + 32
            k = self._first + n
            if self._full.get(entry, -1) == k:
                del self._full[entry]
            if self._names.get(entry[0], -1) == k:
                del self._names[entry[0]]
            n += 1
        if n:
            del entries[:n]
            self._first += n
