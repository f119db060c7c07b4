"""Model config pipeline: parse, platform resolution, ONNX auto-complete, normalize, validate, JSON.

Real protobuf messages and real ONNX files (built with ``onnx`` in tmp_path); no mocks. Expected
values are Triton's documented / source behaviour (core ``model_config_utils.cc``,
onnxruntime_backend ``AutoCompleteConfig``), not whatever the code happens to do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

from tritonlite._proto import pb
from tritonlite.backends import AUTO_COMPLETERS
from tritonlite.backends.onnx_io import (
    ModelIO,
    TensorSpec,
    auto_complete_onnx,
    ort_type_to_config,
    read_onnx_io,
)
from tritonlite.contracts import config as C
from tritonlite.contracts import config_validate as V
from tritonlite.contracts.errors import ErrorCode, TritonliteError

Shape = list[Any]


# -- helpers -------------------------------------------------------------------------------------


def write_onnx(
    path: Path,
    inputs: list[tuple[str, int, Shape]],
    outputs: list[tuple[str, str]],
) -> Path:
    """An ONNX model whose outputs are Identity copies of inputs: (out_name, in_name)."""
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    types = {n: (t, s) for n, t, s in inputs}
    nodes = [helper.make_node("Identity", [src], [dst]) for dst, src in outputs]
    outs = [helper.make_tensor_value_info(dst, *types[src]) for dst, src in outputs]
    graph = helper.make_graph(nodes, "g", vi, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def onnx_model_dir(
    root: Path,
    name: str,
    inputs: list[tuple[str, int, Shape]],
    outputs: list[tuple[str, str]],
    config: str | None = None,
    version: int = 1,
) -> Path:
    d = root / name
    write_onnx(d / str(version) / "model.onnx", inputs, outputs)
    if config is not None:
        (d / "config.pbtxt").write_text(config)
    return d


def batching_model(root: Path, name: str = "add", config: str | None = None) -> Path:
    return onnx_model_dir(
        root,
        name,
        [("INPUT0", TensorProto.FLOAT, ["batch", 16]), ("INPUT1", TensorProto.INT32, [None, 4])],
        [("OUTPUT0", "INPUT0"), ("OUTPUT1", "INPUT1")],
        config,
    )


def fixed_model(root: Path, name: str = "fixed", config: str | None = None) -> Path:
    return onnx_model_dir(root, name, [("X", TensorProto.FLOAT, [2, 3])], [("Y", "X")], config)


def cfg_of(text: str) -> Any:
    return C.parse_pbtxt(text, "test")


def load(d: Path, **kw: Any) -> Any:
    kw.setdefault("auto_completers", AUTO_COMPLETERS)
    return C.load_model_config(d, **kw)


def invalid(match: str) -> Any:
    return pytest.raises(TritonliteError, match=match)


def io_json(d: Path, **kw: Any) -> dict[str, Any]:
    return C.render_json(load(d, **kw))


def complete(cfg: Any, name: str = "m", **kw: Any) -> Any:
    """resolve (with a fake dir name) + normalize + validate, as load_model_config does."""
    C.resolve_platform(cfg, Path("/nonexistent") / name)
    C.normalize(cfg, **kw)
    V.validate(cfg, **kw)
    return cfg


SIMPLE = """
backend: "python" max_batch_size: 8
input [{name: "IN" data_type: TYPE_FP32 dims: [4]}]
output [{name: "OUT" data_type: TYPE_FP32 dims: [4]}]
"""


# -- parsing ---------------------------------------------------------------------------------------


def test_parse_pbtxt_accepts_triton_syntax() -> None:
    cfg = C.parse_pbtxt(
        """
        # a comment
        name: "m"
        max_batch_size: 8
        input [ { name: "A", data_type: TYPE_FP32, dims: [ 16 ] } ]
        output { name: "B" data_type: TYPE_STRING dims: 3 dims: -1 }
        """,
        "m/config.pbtxt",
    )
    assert cfg.max_batch_size == 8
    assert list(cfg.input[0].dims) == [16]
    assert list(cfg.output[0].dims) == [3, -1]


@pytest.mark.parametrize("text", ['name: "m" unknown_field: 3', "name: ", "input [ { name: } ]"])
def test_parse_pbtxt_errors_are_invalid_arg_with_source(text: str) -> None:
    with pytest.raises(TritonliteError) as info:
        C.parse_pbtxt(text, "repo/m/config.pbtxt")
    assert info.value.code is ErrorCode.INVALID_ARG
    assert info.value.message.startswith("failed to parse repo/m/config.pbtxt: ")


def test_parse_json_accepts_int64_numbers_or_strings_and_enum_case() -> None:
    cfg = C.parse_json(
        json.dumps(
            {
                "name": "m",
                "max_batch_size": 4,
                "input": [{"name": "A", "data_type": "type_fp32", "dims": ["-1", 16]}],
                "dynamic_batching": {
                    "max_queue_delay_microseconds": "100",
                    "priority_queue_policy": {"1": {"timeout_action": "delay"}},
                },
                "instance_group": [{"kind": "kind_cpu", "count": 1}],
            }
        )
    )
    assert list(cfg.input[0].dims) == [-1, 16]
    assert cfg.input[0].data_type == pb.DataType.values_by_name["TYPE_FP32"].number
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 100
    assert cfg.dynamic_batching.priority_queue_policy[1].timeout_action == pb.ModelQueuePolicy.DELAY
    assert cfg.instance_group[0].kind == V.KIND_CPU


@pytest.mark.parametrize(
    "text", ["{", "[1]", '{"name": "m", "bogus": 1}', '{"max_batch_size": "x"}']
)
def test_parse_json_errors(text: str) -> None:
    with pytest.raises(TritonliteError) as info:
        C.parse_json(text)
    assert info.value.code is ErrorCode.INVALID_ARG


# -- versions --------------------------------------------------------------------------------------


def test_version_dirs_are_positive_integers_without_leading_zeros(tmp_path: Path) -> None:
    for name in ("1", "2", "10", "01", "0", "abc", "-3", "٣"):
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version")
    assert C.version_dirs(tmp_path) == [1, 2, 10]
    assert C.version_dirs(tmp_path / "missing") == []


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", [7]),
        ("version_policy { latest { num_versions: 2 } }", [3, 7]),
        ("version_policy { latest { num_versions: 9 } }", [1, 3, 7]),
        ("version_policy { latest { } }", []),
        ("version_policy { all { } }", [1, 3, 7]),
        ("version_policy { specific { versions: [7, 1, 5] } }", [1, 7]),
    ],
)
def test_select_versions(policy: str, expected: list[int]) -> None:
    cfg = cfg_of(f'name: "m" {policy}')
    assert C.select_versions(cfg, [7, 1, 3]) == expected


# -- platform resolution ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "is_dir", "platform", "backend"),
    [
        ("model.onnx", False, "onnxruntime_onnx", "onnxruntime"),
        ("model.onnx", True, "onnxruntime_onnx", "onnxruntime"),
        ("model.pt", False, "pytorch_libtorch", "pytorch"),
        ("model.plan", False, "tensorrt_plan", "tensorrt"),
        ("model.py", False, "", "python"),
    ],
)
def test_platform_from_model_file(
    tmp_path: Path, filename: str, is_dir: bool, platform: str, backend: str
) -> None:
    d = tmp_path / "mymodel"
    target = d / "3" / filename
    if is_dir:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True)
        target.write_bytes(b"")
    cfg = pb.ModelConfig()
    C.resolve_platform(cfg, d)
    assert (cfg.name, cfg.platform, cfg.backend) == ("mymodel", platform, backend)
    assert cfg.default_model_filename == filename
    assert cfg.runtime == ""


@pytest.mark.parametrize(
    ("given", "platform", "backend", "filename"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('backend: "onnxruntime"', "onnxruntime_onnx", "onnxruntime", "model.onnx"),
        ('platform: "pytorch_libtorch"', "pytorch_libtorch", "pytorch", "model.pt"),
        ('backend: "pytorch"', "pytorch_libtorch", "pytorch", "model.pt"),
        ('platform: "tensorrt_plan"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('backend: "tensorrt"', "tensorrt_plan", "tensorrt", "model.plan"),
        ('backend: "python"', "", "python", "model.py"),
        ('default_model_filename: "model.py"', "", "python", "model.py"),
        ('backend: "python" default_model_filename: "other.py"', "", "python", "other.py"),
        ('platform: "ensemble"', "ensemble", "", ""),
    ],
)
def test_platform_from_config(
    tmp_path: Path, given: str, platform: str, backend: str, filename: str
) -> None:
    cfg = cfg_of(given)
    C.resolve_platform(cfg, tmp_path / "m")  # no version dirs: the config alone decides
    assert (cfg.platform, cfg.backend, cfg.default_model_filename) == (platform, backend, filename)
    assert cfg.name == "m"


def test_config_beats_model_files_and_detection_order(tmp_path: Path) -> None:
    d = tmp_path / "m"
    (d / "1").mkdir(parents=True)
    for f in ("model.py", "model.onnx", "model.plan"):
        (d / "1" / f).write_bytes(b"")
    cfg = pb.ModelConfig()
    C.resolve_platform(cfg, d)
    assert cfg.backend == "tensorrt"  # Triton tries TensorRT before ONNX Runtime and python
    cfg = cfg_of('backend: "python"')
    C.resolve_platform(cfg, d)
    assert (cfg.backend, cfg.platform) == ("python", "")


def test_platform_errors(tmp_path: Path) -> None:
    d = tmp_path / "empty_model"
    (d / "1").mkdir(parents=True)
    (d / "1" / "weights.bin").write_bytes(b"")
    with invalid("unable to determine platform and backend for model 'empty_model'"):
        C.resolve_platform(pb.ModelConfig(), d)
    with invalid("unexpected platform type 'tensorflow_savedmodel' for m"):
        C.resolve_platform(cfg_of('platform: "tensorflow_savedmodel"'), tmp_path / "m")
    with invalid("unexpected directory name 'm' for model 'other'"):
        C.resolve_platform(cfg_of('name: "other" backend: "python"'), tmp_path / "m")
    with invalid("'platform' and 'backend' pair"):
        complete(cfg_of('platform: "onnxruntime_onnx" backend: "pytorch"'))
    with invalid("must have platform type 'ensemble' and empty backend"):
        complete(cfg_of('platform: "ensemble" backend: "python"'))


def test_model_name_overrides_directory_name(tmp_path: Path) -> None:
    cfg = cfg_of('backend: "python"')
    C.resolve_platform(cfg, tmp_path / "tritonlite-override-x1", model_name="real")
    assert cfg.name == "real"


# -- normalization -------------------------------------------------------------------------------


def test_normalize_defaults_for_an_onnx_model() -> None:
    cfg = complete(
        cfg_of("""
        platform: "onnxruntime_onnx" max_batch_size: 8
        input [{name: "I" data_type: TYPE_INT32 dims: [16]}]
        output [{name: "O" data_type: TYPE_INT32 dims: [16]}]
        dynamic_batching {}
    """),
        name="simple",
    )
    j = C.render_json(cfg)
    assert j["version_policy"] == {"latest": {"num_versions": 1}}
    assert j["dynamic_batching"]["preferred_batch_size"] == [8]
    assert j["optimization"]["input_pinned_memory"] == {"enable": True}
    assert j["optimization"]["output_pinned_memory"] == {"enable": True}
    # No group configured: one group named after the model; ONNX Runtime on CPU gets 2.
    assert j["instance_group"] == [
        {
            "name": "simple",
            "kind": "KIND_CPU",
            "count": 2,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    assert C.instance_names(cfg) == [
        ("simple", "simple_0", V.KIND_CPU, 0),
        ("simple", "simple_1", V.KIND_CPU, 0),
    ]


def test_normalize_keeps_explicit_values() -> None:
    cfg = complete(
        cfg_of(
            SIMPLE
            + """
        version_policy { all {} }
        dynamic_batching { preferred_batch_size: [2, 4] }
        optimization { input_pinned_memory { enable: false } }
    """
        )
    )
    assert cfg.version_policy.WhichOneof("policy_choice") == "all"
    assert list(cfg.dynamic_batching.preferred_batch_size) == [2, 4]
    assert cfg.optimization.input_pinned_memory.enable is False
    assert cfg.optimization.output_pinned_memory.enable is True


def test_dynamic_batching_with_max_batch_size_zero_is_accepted() -> None:
    cfg = complete(
        cfg_of("""
        backend: "python" max_batch_size: 0
        input [{name: "IN" data_type: TYPE_FP32 dims: [4]}]
        output [{name: "OUT" data_type: TYPE_FP32 dims: [4]}]
        dynamic_batching {}
    """)
    )
    assert list(cfg.dynamic_batching.preferred_batch_size) == []
    assert C.render_json(cfg)["dynamic_batching"]["preferred_batch_size"] == []


def test_sequence_batching_defaults() -> None:
    cfg = complete(cfg_of(SIMPLE + "sequence_batching { oldest { max_candidate_sequences: 4 } }"))
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(cfg.sequence_batching.oldest.preferred_batch_size) == [8]
    cfg = complete(cfg_of(SIMPLE + "sequence_batching { max_sequence_idle_microseconds: 5 }"))
    assert cfg.sequence_batching.max_sequence_idle_microseconds == 5
    assert not cfg.sequence_batching.HasField("oldest")


def test_instance_group_names_kinds_and_counts() -> None:
    cfg = complete(
        cfg_of(
            SIMPLE
            + """
        instance_group [ { kind: KIND_CPU }, { name: "named" count: 3 }, { kind: KIND_MODEL } ]
    """
        ),
        name="add_sub",
    )
    groups = [(g.name, g.kind, g.count) for g in cfg.instance_group]
    assert groups == [
        ("add_sub_0", V.KIND_CPU, 1),
        ("named", V.KIND_CPU, 3),
        ("add_sub_2", V.KIND_MODEL, 1),
    ]
    names = [n for _, n, _, _ in C.instance_names(cfg)]
    assert names == ["add_sub_0_0", "named_0", "named_1", "named_2", "add_sub_2_0"]


def test_kind_auto_and_gpus() -> None:
    cfg = complete(cfg_of(SIMPLE), gpu_count=2)
    assert cfg.instance_group[0].kind == V.KIND_GPU
    assert list(cfg.instance_group[0].gpus) == [0, 1]
    assert cfg.instance_group[0].count == 1
    assert C.instance_names(cfg) == [("m", "m_0", V.KIND_GPU, 0), ("m", "m_0", V.KIND_GPU, 1)]

    cfg = complete(
        cfg_of(SIMPLE + "instance_group [{count: 2 kind: KIND_GPU gpus: [1]}]"), gpu_count=2
    )
    assert C.instance_names(cfg) == [
        ("m_0", "m_0_0", V.KIND_GPU, 1),
        ("m_0", "m_0_1", V.KIND_GPU, 1),
    ]

    # KIND_AUTO listing a GPU that does not exist falls back to CPU, which then may not list
    # GPUs (Triton's exact sequence of rules).
    cfg = cfg_of(SIMPLE + "instance_group [{gpus: [5]}]")
    C.resolve_platform(cfg, Path("/x/m"))
    C.normalize(cfg, gpu_count=2)
    assert cfg.instance_group[0].kind == V.KIND_CPU
    with invalid("has kind KIND_CPU but specifies one or more GPUs"):
        V.validate(cfg, gpu_count=2)


def test_kind_gpu_without_gpus_fails() -> None:
    with invalid("instance group m_0 of model m has kind KIND_GPU but no GPUs are available"):
        complete(cfg_of(SIMPLE + "instance_group [{kind: KIND_GPU}]"))
    with invalid("specifies invalid or unsupported gpu id 3"):
        complete(cfg_of(SIMPLE + "instance_group [{kind: KIND_GPU gpus: [3]}]"), gpu_count=1)


def test_ensemble_gets_no_instance_groups_or_optimization() -> None:
    cfg = complete(
        cfg_of("""
        platform: "ensemble" max_batch_size: 4
        input [{name: "IN" data_type: TYPE_FP32 dims: [4]}]
        output [{name: "OUT" data_type: TYPE_FP32 dims: [4]}]
        ensemble_scheduling { step [
          { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" }
            output_map { key: "y" value: "mid" } },
          { model_name: "b" model_version: 2 input_map { key: "x" value: "mid" }
            output_map { key: "y" value: "OUT" } } ] }
    """),
        name="ens",
        gpu_count=1,
    )
    j = C.render_json(cfg)
    assert j["instance_group"] == []
    assert "optimization" not in j
    assert "backend" in j and j["backend"] == ""
    assert [s["model_version"] for s in j["ensemble_scheduling"]["step"]] == [-1, 2]
    assert C.instance_names(cfg) == []


# -- ONNX I/O and auto-complete ------------------------------------------------------------------


def test_read_onnx_io_types_and_dims(tmp_path: Path) -> None:
    path = write_onnx(
        tmp_path / "model.onnx",
        [
            ("F", TensorProto.FLOAT, ["n", 3]),
            ("S", TensorProto.STRING, [2]),
            ("B", TensorProto.BOOL, []),
            ("H", TensorProto.FLOAT16, [None]),
            ("I", TensorProto.INT64, [1, 2, 3]),
            ("U", TensorProto.UINT8, [4]),
        ],
        [
            ("F_OUT", "F"),
            ("S_OUT", "S"),
            ("B_OUT", "B"),
            ("H_OUT", "H"),
            ("I_OUT", "I"),
            ("U_OUT", "U"),
        ],
    )
    io = read_onnx_io(path)
    assert io.inputs == (
        TensorSpec("F", "TYPE_FP32", (-1, 3)),
        TensorSpec("S", "TYPE_STRING", (2,)),
        TensorSpec("B", "TYPE_BOOL", ()),
        TensorSpec("H", "TYPE_FP16", (-1,)),
        TensorSpec("I", "TYPE_INT64", (1, 2, 3)),
        TensorSpec("U", "TYPE_UINT8", (4,)),
    )
    assert [o.name for o in io.outputs] == ["F_OUT", "S_OUT", "B_OUT", "H_OUT", "I_OUT", "U_OUT"]
    assert io.outputs[0].dims == (-1, 3)
    # model.onnx may be a directory holding model.onnx
    write_onnx(tmp_path / "dir" / "model.onnx", [("X", TensorProto.DOUBLE, [1])], [("Y", "X")])
    assert read_onnx_io(tmp_path / "dir").inputs == (TensorSpec("X", "TYPE_FP64", (1,)),)


def test_ort_type_names() -> None:
    assert ort_type_to_config("tensor(bfloat16)") == "TYPE_BF16"
    assert ort_type_to_config("tensor(uint64)") == "TYPE_UINT64"
    assert ort_type_to_config("seq(tensor(float))") is None


def test_read_onnx_io_errors(tmp_path: Path) -> None:
    with invalid("unable to find ONNX model file"):
        read_onnx_io(tmp_path / "nope.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with invalid("unable to read ONNX model"):
        read_onnx_io(tmp_path / "bad.onnx")


def test_missing_config_batching_model(tmp_path: Path) -> None:
    j = io_json(batching_model(tmp_path))
    assert j["name"] == "add" and j["platform"] == "onnxruntime_onnx"
    assert j["backend"] == "onnxruntime" and j["default_model_filename"] == "model.onnx"
    assert j["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in j["input"]] == [
        ("INPUT0", "TYPE_FP32", [16]),
        ("INPUT1", "TYPE_INT32", [4]),
    ]
    assert [(o["name"], o["data_type"], o["dims"]) for o in j["output"]] == [
        ("OUTPUT0", "TYPE_FP32", [16]),
        ("OUTPUT1", "TYPE_INT32", [4]),
    ]
    assert "reshape" not in j["input"][0]
    assert j["dynamic_batching"]["preferred_batch_size"] == [4]
    assert j["instance_group"][0]["count"] == 2
    assert "sequence_batching" not in j


def test_default_max_batch_size_option(tmp_path: Path) -> None:
    d = batching_model(tmp_path)
    assert io_json(d, default_max_batch_size=16)["max_batch_size"] == 16
    j = io_json(d, default_max_batch_size=1)
    assert j["max_batch_size"] == 1
    assert "dynamic_batching" not in j  # only max_batch_size > 1 turns the batcher on
    j = io_json(d, default_max_batch_size=0)
    assert j["max_batch_size"] == 0
    assert j["input"][0]["dims"] == [-1, 16]


def test_missing_config_non_batching_model(tmp_path: Path) -> None:
    j = io_json(fixed_model(tmp_path))
    assert j["max_batch_size"] == 0
    assert j["input"][0]["dims"] == [2, 3] and j["output"][0]["dims"] == [2, 3]
    assert "dynamic_batching" not in j


def test_scalar_tensors(tmp_path: Path) -> None:
    d = onnx_model_dir(tmp_path, "scal", [("X", TensorProto.FLOAT, ["b"])], [("Y", "X")])
    j = io_json(d)
    assert j["max_batch_size"] == 4
    assert j["input"][0]["dims"] == [1] and j["input"][0]["reshape"] == {"shape": []}
    assert j["output"][0]["dims"] == [1] and j["output"][0]["reshape"] == {"shape": []}

    d = onnx_model_dir(tmp_path, "scal0", [("X", TensorProto.FLOAT, [])], [("Y", "X")])
    j = io_json(d)
    assert j["max_batch_size"] == 0
    assert j["input"][0]["dims"] == [1] and "reshape" not in j["input"][0]


def test_partial_config_gets_missing_outputs(tmp_path: Path) -> None:
    d = batching_model(
        tmp_path,
        config="""
        max_batch_size: 8
        input [ { name: "INPUT1" data_type: TYPE_INT32 dims: [4] },
                { name: "INPUT0" data_type: TYPE_FP32 dims: [16] } ]
        dynamic_batching { max_queue_delay_microseconds: 50 }
    """,
    )
    j = io_json(d)
    assert j["max_batch_size"] == 8
    assert [i["name"] for i in j["input"]] == ["INPUT1", "INPUT0"]  # config order kept
    assert [o["name"] for o in j["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert j["dynamic_batching"]["preferred_batch_size"] == [8]
    assert j["dynamic_batching"]["max_queue_delay_microseconds"] == 50


def test_configured_tensors_missing_type_or_dims_are_filled(tmp_path: Path) -> None:
    d = batching_model(
        tmp_path,
        config="""
        max_batch_size: 2
        input [ { name: "INPUT0" }, { name: "INPUT1" data_type: TYPE_INT32 } ]
        output [ { name: "OUTPUT0" dims: [16] },
                 { name: "OUTPUT1" data_type: TYPE_INT32 dims: [4] } ]
        sequence_batching { }
    """,
    )
    j = io_json(d)
    assert [(i["data_type"], i["dims"]) for i in j["input"]] == [
        ("TYPE_FP32", [16]),
        ("TYPE_INT32", [4]),
    ]
    assert j["output"][0]["data_type"] == "TYPE_FP32"
    assert "dynamic_batching" not in j  # a scheduler (sequence) is already configured


def test_complete_config_is_not_changed(tmp_path: Path) -> None:
    text = """
        max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [-1, 16] },
                { name: "INPUT1" data_type: TYPE_INT32 dims: [-1, 4] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [-1, 16] },
                 { name: "OUTPUT1" data_type: TYPE_INT32 dims: [-1, 4] } ]
    """
    j = io_json(batching_model(tmp_path, config=text))
    assert j["max_batch_size"] == 0
    assert "dynamic_batching" not in j
    assert j["input"][0]["dims"] == [-1, 16]


def test_auto_complete_errors(tmp_path: Path) -> None:
    d = fixed_model(tmp_path, config="max_batch_size: 8")
    with invalid(
        "autofill failed for model 'fixed': model does not support batching while "
        "non-zero max_batch_size is specified"
    ):
        load(d)
    d = batching_model(
        tmp_path,
        "unk",
        config="""
        input [ { name: "NOPE" data_type: TYPE_FP32 dims: [16] },
                { name: "INPUT1" data_type: TYPE_INT32 dims: [4] } ]
    """,
    )
    with invalid(
        re.escape("unexpected inference input 'NOPE', allowed inputs are: INPUT0, INPUT1")
    ):
        load(d)
    d = batching_model(
        tmp_path,
        "unk_out",
        config="""
        output [ { name: "NOPE" data_type: TYPE_FP32 dims: [16] } ]
    """,
    )
    with invalid("unexpected inference output 'NOPE', allowed outputs are: OUTPUT0, OUTPUT1"):
        load(d)
    d = batching_model(
        tmp_path,
        "dtype",
        config="""
        input [ { name: "INPUT0" data_type: TYPE_FP64 dims: [16] },
                { name: "INPUT1" data_type: TYPE_INT32 dims: [4] } ]
    """,
    )
    with invalid(
        "configuration expects datatype TYPE_FP64 for input 'INPUT0', model provides TYPE_FP32"
    ):
        load(d)
    d = batching_model(
        tmp_path,
        "shape",
        config="""
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [15] },
                { name: "INPUT1" data_type: TYPE_INT32 dims: [4] } ]
    """,
    )
    with invalid(
        re.escape(
            "tensor 'INPUT0' shape expected by framework [16] doesn't match "
            "model configuration shape [15]"
        )
    ):
        load(d)
    d = batching_model(
        tmp_path,
        "count",
        config="""
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [16] } ]
    """,
    )
    with invalid("configuration expects 1 inputs, model provides 2"):
        load(d)
    d = fixed_model(
        tmp_path,
        "fixed_batched",
        config="""
        max_batch_size: 4
        input [ { name: "X" data_type: TYPE_FP32 dims: [3] } ]
        output [ { name: "Y" data_type: TYPE_FP32 dims: [3] } ]
    """,
    )
    with invalid("model configuration supports batching but first dimension of tensor 'X'"):
        load(d)


def test_auto_complete_disabled(tmp_path: Path) -> None:
    with invalid(
        "failed to open text file for read .*config.pbtxt: No such file .*auto-complete is disabled"
    ):
        load(batching_model(tmp_path), auto_complete=False)
    d = batching_model(tmp_path, "partial", config='platform: "onnxruntime_onnx" max_batch_size: 2')
    cfg = load(d, auto_complete=False)
    # Core auto-fill and normalization still run; the backend's auto-complete does not.
    assert cfg.backend == "onnxruntime" and cfg.default_model_filename == "model.onnx"
    assert len(cfg.input) == 0 and not cfg.HasField("dynamic_batching")
    assert cfg.version_policy.latest.num_versions == 1


def test_auto_complete_reads_highest_version(tmp_path: Path) -> None:
    d = onnx_model_dir(tmp_path, "v", [("OLD", TensorProto.FLOAT, [1])], [("O", "OLD")], version=2)
    write_onnx(d / "10" / "model.onnx", [("NEW", TensorProto.FLOAT, [1])], [("O", "NEW")])
    assert load(d).input[0].name == "NEW"


def test_auto_complete_onnx_directly() -> None:
    cfg = cfg_of('name: "m" platform: "onnxruntime_onnx"')
    io = ModelIO(
        inputs=(TensorSpec("A", "TYPE_STRING", (-1, -1)),),
        outputs=(TensorSpec("B", "TYPE_BOOL", (-1,)),),
    )
    auto_complete_onnx(cfg, io, default_max_batch_size=32)
    assert cfg.max_batch_size == 32
    assert list(cfg.input[0].dims) == [-1]
    assert cfg.input[0].data_type == pb.DataType.values_by_name["TYPE_STRING"].number
    assert list(cfg.output[0].dims) == [1] and cfg.output[0].HasField("reshape")
    assert cfg.HasField("dynamic_batching")


def test_python_auto_completer_hook(tmp_path: Path) -> None:
    d = tmp_path / "py"
    (d / "1").mkdir(parents=True)
    (d / "1" / "model.py").write_text("class TritonPythonModel: pass\n")
    calls: list[tuple[str, Path]] = []

    def completer(cfg: Any, model_dir: Path, default_max_batch_size: int) -> None:
        calls.append((cfg.backend, model_dir))
        cfg.max_batch_size = 2
        inp = cfg.input.add(name="IN", data_type=pb.DataType.values_by_name["TYPE_FP32"].number)
        inp.dims.append(3)

    cfg = load(d, auto_completers={"python": completer})
    assert calls == [("python", d)]
    assert cfg.max_batch_size == 2 and cfg.input[0].name == "IN"
    assert cfg.instance_group[0].count == 1  # python is not an opt-in 2-instance backend
    load(
        d,
        auto_completers={"python": completer},
        auto_complete=False,
        override_json='{"backend":"python"}',
    )
    assert len(calls) == 1


def test_override_json_replaces_config_file(tmp_path: Path) -> None:
    d = batching_model(tmp_path, config="max_batch_size: 2")
    cfg = load(d, override_json=json.dumps({"max_batch_size": "8", "name": "add"}))
    assert cfg.max_batch_size == 8
    with invalid("unexpected directory name 'add' for model 'other'"):
        load(d, override_json='{"name": "other"}')
    cfg = load(d, override_json="{}", model_name="add")
    assert cfg.name == "add"


# -- validation ------------------------------------------------------------------------------------


IO_ERRORS = [
    ("max_batch_size: -1", "'max_batch_size' must be non-negative value for m"),
    ("input [{ dims: [1] data_type: TYPE_FP32 }]", "model input must specify 'name' for m"),
    ('input [{ name: "A" dims: [1] }]', "model input 'A' must specify 'data_type' for m"),
    ('output [{ name: "B" data_type: TYPE_FP32 }]', "model output 'B' must specify 'dims' for m"),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [0] }]',
        "model input 'A' dimension must be integer >= 1, or -1 to indicate a variable-size",
    ),
    ('input [{ name: "A" data_type: TYPE_FP32 dims: [-2] }]', "dimension must be integer >= 1"),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [4] reshape { shape: [3] } }]',
        "model input 'A' has different size for dims and reshape for m",
    ),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [2, -1] reshape { shape: [-1, -1] } }]',
        "has different number of variable-size dimensions for dims and reshape",
    ),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [2, -1, 3] reshape { shape: [3, -1, 2] } }]',
        "has different size for dims and reshape",
    ),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [1] reshape { } }]',
        "cannot have empty reshape for non-batching model as scalar tensors are not supported",
    ),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [4] reshape { shape: [0, 4] } }]',
        "reshape dimensions must be integer >= 1",
    ),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [1] }, '
        '{ name: "A" data_type: TYPE_FP32 dims: [2] }]',
        "model input 'A' is specified more than once",
    ),
    (
        'input [{ name: "A" data_type: TYPE_FP32 dims: [1] is_shape_tensor: true }]',
        "shape tensors are only supported for TensorRT platform",
    ),
    (
        'input [{ name: "A" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [1, 2] }]',
        "model input NHWC/NCHW require 3 dims for m",
    ),
]


@pytest.mark.parametrize(("fragment", "message"), IO_ERRORS)
def test_io_validation_errors(fragment: str, message: str) -> None:
    with invalid(re.escape(message)):
        complete(cfg_of('backend: "python" ' + fragment))


def test_valid_reshapes() -> None:
    cfg = complete(
        cfg_of("""backend: "python" max_batch_size: 2
        input [{ name: "A" data_type: TYPE_FP32 dims: [1] reshape { } },
               { name: "B" data_type: TYPE_FP32 dims: [2, 4, -1, 6]
                 reshape { shape: [8, -1, 1, 6] } },
               { name: "C" data_type: TYPE_FP32 dims: [-1] reshape { shape: [-1] } }]""")
    )
    assert [list(i.reshape.shape) for i in cfg.input] == [[], [8, -1, 1, 6], [-1]]


SCHED_ERRORS = [
    (
        "max_batch_size: 4 dynamic_batching { preferred_batch_size: [8] }",
        "dynamic batching preferred size must be <= max batch size for m",
    ),
    (
        "max_batch_size: 4 dynamic_batching { preferred_batch_size: [0] }",
        "dynamic batching preferred size must be positive for m",
    ),
    (
        "max_batch_size: 4 dynamic_batching { priority_levels: 2 }",
        "default priority level must be in range [1, 2] for m",
    ),
    (
        "max_batch_size: 4 dynamic_batching { priority_levels: 2 default_priority_level: 1 "
        "priority_queue_policy { key: 3 value { } } }",
        "priority queue policy must have priority level in range [1, 2] for m",
    ),
    (
        "max_batch_size: 4 dynamic_batching { preserve_ordering: true priority_levels: 2 "
        "default_priority_level: 1 }",
        "Only one priority level is allowed",
    ),
    (
        "max_batch_size: 4 dynamic_batching { preserve_ordering: true default_queue_policy { "
        "timeout_action: DELAY default_timeout_microseconds: 5 } }",
        "Queue policy can not have DELAY as timeout action",
    ),
    (
        "max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [5] } }",
        "sequence batching preferred batch size must be <= max batch size for m",
    ),
    (
        "sequence_batching { direct { minimum_slot_utilization: 1.5 } }",
        "minimum slot utilization must be in range",
    ),
    (
        'sequence_batching { control_input [{ name: "S" '
        "control [{ kind: CONTROL_SEQUENCE_START }] }] }",
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
        "'bool_false_true' for CONTROL_SEQUENCE_START for m",
    ),
    (
        'sequence_batching { control_input [{ name: "S" control [{ kind: CONTROL_SEQUENCE_END '
        "int32_false_true: [0] }] }] }",
        "sequence batching control 'int32_false_true' must have exactly 2 entries",
    ),
    (
        'sequence_batching { control_input [{ name: "S" control [{ kind: CONTROL_SEQUENCE_READY '
        "int32_false_true: [0, 1] fp32_false_true: [0, 1] }] }] }",
        "specifies more than one from",
    ),
    (
        'sequence_batching { control_input [{ name: "S" control [{ kind: CONTROL_SEQUENCE_START '
        'int32_false_true: [0, 1] }] }, { name: "T" control [{ kind: CONTROL_SEQUENCE_START '
        "int32_false_true: [0, 1] }] }] }",
        "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
    ),
    (
        'sequence_batching { control_input [{ name: "C" control [{ kind: CONTROL_SEQUENCE_CORRID '
        "data_type: TYPE_FP32 }] }] }",
        "unexpected data type for control CONTROL_SEQUENCE_CORRID",
    ),
    (
        "sequence_batching { control_input [{ control [{ kind: CONTROL_SEQUENCE_CORRID "
        "data_type: TYPE_UINT64 }] }] }",
        "sequence batching control tensor must have a name for m",
    ),
    (
        "sequence_batching { } response_cache { enable: true }",
        "Response Cache does not currently support model m with sequence batching",
    ),
    (
        "model_transaction_policy { decoupled: true } response_cache { enable: true }",
        "with 'decoupled' transaction policy",
    ),
    (
        'instance_group [{ kind: KIND_CPU profile: ["0"] }]',
        "specifies profile field which is only supported for TensorRT models",
    ),
]


@pytest.mark.parametrize(("fragment", "message"), SCHED_ERRORS)
def test_scheduler_validation_errors(fragment: str, message: str) -> None:
    with invalid(re.escape(message)):
        complete(cfg_of('backend: "python" ' + fragment))


def test_valid_sequence_controls() -> None:
    cfg = complete(
        cfg_of("""backend: "python" max_batch_size: 2
        sequence_batching { control_input [
          { name: "START" control [{ kind: CONTROL_SEQUENCE_START fp32_false_true: [0, 1] }] },
          { name: "END" control [{ kind: CONTROL_SEQUENCE_END bool_false_true: [false, true] }] },
          { name: "CORR"
            control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING }] } ] }""")
    )
    controls = cfg.sequence_batching.control_input
    assert [c.name for c in controls] == ["START", "END", "CORR"]
    assert list(controls[0].control[0].fp32_false_true) == [0, 1]


ENSEMBLE_IO = """platform: "ensemble"
    input [{ name: "IN" data_type: TYPE_FP32 dims: [1] }]
    output [{ name: "OUT" data_type: TYPE_FP32 dims: [1] }] """

ENSEMBLE_ERRORS = [
    ("", "ensemble scheduling must be set for ensemble m whose platform is ensemble"),
    ("ensemble_scheduling { }", "must specify 'step' for ensemble 'm'"),
    (
        'ensemble_scheduling { step [{ model_name: "a" output_map { key: "y" value: "OUT" } }] }',
        "must specify 'input_map' in step 0 of ensemble 'm'",
    ),
    (
        'ensemble_scheduling { step [{ input_map { key: "x" value: "IN" } '
        'output_map { key: "y" value: "OUT" } }] }',
        "must specify 'model_name' in step 0",
    ),
    (
        'ensemble_scheduling { step [{ model_name: "a" input_map { key: "x" value: "IN" } '
        'output_map { key: "y" value: "OTHER" } }] }',
        "ensemble output 'OUT' for ensemble m' is not used",
    ),
    (
        'ensemble_scheduling { step [{ model_name: "a" input_map { key: "x" value: "MISSING" } '
        'output_map { key: "y" value: "OUT" } }, { model_name: "b" input_map { key: "x" value: "IN" } '
        'output_map { key: "y" value: "Z" } }] }',
        "output 'OUT' for ensemble 'm' is not written",
    ),
    (
        'ensemble_scheduling { step [{ model_name: "a" input_map { key: "x" value: "IN" } '
        'output_map [{ key: "y" value: "OUT" }, { key: "z" value: "EXTRA" }] }] }',
        "ensemble tensor 'EXTRA' is unused in ensemble 'm'",
    ),
    (
        'ensemble_scheduling { step [{ model_name: "a" input_map { key: "x" value: "IN" } '
        'output_map { key: "y" value: "OUT" } }, { model_name: "b" input_map { key: "x" value: "IN" } '
        'output_map { key: "y" value: "OUT" } }] }',
        "'OUT' can appear in an output map only once",
    ),
    (
        'instance_group [{ count: 1 }] ensemble_scheduling { step [{ model_name: "a" '
        'input_map { key: "x" value: "IN" } output_map { key: "y" value: "OUT" } }] }',
        "instance group should not be specified for ensemble 'm'",
    ),
]


@pytest.mark.parametrize(("fragment", "message"), ENSEMBLE_ERRORS)
def test_ensemble_validation_errors(fragment: str, message: str) -> None:
    with invalid(re.escape(message)):
        complete(cfg_of(ENSEMBLE_IO + fragment))


def test_scheduling_for_non_ensemble_platform_fails() -> None:
    with invalid("ensemble scheduling cannot be set for model 'm' whose platform is not ensemble"):
        complete(cfg_of('backend: "python" ensemble_scheduling { step [{ model_name: "a" }] }'))


# -- rendering -------------------------------------------------------------------------------------


RICH = """
backend: "python" max_batch_size: 8
version_policy { specific { versions: [1, 3] } }
input [ { name: "IN" data_type: TYPE_FP32 dims: [-1, 16] optional: false },
        { name: "SC" data_type: TYPE_INT64 dims: [1] reshape { } } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [4] reshape { shape: [2, 2] } } ]
instance_group [ { kind: KIND_CPU count: 2 secondary_devices [{ kind: KIND_NVDLA device_id: 7 }] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { max_queue_delay_microseconds: 100 }
  control_input [ { name: "START"
                    control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] } ]
  state [ { input_name: "SIN" output_name: "SOUT" data_type: TYPE_FP32 dims: [-1, 2]
            initial_state [ { data_type: TYPE_FP32 dims: [1, 2] zero_data: true name: "z" } ] } ]
}
optimization { cuda { graph_spec [ { batch_size: 4 input { key: "IN" value { dim: [4, 16] } }
  graph_lower_bound { batch_size: 1 input { key: "IN" value { dim: [1, 16] } } } } ] } }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value { data_type: TYPE_FP32
                 dims: [16] random_data: true } } } ]
model_transaction_policy { decoupled: true }
parameters { key: "k" value { string_value: "v" } }
"""

DYNAMIC = """
name: "d" backend: "python" max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [16] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [16] } ]
dynamic_batching {
  max_queue_delay_microseconds: 100 priority_levels: 3 default_priority_level: 2
  default_queue_policy { default_timeout_microseconds: 18446744073709551615 }
  priority_queue_policy { key: 1 value { default_timeout_microseconds: 5 max_queue_size: 3 } }
  priority_queue_policy { key: 3 value { timeout_action: DELAY } }
}
response_cache { enable: true }
"""

DIGITS = re.compile(r"-?\d+")


def _strings(node: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _strings(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [s for i, v in enumerate(node) for s in _strings(v, f"{path}[{i}]")]
    return [(path, node)] if isinstance(node, str) else []


def test_render_int64_as_numbers_everywhere() -> None:
    j = C.render_json(complete(cfg_of(RICH)))
    assert j["version_policy"] == {"specific": {"versions": [1, 3]}}
    assert j["input"][0]["dims"] == [-1, 16]
    assert j["input"][1]["reshape"] == {"shape": []}
    assert j["output"][0]["reshape"] == {"shape": [2, 2]}
    seq = j["sequence_batching"]
    assert seq["max_sequence_idle_microseconds"] == 5000000
    assert seq["direct"]["max_queue_delay_microseconds"] == 100
    assert seq["state"][0]["dims"] == [-1, 2]
    assert seq["state"][0]["initial_state"][0]["dims"] == [1, 2]
    assert seq["control_input"][0]["control"][0]["int32_false_true"] == [0, 1]
    spec = j["optimization"]["cuda"]["graph_spec"][0]
    assert spec["input"]["IN"]["dim"] == [4, 16]
    assert spec["graph_lower_bound"]["input"]["IN"]["dim"] == [1, 16]
    assert j["model_warmup"][0]["inputs"]["IN"]["dims"] == [16]
    assert j["instance_group"][0]["secondary_devices"][0]["device_id"] == 7
    # No 64-bit integer is left as a string anywhere (no string field here holds digits).
    assert [(p, s) for p, s in _strings(j) if DIGITS.fullmatch(s)] == []

    d = C.render_json(complete(cfg_of(DYNAMIC), name="d"))["dynamic_batching"]
    assert d["max_queue_delay_microseconds"] == 100
    assert d["priority_levels"] == 3 and d["default_priority_level"] == 2
    assert d["default_queue_policy"]["default_timeout_microseconds"] == 18446744073709551615
    assert set(d["priority_queue_policy"]) == {"1", "3"}  # map keys stay strings
    assert d["priority_queue_policy"]["1"]["default_timeout_microseconds"] == 5
    assert d["priority_queue_policy"]["3"]["timeout_action"] == "DELAY"
    assert d["preferred_batch_size"] == [8]


def test_render_presence_and_bools() -> None:
    j = C.render_json(complete(cfg_of(RICH)))
    for absent in (
        "dynamic_batching",
        "ensemble_scheduling",
        "response_cache",
        "model_repository_agents",
        "model_operations",
        "model_metrics",
    ):
        assert absent not in j
    assert j["model_transaction_policy"] == {"decoupled": True}
    assert j["input"][0]["optional"] is False and j["input"][0]["is_shape_tensor"] is False
    assert j["output"][0]["is_shape_tensor"] is False
    assert j["parameters"] == {"k": {"string_value": "v"}}
    assert "latest" not in j["version_policy"]  # unset oneof members are omitted
    assert "oldest" not in j["sequence_batching"]

    j = C.render_json(complete(cfg_of(DYNAMIC), name="d"))
    assert j["response_cache"] == {"enable": True}
    assert "sequence_batching" not in j and "model_transaction_policy" not in j

    j = C.render_json(complete(cfg_of(SIMPLE)))
    assert "response_cache" not in j and "model_transaction_policy" not in j
    assert j["batch_input"] == [] and j["cc_model_filenames"] == {} and j["metric_tags"] == {}


def test_render_bytes_and_json_round_trip() -> None:
    for text, name in ((RICH, "m"), (DYNAMIC, "d"), (SIMPLE, "m")):
        cfg = complete(cfg_of(text), name=name)
        raw = C.render_json_bytes(cfg)
        assert isinstance(raw, bytes)
        assert json.loads(raw) == C.render_json(cfg)
        again = C.parse_json(raw.decode())
        assert again == cfg
        assert C.render_json_bytes(again) == raw


def test_loaded_onnx_config_matches_protocol_example(tmp_path: Path) -> None:
    d = batching_model(
        tmp_path,
        "simple",
        config="""
        max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [16] },
                { name: "INPUT1" data_type: TYPE_INT32 dims: [4] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] },
                 { name: "OUTPUT1" data_type: TYPE_INT32 dims: [4] } ]
        dynamic_batching { }
    """,
    )
    j = io_json(d)
    assert j["input"][0] == {
        "name": "INPUT0",
        "data_type": "TYPE_FP32",
        "format": "FORMAT_NONE",
        "dims": [16],
        "is_shape_tensor": False,
        "allow_ragged_batch": False,
        "optional": False,
        "is_non_linear_format_io": False,
    }
    assert j["output"][0] == {
        "name": "OUTPUT0",
        "data_type": "TYPE_FP32",
        "dims": [16],
        "label_filename": "",
        "is_shape_tensor": False,
        "is_non_linear_format_io": False,
    }
    assert j["optimization"] == {
        "priority": "PRIORITY_DEFAULT",
        "input_pinned_memory": {"enable": True},
        "output_pinned_memory": {"enable": True},
        "gather_kernel_buffer_threshold": 0,
        "eager_batching": False,
    }
    assert j["dynamic_batching"] == {
        "preferred_batch_size": [8],
        "max_queue_delay_microseconds": 0,
        "preserve_ordering": False,
        "priority_levels": 0,
        "default_priority_level": 0,
        "priority_queue_policy": {},
    }
    assert j["instance_group"][0]["name"] == "simple" and j["instance_group"][0]["count"] == 2
    for key in (
        "name",
        "platform",
        "backend",
        "runtime",
        "version_policy",
        "max_batch_size",
        "batch_input",
        "batch_output",
        "default_model_filename",
        "cc_model_filenames",
        "metric_tags",
        "parameters",
        "model_warmup",
    ):
        assert key in j
