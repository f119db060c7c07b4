"""A request whose run fails in a lane is run once more at most, on the general path.

The lanes (``DirectLane.run`` behind ``InferenceCore.infer_now``, ``DirectLane.run_plain``
behind the HTTP JSON lane) give a request whose model run raised back to their caller, which
then takes the general path, whose run words the error. Each test here counts the model's
runs at ONNX Runtime's session itself (both the lanes' bound run and the general path's
``InferenceSession.run`` go through it): a failing request is run twice (once in one lane,
once on the general path), never three times, and a good one once. A real ``InferenceCore``
serving a real ONNX model; runs on both twins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from conftest import JsonPost, counts_only, run_core
from onnx_models import config_for, failing, write_model

from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.frontends.http import app

pytestmark = pytest.mark.timeout(120)

_WARM_TRIES = 4000


class _Counted:
    """ONNX Runtime's bound session (``InferenceSession._sess``), its runs counted."""

    def __init__(self, sess: Any, runs: list[int]) -> None:
        self._sess_ = sess
        self._runs = runs

    def run(self, *args: Any) -> Any:
        self._runs[0] += 1
        return self._sess_.run(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess_, name)


def _req(value: int) -> InferRequest:
    data = np.array([[value]], np.int64)
    return InferRequest("fails", inputs=[InferInput("INPUT0", "INT64", (1, 1), data)])


def _body(value: int, **extra: Any) -> bytes:
    inp = {"name": "INPUT0", "datatype": "INT64", "shape": [1, 1], "data": [value]}
    return orjson.dumps({"inputs": [inp], **extra})


_PATH = "/v2/models/fails/infer"  # the HTTP infer handler's route for the model


async def _warm(core: InferenceCore) -> list[int]:
    """General requests until the lane takes one on every instance in turn; then every
    instance's session counts its runs (the returned counter)."""
    model = core.repository.get("fails")
    row, want = 0, 2 * len(model.instances)
    for _ in range(_WARM_TRIES):
        if core.infer_now(_req(1)) is not None:
            row += 1
            if row == want:
                break
            continue
        row = 0
        await core.infer(_req(1))
    else:
        raise AssertionError("the lane never took a request on every instance")
    runs = [0]
    for inst in model.instances:
        session = inst.impl._session
        counted = _Counted(session._sess, runs)
        session._sess = counted
        assert inst.bound_run is not None
        inst.bound_run = (counted.run, inst.bound_run[1])
    return runs


def _fails(core: InferenceCore) -> int:
    stats = counts_only(core.statistics("fails")["model_stats"][0])
    return stats["inference_stats"]["fail"]["count"]  # type: ignore[no-any-return]


def _repo(root: Path) -> Path:
    write_model(root, "fails", failing(), config_for(failing(), max_batch_size=8, name="fails"))
    return root


def test_a_json_request_whose_run_fails_runs_twice_not_three_times(tmp_path: Path) -> None:
    """The JSON lane runs it, then the general path: never ``infer_now``'s lane too. Its
    error is the general path's, byte for byte."""

    async def body(core: InferenceCore) -> None:
        runs = await _warm(core)
        dispatch = app.make_dispatch(core)
        good = await dispatch(JsonPost(_PATH, _body(1)))
        assert good.status == 200 and runs[0] == 1
        for k in range(1, 4):
            before = runs[0]
            resp = await dispatch(JsonPost(_PATH, _body(99)))
            assert runs[0] == before + 2, runs
            assert _fails(core) == 2 * k - 1
            # an id sends the same request to infer_now's lane first: once there, once general
            general = await dispatch(JsonPost(_PATH, _body(99, id="")))
            assert runs[0] == before + 4, runs
            assert _fails(core) == 2 * k
            assert resp.status == general.status != 200
            text = b"".join(resp.body)
            assert text == b"".join(general.body)
            assert b"out of data bounds" in text or b"indices" in text
        before = runs[0]
        good = await dispatch(JsonPost(_PATH, _body(1)))  # the instance came back to idle
        assert good.status == 200 and runs[0] == before + 1

    run_core(_repo(tmp_path), body)


def test_a_plain_request_whose_run_fails_is_marked_ran(tmp_path: Path) -> None:
    """``infer_plain`` answers False for a run that failed (nothing recorded), None for
    one it did not run."""

    async def body(core: InferenceCore) -> None:
        runs = await _warm(core)
        key = (("INPUT0", "INT64", (1, 1)),)
        bad = {"INPUT0": np.array([[99]], np.int64)}
        assert core.infer_plain("fails", -1, key, bad) is False
        assert runs[0] == 1 and _fails(core) == 0
        assert core.infer_plain("fails", -1, (("INPUT0", "INT64", (1, 2)),), bad) is None
        assert runs[0] == 1
        assert core.infer_now(_req(99)) is None
        assert runs[0] == 2 and _fails(core) == 0
        with pytest.raises(TritonliteError, match="out of data bounds|indices"):
            await core.infer(_req(99))
        assert runs[0] == 3 and _fails(core) == 1
        assert core.infer_plain("fails", -1, key, {"INPUT0": np.array([[1]], np.int64)})
        assert runs[0] == 4

    run_core(_repo(tmp_path), body)


def test_every_request_is_counted_once_in_arrivals_whichever_path_it_takes(
    tmp_path: Path,
) -> None:
    """``InferenceCore.arrivals`` (what busy polling's trials compare, wire/busypoll.py)
    counts each request once: through the lane, the general path or the JSON lane."""

    async def body(core: InferenceCore) -> None:
        await _warm(core)
        dispatch = app.make_dispatch(core)
        n = core.arrivals()
        assert core.infer_now(_req(1)) is not None
        assert core.arrivals() == n + 1
        await core.infer(_req(1))
        assert core.arrivals() == n + 2
        assert (await dispatch(JsonPost(_PATH, _body(1)))).status == 200
        assert core.arrivals() == n + 3

    run_core(_repo(tmp_path), body)
