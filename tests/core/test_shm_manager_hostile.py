"""System shared memory against hostile clients, on the manager and the core directly.

Keys that are symlinks or not regular files are refused; a region whose file is truncated after
registration fails the request that uses it (no SIGBUS: regions are read and written through
the fd, never mapped); a region a request holds cannot be unregistered (Triton's refusal); and
``--allow-client-shm=local`` keeps non-local peers from listing or dropping regions.
The end-to-end cases, through a real server, are tests/compat/test_shm_hostile.py.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.core.core import InferenceCore
from tritonlite.core.tensors.shm import SharedMemoryManager
from tritonlite.options import ServerOptions

pytestmark = pytest.mark.timeout(30)


@pytest.fixture()
def key(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh /dev/shm name, removed afterwards whatever it became."""
    name = f"tl_hostile_{os.getpid()}_{request.node.name[:40].replace('[', '_').strip(']')}"
    path = Path("/dev/shm", name)
    yield "/" + name
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    elif path.exists() or path.is_symlink():
        path.unlink()


def _make(key: str, size: int, fill: bytes = b"\x01") -> Path:
    path = Path("/dev/shm", key.lstrip("/"))
    path.write_bytes(fill * size)
    return path


def _err(fn: object, *args: object) -> TritonliteError:
    with pytest.raises(TritonliteError) as exc:
        fn(*args)  # type: ignore[operator]
    return exc.value


def test_symlinked_key_is_refused(key: str, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"v" * 64)
    Path("/dev/shm", key.lstrip("/")).symlink_to(victim)
    shm = SharedMemoryManager()
    e = _err(shm.register_system, "r", key, 0, 64)
    assert e.code == ErrorCode.INTERNAL  # (as Triton: HTTP 500)
    assert e.message == f"Unable to open shared memory region: '{key}'"
    assert shm.system_status() == []
    assert victim.read_bytes() == b"v" * 64


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_key_that_is_not_a_regular_file_is_refused(key: str, kind: str) -> None:
    path = Path("/dev/shm", key.lstrip("/"))
    if kind == "fifo":
        os.mkfifo(path)  # opening it must not block
    else:
        path.mkdir()
    e = _err(SharedMemoryManager().register_system, "r", key, 0, 8)
    assert e.code == ErrorCode.INTERNAL and "Unable to open" in e.message


@pytest.mark.parametrize("bad", ["/", "/..", "/a/b", "/a\x00b", ""])
def test_key_names_outside_dev_shm_are_refused(bad: str) -> None:
    e = _err(SharedMemoryManager().register_system, "r", bad, 0, 8)
    assert e.code == ErrorCode.INTERNAL


def test_truncated_after_registration_fails_the_use(key: str) -> None:
    path = _make(key, 64)
    shm = SharedMemoryManager()
    shm.register_system("r", key, 16, 32)
    assert bytes(shm.read("r", 0, 32)) == b"\x01" * 32
    shm.write("r", 0, b"\x02" * 8)
    assert path.read_bytes()[16:24] == b"\x02" * 8
    os.truncate(path, 20)  # the region was [16, 48)
    for fn, args in (
        (shm.read, ("r", 0, 32)),
        (shm.write, ("r", 0, b"\x03" * 8)),
        (shm.view, ("r", 0, 32)),
    ):
        e = _err(fn, *args)
        assert e.code == ErrorCode.INVALID_ARG, e
        assert "truncated" in e.message
    assert path.stat().st_size == 20  # nothing written past the end
    os.truncate(path, 64)  # grown back (zeros): usable again
    assert bytes(shm.read("r", 8, 8)) == b"\x00" * 8
    shm.unregister_system("r")


def test_reads_are_copies(key: str) -> None:
    path = _make(key, 16)
    shm = SharedMemoryManager()
    shm.register_system("r", key, 0, 16)
    data = shm.read("r", 0, 16)
    path.write_bytes(b"\x09" * 16)
    assert bytes(data) == b"\x01" * 16
    shm.unregister_system("r")


def test_a_held_region_cannot_be_unregistered(key: str) -> None:
    _make(key, 64)
    shm = SharedMemoryManager()
    shm.register_system("held", key, 0, 32)
    shm.register_system("free", key, 32, 32)
    request = object()
    shm.hold(request, ["held", "unknown"])
    e = _err(shm.unregister_system, "held")
    assert e.code == ErrorCode.INTERNAL
    assert e.message == "Cannot unregister shared memory region 'held', it is currently in use."
    e = _err(shm.unregister_system)  # all: the free one goes, the held one stays
    assert (e.code, e.message) == (
        ErrorCode.INTERNAL,
        "Failed to unregister the following system shared memory regions: held ,",
    )
    assert [r["name"] for r in shm.system_status()] == ["held"]
    shm.write("held", 0, b"\x05" * 4)  # the request can still write its output
    shm.release(request)
    shm.release(request)  # idempotent
    shm.unregister_system("held")
    assert shm.system_status() == [] and shm.holding == {}


def test_write_after_unregister_never_touches_the_old_fd(key: str) -> None:
    """A request cancelled while its batch runs no longer holds its region: the instance
    thread's late write must fail, not write through a closed (maybe reused) fd."""
    path = _make(key, 16)
    shm = SharedMemoryManager()
    shm.register_system("r", key, 0, 16)
    region = shm._system["r"]
    shm.unregister_system("r")
    assert region.closed
    errors: list[TritonliteError] = []

    def late_write() -> None:
        try:
            shm.write("r", 0, b"\x07" * 4)
        except TritonliteError as exc:
            errors.append(exc)

    t = threading.Thread(target=late_write)
    t.start()
    t.join(10)
    assert errors and "Unable to find shared memory region" in errors[0].message
    assert path.read_bytes() == b"\x01" * 16


@pytest.mark.parametrize(
    "policy,local,allowed",
    [
        ("local", True, True),
        ("local", False, False),
        ("true", False, True),
        ("false", False, True),
        ("false", True, True),
    ],
)
def test_status_and_unregister_follow_the_peer_policy(
    tmp_path: Path, key: str, policy: str, local: bool, allowed: bool
) -> None:
    _make(key, 16)
    core = InferenceCore(ServerOptions(model_repositories=(tmp_path,), allow_client_shm=policy))
    try:
        if policy != "false":
            core.register_system_shm("r", key, 0, 16, peer_is_local=True)
        calls = [
            (core.system_shm_status, ()),
            (core.cuda_shm_status, ()),
            (core.unregister_cuda_shm, ()),
            (core.unregister_system_shm, ()),
        ]
        for fn, args in calls:
            if allowed:
                fn(*args, peer_is_local=local)  # type: ignore[operator]
            else:
                with pytest.raises(TritonliteError) as exc:
                    fn(*args, peer_is_local=local)  # type: ignore[operator]
                assert exc.value.code == ErrorCode.UNSUPPORTED
                assert "--allow-client-shm=local" in exc.value.message
        assert bool(core.shm.system_status()) == (not allowed)
    finally:
        core.shm.close()
