"""The HTTP codec's JSON ``data`` fast path (``_jsondata``), on the pure and the compiled twin.

The fast path may only ever answer what the codec's general path answers: the same array
(dtype, shape, every bit) for a plain request, or None so that the general path decides and
words the error. A seeded fuzz run checks exactly that on random datatypes, shapes and data
(flat, nested, ragged, mixed types, values at and past each type's range); raw HTTP requests
to a real server check every datatype end to end, with the same 400s as before.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import time
import tracemalloc
from types import ModuleType
from typing import Any

import numpy as np
import orjson
import pytest

from tritonlite.contracts.errors import TritonliteError
from tritonlite.frontends.http import _jsondata_py, codec, jsondata

REQUIRE = os.environ.get("TRITONLITE_REQUIRE_EXTENSIONS") == "1"
SEED = int(os.environ.get("TRITONLITE_FUZZ_SEED", "20261206"))
ITERATIONS = int(os.environ.get("TRITONLITE_FUZZ_ITERATIONS", "6000"))
TIME_LIMIT_S = float(os.environ.get("TRITONLITE_FUZZ_SECONDS", "10"))


def _compiled_module() -> ModuleType | None:
    try:
        from tritonlite.frontends.http import _jsondata_c
    except ImportError as exc:
        if REQUIRE:
            raise AssertionError(
                "TRITONLITE_REQUIRE_EXTENSIONS=1 but _jsondata_c is not built"
            ) from exc
        return None
    return _jsondata_c


COMPILED = _compiled_module()
NOT_BUILT = "compiled twin tritonlite.frontends.http._jsondata_c is not built (pip install -e .)"
NUMERIC = ("FP32", "FP64", "FP16", "INT8", "INT16", "INT32", "INT64")
NUMERIC += ("UINT8", "UINT16", "UINT32", "UINT64", "BOOL")


@pytest.fixture(params=["pure", "compiled"])
def J(request: pytest.FixtureRequest) -> Any:
    if request.param == "pure":
        return _jsondata_py
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    return COMPILED


def test_twins_are_what_they_claim() -> None:
    assert _jsondata_py.COMPILED is False
    if os.environ.get("TRITONLITE_NO_EXTENSIONS") == "1":
        assert not jsondata.ACCELERATED and "pure Python" in jsondata.describe()
        assert jsondata.data_array is None and jsondata.plain_input is None
        assert jsondata.plain_inputs is _jsondata_py.plain_inputs  # the JSON lane's, always
        return
    if COMPILED is None:
        pytest.skip(NOT_BUILT)
    assert COMPILED.COMPILED is True and COMPILED.__file__ != _jsondata_py.__file__
    assert jsondata.ACCELERATED and jsondata.data_array is COMPILED.data_array
    assert jsondata.plain_inputs is COMPILED.plain_inputs
    assert "compiled" in jsondata.describe()


def _general(datatype: str, shape: tuple[int, ...], data: Any) -> Any:
    """The general path's answer: an array, or the error's message."""
    try:
        return codec._general_array("X", datatype, shape, data)
    except TritonliteError as exc:
        return exc.message


def _same(fast: np.ndarray[Any, Any], ref: Any) -> None:
    assert isinstance(ref, np.ndarray), f"fast path answered where the general path said {ref!r}"
    assert fast.dtype == ref.dtype and fast.shape == ref.shape
    assert fast.tobytes() == ref.tobytes()  # every bit: -0.0, FP16 rounding, ...


@pytest.mark.parametrize(
    ("datatype", "shape", "data"),
    [
        ("FP32", (1, 16), [float(i) + 0.5 for i in range(16)]),
        ("FP32", (2, 2), [[1.0, -0.0], [3, 1e-45]]),
        ("FP32", (1,), [3.4028234663852886e38]),
        ("FP32", (2,), [16777217, -(2**53)]),  # integers, rounded once as numpy rounds them
        ("FP64", (2, 1), [[1e308], [-5e-324]]),
        ("FP16", (3,), [0.1, 65504.0, 1e-8]),
        ("INT8", (2, 2), [[-128, 127], [0, 1]]),
        ("INT16", (2,), [-32768, 32767]),
        ("INT32", (2,), [-(2**31), 2**31 - 1]),
        ("INT64", (2,), [-(2**63), 2**63 - 1]),
        ("UINT8", (1, 2), [[0, 255]]),
        ("UINT16", (1,), [65535]),
        ("UINT32", (1,), [2**32 - 1]),
        ("UINT64", (1,), [2**63 - 1]),
        ("BOOL", (2, 2), [[True, False], [False, True]]),
        ("FP32", (0,), []),
        ("INT32", (2, 0), [[], []]),
    ],
)
def test_plain_data_takes_the_fast_path(
    J: Any, datatype: str, shape: tuple[int, ...], data: Any
) -> None:
    fast = J.data_array(datatype, shape, data)
    assert fast is not None
    _same(fast, _general(datatype, shape, data))


@pytest.mark.parametrize(
    ("datatype", "shape", "data"),
    [
        ("FP32", (2,), [1.0]),  # too few
        ("FP32", (1,), [1.0, 2.0]),  # too many
        ("FP32", (2,), [1.0, True]),  # a boolean is not a number
        ("FP32", (1,), ["1.0"]),
        ("FP32", (1,), [None]),
        ("FP32", (1,), [{"a": 1}]),
        ("FP32", (1,), [1e39]),  # past FP32's range: numpy's cast decides (inf)
        ("FP16", (1,), [70000.0]),
        ("FP32", (1,), [2**53 + 1]),  # an integer a double does not hold exactly
        ("FP64", (1,), [2**1100]),  # beyond any float: the general path's 400
        ("INT32", (1,), [1.0]),
        ("INT32", (1,), [True]),
        ("INT32", (1,), [2**31]),
        ("INT8", (1,), [-129]),
        ("UINT8", (1,), [-1]),
        ("UINT64", (1,), [2**63]),  # above int64: the general path
        ("UINT64", (1,), [2**64]),
        ("INT64", (1,), [2**63]),
        ("BOOL", (1,), [1]),
        ("BOOL", (1,), [0.0]),
        ("BYTES", (1,), ["a"]),  # strings: the general path
        ("BF16", (1,), [1.0]),
        ("FLOAT", (1,), [1.0]),
        ("FP32", (1,), 1.0),  # a scalar, not a list
        ("FP32", (1, 1), [[[1.0]]]),  # deeper than the shape: flattened by the general path
        ("FP32", (2**40,), [1.0]),  # beyond the fast path's size
        ("FP32", (0, 2**62), []),
    ],
)
def test_anything_else_is_left_to_the_general_path(
    J: Any, datatype: str, shape: tuple[int, ...], data: Any
) -> None:
    fast = J.data_array(datatype, shape, data)
    if fast is not None:  # only where the general path agrees exactly
        _same(fast, _general(datatype, shape, data))


@pytest.mark.parametrize(
    ("shape", "data"),
    [((2**26,), [1.0]), ((1, 2**26), [[1.0]]), ((2**13, 2**13), [[1.0], 2.0])],
)
def test_a_large_shape_with_little_data_allocates_nothing(
    J: Any, shape: tuple[int, ...], data: Any
) -> None:
    """The array is allocated only once the request is known to hold that many elements."""
    tracemalloc.start()  # numpy reports its allocations to tracemalloc
    try:
        assert J.data_array("FP16", shape, data) is None
        assert J.data_array("INT8", shape, data) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_nesting_deeper_than_the_limit_is_left_to_the_general_path(J: Any) -> None:
    data: Any = [1.0]
    for _ in range(150):
        data = [data]
    assert J.data_array("FP32", (1,), data) is None
    assert "nested too deeply" in _general("FP32", (1,), data)


def _element(rng: random.Random, datatype: str) -> Any:
    r = rng.random()
    if r < 0.03:
        return rng.choice([None, "1", True, False, {}, [], 1.5, -1, 2**64, -(2**70)])
    if datatype == "BOOL":
        return rng.random() < 0.5
    if datatype == "BYTES":
        return rng.choice(["", "a", "é∑", "x" * 40])
    if datatype.startswith("FP"):
        if r < 0.3:
            return rng.randint(-(2**60), 2**60) if r < 0.05 else rng.randint(-1000, 1000)
        scale = rng.choice([1.0, 1e-3, 1e4, 65504.0, 65520.0, 3.4e38, 3.5e38, 1e300, 1e-40])
        return rng.uniform(-1, 1) * scale
    bits = int(datatype.lstrip("UINT") or 64)
    lo, hi = (
        (0, 2**bits - 1) if datatype.startswith("U") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    )
    if r < 0.1:
        return rng.choice([lo, hi, lo - 1, hi + 1, 0])
    return rng.randint(lo, hi)


def _shape_and_data(rng: random.Random, datatype: str) -> tuple[tuple[int, ...], Any]:
    shape = tuple(rng.randint(0, 4) for _ in range(rng.randint(0, 3)))
    count = int(np.prod(shape)) if shape else 1
    flat = [_element(rng, datatype) for _ in range(count)]
    if rng.random() < 0.1 and flat:  # wrong count
        flat = flat[:-1] if rng.random() < 0.5 else flat + flat[:1]
    data: Any = flat
    if rng.random() < 0.5 and len(shape) > 1 and len(flat) == count:
        arr = np.empty(count, dtype=object)
        arr[:] = flat
        data = arr.reshape(shape).tolist()  # nested as the shape says
    if rng.random() < 0.05:
        data = [data]  # one level too many
    if rng.random() < 0.05 and isinstance(data, list) and len(data) > 1:
        data = [data[0], data[1:]]  # ragged
    return shape, data


def test_fuzz_fast_path_agrees_with_general_path(J: Any) -> None:
    rng = random.Random(SEED)
    deadline = time.monotonic() + TIME_LIMIT_S
    answered = 0
    for i in range(ITERATIONS):
        if time.monotonic() > deadline:
            break
        datatype = rng.choice(NUMERIC + ("BYTES",))
        shape, data = _shape_and_data(rng, datatype)
        # Through JSON and back, as the server gets it (orjson refuses NaN and infinities).
        try:
            data = orjson.loads(orjson.dumps(data))
        except orjson.JSONEncodeError:
            continue
        with np.errstate(over="raise", invalid="raise"):  # never a cast warning (underflow: 0)
            fast = J.data_array(datatype, shape, data)
        if fast is None:
            continue
        answered += 1
        try:
            _same(fast, _general(datatype, shape, data))
        except AssertionError:
            pytest.fail(f"seed {SEED} iteration {i}: {datatype} {shape} {data!r}")
    assert answered > 100  # the fuzz reaches the fast path, not only its refusals


def _decode(body: bytes) -> Any:
    try:
        req = codec.decode_infer(body, None, "m", -1)
    except TritonliteError as exc:
        return exc.message
    return [(i.name, i.datatype, i.shape, i.data, i.parameters, i.shm) for i in req.inputs]


def test_fuzz_plain_inputs_decode_as_the_general_path(
    J: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole request bodies: decoded with the twin's ``plain_input`` and without it."""
    rng = random.Random(SEED + 1)
    deadline = time.monotonic() + TIME_LIMIT_S / 2
    plain = 0
    for i in range(ITERATIONS // 4):
        if time.monotonic() > deadline:
            break
        items = []
        for k in range(rng.randint(1, 3)):
            datatype = rng.choice(NUMERIC + ("BYTES", "FLOAT", 7))
            shape, data = _shape_and_data(rng, datatype if datatype in NUMERIC else "FP32")
            item: dict[str, Any] = {"name": f"IN{k}", "datatype": datatype, "shape": list(shape)}
            item["data"] = data
            r = rng.random()
            if r < 0.05:
                item["parameters"] = {}
            elif r < 0.1:
                item["shape"] = [-1]
            elif r < 0.15:
                item["name"] = 3
            elif r < 0.2:
                del item["data"]
                item["extra"] = 1
            items.append(item)
        try:
            body = orjson.dumps({"inputs": items})
        except orjson.JSONEncodeError:
            continue
        plain += sum(J.plain_input(item) is not None for item in orjson.loads(body)["inputs"])
        monkeypatch.setattr(codec, "_plain_input", J.plain_input)
        fast = _decode(body)
        monkeypatch.setattr(codec, "_plain_input", None)
        ref = _decode(body)
        if isinstance(ref, str) or isinstance(fast, str):
            assert fast == ref, f"seed {SEED + 1} iteration {i}: {body!r}"
            continue
        assert len(fast) == len(ref)
        for a, b in zip(fast, ref):
            assert a[:3] == b[:3] and a[4:] == b[4:], body
            _same(a[3], b[3])
    assert plain > 50  # the fuzz reaches the fast path


def test_fuzz_plain_inputs_are_what_the_general_path_decodes(J: Any) -> None:
    """``plain_inputs`` (the JSON lane's reader of a whole ``inputs`` list) answers only where
    every input is plain, each name once, and then with the general decode's names,
    datatypes, shapes and arrays, in order."""
    rng = random.Random(SEED + 2)
    deadline = time.monotonic() + TIME_LIMIT_S / 2
    answered = 0
    for i in range(ITERATIONS // 4):
        if time.monotonic() > deadline:
            break
        items: list[Any] = []
        for k in range(rng.randint(0, 3)):
            datatype = rng.choice(NUMERIC + ("BYTES", 7))
            shape, data = _shape_and_data(rng, datatype if datatype in NUMERIC else "FP32")
            name: Any = f"IN{k}" if rng.random() < 0.9 else "IN0"  # a name twice, now and then
            item: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(shape)}
            item["data"] = data
            r = rng.random()
            if r < 0.04:
                item["parameters"] = {}
            elif r < 0.08:
                item["shape"] = [-1]
            elif r < 0.1:
                item["shape"] = [True]
            elif r < 0.12:
                item = [item]  # type: ignore[assignment]
            items.append(item)
        try:
            body = orjson.dumps({"inputs": items})
        except orjson.JSONEncodeError:
            continue
        got = J.plain_inputs(orjson.loads(body)["inputs"])
        if got is None:
            continue
        answered += 1
        ref = _decode(body)
        where = f"seed {SEED + 2} iteration {i}: {body!r}"
        assert not isinstance(ref, str), where  # answered only what decodes
        key, feed = got
        assert type(key) is tuple and list(feed) == [r[0] for r in ref], where
        assert key == tuple((r[0], r[1], r[2]) for r in ref), where
        assert all(r[4] == {} and r[5] is None for r in ref), where
        for r in ref:
            _same(feed[r[0]], r[3])
    assert answered > 50  # the fuzz reaches the answers, not only the refusals
    assert J.plain_inputs([]) is None and J.plain_inputs({"name": "x"}) is None
    assert J.plain_inputs(None) is None


# -- end to end: raw HTTP to a real server ------------------------------------------------------
def _post(server: Any, model: str, doc: Any) -> tuple[int, Any]:
    host, port = server.http_url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST",
            f"/v2/models/{model}/infer",
            body=json.dumps(doc),
            headers={"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _values(datatype: str) -> list[Any]:
    if datatype == "BOOL":
        return [True, False, False, True, True, True, False, False]
    if datatype.startswith("FP"):
        return [0.5, -1.25, 0.0, 3.0, 1e-3, -7.5, 100.0, 2.0]
    bits = int(datatype.lstrip("UINT"))
    hi = 2 ** (bits - 1) - 1
    return (
        [0, 1, hi, 3, 4, 5, 6, 7] if datatype.startswith("U") else [0, -1, hi, -hi - 1, 4, 5, 6, 7]
    )


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("datatype", [d for d in NUMERIC if d != "FP16"])
def test_every_datatype_as_json_end_to_end(server: Any, datatype: str, nested: bool) -> None:
    values = _values(datatype)
    data: Any = [values[:4], values[4:]] if nested else values
    inp = {"name": "INPUT0", "datatype": datatype, "shape": [2, 4], "data": data}
    status, doc = _post(server, f"identity_{datatype.lower()}", {"inputs": [inp]})
    assert status == 200, doc
    (out,) = doc["outputs"]
    assert out["datatype"] == datatype and out["shape"] == [2, 4]
    assert out["data"] == values  # flat, as Triton answers


@pytest.mark.parametrize(
    ("datatype", "data", "words"),
    [
        ("FP32", [1.0] * 7, "shape does not match"),
        ("FP32", [1.0] * 7 + [True], "expected numbers"),
        ("FP32", [1.0] * 7 + ["x"], "expected numbers"),
        ("INT32", [1] * 7 + [1.5], "expected integers"),
        ("INT8", [1] * 7 + [128], "value out of range for INT8"),
        ("UINT8", [1] * 7 + [-1], "value out of range for UINT8"),
        ("BOOL", [True] * 7 + [1], "expected booleans"),
    ],
)
def test_bad_json_data_is_a_400_naming_it(
    server: Any, datatype: str, data: list[Any], words: str
) -> None:
    inp = {"name": "INPUT0", "datatype": datatype, "shape": [2, 4], "data": data}
    status, doc = _post(server, f"identity_{datatype.lower()}", {"inputs": [inp]})
    assert status == 400 and words in doc["error"], doc
    inp = {"name": "INPUT0", "datatype": datatype, "shape": [2, 4], "data": _values(datatype)}
    assert _post(server, f"identity_{datatype.lower()}", {"inputs": [inp]})[0] == 200


# -- the JSON lane's response: encode_infer's bytes ----------------------------------------------
_LANE_OUTPUTS: list[list[tuple[str, str, Any]]] = [
    [
        ("OUTPUT0", "FP32", np.arange(16, dtype=np.float32).reshape(1, 16) + 0.1),
        ("OUTPUT1", "FP32", -np.arange(16, dtype=np.float32).reshape(1, 16)),
    ],
    [("O", "INT8", np.arange(-2, 2, dtype=np.int8).reshape(2, 2))],
    [("O", "UINT64", np.array([2**64 - 1, 0], np.uint64)), ("P", "BOOL", np.array([[True]]))],
    [("O", "FP64", np.array([1e308, -0.0, 5e-324])), ("P", "FP16", np.array([0.1], np.float16))],
    [("O", "BYTES", np.array([b"ab", "é".encode(), b""], dtype=object))],
    [('Ø"\\x', "INT32", np.zeros((0, 3), np.int32))],
    [],
]


class _PlainCore:
    """A core whose ``infer_plain`` answers ``outs``."""

    def __init__(self, outs: list[tuple[str, str, Any]], name: str = 'm"é') -> None:
        self.outs, self.name = outs, name

    def infer_plain(self, name: str, version: int, key: Any, feed: Any) -> Any:
        return (self.name, "3", self.outs)


@pytest.mark.parametrize("outs", _LANE_OUTPUTS, ids=range(len(_LANE_OUTPUTS)))
def test_the_json_lane_writes_what_encode_infer_writes(outs: list[tuple[str, str, Any]]) -> None:
    from tritonlite.contracts.types import InferOutput, InferResponse
    from tritonlite.frontends.http import jsonlane

    doc = {"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    resp = InferResponse(
        'm"é', "3", "", [InferOutput(o, d, a.shape, a, None, False) for o, d, a in outs]
    )
    ref = b"".join(codec.encode_infer(resp)[0])
    for _ in range(2):  # the frame made, then reused
        assert jsonlane.answer(_PlainCore(outs), doc, "m", -1) == ref  # type: ignore[arg-type]
    # another shape of the same outputs gets its own frame
    grown = [(o, d, np.concatenate([a, a]) if a.ndim else a) for o, d, a in outs]
    resp.outputs = [InferOutput(o, d, a.shape, a, None, False) for o, d, a in grown]
    ref = b"".join(codec.encode_infer(resp)[0])
    assert jsonlane.answer(_PlainCore(grown), doc, "m", -1) == ref  # type: ignore[arg-type]


def test_the_json_lane_words_an_unwritable_output_as_encode_infer_does() -> None:
    from tritonlite.contracts.types import InferOutput, InferResponse
    from tritonlite.frontends.http import jsonlane

    outs = [("O", "BYTES", np.array([b"\xff"], dtype=object))]
    doc = {"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
    with pytest.raises(TritonliteError) as ours:
        jsonlane.answer(_PlainCore(outs), doc, "m", -1)  # type: ignore[arg-type]
    resp = InferResponse("m", "3", "", [InferOutput("O", "BYTES", (1,), outs[0][2], None, False)])
    with pytest.raises(TritonliteError) as general:
        codec.encode_infer(resp)
    assert ours.value.message == general.value.message


@pytest.mark.parametrize(
    "doc",
    [
        None,
        [],
        {"inputs": []},
        {"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": [1.0]}], "id": ""},
        {"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": ["x"]}]},
        {"inputs": [{"name": "a", "datatype": "BYTES", "shape": [1], "data": ["x"]}]},
        {"outputs": []},
    ],
)
def test_the_json_lane_leaves_anything_else_alone(doc: Any) -> None:
    from tritonlite.frontends.http import jsonlane

    class NoCall:
        def infer_plain(self, *a: Any) -> Any:
            raise AssertionError("infer_plain asked")

    assert jsonlane.answer(NoCall(), doc, "m", -1) is None  # type: ignore[arg-type]
