"""Model repositories the compatibility tests serve (real ONNX graphs, written to tmp dirs)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.onnx_graphs import write_add_sub, write_identity, write_mlp  # noqa: E402

__all__ = ["DTYPES", "build_http_repo", "write_add_sub", "write_identity", "write_mlp"]

DTYPES = ["BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64",
          "FP16", "BF16", "FP32", "FP64"]


def build_http_repo(repo: Path) -> Path:
    """add_sub (batching, dynamic batching), add_sub_nobatch, identities of every dtype."""
    write_add_sub(repo, "add_sub", 8, extra_config="dynamic_batching { }\n")
    write_add_sub(repo, "add_sub_nobatch", 0)
    write_add_sub(repo, "classifier", 1, dims=4, label_file=["dog", "cat", "bird", "fish"])
    for dtype in DTYPES:
        write_identity(repo, f"identity_{dtype.lower()}", dtype, [4], 8)
    write_identity(repo, "identity_string", "BYTES", [4], 8)
    write_identity(repo, "identity_variable", "FP32", [-1], 8)
    return repo
