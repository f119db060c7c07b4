"""Large tensors over HTTP with the real client through a real server: on the native front end
an infer body of 64 KiB or more that arrives in pieces is collected in a reused block and its
tensors are views of it, so these check that what comes back is exactly what was sent -- binary
and JSON tensors, BYTES, several inputs and outputs, compressed bodies, a raw binary body, and
concurrent requests (a block must never be reused while a request still uses it)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server
from repos import build_large_repo, random_tensor, write_identity

pytestmark = pytest.mark.timeout(300)

DTYPES = ["FP32", "INT8", "FP64", "BOOL"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = build_large_repo(tmp_path_factory.mktemp("large_http_repo"), DTYPES)
    write_identity(repo, "id_flat", "FP32", (-1,), 0)
    s = start_server(repo)
    yield s
    s.stop()


@pytest.fixture()
def client(server: Server) -> Iterator[Any]:
    c = httpclient.InferenceServerClient(server.http_url, concurrency=8, network_timeout=120)
    yield c
    c.close()


def _inputs(arrays: dict[str, np.ndarray], dtype: str, binary: bool = True) -> list[Any]:
    inputs = []
    for name, arr in arrays.items():
        inp = httpclient.InferInput(name, list(arr.shape), dtype)
        inp.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(inp)
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1 << 20), (3, 33_337)])
def test_large_tensors_come_back_exact(client: Any, dtype: str, shape: Any) -> None:
    data = random_tensor(dtype, shape, seed=sum(shape))
    got = client.infer(f"id_{dtype.lower()}", _inputs({"INPUT0": data}, dtype)).as_numpy("OUTPUT0")
    assert got.dtype == data.dtype and got.shape == data.shape
    np.testing.assert_array_equal(got, data)


def test_a_large_json_body_comes_back_exact(client: Any) -> None:
    data = random_tensor("FP32", (1, 40_000), seed=3)  # a JSON body of about 400 KB
    result = client.infer("id_fp32", _inputs({"INPUT0": data}, "FP32", binary=False))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_a_large_bytes_tensor_comes_back_exact(client: Any) -> None:
    rng = np.random.default_rng(5)
    letters = rng.integers(32, 127, 40_000 * 30).astype(np.uint8).tobytes()
    items = [letters[i * 30 : i * 30 + int(n)] for i, n in enumerate(rng.integers(0, 30, 40_000))]
    data = np.array(items, dtype=np.object_).reshape(2, -1)
    result = client.infer("id_bytes", _inputs({"INPUT0": data}, "BYTES"))
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()


def test_several_large_inputs_and_outputs(client: Any) -> None:
    a = random_tensor("FP32", (1_500_001,), seed=1)
    b = random_tensor("FP32", (1_500_001,), seed=2)
    result = client.infer("add_sub_big", _inputs({"INPUT0": a, "INPUT1": b}, "FP32"))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_large_compressed_requests_are_served(client: Any, algorithm: str) -> None:
    data = np.tile(np.arange(1024, dtype=np.float32), (1, 2048))  # 8 MiB, compressible
    result = client.infer(
        "id_fp32", _inputs({"INPUT0": data}, "FP32"), request_compression_algorithm=algorithm
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_a_large_raw_binary_body(server: Server) -> None:
    """``Inference-Header-Content-Length: 0``: the body is the one input's bytes."""
    data = random_tensor("FP32", (300_000,), seed=9)
    req = urllib.request.Request(
        f"http://{server.http_url}/v2/models/id_flat/infer",
        data=data.tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        head_len = int(resp.headers["Inference-Header-Content-Length"])
        body = resp.read()
    np.testing.assert_array_equal(np.frombuffer(body[head_len:], np.float32), data)


def test_concurrent_large_requests_keep_their_own_bytes(client: Any) -> None:
    """Eight 4 MiB requests in flight at once, five times over, each with its own values: a
    block handed to a second request while the first still read it would mix them."""
    for round_ in range(5):
        arrays = [np.full((1, 1 << 20), round_ * 8 + i, dtype=np.float32) for i in range(8)]
        pending = [client.async_infer("id_fp32", _inputs({"INPUT0": a}, "FP32")) for a in arrays]
        for arr, p in zip(arrays, pending):
            np.testing.assert_array_equal(p.get_result().as_numpy("OUTPUT0"), arr)
