"""Regenerate tritonlite/_proto/descriptors.binpb from protos/*.proto.

Run as `python tools/gen_proto.py` (needs grpcio-tools). The output is a serialized
FileDescriptorSet; `tests/test_proto.py` fails when it is stale.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTOS = ("model_config.proto", "grpc_service.proto")
OUT = ROOT / "tritonlite" / "_proto" / "descriptors.binpb"


def build() -> bytes:
    """Return the serialized FileDescriptorSet for PROTOS, without source info."""
    import tempfile

    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        target = pathlib.Path(tmp) / "set.binpb"
        rc = protoc.main(
            ["protoc", f"-I{ROOT / 'protos'}", f"--descriptor_set_out={target}", *PROTOS]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed with exit status {rc}")
        return target.read_bytes()


def main() -> int:
    data = build()
    if "--check" in sys.argv:
        return 0 if OUT.exists() and OUT.read_bytes() == data else 1
    OUT.write_bytes(data)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
