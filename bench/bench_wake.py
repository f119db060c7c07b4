"""What a sleep costs the next request: perf_analyzer's gRPC bytes replayed in process.

    .venv/bin/python bench/bench_wake.py [--requests 5000] [--pauses 0,5,20,50,100,-100]

1. Serves the bench's ``model.py`` add_sub (``bench/models.py``) with tritonlite, puts a
   recording TCP proxy in front of its gRPC port and runs perf_analyzer through it at
   concurrency 1 for a few seconds: the client's byte stream, as the server reads it.
2. In this process, builds the same core and the native gRPC front end (``frontends/native``)
   and feeds that stream to one ``GrpcProtocol`` (a transport that discards what is written),
   one read at a time, with a pause before each: ``N`` sleeps N µs (the thread blocks, the CPU
   may go idle), ``-N`` spins N µs (the thread stays on its CPU), 0 none.
3. Prints the median and 10th percentile wall time of ``data_received`` (parsing, the core,
   the model, encoding and the write) per pause.

The difference between the sleep rows and the spin row is what ``frontends/wire/busypoll.py``
avoids. Runs on the current checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import write_python_repo  # noqa: E402
from perf import HOST, TritonliteServer, perf_analyzer_bin  # noqa: E402


class _Proxy:
    """A TCP proxy on its own loop thread that keeps what clients send, per connection."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.streams: list[list[bytes]] = []
        self.port = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            server = await asyncio.start_server(self._handle, HOST, 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection(HOST, self.target)
        mine: list[bytes] = []
        self.streams.append(mine)

        async def up() -> None:
            while data := await r.read(1 << 20):
                mine.append(data)
                uw.write(data)
            uw.close()

        async def down() -> None:
            while data := await ur.read(1 << 20):
                w.write(data)
            w.close()

        await asyncio.gather(up(), down(), return_exceptions=True)


class _Sink:
    """A transport that discards what is written."""

    def write(self, data: bytes) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": (HOST, 50000), "sockname": (HOST, 8001)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def record(repo: Path, seconds: int) -> list[bytes]:
    """The reads of perf_analyzer's longest gRPC connection at concurrency 1."""
    server = TritonliteServer(repo, Path(tempfile.mkdtemp()) / "server.log")
    ports = server.start()
    proxy = _Proxy(ports["grpc"])
    try:
        subprocess.run(
            [str(perf_analyzer_bin()), "-m", "add_sub", "-i", "grpc", "-u", f"{HOST}:{proxy.port}"]
            + ["--concurrency-range", "1:1", "--measurement-interval", str(seconds * 1000)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    finally:
        server.stop()
    return max(proxy.streams, key=len)


def _pause(us: int) -> None:
    if us > 0:
        time.sleep(us / 1e6)
    elif us < 0:
        end = time.perf_counter() - us / 1e6
        while time.perf_counter() < end:
            pass


async def replay(repo: Path, reads: list[bytes], pauses: list[int], n: int) -> None:
    from tritonlite.core.core import InferenceCore
    from tritonlite.frontends import native
    from tritonlite.options import ServerOptions

    opts = ServerOptions(model_repositories=(repo,))
    core = InferenceCore(opts)
    assert await core.start() == []
    server = native.grpc_server(core, opts)
    # the preface, SETTINGS and the first requests set the connection (and HPACK) up
    head, body = reads[:8], reads[8 : 8 + n]
    print(f"{len(body)} reads of {statistics.median(len(r) for r in body):.0f} bytes (median)")
    print("| before each request | data_received µs: median | p10 |")
    print("|---|---|---|")
    for us in pauses:
        proto = server.protocol()
        proto.connection_made(_Sink())  # type: ignore[arg-type]
        for data in head:
            proto.data_received(data)
        await asyncio.sleep(0)
        took = []
        for data in body:
            _pause(us)
            t0 = time.perf_counter_ns()
            proto.data_received(data)
            took.append(time.perf_counter_ns() - t0)
            await asyncio.sleep(0)
        proto.connection_lost(None)
        took.sort()
        label = "none" if us == 0 else (f"sleep {us} µs" if us > 0 else f"spin {-us} µs")
        print(
            f"| {label} | {statistics.median(took) / 1e3:.1f} | {took[len(took) // 10] / 1e3:.1f} |"
        )
    await core.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--seconds", type=int, default=3, help="perf_analyzer's measurement interval")
    ap.add_argument("--pauses", default="0,5,20,50,100,-100", help="µs; negative: spin")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_python_repo(Path(tmp) / "py", ("add_sub",))
        reads = record(repo, args.seconds)
        asyncio.run(replay(repo, reads, [int(p) for p in args.pauses.split(",")], args.requests))


if __name__ == "__main__":
    main()
