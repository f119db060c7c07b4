"""System shared memory against hostile clients, through a real server and tritonclient.

A key that is a symlink is refused; a region truncated after registration fails the request
that uses it, and the server keeps serving (it used to die of SIGBUS); a region that an
in-flight request uses (its inputs as well as its outputs) cannot be unregistered until the
request is done, refused in Triton's words.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from conftest import Server, start_server, wait_until
from repos import PY_FP32_CONFIG, write_python_model
from tritonclient.utils import InferenceServerException

pytestmark = pytest.mark.timeout(90)
PAGE = os.sysconf("SC_PAGE_SIZE")

# OUT = IN; a request whose first element is 7 signals "started" and waits for "go".
BLOCKING_MODEL = """
import os, time
import triton_python_backend_utils as pb_utils

STARTED, GO = {started!r}, {go!r}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            if x.flat[0] == 7:
                open(STARTED, "w").close()
                deadline = time.monotonic() + 30
                while not os.path.exists(GO) and time.monotonic() < deadline:
                    time.sleep(0.01)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
"""


@pytest.fixture(scope="module")
def flags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flags")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, flags: Path) -> Iterator[Server]:
    repo = tmp_path_factory.mktemp("shm_repo")
    code = BLOCKING_MODEL.format(started=str(flags / "started"), go=str(flags / "go"))
    # it blocks: never on the event loop
    config = PY_FP32_CONFIG + (
        'parameters { key: "TRITONLITE_INLINE_EXECUTE" value { string_value: "false" } }\n'
    )
    write_python_model(repo, "echo", code, config)
    s = start_server(repo, "--allow-metrics=false", "--allow-client-shm=true")
    yield s
    s.stop()


@pytest.fixture()
def regions() -> Iterator[dict[str, Any]]:
    pid = os.getpid()
    # two pages, each region in the second: a page wholly past the end of a truncated file is
    # what faults (SIGBUS) when it is mapped
    made = {
        "in": shm.create_shared_memory_region(f"in{pid}", f"/tl_h_in_{pid}", 2 * PAGE),
        "out": shm.create_shared_memory_region(f"out{pid}", f"/tl_h_out_{pid}", 2 * PAGE),
    }
    yield made
    for h in made.values():
        shm.destroy_shared_memory_region(h)


def _shm_request(mod: Any, pid: int) -> tuple[list[Any], list[Any]]:
    i = mod.InferInput("IN", [1, 4], "FP32")
    i.set_shared_memory(f"tl_in_{pid}", 16)
    o = mod.InferRequestedOutput("OUT")
    o.set_shared_memory(f"tl_out_{pid}", 16)
    return [i], [o]


def _register(c: Any, pid: int) -> None:
    c.register_system_shared_memory(f"tl_in_{pid}", f"/tl_h_in_{pid}", 16, offset=PAGE)
    c.register_system_shared_memory(f"tl_out_{pid}", f"/tl_h_out_{pid}", 16, offset=PAGE)


def _still_serves(server: Server) -> None:
    c = httpclient.InferenceServerClient(server.http_url)
    assert c.is_server_live()
    i = httpclient.InferInput("IN", [1, 4], "FP32")
    i.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
    np.testing.assert_array_equal(c.infer("echo", [i]).as_numpy("OUT").reshape(-1), np.arange(4))


def test_symlinked_key_is_refused(server: Server, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 64)
    link = Path(f"/dev/shm/tl_h_link_{os.getpid()}")
    link.symlink_to(victim)
    try:
        for c in (
            httpclient.InferenceServerClient(server.http_url),
            grpcclient.InferenceServerClient(server.grpc_url),
        ):
            with pytest.raises(InferenceServerException, match="Unable to open shared memory"):
                c.register_system_shared_memory("link", "/" + link.name, 64)
        assert (
            httpclient.InferenceServerClient(server.http_url).get_system_shared_memory_status()
            == []
        )
    finally:
        link.unlink()
    assert victim.read_bytes() == b"v" * 64


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("which", ["in", "out"])
def test_truncated_region_fails_the_request_not_the_server(
    server: Server, regions: dict[str, Any], protocol: str, which: str
) -> None:
    mod: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    c = mod.InferenceServerClient(url)
    pid = os.getpid()
    shm.set_shared_memory_region(regions["in"], [np.full(4, 2.0, np.float32)], offset=PAGE)
    _register(c, pid)
    try:
        ins, outs = _shm_request(mod, pid)
        c.infer("echo", ins, outputs=outs)
        got = shm.get_contents_as_numpy(regions["out"], np.float32, [1, 4], offset=PAGE)
        np.testing.assert_array_equal(got, np.full((1, 4), 2.0))
        os.truncate(f"/dev/shm/tl_h_{which}_{pid}", 4)  # the region's page is gone
        with pytest.raises(InferenceServerException, match="truncated") as exc:
            c.infer("echo", ins, outputs=outs)
        assert exc.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        _still_serves(server)
    finally:
        c.unregister_system_shared_memory()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unregister_of_a_region_in_use_is_refused(
    server: Server, regions: dict[str, Any], flags: Path, protocol: str
) -> None:
    """As Triton 2.51 answers while a request runs: every region it uses (its input's too)
    is refused, INTERNAL / 500, by name or in unregister-all's list (name order)."""
    mod: Any = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    c = mod.InferenceServerClient(url)
    pid = os.getpid()
    shm.set_shared_memory_region(regions["in"], [np.full(4, 7.0, np.float32)], offset=PAGE)
    _register(c, pid)
    result: list[Any] = []
    (flags / "started").unlink(missing_ok=True)
    (flags / "go").unlink(missing_ok=True)

    def infer() -> None:
        ins, outs = _shm_request(mod, pid)
        try:
            result.append(mod.InferenceServerClient(url).infer("echo", ins, outputs=outs))
        except InferenceServerException as exc:
            result.append(exc)

    t = threading.Thread(target=infer)
    t.start()
    internal = "500" if protocol == "http" else "StatusCode.INTERNAL"
    http = httpclient.InferenceServerClient(server.http_url)
    try:
        wait_until(lambda: (flags / "started").exists(), 30)
        for name in (f"tl_in_{pid}", f"tl_out_{pid}"):
            with pytest.raises(InferenceServerException) as exc:
                c.unregister_system_shared_memory(name)
            assert exc.value.message() == (
                f"Cannot unregister shared memory region '{name}', it is currently in use."
            )
            assert exc.value.status() == internal
        with pytest.raises(InferenceServerException) as exc:
            c.unregister_system_shared_memory()
        assert exc.value.message() == (
            "Failed to unregister the following system shared memory regions: "
            f"tl_in_{pid} ,tl_out_{pid} ,"
        )
        assert exc.value.status() == internal
        status = http.get_system_shared_memory_status()
        assert [r["name"] for r in status] == [f"tl_in_{pid}", f"tl_out_{pid}"]
    finally:
        (flags / "go").touch()
        t.join(30)
    assert not isinstance(result[0], Exception), result
    got = shm.get_contents_as_numpy(regions["out"], np.float32, [1, 4], offset=PAGE)
    np.testing.assert_array_equal(got, np.full((1, 4), 7.0))
    c.unregister_system_shared_memory()  # done: now they go
    assert http.get_system_shared_memory_status() == []


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_offset_out_of_bound_words(server: Server, regions: dict[str, Any], protocol: str) -> None:
    """Triton's QA ``test_infer_offset_out_of_bound``: an offset at or past the region's end
    (over HTTP also a uint64 that is -32 as an int64) is "Invalid offset", a slice running
    past it "Invalid offset + byte size"."""
    mod: Any = httpclient if protocol == "http" else grpcclient
    c = mod.InferenceServerClient(server.http_url if protocol == "http" else server.grpc_url)
    pid = os.getpid()
    shm.set_shared_memory_region(regions["in"], [np.full(4, 2.0, np.float32)], offset=PAGE)
    _register(c, pid)
    offsets = [(16, "offset"), (12, "offset + byte size")]
    if protocol == "http":
        offsets.append((2**64 - 32, "offset"))
    try:
        for offset, what in offsets:
            ins, outs = _shm_request(mod, pid)
            outs[0].set_shared_memory(f"tl_out_{pid}", 16, offset=offset)
            with pytest.raises(InferenceServerException) as exc:
                c.infer("echo", ins, outputs=outs)
            want = f"Invalid {what} for shared memory region: 'tl_out_{pid}'"
            assert exc.value.message() == want, offset
            assert exc.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        _still_serves(server)
    finally:
        c.unregister_system_shared_memory()
