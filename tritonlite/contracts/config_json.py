"""Model config <-> JSON, the way Triton renders and reads it (PROTOCOL.md §1.5).

Rendering is protobuf's JSON with field names as in the .proto and every field without presence
printed with its default, then every 64-bit integer turned back from the string protobuf emits
into a JSON number (Triton's ``ModelConfigToJson``). Map keys stay strings: JSON has no other kind.
Unset sub-messages stay absent; perf_analyzer picks the scheduler by key presence.

Reading accepts what Triton's ``JsonToModelConfig`` accepts: protobuf JSON with 64-bit integers as
numbers or strings, enum names in any case, unknown fields rejected.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from tritonlite._proto import pb
from tritonlite.contracts.errors import invalid_arg

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and bool(
        field.message_type.GetOptions().map_entry
    )


def _is_repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)
    if flag is None:  # older protobuf: no is_repeated, and label is not deprecated yet
        return bool(field.label == FieldDescriptor.LABEL_REPEATED)
    return bool(flag)


def _fix_value(field: FieldDescriptor, value: Any) -> Any:
    """One (non-map) field's JSON value with its 64-bit integers as ints."""
    if field.type in _INT64_TYPES:
        if _is_repeated(field):
            return [int(v) for v in value]
        return int(value)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if _is_repeated(field):
            return [_fix_message(field.message_type, v) for v in value]
        return _fix_message(field.message_type, value)
    return value


def _fix_message(desc: Descriptor, obj: dict[str, Any]) -> dict[str, Any]:
    for field in desc.fields:
        if field.name not in obj:
            continue
        value = obj[field.name]
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            obj[field.name] = {k: _fix_value(value_field, v) for k, v in value.items()}
        else:
            obj[field.name] = _fix_value(field, value)
    return obj


def render_json(cfg: Any) -> dict[str, Any]:
    """The config as Triton's ``/v2/models/{m}/config`` returns it.

    Parameters
    ----------
    cfg
        A ``pb.ModelConfig`` (normally normalized).

    Returns
    -------
    dict
        protobuf JSON with proto field names, defaults printed for fields without presence,
        enums as names, every int64/uint64 (repeated and map values included) as an int, map
        keys as strings, unset sub-messages absent.
    """
    obj = json_format.MessageToDict(
        cfg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _fix_message(cfg.DESCRIPTOR, obj)


def render_json_bytes(cfg: Any) -> bytes:
    """``render_json(cfg)`` serialized with orjson (compact, UTF-8)."""
    return orjson.dumps(render_json(cfg))


def _upper_enums(desc: Descriptor, obj: Any) -> None:
    # Triton parses with case_insensitive_enum_parsing: a name that is not found as written is
    # tried in upper case.
    if not isinstance(obj, dict):
        return
    for field in desc.fields:
        if field.name in obj:
            key = field.name
        elif field.json_name in obj:
            key = field.json_name
        else:
            continue
        value = obj[key]
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            if isinstance(value, dict):
                for k, v in value.items():
                    value[k] = _upper_one(value_field, v)
        elif _is_repeated(field) and isinstance(value, list):
            obj[key] = [_upper_one(field, v) for v in value]
        else:
            obj[key] = _upper_one(field, value)


def _upper_one(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        if field.enum_type.values_by_name.get(value) is None:
            upper = value.upper()
            if field.enum_type.values_by_name.get(upper) is not None:
                return upper
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        _upper_enums(field.message_type, value)
    return value


def parse_json(text: str) -> Any:
    """Parse a model config given as JSON (the ``config`` parameter of a load request).

    Parameters
    ----------
    text
        protobuf JSON of ``inference.ModelConfig``; 64-bit integers may be numbers or strings,
        enum names may be in any case.

    Returns
    -------
    pb.ModelConfig

    Raises
    ------
    TritonliteError
        INVALID_ARG when the text is not JSON, not an object, or not a valid ModelConfig
        (unknown fields included).
    """
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise invalid_arg(f"failed to parse model configuration JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise invalid_arg("failed to parse model configuration JSON: expected a JSON object")
    cfg = pb.ModelConfig()
    _upper_enums(cfg.DESCRIPTOR, obj)
    try:
        json_format.ParseDict(obj, cfg, ignore_unknown_fields=False)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise invalid_arg(f"failed to parse model configuration JSON: {exc}") from None
    return cfg
