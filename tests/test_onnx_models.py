"""The ONNX builders (tools/onnx_graphs.py via tests/onnx_models.py) under plain ONNX Runtime.

No server here: each built model must load in onnxruntime and compute what it says, and each
config the helpers write must declare exactly the model's tensors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx_models import (
    ADD_SUB_DTYPES,
    FAILING_TABLE,
    IDENTITY_DTYPES,
    MLP_SMALL,
    NUMPY_TYPES,
    ONNX_REPO_MODELS,
    ONNX_TYPES,
    add_sub,
    build_onnx_repo,
    config_for,
    failing,
    identity,
    mlp,
    mlp_reference,
    model_tensors,
    sample,
    write_add_sub,
    write_if_changed,
    write_model,
)

pytestmark = pytest.mark.timeout(120)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # the failing model's expected errors would be logged otherwise
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def run_bf16(sess: ort.InferenceSession, x: np.ndarray) -> np.ndarray:
    """Identity over BF16: ONNX Runtime's Python API has no numpy bfloat16, so feed OrtValues
    over the raw 16-bit patterns and bind the output to a buffer of ours."""
    bits = np.ascontiguousarray(x).view(np.uint16)
    out = np.zeros_like(bits)
    binding = sess.io_binding()
    binding.bind_ortvalue_input(
        "INPUT0",
        ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            bits, onnx_element_type=onnx.TensorProto.BFLOAT16
        ),
    )
    binding.bind_ortvalue_output(
        "OUTPUT0",
        ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            out, onnx_element_type=onnx.TensorProto.BFLOAT16
        ),
    )
    sess.run_with_iobinding(binding)
    return out.view(x.dtype)


def test_models_use_the_pinned_opset_and_ir_version() -> None:
    m = add_sub()
    assert m.ir_version == 8
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 17)]
    onnx.checker.check_model(m, full_check=True)


def test_every_identity_dtype_is_every_onnx_type() -> None:
    assert set(IDENTITY_DTYPES) == set(ONNX_TYPES)
    assert {"BOOL", "FP16", "BF16", "BYTES", "INT8", "UINT64"} <= set(IDENTITY_DTYPES)


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "nobatch"])
@pytest.mark.parametrize("dtype", IDENTITY_DTYPES)
def test_identity_returns_its_input(dtype: str, batch: bool) -> None:
    sess = session(identity(dtype, (4,), batch=batch))
    shape = (3, 4) if batch else (4,)
    x = sample(dtype, shape)
    if dtype == "BF16":
        y = run_bf16(sess, x)
        assert y.dtype == x.dtype
        assert np.array_equal(y.view(np.uint16), x.view(np.uint16))
        return
    if dtype == "BYTES":  # ONNX Runtime's Python API takes and returns str (bytes get str()'d)
        text = np.array([v.decode() for v in x.ravel()], dtype=np.object_).reshape(shape)
        (y,) = sess.run(None, {"INPUT0": text})
        assert y.shape == shape
        assert y.tolist() == text.tolist()
    else:
        (y,) = sess.run(None, {"INPUT0": x})
        assert y.shape == shape
        assert y.dtype == x.dtype
        assert np.array_equal(y, x)


def test_identity_type_is_declared_in_model_and_config() -> None:
    m = identity("TYPE_STRING", (2,), name_in="IN", name_out="OUT")
    assert model_tensors(m, batch=True) == ([("IN", "BYTES", [2])], [("OUT", "BYTES", [2])])
    text = config_for(m, max_batch_size=4)
    assert 'name: "IN" data_type: TYPE_STRING dims: [ 2 ]' in text
    assert 'name: "OUT" data_type: TYPE_STRING dims: [ 2 ]' in text


@pytest.mark.parametrize("shape", [(1, 1), (2, 7), (5, 300)])
def test_identity_with_a_variable_dim(shape: tuple[int, int]) -> None:
    m = identity("FP32", (-1,))
    assert model_tensors(m, batch=True)[0] == [("INPUT0", "FP32", [-1])]
    x = sample("FP32", shape)
    (y,) = session(m).run(None, {"INPUT0": x})
    assert np.array_equal(y, x)


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "nobatch"])
@pytest.mark.parametrize("dtype", ADD_SUB_DTYPES)
def test_add_sub_adds_and_subtracts(dtype: str, batch: bool) -> None:
    shape = (2, 16) if batch else (16,)
    a, b = sample(dtype, shape, seed=1), sample(dtype, shape, seed=2)
    out0, out1 = session(add_sub(dtype, batch=batch)).run(
        ["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b}
    )
    with np.errstate(over="ignore"):  # unsigned a - b wraps, as in numpy
        assert np.array_equal(out0, a + b)
        assert np.array_equal(out1, a - b)
    assert out0.dtype == np.dtype(NUMPY_TYPES[dtype])  # type: ignore[call-overload]


@pytest.mark.parametrize("dtype", ["BOOL", "BF16", "BYTES"])
def test_add_sub_refuses_types_onnx_runtime_cannot_add(dtype: str) -> None:
    with pytest.raises(ValueError):
        add_sub(dtype)


def test_add_sub_config_is_tritons_simple_model() -> None:
    text = config_for(add_sub(), max_batch_size=8, name="add_sub", dynamic_batching=True)
    assert text == (
        'name: "add_sub"\n'
        'platform: "onnxruntime_onnx"\n'
        "max_batch_size: 8\n"
        "input [\n"
        '  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }\n'
        "]\n"
        "output [\n"
        '  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },\n'
        '  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }\n'
        "]\n"
        "dynamic_batching { }\n"
    )
    nobatch = config_for(
        add_sub(batch=False),
        max_batch_size=0,
        max_queue_delay_us=50,
        instance_count=2,
        extra="version_policy: { all { } }",
    )
    assert "max_batch_size: 0\n" in nobatch and "dims: [ 16 ]" in nobatch
    assert "instance_group [ { kind: KIND_CPU count: 2 } ]\n" in nobatch
    assert "dynamic_batching { max_queue_delay_microseconds: 50 }\n" in nobatch
    assert nobatch.endswith("version_policy: { all { } }\n")


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "nobatch"])
def test_mlp_matches_its_numpy_reference(batch: bool) -> None:
    m = mlp(batch=batch, **MLP_SMALL)
    x = sample("FP32", (5, 64) if batch else (64,))
    (y,) = session(m).run(None, {"INPUT0": x})
    want = mlp_reference(x, **MLP_SMALL)
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert (y >= 0).all() and (y > 0).any()


def test_mlp_is_deterministic_per_seed() -> None:
    one = mlp(layers=2, width=16, seed=3).SerializeToString()
    assert one == mlp(layers=2, width=16, seed=3).SerializeToString()
    assert one != mlp(layers=2, width=16, seed=4).SerializeToString()


def test_default_mlp_is_4_by_1024() -> None:
    m = mlp()
    assert [i.name for i in m.graph.initializer] == ["w0", "b0", "w1", "b1", "w2", "b2", "w3", "b3"]
    assert list(m.graph.initializer[0].dims) == [1024, 1024]
    x = sample("FP32", (2, 1024))
    (y,) = session(m).run(None, {"INPUT0": x})
    np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("batch", [True, False], ids=["batch", "nobatch"])
def test_failing_looks_up_in_range_and_fails_out_of_range(batch: bool) -> None:
    sess = session(failing(batch=batch))
    good = np.array([[0], [3], [-1]] if batch else [2], dtype=np.int64)
    (y,) = sess.run(None, {"INPUT0": good})
    assert y.dtype == np.float32
    assert y.ravel().tolist() == [FAILING_TABLE[i] for i in good.ravel()]
    bad = np.array([[1], [4]] if batch else [-5], dtype=np.int64)
    with pytest.raises(Exception, match="out of data bounds"):
        sess.run(None, {"INPUT0": bad})


def test_write_model_lays_out_a_triton_model_directory(tmp_path: Path) -> None:
    m = identity("INT32", (2,))
    d = write_model(tmp_path, "m", m, config_for(m, max_batch_size=2), version=3)
    assert d == tmp_path / "m"
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("*")) == [
        "3",
        "3/model.onnx",
        "config.pbtxt",
    ]
    assert onnx.load(str(d / "3" / "model.onnx")) == m
    bare = write_model(tmp_path, "auto", m, None)
    assert not (bare / "config.pbtxt").exists() and (bare / "1" / "model.onnx").is_file()


def test_write_if_changed_skips_identical_bytes(tmp_path: Path) -> None:
    p = tmp_path / "a" / "f"
    assert write_if_changed(p, b"one")
    before = p.stat().st_mtime_ns
    assert not write_if_changed(p, b"one")
    assert p.stat().st_mtime_ns == before
    assert write_if_changed(p, b"two") and p.read_bytes() == b"two"
    assert [x.name for x in p.parent.iterdir()] == ["f"]  # no temporary file left behind


def test_write_add_sub_with_labels(tmp_path: Path) -> None:
    d = write_add_sub(tmp_path, "classifier", 1, dims=4, label_file=["dog", "cat"])
    assert (d / "labels.txt").read_text() == "dog\ncat\n"
    assert (
        'name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt"'
        in (d / "config.pbtxt").read_text()
    )


def test_shared_repository_models_load_and_match_their_configs(tmp_path: Path) -> None:
    repo = build_onnx_repo(tmp_path)
    assert [
        p.name for p in sorted(repo.iterdir(), key=lambda p: ONNX_REPO_MODELS.index(p.name))
    ] == list(ONNX_REPO_MODELS)
    for name in ONNX_REPO_MODELS:
        text = (repo / name / "config.pbtxt").read_text()
        assert f'name: "{name}"' in text
        model = onnx.load(str(repo / name / "1" / "model.onnx"))
        sess = session(model)
        batch = "max_batch_size: 0" not in text
        inputs, outputs = model_tensors(model, batch)
        assert [i.name for i in sess.get_inputs()] == [t[0] for t in inputs]
        assert [o.name for o in sess.get_outputs()] == [t[0] for t in outputs]
        for t in inputs + outputs:
            assert f'name: "{t[0]}"' in text


def test_shared_repository_configs_pass_tritonlites_config_pipeline(tmp_path: Path) -> None:
    """Where the server package is importable, its own loader accepts every generated config."""
    config = pytest.importorskip("tritonlite.contracts.config")
    backends = pytest.importorskip("tritonlite.backends")
    repo = build_onnx_repo(tmp_path)
    for name in ONNX_REPO_MODELS:
        cfg = config.load_model_config(repo / name, auto_completers=backends.AUTO_COMPLETERS)
        assert cfg.name == name
