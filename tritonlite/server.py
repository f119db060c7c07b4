"""Composition root: build the core and front ends, start them in order, stop them gracefully.

Start: load startup models, then open HTTP, gRPC and metrics ports (as Triton does, so a port
that answers belongs to a server that has finished its initial load). Stop (SIGTERM/SIGINT):
refuse new inference with UNAVAILABLE, drain in-flight work up to --exit-timeout-secs, close
ports, finalize models.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import ssl
import time
from typing import TYPE_CHECKING, Any

import tritonlite
from tritonlite.core.core import InferenceCore
from tritonlite.frontends.base import loopslice
from tritonlite.frontends.base.call import InFlight
from tritonlite.frontends.base.sockets import bind, close_keeping_backlog
from tritonlite.frontends.tls import http_tls
from tritonlite.inprocess import InProcessServer
from tritonlite.options import ServerOptions

if TYPE_CHECKING:  # aiohttp is imported only with --frontend=aio
    from aiohttp import web

log = logging.getLogger("tritonlite")
_FOREVER_S = 1e9  # grpc.aio's stop() grace that lets the drain decide instead
_DRAIN_IDLE_S = 1.0  # draining, how long an idle HTTP connection is kept for a first request
_CLOSE_GRACE_S = 1.0  # past --exit-timeout-secs, the longest a stop may take to close


def compiled_paths() -> str:
    """Which compiled paths are active, e.g. 'batcher=cython http1=cython sender=cython
    http2=cython hpack=cython jsondata=cython lane=cython policy=cython kernels=numba'."""
    parts = []
    for label, module in (
        ("batcher", "tritonlite.scheduling.batcher"),
        ("http1", "tritonlite.frontends.wire.http1"),
        ("sender", "tritonlite.frontends.wire.sender"),
        ("http2", "tritonlite.frontends.wire.h2"),
        ("hpack", "tritonlite.frontends.wire.hpack"),
        ("jsondata", "tritonlite.frontends.http.jsondata"),
        ("lane", "tritonlite.core.runtime.lane"),
        ("policy", "tritonlite.core.runtime.policy"),
    ):
        try:
            accelerated = importlib.import_module(module).ACCELERATED
        except ImportError as exc:
            parts.append(f"{label}=unavailable ({exc})")
            continue
        parts.append(f"{label}={'cython' if accelerated else 'python'}")
    try:
        from tritonlite import kernels

        parts.append(f"kernels={'numba' if kernels.NUMBA_ACTIVE else 'python'}")
    except ImportError as exc:
        parts.append(f"kernels=unavailable ({exc})")
    return " ".join(parts)


def model_table(rows: list[tuple[str, str, str]]) -> str:
    head = ("Model", "Version", "Status")
    widths = [
        max(len(head[i]), *(len(r[i]) for r in rows)) if rows else len(head[i]) for i in range(3)
    ]
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
        self._sites: list[web.SockSite] = []
        self._grpc: Any = None
        self._native: Any = None
        self._metrics: Any = None  # the native metrics service
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self.metrics_port: int | None = None
        self.cut_off = False  # stop() gave up on work still running at --exit-timeout-secs
        # --frontend=aio: what the drain needs of aiohttp and grpc.aio
        self._http_runner: web.BaseRunner | None = None
        self._http_site: web.SockSite | None = None
        self._http_inflight = InFlight()
        self._grpc_inflight = InFlight()
        self._grpc_stopping: asyncio.Future[None] | None = None
        self._http_adopting: list[asyncio.Task[Any]] = []

    async def start(self) -> None:
        opts = self.options
        if opts.loop_slice_us:
            # on the loop thread: only this thread gets it (the request resets on fork)
            try:
                loopslice.request_slice(opts.loop_slice_us)
            except OSError as exc:
                log.info("the event loop thread keeps the kernel's CPU slice: %s", exc)
        log.info(
            "tritonlite %s (Triton %s API); compiled paths: %s",
            tritonlite.__version__,
            tritonlite.TRITON_VERSION,
            compiled_paths(),
        )
        failed = await self.core.start()
        log.info("\n%s", model_table(self.core.repository.model_table()))
        if failed and opts.exit_on_error:
            raise RuntimeError("failed to load all models: " + ", ".join(failed))
        if opts.frontend == "native":
            await self._start_native()
        else:
            await self._start_aio()
        if opts.allow_metrics:
            address = opts.metrics_address or opts.http_address
            self.metrics_port = await self._start_metrics(address)
            log.info("Started Metrics Service at %s:%d", address, self.metrics_port)

    async def _start_metrics(self, address: str) -> int:
        """The metrics port: on the native HTTP/1.1 layer with ``--frontend=native``, an
        aiohttp app with ``--frontend=aio`` (the same dispatch)."""
        from tritonlite.frontends import metrics

        if self.options.frontend != "native":
            app = metrics.make_metrics_app(self.core, self.options.metrics_config)
            return await self._serve(app, address, self.options.metrics_port, False)
        from tritonlite.frontends.wire.http1 import start_http_native

        dispatch = metrics.make_metrics_dispatch(self.core, self.options.metrics_config)
        self._metrics = await start_http_native(dispatch, address, self.options.metrics_port)
        await self.core.start_sampling()
        return int(self._metrics.port)

    async def _start_aio(self) -> None:
        opts = self.options
        if opts.allow_grpc:
            from tritonlite.frontends.grpc.server import start_grpc

            self._grpc, self.grpc_port = await start_grpc(self.core, opts, self._grpc_inflight)
            log.info(
                "Started GRPCInferenceService at %s:%d (grpc.aio)",
                opts.grpc_address,
                self.grpc_port,
            )
        if opts.allow_http:
            from tritonlite.frontends.http.aio import make_server

            http = make_server(self.core, opts, self._http_inflight)
            self.http_port = await self._serve(
                http, opts.http_address, opts.http_port, opts.reuse_http_port, http_tls(opts)
            )
            self._http_runner = self._runners[-1]
            self._http_site = self._sites[-1]
            log.info(
                "Started HTTPService at %s:%d (aiohttp, HTTP/1.1)",
                opts.http_address,
                self.http_port,
            )

    async def _start_native(self) -> None:
        try:
            from tritonlite.frontends.native import start_native
        except ImportError as exc:
            raise RuntimeError(f"--frontend=native is not available: {exc}") from None
        opts = self.options
        self._native = await start_native(self.core, opts)
        self.http_port, self.grpc_port = self._native.http_port, self._native.grpc_port
        tls = " over TLS" if opts.http_use_ssl or opts.grpc_use_ssl else ""
        shared = (
            (f" (native, one port{tls}: gRPC by the HTTP/2 preface or ALPN h2, else HTTP/1.1)")
            if opts.shared_port
            else ""
        )
        if self.grpc_port is not None:
            log.info(
                "Started GRPCInferenceService at %s:%d%s",
                opts.grpc_address,
                self.grpc_port,
                shared or " (native, gRPC over HTTP/2)",
            )
        if self.http_port is not None:
            log.info(
                "Started HTTPService at %s:%d%s",
                opts.http_address,
                self.http_port,
                shared or " (native, HTTP/1.1)",
            )

    async def _serve(
        self,
        app: web.Application | web.Server,
        address: str,
        port: int,
        reuse: bool,
        ssl_context: ssl.SSLContext | None = None,
    ) -> int:
        from aiohttp import web

        runner: web.BaseRunner = (
            web.ServerRunner(app, handle_signals=False, shutdown_timeout=1.0)
            if isinstance(app, web.Server)
            else web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        )
        await runner.setup()
        sock = bind(address, port, reuse)
        site = web.SockSite(runner, sock, ssl_context=ssl_context)
        await site.start()
        self._runners.append(runner)
        self._sites.append(site)
        return int(sock.getsockname()[1])

    def refuse_new(self) -> None:
        """The stop signal, at once: readiness turns false and the listeners stop (the
        connections the kernel had completed are taken on first). Every HTTP connection
        accepted is served: what has begun -- an upload still arriving included -- and its
        first request even if it begins now; a further request gets 503 with ``Connection:
        close``. gRPC calls that begin from now on are refused (UNAVAILABLE or GOAWAY)."""
        self.core.stopping = True
        if self._native is not None:
            self._native.refuse_new()
        self._http_inflight.draining = True
        site, self._http_site = self._http_site, None
        if site is not None and self._http_runner is not None:
            # stop listening (its connections stay open; the ones the kernel had completed
            # are taken on first: their clients are connected)
            server = getattr(site, "_server", None)
            factory = self._http_runner.server
            if server is not None and factory is not None:
                self._http_adopting = close_keeping_backlog(server, factory, http_tls(self.options))
        if self._grpc is not None and self._grpc_stopping is None:
            # grpc.aio refuses new calls at once and lets the open ones go on; the drain
            # decides when to cancel what is left (a second stop() with its grace)
            self._grpc_stopping = asyncio.ensure_future(self._grpc.stop(_FOREVER_S))

    async def _drain_frontends(self, deadline: float) -> int:
        """Wait, up to ``deadline``, for every HTTP request and unary gRPC call the front
        ends had begun (the core still admits their work); close HTTP. How many were cut off
        at the deadline. Open gRPC streams stay open: their requests drain in the core."""
        self.refuse_new()
        left = max(0.0, deadline - time.monotonic())
        waits: list[Any] = []
        if self._native is not None:
            waits.append(self._native.drain(left))
        if self._http_runner is not None:
            from tritonlite.frontends.http.aio import CappedServer, drain

            if self._http_adopting:
                await asyncio.wait(self._http_adopting, timeout=left)
            http = self._http_runner.server
            assert isinstance(http, CappedServer)
            waits.append(drain(http, self._http_inflight, left, _DRAIN_IDLE_S))
        if self._grpc is not None:
            waits.append(self._grpc_inflight.wait_idle(left))
        cut = int(sum(await asyncio.gather(*waits)))
        if self._http_runner is not None and not cut:
            # closes the idle keep-alive connections (with requests cut off, the process
            # exits instead: no wait past the deadline)
            await self._http_runner.cleanup()
            self._runners.remove(self._http_runner)
            self._http_runner = None
        return cut

    async def _close_frontends(self, deadline: float) -> None:
        """End what is left -- gRPC streams whose requests have drained, given up to a
        second (within ``deadline``) to send their last responses and be half-closed by
        their clients -- and close."""
        grace = min(1.0, max(0.0, deadline - time.monotonic()))
        if self._native is not None:
            await self._native.stop(grace=grace)
        if self._grpc is not None:
            await self._grpc.stop(grace)  # then cancels the calls still open
            if self._grpc_stopping is not None:
                await self._grpc_stopping

    async def stop(self) -> None:
        """Graceful stop (Triton's order, with the front ends first): refuse new requests,
        answer every one that had begun -- the core still admits them -- within
        --exit-timeout-secs, then stop the core (queued, executing and decoupled work drains
        in what is left of the timeout), then close everything. Work still running at the
        timeout is cut off: logged with its count, and the process exits 1."""
        core = self.core
        deadline = time.monotonic() + self.options.exit_timeout_secs
        cut = await self._drain_frontends(deadline)
        core.exiting = True
        models = [m for m in core.repository.ready_models()]
        left = max(0.0, deadline - time.monotonic())
        if models:
            await asyncio.gather(*(m.drain(left) for m in models))
        streams_done = await core.drain_streams(max(0.0, deadline - time.monotonic()))
        # Work still running past the exit timeout: give up on it, as Triton does; closing its
        # connections or its instances would wait for it and ignore the bound.
        busy = any(m.scheduler.inflight() for m in models)
        self.cut_off = bool(cut) or not streams_done or busy
        if self.cut_off:
            log.error(
                "failed to stop server: Exit timeout expired. Exiting immediately. "
                "%d request(s) and call(s) cut off%s",
                cut,
                "" if streams_done and not busy else "; model work still running",
            )
            core.shm.close()
            core.trace.close()
            await core.pressure.stop()
            return
        await self._close_frontends(deadline)
        if self._metrics is not None:
            await self._metrics.stop(grace=0.0)
            await self.core.stop_sampling()
        for runner in self._runners:
            await runner.cleanup()
        await core.stop()
        log.info("tritonlite stopped")


async def serve(options: ServerOptions) -> int:
    server = Server(options)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal() -> None:
        server.refuse_new()  # from this loop step on; what has begun is still served
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
    log.info(
        "signal received: draining in-flight requests (up to %.0f s)", options.exit_timeout_secs
    )
    # The exit timeout bounds the whole stop, whatever it waits on (a model's finalize, an
    # instance thread, a connection): past it and a second to close, the process exits 1.
    stopping = asyncio.ensure_future(server.stop())
    done, _ = await asyncio.wait({stopping}, timeout=options.exit_timeout_secs + _CLOSE_GRACE_S)
    if not done:
        log.error(
            "failed to stop server: Exit timeout expired. Exiting immediately. "
            "Unloading the models and closing did not finish"
        )
        server.cut_off = True
    else:
        stopping.result()
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
