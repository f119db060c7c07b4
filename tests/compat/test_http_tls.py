"""HTTP over TLS (--http-use-ssl) and mutual TLS (--http-use-ssl-mutual) with the real
tritonclient.http, on certificates made by ``certs.make_certs``."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import start_server
from repos import write_add_sub
from support.certs import make_certs

pytestmark = pytest.mark.timeout(90)

A = np.arange(16, dtype=np.float32).reshape(1, 16)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("tls_repo")
    write_add_sub(d, "add_sub", 8)
    return d


def _flags(certs: dict[str, str]) -> list[str]:
    return [
        "--allow-grpc=false",
        "--allow-metrics=false",
        "--http-use-ssl=true",
        f"--http-server-cert={certs['server.pem']}",
        f"--http-server-key={certs['server.key']}",
    ]


@pytest.fixture(scope="module")
def tls_server(repo: Path, certs: dict[str, str]) -> Iterator[Any]:
    s = start_server(repo, *_flags(certs))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mtls_server(repo: Path, certs: dict[str, str]) -> Iterator[Any]:
    s = start_server(
        repo, *_flags(certs), "--http-use-ssl-mutual=true", f"--http-root-cert={certs['ca.pem']}"
    )
    yield s
    s.stop()


def _infer(c: httpclient.InferenceServerClient) -> np.ndarray:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = httpclient.InferInput(name, [1, 16], "FP32")
        i.set_data_from_numpy(A)
        inputs.append(i)
    return c.infer("add_sub", inputs).as_numpy("OUTPUT0")


def _client(
    url: str, ca: str, cert: str | None = None, key: str | None = None
) -> httpclient.InferenceServerClient:
    def factory() -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=ca)
        if cert is not None:
            ctx.load_cert_chain(cert, key)
        return ctx

    return httpclient.InferenceServerClient(url, ssl=True, ssl_context_factory=factory)


def test_tls(tls_server: Any, certs: dict[str, str]) -> None:
    c = _client(tls_server.http_url, certs["ca.pem"])
    try:
        assert c.is_server_ready()
        np.testing.assert_array_equal(_infer(c), A + A)
    finally:
        c.close()


def test_tls_refuses_plaintext_and_untrusted(tls_server: Any, certs: dict[str, str]) -> None:
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://{tls_server.http_url}/v2/health/live", timeout=10)
    ctx = ssl.create_default_context(cafile=certs["other.pem"])
    with pytest.raises(urllib.error.URLError) as e:
        urllib.request.urlopen(
            f"https://{tls_server.http_url}/v2/health/live", timeout=10, context=ctx
        )
    assert isinstance(e.value.reason, ssl.SSLCertVerificationError)
    assert tls_server.proc.poll() is None


def test_mutual_tls(mtls_server: Any, certs: dict[str, str]) -> None:
    c = _client(mtls_server.http_url, certs["ca.pem"], certs["client.pem"], certs["client.key"])
    try:
        np.testing.assert_array_equal(_infer(c), A + A)
    finally:
        c.close()
    ctx = ssl.create_default_context(cafile=certs["ca.pem"])  # no client certificate
    with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
        urllib.request.urlopen(
            f"https://{mtls_server.http_url}/v2/health/live", timeout=10, context=ctx
        )


def test_flag_errors(repo: Path, certs: dict[str, str]) -> None:
    from tritonlite.cli import options_from_args

    base = ["--model-repository", str(repo)]
    with pytest.raises(SystemExit, match="--http-use-ssl requires --http-server-cert"):
        options_from_args([*base, "--http-use-ssl=true"])
    with pytest.raises(SystemExit, match="--http-use-ssl-mutual requires --http-root-cert"):
        options_from_args([*base, *_flags(certs)[2:], "--http-use-ssl-mutual=true"])
