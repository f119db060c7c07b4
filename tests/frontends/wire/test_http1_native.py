"""The HTTP compat suites on the native HTTP/1.1 server, until the CLI wires --frontend=native.

Three roles in one file:

* run as a script (``python test_http1_native.py <tritonserver flags>``) it is tritonlite with
  its HTTP front end on ``start_http_native`` (the same handlers, a real InferenceCore; gRPC
  and metrics as usual);
* as a pytest plugin (``-p test_http1_native``, with this directory on ``PYTHONPATH``) it
  makes ``tests/conftest.py``'s ``start_server`` launch that script instead of
  ``python -m tritonlite``, so every existing HTTP test runs against the native server
  unchanged::

      PYTHONPATH=tests/frontends/wire .venv/bin/python -m pytest -p test_http1_native \\
          tests/compat/test_http.py

* as a test module, it checks a real tritonclient against such a server.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

RUNNER = str(Path(__file__).resolve())
MARK = "HTTP front end: native"


def _popen(cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.Popen[str]:
    if cmd[1:3] == ["-m", "tritonlite"]:
        cmd = [cmd[0], RUNNER, *cmd[3:]]
    return subprocess.Popen(cmd, *args, **kwargs)


def _native_subprocess() -> types.ModuleType:
    shim = types.ModuleType("subprocess_native_http")
    shim.__dict__.update(vars(subprocess))
    shim.Popen = _popen  # type: ignore[attr-defined]
    return shim


def use_native(conftest: Any) -> None:
    """Make ``conftest.start_server`` start the native-HTTP runner."""
    if not getattr(conftest.subprocess, "_native_http", False):
        shim = _native_subprocess()
        shim._native_http = True  # type: ignore[attr-defined]
        conftest.subprocess = shim


def pytest_sessionstart(session: pytest.Session) -> None:
    """Plugin role (``-p test_http1_native``): every server the tests start is native."""
    conftest = sys.modules.get("conftest")
    if conftest is not None and hasattr(conftest, "start_server"):
        use_native(conftest)


# -- the runner ------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    from tritonlite import cli, logs, server
    from tritonlite.frontends.http.app import make_dispatch
    from tritonlite.frontends.wire import http1

    log = logging.getLogger("tritonlite")

    async def start_native_http(self: Any) -> None:
        opts = self.options
        if opts.allow_grpc:
            from tritonlite.frontends.grpc.server import start_grpc

            self._grpc, self.grpc_port = await start_grpc(self.core, opts)
            log.info("Started GRPCInferenceService at %s:%d", opts.grpc_address, self.grpc_port)
        if opts.allow_http:
            limits = http1.HttpLimits(max_body=opts.http_max_input_size)
            native = await http1.start_http_native(
                make_dispatch(self.core), opts.http_address, opts.http_port,
                ssl_context=server.http_tls(opts), reuse_port=opts.reuse_http_port,
                limits=limits)
            self._native = native  # Server.stop() calls its stop(grace)
            self.http_port = native.port
            log.info("%s (%s)", MARK, http1.describe())
            log.info("Started HTTPService at %s:%d", opts.http_address, self.http_port)

    server.Server._start_aio = start_native_http  # type: ignore[method-assign]
    options = cli.options_from_args(argv)
    logs.configure(options.log_verbose, options.log_format == "ISO8601", options.log_file)
    return server.run(options)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# -- tests -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def native_server(onnx_repo: Path) -> Any:
    import conftest

    saved = conftest.subprocess
    use_native(conftest)
    try:
        s = conftest.start_server(onnx_repo)
    finally:
        conftest.subprocess = saved
    yield s
    s.stop()


def test_the_runner_serves_http_natively(native_server: Any) -> None:
    assert MARK in native_server.output()


def test_tritonclient_infer_over_native_http(native_server: Any) -> None:
    import numpy as np
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(native_server.http_url)
    try:
        assert client.is_server_live() and client.is_server_ready()
        a = np.arange(16, dtype=np.float32).reshape(1, 16)
        for binary in (True, False):
            inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
            for i in inputs:
                i.set_data_from_numpy(a, binary_data=binary)
            outputs = [httpclient.InferRequestedOutput(n, binary_data=binary)
                       for n in ("OUTPUT0", "OUTPUT1")]
            for compression in (None, "gzip", "deflate"):
                res = client.infer("add_sub", inputs, outputs=outputs,
                                   request_compression_algorithm=compression,
                                   response_compression_algorithm=compression)
                np.testing.assert_array_equal(res.as_numpy("OUTPUT0"), a + a)
                np.testing.assert_array_equal(res.as_numpy("OUTPUT1"), a - a)
    finally:
        client.close()
