"""Seeded, time-bounded fuzzing of the request decoders: whatever a client sends, only a
TritonliteError with a client code (never INTERNAL, never another exception) may escape.

Thousands of mutated HTTP bodies (JSON-level and byte-level) go through the HTTP codec, and
mutated ModelInferRequest messages (field-level and byte-level) through the gRPC codec; each
decoded request then goes through the core's validation against a model signature with every
kind of input, as the server does next. A failure prints the seed and the input that broke it.
"""

from __future__ import annotations

import base64
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonlite._proto import pb
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.versions import parse_version
from tritonlite.core.tensors import validate
from tritonlite.core.tensors.shm import SharedMemoryManager
from tritonlite.frontends.grpc import codec as grpc_codec
from tritonlite.frontends.http import codec as http_codec

pytestmark = pytest.mark.timeout(120)

SEED = int(os.environ.get("TRITONLITE_FUZZ_SEED", "20261204"))
ITERATIONS = int(os.environ.get("TRITONLITE_FUZZ_ITERATIONS", "4000"))
TIME_LIMIT_S = float(os.environ.get("TRITONLITE_FUZZ_SECONDS", "12"))


def _signature(max_batch_size: int) -> Signature:
    cfg = pb.ModelConfig(name="m", max_batch_size=max_batch_size)
    types = pb.DataType.values_by_name
    for name, dt, dims in (
        ("a", "TYPE_FP32", [-1]),
        ("s", "TYPE_STRING", [-1]),
        ("z", "TYPE_INT64", [-1, -1]),
        ("b", "TYPE_BOOL", [2]),
        ("h", "TYPE_FP16", [-1]),
        ("u", "TYPE_UINT8", [-1]),
    ):
        cfg.input.add(name=name, data_type=types[dt].number, dims=dims, optional=True)
    cfg.output.add(name="o", data_type=types["TYPE_FP32"].number, dims=[-1])
    return Signature.from_config(cfg, Path("."))


SIGNATURES = (_signature(0), _signature(8))

HOSTILE: list[Any] = [
    {},
    {"a": 1},
    {"data": [1]},
    [],
    [[]],
    [{}],
    [[{}]],
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    2**31,
    2**63,
    2**64 + 1,
    -(2**63) - 1,
    10**30,
    -(10**30),
    1.5,
    -0.0,
    1e308,
    "x",
    "",
    "é",
    "\u0000",
    "²",
    "1",
    "FP32",
    "BYTES",
    "BF16",
    "TYPE_FP32",
    [0, 10**20],
    [10**6] * 10,
    [2**62, 2**62],
    [0, 2**63 - 1, 2**63 - 1],
    [-1],
    [1.5],
    ["1"],
    [True],
    [None],
    [1, [2]],
    [[1], 2],
    [[[[[[1]]]]]],
    [2**64],
    [-(2**70)],
    list(range(50)),
    {"binary_data_size": 10**20},
    {"binary_data_size": -1},
    {"binary_data_size": 2**63},
    {"shared_memory_region": "r", "shared_memory_byte_size": 2**70},
    {"shared_memory_region": {}, "shared_memory_byte_size": 4},
    {"classification": 2**80},
    {"binary_data": "yes"},
    {"sequence_id": 2**70},
    {"priority": 2**70},
    {"timeout": -5},
    {"k": {}},
    {"k": [1]},
    {"triton_x": 1},
]


def _deep(n: int) -> Any:
    v: Any = 1
    for _ in range(n):
        v = [v]
    return v


HTTP_BASES: list[dict[str, Any]] = [
    {"inputs": [{"name": "a", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]},
    {
        "id": "r1",
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}}
        ],
        "outputs": [{"name": "o", "parameters": {"binary_data": True}}],
    },
    {
        "inputs": [
            {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["x", "yz"]},
            {"name": "z", "datatype": "INT64", "shape": [1, 2], "data": [[1, 2]]},
        ],
        "parameters": {"sequence_id": 3, "sequence_start": True, "priority": 1, "custom": "v"},
    },
    {
        "inputs": [
            {"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]},
            {"name": "u", "datatype": "UINT8", "shape": [0], "data": []},
        ],
        "outputs": [
            {"name": "o", "parameters": {"classification": 2}},
            {
                "name": "o",
                "parameters": {"shared_memory_region": "r", "shared_memory_byte_size": 8},
            },
        ],
    },
    {
        "inputs": [
            {
                "name": "h",
                "datatype": "FP16",
                "shape": [3],
                "parameters": {
                    "shared_memory_region": "r",
                    "shared_memory_byte_size": 6,
                    "shared_memory_offset": 2,
                },
            }
        ]
    },
    {
        "inputs": [
            {
                "name": "s",
                "datatype": "BYTES",
                "shape": [1, 1],
                "parameters": {"binary_data_size": 7},
            }
        ]
    },
]
HTTP_TAILS = [b"", b"\x00" * 8, b"\x03\x00\x00\x00abc", b"\x07\x00\x00\x00", b"\xff" * 7]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


def _mutate_json(rng: random.Random, doc: Any) -> Any:
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)
        path = rng.choice(paths)
        roll = rng.random()
        if roll < 0.7:
            value = rng.choice(HOSTILE)
        elif roll < 0.8:
            value = _deep(rng.choice([50, 101, 150, 250]))
        elif roll < 0.9:
            value = {
                rng.choice(
                    [
                        "data",
                        "shape",
                        "datatype",
                        "name",
                        "parameters",
                        "inputs",
                        "outputs",
                        "id",
                        "binary_data_size",
                    ]
                ): rng.choice(HOSTILE)
            }
        else:
            value = [rng.choice(HOSTILE) for _ in range(rng.randint(0, 4))]
        doc = _set(doc, path, json.loads(json.dumps(value)))  # a fresh copy: never shared
    return doc


def _mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if not b or op < 0.3:
            b.insert(rng.randint(0, len(b)), rng.randrange(256))
        elif op < 0.6:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op < 0.8:
            del b[rng.randrange(len(b))]
        else:
            cut = rng.randint(0, len(b))
            b = b[:cut]
    return bytes(b)


class Escapes:
    """What escaped the decoders: (input, exception) pairs, a few of each kind kept."""

    def __init__(self) -> None:
        self.cases: dict[str, tuple[str, str]] = {}
        self.runs = 0

    def run(self, label: str, fn: Callable[[], None]) -> None:
        self.runs += 1
        try:
            fn()
        except TritonliteError as exc:
            if exc.code == ErrorCode.INTERNAL:
                self.cases.setdefault(f"INTERNAL: {exc.message[:80]}", (label, repr(exc)))
            elif "Traceback" in exc.message:
                self.cases.setdefault("traceback in message", (label, repr(exc)))
        except RecursionError as exc:
            self.cases.setdefault("RecursionError", (label, repr(exc)))
        except Exception as exc:  # anything else would be a 500 / INTERNAL
            self.cases.setdefault(
                f"{type(exc).__name__}: {str(exc)[:80]}", (label, f"{type(exc).__name__}: {exc}")
            )

    def check(self, minimum: int) -> None:
        print(f"{self.runs} inputs")
        assert self.runs >= minimum, f"only {self.runs} inputs ran in the time limit"
        report = "\n".join(
            f"{kind}\n    input: {label[:400]}\n    raised: {err[:300]}"
            for kind, (label, err) in self.cases.items()
        )
        assert not self.cases, f"seed {SEED}: client input escaped as a server error:\n{report}"


def _validate_all(req: Any) -> None:
    for sig in SIGNATURES:
        validate.prepare(sig, req, SharedMemoryManager())


def test_http_decoder_fuzz() -> None:
    rng = random.Random(SEED)
    escapes = Escapes()
    deadline = time.monotonic() + TIME_LIMIT_S
    for i in range(ITERATIONS):
        if time.monotonic() > deadline:
            break
        doc = json.loads(json.dumps(rng.choice(HTTP_BASES)))
        tail = rng.choice(HTTP_TAILS)
        if rng.random() < 0.8:
            doc = _mutate_json(rng, doc)
        head = json.dumps(doc).encode()
        if rng.random() < 0.3:
            head = _mutate_bytes(rng, head)
        body = head + tail
        header_length: int | None = len(head) if tail or rng.random() < 0.5 else None
        if rng.random() < 0.1:
            header_length = rng.choice([-1, 0, len(body) + 1, rng.randint(0, len(body))])

        def one(body: bytes = body, header_length: int | None = header_length) -> None:
            version = parse_version(rng.choice(["", "1", "2"]))
            req = http_codec.decode_infer(body, header_length, "m", version)
            _validate_all(req)

        escapes.run(f"#{i} header_length={header_length} body={body[:600]!r}", one)
    escapes.check(minimum=500)


def _grpc_base(rng: random.Random) -> Any:
    req = pb.ModelInferRequest(model_name="m", model_version=rng.choice(["", "1"]), id="x")
    kind = rng.randrange(5)
    if kind == 0:
        t = req.inputs.add(name="a", datatype="FP32", shape=[1, 4])
        req.raw_input_contents.append(np.arange(4, dtype=np.float32).tobytes())
    elif kind == 1:
        t = req.inputs.add(name="z", datatype="INT64", shape=[1, 2])
        t.contents.int64_contents.extend([1, 2])
        t = req.inputs.add(name="s", datatype="BYTES", shape=[2])
        t.contents.bytes_contents.extend([b"a", b"\xff"])
    elif kind == 2:
        t = req.inputs.add(name="s", datatype="BYTES", shape=[1])
        req.raw_input_contents.append(b"\x01\x00\x00\x00q")
        o = req.outputs.add(name="o")
        o.parameters["classification"].int64_param = 2
    elif kind == 3:
        t = req.inputs.add(name="h", datatype="FP16", shape=[3])
        t.parameters["shared_memory_region"].string_param = "r"
        t.parameters["shared_memory_byte_size"].int64_param = 6
        o = req.outputs.add(name="o")
        o.parameters["shared_memory_region"].string_param = "r"
        o.parameters["shared_memory_byte_size"].int64_param = 8
    else:
        t = req.inputs.add(name="b", datatype="BOOL", shape=[2])
        t.contents.bool_contents.extend([True, False])
        req.parameters["sequence_id"].int64_param = 5
        req.parameters["priority"].uint64_param = 1
        req.parameters["custom"].string_param = "v"
    return req


_DIMS = [0, 1, 2, 3, -1, -(2**63), 2**31, 2**32 + 1, 2**62, 2**63 - 1]
_DTYPES = [
    "FP32",
    "BYTES",
    "BF16",
    "INT8",
    "UINT64",
    "BOOL",
    "FP16",
    "",
    "fp32",
    "TYPE_FP32",
    "\u00e9",
]
_PARAM_KINDS = ["bool_param", "int64_param", "string_param", "double_param", "uint64_param"]
_PARAM_KEYS = [
    "sequence_id",
    "sequence_start",
    "priority",
    "timeout",
    "custom",
    "triton_enable_empty_final_response",
    "triton_x",
    "shared_memory_region",
    "shared_memory_byte_size",
    "shared_memory_offset",
    "classification",
    "binary_data",
]


def _param(rng: random.Random, target: Any) -> None:
    key = rng.choice(_PARAM_KEYS)
    kind = rng.choice(_PARAM_KINDS)
    value: Any = {
        "bool_param": rng.random() < 0.5,
        "int64_param": rng.choice([-(2**63), -1, 0, 4, 2**63 - 1]),
        "string_param": rng.choice(["", "r", "é", "x" * 300]),
        "double_param": rng.choice([0.5, float("nan"), float("inf")]),
        "uint64_param": rng.choice([0, 1, 2**64 - 1]),
    }[kind]
    setattr(target[key], kind, value)


def _mutate_grpc(rng: random.Random, req: Any) -> None:
    for _ in range(rng.randint(1, 3)):
        roll = rng.randrange(9)
        tensors = list(req.inputs)
        if roll == 0 and tensors:
            t = rng.choice(tensors)
            del t.shape[:]
            t.shape.extend(rng.choice(_DIMS) for _ in range(rng.randint(0, 4)))
        elif roll == 1 and tensors:
            rng.choice(tensors).datatype = rng.choice(_DTYPES)
        elif roll == 2 and tensors:
            _param(rng, rng.choice(tensors).parameters)
        elif roll == 3:
            _param(rng, req.parameters)
        elif roll == 4:
            _param(rng, req.outputs.add(name=rng.choice(["o", "x", ""])).parameters)
        elif roll == 5:
            req.raw_input_contents.append(rng.choice(HTTP_TAILS))
        elif roll == 6 and tensors:
            c = rng.choice(tensors).contents
            field = rng.choice(
                [
                    "bool_contents",
                    "int_contents",
                    "int64_contents",
                    "uint_contents",
                    "uint64_contents",
                    "fp32_contents",
                    "fp64_contents",
                    "bytes_contents",
                ]
            )
            values: Any = {
                "bool_contents": [True],
                "bytes_contents": [b"x", b""],
                "fp32_contents": [1.0, float("nan")],
                "fp64_contents": [1e308],
            }.get(field, [0, 1, 2**31 - 1])
            getattr(c, field).extend(values[: rng.randint(0, len(values))])
        elif roll == 7:
            req.model_version = rng.choice(["²", "1" * 5000, "-1", "00", " 1", "1.0", "9" * 20])
        else:
            t = req.inputs.add(name=rng.choice(["a", "s", "z", "u"]), datatype=rng.choice(_DTYPES))
            t.shape.extend(rng.choice(_DIMS) for _ in range(rng.randint(0, 3)))


def test_grpc_decoder_fuzz() -> None:
    rng = random.Random(SEED + 1)
    escapes = Escapes()
    deadline = time.monotonic() + TIME_LIMIT_S
    for i in range(ITERATIONS):
        if time.monotonic() > deadline:
            break
        msg = _grpc_base(rng)
        if rng.random() < 0.8:
            _mutate_grpc(rng, msg)
        data = msg.SerializeToString()
        if rng.random() < 0.4:
            data = _mutate_bytes(rng, data)

        def one(data: bytes = data) -> None:
            req = grpc_codec.decode_infer(grpc_codec.parse(data))
            _validate_all(req)

        escapes.run(f"#{i} {base64.b64encode(data[:600]).decode()}", one)
    escapes.check(minimum=500)


@pytest.mark.parametrize(
    "text",
    ["²", "1" * 4301, "1" * 20, "٣", "-1", "-2x", "", " ", "+", "\u0000", "9223372036854775808"],
)
def test_parse_version_refuses_what_is_not_a_version(text: str) -> None:
    if not text:  # "" is "the server picks"
        assert parse_version(text) == -1
        return
    with pytest.raises(TritonliteError) as exc:
        parse_version(text)
    assert exc.value.code == ErrorCode.INVALID_ARG
    assert "version should be an integral value > 0" in exc.value.message
    assert len(exc.value.message) < 250


@pytest.mark.parametrize(
    ("text", "version"),
    [("+1", 1), (" 1", 1), ("1_0", 1), ("0x1", 0), ("1.0", 1), ("\t7abc", 7), ("-0", 0)],
)
def test_parse_version_reads_as_std_stol(text: str, version: int) -> None:
    """Triton reads a version string with ``std::stol``: leading blanks, a sign, the digits up
    to the first other character."""
    assert parse_version(text) == version


@pytest.mark.parametrize(
    "text,expected", [("", -1), ("0", 0), ("1", 1), ("007", 7), ("9223372036854775807", 2**63 - 1)]
)
def test_parse_version_accepts_versions(text: str, expected: int) -> None:
    assert parse_version(text) == expected
