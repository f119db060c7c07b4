"""Large tensors over gRPC with the real client through a real server: a large request is
assembled in a reused block (read straight from the socket where it can be) and its tensors
are views of it, so these check that what comes back is exactly what was sent, for several
dtypes and shapes, BYTES, several inputs and outputs, compressed requests, and concurrent
requests on one connection (a block must never be reused while a request still uses it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import Server, start_server, wait_until
from repos import build_large_repo, random_tensor

pytestmark = pytest.mark.timeout(300)

DTYPES = ["FP32", "INT8", "UINT16", "FP16", "INT64", "FP64", "BOOL"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = build_large_repo(tmp_path_factory.mktemp("large_grpc_repo"), DTYPES)
    s = start_server(repo)
    yield s
    s.stop()


@pytest.fixture()
def client(server: Server) -> Iterator[Any]:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


def _infer(client: Any, model: str, arrays: dict[str, np.ndarray], dtype: str, **kw: Any) -> Any:
    inputs = []
    for name, arr in arrays.items():
        inp = grpcclient.InferInput(name, list(arr.shape), dtype)
        inp.set_data_from_numpy(arr)
        inputs.append(inp)
    return client.infer(model, inputs, client_timeout=120, **kw)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1 << 20), (1023, 1031), (3, 333_337)])
def test_large_tensors_of_every_size_come_back_exact(client: Any, dtype: str, shape: Any) -> None:
    data = random_tensor(dtype, shape, seed=sum(shape))
    result = _infer(client, f"id_{dtype.lower()}", {"INPUT0": data}, dtype)
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == data.dtype and got.shape == data.shape
    np.testing.assert_array_equal(got, data)


def test_a_large_bytes_tensor_comes_back_exact(client: Any) -> None:
    rng = np.random.default_rng(5)
    # UTF-8 text (the ONNX Runtime backend takes no other strings), lengths 0-59
    letters = rng.integers(32, 127, 120_000 * 60).astype(np.uint8).tobytes()
    items = [letters[i * 60 : i * 60 + int(n)] for i, n in enumerate(rng.integers(0, 60, 120_000))]
    data = np.array(items, dtype=np.object_).reshape(2, -1)
    result = _infer(client, "id_bytes", {"INPUT0": data}, "BYTES")
    assert result.as_numpy("OUTPUT0").tolist() == data.tolist()


def test_several_large_inputs_and_outputs(client: Any) -> None:
    a = random_tensor("FP32", (1_500_001,), seed=1)
    b = random_tensor("FP32", (1_500_001,), seed=2)
    result = _infer(client, "add_sub_big", {"INPUT0": a, "INPUT1": b}, "FP32")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_large_compressed_requests_are_served(client: Any, algorithm: str) -> None:
    data = np.tile(np.arange(1024, dtype=np.float32), (1, 2048))  # 8 MiB, compressible
    result = _infer(client, "id_fp32", {"INPUT0": data}, "FP32", compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_concurrent_large_requests_keep_their_own_bytes(client: Any) -> None:
    """Eight 4 MiB requests in flight at once, five times over, each with its own values: a
    block handed to a second request while the first still read it would mix them."""
    for round_ in range(5):
        arrays = [np.full((1, 1 << 20), round_ * 8 + i, dtype=np.float32) for i in range(8)]
        results: list[Any] = [None] * 8
        for i, arr in enumerate(arrays):
            inp = grpcclient.InferInput("INPUT0", list(arr.shape), "FP32")
            inp.set_data_from_numpy(arr)
            client.async_infer("id_fp32", [inp], _into(results, i), client_timeout=120)
        wait_until(lambda: all(r is not None for r in results), 120)  # noqa: B023
        for i, got in enumerate(results):
            assert isinstance(got, np.ndarray), got
            np.testing.assert_array_equal(got, arrays[i])


def _into(results: list[Any], i: int) -> Any:
    """An async_infer callback that stores request ``i``'s output (or its error)."""

    def callback(result: Any, error: Any) -> None:
        results[i] = error if error is not None else result.as_numpy("OUTPUT0")

    return callback
