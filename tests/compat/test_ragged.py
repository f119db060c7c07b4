"""Ragged batching as Triton's L0_batch_input shows it: ragged inputs (``allow_ragged_batch``),
every ``batch_input`` kind and the ``BATCH_SCATTER_WITH_INPUT_SHAPE`` batch output, over real
ONNX models built here, driven with tritonclient over HTTP and gRPC.

The models echo what they receive the way Triton's QA models do: ``BATCH_AND_SIZE_INPUT`` (one
value per request) gives the output its batch dim, and each ``*_OUTPUT`` row repeats the whole
1-D input, so every request reads back the batch's ragged input and batch inputs. Requests are
sent in order (gRPC: one stream; HTTP: each once the server queues the one before); the batcher
waits up to 2 s and the batch leaves as soon as it is full, and the statistics say it formed one
batch of 4.
"""

from __future__ import annotations

import http.client
import queue
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
import tritonclient.http as httpclient
from conftest import Server, start_server
from hook_schedules import Urls, wait_pending
from onnx import TensorProto, helper
from onnx_models import write_model
from repos import client_for
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(180)

PROTOCOLS = ["http", "grpc"]
ONNX_TYPE = {"FP32": TensorProto.FLOAT, "INT32": TensorProto.INT32, "BYTES": TensorProto.STRING}
_OPSET, _IR = 17, 8


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = _IR
    onnx.checker.check_model(model)
    return model


def _value(name: str, dtype: str, dims: Sequence[str | int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, ONNX_TYPE[dtype], list(dims))


def batch_input_model() -> onnx.ModelProto:
    """Triton's ragged QA model: three 1-D FP32 inputs (RAGGED_INPUT, BATCH_AND_SIZE_INPUT,
    BATCH_INPUT); each X_OUTPUT is [len(BATCH_AND_SIZE_INPUT), len(X_INPUT)], every row X_INPUT
    (ones(n, 1) @ X_INPUT as a row)."""

    def shape(name: str, values: list[int]) -> onnx.NodeProto:
        tensor = helper.make_tensor(f"{name}_value", TensorProto.INT64, [2], values)
        return helper.make_node("Constant", [], [name], value=tensor)

    nodes = [shape("as_row", [1, -1]), shape("as_column", [-1, 1])]
    nodes.append(
        helper.make_node("Div", ["BATCH_AND_SIZE_INPUT", "BATCH_AND_SIZE_INPUT"], ["ones"])
    )
    nodes.append(helper.make_node("Reshape", ["ones", "as_column"], ["ones_column"]))
    for x in ("RAGGED", "BATCH_AND_SIZE", "BATCH"):
        nodes.append(helper.make_node("Reshape", [f"{x}_INPUT", "as_row"], [f"{x}_row"]))
        nodes.append(helper.make_node("MatMul", ["ones_column", f"{x}_row"], [f"{x}_OUTPUT"]))
    names = ("RAGGED", "BATCH_AND_SIZE", "BATCH")
    graph = helper.make_graph(
        nodes,
        "batch_input",
        [_value(f"{x}_INPUT", "FP32", [f"{x}_n"]) for x in names],
        [_value(f"{x}_OUTPUT", "FP32", [f"{x}_rows", f"{x}_cols"]) for x in names],
    )
    return _model(graph)


def batch_item_model(dtype: str) -> onnx.ModelProto:
    """RAGGED_INPUT [-1] (unused) and BATCH_INPUT [-1, 2] -> BATCH_OUTPUT = BATCH_INPUT."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["BATCH_INPUT"], ["BATCH_OUTPUT"])],
        "batch_item",
        [_value("RAGGED_INPUT", "FP32", ["n"]), _value("BATCH_INPUT", dtype, ["items", 2])],
        [_value("BATCH_OUTPUT", dtype, ["rows", 2])],
    )
    return _model(graph)


def identity_1d_model(dtype: str = "FP32") -> onnx.ModelProto:
    """INPUT0 [-1] -> OUTPUT0 [-1]: Triton's non-batching identity, served with batching."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity_1d",
        [_value("INPUT0", dtype, ["n"])],
        [_value("OUTPUT0", dtype, ["n"])],
    )
    return _model(graph)


BATCHER = "dynamic_batching { max_queue_delay_microseconds: 2000000 }\n"


def batch_input_config(
    name: str, kind1: str, kind2: str, ragged_dims: str = "-1", batcher: str = BATCHER
) -> str:
    outputs = "".join(
        f'output [ {{ name: "{x}_OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]\n'
        for x in ("RAGGED", "BATCH_AND_SIZE", "BATCH")
    )
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
        f'input [ {{ name: "RAGGED_INPUT" data_type: TYPE_FP32 dims: [ {ragged_dims} ] '
        "allow_ragged_batch: true } ]\n"
        f"{outputs}"
        "batch_input [\n"
        f'  {{ kind: {kind1} target_name: "BATCH_AND_SIZE_INPUT" data_type: TYPE_FP32 '
        'source_input: "RAGGED_INPUT" },\n'
        f'  {{ kind: {kind2} target_name: "BATCH_INPUT" data_type: TYPE_FP32 '
        'source_input: "RAGGED_INPUT" }\n]\n'
        f"{batcher}"
    )


def batch_item_config(name: str, dtype: str = "FP32", kind: str = "BATCH_ITEM_SHAPE") -> str:
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
        'input [ { name: "RAGGED_INPUT" data_type: TYPE_FP32 dims: [ -1, -1 ] '
        "allow_ragged_batch: true } ]\n"
        f'output [ {{ name: "BATCH_OUTPUT" data_type: TYPE_{dtype} dims: [ 2 ] }} ]\n'
        f'batch_input [ {{ kind: {kind} target_name: "BATCH_INPUT" data_type: TYPE_{dtype} '
        'source_input: "RAGGED_INPUT" } ]\n' + BATCHER
    )


def ragged_io_config(name: str, batcher: str = BATCHER, batch_output: bool = True) -> str:
    scatter = (
        'batch_output [ { target_name: "OUTPUT0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE '
        'source_input: "INPUT0" } ]\n'
    )
    return (
        f'name: "{name}"\nbackend: "onnxruntime"\nmax_batch_size: 4\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        + (scatter if batch_output else "")
        + batcher
    )


def _models() -> dict[str, tuple[onnx.ModelProto, str]]:
    bi, item, item_i32, io = (
        batch_input_model(),
        batch_item_model("FP32"),
        batch_item_model("INT32"),
        identity_1d_model(),
    )
    acc_zero = ("BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO")
    acc_shape = ("BATCH_ACCUMULATED_ELEMENT_COUNT", "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE")
    return {
        "ragged_element_count_acc_zero": (bi, batch_input_config("x", *acc_zero)),
        "ragged_acc_shape": (bi, batch_input_config("x", *acc_shape)),
        "ragged_acc_shape_unbatched": (bi, batch_input_config("x", *acc_shape, batcher="")),
        "batch_item_flatten": (
            bi,
            batch_input_config("x", "BATCH_ELEMENT_COUNT", "BATCH_ITEM_SHAPE_FLATTEN", "-1, -1"),
        ),
        "batch_item": (item, batch_item_config("x")),
        "batch_item_int32": (item_i32, batch_item_config("x", "INT32")),
        "ragged_io": (io, ragged_io_config("x")),
        "ragged_io_unbatched": (io, ragged_io_config("x", batcher="")),
        "ragged_io_bytes": (
            identity_1d_model("BYTES"),
            ragged_io_config("x").replace("TYPE_FP32", "TYPE_STRING"),
        ),
        "ragged_io_nonbatching": (
            io,
            ragged_io_config("x", batcher="")
            .replace("max_batch_size: 4", "max_batch_size: 0")
            .replace("dims: [ -1 ]", "dims: [ -1, -1 ]"),
        ),
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("ragged")
    for name, (model, config) in _models().items():
        write_model(repo, name, model, config.replace('name: "x"', f'name: "{name}"'))
    s = start_server(repo)  # metrics: the pending count orders HTTP requests (_http_in_order)
    yield s
    s.stop()


def _batches(server: Server, model: str) -> dict[int, int]:
    client, _ = client_for(server, "http")
    stats = client.get_inference_statistics(model)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}


def _infer_together(
    server: Server,
    protocol: str,
    model: str,
    arrays: list[np.ndarray],
    output: str,
    input_name: str = "RAGGED_INPUT",
) -> list[np.ndarray]:
    """Send one request per array at once, in order (HTTP: one connection each, written one
    after another; gRPC: one stream); each request's ``output``, in send order."""
    _, mod = client_for(server, protocol)
    requests = []
    for a in arrays:
        inp = mod.InferInput(input_name, list(a.shape), "BYTES" if a.dtype == object else "FP32")
        inp.set_data_from_numpy(a)
        requests.append(([inp], [mod.InferRequestedOutput(output)]))
    if protocol == "http":
        return [r.as_numpy(output) for r in _http_in_order(server, model, requests)]
    client = mod.InferenceServerClient(server.grpc_url)
    # One stream keeps the send order (separate unary calls may overtake each other).
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: done.put((result, error)))
    for k, (i, o) in enumerate(requests):
        client.async_stream_infer(model, i, outputs=o, request_id=str(k))
    got: dict[int, Any] = {}
    for _ in requests:
        result, error = done.get(timeout=30)
        if error is not None:
            raise error
        got[int(result.get_response().id)] = result
    client.stop_stream()
    results = [got[k] for k in range(len(requests))]
    client.close()
    return [r.as_numpy(output) for r in results]


def _http_in_order(
    server: Server, model: str, requests: list[tuple[list[Any], list[Any]]]
) -> list[Any]:
    """POST each request on its own connection, the next only once the server holds the one
    before in its queue (its pending count), then read the answers: the batch takes them in
    that order. (Separate connections alone keep no order: tritonclient's ``async_infer`` and
    requests written one after another both came out of order under load.)"""
    conns = [http.client.HTTPConnection(server.http_url, timeout=30) for _ in requests]
    for conn in conns:
        conn.connect()
    urls = Urls(server.http_url, server.grpc_url, server.metrics_url)
    for k, (conn, (inputs, outputs)) in enumerate(zip(conns, requests)):
        if k:
            wait_pending(urls, model, k)
        body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
        headers = {} if json_size is None else {"Inference-Header-Content-Length": str(json_size)}
        conn.request("POST", f"/v2/models/{model}/infer", body, headers)
    results = []
    for conn in conns:
        response = conn.getresponse()
        content = response.read()
        assert response.status == 200, content
        length = response.getheader("Inference-Header-Content-Length")
        results.append(
            httpclient.InferenceServerClient.parse_response_body(
                content, header_length=None if length is None else int(length)
            )
        )
        conn.close()
    return results


def _full(shapes: list[tuple[int, ...]], value: Any = None) -> list[np.ndarray]:
    """Triton's test inputs: request k filled with its own size along dim 1 (or ``value``)."""
    return [np.full(s, s[1] if value is None else value, np.float32) for s in shapes]


RAGGED = [(1, 2), (1, 4), (1, 1), (1, 3)]  # L0_batch_input's four requests


def _one_batch_of_4(server: Server, model: str, send: Any) -> list[np.ndarray]:
    before = _batches(server, model)
    out: list[np.ndarray] = send()
    after = _batches(server, model)
    assert {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)} == {4: 1}
    return out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_element_count(server: Server, protocol: str) -> None:
    model = "ragged_element_count_acc_zero"
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, _full(RAGGED), "BATCH_AND_SIZE_OUTPUT"),
    )
    for out in outs:
        np.testing.assert_array_equal(out, np.array([[2, 4, 1, 3]], np.float32))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_accumulated_element_count_with_zero(server: Server, protocol: str) -> None:
    model = "ragged_element_count_acc_zero"
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, _full(RAGGED), "BATCH_OUTPUT"),
    )
    for out in outs:
        np.testing.assert_array_equal(out, np.array([[0, 2, 6, 7, 10]], np.float32))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_accumulated_element_count(server: Server, protocol: str) -> None:
    model = "ragged_acc_shape"
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, _full(RAGGED), "BATCH_AND_SIZE_OUTPUT"),
    )
    for out in outs:
        np.testing.assert_array_equal(out, np.array([[2, 6, 7, 10]], np.float32))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_max_element_count_as_shape(server: Server, protocol: str) -> None:
    model = "ragged_acc_shape"
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, _full(RAGGED), "BATCH_OUTPUT"),
    )
    assert [o.shape for o in outs] == [(1, 4)] * 4


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ragged_input_is_concatenated(server: Server, protocol: str) -> None:
    model = "ragged_acc_shape"
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, _full(RAGGED), "RAGGED_OUTPUT"),
    )
    expected = np.array([[2, 2, 4, 4, 4, 4, 1, 3, 3, 3]], np.float32)
    for out in outs:
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_batch_item_shape_flatten(server: Server, protocol: str) -> None:
    model = "batch_item_flatten"
    shapes = [(1, 4, 1), (1, 1, 2), (1, 1, 2), (1, 2, 2)]
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, _full(shapes, 1.0), "BATCH_OUTPUT"),
    )
    for out in outs:
        np.testing.assert_array_equal(out, np.array([[4, 1, 1, 2, 1, 2, 2, 2]], np.float32))


@pytest.mark.parametrize("model", ["batch_item", "batch_item_int32"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_batch_item_shape(server: Server, protocol: str, model: str) -> None:
    # Three requests, four batch items: the first request has batch size 2.
    shapes = [(2, 1, 2), (1, 1, 2), (1, 2, 2)]
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, _full(shapes, 1.0), "BATCH_OUTPUT"),
    )
    dtype = np.int32 if model.endswith("int32") else np.float32
    expected = [np.array(e, dtype) for e in ([[1, 2], [1, 2]], [[1, 2]], [[2, 2]])]
    for out, want in zip(outs, expected, strict=True):
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_batch_output_scatters_by_input_shape(server: Server, protocol: str) -> None:
    model = "ragged_io"
    arrays = [np.arange(s[1], dtype=np.float32).reshape(s) + 10 * k for k, s in enumerate(RAGGED)]
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, arrays, "OUTPUT0", input_name="INPUT0"),
    )
    for out, sent in zip(outs, arrays, strict=True):
        assert out.shape == sent.shape
        np.testing.assert_array_equal(out, sent)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ragged_bytes_input(server: Server, protocol: str) -> None:
    model = "ragged_io_bytes"
    arrays = [
        np.array([[f"r{k}e{i}".encode() for i in range(s[1])]], dtype=object)
        for k, s in enumerate(RAGGED)
    ]
    outs = _one_batch_of_4(
        server,
        model,
        lambda: _infer_together(server, protocol, model, arrays, "OUTPUT0", input_name="INPUT0"),
    )
    for out, sent in zip(outs, arrays, strict=True):
        assert out.shape == sent.shape
        assert out.tolist() == sent.tolist()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_batch_of_one_without_dynamic_batching(server: Server, protocol: str) -> None:
    model = "ragged_acc_shape_unbatched"
    (ragged,) = _infer_together(server, protocol, model, _full([(1, 3)]), "RAGGED_OUTPUT")
    (counts,) = _infer_together(server, protocol, model, _full([(1, 3)]), "BATCH_AND_SIZE_OUTPUT")
    (shape,) = _infer_together(server, protocol, model, _full([(1, 3)]), "BATCH_OUTPUT")
    np.testing.assert_array_equal(ragged, np.full((1, 3), 3, np.float32))
    np.testing.assert_array_equal(counts, np.array([[3]], np.float32))
    assert shape.shape == (1, 3)
    sent = np.arange(5, dtype=np.float32).reshape(1, 5)
    (echo,) = _infer_together(server, protocol, "ragged_io_unbatched", [sent], "OUTPUT0", "INPUT0")
    np.testing.assert_array_equal(echo, sent)
    # Without batching (max_batch_size 0) the ragged input still reaches the model flattened.
    sent = np.arange(6, dtype=np.float32).reshape(2, 3)
    (echo,) = _infer_together(
        server, protocol, "ragged_io_nonbatching", [sent], "OUTPUT0", "INPUT0"
    )
    np.testing.assert_array_equal(echo, sent)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_cannot_feed_a_batch_input(server: Server, protocol: str) -> None:
    client, mod = client_for(server, protocol)
    inputs = []
    for name, shape in (("RAGGED_INPUT", [1, 2]), ("BATCH_INPUT", [1, 1])):
        inp = mod.InferInput(name, shape, "FP32")
        inp.set_data_from_numpy(np.ones(shape, np.float32))
        inputs.append(inp)
    with pytest.raises(InferenceServerException) as e:
        client.infer("ragged_acc_shape_unbatched", inputs)
    # Triton's count check answers first: a batch input is not a configuration input.
    assert "expected 1 inputs but got 2 inputs for model" in e.value.message(), e.value
    client.close()
    assert client_for(server, protocol)[0].is_server_live()


# -- configs Triton refuses ----------------------------------------------------------------------


def _bad(config: str, old: str, new: str) -> str:
    assert old in config, (old, config)
    return config.replace(old, new)


BI = batch_input_config("x", "BATCH_ELEMENT_COUNT", "BATCH_ACCUMULATED_ELEMENT_COUNT")
BAD_CONFIGS: dict[str, tuple[str, str, str]] = {
    # name: (model kind, config, text the load error holds)
    "unknown_source": (
        "bi",
        _bad(BI, 'source_input: "RAGGED_INPUT" }\n]', 'source_input: "NOPE" }\n]'),
        "unknown source input name 'NOPE' for unknown_source",
    ),
    "two_sources": (
        "bi",
        _bad(BI, 'source_input: "RAGGED_INPUT" }\n]', 'source_input: ["RAGGED_INPUT", "X"] }\n]'),
        "batch input kind 'BATCH_ACCUMULATED_ELEMENT_COUNT' expects 1 source input, got 2 "
        "for two_sources",
    ),
    "fp64_batch_input": (
        "bi",
        _bad(
            BI,
            'target_name: "BATCH_INPUT" data_type: TYPE_FP32',
            'target_name: "BATCH_INPUT" data_type: TYPE_FP64',
        ),
        "batch input data type must be TYPE_INT32 or TYPE_FP32 for fp64_batch_input",
    ),
    "number_kind": (
        "bi",
        _bad(BI, "kind: BATCH_ACCUMULATED_ELEMENT_COUNT ", "kind: 9 "),
        "Internal: attempt to access JSON non-string as string",
    ),
    "target_declared": (
        "item",
        _bad(
            batch_item_config("x"),
            "allow_ragged_batch: true } ]",
            "allow_ragged_batch: true },\n"
            '  { name: "BATCH_INPUT" data_type: TYPE_FP32 dims: [ 2 ] } ]',
        ),
        "unable to load model 'target_declared', configuration expects 3 inputs, model provides 2",
    ),
    "target_not_in_model": (
        "item",
        _bad(batch_item_config("x"), 'target_name: "BATCH_INPUT"', 'target_name: "OTHER"'),
        "batch input target 'OTHER' is not an input of the model",
    ),
    "ragged_not_1d": (
        "item",
        _bad(
            batch_item_config("x"),
            'input [ { name: "RAGGED_INPUT" data_type: TYPE_FP32 dims: [ -1, -1 ] '
            "allow_ragged_batch: true } ]",
            'input [ { name: "BATCH_INPUT" data_type: TYPE_FP32 dims: [ 2 ] '
            "allow_ragged_batch: true } ]",
        )
        .replace('target_name: "BATCH_INPUT"', 'target_name: "RAGGED_INPUT"')
        .replace('source_input: "RAGGED_INPUT"', 'source_input: "BATCH_INPUT"'),
        "unable to load model 'ragged_not_1d', configuration expects model provides input with "
        "shape [-1]  for ragged input 'BATCH_INPUT', model provides [-1,2]",
    ),
    "unknown_output_target": (
        "io",
        _bad(ragged_io_config("x"), 'target_name: "OUTPUT0"', 'target_name: "OUTPUT9"'),
        "unknown target output name 'OUTPUT9' for unknown_output_target",
    ),
    "unknown_output_source": (
        "io",
        _bad(ragged_io_config("x"), 'source_input: "INPUT0"', 'source_input: "INPUT9"'),
        "unknown source input name 'INPUT9' for unknown_output_source",
    ),
    "target_twice": (
        "io",
        _bad(
            ragged_io_config("x"),
            'target_name: "OUTPUT0"',
            'target_name: ["OUTPUT0", "OUTPUT0"]',
        ),
        "target output name 'OUTPUT0' can only be specified once for target_twice",
    ),
    "no_batch_output": (
        "io",
        ragged_io_config("x", batch_output=False),
        "unable to load model 'no_batch_output', tensor 'OUTPUT0' shape",
    ),
}


@pytest.fixture(scope="module")
def bad_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("ragged_bad")
    graphs = {
        "bi": batch_input_model(),
        "item": batch_item_model("FP32"),
        "io": identity_1d_model(),
    }
    for name, (kind, config, _) in BAD_CONFIGS.items():
        write_model(repo, name, graphs[kind], config.replace('name: "x"', f'name: "{name}"'))
    write_model(repo, "bad_kind_name", graphs["bi"], _bad(BI, "BATCH_ELEMENT_COUNT", "BATCH_NOPE"))
    s = start_server(repo, "--allow-metrics=false", "--model-control-mode=explicit")
    yield s
    s.stop()


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_config_fails_load(bad_server: Server, protocol: str, name: str) -> None:
    client, _ = client_for(bad_server, protocol)
    with pytest.raises(InferenceServerException) as e:
        client.load_model(name)
    assert BAD_CONFIGS[name][2] in e.value.message(), e.value.message()
    assert e.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert not client.is_model_ready(name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unparsable_kind_fails_load(bad_server: Server, protocol: str) -> None:
    client, _ = client_for(bad_server, protocol)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("bad_kind_name")
    assert "failed to load 'bad_kind_name'" in e.value.message()
    assert client.is_server_live()
