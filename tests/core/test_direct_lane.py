"""The single-request lane (``core/runtime/lane.py``) against the general path, in one process.

A real ``InferenceCore`` serves real ONNX models (ONNX Runtime): each test sends the same
request through ``InferenceCore.infer_now`` (the lane) and ``InferenceCore.infer`` (the general
path) and compares answers, statistics and errors, and checks that every condition the lane
does not cover returns None with nothing done (no statistics, no run counted). Runs on both
twins (``TRITONLITE_NO_EXTENSIONS=1`` binds the pure one). The same through a real server and
real clients: tests/compat/test_http_lane.py.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import JsonPost, counts_only, run_core, until
from onnx_models import (
    add_sub,
    config_for,
    config_text,
    failing,
    identity,
    model_tensors,
    write_model,
)

from tritonlite.contracts.errors import TritonliteError
from tritonlite.contracts.types import (
    InferInput,
    InferRequest,
    InferResponse,
    RequestedOutput,
    ShmRef,
)
from tritonlite.core.core import InferenceCore
from tritonlite.core.runtime import lane as lane_mod
from tritonlite.scheduling import delay_hooks

pytestmark = pytest.mark.timeout(120)

_WARM_TRIES = 4000  # general requests until the instance's policy keeps runs on the loop


def _repo(root: Path) -> Path:
    write_model(root, "direct", add_sub(), config_for(add_sub(), max_batch_size=8, name="direct"))
    nb = add_sub(batch=False)
    write_model(root, "direct_nb", nb, config_for(nb, max_batch_size=0, name="direct_nb"))
    write_model(
        root,
        "batched",
        add_sub(),
        config_for(add_sub(), max_batch_size=8, name="batched", dynamic_batching=True),
    )
    write_model(
        root,
        "delayed",
        add_sub(),
        config_for(add_sub(), max_batch_size=8, name="delayed", max_queue_delay_us=100),
    )
    write_model(
        root,
        "ordered",
        add_sub(),
        config_text(
            *model_tensors(add_sub(), batch=True),
            max_batch_size=8,
            name="ordered",
            extra="dynamic_batching { preserve_ordering: true }",
        ),
    )
    write_model(root, "fails", failing(), config_for(failing(), max_batch_size=8, name="fails"))
    write_model(
        root,
        "reshaped",
        identity("FP32", (4,)),
        config_text(
            [("INPUT0", "FP32", [4])],
            [("OUTPUT0", "FP32", [2, 2], "reshape: { shape: [ 4 ] }")],
            max_batch_size=8,
            name="reshaped",
        ),
    )
    write_model(
        root,
        "cached",
        add_sub(),
        config_for(
            add_sub(), max_batch_size=8, name="cached", extra="response_cache { enable: true }"
        ),
    )
    return root


def _run(root: Path, body: Callable[[InferenceCore], Awaitable[None]], **opts: Any) -> None:
    run_core(root, body, **opts)


def _req(model: str, batch: bool = True, **kw: Any) -> InferRequest:
    shape = (1, 16) if batch else (16,)
    a = np.arange(16, dtype=np.float32).reshape(shape)
    b = np.full(shape, 2.0, dtype=np.float32)
    return InferRequest(
        model,
        inputs=[InferInput("INPUT0", "FP32", shape, a), InferInput("INPUT1", "FP32", shape, b)],
        **kw,
    )


async def _warm(core: InferenceCore, make: Callable[[], InferRequest]) -> None:
    """General requests until the lane takes a request on every instance in turn (each
    instance's first runs are measured off the loop); fails if it never does."""
    model = core.repository.get(make().model_name)
    row, want = 0, 2 * len(model.instances)
    for _ in range(_WARM_TRIES):
        if core.infer_now(make()) is not None:
            row += 1
            if row == want:
                return
            continue
        row = 0
        await core.infer(make())
    raise AssertionError("the lane never took a request on every instance")


def _counts(core: InferenceCore, model: str) -> dict[str, Any]:
    """The model's statistics with the durations' ns left out (counts only)."""
    return counts_only(core.statistics(model)["model_stats"][0])  # type: ignore[no-any-return]


def _same(a: InferResponse, b: InferResponse) -> None:
    assert (a.model_name, a.model_version, a.id, a.parameters) == (
        b.model_name,
        b.model_version,
        b.id,
        b.parameters,
    )
    assert [(o.name, o.datatype, o.shape, o.binary, o.shm) for o in a.outputs] == [
        (o.name, o.datatype, o.shape, o.binary, o.shm) for o in b.outputs
    ]
    for x, y in zip(a.outputs, b.outputs):
        assert x.data is not None and y.data is not None
        assert x.data.dtype == y.data.dtype
        np.testing.assert_array_equal(x.data, y.data)


@pytest.mark.parametrize(
    ("model", "batch"),
    [("direct", True), ("direct_nb", False), ("batched", True)],
    ids=["batch8", "nobatch", "batcher"],
)
@pytest.mark.parametrize(
    "outputs",
    [
        None,
        [RequestedOutput("OUTPUT1", binary=True)],
        [RequestedOutput("OUTPUT1"), RequestedOutput("OUTPUT0", binary=False)],
    ],
    ids=["all", "one", "reordered"],
)
@pytest.mark.parametrize("binary", [True, False])
def test_the_lane_answers_as_the_general_path(
    tmp_path: Path, model: str, batch: bool, outputs: Any, binary: bool
) -> None:
    def make() -> InferRequest:
        return _req(
            model,
            batch,
            id="r-1",
            outputs=copy.deepcopy(outputs),
            binary_data_output=binary,
        )

    async def body(core: InferenceCore) -> None:
        await _warm(core, make)
        lane = core.repository.get(model).lane
        assert lane is not None
        for _ in range(_WARM_TRIES):  # (a slow sample may send one run off the loop)
            taken = lane.taken
            before = _counts(core, model)
            fast = core.infer_now(make())
            if fast is not None:
                break
            await core.infer(make())
        assert fast is not None and lane.taken == taken + 1
        after_lane = _counts(core, model)
        slow = await core.infer(make())
        after_general = _counts(core, model)
        _same(fast, slow)
        np.testing.assert_array_equal(
            {o.name: o.data for o in fast.outputs}.get("OUTPUT1", np.zeros(1)),
            np.arange(16, dtype=np.float32).reshape((1, 16) if batch else (16,)) - 2.0
            if any(o.name == "OUTPUT1" for o in fast.outputs)
            else np.zeros(1),
        )
        # one request's statistics, the same fields counted by both paths
        assert before != after_lane
        delta_lane = _delta(before, after_lane)
        delta_general = _delta(after_lane, after_general)
        assert delta_lane == delta_general
        st = core.statistics(model)["model_stats"][0]["inference_stats"]
        for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            assert st[key]["count"] > 0 and st[key]["ns"] > 0, key

    _run(_repo(tmp_path), body)


def _delta(a: Any, b: Any) -> Any:
    """What changed from statistics ``a`` to ``b`` (counts; batch_stats by batch size)."""
    if isinstance(b, list):  # batch_stats
        a = {e["batch_size"]: e for e in a or []}
        b = {e["batch_size"]: e for e in b}
    if isinstance(b, dict):
        return {k: _delta((a or {}).get(k), v) for k, v in b.items()}
    if isinstance(b, int) and not isinstance(b, bool):
        return b - (a or 0)
    return b


def test_validation_errors_are_the_general_paths(tmp_path: Path) -> None:
    bad = [
        lambda: InferRequest(  # a wrong shape
            "direct",
            inputs=[
                InferInput("INPUT0", "FP32", (1, 8), np.zeros((1, 8), np.float32)),
                InferInput("INPUT1", "FP32", (1, 8), np.zeros((1, 8), np.float32)),
            ],
        ),
        lambda: _req("direct", outputs=[RequestedOutput("NOPE")]),  # an unknown output
        lambda: InferRequest("direct", inputs=_req("direct").inputs[:1]),  # a missing input
        lambda: _req("nope"),  # an unknown model
    ]

    async def body(core: InferenceCore) -> None:
        raised = 0
        for make in bad:
            await _warm(core, lambda: _req("direct"))
            before = _counts(core, "direct")
            try:  # the lane words a refusal as the general path, or leaves it to it
                lane_err: TritonliteError | None = None
                assert core.infer_now(make()) is None
            except TritonliteError as exc:
                lane_err = exc
                raised += 1
            with pytest.raises(TritonliteError) as general:
                await core.infer(make())
            if lane_err is not None:
                assert (lane_err.code, lane_err.message) == (
                    general.value.code,
                    general.value.message,
                )
            assert _counts(core, "direct") == before  # refused requests are never counted
        assert raised >= 3  # the shape, the missing input, the model: refused in the lane

    _run(_repo(tmp_path), body)


def test_a_known_request_structure_still_checks_each_requests_arrays(tmp_path: Path) -> None:
    """A structure that passed validation before (a JSON or gRPC request, which no decoder
    proved) is not validated whole again, but each request's arrays still are: arrays that
    do not fill the declared shape get the general path's error, never a run."""
    from tritonlite.contracts.datatypes import Misfit

    def short() -> InferRequest:  # arrays the session would take, but not of their shape
        r = _req("direct")
        for k in (0, 1):
            r.inputs[k] = InferInput(f"INPUT{k}", "FP32", (1, 16), np.zeros((2, 16), np.float32))
        return r

    def misfit() -> InferRequest:
        r = _req("direct")
        r.inputs[0] = InferInput("INPUT0", "FP32", (1, 16), Misfit.of(12))
        return r

    async def body(core: InferenceCore) -> None:
        for make in (short, misfit):
            await _warm(core, lambda: _req("direct"))  # the structure passed, many times
            before = _counts(core, "direct")
            with pytest.raises(TritonliteError) as general:
                await core.infer(make())
            assert _counts(core, "direct") == before
            for _ in range(3):
                await _warm(core, lambda: _req("direct"))
                before = _counts(core, "direct")
                try:
                    assert core.infer_now(make()) is None
                except TritonliteError as exc:
                    assert (exc.code, exc.message) == (general.value.code, general.value.message)
                assert _counts(core, "direct") == before  # refused, never run

    _run(_repo(tmp_path), body)


def test_a_failed_run_falls_back_and_fails_as_before(tmp_path: Path) -> None:
    def good() -> InferRequest:
        return InferRequest(
            "fails", inputs=[InferInput("INPUT0", "INT64", (1, 1), np.array([[1]], np.int64))]
        )

    def bad() -> InferRequest:
        return InferRequest(
            "fails", inputs=[InferInput("INPUT0", "INT64", (1, 1), np.array([[99]], np.int64))]
        )

    async def body(core: InferenceCore) -> None:
        await _warm(core, good)
        lane = core.repository.get("fails").lane
        assert lane is not None
        before, taken = _counts(core, "fails"), lane.taken
        assert core.infer_now(bad()) is None
        assert _counts(core, "fails") == before and lane.taken == taken
        with pytest.raises(TritonliteError, match="out of data bounds|indices"):
            await core.infer(bad())
        assert _counts(core, "fails")["inference_stats"]["fail"]["count"] == 1
        await _warm(core, good)  # the instance came back to idle

    _run(_repo(tmp_path), body)


def _shm_input() -> InferRequest:
    r = _req("direct")
    r.inputs[1] = InferInput("INPUT1", "FP32", (1, 16), None, ShmRef("region", 0, 64))
    return r


_NOT_COVERED: dict[str, Callable[[], InferRequest]] = {
    "parameters": lambda: _req("direct", parameters={"custom": 1}),
    "raw input": lambda: InferRequest("direct", raw_input=memoryview(bytes(64))),
    "timing hook": lambda: _req("direct", on_timing=lambda timing: None),
    "shared-memory input": _shm_input,
    "shared-memory output": lambda: _req(
        "direct", outputs=[RequestedOutput("OUTPUT0", shm=ShmRef("region", 0, 64))]
    ),
    "classification": lambda: _req(
        "direct", outputs=[RequestedOutput("OUTPUT0", classification=2)]
    ),
    "a shape that is not a tuple": lambda: InferRequest(
        "direct",
        inputs=[
            InferInput("INPUT0", "FP32", [1, 16], np.zeros((1, 16), np.float32)),  # type: ignore[arg-type]
            InferInput("INPUT1", "FP32", [1, 16], np.zeros((1, 16), np.float32)),  # type: ignore[arg-type]
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(_NOT_COVERED))
def test_requests_the_lane_does_not_cover_fall_back(tmp_path: Path, case: str) -> None:
    async def body(core: InferenceCore) -> None:
        await _warm(core, lambda: _req("direct"))
        lane = core.repository.get("direct").lane
        assert lane is not None
        before, taken = _counts(core, "direct"), lane.taken
        assert core.infer_now(_NOT_COVERED[case]()) is None
        assert _counts(core, "direct") == before and lane.taken == taken

    _run(_repo(tmp_path), body)


def test_models_and_states_the_lane_does_not_cover_fall_back(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        # a fresh instance: its first run is measured off the loop, so the lane waits
        assert core.infer_now(_req("direct")) is None
        await _warm(core, lambda: _req("direct"))
        model = core.repository.get("direct")
        assert model.lane is not None
        # a dynamic batcher that waits, or keeps the order: no lane at all
        for name in ("delayed", "ordered"):
            assert core.repository.get(name).lane is None
            assert core.infer_now(_req(name)) is None
        # an output reshaped by the config: the general path undoes it
        r = InferRequest(
            "reshaped", inputs=[InferInput("INPUT0", "FP32", (1, 4), np.ones((1, 4), np.float32))]
        )
        await core.infer(r)
        assert core.repository.get("reshaped").lane is not None
        for _ in range(50):
            assert core.infer_now(copy.deepcopy(r)) is None
            await core.infer(copy.deepcopy(r))
        # no idle instance (all taken out, as health probes take them)
        taken = list(dict.fromkeys(model.idle))  # an instance has an entry per request it takes
        for inst in taken:
            assert model.take_idle(inst)
        assert core.infer_now(_req("direct")) is None
        for inst in taken:
            model.return_idle(inst)
        await _warm(core, lambda: _req("direct"))
        # a run of the instance out on its thread (``busy``): nothing runs on the loop beside it
        inst = model.idle[0]
        inst.pipe.append((model, []))
        assert core.infer_now(_req("direct")) is None
        inst.pipe.pop()
        assert core.infer_now(_req("direct")) is not None
        # the server is stopping
        core.exiting = True
        assert core.infer_now(_req("direct")) is None
        core.exiting = False

    _run(_repo(tmp_path), body)


def test_a_batcher_with_a_request_queued_falls_back(tmp_path: Path) -> None:
    """A request queued in a dynamic batcher (no instance was idle) goes first: the lane
    leaves the next one to the batcher while it waits, and takes requests again after."""

    async def body(core: InferenceCore) -> None:
        await _warm(core, lambda: _req("batched"))
        model = core.repository.get("batched")
        lane = model.lane
        assert lane is not None
        # every instance back (one whose run went to its thread frees a loop turn later)
        await until(lambda: set(model.idle) == set(model.instances))
        out = list(dict.fromkeys(model.idle))
        for inst in out:
            assert model.take_idle(inst)
        queued = asyncio.ensure_future(core.infer(_req("batched", id="queued")))
        await until(lambda: model.scheduler.inflight() == 1)
        for inst in out:
            model.return_idle(inst)
        before, taken = _counts(core, "batched"), lane.taken
        assert core.infer_now(_req("batched")) is None  # the queued one first
        assert _counts(core, "batched") == before and lane.taken == taken
        model.scheduler.instance_free()
        assert (await queued).id == "queued"
        await _warm(core, lambda: _req("batched"))

    _run(_repo(tmp_path), body)


def test_a_held_batcher_falls_back_until_it_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's test hook (TRITONSERVER_DELAY_SCHEDULER=2): no request skips the batcher's
    hold through the lane; once two are queued and run, the lane takes requests."""
    monkeypatch.setenv(delay_hooks.DELAY_ENV, "2")

    async def body(core: InferenceCore) -> None:
        model = core.repository.get("batched")
        lane = model.lane
        assert lane is not None
        assert not model.scheduler.at_once()  # nothing queued, but held
        first = asyncio.ensure_future(core.infer(_req("batched", id="1")))
        await until(lambda: model.scheduler.inflight() == 1)
        for _ in range(20):
            assert core.infer_now(_req("batched")) is None
            await asyncio.sleep(0)
        assert not first.done() and lane.taken == 0
        second = await core.infer(_req("batched", id="2"))
        assert (await first).id == "1" and second.id == "2"
        assert model.scheduler.at_once()
        await _warm(core, lambda: _req("batched"))

    _run(_repo(tmp_path), body)


def test_a_response_cache_falls_back(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        for _ in range(20):
            assert core.infer_now(_req("cached")) is None
            await core.infer(_req("cached"))
        st = core.statistics("cached")["model_stats"][0]["inference_stats"]
        assert st["cache_hit"]["count"] > 0
        await _warm(core, lambda: _req("direct"))  # a model without the cache keeps it

    _run(_repo(tmp_path), body, response_cache_byte_size=1 << 20)


def test_tracing_falls_back(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        for _ in range(50):
            assert core.infer_now(_req("direct")) is None
            await core.infer(_req("direct"))

    _run(
        _repo(tmp_path),
        body,
        trace_level=("TIMESTAMPS",),
        trace_rate=1,
        trace_file=str(tmp_path / "trace.json"),
    )


def test_an_execution_timeout_falls_back(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        for _ in range(50):
            assert core.infer_now(_req("direct")) is None
            await core.infer(_req("direct"))

    _run(_repo(tmp_path), body, backend_execution_timeout_s=5.0)


def test_the_selector_binds_one_twin() -> None:
    from tritonlite.core.runtime import _lane_py

    if lane_mod.ACCELERATED:
        assert lane_mod.DirectLane is not _lane_py.DirectLane
        assert "compiled" in lane_mod.describe()
    else:
        assert lane_mod.DirectLane is _lane_py.DirectLane
        assert "pure Python" in lane_mod.describe()


_KEY = (("INPUT0", "FP32", (1, 16)), ("INPUT1", "FP32", (1, 16)))


def _feed() -> dict[str, Any]:
    r = _req("direct")
    return {i.name: i.data for i in r.inputs}


def test_a_plain_request_is_answered_as_infer_answers_it(tmp_path: Path) -> None:
    """``infer_plain`` (the JSON lane's call): the outputs ``infer`` gives for the same
    inputs, and the statistics of one more request, taken only for a structure that passed
    validation before (``_warm``'s requests have this one)."""

    async def body(core: InferenceCore) -> None:
        assert core.infer_plain("direct", -1, _KEY, _feed()) is None  # not seen yet: nothing
        assert _counts(core, "direct")["inference_stats"]["success"]["count"] == 0
        await _warm(core, lambda: _req("direct"))
        lane = core.repository.get("direct").lane
        assert lane is not None
        stats = core.statistics("direct")["model_stats"][0]
        taken = lane.taken
        got = core.infer_plain("direct", -1, _KEY, _feed())
        assert got is not None and lane.taken == taken + 1
        name, version, outs = got
        ref = await core.infer(_req("direct"))
        assert (name, version) == (ref.model_name, ref.model_version)
        assert [(o, dt, a.shape) for o, dt, a in outs] == [
            (o.name, o.datatype, o.shape) for o in ref.outputs
        ]
        for (_, _, a), o in zip(outs, ref.outputs):
            assert o.data is not None and a.dtype == o.data.dtype
            np.testing.assert_array_equal(a, o.data)
        after = core.statistics("direct")["model_stats"][0]
        assert after["execution_count"] == stats["execution_count"] + 2
        inf, inf0 = after["inference_stats"], stats["inference_stats"]
        for k in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            assert inf[k]["count"] == inf0[k]["count"] + 2, k
        assert inf["fail"] == inf0["fail"]

    _run(_repo(tmp_path), body)


@pytest.mark.parametrize(
    "key",
    [
        (("INPUT0", "FP32", (1, 8)), ("INPUT1", "FP32", (1, 8))),  # never passed validation
        (("INPUT1", "FP32", (1, 16)), ("INPUT0", "FP32", (1, 16))),  # another order
        (("INPUT0", "FP32", (1, 16)),),
        (("INPUT0", "FP32", (1, 16)), ("INPUT1", "FP32", (1, 16)), "OUTPUT0", 1),
    ],
    ids=["shape", "order", "missing", "outputs"],
)
def test_a_plain_request_of_a_structure_not_proven_is_left_alone(
    tmp_path: Path, key: tuple[Any, ...]
) -> None:
    async def body(core: InferenceCore) -> None:
        await _warm(core, lambda: _req("direct"))
        lane = core.repository.get("direct").lane
        assert lane is not None
        before, taken = _counts(core, "direct"), lane.taken
        assert core.infer_plain("direct", -1, key, _feed()) is None
        assert _counts(core, "direct") == before and lane.taken == taken

    _run(_repo(tmp_path), body)


def test_a_plain_request_falls_back_where_infer_now_does(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        await _warm(core, lambda: _req("direct"))
        assert core.infer_plain("direct", -1, _KEY, _feed()) is not None
        with pytest.raises(TritonliteError):
            core.infer_plain("nope", -1, _KEY, _feed())  # infer's error for it
        assert core.infer_plain("batched", -1, _KEY, _feed()) is None  # no lane
        model = core.repository.get("direct")
        inst = model.idle[0]
        inst.pipe.append((model, []))  # a run out on its thread
        assert core.infer_plain("direct", -1, _KEY, _feed()) is None
        inst.pipe.pop()
        core.exiting = True
        assert core.infer_plain("direct", -1, _KEY, _feed()) is None
        core.exiting = False
        assert core.infer_plain("direct", -1, _KEY, _feed()) is not None

    _run(_repo(tmp_path), body)


def test_the_http_handler_answers_a_plain_json_body_through_the_lane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTTP ``infer`` handler gives a body of inputs alone to ``jsonlane.answer``: once
    the structure passed, the lane answers it, with the general path's bytes."""
    import orjson

    from tritonlite.frontends.http import app, jsonlane

    answered: list[bytes] = []
    real = jsonlane.answer

    def spy(*a: Any) -> Any:
        got = real(*a)
        if got is not None:
            answered.append(got)
        return got

    monkeypatch.setattr(jsonlane, "answer", spy)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    doc = {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": a.ravel().tolist()},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [2.0] * 16},
        ]
    }

    async def body(core: InferenceCore) -> None:
        await _warm(core, lambda: _req("direct"))
        dispatch = app.make_dispatch(core)
        resp = await dispatch(JsonPost("/v2/models/direct/infer", orjson.dumps(doc)))
        assert answered and resp.status == 200 and b"".join(resp.body) == answered[-1]
        # the general path's bytes for the same request (an id sends it there)
        general = await dispatch(
            JsonPost("/v2/models/direct/infer", orjson.dumps({**doc, "id": ""}))
        )
        assert len(answered) == 1 and b"".join(general.body) == answered[0]
        assert (resp.content_type, resp.headers) == (general.content_type, general.headers)

    _run(_repo(tmp_path), body)


def test_a_kept_lookup_ends_when_its_model_is_not_ready(tmp_path: Path) -> None:
    """``_lane`` keeps its lookup until the repository's table changes; a model whose
    instances are all out of rotation is refused at once, as ``get`` refuses it, and answered
    again when one is back; an unload leaves no kept lookup of it (the real server's reloads
    and unloads: test_lane_lookup.py)."""

    async def body(core: InferenceCore) -> None:
        await _warm(core, lambda: _req("direct"))
        assert core.infer_plain("direct", -1, _KEY, _feed()) is not None
        model = core.repository.get("direct")
        for inst in model.instances:
            inst.healthy = False
        for version in (-1, 1):
            with pytest.raises(TritonliteError) as refused:
                core.infer_plain("direct", version, _KEY, _feed())
            with pytest.raises(TritonliteError) as general:
                await core.infer(_req("direct", model_version=version))
            assert refused.value.message == general.value.message
        for inst in model.instances:
            inst.healthy = True
        assert core.infer_plain("direct", -1, _KEY, _feed()) is not None
        assert core.infer_plain("direct", 1, _KEY, _feed()) is not None
        assert any(m is model for m, _ in core.repository.kept.values())
        # unloaded: nothing kept holds the retired model, and requests are refused
        await core.repository.unload("direct")
        assert all(m is not model for m, _ in core.repository.kept.values())
        with pytest.raises(TritonliteError):
            core.infer_plain("direct", -1, _KEY, _feed())

    _run(_repo(tmp_path), body)
