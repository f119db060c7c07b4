"""gRPC inference codec: ModelInferRequest bytes -> InferRequest, InferResponse -> bytes.

Inputs come from, in Triton's priority: shared-memory parameters, typed ``contents``, or the
next entry of ``raw_input_contents`` (consumed in input order, skipping the other two kinds).
Raw contents become numpy arrays over the message's bytes, no copies. Outputs always travel
in ``raw_output_contents``, one entry per output, index-aligned, an empty entry for
shared-memory outputs (the C++ client indexes it for every output).

Why this codec works on bytes (profiled, ``bench/bench_grpc.py``): reading a request through
the generated classes costs ~2 µs per input tensor in attribute access alone, and building a
response ~3 µs per output. So requests are parsed with ``_Wire``, a view of
ModelInferRequest that declares its message fields as ``bytes`` (same field numbers, so the
same wire format): each input's, output's and parameter's serialized form is then a dict key
into a small cache of what it decodes to, since a client sends the same tensor headers again
and again. Responses are written as wire bytes directly: cached per-tensor headers plus
length-prefixed raw contents, joined once (a large response is not joined at all: its parts go
to the socket as they are). ``tests/frontends/test_grpc_codec.py`` holds both
directions to what the message classes build and parse.

Over 500 lines, one module: it is the one place that converts between the protobuf messages of
every RPC and the core's plain data, so a field's two directions sit side by side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from tritonlite._proto import pb
from tritonlite.contracts import datatypes
from tritonlite.contracts.errors import invalid_arg
from tritonlite.contracts.types import (
    InferInput,
    InferRequest,
    InferResponse,
    RequestedOutput,
    ShmRef,
)
from tritonlite.contracts.versions import parse_version

# The only triton_-prefixed request parameter a client may send (Triton's
# TRITON_RESERVED_REQUEST_PARAMS); the C++ client and perf_analyzer send it on every request.
EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL = "triton_final_response"
MAX_MESSAGE = 2**31 - 1  # gRPC's (and Triton's) message size limit
# a response this large is handed to the transport unjoined: a join would copy every output
# once more (4 MiB: ~0.5 ms of CPU and page faults), where the pieces cost ~1 µs each
GATHER_AT = 1 << 16

_SHM_KEYS = frozenset(("shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"))
_CACHE_LIMIT = 4096

# wire datatype -> (typed contents field, numpy dtype the field holds)
_CONTENTS: dict[str, tuple[str, Any]] = {
    "BOOL": ("bool_contents", np.bool_),
    "INT8": ("int_contents", np.int32),
    "INT16": ("int_contents", np.int32),
    "INT32": ("int_contents", np.int32),
    "INT64": ("int64_contents", np.int64),
    "UINT8": ("uint_contents", np.uint32),
    "UINT16": ("uint_contents", np.uint32),
    "UINT32": ("uint_contents", np.uint32),
    "UINT64": ("uint64_contents", np.uint64),
    "FP32": ("fp32_contents", np.float32),
    "FP64": ("fp64_contents", np.float64),
    "BYTES": ("bytes_contents", None),
}
# the datatype Triton names when contents sit in a field that does not match the input
_FIELD_TYPE = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}


def _wire_class() -> Any:
    """ModelInferRequest with its message-typed fields read as raw bytes (same field numbers)."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tritonlite_grpc_wire.proto", package="tritonlite.grpcwire", syntax="proto3"
    )
    msg = fdp.message_type.add(name="InferRequestWire")
    for number, name, kind, label in (
        (1, "model_name", F.TYPE_STRING, F.LABEL_OPTIONAL),
        (2, "model_version", F.TYPE_STRING, F.LABEL_OPTIONAL),
        (3, "id", F.TYPE_STRING, F.LABEL_OPTIONAL),
        (4, "parameters", F.TYPE_BYTES, F.LABEL_REPEATED),  # map entries
        (5, "inputs", F.TYPE_BYTES, F.LABEL_REPEATED),
        (6, "outputs", F.TYPE_BYTES, F.LABEL_REPEATED),
        (7, "raw_input_contents", F.TYPE_BYTES, F.LABEL_REPEATED),
    ):
        msg.field.add(name=name, number=number, type=kind, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tritonlite.grpcwire.InferRequestWire")
    )


_Wire = _wire_class()
_ParamEntry = pb.ModelInferRequest.ParametersEntry
_InputTensor = pb.ModelInferRequest.InferInputTensor
_OutputTensor = pb.ModelInferRequest.InferRequestedOutputTensor


def param_value(p: Any) -> tuple[str | None, Any]:
    """(oneof field name or None, value) of an InferParameter / ModelRepositoryParameter."""
    kind = p.WhichOneof("parameter_choice")
    return kind, (getattr(p, kind) if kind is not None else None)


def parse(data: bytes) -> Any:
    """The wire view of a serialized ModelInferRequest (INVALID_ARG if it is malformed).

    A message of ``SPLIT_AT`` bytes or more keeps its ``raw_input_contents`` where they are:
    views of ``data`` (``_split``), not the two copies protobuf makes of each (into its arena,
    then into a new bytes on access); every other field is still protobuf's to parse and
    check."""
    try:
        if len(data) >= SPLIT_AT:
            split = _split(data)
            if split is not None:
                return _Split(_Wire.FromString(split[0]), split[1])
        return _Wire.FromString(data)
    except message.DecodeError as exc:
        raise invalid_arg(f"failed to parse the ModelInferRequest message: {exc}") from None


# a request this large has its raw contents taken as views (parse); below it protobuf's copies
# cost less than the scan (~1 µs per field)
SPLIT_AT = 1 << 16
_RAW_TAG = 0x3A  # field 7 (raw_input_contents), wire type 2 (length-delimited)


class _Split:
    """A large request's wire view: protobuf's view of its other fields, and its raw contents
    as views of the message."""

    __slots__ = ("_w", "raw_input_contents")

    def __init__(self, w: Any, raws: list[memoryview]) -> None:
        self._w = w
        self.raw_input_contents = raws

    def __getattr__(self, name: str) -> Any:
        return getattr(self._w, name)


def _read_varint(data: bytes, pos: int, n: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``pos``; (-1, pos) when it is cut short or
    longer than ten bytes."""
    value = 0
    shift = 0
    while pos < n and shift < 70:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    return -1, pos


def _split(data: bytes) -> tuple[bytes, list[memoryview]] | None:
    """A serialized ModelInferRequest's top level cut in two: every other field's bytes, in
    order, and each raw_input_contents entry as a view of ``data``. None where the top level
    is not plain (groups, a field cut short): protobuf then parses the whole and says why."""
    view = memoryview(data)
    n = len(data)
    raws: list[memoryview] = []
    kept: list[bytes] = []
    start = pos = 0
    while pos < n:
        at = pos
        tag, pos = _read_varint(data, pos, n)
        kind = tag & 7
        if tag < 8:  # cut short, or field number 0
            return None
        if kind == 2:
            length, pos = _read_varint(data, pos, n)
            if length < 0 or length > n - pos:
                return None
            if tag == _RAW_TAG:
                if at > start:
                    kept.append(data[start:at])
                raws.append(view[pos : pos + length])
                start = pos + length
            pos += length
        elif kind == 0:
            value, pos = _read_varint(data, pos, n)
            if value < 0:
                return None
        elif kind == 1 or kind == 5:
            pos += 8 if kind == 1 else 4
            if pos > n:
                return None
        else:
            return None
    if start < n:
        kept.append(data[start:])
    return b"".join(kept), raws


# -- request parameters -----------------------------------------------------------------------
# serialized map entry -> (InferRequest attribute, or None for a custom parameter; key; value),
# cached only once the entry has passed validation
_PARAMS: dict[bytes, tuple[str | None, str, Any]] = {}


def _decode(cls: Any, b: bytes) -> Any:
    """A nested message of the request (the wire view leaves them serialized): INVALID_ARG
    when malformed, as ``parse``."""
    try:
        return cls.FromString(b)
    except message.DecodeError as exc:
        raise invalid_arg(f"failed to parse the ModelInferRequest message: {exc}") from None


def _param_entry(b: bytes) -> tuple[str | None, str, Any]:
    entry = _decode(_ParamEntry, b)
    key = entry.key
    kind, value = param_value(entry.value)
    out = (_param_target(key, kind, value), key, value)
    if len(_PARAMS) >= _CACHE_LIMIT:
        _PARAMS.clear()
    _PARAMS[b] = out
    return out


def _param_target(key: str, kind: str | None, v: Any) -> str | None:
    """The InferRequest attribute a valid parameter sets (None: ``req.parameters[key]``)."""
    if key == "sequence_id":
        if kind == "int64_param":
            if v < 0:
                raise invalid_arg("invalid value for 'sequence_id', expected value >= 0.")
            return "sequence_id"
        if kind == "string_param":
            return "sequence_id"
        raise invalid_arg(
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."
        )
    if key == "sequence_start" or key == "sequence_end":
        if kind != "bool_param":
            raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
        return key
    if key == "priority":
        if kind == "uint64_param" or (kind == "int64_param" and v >= 0):
            return "priority"
        if kind == "int64_param":
            raise invalid_arg("invalid value for 'priority', expected value >= 0.")
        raise invalid_arg(
            "invalid value type for 'priority' parameter, expected int64_param or uint64_param."
        )
    if key == "timeout":
        if kind != "int64_param":
            raise invalid_arg("invalid value type for 'timeout' parameter, expected int64_param.")
        if v < 0:
            raise invalid_arg("invalid value for 'timeout', expected value >= 0.")
        return "timeout_us"
    if key == EMPTY_FINAL:
        if kind != "bool_param":
            raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
        return "enable_empty_final_response"
    if key.startswith("triton_"):
        raise invalid_arg(
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
            f"following keys starting with 'triton_' are allowed: {EMPTY_FINAL} (got '{key}')"
        )
    if kind in ("int64_param", "bool_param", "string_param", "double_param"):
        return None
    raise invalid_arg(
        f"invalid value type for '{key}' parameter, expected int64_param, "
        "bool_param, string_param or double_param."
    )


# -- tensors ----------------------------------------------------------------------------------
def _shm_ref(name: str, params: Any) -> tuple[str, int, int] | None:
    """(region, byte_size, offset) from a tensor's parameters (Triton accepts exactly these
    types), or None."""
    region_p = params.get("shared_memory_region")
    offset_p = params.get("shared_memory_offset")
    size_p = params.get("shared_memory_byte_size")
    if region_p is None:
        if offset_p is not None or size_p is not None:
            raise invalid_arg(
                f"tensor '{name}' sets shared memory offset or size without a region "
                "('shared_memory_region')"
            )
        return None
    kind, region = param_value(region_p)
    if kind != "string_param":
        raise invalid_arg(
            f"invalid value type for 'shared_memory_region' parameter for tensor "
            f"'{name}', expected string_param."
        )
    offset = 0
    if offset_p is not None:
        kind, offset = param_value(offset_p)
        if kind != "int64_param":
            raise invalid_arg(
                f"invalid value type for 'shared_memory_offset' parameter for "
                f"tensor '{name}', expected int64_param."
            )
    if size_p is None:
        raise invalid_arg(
            f"tensor '{name}': 'shared_memory_byte_size' is required with 'shared_memory_region'"
        )
    kind, size = param_value(size_p)
    if kind != "int64_param":
        raise invalid_arg(
            f"invalid value type for 'shared_memory_byte_size' parameter for "
            f"tensor '{name}', expected int64_param."
        )
    if offset < 0 or size < 0:
        raise invalid_arg(f"tensor '{name}': shared memory offset and byte size must be >= 0")
    return region, size, offset


@dataclass(frozen=True, slots=True)
class _InputSpec:
    """What one serialized InferInputTensor decodes to, apart from its data."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    count: int
    dtype: np.dtype[Any] | None  # None for BYTES
    nbytes: int  # expected raw size of a fixed-size tensor
    shm: tuple[str, int, int] | None
    params: dict[str, Any] | None  # the input's other parameters
    tensor: Any  # the parsed message when it carries typed ``contents`` (never cached)


_INPUTS: dict[bytes, _InputSpec] = {}


def _input_spec(b: bytes) -> _InputSpec:
    t = _decode(_InputTensor, b)
    name, dt = t.name, t.datatype
    shape = tuple(t.shape)
    if shape and min(shape) < 0:
        raise invalid_arg(f"shape of input '{name}' must be an array of non-negative integers")
    if not datatypes.is_wire_name(dt):
        raise invalid_arg(f"input '{name}': invalid datatype '{dt}'")
    shm, params = None, None
    if t.parameters:
        shm = _shm_ref(name, t.parameters)
        params = {k: param_value(p)[1] for k, p in t.parameters.items() if k not in _SHM_KEYS}
    has_contents = t.HasField("contents")
    if shm is not None and has_contents:
        raise invalid_arg(
            f"unexpected 'content' provided when using shared memory for input tensor '{name}'"
        )
    count = math.prod(shape)
    dtype = None if dt == "BYTES" else datatypes.numpy_dtype(dt)
    spec = _InputSpec(
        name,
        dt,
        shape,
        count,
        dtype,
        count * (dtype.itemsize if dtype else 0),
        shm,
        params or None,
        t if has_contents else None,
    )
    if not has_contents:
        if len(_INPUTS) >= _CACHE_LIMIT:
            _INPUTS.clear()
        _INPUTS[b] = spec
    return spec


def _from_contents(t: Any, shape: tuple[int, ...], model: str) -> np.ndarray[Any, Any]:
    """A typed ``contents`` message -> array (the slow path; raw contents are the fast one)."""
    name, dt, c = t.name, t.datatype, t.contents
    entry = _CONTENTS.get(dt)
    for field, fdt in _FIELD_TYPE.items():
        if (entry is None or field != entry[0]) and len(getattr(c, field)):
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model '{model}' "
                f"of type '{fdt}', expected datatype '{dt}'"
            )
    if entry is None:
        raise invalid_arg(
            f"input '{name}': {dt} tensors have no typed 'contents' field; "
            "send them in raw_input_contents"
        )
    values = getattr(c, entry[0])
    count = math.prod(shape)
    if dt == "BYTES":
        if len(values) != count:
            raise invalid_arg(
                f"expected {count} BYTES elements, found {len(values)} for input '{name}'"
            )
        arr = np.empty(count, dtype=object)
        arr[:] = list(values)
        return arr.reshape(shape)
    target = datatypes.numpy_dtype(dt)
    flat = np.array(values, dtype=entry[1])
    if flat.size != count:
        raise invalid_arg(
            f"unexpected total byte size {flat.size * target.itemsize} for input "
            f"'{name}', expecting {count * target.itemsize}"
        )
    return flat.astype(target, copy=False).reshape(shape)


_OUTPUTS: dict[bytes, tuple[str, int, tuple[str, int, int] | None, dict[str, Any] | None]] = {}


def _output_spec(b: bytes) -> tuple[str, int, tuple[str, int, int] | None, dict[str, Any] | None]:
    o = _decode(_OutputTensor, b)
    classification, shm, params = 0, None, None
    if o.parameters:
        shm = _shm_ref(o.name, o.parameters)
        params = {}
        for key, p in o.parameters.items():
            if key in _SHM_KEYS or key == "binary_data":  # binary_data is HTTP's; ignored
                continue
            kind, v = param_value(p)
            if key == "classification":
                if kind != "int64_param":
                    raise invalid_arg(
                        f"invalid value type for 'classification' parameter for "
                        f"output '{o.name}', expected int64_param."
                    )
                if v < 0:
                    raise invalid_arg(f"output '{o.name}': 'classification' must be >= 0")
                classification = v
            else:
                params[key] = v
    spec = (o.name, classification, shm, params or None)
    if len(_OUTPUTS) >= _CACHE_LIMIT:
        _OUTPUTS.clear()
    _OUTPUTS[b] = spec
    return spec


def decode_infer(w: Any) -> InferRequest:
    """The wire view (``parse``) of a ModelInferRequest -> InferRequest."""
    # upb's repeated fields have no __iter__: a for loop over one indexes it until IndexError
    # (~0.2 µs even when empty), so they are tested for emptiness and iterated as slices.
    model = w.model_name
    version = w.model_version
    req = InferRequest(model, parse_version(version) if version else -1, w.id)
    params = w.parameters
    if params:
        for b in params[:]:
            attr, key, value = _PARAMS.get(b) or _param_entry(b)
            if attr is None:
                req.parameters[key] = value
            else:
                setattr(req, attr, value)
    raw = w.raw_input_contents
    n_raw = len(raw)
    pos = 0
    inputs = req.inputs
    spec: _InputSpec | None = None
    try:
        for b in w.inputs[:]:
            spec = _INPUTS.get(b) or _input_spec(b)
            if spec.shm is not None:
                inp = InferInput(spec.name, spec.datatype, spec.shape, None, ShmRef(*spec.shm))
            elif spec.tensor is not None:
                if n_raw:
                    raise invalid_arg(
                        f"contents field must not be specified when using "
                        f"raw_input_contents for '{spec.name}' for model '{model}'"
                    )
                inp = InferInput(
                    spec.name,
                    spec.datatype,
                    spec.shape,
                    _from_contents(spec.tensor, spec.shape, model),
                )
            elif pos < n_raw:
                buf = raw[pos]
                pos += 1
                if spec.dtype is not None and len(buf) == spec.nbytes:
                    data = np.ndarray(spec.shape, spec.dtype, buf)
                else:  # BYTES, or the wrong size (from_buffer raises Triton's message)
                    data = datatypes.from_buffer(
                        spec.datatype, spec.shape, buf, f"input '{spec.name}'"
                    )
                inp = InferInput(spec.name, spec.datatype, spec.shape, data)
            elif spec.count == 0:
                inp = InferInput(
                    spec.name,
                    spec.datatype,
                    spec.shape,
                    np.empty(spec.shape, dtype=spec.dtype or object),
                )
            else:
                raise invalid_arg(
                    f"unable to find data for input tensor '{spec.name}' for "
                    f"model '{model}' in request."
                )
            if spec.params is not None:
                inp.parameters = dict(spec.params)
            inputs.append(inp)
    except (ValueError, OverflowError, MemoryError):  # numpy's limits on a tensor's shape
        assert spec is not None
        raise datatypes.shape_error(spec.shape, f"input '{spec.name}'") from None
    if pos != n_raw:
        raise invalid_arg(
            f"unexpected additional input data for model '{model}': "
            f"{n_raw} raw_input_contents for {pos} inputs that use them"
        )
    requested = w.outputs
    if requested:
        outs = req.outputs = []
        for b in requested[:]:
            name, classification, shm, params = _OUTPUTS.get(b) or _output_spec(b)
            outs.append(
                RequestedOutput(
                    name,
                    None,
                    classification,
                    ShmRef(*shm) if shm is not None else None,
                    dict(params) if params is not None else {},
                )
            )
    return req


# -- responses ----------------------------------------------------------------------------------
_VARINT = [bytes([i]) for i in range(128)]
_RAW_PREFIX = [b"\x32" + v for v in _VARINT]  # field 6 (raw_output_contents) of length < 128


def _varint(n: int) -> bytes:
    if n < 128:
        return _VARINT[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string_field(tag: bytes, text: str) -> bytes:
    b = text.encode("utf-8")
    return tag + _varint(len(b)) + b


_HEADS: dict[tuple[str, str], bytes] = {}  # (model_name, model_version) -> fields 1 and 2
_TENSORS: dict[tuple[str, str, tuple[int, ...]], bytes] = {}  # -> field 5 entry


def _head(model: str, version: str) -> bytes:
    key = (model, version)
    b = _HEADS.get(key)
    if b is None:
        if len(_HEADS) >= _CACHE_LIMIT:
            _HEADS.clear()
        b = _HEADS[key] = _string_field(b"\x0a", model) + _string_field(b"\x12", version)
    return b


def _tensor(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    key = (name, datatype, shape)
    b = _TENSORS.get(key)
    if b is None:
        t = pb.ModelInferResponse.InferOutputTensor(name=name, datatype=datatype, shape=shape)
        body = t.SerializeToString()
        if len(_TENSORS) >= _CACHE_LIMIT:
            _TENSORS.clear()
        b = _TENSORS[key] = b"\x2a" + _varint(len(body)) + body
    return b


def set_param(target: Any, key: str, value: Any) -> None:
    """Store a Python value in an InferParameter map entry, typed as Triton types it."""
    p = target[key]
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    else:
        p.string_param = str(value)


def _response_parts(resp: InferResponse) -> tuple[list[Any], int]:
    """The serialized ModelInferResponse of ``resp`` as parts to join, and its total size."""
    head = _head(resp.model_name, resp.model_version)
    parts: list[Any] = [head]
    size = len(head)
    if resp.id:
        parts.append(_string_field(b"\x1a", resp.id))
        size += len(parts[-1])
    if resp.parameters:
        params = pb.ModelInferResponse()
        for key, value in resp.parameters.items():
            set_param(params.parameters, key, value)
        parts.append(params.SerializeToString())
        size += len(parts[-1])
    raws: list[Any] = []
    for o in resp.outputs:
        tensor = _tensor(o.name, o.datatype, o.shape)
        parts.append(tensor)
        data = o.data
        if data is None:  # written to shared memory
            raws.append(b"\x32\x00")
            size += len(tensor) + 2
            continue
        dtype = data.dtype
        if dtype.kind in "OSU":
            blob: Any = datatypes.serialize_bytes(data)
            n = len(blob)
        elif data.flags.c_contiguous and dtype.byteorder != ">":
            blob = data  # joined straight from the array's buffer
            n = data.nbytes
        else:
            blob = datatypes.tensor_bytes(data)
            n = blob.nbytes
        prefix = _RAW_PREFIX[n] if n < 128 else b"\x32" + _varint(n)
        raws.append(prefix)
        raws.append(blob)
        size += len(tensor) + len(prefix) + n
    parts += raws
    if size > MAX_MESSAGE:
        raise invalid_arg(
            f"Response has byte size {size} which exceeds gRPC's byte size limit {MAX_MESSAGE}."
        )
    return parts, size


def encode_infer(resp: InferResponse) -> bytes | list[bytes | memoryview]:
    """InferResponse -> serialized ModelInferResponse (data in ``raw_output_contents``): one
    bytes, or for a response of ``GATHER_AT`` bytes or more the list of buffers whose
    concatenation it is (the outputs' arrays as byte views: the transport writes them to the
    socket as they are, ``frontends/base/call.py``)."""
    parts, size = _response_parts(resp)
    if size < GATHER_AT:
        return b"".join(parts)
    return [_byte_view(p) if type(p) is np.ndarray else p for p in parts]


def _byte_view(arr: Any) -> memoryview:
    """A C-contiguous array's memory as a flat byte view (any dtype, any number of dims)."""
    return memoryview(arr.reshape(-1).view(np.uint8))


def _final_entry(final: bool) -> bytes:
    m = pb.ModelInferResponse()
    m.parameters[FINAL].bool_param = final
    return bytes(m.SerializeToString())


_FINAL_PARAM = {True: _final_entry(True), False: _final_entry(False)}


def encode_stream(resp: InferResponse) -> bytes:
    """A serialized ModelStreamInferResponse: the response plus ``triton_final_response``."""
    parts, size = _response_parts(resp)
    final = _FINAL_PARAM[resp.final]
    size += len(final)
    if size > MAX_MESSAGE:
        raise invalid_arg(
            f"Response has byte size {size} which exceeds gRPC's byte size limit {MAX_MESSAGE}."
        )
    return b"".join([b"\x12", _varint(size), final, *parts])


def stream_error(text: str, req_id: str, model: str, version: str) -> bytes:
    """An inference error on a stream: ``error_message`` and the request's identity."""
    out = pb.ModelStreamInferResponse(error_message=text)
    r = out.infer_response
    r.id, r.model_name, r.model_version = req_id, model, version
    return bytes(out.SerializeToString())
