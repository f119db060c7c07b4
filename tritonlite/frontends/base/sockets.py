"""Listening sockets for the front ends, bound before a server adopts them."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from typing import Any


def bind(address: str, port: int, reuse_port: bool) -> socket.socket:
    """A non-blocking listening TCP socket on ``address:port`` (0: any free port).

    SO_REUSEPORT only when asked (--reuse-http-port / --reuse-grpc-port), so a port clash
    fails the start instead of silently sharing the port. Raises OSError when it cannot bind.
    """
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port and hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((address, port))
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


# file descriptors kept free for what is not a client connection: listeners, the metrics
# port, model files and runtimes, logs, the other protocol's connections
_FD_RESERVE = 128


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as servers do at start, so idle
    clients cannot exhaust a low default); the soft limit now in force (0: unknown)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return 0
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    except (OSError, ValueError):
        return 0
    return int(soft)


def connection_cap(configured: int, nofile: int) -> int:
    """The connection cap of one front end: ``configured``, lowered so that the connections
    of both protocols fit under the file-descriptor limit with a reserve to spare."""
    if nofile <= 0:
        return configured
    return max(16, min(configured, (nofile - _FD_RESERVE) // 2))


def close_keeping_backlog(
    server: asyncio.AbstractServer, factory: Callable[[], asyncio.BaseProtocol], ssl: Any
) -> list[asyncio.Task[Any]]:
    """Close ``server``'s listener without dropping the connections the kernel has already
    completed on it and the loop has not accepted yet (closing a listening socket resets
    them: their clients, connected and sending, would see their request fail). Those are
    accepted first and served by ``factory`` (with TLS when ``ssl``); returns the tasks that
    hand them to it."""
    loop = asyncio.get_running_loop()
    taken: list[socket.socket] = []
    for listening in getattr(server, "sockets", None) or ():
        try:
            dup = socket.socket(fileno=os.dup(listening.fileno()))
        except OSError:
            continue
        try:
            dup.setblocking(False)
            while True:
                try:
                    conn, _ = dup.accept()
                except OSError:  # BlockingIOError: the backlog is empty
                    break
                conn.setblocking(False)
                taken.append(conn)
        finally:
            dup.close()
    server.close()
    return [
        loop.create_task(loop.connect_accepted_socket(factory, conn, ssl=ssl)) for conn in taken
    ]
