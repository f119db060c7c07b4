"""Support for the native HTTP/1.1 tests (no tests here): a loop thread that runs servers,
and a raw socket client that reads responses byte-exactly (Content-Length or chunked)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import uvloop


class LoopThread:
    """An event loop (uvloop's, or what ``new_loop`` makes) on its own thread; ``run``
    executes a coroutine there."""

    def __init__(
        self, new_loop: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    ) -> None:
        self.loop = new_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        async def _cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(_cancel_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Response:
    def __init__(
        self, status: int, reason: str, headers: dict[str, str], body: bytes, raw_head: bytes
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.raw_head = raw_head

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.headers}, {self.body[:200]!r})"


class Conn:
    """A raw TCP connection to ``port`` with a read buffer."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    @classmethod
    def of(cls, sock: Any) -> Conn:
        """A ``Conn`` over a socket made elsewhere (a TLS one, one with its own options)."""
        c = cls.__new__(cls)
        c.sock, c.buf = sock, b""
        return c

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError(f"closed by the server; buffered {self.buf[:200]!r}")
        self.buf += data

    def _take(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def raw(self, n: int) -> bytes:
        return self._take(n)

    def response(self, head_only: bool = False) -> Response:
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        version, status, reason = lines[0].decode().split(" ", 2)
        assert version == "HTTP/1.1", lines[0]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            key = name.strip().lower()
            assert key not in headers, f"header {key} sent twice"
            headers[key] = value.strip()
        body = b""
        if head_only or int(status) in (100, 204, 304):
            pass
        elif headers.get("transfer-encoding") == "chunked":
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    assert self._line() == b""
                    break
                body += self._take(size)
                assert self._take(2) == b"\r\n"
        elif "content-length" in headers:
            body = self._take(int(headers["content-length"]))
        else:  # delimited by the end of the connection
            try:
                while True:
                    self._fill()
            except ConnectionError:
                body, self.buf = self.buf, b""
        return Response(int(status), reason, headers, body, head)

    def closed(self, timeout: float = 5.0) -> bool:
        """Whether the server closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
                self.buf += data
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


@contextmanager
def tls_conn(port: int, ca: str) -> Iterator[Conn]:
    """A ``Conn`` over TLS to ``port`` on loopback, trusting the authority in the file ``ca``."""
    client = ssl.create_default_context(cafile=ca)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        yield Conn.of(tls)
