"""The parts of ``EXECUTION_ENV_PATH`` support that need no server: the numpy 2 hint, resolving
and unpacking environments, the worker protocol's tensor layout, and the worker's pb_utils
loaded by path beside its core."""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonlite.backends.python import env as python_env
from tritonlite.backends.python.env_worker import (
    ChannelClosed,
    Packer,
    recv_message,
    send_message,
    unpack,
)
from tritonlite.backends.python.loader import describe
from tritonlite.contracts.errors import ErrorCode, TritonliteError

pytestmark = pytest.mark.timeout(60)


def _raised(code: str) -> BaseException:
    try:
        exec(code, {"np": np})
    except BaseException as exc:  # noqa: BLE001 - the exception is the test's subject
        return exc
    raise AssertionError("no exception")


@pytest.mark.parametrize(
    "name",
    [
        "NINF",
        "float_",
        "PINF",
        "NaN",
        "Inf",
        "product",
        "cumproduct",
        "alltrue",
        "sometrue",
        "in1d",
        "string_",
    ],
)
def test_numpy2_hint_names_the_api(name: str) -> None:
    exc = _raised(f"np.{name}")
    text = describe(exc)
    assert f"The model uses `np.{name}`, NumPy API that NumPy 2 removed" in text, text
    assert f"this server runs NumPy {np.__version__}" in text
    assert "EXECUTION_ENV_PATH" in text


def test_numpy2_hint_follows_chained_exceptions() -> None:
    exc = _raised(
        "try:\n    np.NINF\nexcept AttributeError as e:\n"
        "    raise RuntimeError('initialize failed') from e\n"
    )
    assert isinstance(exc, RuntimeError)
    assert "`np.NINF`" in python_env.numpy2_hint(exc)


@pytest.mark.parametrize(
    "code",
    [
        "np.no_such_thing",
        "object().NINF",
        "1 / 0",
        "raise AttributeError(\"module 'numpy' has no attribute 'x'\")",
    ],
)
def test_no_hint_for_other_errors(code: str) -> None:
    assert python_env.numpy2_hint(_raised(code)) == ""


def _fake_env(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    return python


def test_resolve_a_directory_relative_or_expanded(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    python = _fake_env(model_dir / "env")
    for value in ("env", "$$TRITON_MODEL_DIRECTORY/env", f" {model_dir / 'env'} "):
        env = python_env.resolve(value, model_dir, "m")
        assert env.root == model_dir / "env" and env.python == python


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "EXECUTION_ENV_PATH of model 'm' is empty"),
        ("nope.tar.gz", "Failed to get the canonical path for {d}/nope.tar.gz."),
        (
            "plain.txt",
            "EXECUTION_ENV_PATH of model 'm': '{d}/plain.txt' is neither a directory nor "
            "a tar archive (e.g. a conda-pack .tar.gz)",
        ),
        (
            "empty",
            "EXECUTION_ENV_PATH of model 'm': the environment '{d}/empty' has no bin/python3",
        ),
    ],
)
def test_resolve_failures(tmp_path: Path, value: str, expected: str) -> None:
    (tmp_path / "plain.txt").write_text("not a tarball")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TritonliteError) as e:
        python_env.resolve(value, tmp_path, "m")
    assert e.value.code == ErrorCode.INTERNAL
    assert e.value.message == expected.format(d=tmp_path)


def _tarball(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)


@pytest.fixture(params=["filter", "no-filter"])
def tar_filters(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """With tarfile's extraction filters, and without them (Python < 3.10.12)."""
    if request.param == "no-filter":
        monkeypatch.delattr(tarfile, "tar_filter")


@pytest.mark.usefixtures("tar_filters")
def test_tarball_unpacked_once_by_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(python_env.CACHE_VARIABLE, str(cache))
    members = {"bin/python3": b"#!/bin/sh\n", "lib/x.py": b"x = 1\n"}
    _tarball(tmp_path / "a.tar.gz", members, {"bin/python": "/usr/bin/python3"})
    first = python_env.resolve("a.tar.gz", tmp_path, "m")
    assert first.root.parent == cache and first.python == first.root / "bin" / "python3"
    assert os.readlink(first.root / "bin" / "python") == "/usr/bin/python3"  # kept as is
    marker = first.root / ".tritonlite-unpacked"
    stamp = marker.stat().st_mtime_ns
    (tmp_path / "b.tar.gz").write_bytes((tmp_path / "a.tar.gz").read_bytes())
    again = python_env.resolve("b.tar.gz", tmp_path, "m")  # same bytes: same directory
    assert again.root == first.root and marker.stat().st_mtime_ns == stamp
    assert again.source == tmp_path / "b.tar.gz"


@pytest.mark.usefixtures("tar_filters")
def test_tarball_escaping_its_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(python_env.CACHE_VARIABLE, str(tmp_path / "cache"))
    _tarball(tmp_path / "evil.tar.gz", {"../escaped": b"x", "bin/python3": b""})
    with pytest.raises(TritonliteError, match="cannot unpack"):
        python_env.resolve("evil.tar.gz", tmp_path, "m")
    assert not (tmp_path / "escaped").exists()
    assert not (tmp_path / "cache" / "escaped").exists()
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.is_dir()] == []


ARRAYS: list[Any] = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.array([True, False, True]),
    np.array([1.5, -2.25], dtype=np.float16),
    np.arange(6, dtype=">i4").reshape(2, 3),  # big-endian: arrives native
    np.zeros((0, 5), dtype=np.int64),
    np.array(7, dtype=np.uint8),
    np.arange(10, dtype=np.float64)[::2],  # not contiguous
    np.array([[b"a", b""], [b"\x00\xff", "ü".encode()]], dtype=np.object_),
    np.array(["text", "ünï"]),  # str_ arrays travel as BYTES (UTF-8)
]


def test_tensors_cross_the_socket_intact() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        packer = Packer()
        descs = [packer.add(f"t{i}", a) for i, a in enumerate(ARRAYS)]
        assert all(d["offset"] % 64 == 0 for d in descs)
        big = np.arange(1 << 19, dtype=np.float64)  # 4 MB: needs the streaming path
        descs.append(packer.add("big", big))
        import threading

        sender = threading.Thread(
            target=send_message, args=(ours, {"tensors": descs}, packer.blobs)
        )
        sender.start()
        meta, buf = recv_message(theirs)
        sender.join()
        got = [unpack(d, buf) for d in meta["tensors"]]
        for want, have in zip([*ARRAYS, big], got):
            if want.dtype.kind in "OSU":
                encoded = [
                    x if isinstance(x, bytes) else str(x).encode()
                    for x in want.reshape(-1).tolist()
                ]
                assert have.reshape(-1).tolist() == encoded and have.shape == want.shape
            else:
                assert have.dtype == want.dtype.newbyteorder("=") and have.dtype.isnative
                np.testing.assert_array_equal(have, want)
                assert have.flags.writeable
        ours.close()
        with pytest.raises(ChannelClosed):
            recv_message(theirs)


def test_a_description_outside_its_message_is_refused() -> None:
    with pytest.raises(ValueError, match="lies outside its message"):
        unpack(
            {"name": "x", "dtype": "<f4", "shape": [4], "offset": 8, "nbytes": 16}, bytearray(16)
        )
    with pytest.raises(ValueError, match="16 bytes for shape"):
        unpack(
            {"name": "x", "dtype": "<f4", "shape": [3], "offset": 0, "nbytes": 16}, bytearray(16)
        )
    with pytest.raises(TypeError, match="cannot cross"):
        Packer().add("v", np.zeros(2, dtype="V4"))


# What the worker's pb_utils must do in an environment without tritonlite: load pb_core by path,
# then answer as the in-process module does (one core, so the same classes and messages).
_WORKER_PB_UTILS_PROBE = r"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("triton_python_backend_utils", sys.argv[1])
pb = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = pb
spec.loader.exec_module(pb)
import numpy as np

def error(fn):
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__ + ": " + str(exc)
    return None

counter = pb.MetricFamily("c", "d", pb.MetricFamily.COUNTER).Metric()
histogram = pb.MetricFamily("h", "d", pb.MetricFamily.HISTOGRAM)
sender = pb.InferenceRequest(model_name="m").get_response_sender()
pb.Logger.log_warn("careful")
print(json.dumps({
    "tritonlite": sorted(m for m in sys.modules if m.split(".")[0] == "tritonlite"),
    "core": type(pb.InferenceResponse()).__module__,
    "set_counter": error(lambda: counter.set(1.0)),
    "no_buckets": error(lambda: histogram.Metric()),
    "empty_name": error(lambda: pb.Tensor("", np.zeros(1))),
    "str_dtype": pb.Tensor("s", np.array(["x"])).triton_dtype(),
    "final_first": error(lambda: sender.send(flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)),
    "rescheduled": error(lambda: pb.InferenceRequest().set_release_flags(
        pb.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)),
}))
"""


def test_the_worker_pb_utils_loads_its_core_by_path_and_answers_as_in_process(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    from tritonlite.backends.python import pb_utils

    module = Path(python_env.__file__).with_name("env_pb_utils.py")
    probe = tmp_path / "probe.py"
    probe.write_text(_WORKER_PB_UTILS_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [sys.executable, "-I", str(probe), str(module)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["tritonlite"] == []
    assert got["core"] == "triton_python_backend_utils_core"
    assert run.stderr == "WARNING: careful\n"

    def error(fn: Any) -> str | None:
        try:
            fn()
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    histogram = pb_utils.MetricFamily("h", "d", pb_utils.MetricFamily.HISTOGRAM)
    counter = pb_utils.MetricFamily("c", "d", pb_utils.MetricFamily.COUNTER).Metric()
    sender = pb_utils.InferenceResponseSender()
    assert got["set_counter"] == error(lambda: counter.set(1.0))
    assert got["no_buckets"] == error(lambda: histogram.Metric())
    assert got["empty_name"] == error(lambda: pb_utils.Tensor("", np.zeros(1)))
    assert got["final_first"] == error(
        lambda: sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    )
    assert got["set_counter"] is not None and got["final_first"] is not None
    assert got["str_dtype"] == 13  # the worker takes np.str_ arrays as BYTES
    assert got["rescheduled"] == (
        "TritonModelException: Request rescheduling is not supported for a model that runs "
        "in its own EXECUTION_ENV_PATH environment"
    )
