"""``--loop-slice-us``: the event loop thread asks Linux for a longer CPU slice
(frontends/base/loopslice.py). Only that thread gets it, the threads a model starts keep the
kernel's default, the server serves the same with it off (the default), a policy chosen by
whoever started the server is kept, and bad values are refused at start.

Reading another thread's slice needs a kernel that keeps one per task (Linux 6.12 on); elsewhere
the thread checks skip, after checking here that the kernel ignores the request."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from conftest import start_server
from repos import add_sub_inputs, refused_at_start, write_add_sub

from tritonlite.frontends.base import loopslice

pytestmark = pytest.mark.timeout(180)


def _kernel_keeps_slices() -> bool:
    """Whether a slice asked for on a fresh thread reads back (and nothing else changed)."""
    seen: list[object] = []

    def ask() -> None:
        try:
            before = loopslice.current_slice_us()
            loopslice.request_slice(before + 1000 if before + 1000 <= loopslice.MAX_US else 500)
            seen.append(loopslice.current_slice_us() != before)
        except OSError as exc:
            seen.append(exc)

    t = threading.Thread(target=ask)
    t.start()
    t.join()
    return seen == [True]


def _slices(pid: int) -> dict[int, int]:
    tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir() if t.name.isdigit()]
    out = {}
    for tid in tids:
        try:
            out[tid] = loopslice.current_slice_us(tid)
        except OSError:  # the thread ended meanwhile
            pass
    return out


def _serve_a_few(url: str) -> None:
    with httpclient.InferenceServerClient(url) as c:
        for i in range(8):
            a = np.full((1, 16), i, dtype=np.float32)
            b = np.ones((1, 16), dtype=np.float32)
            r = c.infer("add_sub", add_sub_inputs(httpclient, a, b))
            np.testing.assert_allclose(r.as_numpy("OUTPUT0"), a + b)


def test_only_the_loop_thread_gets_the_slice(tmp_path: Path) -> None:
    if not _kernel_keeps_slices():
        pytest.skip("this kernel keeps no per-task slice (Linux < 6.12, or refused)")
    write_add_sub(tmp_path, "add_sub", 8)
    default = loopslice.current_slice_us()  # this thread asked for nothing
    s = start_server(tmp_path, "--loop-slice-us", "7000", transport=False)
    try:
        _serve_a_few(s.http_url)  # the model's threads exist by now
        slices = _slices(s.proc.pid)
        assert slices[s.proc.pid] == 7000, slices  # the main thread runs the loop
        others = {tid: us for tid, us in slices.items() if tid != s.proc.pid}
        assert others and set(others.values()) == {default}, (default, slices)
    finally:
        s.stop()


@pytest.mark.parametrize("args", [("--loop-slice-us", "0"), ()], ids=["zero", "default"])
def test_zero_and_the_default_leave_the_kernels_slice_and_serve(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    write_add_sub(tmp_path, "add_sub", 8)
    s = start_server(tmp_path, *args, transport=False)
    try:
        _serve_a_few(s.http_url)
        if _kernel_keeps_slices():
            assert set(_slices(s.proc.pid).values()) == {loopslice.current_slice_us()}
    finally:
        s.stop()


def test_out_of_range_requests_raise_in_process() -> None:
    for us in (0, 99, 100_001):
        with pytest.raises(ValueError):
            loopslice.request_slice(us)


@pytest.mark.parametrize("value", ["-1", "50", "100001", "soon"])
def test_bad_values_are_refused_at_start(tmp_path: Path, value: str) -> None:
    assert "--loop-slice-us" in refused_at_start(tmp_path, "--loop-slice-us", value)


def test_a_policy_chosen_by_the_starter_is_kept(tmp_path: Path) -> None:
    """Started under SCHED_BATCH (``chrt -b``), the loop keeps that policy and its slice."""
    write_add_sub(tmp_path, "add_sub", 8)
    s = start_server(
        tmp_path,
        "--loop-slice-us",
        "7000",
        transport=False,
        preexec_fn=lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0)),
    )
    try:
        _serve_a_few(s.http_url)
        assert os.sched_getscheduler(s.proc.pid) == os.SCHED_BATCH
        if _kernel_keeps_slices():
            assert loopslice.current_slice_us(s.proc.pid) != 7000
        assert "keeps the kernel's CPU slice" in s.output()
    finally:
        s.stop()
