"""The HTTP codec on its own: JSON tensor parsing, binary slicing, response encoding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferOutput, InferResponse
from tritonlite.frontends.http import codec


def test_binary_inputs_are_views_over_the_body() -> None:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "X",
                    "shape": [2],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": 8},
                }
            ]
        }
    ).encode()
    body = head + np.array([7, 9], np.int32).tobytes()
    req = codec.decode_infer(body, len(head), "m", -1)
    data = req.inputs[0].data
    assert data is not None and data.tolist() == [7, 9]
    assert not data.flags.owndata  # a view, not a copy


def test_nested_json_data_and_type_checks() -> None:
    arr = codec.json_to_array("X", "INT16", (2, 2), [[1, 2], [3, 4]])
    assert arr.dtype == np.int16 and arr.tolist() == [[1, 2], [3, 4]]
    with pytest.raises(TritonliteError, match="out of range"):
        codec.json_to_array("X", "UINT8", (1,), [-1])
    with pytest.raises(TritonliteError, match="expected integers"):
        codec.json_to_array("X", "INT32", (1,), [1.5])
    with pytest.raises(TritonliteError, match="expected booleans"):
        codec.json_to_array("X", "BOOL", (1,), [1])
    with pytest.raises(TritonliteError, match="shape does not match"):
        codec.json_to_array("X", "FP32", (3,), [[1.0], [2.0]])


def test_json_output_with_invalid_utf8_is_an_error_naming_it() -> None:
    bad = np.array([b"\xff"], dtype=object)
    resp = InferResponse("m", "1", outputs=[InferOutput("OUT", "BYTES", (1,), bad, binary=False)])
    with pytest.raises(TritonliteError, match="OUT.*binary_data=true"):
        codec.encode_infer(resp)
    resp.outputs[0].binary = True
    parts, head_len, has_binary = codec.encode_infer(resp)
    assert has_binary and bytes(parts[1]) == b"\x01\x00\x00\x00\xff"


def test_response_binary_order_and_sizes() -> None:
    a = np.arange(3, dtype=np.float32)
    b = np.zeros(0, dtype=np.float32)
    c = np.array([True, False])
    resp = InferResponse(
        "m",
        "2",
        id="x",
        outputs=[
            InferOutput("A", "FP32", (3,), a),
            InferOutput("B", "FP32", (0,), b),
            InferOutput("C", "BOOL", (2,), c, binary=False),
        ],
    )
    parts, head_len, has_binary = codec.encode_infer(resp)
    doc = json.loads(parts[0])
    assert doc["id"] == "x" and doc["model_version"] == "2"
    assert [o.get("parameters") for o in doc["outputs"]] == [
        {"binary_data_size": 12},
        {"binary_data_size": 0},
        None,
    ]
    assert doc["outputs"][2]["data"] == [True, False]
    assert b"".join(bytes(p) for p in parts[1:]) == a.tobytes()


@pytest.mark.parametrize(
    "accept,expected",
    [
        (None, None),
        ("", None),
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip;q=0.2, deflate;q=0.8", "deflate"),
        ("identity", None),
        ("br", None),
        ("gzip;q=0", None),
        ("*", None),
    ],
)
def test_pick_encoding(accept: str | None, expected: str | None) -> None:
    assert codec.pick_encoding(accept) == expected
