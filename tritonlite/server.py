"""Composition root: build the core and front ends, start them in order, stop them gracefully.

Start: load startup models, then open HTTP, gRPC and metrics ports (as Triton does, so a port
that answers belongs to a server that has finished its initial load). Stop (SIGTERM/SIGINT):
refuse new inference with UNAVAILABLE, drain in-flight work up to --exit-timeout-secs, close
ports, finalize models.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import ssl
import time
from typing import Any

from aiohttp import web

import tritonlite
from tritonlite.core.core import InferenceCore
from tritonlite.frontends.http.aio import make_server
from tritonlite.frontends.sockets import bind
from tritonlite.frontends.tls import http_tls
from tritonlite.inprocess import InProcessServer
from tritonlite.options import ServerOptions

log = logging.getLogger("tritonlite")


def compiled_paths() -> str:
    """Which compiled twins are active, e.g. 'batcher=cython kernels=numba'."""
    parts = []
    try:
        from tritonlite.scheduling import batcher

        parts.append(f"batcher={'cython' if batcher.ACCELERATED else 'python'}")
    except ImportError as exc:
        parts.append(f"batcher=unavailable ({exc})")
    try:
        from tritonlite import kernels

        parts.append(f"kernels={'numba' if kernels.NUMBA_ACTIVE else 'python'}")
    except ImportError as exc:
        parts.append(f"kernels=unavailable ({exc})")
    return " ".join(parts)


def model_table(rows: list[tuple[str, str, str]]) -> str:
    head = ("Model", "Version", "Status")
    widths = [max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i])
              for i in range(3)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    def fmt(r: tuple[str, ...]) -> str:
        return "|" + "|".join(f" {c:<{w}} " for c, w in zip(r, widths)) + "|"
    return "\n".join([line, fmt(head), line, *(fmt(r) for r in rows), line])


class Server:
    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        # Model code reaches the core through the in-process layer (BLS), handed in here.
        self.core = InferenceCore(options, in_process=InProcessServer)
        self._runners: list[web.BaseRunner] = []
        self._grpc: Any = None
        self._native: Any = None
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None
        self.cut_off = False  # stop() gave up on work still running at --exit-timeout-secs

    async def start(self) -> None:
        opts = self.options
        log.info("tritonlite %s (Triton %s API); compiled paths: %s",
                 tritonlite.__version__, tritonlite.TRITON_VERSION, compiled_paths())
        failed = await self.core.start()
        log.info("\n%s", model_table(self.core.repository.model_table()))
        if failed and opts.exit_on_error:
            raise RuntimeError("failed to load all models: " + ", ".join(failed))
        if opts.frontend == "native":
            await self._start_native()
        else:
            await self._start_aio()
        if opts.allow_metrics:
            from tritonlite.frontends.metrics import make_metrics_app

            address = opts.metrics_address or opts.http_address
            metrics_app = make_metrics_app(self.core, None, self.core.pressure)
            self.metrics_port = await self._serve(metrics_app,
                                                  address, opts.metrics_port, False)
            log.info("Started Metrics Service at %s:%d", address, self.metrics_port)

    async def _start_aio(self) -> None:
        opts = self.options
        if opts.allow_grpc:
            from tritonlite.frontends.grpc.server import start_grpc

            self._grpc, self.grpc_port = await start_grpc(self.core, opts)
            log.info("Started GRPCInferenceService at %s:%d (grpc.aio)", opts.grpc_address,
                     self.grpc_port)
        if opts.allow_http:
            http = make_server(self.core, opts.http_max_input_size)
            self.http_port = await self._serve(http, opts.http_address, opts.http_port,
                                               opts.reuse_http_port, http_tls(opts))
            log.info("Started HTTPService at %s:%d (aiohttp, HTTP/1.1)", opts.http_address,
                     self.http_port)

    async def _start_native(self) -> None:
        try:
            from tritonlite.frontends.native import start_native
        except ImportError as exc:
            raise RuntimeError(f"--frontend=native is not available: {exc}") from None
        opts = self.options
        self._native = await start_native(self.core, opts)
        self.http_port, self.grpc_port = self._native.http_port, self._native.grpc_port
        tls = " over TLS" if opts.http_use_ssl or opts.grpc_use_ssl else ""
        shared = (f" (native, one port{tls}: gRPC by the HTTP/2 preface or ALPN h2, "
                  "else HTTP/1.1)") if opts.shared_port else ""
        if self.grpc_port is not None:
            log.info("Started GRPCInferenceService at %s:%d%s", opts.grpc_address,
                     self.grpc_port, shared or " (native, gRPC over HTTP/2)")
        if self.http_port is not None:
            log.info("Started HTTPService at %s:%d%s", opts.http_address, self.http_port,
                     shared or " (native, HTTP/1.1)")

    async def _serve(self, app: web.Application | web.Server, address: str, port: int,
                     reuse: bool, ssl_context: ssl.SSLContext | None = None) -> int:
        runner: web.BaseRunner = (
            web.ServerRunner(app, handle_signals=False) if isinstance(app, web.Server)
            else web.AppRunner(app, access_log=None, handle_signals=False))
        await runner.setup()
        sock = bind(address, port, reuse)
        site = web.SockSite(runner, sock, ssl_context=ssl_context)
        await site.start()
        self._runners.append(runner)
        return int(sock.getsockname()[1])

    async def stop(self) -> None:
        """Graceful stop: refuse new work, drain in-flight requests (queued, executing, and
        decoupled streams until their final response) within --exit-timeout-secs, then close
        everything."""
        core = self.core
        core.exiting = True
        deadline = time.monotonic() + self.options.exit_timeout_secs
        models = [m for m in core.repository.ready_models()]
        if models:
            await asyncio.gather(*(m.drain(self.options.exit_timeout_secs) for m in models))
        streams_done = await core.drain_streams(max(0.0, deadline - time.monotonic()))
        # Work still running past the exit timeout: give up on it, as Triton does; closing its
        # connections or its instances would wait for it and ignore the bound.
        self.cut_off = not streams_done or any(m.scheduler.inflight() for m in models)
        if self.cut_off:
            log.error("failed to stop server: Exit timeout expired. Exiting immediately.")
            core.shm.close()
            core.trace.close()
            await core.pressure.stop()
            return
        if self._native is not None:
            await self._native.stop(grace=1.0)
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        for runner in self._runners:
            await runner.cleanup()
        await core.stop()
        log.info("tritonlite stopped")


async def serve(options: ServerOptions) -> int:
    server = Server(options)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    def on_signal() -> None:
        server.core.exiting = True  # refuse new work from this loop step on
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        await server.start()
    except (RuntimeError, OSError) as exc:
        log.error("%s", exc)
        await server.stop()
        return 1
    await stop.wait()
    log.info("signal received: draining in-flight requests (up to %.0f s)",
             options.exit_timeout_secs)
    await server.stop()
    if server.cut_off:  # Triton exits 1 here; instance threads may still be inside a model
        logging.shutdown()
        os._exit(1)
    return 0


def run(options: ServerOptions) -> int:
    try:
        import uvloop

        return uvloop.run(serve(options))
    except ImportError:
        return asyncio.run(serve(options))
