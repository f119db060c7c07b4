"""Request tracing (``--trace-config``, TIMESTAMPS) and the logging extension, against real servers.

Real tritonclient HTTP and gRPC requests to ONNX models; the trace files are parsed as Triton
writes them: one JSON array of per-activity objects (``{"id", "model_name", "model_version",
"request_id"}`` then ``{"id", "timestamps": [{"name", "ns"}]}`` per stamp), ``<file>`` at exit,
``<file>.<n>`` per ``log-frequency`` batch or when ``count`` runs out.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from repos import add_sub_inputs, write_add_sub
from tritonclient.utils import InferenceServerException

from tritonlite.cli import options_from_args
from tritonlite.contracts.errors import TritonliteError
from tritonlite.core.observability.settings import TraceSettings

pytestmark = pytest.mark.timeout(120)

HTTP_ORDER = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "INFER_RESPONSE_COMPLETE",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]
GRPC_ORDER = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "INFER_RESPONSE_COMPLETE",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
]
# stamps that follow one another in time (the file order is Triton's, not always time order)
HTTP_TIMELINE = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]
GRPC_TIMELINE = [
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trace_repo")
    write_add_sub(root, "add_sub", 8, dims=4, extra_config="dynamic_batching { }\n")
    write_add_sub(root, "add_sub_nobatch", 0, dims=4)
    return root


def _inputs(mod: Any, batched: bool = True) -> list[Any]:
    a = np.arange(4, dtype=np.float32).reshape([1, 4] if batched else [4])
    return add_sub_inputs(mod, a, a)


def http_infer(server: Any, request_id: str, model: str = "add_sub") -> None:
    c = httpclient.InferenceServerClient(server.http_url)
    r = c.infer(model, _inputs(httpclient, model == "add_sub"), request_id=request_id)
    assert r.as_numpy("OUTPUT0") is not None


def grpc_infer(server: Any, request_id: str, model: str = "add_sub") -> None:
    c = grpcclient.InferenceServerClient(server.grpc_url)
    r = c.infer(model, _inputs(grpcclient, model == "add_sub"), request_id=request_id)
    assert r.as_numpy("OUTPUT0") is not None


def read_traces(path: Path) -> dict[int, dict[str, Any]]:
    """Trace file -> {id: {"head": header object, "stamps": [(name, ns), ...]}} (file order)."""
    doc = json.loads(path.read_text())
    assert isinstance(doc, list)
    traces: dict[int, dict[str, Any]] = {}
    for obj in doc:
        t = traces.setdefault(obj["id"], {"head": None, "stamps": []})
        if "timestamps" in obj:
            assert set(obj) == {"id", "timestamps"} and len(obj["timestamps"]) == 1
            stamp = obj["timestamps"][0]
            t["stamps"].append((stamp["name"], stamp["ns"]))
        else:
            assert set(obj) <= {"id", "model_name", "model_version", "request_id", "parent_id"}
            assert t["head"] is None
            t["head"] = obj
    return traces


def wait_for_file(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().endswith("]"):
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.02)


def by_request(traces: dict[int, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["head"]["request_id"]: t for t in traces.values()}


def check_trace(trace: dict[str, Any], order: list[str], timeline: list[str]) -> None:
    names = [n for n, _ in trace["stamps"]]
    assert names == order
    ns = dict(trace["stamps"])
    assert [ns[n] for n in timeline] == sorted(ns[n] for n in timeline)
    # Triton's steady clock: CLOCK_MONOTONIC nanoseconds, what time.monotonic_ns() reads here
    assert abs(ns["REQUEST_START"] - time.monotonic_ns()) < 600 * 10**9


# -- the trace file --------------------------------------------------------------------------------
def test_timestamps_http_grpc_and_stream(repo: Path, server_factory: Any, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    s = server_factory(
        repo,
        f"--trace-config=triton,file={out}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
    )
    http_infer(s, "h0")
    grpc_infer(s, "g0")
    grpc_infer(s, "n0", model="add_sub_nobatch")
    c = grpcclient.InferenceServerClient(s.grpc_url)
    results: list[Any] = []
    c.start_stream(callback=lambda result, error: results.append((result, error)))
    c.async_stream_infer("add_sub", _inputs(grpcclient), request_id="s0")
    c.stop_stream()
    assert len(results) == 1 and results[0][1] is None
    bad = [httpclient.InferInput("INPUT0", [1, 3], "FP32")]
    bad[0].set_data_from_numpy(np.zeros((1, 3), np.float32))
    with pytest.raises(InferenceServerException):
        httpclient.InferenceServerClient(s.http_url).infer("add_sub", bad, request_id="bad")
    http_infer(s, "h1")  # still serving after the failed one
    assert httpclient.InferenceServerClient(s.http_url).get_trace_settings() == {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": str(out),
        "trace_mode": "triton",
    }
    assert not out.exists()  # log_frequency 0: written when the server exits
    assert s.stop() == 0
    traces = read_traces(out)
    assert sorted(traces) == list(range(min(traces), min(traces) + 6))
    req = by_request(traces)
    assert set(req) == {"h0", "g0", "n0", "s0", "bad", "h1"}
    assert req["h0"]["head"] == {
        "id": req["h0"]["head"]["id"],
        "model_name": "add_sub",
        "model_version": 1,
        "request_id": "h0",
    }
    check_trace(req["h0"], HTTP_ORDER, HTTP_TIMELINE)
    check_trace(req["h1"], HTTP_ORDER, HTTP_TIMELINE)
    check_trace(req["g0"], GRPC_ORDER, GRPC_TIMELINE)
    check_trace(req["n0"], GRPC_ORDER, GRPC_TIMELINE)
    check_trace(req["s0"], GRPC_ORDER, GRPC_TIMELINE)
    assert req["n0"]["head"]["model_name"] == "add_sub_nobatch"
    # a request refused by validation never started: Triton attaches the trace to a request
    # only once PrepareForInference passed, and stamps REQUEST_START after that (InferAsync)
    assert req["bad"]["stamps"] == []
    # the header follows the HTTP receive stamps, as in tritonserver's file
    text = out.read_text()
    h0 = req["h0"]["head"]["id"]
    assert text.index(f'{{"id":{h0},"model_name"') > text.index(
        f'{{"id":{h0},"timestamps":[{{"name":"HTTP_RECV_END"'
    )


def test_rate_and_count_deprecated_flags(repo: Path, server_factory: Any, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    s = server_factory(
        repo, f"--trace-file={out}", "--trace-level=TIMESTAMPS", "--trace-rate=2", "--trace-count=2"
    )
    assert "Warning: '--trace-rate' has been deprecated" in s.output()
    for i in range(3):
        http_infer(s, f"h{i}")
        grpc_infer(s, f"g{i}")
    client = httpclient.InferenceServerClient(s.http_url)
    assert client.get_trace_settings()["trace_count"] == "0"  # what is left, as Triton shows
    assert s.stop() == 0
    # every 2nd request (g0, then g1 = the 4th), then the count is spent; rate 2 left sampled
    # requests untraced, so Triton writes <file> at exit, not <file>.0
    assert set(by_request(read_traces(out))) == {"g0", "g1"}
    assert not Path(f"{out}.0").exists()


def test_count_and_log_frequency_files(repo: Path, server_factory: Any, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    s = server_factory(
        repo,
        f"--trace-config=triton,file={out}",
        "--trace-config=level=TIMESTAMPS",
        "--trace-config=rate=1",
        "--trace-config=count=3",
        "--trace-config=triton,log-frequency=2",
    )
    http_infer(s, "a")
    grpc_infer(s, "b")
    wait_for_file(Path(f"{out}.0"))  # log-frequency 2: written while serving
    http_infer(s, "c")
    wait_for_file(Path(f"{out}.1"))  # count used up: the rest goes out at once
    http_infer(s, "d")  # not traced
    assert set(by_request(read_traces(Path(f"{out}.0")))) == {"a", "b"}
    assert set(by_request(read_traces(Path(f"{out}.1")))) == {"c"}
    assert s.stop() == 0
    assert not out.exists() and not Path(f"{out}.2").exists()


def test_runtime_updates_and_model_settings(
    repo: Path, server_factory: Any, tmp_path: Path
) -> None:
    out = tmp_path / "trace.json"
    s = server_factory(
        repo, f"--trace-config=triton,file={out}", "--trace-config=triton,log-frequency=1"
    )
    c = httpclient.InferenceServerClient(s.http_url)
    http_infer(s, "off")  # OFF: nothing sampled, nothing written
    t = c.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    assert t["trace_level"] == ["TIMESTAMPS"] and t["trace_rate"] == "1"
    http_infer(s, "on")
    wait_for_file(Path(f"{out}.0"))
    assert set(by_request(read_traces(Path(f"{out}.0")))) == {"on"}
    # a model's own setting wins; values it does not set follow the global ones
    m = c.update_trace_settings(model_name="add_sub_nobatch", settings={"trace_level": ["OFF"]})
    assert m["trace_level"] == ["OFF"] and m["trace_rate"] == "1"
    g = grpcclient.InferenceServerClient(s.grpc_url)
    g.update_trace_settings(settings={"trace_rate": "2"})
    assert c.get_trace_settings(model_name="add_sub_nobatch")["trace_rate"] == "2"
    for i in range(2):
        http_infer(s, f"nb{i}", model="add_sub_nobatch")
    for i in range(4):
        http_infer(s, f"r{i}")
    wait_for_file(Path(f"{out}.2"))
    seen = set(by_request(read_traces(Path(f"{out}.1")))) | set(
        by_request(read_traces(Path(f"{out}.2")))
    )
    assert seen == {"r1", "r3"}
    # clearing the model's value: it traces with the global setting again
    c.update_trace_settings(model_name="add_sub_nobatch", settings={"trace_level": None})
    assert c.get_trace_settings(model_name="add_sub_nobatch")["trace_level"] == ["TIMESTAMPS"]
    # a count set at run time counts down and is shown
    assert g.update_trace_settings(settings={"trace_count": "1", "trace_rate": "1"}, as_json=True)[
        "settings"
    ]["trace_count"]["value"] == ["1"]
    grpc_infer(s, "last")
    assert c.get_trace_settings()["trace_count"] == "0"
    http_infer(s, "after")
    wait_for_file(Path(f"{out}.3"))
    assert s.stop() == 0
    assert set(by_request(read_traces(Path(f"{out}.3")))) == {"last"}
    assert not Path(f"{out}.4").exists()


def test_bad_updates_are_refused(server: Any) -> None:
    c = httpclient.InferenceServerClient(server.http_url)
    cases = [
        ({"trace_level": ["TIMESTAMPS"]}, "trace file name is not given"),  # no --trace-config file
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "Expect only one trace level 'OFF'"),
        ({"trace_level": ["FOO"]}, "trace_level"),
        ({"trace_level": ["TENSORS"]}, "TENSORS is not supported"),
        ({"trace_rate": "abc"}, "Unable to parse 'trace_rate', got: abc"),
        ({"trace_count": "-2"}, "Expecting value >= -1, got:-2"),
        ({"log_frequency": "x"}, "Unable to parse 'log_frequency'"),
        ({"trace_file": "/tmp/elsewhere.json"}, "can not be updated through network protocol"),
    ]
    for settings, message in cases:
        with pytest.raises(InferenceServerException, match=re.escape(message)):
            c.update_trace_settings(settings=settings)
    assert c.get_trace_settings()["trace_level"] == ["OFF"]
    g = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException, match="trace file name is not given"):
        g.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]})
    assert c.is_server_live()


# -- flags -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--trace-config=level=FOO"], "invalid value for trace level option: foo"),
        (["--trace-config=level=TENSORS"], "TENSORS is not supported"),
        (["--trace-config=rate=abc"], "rate: invalid value 'abc'"),
        (["--trace-config=rate=-1"], "rate: invalid value '-1'"),
        (["--trace-config=count=-2"], "count: invalid value '-2'"),
        (["--trace-config=triton,log-frequency=x"], "log-frequency: invalid value 'x'"),
        (["--trace-config=mode=opentelemetry"], "mode=opentelemetry is not supported"),
        (["--trace-config=mode=foo"], "invalid value for trace mode option: foo"),
        (["--trace-config=xyz,file=a"], "invalid value for trace mode option: xyz"),
        (["--trace-config=level"], "expects [<mode>,]<setting>=<value>"),
        (["--trace-config=foo=1"], "unknown setting 'foo'"),
        (["--trace-config=triton,rate=1"], "unknown triton setting 'rate'"),
        (["--trace-rate=x"], "rate: invalid value 'x'"),
    ],
)
def test_bad_flags(flags: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        options_from_args(["--model-repository", str(tmp_path), *flags])
    assert message in str(e.value)


def test_flag_forms(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    o = options_from_args(
        [
            "--model-repository",
            str(tmp_path),
            "--trace-config",
            f"triton,file={tmp_path}/t.json",
            "--trace-config",
            "level=TIMESTAMPS",
            "--trace-config",
            "rate=7",
            "--trace-config",
            "count=3",
            "--trace-config",
            "triton,log-frequency=5",
            "--trace-config",
            "mode=triton",
            "--trace-config",
            "opentelemetry,url=x",
        ]
    )
    assert (o.trace_level, o.trace_rate, o.trace_count, o.trace_log_frequency, o.trace_file) == (
        ("TIMESTAMPS",),
        7,
        3,
        5,
        f"{tmp_path}/t.json",
    )
    o = options_from_args(
        [
            "--model-repository",
            str(tmp_path),
            "--trace-level=TIMESTAMPS",
            "--trace-config=level=OFF",
            "--trace-log-frequency=2",
        ]
    )
    err = capsys.readouterr().err
    assert "Warning: Overriding deprecated '--trace-level' in favor of provided level" in err
    assert "'--trace-log-frequency' has been deprecated" in err
    assert o.trace_level == ("OFF",) and o.trace_log_frequency == 2


def test_trace_settings_inheritance(tmp_path: Path) -> None:
    """Triton's TraceManager rules, in process: model values inherit, clears fall back."""
    ts = TraceSettings(("TIMESTAMPS",), 1, -1, 0, str(tmp_path / "t.json"))
    assert ts.enabled
    ts.update({"trace_count": "2"})
    ts.update({"trace_rate": "3"}, model="m")
    assert ts.get("m")["trace_count"] == "2"  # inherited (the remaining count)
    assert ts.sample("m", 1, "") is None and ts.sample("m", 1, "") is None
    assert ts.sample("m", 1, "x") is not None
    assert ts.get("m")["trace_count"] == "1" and ts.get()["trace_count"] == "2"
    ts.update({"trace_rate": None}, model="m")  # nothing of its own left: the global setting
    assert ts.get("m") == ts.get()
    ts.update({"trace_count": None})  # back to the command line's value
    assert ts.get()["trace_count"] == "-1"
    with pytest.raises(TritonliteError, match="sample rate must be non-zero"):
        ts.update({"trace_rate": "0"})
    ts.update({"trace_level": ["OFF"]})
    assert not ts.enabled
    ts.update({"trace_rate": "0"})  # an invalid setting is allowed while tracing is off
    ts.close()


# -- logging ---------------------------------------------------------------------------------------
def test_log_format_changes_at_run_time(repo: Path, server_factory: Any) -> None:
    s = server_factory(
        repo,
        "--model-control-mode=explicit",
        "--load-model=add_sub",
        "--load-model=add_sub_nobatch",
    )
    c = httpclient.InferenceServerClient(s.http_url)
    c.update_log_settings({"log_format": "ISO8601"})
    c.unload_model("add_sub_nobatch")
    c.update_log_settings({"log_format": "default", "log_verbose_level": 1})
    c.load_model("add_sub_nobatch")
    assert c.get_log_settings()["log_verbose_level"] == 1
    lines = s.wait_for_lines(
        lambda ls: sum("successfully loaded 'add_sub_nobatch'" in x for x in ls) >= 2
    ).splitlines()
    unloaded = [x for x in lines if "successfully unloaded 'add_sub_nobatch'" in x]
    loaded = [x for x in lines if "successfully loaded 'add_sub_nobatch'" in x]
    assert unloaded and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ ", unloaded[0])
    assert len(loaded) == 2 and re.match(r"I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ ", loaded[-1])


def test_log_file(repo: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(repo),
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--metrics-port",
            "0",
            "--http-address",
            "127.0.0.1",
            "--grpc-address",
            "127.0.0.1",
            f"--log-file={log_file}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while "Started HTTPService" not in (log_file.read_text() if log_file.exists() else ""):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no 'Started HTTPService' line in the log file"
            time.sleep(0.05)
        port = re.search(r"Started HTTPService at \S+:(\d+)", log_file.read_text())
        assert port is not None
        c = httpclient.InferenceServerClient(f"127.0.0.1:{port.group(1)}")
        assert c.get_log_settings()["log_file"] == str(log_file)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Started HTTPService" not in err
