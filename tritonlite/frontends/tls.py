"""Server-side TLS contexts for the HTTP front ends and the shared port.

Certificates are PEM files, as for Triton's gRPC TLS flags: ``cert`` and ``key`` identify the
server; with ``mutual`` the client must present a certificate signed by ``root``. ``alpn``
lists the protocols offered in the handshake (the shared port offers ``h2`` and ``http/1.1``
and lets the client's choice decide which protocol the connection speaks).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

from tritonlite.options import ServerOptions


def server_context(
    cert: str, key: str, root: str | None = None, mutual: bool = False, alpn: Sequence[str] = ()
) -> ssl.SSLContext:
    """An ``ssl.SSLContext`` for a listening socket; raises OSError / ssl.SSLError when a
    file cannot be read or does not match."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if mutual:
        if root is None:
            raise ValueError("mutual TLS needs a root certificate")
        ctx.load_verify_locations(root)
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif root is not None:
        ctx.load_verify_locations(root)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def http_tls(opts: ServerOptions, alpn: Sequence[str] = ()) -> ssl.SSLContext | None:
    """The HTTP listener's context (--http-use-ssl...), None for plain HTTP."""
    if not opts.http_use_ssl:
        return None
    assert opts.http_server_cert and opts.http_server_key
    return server_context(
        opts.http_server_cert,
        opts.http_server_key,
        opts.http_root_cert,
        opts.http_use_ssl_mutual,
        alpn,
    )


def grpc_tls(opts: ServerOptions, alpn: Sequence[str] = ()) -> ssl.SSLContext | None:
    """The native gRPC listener's context (--grpc-use-ssl...), None for plain HTTP/2."""
    if not opts.grpc_use_ssl:
        return None
    assert opts.grpc_server_cert and opts.grpc_server_key
    return server_context(
        opts.grpc_server_cert,
        opts.grpc_server_key,
        opts.grpc_root_cert,
        opts.grpc_use_ssl_mutual,
        alpn,
    )
