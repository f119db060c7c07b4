"""The HTTP codec's repeated-header path: a header seen before decodes to what a fresh parse
gives, each request owns fresh objects, and anything else still goes through the full parse."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferRequest
from tritonlite.frontends.http import codec


def _body(doc: dict[str, Any], *tensors: np.ndarray[Any, Any]) -> tuple[bytes, int]:
    head = json.dumps(doc).encode()
    return head + b"".join(t.tobytes() for t in tensors), len(head)


def _binary_doc(**extra: Any) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": f"IN{i}",
                "datatype": "FP32",
                "shape": [1, 4],
                "parameters": {"binary_data_size": 16},
            }
            for i in (0, 1)
        ],
        "outputs": [{"name": "OUT0", "parameters": {"binary_data": True}}, {"name": "OUT1"}],
        **extra,
    }


def _view(req: InferRequest) -> dict[str, Any]:
    """Everything a decoded request carries, in comparable form."""
    d = {
        k: getattr(req, k)
        for k in (
            "model_name",
            "model_version",
            "id",
            "parameters",
            "sequence_id",
            "sequence_start",
            "sequence_end",
            "priority",
            "timeout_us",
            "binary_data_output",
        )
    }
    d["inputs"] = [
        (
            i.name,
            i.datatype,
            i.shape,
            i.shm,
            i.parameters,
            None if i.data is None else (i.data.dtype.str, i.data.shape, i.data.tolist()),
        )
        for i in req.inputs
    ]
    d["outputs"] = (
        None
        if req.outputs is None
        else [(o.name, o.binary, o.classification, o.shm, o.parameters) for o in req.outputs]
    )
    return d


def _fresh(body: bytes, head_len: int, model: str = "m", version: int = -1) -> InferRequest:
    req, _ = codec._decode_infer(memoryview(body), head_len, model, version)
    return req


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    codec._TEMPLATES.clear()


def test_a_repeated_header_decodes_as_a_fresh_parse_with_fresh_objects() -> None:
    doc = _binary_doc(id="r1", parameters={"priority": 2, "sequence_id": 7, "custom": "x"})
    a, b = np.arange(4, dtype=np.float32).reshape(1, 4), np.ones((1, 4), np.float32)
    body, n = _body(doc, a, b)
    first = codec.decode_infer(body, n, "m", 3)
    assert len(codec._TEMPLATES) == 1
    body2, _ = _body(doc, b, a)  # same header, other tensor bytes
    second = codec.decode_infer(body2, n, "other", 1)
    assert _view(second) == _view(_fresh(body2, n, "other", 1))
    assert _view(first) == _view(_fresh(body, n, "m", 3))
    # nothing a request owns is shared with the previous one
    assert second.parameters is not first.parameters
    assert second.outputs is not None and first.outputs is not None
    assert all(x is not y for x, y in zip(second.outputs, first.outputs))
    assert all(x.parameters is not y.parameters for x, y in zip(second.inputs, first.inputs))
    second.parameters["forwarded"] = "h"
    assert "forwarded" not in codec.decode_infer(body2, n, "m", 1).parameters
    data = second.inputs[0].data
    assert data is not None and not data.flags.owndata  # still a view over the body


def test_a_known_header_with_a_wrong_tail_gets_the_full_parse_error() -> None:
    body, n = _body(_binary_doc(), np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32))
    codec.decode_infer(body, n, "m", -1)
    with pytest.raises(TritonliteError, match="unexpected additional input data"):
        codec.decode_infer(body + b"\0" * 4, n, "m", -1)
    with pytest.raises(TritonliteError, match="unexpected size for input 'IN1'"):
        codec.decode_infer(body[:-4], n, "m", -1)


@pytest.mark.parametrize(
    "doc",
    [
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]},
        {
            "inputs": [
                {
                    "name": "X",
                    "datatype": "BYTES",
                    "shape": [1],
                    "parameters": {"binary_data_size": 5},
                }
            ]
        },
        {
            "inputs": [
                {
                    "name": "X",
                    "datatype": "FP32",
                    "shape": [0],
                    "parameters": {"binary_data_size": 0},
                }
            ]
        },
    ],
)
def test_headers_that_are_not_kept(doc: dict[str, Any]) -> None:
    tail = b"\1\0\0\0a" if doc["inputs"][0]["datatype"] == "BYTES" else b""
    head = json.dumps(doc).encode()
    body = head + tail
    first = codec.decode_infer(body, len(head), "m", -1)
    assert codec._TEMPLATES == {}
    assert _view(codec.decode_infer(body, len(head), "m", -1)) == _view(first)


def test_the_cache_is_bounded() -> None:
    a = np.zeros((1, 4), np.float32)
    for i in range(codec._TEMPLATE_LIMIT + 5):
        body, n = _body(_binary_doc(id=str(i)), a, a)
        assert codec.decode_infer(body, n, "m", -1).id == str(i)
    assert 0 < len(codec._TEMPLATES) <= codec._TEMPLATE_LIMIT


_DTYPES = {
    "FP32": np.float32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "BOOL": np.bool_,
    "FP16": np.float16,
    "INT8": np.int8,
}


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(
        st.tuples(
            st.sampled_from(sorted(_DTYPES)), st.lists(st.integers(1, 3), min_size=1, max_size=3)
        ),
        min_size=1,
        max_size=3,
    ),
    outputs=st.none()
    | st.lists(
        st.tuples(st.sampled_from(["A", "B"]), st.booleans(), st.integers(0, 2)), max_size=2
    ),
    params=st.dictionaries(
        st.sampled_from(["priority", "timeout", "k", "sequence_end"]), st.integers(0, 5), max_size=2
    ),
    seed=st.integers(0, 2**16),
)
def test_repeated_headers_match_a_fresh_parse(
    specs: list[tuple[str, list[int]]],
    outputs: list[tuple[str, bool, int]] | None,
    params: dict[str, int],
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    if "sequence_end" in params:
        params["sequence_end"] = bool(params["sequence_end"])  # type: ignore[assignment]
    arrays = [rng.integers(0, 2, size=shape).astype(_DTYPES[dt]) for dt, shape in specs]
    doc: dict[str, Any] = {
        "inputs": [
            {
                "name": f"I{k}",
                "datatype": dt,
                "shape": shape,
                "parameters": {"binary_data_size": arr.nbytes},
            }
            for k, ((dt, shape), arr) in enumerate(zip(specs, arrays))
        ]
    }
    if params:
        doc["parameters"] = params
    if outputs is not None:
        doc["outputs"] = [
            {"name": name, "parameters": {"binary_data": binary, "classification": cls}}
            for name, binary, cls in outputs
        ]
    body, n = _body(doc, *arrays)
    want = _view(_fresh(body, n))
    for _ in range(2):  # the first parses and keeps, the second comes from the cache
        assert _view(codec.decode_infer(body, n, "m", -1)) == want


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.array([True, False]),
        np.arange(4, dtype=np.float16),
        np.arange(6, dtype=">i4"),
        np.arange(6, dtype=np.int64).reshape(2, 3).T,
        np.float32(3).reshape(()),
        np.zeros((2, 0), np.int8),
        np.arange(3, dtype=np.uint64),
        np.array([b"ab"], dtype=object),
        np.arange(4096, dtype=np.float32).reshape(2, 2048),  # over _COPY_MAX: a view
        np.arange(4096, dtype=np.float32).reshape(64, 64).T,  # over it, not contiguous
    ],
)
def test_output_bytes_fast_path_matches_tensor_bytes(arr: np.ndarray[Any, Any]) -> None:
    from tritonlite.contracts import datatypes

    raw, want = codec._raw(arr), datatypes.tensor_bytes(arr)
    assert bytes(raw) == bytes(want) and memoryview(raw).nbytes == memoryview(want).nbytes


def test_shared_memory_inputs_and_outputs_are_kept_with_fresh_references() -> None:
    doc = {
        "inputs": [
            {
                "name": "A",
                "datatype": "FP32",
                "shape": [1, 4],
                "parameters": {
                    "shared_memory_region": "in",
                    "shared_memory_byte_size": 16,
                    "shared_memory_offset": 32,
                    "custom": 1,
                },
            },
            {
                "name": "B",
                "datatype": "FP32",
                "shape": [1, 4],
                "parameters": {"binary_data_size": 16},
            },
        ],
        "outputs": [
            {
                "name": "O",
                "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 64},
            }
        ],
    }
    body, n = _body(doc, np.ones((1, 4), np.float32))
    first = codec.decode_infer(body, n, "m", -1)
    assert len(codec._TEMPLATES) == 1
    second = codec.decode_infer(body, n, "m", -1)
    assert _view(second) == _view(first) == _view(_fresh(body, n))
    assert second.inputs[0].shm is not first.inputs[0].shm
    assert second.outputs is not None and first.outputs is not None
    assert second.outputs[0].shm is not first.outputs[0].shm
    assert second.inputs[0].data is None and second.inputs[0].parameters == {"custom": 1}


def _responses() -> list[Any]:
    from tritonlite.contracts.types import InferOutput, InferResponse, ShmRef

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    big = np.arange(4096, dtype=np.int32)
    strs = np.array([b"x", b"yz"], dtype=object)

    def out(name: str, arr: Any, **kw: Any) -> InferOutput:
        return InferOutput(name, "FP32" if arr is a else "INT32", arr.shape, arr, **kw)

    return [
        InferResponse("m", "1", outputs=[out("A", a), out("B", a)]),
        InferResponse("m", "1", outputs=[out("A", a.reshape(3, 2)), out("B", a)]),  # shape
        InferResponse("m", "2", outputs=[out("A", a), out("B", a)]),  # version
        InferResponse("n", "1", outputs=[out("A", a), out("B", a)]),  # model
        InferResponse("m", "1", outputs=[out("B", a), out("A", a)]),  # order
        InferResponse("m", "1", outputs=[out("A", big)]),  # a view, not a copy
        InferResponse("m", "1", outputs=[out("A", a[:, :0])]),  # empty
        InferResponse("m", "1", "the-id", [out("A", a)]),  # an id
        InferResponse("m", "1", outputs=[out("A", a)], parameters={"p": 1}),  # parameters
        InferResponse("m", "1", outputs=[out("A", a, binary=False)]),  # JSON data
        InferResponse("m", "1", outputs=[out("A", a), out("B", a, binary=False)]),
        InferResponse(
            "m", "1", outputs=[InferOutput("A", "FP32", (2, 3), None, shm=ShmRef("r", 24, 0))]
        ),
        InferResponse("m", "1", outputs=[InferOutput("S", "BYTES", (2,), strs)]),
        InferResponse("m", "1", outputs=[]),
    ]


def test_repeated_response_headers_encode_as_a_fresh_encode_does() -> None:
    codec._HEADS.clear()
    for _ in range(3):  # the first encode of each fills the cache, the others reuse it
        for resp in _responses():
            parts, head_len, has_binary = codec.encode_infer(resp)
            want, want_len, want_binary = codec._encode_infer(resp)
            assert b"".join(bytes(p) for p in parts) == b"".join(bytes(p) for p in want)
            assert (head_len, has_binary) == (want_len, want_binary)
    assert 1 <= len(codec._HEADS) <= 8  # only all-binary responses, one entry each


def test_the_response_header_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from tritonlite.contracts.types import InferOutput, InferResponse

    monkeypatch.setattr(codec, "_HEADS_LIMIT", 4)
    codec._HEADS.clear()
    for n in range(1, 11):
        arr = np.zeros(n, np.float32)
        resp = InferResponse("m", "1", outputs=[InferOutput("A", "FP32", arr.shape, arr)])
        parts, _, _ = codec.encode_infer(resp)
        assert json.loads(parts[0])["outputs"][0]["shape"] == [n]
        assert len(codec._HEADS) <= 4
