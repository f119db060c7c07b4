"""Model repositories the compatibility tests serve (real ONNX graphs, written to tmp dirs)."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

_ONNX_TYPES = {
    "BOOL": TensorProto.BOOL, "INT8": TensorProto.INT8, "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32, "INT64": TensorProto.INT64, "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16, "UINT32": TensorProto.UINT32, "UINT64": TensorProto.UINT64,
    "FP16": TensorProto.FLOAT16, "FP32": TensorProto.FLOAT, "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
}


def _config_type(dtype: str) -> str:
    return "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def _tensor_cfg(kind: str, name: str, dtype: str, dims: list[int], extra: str = "") -> str:
    return (f'{kind} {{ name: "{name}" data_type: {_config_type(dtype)} '
            f'dims: [{", ".join(map(str, dims))}] {extra}}}\n')


def write_add_sub(repo: Path, name: str, max_batch_size: int, dims: int = 16,
                  extra_config: str = "", label_file: list[str] | None = None) -> None:
    shape: list[int | str] = (["B"] if max_batch_size else []) + [dims]
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
          for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        name, vi[:2], vi[2:])
    _save(graph, repo / name / "1" / "model.onnx")
    label = ' label_filename: "labels.txt"' if label_file else ""
    cfg = f"max_batch_size: {max_batch_size}\n"
    cfg += _tensor_cfg("input", "INPUT0", "FP32", [dims]) + _tensor_cfg("input", "INPUT1", "FP32", [dims])
    cfg += _tensor_cfg("output", "OUTPUT0", "FP32", [dims], label) + _tensor_cfg("output", "OUTPUT1", "FP32", [dims])
    (repo / name / "config.pbtxt").write_text(cfg + extra_config)
    if label_file:
        (repo / name / "labels.txt").write_text("\n".join(label_file) + "\n")


def write_identity(repo: Path, name: str, dtype: str, dims: list[int], max_batch_size: int,
                   extra_config: str = "") -> None:
    shape: list[int | str] = (["B"] if max_batch_size else []) + [d if d >= 0 else f"D{i}"
                                                                 for i, d in enumerate(dims)]
    t = _ONNX_TYPES[dtype]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], name,
        [helper.make_tensor_value_info("INPUT0", t, shape)],
        [helper.make_tensor_value_info("OUTPUT0", t, shape)])
    _save(graph, repo / name / "1" / "model.onnx")
    cfg = f"max_batch_size: {max_batch_size}\n"
    cfg += _tensor_cfg("input", "INPUT0", dtype, dims) + _tensor_cfg("output", "OUTPUT0", dtype, dims)
    (repo / name / "config.pbtxt").write_text(cfg + extra_config)


DTYPES = ["BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64",
          "FP16", "FP32", "FP64"]


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
