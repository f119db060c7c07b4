"""Message classes for Triton's protos, built in a private descriptor pool.

tritonclient ships generated modules for the same files (package ``inference``) in protobuf's
default pool; loading ours there would clash ("duplicate symbol 'inference.DataType'"). So the
FileDescriptorSet generated from ``protos/`` by ``tools/gen_proto.py`` (DO NOT EDIT
``descriptors.binpb`` by hand) is loaded into a pool of our own and the classes come from it.

Use as ``from tritonlite._proto import pb`` then ``pb.ModelConfig()``, ``pb.ModelInferRequest()``.
"""

from __future__ import annotations

import pathlib
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_SET = pathlib.Path(__file__).with_name("descriptors.binpb")

POOL = descriptor_pool.DescriptorPool()
_files = descriptor_pb2.FileDescriptorSet.FromString(_SET.read_bytes())
for _f in _files.file:
    POOL.Add(_f)

SERVICE_NAME = "inference.GRPCInferenceService"


class _Messages:
    """Attribute access to every top-level message and enum of package ``inference``."""

    def __init__(self) -> None:
        for fdp in _files.file:
            fd = POOL.FindFileByName(fdp.name)
            for name, desc in fd.message_types_by_name.items():
                setattr(self, name, message_factory.GetMessageClass(desc))
            for name, edesc in fd.enum_types_by_name.items():
                setattr(self, name, edesc)

    def __getattr__(self, name: str) -> Any:  # for type checkers; real names set in __init__
        raise AttributeError(f"no message 'inference.{name}' in tritonlite's protos")


pb: Any = _Messages()
service = POOL.FindServiceByName(SERVICE_NAME)
