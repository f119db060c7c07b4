"""Models that fail to load, as tritonclient sees them over HTTP and gRPC: Triton 2.51's texts
(``load failed for model 'M': version N is at UNAVAILABLE state: Internal: <msg>;\\n``), codes
(HTTP 400, gRPC INVALID_ARGUMENT) and repository index rows (``reason`` = ``Internal: <msg>``),
as recorded from tritonserver 2.51 by tests/compare/compare_python.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Server, start_server
from repos import PY_FP32_CONFIG, client_for, write_python_model
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(120)

PROTOCOLS = ["http", "grpc"]
CODE = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}

OK_MODEL = """
class TritonPythonModel:
    def execute(self, requests):
        return []
"""
# The failing models recorded against tritonserver by tests/compare/compare_python.py, read from
# the files it serves, so the texts below (line numbers included) stay those of what it recorded.
COMPARE_MODELS = Path(__file__).resolve().parent.parent / "compare" / "python_models"
BAD_INIT = (COMPARE_MODELS / "pyc_bad_init" / "1" / "model.py").read_text()
BAD_AUTOCOMPLETE = (COMPARE_MODELS / "pyc_bad_autocomplete" / "1" / "model.py").read_text()
BAD_CONFLICT = (COMPARE_MODELS / "pyc_bad_conflict" / "1" / "model.py").read_text()


def _envelope(name: str) -> str:
    return f"load failed for model '{name}': version 1 is at UNAVAILABLE state: "


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("load_failures")
    write_python_model(r, "ok", OK_MODEL, PY_FP32_CONFIG)
    write_python_model(r, "reloaded", OK_MODEL, PY_FP32_CONFIG)
    for proto in PROTOCOLS:
        write_python_model(r, f"bad_init_{proto}", BAD_INIT, PY_FP32_CONFIG)
        write_python_model(r, f"bad_autocomplete_{proto}", BAD_AUTOCOMPLETE, 'backend: "python"\n')
        write_python_model(r, f"bad_conflict_{proto}", BAD_CONFLICT, PY_FP32_CONFIG)
        no_file = r / f"no_model_file_{proto}"
        (no_file / "1").mkdir(parents=True)
        (no_file / "config.pbtxt").write_text(PY_FP32_CONFIG)
        onnx = r / f"corrupt_onnx_{proto}"
        (onnx / "1").mkdir(parents=True)
        (onnx / "1" / "model.onnx").write_bytes(b"this is not an ONNX graph")
        (onnx / "config.pbtxt").write_text('platform: "onnxruntime_onnx"\nmax_batch_size: 0\n')
        no_version = r / f"no_version_{proto}"
        no_version.mkdir()
        (no_version / "config.pbtxt").write_text(PY_FP32_CONFIG)
        write_python_model(r, f"bad_syntax_{proto}", OK_MODEL, "this is { not valid")
        write_python_model(r, f"bad_field_{proto}", OK_MODEL, PY_FP32_CONFIG + "not_a_field: 1\n")
        write_python_model(
            r,
            f"bad_gpu_{proto}",
            OK_MODEL,
            PY_FP32_CONFIG.replace("kind: KIND_CPU", "kind: KIND_GPU gpus: [ 99 ]"),
        )
        write_python_model(
            r, f"two_bad_{proto}", BAD_INIT, PY_FP32_CONFIG + "version_policy { all { } }\n"
        )
        (r / f"two_bad_{proto}" / "2").mkdir()
        (r / f"two_bad_{proto}" / "2" / "model.py").write_text(
            BAD_INIT.replace("refused", "also refused")
        )
    return r


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[Server]:
    s = start_server(
        repo,
        "--allow-metrics=false",
        "--model-control-mode=explicit",
        "--load-model=ok",
        "--load-model=reloaded",
    )
    yield s
    s.stop()


def _load_error(server: Server, protocol: str, name: str) -> InferenceServerException:
    client, _ = client_for(server, protocol)
    with pytest.raises(InferenceServerException) as e:
        client.load_model(name)
    assert e.value.status() == CODE[protocol], e.value
    return e.value


def _index_rows(server: Server, protocol: str, name: str) -> list[dict[str, Any]]:
    client, _ = client_for(server, protocol)
    index = (
        client.get_model_repository_index()
        if protocol == "http"
        else client.get_model_repository_index(as_json=True).get("models", [])
    )
    return [row for row in index if row["name"] == name]


def _assert_version_failure(
    server: Server, protocol: str, name: str, internal: str, tail: str
) -> None:
    """The load answer is the envelope around the index reason, which reads ``internal`` up to
    its traceback and ends with ``tail``."""
    message = _load_error(server, protocol, name).message()
    assert message.startswith(_envelope(name) + internal), message
    assert message.endswith(tail + ";\n"), message
    reason = message[len(_envelope(name)) : -len(";\n")]
    assert _index_rows(server, protocol, name) == [
        {"name": name, "version": "1", "state": "UNAVAILABLE", "reason": reason}
    ]
    client, _ = client_for(server, protocol)
    assert not client.is_model_ready(name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_initialize_raises(server: Server, repo: Path, protocol: str) -> None:
    name = f"bad_init_{protocol}"
    _assert_version_failure(
        server,
        protocol,
        name,
        "Internal: RuntimeError: initialize refused to start\n\nAt:\n",
        f"{repo / name / '1' / 'model.py'}(6): initialize\n",
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auto_complete_raises_fails_version_1(server: Server, repo: Path, protocol: str) -> None:
    name = f"bad_autocomplete_{protocol}"
    _assert_version_failure(
        server,
        protocol,
        name,
        f"Internal: ValueError: input 'IN' in auto-complete-config function for model '{name}' "
        "is missing 'data_type' property.\n\nAt:\n",
        f"{repo / name / '1' / 'model.py'}(7): auto_complete_config\n",
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_auto_complete_conflicting_config(server: Server, repo: Path, protocol: str) -> None:
    name = f"bad_conflict_{protocol}"
    _assert_version_failure(
        server,
        protocol,
        name,
        f"Internal: ValueError: model '{name}', tensor 'IN': the model expects dims [2] but the "
        "model configuration specifies dims [4]\n\nAt:\n",
        f"{repo / name / '1' / 'model.py'}(7): auto_complete_config\n",
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_model_file(server: Server, repo: Path, protocol: str) -> None:
    name = f"no_model_file_{protocol}"
    text = f"Internal: Python model file not found in '{repo / name / '1' / 'model.py'}'"
    _assert_version_failure(server, protocol, name, text, text)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_corrupt_onnx_model(server: Server, repo: Path, protocol: str) -> None:
    name = f"corrupt_onnx_{protocol}"
    _assert_version_failure(
        server,
        protocol,
        name,
        f"Internal: unable to read ONNX model '{repo / name / '1' / 'model.onnx'}': ",
        "Protobuf parsing failed.",
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_invalid_config_fails_version_1(server: Server, protocol: str) -> None:
    """The server's own config checks fail each version's load with INVALID_ARG."""
    name = f"bad_gpu_{protocol}"
    _assert_version_failure(
        server,
        protocol,
        name,
        f"Invalid argument: instance group {name}_0 of model {name} specifies invalid or "
        "unsupported gpu id 99.",
        "",
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_failed_version_is_named(server: Server, protocol: str) -> None:
    name = f"two_bad_{protocol}"
    message = _load_error(server, protocol, name).message()
    clauses = message.split(";\n")
    assert len(clauses) == 3 and clauses[2] == "", message
    assert clauses[0].startswith(_envelope(name) + "Internal: RuntimeError: initialize refused")
    assert clauses[1].startswith(
        "version 2 is at UNAVAILABLE state: Internal: RuntimeError: initialize also refused"
    )
    rows = _index_rows(server, protocol, name)
    assert [(r["version"], r["state"]) for r in rows] == [
        ("1", "UNAVAILABLE"),
        ("2", "UNAVAILABLE"),
    ]
    assert [r["reason"].split("\n")[0] for r in rows] == [
        "Internal: RuntimeError: initialize refused to start",
        "Internal: RuntimeError: initialize also refused to start",
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ["bad_syntax", "bad_field"])
def test_unparsable_config_fails_the_poll(server: Server, protocol: str, kind: str) -> None:
    """Triton answers INTERNAL (HTTP 500) and lists the model by name only; the cause is in
    the server log."""
    name = f"{kind}_{protocol}"
    client, _ = client_for(server, protocol)
    with pytest.raises(InferenceServerException) as e:
        client.load_model(name)
    assert e.value.status() == {"http": "500", "grpc": "StatusCode.INTERNAL"}[protocol]
    assert e.value.message() == f"failed to load '{name}', failed to poll from model repository"
    assert _index_rows(server, protocol, name) == [{"name": name}]
    assert not client.is_model_ready(name)
    with pytest.raises(InferenceServerException) as e:
        client.load_model("ok", config="{not json")
    # a config override is the client's own mistake: 400 with the cause, not Triton's 500
    assert e.value.status() == {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}[protocol]
    assert e.value.message().startswith(
        "failed to load 'ok', failed to poll from model repository: failed to parse model "
        "configuration JSON"
    )
    assert client.is_model_ready("ok")  # a failed reload keeps the old version serving
    assert _index_rows(server, protocol, "ok") == [{"name": "ok", "version": "1", "state": "READY"}]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_version_under_the_policy(server: Server, protocol: str) -> None:
    name = f"no_version_{protocol}"
    assert _load_error(server, protocol, name).message() == (
        f"load failed for model '{name}': at least one version must be available under the "
        f"version policy of model '{name}'\n"
    )


def test_failed_reload_keeps_the_serving_version(server: Server, repo: Path) -> None:
    model_py = repo / "reloaded" / "1" / "model.py"
    for protocol in PROTOCOLS:
        model_py.write_text(BAD_INIT)
        message = _load_error(server, protocol, "reloaded").message()
        assert message.startswith(
            _envelope("reloaded") + "Internal: RuntimeError: initialize refused to start\n\nAt:\n"
        ), message
        assert message.endswith(";\n"), message
        client, _ = client_for(server, protocol)
        assert client.is_model_ready("reloaded")
        assert _index_rows(server, protocol, "reloaded") == [
            {"name": "reloaded", "version": "1", "state": "READY"}
        ]
        model_py.write_text(OK_MODEL)
        client.load_model("reloaded")
        assert client.is_model_ready("reloaded")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_good_model_still_loads(server: Server, protocol: str) -> None:
    client, _ = client_for(server, protocol)
    client.load_model("ok")
    assert client.is_model_ready("ok")
    assert _index_rows(server, protocol, "ok") == [{"name": "ok", "version": "1", "state": "READY"}]
