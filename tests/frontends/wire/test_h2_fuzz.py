"""Seeded, time-bounded fuzz of H2Connection: mutated frame sequences into both twins.

Each case starts from a valid client conversation (requests with CONTINUATIONs, padding,
split gRPC messages, PINGs, SETTINGS, WINDOW_UPDATEs, resets) and mutates it (flipped bytes,
changed types, flags, stream ids and lengths, dropped, duplicated and spliced frames), then
feeds it in random pieces. A handler answers from inside the callbacks (responses, resets,
GOAWAY) as a transport would. Checked: no exception escapes, a closed connection names one
of RFC 9113's codes in its GOAWAY, every RST_STREAM code is defined, output and queued bytes
stay bounded, and the pure and compiled twins answer byte for byte alike.
"""

from __future__ import annotations

import random
import struct
import time
from typing import Any

import hpack
import pytest
from test_h2_connection import COMPILED, NOT_BUILT
from test_h2_peer import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEAD,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    REQUEST,
    RST_STREAM,
    TRAILERS,
    WINDOW_UPDATE,
    frame,
    grpc_message,
    parse_frames,
    settings,
)

from tritonlite.frontends.wire import _h2_py

CASES = 20_000
BUDGET_S = 100.0
DEFINED = set(range(0x0E))  # NO_ERROR .. HTTP_1_1_REQUIRED


class Answering:
    """Records events and answers like a transport, with choices from its own seeded rng."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.conn: Any = None
        self.events: list[tuple[Any, ...]] = []

    def on_request(self, sid: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.events.append(("request", sid, tuple(headers)))
        r = self.rng.random()
        if r < 0.1:
            self.conn.reset(sid, 8)
        elif r < 0.2:
            self.conn.send_headers(sid, HEAD)

    def on_message(self, sid: int, compressed: int, payload: bytes) -> None:
        self.events.append(("message", sid, compressed, bytes(payload)))
        r = self.rng.random()
        if r < 0.3:
            self.conn.send_response(sid, HEAD, bytes(payload) * 3, False, TRAILERS)
        elif r < 0.5:
            self.conn.send_message(sid, bytes(payload), bool(compressed))
        elif r < 0.55:
            self.conn.goaway()

    def on_half_close(self, sid: int) -> None:
        self.events.append(("half_close", sid))
        if self.rng.random() < 0.7:
            self.conn.send_headers(sid, TRAILERS, True)

    def on_grpc_error(self, sid: int, status: int, message: str) -> None:
        self.events.append(("grpc_error", sid, status, message))
        self.conn.send_headers(sid, TRAILERS, True)

    def on_reset(self, sid: int, code: int) -> None:
        self.events.append(("reset", sid, code))

    def on_writable(self, sid: int) -> None:
        self.events.append(("writable", sid))

    def on_goaway(self, code: int, last: int) -> None:
        self.events.append(("goaway", code, last))


def _conversation(rng: random.Random) -> list[bytes]:
    """A valid client conversation as a list of frames (the preface first)."""
    enc = hpack.Encoder()
    frames = [PREFACE, settings((4, rng.choice([0, 10, 65535, 1 << 20])), (5, 16384))]
    sid = 1
    for _ in range(rng.randint(1, 4)):
        headers = list(REQUEST)
        if rng.random() < 0.3:
            headers.append((b"grpc-timeout", b"%dm" % rng.randint(1, 999)))
        block = bytes(enc.encode(headers))
        if rng.random() < 0.3:
            cut = rng.randint(0, len(block))
            frames.append(frame(HEADERS, 0, sid, block[:cut]))
            frames.append(frame(CONTINUATION, END_HEADERS, sid, block[cut:]))
        elif rng.random() < 0.3:
            pad = rng.randint(0, 5)
            frames.append(
                frame(
                    HEADERS,
                    END_HEADERS | PADDED | PRIORITY_FLAG,
                    sid,
                    bytes([pad]) + struct.pack(">LB", 0, 16) + block + b"\0" * pad,
                )
            )
        else:
            frames.append(frame(HEADERS, END_HEADERS, sid, block))
        body = b"".join(
            grpc_message(rng.randbytes(rng.choice([0, 1, 5, 200, 3000])))
            for _ in range(rng.randint(0, 3))
        )
        while body:
            k = rng.randint(1, len(body))
            frames.append(frame(DATA, 0, sid, body[:k]))
            body = body[k:]
        r = rng.random()
        if r < 0.6:
            frames.append(frame(DATA, END_STREAM, sid, b""))
        elif r < 0.8:
            frames.append(frame(RST_STREAM, 0, sid, struct.pack(">L", 8)))
        extra = rng.random()
        if extra < 0.2:
            frames.append(frame(PING, 0, 0, rng.randbytes(8)))
        elif extra < 0.4:
            frames.append(
                frame(
                    WINDOW_UPDATE,
                    0,
                    rng.choice([0, sid]),
                    struct.pack(">L", rng.randint(1, 1 << 20)),
                )
            )
        elif extra < 0.5:
            frames.append(frame(PRIORITY, 0, sid + 2, struct.pack(">LB", 0, 1)))
        elif extra < 0.55:
            frames.append(frame(GOAWAY, 0, 0, struct.pack(">LL", sid, 0)))
        sid += 2
    return frames


def _mutate(rng: random.Random, frames: list[bytes], corpus: list[bytes]) -> bytes:
    frames = list(frames)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(frames))
        f = bytearray(frames[i])
        op = rng.randrange(9)
        if op == 0 and f:  # flip a byte
            f[rng.randrange(len(f))] = rng.randrange(256)
        elif op == 1 and len(f) >= 9:  # frame type
            f[3] = rng.randrange(12)
        elif op == 2 and len(f) >= 9:  # flags
            f[4] = rng.randrange(256)
        elif op == 3 and len(f) >= 9:  # stream id
            f[5:9] = struct.pack(">L", rng.choice([0, 1, 2, 3, 5, 99, 0x80000001]))
        elif op == 4 and len(f) >= 9:  # length field
            f[0:3] = rng.randrange(1 << 15).to_bytes(3, "big")
        elif op == 5:
            del frames[i]
            continue
        elif op == 6:
            frames.insert(i, bytes(f))
        elif op == 7:
            frames.insert(i, rng.choice(corpus))
        else:
            f = f[: rng.randrange(len(f) + 1)]
        frames[i] = bytes(f)
    return b"".join(frames)


def _run(cls: Any, data: bytes, cuts: list[int], seed: int) -> tuple[bytes, list[Any], Any]:
    handler = Answering(seed)
    conn = cls(handler, _h2_py.H2Limits(max_message_size=4096, stream_write_buffer=8192))
    handler.conn = conn
    out = [conn.data_to_send()]
    prev = 0
    for cut in cuts + [len(data)]:
        conn.receive(data[prev:cut])
        prev = cut
        out.append(conn.data_to_send())
        assert conn.queued_bytes() <= 8 * 8192 * 4
    return b"".join(out), handler.events, conn


def test_fuzz_frame_sequences() -> None:
    twins = [_h2_py.H2Connection]
    if COMPILED is not None:
        twins.append(COMPILED.H2Connection)
    rng = random.Random(20261204)
    corpus: list[bytes] = []
    for _ in range(200):
        corpus.extend(_conversation(rng)[1:])
    deadline = time.monotonic() + BUDGET_S
    closed = 0
    codes: set[int] = set()
    done = 0
    for case in range(CASES):
        if time.monotonic() > deadline:
            break
        conversation = _conversation(rng)
        data = b"".join(conversation) if rng.random() < 0.1 else _mutate(rng, conversation, corpus)
        cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randint(0, 4)))
        results = [_run(cls, data, cuts, case) for cls in twins]
        out, events, conn = results[0]
        for other in results[1:]:
            assert other[0] == out, f"case {case}: the twins wrote different bytes"
            assert other[1] == events, f"case {case}: the twins reported different events"
        assert len(out) <= 4 * len(data) + 65536
        for ftype, _, _, payload in parse_frames(out):
            if ftype == RST_STREAM:
                assert struct.unpack(">L", payload)[0] in DEFINED
            elif ftype == GOAWAY:
                assert struct.unpack(">L", payload[4:8])[0] in DEFINED
        if conn.closed:
            closed += 1
            codes.add(conn.error_code)
            assert conn.error_code in DEFINED - {0}
        done += 1
    if done < CASES:
        pytest.fail(f"only {done} of {CASES} cases within {BUDGET_S} s")
    assert closed > CASES // 10 and len(codes) >= 4, (closed, codes)
    if COMPILED is None:
        pytest.skip(f"{NOT_BUILT}: fuzzed the pure twin only")
