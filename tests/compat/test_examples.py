"""The bundled example repository (``tools/make_examples.py``): every model loads and answers.

A fresh copy is generated into a temp dir (the same code ``make install`` runs), served by a
real server and queried with tritonclient; a second generation writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import Server, start_server

from tools import make_examples
from tools.onnx_graphs import mlp_reference

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("examples")
    assert make_examples.generate(path)
    return path


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(repo, "--allow-metrics=false")
    yield s
    s.stop()


def test_generation_is_idempotent(repo: Path) -> None:
    assert make_examples.generate(repo) == []
    (repo / "add_sub_python" / "config.pbtxt").write_text("edited by hand")
    assert make_examples.generate(repo) == [Path("add_sub_python/config.pbtxt")]


def test_every_example_model_is_ready(server: Server, repo: Path) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    expected = {p.name for p in repo.iterdir() if p.is_dir()}
    rows = {r["name"]: r for r in client.get_model_repository_index()}
    assert set(rows) == expected
    for row in rows.values():
        assert row.get("state") == "READY", row
    assert {"add_sub_python", "mlp_pipeline", "accumulator"} <= expected


def _input(mod: object, name: str, x: np.ndarray, dtype: str = "FP32") -> object:
    inp = mod.InferInput(name, list(x.shape), dtype)  # type: ignore[attr-defined]
    inp.set_data_from_numpy(x)
    return inp


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_examples_answer(server: Server, protocol: str) -> None:
    mod = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = mod.InferenceServerClient(url)
    rng = np.random.default_rng(3)

    a = rng.standard_normal((2, 16)).astype(np.float32)
    b = rng.standard_normal((2, 16)).astype(np.float32)
    r = client.infer("add_sub", [_input(mod, "INPUT0", a), _input(mod, "INPUT1", b)])
    np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    r = client.infer("add_sub_nobatch", [_input(mod, "INPUT0", a[0]), _input(mod, "INPUT1", b[0])])
    np.testing.assert_allclose(r.as_numpy("OUTPUT1"), a[0] - b[0], rtol=1e-6)

    a4, b4 = a[:, :4].copy(), b[:, :4].copy()
    r = client.infer("add_sub_python", [_input(mod, "INPUT0", a4), _input(mod, "INPUT1", b4)])
    np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a4 + b4, rtol=1e-6)
    np.testing.assert_allclose(r.as_numpy("OUTPUT1"), a4 - b4, rtol=1e-6)

    words = np.array([[b"ab", b"", b"xyz"]], dtype=object)
    r = client.infer("identity_string", [_input(mod, "INPUT0", words, "BYTES")])
    assert r.as_numpy("OUTPUT0").tolist() == words.tolist()

    raw = rng.standard_normal((2, 1024)).astype(np.float32)
    r = client.infer("mlp", [_input(mod, "INPUT0", raw)])
    np.testing.assert_allclose(r.as_numpy("OUTPUT0"), mlp_reference(raw), rtol=1e-3, atol=1e-3)

    r = client.infer("mlp_pipeline", [_input(mod, "RAW", raw)])
    norm = (raw - raw.mean(axis=1, keepdims=True)) / (raw.std(axis=1, keepdims=True) + 1e-6)
    logits = mlp_reference(norm)
    probs = r.as_numpy("PROBABILITIES")
    np.testing.assert_allclose(probs.sum(axis=1), [1.0, 1.0], rtol=1e-5)
    assert probs.shape == (2, 1024)
    np.testing.assert_array_equal(r.as_numpy("CLASS").ravel(), logits.argmax(axis=1))

    seq = 1000 + (protocol == "grpc")
    totals = []
    for i, v in enumerate([1.0, 2.0, 4.5]):
        r = client.infer(
            "accumulator",
            [_input(mod, "INPUT", np.array([[v]], np.float32))],
            sequence_id=seq,
            sequence_start=i == 0,
            sequence_end=i == 2,
        )
        totals.append(float(r.as_numpy("OUTPUT")[0, 0]))
    assert totals == [1.0, 3.0, 7.5]
