"""Listening sockets for the front ends, bound before a server adopts them."""

from __future__ import annotations

import socket


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
