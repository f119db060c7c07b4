"""The gRPC codec on its own: its wire bytes against the generated message classes.

The codec reads requests through a bytes view of ModelInferRequest and writes responses as
hand-joined wire bytes; these tests hold both to what the message classes produce and parse.
"""

from __future__ import annotations

import numpy as np
import pytest

from tritonlite._proto import pb
from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferOutput, InferResponse, ShmRef
from tritonlite.frontends.grpc import codec


def _reference(resp: InferResponse) -> object:
    """What the generated class builds for ``resp`` (the codec's bytes must parse to it)."""
    msg = pb.ModelInferResponse(
        model_name=resp.model_name, model_version=resp.model_version, id=resp.id
    )
    for key, value in resp.parameters.items():
        codec.set_param(msg.parameters, key, value)
    for o in resp.outputs:
        msg.outputs.add(name=o.name, datatype=o.datatype, shape=o.shape)
        if o.data is None:
            msg.raw_output_contents.append(b"")
        elif o.data.dtype == object:
            msg.raw_output_contents.append(
                b"".join(len(x).to_bytes(4, "little") + x for x in o.data.reshape(-1))
            )
        else:
            msg.raw_output_contents.append(
                np.ascontiguousarray(o.data).astype(o.data.dtype.newbyteorder("<")).tobytes()
            )
    return msg


RESPONSES = [
    InferResponse(
        "add_sub",
        "1",
        "42",
        [
            InferOutput("OUTPUT0", "FP32", (1, 16), np.arange(16, dtype=np.float32).reshape(1, 16)),
            InferOutput("OUTPUT1", "FP32", (1, 16), np.ones((1, 16), np.float32)),
        ],
    ),
    InferResponse("m", "7", "", []),
    InferResponse(
        "ünï",
        "123456",
        "id" * 100,
        [
            InferOutput("S", "BYTES", (3,), np.array([b"a", b"", "é".encode()], dtype=object)),
            InferOutput("SHM", "FP32", (2, 2), None, shm=ShmRef("r", 16)),
            InferOutput("Z", "INT64", (0, 4), np.zeros((0, 4), np.int64)),
            InferOutput("NC", "INT32", (3, 2), np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]),
            InferOutput("BE", "FP64", (2,), np.array([1.5, -2.0], dtype=">f8")),
            InferOutput("BIG", "UINT8", (70_000,), np.arange(70_000, dtype=np.uint8)),
        ],
        parameters={"i": 3, "b": False, "s": "x", "f": 0.25},
    ),
]


@pytest.mark.parametrize("resp", RESPONSES, ids=["add_sub", "empty", "mixed"])
def test_encode_matches_the_message_class(resp: InferResponse) -> None:
    msg = codec.encode_infer(resp)
    if isinstance(msg, list):  # a large response: its parts, each a flat byte buffer
        assert all(type(p) is bytes or (type(p) is memoryview and p.format == "B") for p in msg)
        msg = b"".join(msg)
    got = pb.ModelInferResponse.FromString(msg)
    assert got == _reference(resp)
    assert len(got.raw_output_contents) == len(got.outputs)  # index-aligned, always


def test_large_response_comes_in_parts_over_the_arrays() -> None:
    big = np.arange(1 << 16, dtype=np.float32).reshape(256, 256)
    resp = InferResponse("m", "1", "", [InferOutput("O", "FP32", big.shape, big)])
    parts = codec.encode_infer(resp)
    assert isinstance(parts, list)
    assert any(
        type(p) is memoryview and p.obj is not None and p.nbytes == big.nbytes for p in parts
    )  # the array's own memory, not a copy of it
    assert isinstance(codec.encode_infer(RESPONSES[0]), bytes)  # small: one joined bytes


@pytest.mark.parametrize("final", [True, False])
def test_encode_stream_adds_the_final_flag(final: bool) -> None:
    resp = RESPONSES[2]
    resp.final = final
    got = pb.ModelStreamInferResponse.FromString(codec.encode_stream(resp))
    assert got.error_message == ""
    assert got.infer_response.parameters[codec.FINAL].bool_param is final
    del got.infer_response.parameters[codec.FINAL]
    assert got.infer_response == _reference(resp)


def test_stream_error_message() -> None:
    got = pb.ModelStreamInferResponse.FromString(codec.stream_error("boom", "r1", "m", "2"))
    assert got.error_message == "boom"
    assert (got.infer_response.id, got.infer_response.model_name) == ("r1", "m")
    assert not got.infer_response.outputs


def test_varint_matches_protobuf() -> None:
    assert codec._varint(0) == b"\x00"
    for n in [1, 127, 128, 300, 16383, 16384, 2**21, 2**28 + 5, 2**31 - 1, 2**35]:
        m = pb.StatisticDuration(count=n)
        assert m.SerializeToString() == b"\x08" + codec._varint(n), n


def test_response_over_the_message_limit_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "MAX_MESSAGE", 100)
    with pytest.raises(TritonliteError, match="exceeds gRPC's byte size limit"):
        codec.encode_infer(RESPONSES[0])


def _request() -> object:
    req = pb.ModelInferRequest(model_name="m", model_version="3", id="x")
    req.parameters["sequence_id"].string_param = "seq"
    req.parameters["sequence_start"].bool_param = True
    req.parameters["priority"].uint64_param = 2
    req.parameters["timeout"].int64_param = 50
    req.parameters[codec.EMPTY_FINAL].bool_param = True
    req.parameters["custom"].double_param = 0.5
    a = req.inputs.add(name="A", datatype="INT32", shape=[2, 2])
    a.parameters["note"].string_param = "hi"
    b = req.inputs.add(name="B", datatype="FP32", shape=[2])
    b.parameters["shared_memory_region"].string_param = "r"
    b.parameters["shared_memory_byte_size"].int64_param = 8
    b.parameters["shared_memory_offset"].int64_param = 4
    c = req.inputs.add(name="C", datatype="BYTES", shape=[2])
    req.raw_input_contents.append(np.array([1, 2, 3, 4], np.int32).tobytes())
    req.raw_input_contents.append(b"\x01\x00\x00\x00a\x00\x00\x00\x00")
    o = req.outputs.add(name="O")
    o.parameters["classification"].int64_param = 2
    o.parameters["binary_data"].bool_param = True
    assert c.name == "C"
    return req


def test_decode_request() -> None:
    data = _request().SerializeToString()
    for _ in range(2):  # the second time from the caches: the same result, fresh objects
        req = codec.decode_infer(codec.parse(data))
        assert (req.model_name, req.model_version, req.id) == ("m", 3, "x")
        assert (req.sequence_id, req.sequence_start, req.sequence_end) == ("seq", True, False)
        assert (req.priority, req.timeout_us, req.enable_empty_final_response) == (2, 50, True)
        assert req.parameters == {"custom": 0.5}  # triton_* parameters are not forwarded
        a, b, c = req.inputs
        assert a.data is not None and a.data.tolist() == [[1, 2], [3, 4]]
        assert a.parameters == {"note": "hi"}
        assert b.data is None and b.shm == ShmRef("r", 8, 4)
        assert c.data is not None and c.data.tolist() == [b"a", b""]
        assert req.outputs is not None and len(req.outputs) == 1
        out = req.outputs[0]
        assert (out.name, out.classification, out.shm, out.parameters) == ("O", 2, None, {})
        a.parameters["note"] = "changed"
        out.parameters["x"] = 1


def test_decode_typed_contents_and_zero_size() -> None:
    req = pb.ModelInferRequest(model_name="m")
    t = req.inputs.add(name="I8", datatype="INT8", shape=[3])
    t.contents.int_contents.extend([-1, 2, 127])
    u = req.inputs.add(name="U16", datatype="UINT16", shape=[1, 2])
    u.contents.uint_contents.extend([65535, 7])
    req.inputs.add(name="E", datatype="FP32", shape=[0, 4])
    got = codec.decode_infer(codec.parse(req.SerializeToString()))
    i8, u16, e = got.inputs
    assert i8.data is not None and i8.data.dtype == np.int8 and i8.data.tolist() == [-1, 2, 127]
    assert u16.data is not None and u16.data.dtype == np.uint16
    assert u16.data.tolist() == [[65535, 7]]
    assert e.data is not None and e.data.shape == (0, 4)


def _large_request(order: str) -> bytes:
    req = pb.ModelInferRequest(model_name="m", id="big")
    req.inputs.add(name="A", datatype="FP32", shape=[1 << 14])
    req.inputs.add(name="B", datatype="BYTES", shape=[1])
    req.outputs.add(name="O")
    a = np.arange(1 << 14, dtype=np.float32).tobytes()
    b = b"\x03\x00\x00\x00xyz"
    req.raw_input_contents.extend([a, b])
    data = req.SerializeToString()
    if order == "interleaved":  # raw contents first, other fields after: still one message
        cut = data.index(b"\x3a")
        data = data[cut:] + data[:cut]
    return data


@pytest.mark.parametrize("order", ["serialized", "interleaved"])
def test_large_request_raw_contents_are_views_of_the_message(order: str) -> None:
    data = _large_request(order)
    assert len(data) >= codec.SPLIT_AT
    w = codec.parse(data)
    raws = w.raw_input_contents
    assert all(type(r) is memoryview and r.obj is data for r in raws)  # no copies
    req = codec.decode_infer(w)
    a, b = req.inputs
    assert a.data is not None and a.data.tolist() == list(range(1 << 14))
    assert b.data is not None and b.data.tolist() == [b"xyz"]
    assert (req.model_name, req.id, [o.name for o in req.outputs or []]) == ("m", "big", ["O"])


@pytest.mark.parametrize("cut", [1, 2, 5, 40, 70_000])
def test_large_request_cut_short_is_rejected_as_protobuf_does(cut: int) -> None:
    data = _large_request("serialized") + b"\x00" * 70_000
    with pytest.raises(TritonliteError, match="failed to parse"):
        codec.parse(data)  # field number 0
    data = _large_request("serialized")[:-cut]
    if len(data) >= codec.SPLIT_AT:
        with pytest.raises(TritonliteError, match="failed to parse"):
            codec.parse(data)


def test_split_agrees_with_protobuf_on_mutated_messages() -> None:
    """Every mutation of a serialized request: the split parses iff protobuf does, to the
    same fields (the split only moves raw_input_contents out of protobuf's hands)."""
    rng = np.random.default_rng(7)
    base = pb.ModelInferRequest(model_name="m", id="x")
    base.parameters["p"].int64_param = 3
    base.inputs.add(name="A", datatype="FP32", shape=[2])
    base.raw_input_contents.extend([b"\x01" * 8, b"\x02" * 3])
    seed = base.SerializeToString()
    for _ in range(3000):
        d = bytearray(seed)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(d) + 1))
            op = int(rng.integers(0, 3))
            if op == 0 and at < len(d):
                d[at] = int(rng.integers(0, 256))
            elif op == 1:
                del d[at:]
            else:
                d.insert(at, int(rng.integers(0, 256)))
        data = bytes(d)
        try:
            want = codec._Wire.FromString(data)
        except Exception:
            want = None
        split = codec._split(data)
        try:
            got = codec._Wire.FromString(split[0] if split is not None else data)
        except Exception:
            got = None
        assert (want is None) == (got is None), data
        if want is not None and got is not None:
            raws = [bytes(r) for r in split[1]] if split is not None else got.raw_input_contents
            assert list(want.raw_input_contents) == list(raws), data
            for field in ("model_name", "model_version", "id"):
                assert getattr(want, field) == getattr(got, field), data
            for field in ("parameters", "inputs", "outputs"):
                assert getattr(want, field)[:] == getattr(got, field)[:], data


def test_decode_rejects_malformed_bytes() -> None:
    with pytest.raises(TritonliteError, match="failed to parse"):
        codec.parse(b"\x2a\x05ab")
