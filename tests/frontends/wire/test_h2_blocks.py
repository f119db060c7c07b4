"""Large gRPC messages assembled in one block (H2Connection, both twins): the bytes handed up
are the bytes sent whether the transport feeds them through ``receive`` or reads them into the
view ``recv_view`` lends, for any split into DATA frames and reads; the connection answers
(WINDOW_UPDATEs, resets) byte for byte the same either way and on both twins; a reset or a
broken message gives its block back."""

from __future__ import annotations

import gc
import random
import struct
from typing import Any

import hpack
import pytest
from test_h2_connection import COMPILED, NOT_BUILT
from test_h2_fuzz import Answering, _mutate
from test_h2_peer import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PADDED,
    PREFACE,
    REQUEST,
    RST_STREAM,
    Recorder,
    frame,
    grpc_message,
    settings,
)

from tritonlite.frontends.wire import _h2_py
from tritonlite.frontends.wire.recvbuf import RecvBlocks

SIZES = [0, 1, 5, 1000, 65535, 65536, 65537, 70001, 300_001, 1 << 20, (3 << 20) + 3]
READS = [1, 3, 9, 10, 100, 4095, 16384, 65536, 262144, 1 << 20]


def twins() -> list[Any]:
    out = [_h2_py.H2Connection]
    if COMPILED is not None:
        out.append(COMPILED.H2Connection)
    return out


@pytest.fixture(params=["pure", "compiled"])
def H2C(request: pytest.FixtureRequest) -> Any:
    if request.param == "pure":
        return _h2_py.H2Connection
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    return COMPILED.H2Connection


class Blocks(Recorder):
    """A Recorder whose large messages are assembled in blocks of a ``RecvBlocks``, as the
    transport's are."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = RecvBlocks()
        self.kinds_seen: set[str] = set()

    def message_block(self, n: int) -> memoryview:
        return self.pool.take(n)

    def on_message(self, sid: int, compressed: int, payload: Any) -> None:
        self.kinds_seen.add(type(payload).__name__)
        super().on_message(sid, compressed, payload)


def conversation(rng: random.Random) -> tuple[bytes, dict[int, list[bytes]]]:
    """A client's bytes: 1-3 streams, each sending a few messages of ``SIZES`` in DATA frames
    of random (often odd) sizes, interleaved, some padded; and the messages each stream sent."""
    enc = hpack.Encoder()
    out = [PREFACE, settings()]
    streams: dict[int, list[bytes]] = {}
    pending: dict[int, bytes] = {}
    for k in range(rng.randint(1, 3)):
        sid = 1 + 2 * k
        msgs = [rng.randbytes(rng.choice(SIZES)) for _ in range(rng.randint(1, 3))]
        if sum(len(m) for m in msgs) > 5 << 20:
            msgs = msgs[:1]
        streams[sid] = msgs
        pending[sid] = b"".join(grpc_message(m) for m in msgs)
        out.append(frame(HEADERS, END_HEADERS, sid, enc.encode(REQUEST)))
    while pending:
        sid = rng.choice(sorted(pending))
        body = pending[sid]
        n = min(len(body), rng.choice([1, 7, 4096, 16384, 65535, 300_000, 1 << 20]))
        part, rest = body[:n], body[n:]
        end = END_STREAM if not rest else 0
        if rng.random() < 0.1 and n <= 16000:
            pad = rng.randint(0, 30)
            out.append(frame(DATA, PADDED | end, sid, bytes([pad]) + part + bytes(pad)))
        else:
            out.append(frame(DATA, end, sid, part))
        if rest:
            pending[sid] = rest
        else:
            del pending[sid]
    return b"".join(out), streams


def feed(conn: Any, data: bytes, rng: random.Random, direct: bool) -> tuple[bytes, int]:
    """Feed ``data`` in random reads (with ``direct``, into the view ``recv_view`` lends
    whenever it lends one, as a buffered transport reads): every byte the server wrote, and
    how many were read into lent views."""
    written = []
    lent = 0
    pos = 0
    while pos < len(data):
        view = conn.recv_view() if direct else None
        if view is not None:
            n = min(len(view), len(data) - pos, rng.choice(READS))
            view[:n] = data[pos : pos + n]
            conn.recv_done(n)
            lent += n
        else:
            hint = conn.recv_hint() if direct else 0
            n = hint or rng.choice(READS)
            conn.receive(data[pos : pos + n])
        pos += n
        written.append(conn.data_to_send())
    return b"".join(written), lent


@pytest.mark.parametrize("seed", range(12))
def test_every_feeding_hands_up_the_same_messages(H2C: Any, seed: int) -> None:
    data, streams = conversation(random.Random(seed))
    results = []
    for direct in (False, True, True):
        handler = Blocks()
        conn = H2C(handler)
        out, lent = feed(conn, data, random.Random(seed * 7 + len(results)), direct)
        if direct and max(len(m) for ms in streams.values() for m in ms) >= 1 << 20:
            assert lent > 0  # the large message's bytes did go straight into its block
        got: dict[int, list[bytes]] = {}
        for e in handler.events:
            if e[0] == "message":
                got.setdefault(e[1], []).append(e[3])
        assert got == {s: m for s, m in streams.items()}
        assert not conn.closed
        assert [e for e in handler.events if e[0] in ("reset", "grpc_error")] == []
        results.append((handler.kinds(), out))
        handler.events.clear()
        gc.collect()
        assert handler.pool.lent() == 0  # every block came back once its message was dropped
    # the same events, and byte for byte the same answers (WINDOW_UPDATEs), however the
    # bytes were read
    assert results[0] == results[1] == results[2]


def test_twins_answer_alike_when_reading_into_blocks() -> None:
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    for seed in range(6):
        data, _ = conversation(random.Random(100 + seed))
        seen = []
        for cls in (_h2_py.H2Connection, COMPILED.H2Connection):
            handler = Blocks()
            out = feed(cls(handler), data, random.Random(seed), True)
            seen.append((out, handler.events))
        assert seen[0] == seen[1]


def _data_head(length: int, sid: int) -> bytes:
    """The 9-byte header of a DATA frame of ``length`` bytes (its payload sent apart)."""
    return struct.pack(">BHBBL", length >> 16, length & 0xFFFF, DATA, 0, sid)


def _open(conn: Any, sid: int, enc: Any) -> None:
    conn.receive(frame(HEADERS, END_HEADERS, sid, enc.encode(REQUEST)))


def test_a_reset_or_a_broken_message_gives_its_block_back(H2C: Any) -> None:
    handler = Blocks()
    conn = H2C(handler)
    enc = hpack.Encoder()
    conn.receive(PREFACE + settings())
    # reset while the message is half in
    _open(conn, 1, enc)
    conn.receive(frame(DATA, 0, 1, grpc_message(b"x" * 500_000)[:200_000]))
    assert handler.pool.lent() == 1
    conn.receive(frame(RST_STREAM, 0, 1, struct.pack(">L", 8)))
    gc.collect()
    assert handler.pool.lent() == 0
    # the stream ends with its message cut short, part of it read into the lent view
    _open(conn, 3, enc)
    body = grpc_message(bytes(range(256)) * 2000)  # 512,005 bytes
    conn.receive(_data_head(300_000, 3) + body[:1000])
    view = conn.recv_view()
    assert view is not None and len(view) == 300_000 - 1000
    view[:150_000] = body[1000:151_000]
    conn.recv_done(150_000)
    conn.receive(body[151_000:300_000])
    assert conn.recv_view() is None  # between frames: the next bytes are a frame header
    conn.receive(frame(DATA, END_STREAM, 3, body[300_000:400_000]))
    assert handler.events[-1][0] == "grpc_error"
    assert "incomplete" in handler.events[-1][3]
    del view  # (the test's own reference to the block)
    gc.collect()
    assert handler.pool.lent() == 0
    # and the connection still serves: a whole message read straight into its block
    _open(conn, 5, enc)
    conn.receive(_data_head(300_000, 5) + body[:1000])
    rest = body[1000:300_000] + frame(DATA, END_STREAM, 5, body[300_000:])
    done = feed(conn, rest, random.Random(1), True)
    assert done[1] > 0
    assert handler.events[-2][:3] == ("message", 5, 0) and handler.events[-2][3] == body[5:]
    assert handler.events[-1] == ("half_close", 5)
    handler.events.clear()
    gc.collect()
    assert handler.pool.lent() == 0


def _large_conversation(rng: random.Random) -> list[bytes]:
    """Frames of 1-3 streams sending messages large enough for blocks, in DATA frames of
    random sizes; each stream ends, or is reset."""
    enc = hpack.Encoder()
    frames = [PREFACE, settings()]
    for k in range(rng.randint(1, 3)):
        sid = 1 + 2 * k
        frames.append(frame(HEADERS, END_HEADERS, sid, enc.encode(REQUEST)))
        sizes = [rng.choice([70_000, 100_001, 200_000]) for _ in range(rng.randint(1, 2))]
        body = b"".join(grpc_message(rng.randbytes(n)) for n in sizes)
        while body:
            n = min(len(body), rng.choice([9, 5000, 16384, 65536, 150_000]))
            frames.append(frame(DATA, 0, sid, body[:n]))
            body = body[n:]
        if rng.random() < 0.8:
            frames.append(frame(DATA, END_STREAM, sid, b""))
        else:
            frames.append(frame(RST_STREAM, 0, sid, struct.pack(">L", 8)))
    return frames


def _run_large(cls: Any, data: bytes, seed: int, direct: bool) -> tuple[bytes, list[Any], int]:
    handler = Answering(seed)
    conn = cls(handler, _h2_py.H2Limits(stream_write_buffer=1 << 20))
    handler.conn = conn
    out, lent = feed(conn, data, random.Random(seed), direct)
    return out, handler.events, lent


def test_fuzz_large_messages_read_into_blocks() -> None:
    """Mutated conversations with large messages (the fuzz suite's mutations, an answering
    handler): read into lent views or not, and on either twin, the same bytes and events."""
    classes = [_h2_py.H2Connection] + ([COMPILED.H2Connection] if COMPILED is not None else [])
    rng = random.Random(20261206)
    corpus = [f for _ in range(20) for f in _large_conversation(rng)[1:]]
    lent = 0
    for case in range(150):
        frames = _large_conversation(rng)
        data = b"".join(frames) if rng.random() < 0.2 else _mutate(rng, frames, corpus)
        plain = _run_large(classes[0], data, case, False)
        for cls in classes:
            got = _run_large(cls, data, case, True)
            assert got[0] == plain[0], f"case {case}: {cls.__module__} wrote different bytes"
            assert got[1] == plain[1], f"case {case}: {cls.__module__} reported other events"
            lent += got[2]
    assert lent > 0


@pytest.mark.parametrize("size", [16384, 262_144])
def test_a_header_alone_is_asked_for_only_after_large_frames(H2C: Any, size: int) -> None:
    """Between the frames of a message assembled in a block, the next header is read alone
    only when the frames are large: after small ones the extra read costs more than it saves."""
    conn = H2C(Blocks())
    conn.receive(PREFACE + settings())
    _open(conn, 1, hpack.Encoder())
    body = grpc_message(bytes(1 << 20))
    assert conn.recv_hint() == 0  # no block yet
    conn.receive(frame(DATA, 0, 1, body[:size]))
    assert conn.recv_hint() == (9 if size >= 65536 else 0)
    conn.receive(_data_head(size, 1))
    assert conn.recv_hint() == 0  # inside a frame: recv_view's turn
    assert conn.recv_view() is not None


def test_prefixes_alone_reserve_at_most_sixteen_blocks(H2C: Any) -> None:
    """Length prefixes with nothing after them map a block each for 16 streams; the rest are
    assembled from their pieces, and every message still arrives whole."""
    handler = Blocks()
    conn = H2C(handler)
    enc = hpack.Encoder()
    conn.receive(PREFACE + settings())
    bodies = {}
    for k in range(20):
        sid = 1 + 2 * k
        _open(conn, sid, enc)
        bodies[sid] = grpc_message(bytes([k]) * 100_000)
        conn.receive(frame(DATA, 0, sid, bodies[sid][:10]))
    assert handler.pool.lent() == 16
    for sid, body in bodies.items():
        conn.receive(frame(DATA, END_STREAM, sid, body[10:]))
    got = {e[1]: e[3] for e in handler.events if e[0] == "message"}
    assert got == {sid: body[5:] for sid, body in bodies.items()}
