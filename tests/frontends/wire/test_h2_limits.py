"""H2Connection's rapid-reset bucket and the memory of tiny DATA frames, on both twins.

The connection reads ``time.monotonic`` from its module; these tests give the module a clock
they move by hand, so rates are exact and nothing sleeps.
"""

from __future__ import annotations

import sys
import tracemalloc
from typing import Any

import pytest
from test_h2_connection import H2C  # noqa: F401 (the twin fixture)
from test_h2_peer import DATA, END_HEADERS, HEADERS, RST_STREAM, Peer, frame

from tritonlite.frontends.wire._h2_py import ENHANCE_YOUR_CALM

_CANCEL = b"\0\0\0\x08"


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t


@pytest.fixture()
def clock(H2C: Any, monkeypatch: pytest.MonkeyPatch) -> _Clock:  # noqa: F811
    c = _Clock()
    monkeypatch.setattr(sys.modules[H2C.__module__], "time", c)
    return c


def _open_and_reset(peer: Peer, n: int) -> None:
    """``n`` streams opened and reset by the client, in one read."""
    out = []
    for _ in range(n):
        sid = peer.next_sid
        peer.next_sid += 2
        out.append(frame(HEADERS, END_HEADERS, sid, peer.block()))
        out.append(frame(RST_STREAM, 0, sid, _CANCEL))
    peer.send(b"".join(out))


def test_a_steady_rate_below_the_limit_is_never_cut_off(H2C: Any, clock: _Clock) -> None:  # noqa: F811
    """350 resets/s against 400/s, in reads 300 ms apart, for 20 s: a counting window that
    restarts on the first read past 1 s counted 4 reads (420) and sent GOAWAY."""
    peer = Peer(H2C)
    for _ in range(67):
        _open_and_reset(peer, 105)
        clock.t += 0.3
    assert not peer.conn.closed and peer.goaway_code() is None


def test_a_burst_is_cut_off_at_once_even_after_quiet_or_steady_time(
    H2C: Any,  # noqa: F811
    clock: _Clock,
) -> None:
    """CVE-2023-44487: 5,000 at once gets ENHANCE_YOUR_CALM, however long the connection
    was quiet (the bucket holds at most one limit's worth) or steady before."""
    for before in ("quiet", "steady"):
        peer = Peer(H2C)
        if before == "steady":
            for _ in range(20):
                _open_and_reset(peer, 35)
                clock.t += 0.1
        clock.t += 3600.0
        sent = 0
        while not peer.conn.closed and sent < 5000:
            _open_and_reset(peer, 50)
            sent += 50
        assert peer.goaway_code() == ENHANCE_YOUR_CALM
        assert sent <= 450


def test_the_limit_itself_is_the_burst(H2C: Any, clock: _Clock) -> None:  # noqa: F811
    peer = Peer(H2C)
    _open_and_reset(peer, 400)
    assert not peer.conn.closed
    clock.t += 0.5  # 200 back
    _open_and_reset(peer, 200)
    assert not peer.conn.closed
    _open_and_reset(peer, 1)
    assert peer.goaway_code() == ENHANCE_YOUR_CALM


def test_one_byte_data_frames_cost_about_their_payload(H2C: Any) -> None:  # noqa: F811
    """A message arriving in one-byte DATA frames is held in a few joined buffers: a list
    slot per byte cost eight times the payload."""
    n = 8_000
    peer = Peer(H2C)
    sid = peer.next_sid
    peer.next_sid += 2
    wire = frame(HEADERS, END_HEADERS, sid, peer.block())
    wire += frame(DATA, 0, sid, b"\0" + (2 * n).to_bytes(4, "big"))
    wire += b"".join(frame(DATA, 0, sid, b"x") for _ in range(n))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        peer.send(wire)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert not peer.conn.closed
    assert held < 2 * n, held
