"""Test certificates made with the ``openssl`` command line: a CA, a server certificate for
127.0.0.1 and localhost, a client certificate (both signed by that CA) and a second CA that
signed nothing the server trusts."""

from __future__ import annotations

import subprocess
from pathlib import Path

NAMES = ("ca.pem", "server.pem", "server.key", "client.pem", "client.key", "other.pem", "other.key")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> dict[str, str]:
    """Write the certificates into ``d``; returns file name -> path."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=tritonlite test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=d,
    )
    (d / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for who in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={who}",
            "-keyout",
            f"{who}.key",
            "-out",
            f"{who}.csr",
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{who}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            f"{who}.ext",
            "-out",
            f"{who}.pem",
            cwd=d,
        )
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=other CA",
        "-keyout",
        "other.key",
        "-out",
        "other.pem",
        cwd=d,
    )
    return {name: str(d / name) for name in NAMES}
