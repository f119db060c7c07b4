"""Helpers, no tests: a raw HTTP/2 client for the H2Connection tests. Frames are built byte
by byte, headers encoded with the independent ``hpack`` package, the server's frames parsed."""

from __future__ import annotations

import struct
from typing import Any

import hpack

from tritonlite.frontends.wire import _h2_py

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

REQUEST = [
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/pkg.Svc/Echo"),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
]


def frame(ftype: int, flags: int, sid: int, payload: bytes = b"") -> bytes:
    n = len(payload)
    return struct.pack(">BHBBL", n >> 16, n & 0xFFFF, ftype, flags, sid) + payload


def settings(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(struct.pack(">HL", k, v) for k, v in pairs))


def grpc_message(payload: bytes, compressed: int = 0) -> bytes:
    return struct.pack(">BL", compressed, len(payload)) + payload


def parse_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    out = []
    pos = 0
    while pos < len(data):
        assert len(data) - pos >= 9, "truncated frame header from the server"
        n = int.from_bytes(data[pos : pos + 3], "big")
        ftype, flags = data[pos + 3], data[pos + 4]
        sid = int.from_bytes(data[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        out.append((ftype, flags, sid, data[pos + 9 : pos + 9 + n]))
        pos += 9 + n
    return out


class Recorder:
    """An H2Connection handler that records every event."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_request(self, sid: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.events.append(("request", sid, headers))

    def on_message(self, sid: int, compressed: int, payload: bytes) -> None:
        self.events.append(("message", sid, compressed, bytes(payload)))

    def on_half_close(self, sid: int) -> None:
        self.events.append(("half_close", sid))

    def on_grpc_error(self, sid: int, status: int, message: str) -> None:
        self.events.append(("grpc_error", sid, status, message))

    def on_reset(self, sid: int, code: int) -> None:
        self.events.append(("reset", sid, code))

    def on_writable(self, sid: int) -> None:
        self.events.append(("writable", sid))

    def on_goaway(self, code: int, last: int) -> None:
        self.events.append(("goaway", code, last))

    def kinds(self) -> list[str]:
        return [e[0] for e in self.events]


class Peer:
    """One server connection (``cls``: either twin) and a raw client talking to it."""

    def __init__(
        self,
        cls: Any,
        limits: Any = None,
        handler: Any = None,
        client_settings: bytes | None = None,
    ) -> None:
        self.handler = handler if handler is not None else Recorder()
        self.conn = cls(self.handler, limits)
        self.enc = hpack.Encoder()
        self.frames: list[tuple[int, int, int, bytes]] = []
        self.next_sid = 1
        self.send(PREFACE + (client_settings if client_settings is not None else settings()))

    def send(self, data: bytes) -> list[tuple[int, int, int, bytes]]:
        """Feed ``data``; the frames the server answered with (all are kept in ``frames``)."""
        self.conn.receive(data)
        return self.read()

    def read(self) -> list[tuple[int, int, int, bytes]]:
        new = parse_frames(self.conn.data_to_send())
        self.frames.extend(new)
        return new

    def block(self, headers: list[tuple[bytes, bytes]] | None = None) -> bytes:
        return bytes(self.enc.encode(headers if headers is not None else REQUEST))

    def request(
        self,
        body: bytes | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
        end: bool = True,
    ) -> int:
        sid = self.next_sid
        self.next_sid += 2
        block = self.block(headers)
        if body is None:
            self.send(frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), sid, block))
        else:
            self.send(
                frame(HEADERS, END_HEADERS, sid, block)
                + frame(DATA, END_STREAM if end else 0, sid, body)
            )
        return sid

    def goaway_code(self) -> int | None:
        for ftype, _, _, payload in self.frames:
            if ftype == GOAWAY:
                return int(struct.unpack(">LL", payload[:8])[1])
        return None

    def rst_codes(self, sid: int) -> list[int]:
        return [
            struct.unpack(">L", p)[0] for t, _, s, p in self.frames if t == RST_STREAM and s == sid
        ]


HEAD = _h2_py.encode_headers([(b":status", b"200"), (b"content-type", b"application/grpc")])
TRAILERS = _h2_py.encode_headers([(b"grpc-status", b"0")])
