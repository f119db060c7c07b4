"""gRPC over TLS (--grpc-use-ssl) and mutual TLS (--grpc-use-ssl-mutual) with the real
tritonclient.grpc, on certificates made here: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate, all signed by that CA (the ``openssl`` command line).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import start_server
from repos import write_add_sub
from support.certs import make_certs
from tritonclient.utils import InferenceServerException

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


def _infer(c: grpcclient.InferenceServerClient) -> np.ndarray:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        i = grpcclient.InferInput(name, [1, 16], "FP32")
        i.set_data_from_numpy(A)
        inputs.append(i)
    return c.infer("add_sub", inputs, client_timeout=30).as_numpy("OUTPUT0")


def _tls_flags(certs: dict[str, str]) -> list[str]:
    return [
        "--allow-http=false",
        "--allow-metrics=false",
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certs['server.pem']}",
        f"--grpc-server-key={certs['server.key']}",
    ]


@pytest.fixture(scope="module")
def tls_server(repo: Path, certs: dict[str, str]) -> Iterator[Any]:
    s = start_server(repo, *_tls_flags(certs))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mtls_server(repo: Path, certs: dict[str, str]) -> Iterator[Any]:
    s = start_server(
        repo,
        *_tls_flags(certs),
        "--grpc-use-ssl-mutual=true",
        f"--grpc-root-cert={certs['ca.pem']}",
    )
    yield s
    s.stop()


def test_tls(tls_server: Any, certs: dict[str, str]) -> None:
    c = grpcclient.InferenceServerClient(
        tls_server.grpc_url, ssl=True, root_certificates=certs["ca.pem"]
    )
    try:
        assert c.is_server_ready()
        np.testing.assert_array_equal(_infer(c), A + A)
    finally:
        c.close()


def test_tls_localhost_name(tls_server: Any, certs: dict[str, str]) -> None:
    port = tls_server.grpc_url.rsplit(":", 1)[1]
    c = grpcclient.InferenceServerClient(
        f"localhost:{port}", ssl=True, root_certificates=certs["ca.pem"]
    )
    try:
        assert c.is_server_live()
    finally:
        c.close()


def test_tls_rejects_plaintext_and_untrusted(tls_server: Any, certs: dict[str, str]) -> None:
    plain = grpcclient.InferenceServerClient(tls_server.grpc_url)
    with pytest.raises(InferenceServerException) as e:
        plain.is_server_live(client_timeout=10)
    assert e.value.status() == str(grpc.StatusCode.UNAVAILABLE)
    plain.close()
    untrusted = grpcclient.InferenceServerClient(
        tls_server.grpc_url, ssl=True, root_certificates=certs["other.pem"]
    )
    with pytest.raises(InferenceServerException) as e:
        untrusted.is_server_live(client_timeout=10)
    assert e.value.status() == str(grpc.StatusCode.UNAVAILABLE)
    untrusted.close()


def test_mutual_tls(mtls_server: Any, certs: dict[str, str]) -> None:
    c = grpcclient.InferenceServerClient(
        mtls_server.grpc_url,
        ssl=True,
        root_certificates=certs["ca.pem"],
        private_key=certs["client.key"],
        certificate_chain=certs["client.pem"],
    )
    try:
        np.testing.assert_array_equal(_infer(c), A + A)
    finally:
        c.close()


def test_mutual_tls_rejects_client_without_certificate(
    mtls_server: Any, certs: dict[str, str]
) -> None:
    c = grpcclient.InferenceServerClient(
        mtls_server.grpc_url, ssl=True, root_certificates=certs["ca.pem"]
    )
    try:
        with pytest.raises(InferenceServerException) as e:
            c.is_server_live(client_timeout=10)
        assert e.value.status() == str(grpc.StatusCode.UNAVAILABLE)
    finally:
        c.close()
    # a certificate the server's root did not sign is refused too
    wrong = grpcclient.InferenceServerClient(
        mtls_server.grpc_url,
        ssl=True,
        root_certificates=certs["ca.pem"],
        private_key=certs["other.key"],
        certificate_chain=certs["other.pem"],
    )
    try:
        with pytest.raises(InferenceServerException):
            wrong.is_server_live(client_timeout=10)
    finally:
        wrong.close()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--grpc-use-ssl=true"], "--grpc-use-ssl requires --grpc-server-cert"),
        (
            ["--grpc-use-ssl-mutual=true", "--grpc-server-cert=/x", "--grpc-server-key=/y"],
            "--grpc-use-ssl-mutual requires --grpc-root-cert",
        ),
        (
            [
                "--grpc-use-ssl=true",
                "--grpc-server-cert=/no/such.pem",
                "--grpc-server-key=/no/such.key",
            ],
            "/no/such.pem",
        ),
        (
            ["--grpc-infer-response-compression-level=max"],
            "--grpc-infer-response-compression-level",
        ),
        (["--grpc-keepalive-time=-5"], "--grpc-keepalive-time"),
    ],
)
def test_bad_grpc_flags_fail_the_start(repo: Path, flags: list[str], message: str) -> None:
    with pytest.raises(RuntimeError) as e:
        start_server(repo, "--allow-http=false", "--allow-metrics=false", *flags)
    assert message in str(e.value)
