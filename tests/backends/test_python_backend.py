"""The python backend in process: pb_utils, model.py import isolation, execute mapping,
auto-complete. The HTTP side (real tritonclient, real server) is tests/compat/test_python_models.py.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonlite.backends.base import InstanceSpec, ModelContext, ModelOutputs
from tritonlite.backends.python import pb_utils
from tritonlite.backends.python.autocomplete import auto_complete
from tritonlite.backends.python.backend import PythonBackend, PythonInstance
from tritonlite.backends.python.loader import describe
from tritonlite.backends.python.model_config import ModelConfig
from tritonlite.contracts import config as model_config
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.signature import Signature
from tritonlite.contracts.timing import ExecTiming
from tritonlite.contracts.types import InferInput, InferRequest, RequestedOutput
from tritonlite.core.tensors.outputs import build_response
from tritonlite.core.tensors.shm import SharedMemoryManager


def _python_completer(cfg: Any, model_dir: Path, default_max_batch_size: int) -> None:
    auto_complete(cfg, model_dir)  # without the registry's INTERNAL re-coding


COMPLETERS = {"python": _python_completer}

pytestmark = pytest.mark.timeout(60)

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 8
input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }
input { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
"""

ADD_SUB = """
import json
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        cfg = json.loads(args["model_config"])
        self.dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(cfg, "OUTPUT0")["data_type"])
        self.seen = []

    def execute(self, requests):
        self.seen.append(requests)
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtype)),
                 pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtype))],
                parameters={"note": "ok", "n": 3}))
        return out
"""


def write_model(
    repo: Path,
    name: str,
    code: str,
    config: str | None = ADD_SUB_CONFIG,
    version: int = 1,
    files: dict[str, str] | None = None,
) -> Path:
    model_dir = repo / name
    vdir = model_dir / str(version)
    vdir.mkdir(parents=True, exist_ok=True)
    (vdir / "model.py").write_text(textwrap.dedent(code))
    for rel, text in (files or {}).items():
        p = model_dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def context(model_dir: Path, version: int = 1, auto: bool = True) -> ModelContext:
    cfg = model_config.load_model_config(model_dir, auto_completers=COMPLETERS if auto else None)
    return ModelContext(
        model_dir.name,
        version,
        model_dir,
        model_dir / str(version),
        cfg,
        model_config.render_json_bytes(cfg).decode(),
    )


class OnThread:
    """An instance driven the way the core drives it: every call on the instance's own thread."""

    def __init__(self, backend: PythonBackend, spec: InstanceSpec) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=spec.name)
        self.inst: PythonInstance = self._pool.submit(backend.new_instance, spec).result()

    def execute(self, requests: list[InferRequest], timing: ExecTiming) -> list[Any]:
        return self._pool.submit(self.inst.execute, requests, timing).result()

    def is_ready(self) -> bool:
        return self.inst.is_ready()

    @property
    def _model(self) -> Any:
        return self.inst._model

    def close(self) -> None:
        try:
            self._pool.submit(self.inst.close).result()
        finally:
            self._pool.shutdown()


class Loaded:
    """A backend and its instances; closed by the ``load`` fixture."""

    def __init__(self, model_dir: Path) -> None:
        self.ctx = context(model_dir)
        self.backend = PythonBackend(self.ctx)
        self.instances: list[OnThread] = []

    def instance(self, name: str = "", kind: str = "CPU", device: int = 0) -> OnThread:
        spec = InstanceSpec(name or f"{self.ctx.name}_0_0", kind, device)
        inst = OnThread(self.backend, spec)
        self.instances.append(inst)
        return inst

    def close(self) -> None:
        for inst in self.instances:
            inst.close()
        self.backend.close()


@pytest.fixture()
def load() -> Any:
    opened: list[Loaded] = []

    def factory(model_dir: Path) -> Loaded:
        loaded = Loaded(model_dir)
        opened.append(loaded)
        return loaded

    yield factory
    for loaded in opened:
        loaded.close()


def fp32_request(a: Any, b: Any, **kw: Any) -> InferRequest:
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    return InferRequest(
        "m",
        inputs=[InferInput("INPUT0", "FP32", a.shape, a), InferInput("INPUT1", "FP32", b.shape, b)],
        **kw,
    )


def run(inst: OnThread, *requests: InferRequest) -> list[Any]:
    return inst.execute(list(requests), ExecTiming())


# -- pb_utils helpers ------------------------------------------------------------------------


def test_module_is_importable_under_triton_name() -> None:
    import triton_python_backend_utils

    assert triton_python_backend_utils is pb_utils
    assert sys.modules["triton_python_backend_utils"] is pb_utils


def test_constants() -> None:
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2


@pytest.mark.parametrize(
    "items", [[b"a", b"", "h\u00e9", b"\x00\xff"], [[b"x", b"yy"], [b"", b"z"]]]
)
def test_serialize_deserialize_round_trip(items: list[Any]) -> None:
    arr = np.array(items, dtype=object)
    raw = pb_utils.serialize_byte_tensor(arr)
    assert isinstance(raw, bytes)
    expected = [x if isinstance(x, bytes) else x.encode() for x in arr.reshape(-1).tolist()]
    assert raw == b"".join(struct.pack("<I", len(x)) + x for x in expected)
    back = pb_utils.deserialize_bytes_tensor(raw)
    assert back.dtype == np.object_ and back.ndim == 1
    assert back.tolist() == expected


def test_serialize_special_cases() -> None:
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=object)) == ()
    assert pb_utils.serialize_byte_tensor(np.array([1, 2], dtype=np.int32)) is None
    assert (
        pb_utils.serialize_byte_tensor(np.array([b"ab", b"c"]))
        == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    )
    assert pb_utils.serialize_byte_tensor(np.array([3], dtype=object)) == b"\x01\x00\x00\x003"
    assert pb_utils.deserialize_bytes_tensor(b"").tolist() == []
    with pytest.raises(struct.error):
        pb_utils.deserialize_bytes_tensor(b"\x05\x00\x00\x00ab")


def test_dtype_tables() -> None:
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_BF16")
    for code in range(1, 14):
        np_type = pb_utils.triton_to_numpy_type(code)
        assert pb_utils.numpy_to_triton_type(np_type) == code
        assert pb_utils.numpy_to_triton_type(np.dtype(np_type)) == code
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.triton_to_numpy_type(14) is None


def test_config_lookups() -> None:
    cfg = {
        "input": [{"name": "A", "data_type": "TYPE_FP32"}],
        "output": [{"name": "B", "data_type": "TYPE_INT8"}],
    }
    assert pb_utils.get_input_config_by_name(cfg, "A") == {"name": "A", "data_type": "TYPE_FP32"}
    assert pb_utils.get_input_config_by_name(cfg, "B") is None
    assert pb_utils.get_output_config_by_name(cfg, "B")["data_type"] == "TYPE_INT8"
    assert pb_utils.get_output_config_by_name({}, "B") is None
    assert pb_utils.using_decoupled_model_transaction_policy(cfg) is False
    cfg["model_transaction_policy"] = {"decoupled": True}
    assert pb_utils.using_decoupled_model_transaction_policy(cfg) is True


def test_tensor_basics() -> None:
    t = pb_utils.Tensor("OUT", np.arange(6, dtype=np.int32).reshape(2, 3))
    assert t.name() == "OUT" and t.shape() == [2, 3] and t.triton_dtype() == 8 and t.is_cpu()
    assert pb_utils.Tensor("S", np.array([b"x"], dtype=object)).triton_dtype() == 13
    assert pb_utils.Tensor("S", np.array(["x"], dtype=object)).triton_dtype() == 13
    with pytest.raises(pb_utils.TritonModelException, match="NumPy dtype is not supported."):
        pb_utils.Tensor("U", np.array(["x"]))  # np.str_ arrays are refused, as by Triton 2.51
    t = pb_utils.Tensor("T", np.arange(6, dtype=np.int32).reshape(2, 3).T)
    assert t.as_numpy().flags.c_contiguous and t.shape() == [3, 2]
    with pytest.raises(
        pb_utils.TritonModelException, match="Tensor name cannot be an empty string."
    ):
        pb_utils.Tensor("", np.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="NumPy dtype is not supported."):
        pb_utils.Tensor("C", np.zeros(1, dtype=np.complex64))
    with pytest.raises(TypeError):
        pb_utils.Tensor("L", [1, 2])  # type: ignore[arg-type]


def test_tensor_dlpack_round_trip() -> None:
    t = pb_utils.Tensor("A", np.arange(4, dtype=np.float32))
    back = pb_utils.Tensor.from_dlpack("B", t.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), np.arange(4, dtype=np.float32))
    via_protocol = pb_utils.Tensor.from_dlpack("C", t)
    assert via_protocol.name() == "C" and via_protocol.shape() == [4]
    assert np.from_dlpack(t).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(pb_utils.TritonModelException, match="string tensors"):
        pb_utils.Tensor("S", np.array([b"x"], dtype=object)).to_dlpack()
    with pytest.raises(pb_utils.TritonModelException, match="not supported"):
        pb_utils.Tensor.from_dlpack("D", object())


def test_input_tensor_is_writable_without_touching_the_request() -> None:
    buf = np.arange(4, dtype=np.float32).tobytes()
    view = np.frombuffer(buf, dtype=np.float32)
    t = pb_utils.Tensor._of_input("IN", view)
    arr = t.as_numpy()
    arr += 1
    assert t.as_numpy() is arr
    assert view.tolist() == [0.0, 1.0, 2.0, 3.0]
    writable = np.zeros(2, dtype=np.float32)
    assert pb_utils.Tensor._of_input("W", writable).as_numpy() is writable


def test_triton_error() -> None:
    e = pb_utils.TritonError("bad")
    assert e.message() == "bad" and e.code() == pb_utils.TritonError.INTERNAL
    e = pb_utils.TritonError("nf", pb_utils.TritonError.NOT_FOUND)
    assert e.code() == pb_utils.TritonError.NOT_FOUND and e.code().name == "NOT_FOUND"
    assert [
        int(getattr(pb_utils.TritonError, n))
        for n in (
            "UNKNOWN",
            "INTERNAL",
            "NOT_FOUND",
            "INVALID_ARG",
            "UNAVAILABLE",
            "UNSUPPORTED",
            "ALREADY_EXISTS",
            "CANCELLED",
        )
    ] == list(range(8))  # TRITONSERVER_Error_Code
    with pytest.raises(TypeError):
        pb_utils.TritonError(None)  # type: ignore[arg-type]
    exc = pb_utils.TritonModelException("boom")
    assert str(exc) == "boom" and exc.message() == "boom" and isinstance(exc, Exception)


def test_every_error_code_maps_to_a_tritonlite_code() -> None:
    for name in ErrorCode.__members__:
        assert getattr(pb_utils.TritonError, name).name == name


def test_response() -> None:
    t = pb_utils.Tensor("A", np.zeros(1))
    r = pb_utils.InferenceResponse([t])
    assert r.output_tensors() == [t] and not r.has_error() and r.error() is None
    assert r.parameters() == "{}"
    r = pb_utils.InferenceResponse(
        output_tensors=[], parameters={"a": 1, "b": "x", "c": True, "d": 0.5}
    )
    assert json.loads(r.parameters()) == {"a": 1, "b": "x", "c": True, "d": 0.5}
    err = pb_utils.TritonError("e", pb_utils.TritonError.INVALID_ARG)
    assert pb_utils.InferenceResponse(error=err).error() is err
    assert pb_utils.get_output_tensor_by_name(pb_utils.InferenceResponse([t]), "A") is t
    assert pb_utils.get_output_tensor_by_name(pb_utils.InferenceResponse([t]), "B") is None
    with pytest.raises(pb_utils.TritonModelException, match="Expect dict, got <class 'list'>"):
        pb_utils.InferenceResponse([], parameters=[])  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match="keys to have type str"):
        pb_utils.InferenceResponse([], parameters={1: "x"})  # type: ignore[dict-item]
    with pytest.raises(pb_utils.TritonModelException, match="NoneType"):
        pb_utils.InferenceResponse([], parameters={"x": None})
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse([np.zeros(1)])  # type: ignore[list-item]


def test_response_sender_of_a_non_decoupled_model() -> None:
    # Triton's rules (response_sender.cc): one response, with FINAL or followed by a flags-only
    # FINAL; nothing after FINAL.
    s = pb_utils.InferenceResponseSender()
    r = pb_utils.InferenceResponse([])
    with pytest.raises(pb_utils.TritonModelException, match="complete final before sending"):
        s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="Unsupported flag provided"):
        s.send(r, flags=4)
    with pytest.raises(pb_utils.TritonModelException, match="must be provided"):
        s.send()
    s.send(r, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert s.response is r and not s.is_cancelled()
    with pytest.raises(pb_utils.TritonModelException, match="more than one response"):
        s.send(r, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="has been closed"):
        s.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_bls_and_model_management_without_a_server() -> None:
    # (with a server: tests/compat/test_bls.py)
    req = pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=["X"])
    assert req.requested_output_names() == {"X"} and req.parameters() == "{}"
    resp = req.exec()
    assert resp.has_error() and "not running in this process" in resp.error().message()
    with pytest.raises(RuntimeError, match="no running event loop"):
        req.async_exec()
    for call in (
        lambda: pb_utils.load_model("x"),
        lambda: pb_utils.unload_model("x"),
        lambda: pb_utils.is_model_ready("x"),
    ):
        with pytest.raises(pb_utils.TritonModelException, match="not running in this process"):
            call()
    with pytest.raises(pb_utils.TritonModelException, match="Correlation ID"):
        pb_utils.InferenceRequest(
            model_name="m", inputs=[], requested_output_names=[], correlation_id=1.5
        )  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(model_name="m")


def test_logger_logs_with_the_callers_location(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="tritonlite.python"):
        pb_utils.Logger.log_info("hello")
        pb_utils.Logger.log_warn("careful")
        pb_utils.Logger.log_error("bad")
        pb_utils.Logger.log_verbose("detail")
        pb_utils.Logger.log("again", pb_utils.Logger.WARNING)
    got = [
        (r.levelno, r.getMessage(), r.filename)
        for r in caplog.records
        if r.name == "tritonlite.python"
    ]
    here = Path(__file__).name
    assert got == [
        (logging.INFO, "hello", here),
        (logging.WARNING, "careful", here),
        (logging.ERROR, "bad", here),
        (logging.DEBUG, "detail", here),
        (logging.WARNING, "again", here),
    ]


def test_metric_family_in_memory() -> None:
    counter = pb_utils.MetricFamily("c", "a counter", pb_utils.MetricFamily.COUNTER)
    m = counter.Metric(labels={"k": "v"})
    m.increment(2)
    m.increment(3)
    assert m.value() == 5 and counter.Metric(labels={"k": "v"}) is m
    with pytest.raises(pb_utils.TritonModelException):
        m.increment(-1)
    gauge = pb_utils.MetricFamily("g", "a gauge", pb_utils.MetricFamily.GAUGE).Metric()
    gauge.set(7.5)
    assert gauge.value() == 7.5
    hist = pb_utils.MetricFamily("h", "a histogram", pb_utils.MetricFamily.HISTOGRAM)
    with pytest.raises(pb_utils.TritonModelException):
        hist.Metric()
    hist.Metric(buckets=[1.0, 2.0]).observe(1.5)


def test_get_model_dir_outside_a_model() -> None:
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.get_model_dir()


# -- ModelConfig (auto_complete_config's argument) --------------------------------------------


def model_cfg(**extra: Any) -> ModelConfig:
    base = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    base.update(extra)
    return ModelConfig(json.dumps(base))


def test_model_config_adds_and_merges() -> None:
    cfg = model_cfg(input=[{"name": "A", "data_type": "TYPE_INVALID", "dims": []}])
    cfg.set_max_batch_size(4)
    cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3], "optional": True})
    cfg.add_input({"name": "B", "data_type": "TYPE_INT32", "dims": [-1]})
    cfg.add_output({"name": "C", "data_type": "TYPE_FP32", "dims": [3]})
    cfg.set_dynamic_batching()
    cfg.set_model_transaction_policy({"decoupled": False})
    d = cfg.as_dict()
    assert d["max_batch_size"] == 4 and d["dynamic_batching"] == {}
    assert d["input"] == [
        {"name": "A", "data_type": "TYPE_FP32", "dims": [3], "optional": True},
        {"name": "B", "data_type": "TYPE_INT32", "dims": [-1]},
    ]
    assert d["output"] == [{"name": "C", "data_type": "TYPE_FP32", "dims": [3]}]
    assert d["model_transaction_policy"] == {"decoupled": False}


def test_model_config_conflicts() -> None:
    cfg = model_cfg(
        max_batch_size=8,
        input=[{"name": "A", "data_type": "TYPE_INT32", "dims": [3], "optional": False}],
        sequence_batching={},
    )
    with pytest.raises(
        ValueError,
        match="configuration specified max_batch_size 8, but in "
        "auto-complete-config function for model 'm' specified max_batch_size 4",
    ):
        cfg.set_max_batch_size(4)
    with pytest.raises(
        ValueError,
        match="configuration expects datatype TYPE_INT32 for input 'A', model provides TYPE_FP32",
    ):
        cfg.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})
    with pytest.raises(
        ValueError,
        match=r"the model expects dims \[4\] but the model "
        r"configuration specifies dims \[3\]",
    ):
        cfg.add_input({"name": "A", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(ValueError, match="expects optional True"):
        cfg.add_input({"name": "A", "data_type": "TYPE_INT32", "dims": [3], "optional": True})
    with pytest.raises(
        ValueError, match="contains property other than 'name', 'data_type', 'dims' and 'optional'."
    ):
        cfg.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [3], "format": "x"})
    with pytest.raises(ValueError, match="is missing 'dims' property."):
        cfg.add_output({"name": "Y", "data_type": "TYPE_INT32"})
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        cfg.set_dynamic_batching()
    cfg.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        cfg.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="contains property other than 'decoupled'"):
        cfg.set_model_transaction_policy({"other": 1})


# -- loading and import isolation -----------------------------------------------------------

UTILS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils
import utils
from . import helper

class TritonPythonModel:
    def initialize(self, args):
        import lazy_init
        self.init_dir = pb_utils.get_model_dir()
        self.init_who = lazy_init.WHO

    def execute(self, requests):
        import lazy  # imported only now, after loading
        same_dir = pb_utils.get_model_dir() == self.init_dir
        value = f"{utils.WHO}/{helper.WHO}/{lazy.WHO}/{self.init_who}/{same_dir}"
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value.encode()],
                dtype=object))]) for _ in requests]
"""

UTILS_CONFIG = """
backend: "python"
input { name: "IN" data_type: TYPE_STRING dims: [ 1 ] }
output { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] }
"""


def bytes_request(value: bytes = b"x") -> InferRequest:
    arr = np.array([value], dtype=object)
    return InferRequest("m", inputs=[InferInput("IN", "BYTES", (1,), arr)])


def test_two_models_with_their_own_utils(tmp_path: Path, load: Any) -> None:
    dirs = {}
    for who in ("alpha", "beta"):
        dirs[who] = write_model(
            tmp_path,
            who,
            UTILS_MODEL,
            UTILS_CONFIG,
            files={
                "1/utils.py": f"WHO = 'utils-{who}'\n",
                "1/helper.py": f"WHO = 'helper-{who}'\n",
                "1/lazy.py": f"WHO = 'lazy-{who}'\n",
                "1/lazy_init.py": f"WHO = 'init-{who}'\n",
            },
        )
    path_before = list(sys.path)
    a = load(dirs["alpha"]).instance()
    b = load(dirs["beta"]).instance()
    assert "utils" not in sys.modules and "helper" not in sys.modules
    assert sys.path == path_before
    for _ in range(2):  # the second execute finds the lazily imported module again
        for inst, who in ((a, "alpha"), (b, "beta")):
            (out,) = run(inst, bytes_request())
            expected = f"utils-{who}/helper-{who}/lazy-{who}/init-{who}/True"
            assert out["OUT"].tolist() == [expected.encode()]
        assert "lazy" not in sys.modules and "lazy_init" not in sys.modules


def test_model_dir_is_appended_to_the_import_path(tmp_path: Path, load: Any) -> None:
    code = """
    import sys
    import shared_helper  # lives in the model directory, next to config.pbtxt
    import triton_python_backend_utils as pb_utils

    TAIL = sys.path[-2:]  # while model.py is imported

    class TritonPythonModel:
        def initialize(self, args):
            self.name = __name__
            self.tail = TAIL
        def execute(self, requests):
            return [pb_utils.InferenceResponse([]) for _ in requests]
    """
    model_dir = write_model(
        tmp_path, "m", code, UTILS_CONFIG, files={"shared_helper.py": "X = 1\n"}
    )
    inst = load(model_dir).instance()
    assert inst._model.tail == [str(model_dir / "1"), str(model_dir)]
    assert inst._model.name.endswith(".model")
    assert inst._model.name.startswith("tritonlite_pymodel_m_1_")


def test_initialize_args(tmp_path: Path, load: Any) -> None:
    model_dir = write_model(tmp_path, "add_sub", ADD_SUB)
    loaded = load(model_dir)
    inst = loaded.instance("add_sub_0_1", "GPU", 3)
    args = inst._model.args
    assert args == {
        "model_config": loaded.ctx.config_json,
        "model_instance_kind": "GPU",
        "model_instance_name": "add_sub_0_1",
        "model_instance_device_id": "3",
        "model_repository": str(model_dir),
        "model_version": "1",
        "model_name": "add_sub",
    }
    assert json.loads(args["model_config"])["max_batch_size"] == 8


def test_initialize_and_execute_share_one_thread(tmp_path: Path, load: Any) -> None:
    code = """
    import threading
    import numpy as np
    import triton_python_backend_utils as pb_utils

    state = threading.local()

    class TritonPythonModel:
        def initialize(self, args):
            state.device = args["model_instance_device_id"]
        def execute(self, requests):
            got = getattr(state, "device", "unset")
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([got.encode()],
                    dtype=object))]) for _ in requests]
    """
    inst = load(write_model(tmp_path, "m", code, UTILS_CONFIG)).instance(device=5)
    (out,) = run(inst, bytes_request())
    assert out["OUT"].tolist() == [b"5"]


LOAD_FAILURES = [
    (
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise ValueError('no')\n",
        None,
        ErrorCode.INTERNAL,
        r"ValueError: no\n\nAt:\n  .*model\.py\(3\): initialize\n",
    ),
    (
        "x = 1\n",
        None,
        ErrorCode.INTERNAL,
        r"AttributeError: module 'tritonlite_pymodel_m_1_\d+\.model' has no attribute "
        r"'TritonPythonModel'",
    ),
    (
        "import no_such_module_here\n",
        None,
        ErrorCode.INTERNAL,
        r"ModuleNotFoundError: No module named 'no_such_module_here'",
    ),
    (
        "class TritonPythonModel:\n    pass\n",
        UTILS_CONFIG
        + 'parameters { key: "EXECUTION_ENV_PATH" value { string_value: "env.tar.gz" } }\n',
        ErrorCode.INTERNAL,
        r"Failed to get the canonical path for .*/m/env\.tar\.gz\.",
    ),
]


@pytest.mark.parametrize(("code", "config", "error", "message"), LOAD_FAILURES)
def test_load_failures(
    tmp_path: Path, code: str, config: str | None, error: ErrorCode, message: str
) -> None:
    model_dir = write_model(tmp_path, "m", code, config or UTILS_CONFIG)
    ctx = context(model_dir, auto=False)  # auto-complete imports model.py too: tested below
    with pytest.raises(TritonliteError) as info:
        backend = PythonBackend(ctx)
        try:
            backend.new_instance(InstanceSpec("m_0_0", "CPU", 0)).close()
        finally:
            backend.close()
    assert info.value.code == error
    assert re.search(message, info.value.message), info.value.message


def test_missing_model_file(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m", "x = 1\n", UTILS_CONFIG)
    (model_dir / "1" / "model.py").unlink()
    (model_dir / "1" / "other.py").write_text("x = 1\n")
    with pytest.raises(TritonliteError, match="Python model file not found in"):
        PythonBackend(context(model_dir))


def test_default_model_filename(tmp_path: Path, load: Any) -> None:
    model_dir = write_model(
        tmp_path,
        "m",
        "raise RuntimeError('model.py is not the entry')\n",
        UTILS_CONFIG + 'default_model_filename: "entry.py"\n',
    )
    (model_dir / "1" / "entry.py").write_text(textwrap.dedent(EXEC_MODEL))
    loaded = load(model_dir)
    assert loaded.backend.path.name == "entry.py"
    (out,) = run(loaded.instance(), bytes_request(b"plain"))
    assert out["OUT"].tolist() == [b"ok"]


def test_auto_complete_import_error_is_a_load_error(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "m", "import no_such_module_here\n", UTILS_CONFIG)
    with pytest.raises(
        TritonliteError, match="ModuleNotFoundError: No module named 'no_such_module_here'"
    ):
        model_config.load_model_config(model_dir, auto_completers=COMPLETERS)


# -- execute ---------------------------------------------------------------------------------


def test_add_sub_execute_and_response_parameters(tmp_path: Path, load: Any) -> None:
    inst = load(write_model(tmp_path, "add_sub", ADD_SUB)).instance()
    timing = ExecTiming(start_ns=1)
    (out,) = inst.execute([fp32_request([[1, 2, 3, 4]], [[1, 1, 1, 1]])], timing)
    assert isinstance(out, ModelOutputs)
    np.testing.assert_array_equal(out["OUTPUT0"], [[2, 3, 4, 5]])
    np.testing.assert_array_equal(out["OUTPUT1"], [[0, 1, 2, 3]])
    assert out["OUTPUT0"].dtype == np.float32
    assert out.parameters == {"note": "ok", "n": 3} and out.partial
    assert timing.input_end_ns > 0 and timing.infer_end_ns >= timing.input_end_ns


def test_request_view(tmp_path: Path, load: Any) -> None:
    code = """
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for r in requests:
                info = {"id": r.request_id(), "corr": r.correlation_id(), "flags": r.flags(),
                        "timeout": r.timeout(), "params": r.parameters(),
                        "requested": sorted(r.requested_output_names()),
                        "inputs": [t.name() for t in r.inputs()],
                        "type": type(r.inputs()[0].as_numpy()[0]).__name__,
                        "n": len(requests)}
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUT", np.array([json.dumps(info).encode()], dtype=object))]))
            return out
    """
    config = UTILS_CONFIG + 'output { name: "OTHER" data_type: TYPE_INT32 dims: [ 1 ] }\n'
    inst = load(write_model(tmp_path, "m", code, config)).instance()
    r1 = bytes_request()
    r1.id, r1.sequence_id, r1.sequence_start, r1.timeout_us = "rid", 42, True, 1234
    r1.parameters = {"custom": "v", "k": 3, "f": 2.5, "b": True}
    r2 = bytes_request()
    r2.sequence_id, r2.sequence_end = "corr-str", True
    r2.outputs = [RequestedOutput("OUT")]
    outs = run(inst, r1, r2)
    i1, i2 = (json.loads(o["OUT"][0]) for o in outs)
    assert i1 == {
        "id": "rid",
        "corr": 42,
        "flags": 1,
        "timeout": 1234,
        "params": '{"custom":"v","k":3,"f":2.5,"b":true}',
        "requested": ["OTHER", "OUT"],
        "inputs": ["IN"],
        "type": "bytes",
        "n": 2,
    }
    assert i2["corr"] == "corr-str" and i2["flags"] == 2 and i2["requested"] == ["OUT"]
    assert i2["id"] == "" and i2["params"] == "{}" and i2["timeout"] == 0


EXEC_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

def ok():
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([b"ok"], dtype=object))])

class TritonPythonModel:
    def execute(self, requests):
        mode = requests[0].inputs()[0].as_numpy()[0].decode()
        if mode == "raise":
            raise ValueError("boom")
        if mode == "tme":
            raise pb_utils.TritonModelException("model said no")
        if mode == "short":
            return []
        if mode == "dict":
            return {}
        if mode == "bad-element":
            return ["x" for _ in requests]
        if mode == "none":
            return None
        if mode == "sender":
            for r in requests:
                r.get_response_sender().send(ok(), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
        if mode == "sender-and-return":
            for r in requests:
                r.get_response_sender().send(ok(), pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return [ok() for _ in requests]
        if mode == "bls":
            pb_utils.InferenceRequest(model_name="x", inputs=[], requested_output_names=[]).exec()
        if mode == "reschedule":
            for r in requests:
                r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            return [None for _ in requests]
        if mode == "tuple":
            return tuple(ok() for _ in requests)
        if mode == "missing":
            return [pb_utils.InferenceResponse([]) for _ in requests]
        if mode == "per-request":
            out = []
            for r in requests:
                v = r.inputs()[0].as_numpy()[0]
                if v == b"per-request":
                    out.append(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("bad input", pb_utils.TritonError.INVALID_ARG)))
                else:
                    out.append(ok())
            return out
        return [ok() for _ in requests]
"""


def test_execute_results(tmp_path: Path, load: Any) -> None:
    inst = load(write_model(tmp_path, "m", EXEC_MODEL, UTILS_CONFIG)).instance("m_0_0")
    prefix = "Failed to process the request(s) for model 'm_0_0', message: "

    def failure(mode: str, n: int = 2) -> TritonliteError:
        outs = run(inst, *(bytes_request(mode.encode()) for _ in range(n)))
        assert len(outs) == n and all(o is outs[0] for o in outs)
        assert isinstance(outs[0], TritonliteError)
        assert outs[0].message.startswith(prefix), outs[0].message
        return outs[0]

    err = failure("raise")
    assert err.code == ErrorCode.INTERNAL
    assert re.fullmatch(
        r".*message: ValueError: boom\n\nAt:\n  .*model\.py\(\d+\): execute\n", err.message, re.S
    ), err.message
    assert "TritonModelException: model said no" in failure("tme").message
    assert failure("short").message == prefix + (
        "Number of InferenceResponse objects do not match the number of InferenceRequest "
        "objects. InferenceRequest(s) size is:2, and InferenceResponse(s) size is:0\n"
    )
    assert failure("dict").message == prefix + (
        "Expected a list in the execute return, found type '<class 'dict'>'."
    )
    assert failure("bad-element").message == prefix + (
        "Expected an 'InferenceResponse' object in the execute function return list, found "
        "type '<class 'str'>'."
    )
    assert "more than one response" in failure("sender-and-return").message
    # a BLS call's failure (here: no server in this process) is its response's, not the batch's
    assert not isinstance(run(inst, bytes_request(b"bls"))[0], TritonliteError)

    for mode in ("none", "reschedule"):
        outs = run(inst, bytes_request(mode.encode()))
        assert isinstance(outs[0], TritonliteError)
    assert run(inst, bytes_request(b"reschedule"))[0].code == ErrorCode.UNSUPPORTED
    assert "no response" in run(inst, bytes_request(b"none"))[0].message

    for mode in ("sender", "tuple", "anything"):
        outs = run(inst, bytes_request(mode.encode()), bytes_request(mode.encode()))
        assert [o["OUT"].tolist() for o in outs] == [[b"ok"], [b"ok"]]
    (missing,) = run(inst, bytes_request(b"missing"))
    assert isinstance(missing, ModelOutputs) and dict(missing) == {}

    outs = run(inst, bytes_request(b"per-request"), bytes_request(b"fine"))
    assert isinstance(outs[0], TritonliteError) and outs[0].code == ErrorCode.INVALID_ARG
    assert outs[0].message == "bad input"
    assert outs[1]["OUT"].tolist() == [b"ok"]


def test_async_execute_and_initialize(tmp_path: Path, load: Any) -> None:
    code = """
    import asyncio
    import threading
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        async def initialize(self, args):
            await asyncio.sleep(0)
            self.ready = True
            self.background = []

        async def execute(self, requests):
            await asyncio.sleep(0.001)
            self.background.append(asyncio.get_running_loop().create_task(asyncio.sleep(0)))
            name = threading.current_thread().name
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT",
                    np.array([f"{self.ready}:{name}".encode()], dtype=object))])
                    for _ in requests]
    """
    inst = load(write_model(tmp_path, "m", code, UTILS_CONFIG)).instance("m_0_0")
    for _ in range(3):
        (out,) = run(inst, bytes_request())
        assert out["OUT"].tolist() == [b"True:m_0_0-asyncio"]


def test_finalize_and_is_ready(tmp_path: Path, load: Any) -> None:
    code = """
    import triton_python_backend_utils as pb_utils
    calls = []

    class TritonPythonModel:
        def initialize(self, args):
            self.answer = True
        def is_ready(self):
            if self.answer == "raise":
                raise RuntimeError("not now")
            return self.answer
        def execute(self, requests):
            return [pb_utils.InferenceResponse([]) for _ in requests]
        def finalize(self):
            calls.append("finalize")
    """
    loaded = load(write_model(tmp_path, "m", code, UTILS_CONFIG))
    inst = loaded.instance()
    model = inst._model
    module = sys.modules[type(model).__module__]
    assert inst.is_ready() is True
    for answer, ready in ((False, False), ("yes", False), ("raise", False), (True, True)):
        model.answer = answer
        assert inst.is_ready() is ready
    loaded.instances.remove(inst)
    inst.close()
    assert module.calls == ["finalize"]


def test_async_is_ready(tmp_path: Path, load: Any) -> None:
    code = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        async def is_ready(self):
            return False
        def execute(self, requests):
            return [pb_utils.InferenceResponse([]) for _ in requests]
    """
    assert load(write_model(tmp_path, "m", code, UTILS_CONFIG)).instance().is_ready() is False


def test_describe_lists_model_frames_innermost_first(tmp_path: Path) -> None:
    src = tmp_path / "where.py"
    src.write_text("def inner():\n    raise KeyError('k')\n\ndef outer():\n    inner()\n")
    ns: dict[str, Any] = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    try:
        ns["outer"]()
    except KeyError as exc:
        text = describe(exc)
    assert text.startswith("KeyError: 'k'\n\nAt:\n")
    assert text.index("(2): inner") < text.index("(5): outer")


# -- outputs.py: what the backend returns becomes the response ------------------------------


def test_build_response_keeps_parameters_and_allows_missing_outputs(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "add_sub", ADD_SUB)
    cfg = model_config.load_model_config(model_dir)
    sig = Signature.from_config(cfg, model_dir)
    req = fp32_request([[1, 2, 3, 4]], [[1, 1, 1, 1]], id="r1")
    produced = ModelOutputs(
        {"OUTPUT0": np.ones((1, 4), np.float32), "EXTRA": np.ones(1, np.int8)},
        parameters={"p": 1},
        partial=True,
    )
    resp = build_response(sig, "1", req, produced, SharedMemoryManager())
    assert [o.name for o in resp.outputs] == ["OUTPUT0"] and resp.parameters == {"p": 1}
    assert resp.id == "r1"
    with pytest.raises(TritonliteError, match="was not produced"):
        build_response(
            sig, "1", req, {"OUTPUT0": np.ones((1, 4), np.float32)}, SharedMemoryManager()
        )


# -- auto_complete_config ------------------------------------------------------------------

AUTO_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        seen = auto_complete_model_config.as_dict()
        assert seen["instance_group"][0]["kind"] == "KIND_CPU"  # the normalized view
        assert pb_utils.get_model_dir().endswith("/1")
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [3]})
        auto_complete_model_config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [3]})
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse(
            [pb_utils.Tensor("B", pb_utils.get_input_tensor_by_name(r, "A").as_numpy())])
            for r in requests]
"""


def test_auto_complete_without_config(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "auto", AUTO_MODEL, config=None)
    cfg = model_config.load_model_config(model_dir, auto_completers=COMPLETERS)
    doc = model_config.render_json(cfg)
    assert doc["backend"] == "python" and doc["max_batch_size"] == 4
    assert [(i["name"], i["data_type"], i["dims"]) for i in doc["input"]] == [
        ("A", "TYPE_FP32", [3])
    ]
    assert [(o["name"], o["dims"]) for o in doc["output"]] == [("B", [3])]
    assert doc["dynamic_batching"]["preferred_batch_size"] == [4]
    assert "utils" not in sys.modules


def test_auto_complete_writes_only_what_the_model_changed(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "auto", AUTO_MODEL, config='backend: "python"\n')
    cfg = model_config.parse_pbtxt('backend: "python"\n', "x")
    model_config.resolve_platform(cfg, model_dir)
    auto_complete(cfg, model_dir)
    assert not cfg.instance_group and not cfg.HasField("version_policy")
    assert cfg.max_batch_size == 4 and cfg.HasField("dynamic_batching")
    assert [i.name for i in cfg.input] == ["A"]


def test_auto_complete_conflict_is_a_load_error(tmp_path: Path) -> None:
    config = 'backend: "python"\ninput { name: "A" data_type: TYPE_INT32 dims: [ 3 ] }\n'
    model_dir = write_model(tmp_path, "auto", AUTO_MODEL, config=config)
    with pytest.raises(TritonliteError) as info:
        model_config.load_model_config(model_dir, auto_completers=COMPLETERS)
    assert info.value.code == ErrorCode.INVALID_ARG
    assert info.value.message.startswith(
        "ValueError: unable to load model 'auto', configuration expects datatype TYPE_INT32 for "
        "input 'A', model provides TYPE_FP32\n\nAt:\n"
    )
    assert "auto_complete_config" in info.value.message


def test_auto_complete_must_return_model_config(tmp_path: Path) -> None:
    code = """
    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            return None
    """
    model_dir = write_model(tmp_path, "auto", code, config=None)
    with pytest.raises(TritonliteError, match="must return a valid pb.ModelConfig object"):
        model_config.load_model_config(model_dir, auto_completers=COMPLETERS)


def test_auto_complete_skipped_when_disabled_or_absent(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "auto", AUTO_MODEL, config='backend: "python"\n')
    cfg = model_config.load_model_config(model_dir, auto_complete=False, auto_completers=COMPLETERS)
    assert cfg.max_batch_size == 0 and not cfg.input
    plain = write_model(tmp_path, "plain", "class TritonPythonModel:\n    pass\n", UTILS_CONFIG)
    cfg = model_config.load_model_config(plain, auto_completers=COMPLETERS)
    assert [i.name for i in cfg.input] == ["IN"]
