"""Print the package files one inference request touches, on each protocol.

Serves a dynamically batched ONNX ``add_sub`` in this process, warms it up, then records (with
``sys.setprofile`` on every thread) the Python functions that run while one HTTP
``POST /v2/models/add_sub/infer`` is answered, and then one gRPC ``ModelInfer``. Prints JSON:
``{"http": [...], "grpc": [...]}``, paths relative to ``tritonlite/``, sorted. A compiled twin's
code runs without profile events, so its ``_*_py.py`` source shows up only on the pure-Python
twins (``TRITONLITE_NO_EXTENSIONS=1``).

``docs/architecture.md`` lists these files ("Files one request touches");
``tests/test_architecture_doc.py`` runs this tool and compares.

Usage: ``python tools/trace_request.py [--frontend native|aio]``
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402

import tritonlite  # noqa: E402
from tools.onnx_graphs import add_sub, config_for, write_model  # noqa: E402
from tritonlite.cli import options_from_args  # noqa: E402
from tritonlite.server import Server  # noqa: E402

PACKAGE = Path(tritonlite.__file__).resolve().parent
BODY = json.dumps(
    {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "FP32", "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ]
    }
).encode()


class Recorder:
    """The package files whose Python functions are called while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.files: set[str] = set()
        self._lock = threading.Lock()

    def hook(self, frame: FrameType, event: str, _arg: Any) -> None:
        if not self.on or event != "call":
            return
        name = frame.f_code.co_filename
        if name.startswith(str(PACKAGE)):
            with self._lock:
                self.files.add(Path(name).resolve().relative_to(PACKAGE).as_posix())

    def take(self, run: Callable[[], None]) -> list[str]:
        self.files = set()
        self.on = True
        try:
            run()
        finally:
            self.on = False
        return sorted(self.files)


def http_infer(conn: http.client.HTTPConnection) -> None:
    conn.request("POST", "/v2/models/add_sub/infer", BODY, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    assert resp.status == 200, out
    assert out["outputs"][0]["data"] == [2 * i for i in range(16)]


def grpc_infer(client: grpcclient.InferenceServerClient) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(a)
    result = client.infer("add_sub", inputs)
    assert (result.as_numpy("OUTPUT0") == 2 * a).all()


def trace(frontend: str) -> dict[str, list[str]]:
    repo = Path(tempfile.mkdtemp(prefix="trace_repo_"))
    model = add_sub()
    write_model(
        repo,
        "add_sub",
        model,
        config_for(model, max_batch_size=8, name="add_sub", dynamic_batching=True),
    )
    options = options_from_args(
        [
            "--model-repository", str(repo),
            "--http-port", "0",
            "--grpc-port", "0",
            "--allow-metrics", "false",
            "--frontend", frontend,
            "--log-info", "false",
        ]
    )  # fmt: skip
    rec = Recorder()
    threading.setprofile(rec.hook)  # the server's threads (instance threads included)
    sys.setprofile(rec.hook)
    loop = asyncio.new_event_loop()
    server = Server(options)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    if not started.wait(60):
        raise RuntimeError("the server did not start")
    try:
        assert server.http_port is not None and server.grpc_port is not None
        # One protocol at a time, its connection opened before and closed after recording:
        # only the request counts, not another connection's timers or teardown.
        conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        for _ in range(3):  # first calls: lazy imports, caches
            http_infer(conn)
        files = {"http": rec.take(lambda: http_infer(conn))}
        conn.close()
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        for _ in range(3):
            grpc_infer(client)
        files["grpc"] = rec.take(lambda: grpc_infer(client))
        client.close()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
    return files


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frontend", default="native", choices=("native", "aio"))
    args = parser.parse_args(argv[1:])
    print(json.dumps(trace(args.frontend), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
