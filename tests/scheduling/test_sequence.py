"""The sequence batcher with real ONNX and Python models inside a real InferenceCore.

As in test_dynamic.py, a test that needs a deterministic batch holds the model's instances
(takes them out of the idle list) and releases them once the requests are queued.

The builders here (``write_acc_onnx``, ``write_probe_python``...) are shared with
tests/compat/test_sequence_clients.py.
"""

from __future__ import annotations

import asyncio
import re
import struct
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import run_core
from onnx import TensorProto, helper

from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest, InferResponse
from tritonlite.core.core import InferenceCore
from tritonlite.options import ServerOptions

pytestmark = pytest.mark.timeout(60)

STATE = (
    'state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [1] %s}]'
)


def _save(repo: Path, name: str, graph: onnx.GraphProto, config: str) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    (repo / name / "1").mkdir(parents=True)
    onnx.save(model, str(repo / name / "1" / "model.onnx"))
    (repo / name / "config.pbtxt").write_text(config)


def write_acc_onnx(
    repo: Path,
    name: str,
    *,
    max_batch_size: int = 8,
    count: int = 1,
    sequence: str = "",
    state_extra: str = "",
    outputs: str = "",
) -> None:
    """OUTPUT = INPUT + STATE_IN and STATE_OUT = OUTPUT: an accumulator on implicit state."""
    batch = ["B"] if max_batch_size > 0 else []
    io = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [*batch, 1])
        for n in ("INPUT", "STATE_IN", "OUTPUT", "STATE_OUT")
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "STATE_IN"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
        ],
        name,
        io[:2],
        io[2:],
    )
    _save(
        repo,
        name,
        graph,
        textwrap.dedent(f"""\
        max_batch_size: {max_batch_size}
        input [{{ name: "INPUT" data_type: TYPE_FP32 dims: [1] }}]
        output [{{ name: "OUTPUT" data_type: TYPE_FP32 dims: [1] }}{outputs}]
        instance_group [{{ count: {count} kind: KIND_CPU }}]
        sequence_batching {{ {sequence} {STATE % state_extra} }}
        """),
    )


_ONNX = {
    "INT32": TensorProto.INT32,
    "FP32": TensorProto.FLOAT,
    "BOOL": TensorProto.BOOL,
    "UINT64": TensorProto.UINT64,
    "INT64": TensorProto.INT64,
    "UINT32": TensorProto.UINT32,
    "STRING": TensorProto.STRING,
}


def write_controls_onnx(
    repo: Path,
    name: str,
    form: str,
    corrid: str,
    *,
    false_true: str = "[0, 1]",
    max_batch_size: int = 4,
) -> None:
    """Echoes its START/END/READY controls (``form``: int32, fp32, bool) and CORRID."""
    flag_type = {"int32": "INT32", "fp32": "FP32", "bool": "BOOL"}[form]
    controls = [("START", flag_type), ("END", flag_type), ("READY", flag_type), ("CORRID", corrid)]
    batch = ["B"] if max_batch_size > 0 else []
    inputs = [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, [*batch, 1])]
    inputs += [helper.make_tensor_value_info(n, _ONNX[t], [*batch, 1]) for n, t in controls]
    outputs = [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, [*batch, 1])]
    outputs += [
        helper.make_tensor_value_info(f"{n}_OUT", _ONNX[t], [*batch, 1]) for n, t in controls
    ]
    nodes = [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])]
    nodes += [helper.make_node("Identity", [n], [f"{n}_OUT"]) for n, _ in controls]
    graph = helper.make_graph(nodes, name, inputs, outputs)
    outs = ", ".join(f'{{ name: "{n}_OUT" data_type: TYPE_{t} dims: [1] }}' for n, t in controls)
    flags = "".join(
        f'{{ name: "{n}" control [{{ kind: CONTROL_SEQUENCE_{n} {form}_false_true: '
        f"{false_true} }}] }}, "
        for n, _ in controls[:3]
    )
    _save(
        repo,
        name,
        graph,
        textwrap.dedent(f"""\
        max_batch_size: {max_batch_size}
        input [{{ name: "INPUT" data_type: TYPE_FP32 dims: [1] }}]
        output [{{ name: "OUTPUT" data_type: TYPE_FP32 dims: [1] }}, {outs}]
        instance_group [{{ count: 1 kind: KIND_CPU }}]
        sequence_batching {{
          control_input [{flags}
            {{ name: "CORRID"
               control [{{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_{corrid} }}] }}]
        }}
        """),
    )


PROBE = '''
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Accumulates INPUT on implicit state and reports what the server handed it."""

    def initialize(self, args):
        self.instance = args["model_instance_name"].encode()

    def execute(self, requests):
        responses = []
        for pos, request in enumerate(requests):
            get = lambda name: pb_utils.get_input_tensor_by_name(request, name)
            x = get("INPUT").as_numpy()
            acc = x + get("STATE_IN").as_numpy()
            controls = [float(get(n).as_numpy()[0, 0]) for n in ("START", "END", "READY")]
            names = sorted(t.name() for t in request.inputs())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", acc.astype(np.float32)),
                pb_utils.Tensor("STATE_OUT", acc.astype(np.float32)),
                pb_utils.Tensor("INSTANCE", np.array([[self.instance]], dtype=object)),
                pb_utils.Tensor("WHERE", np.array([[pos, len(requests)]], dtype=np.int32)),
                pb_utils.Tensor("CORRID", np.array([[repr(request.correlation_id()).encode()]],
                                                   dtype=object)),
                pb_utils.Tensor("FLAGS", np.array([[request.flags()]], dtype=np.int32)),
                pb_utils.Tensor("CONTROLS", np.array([controls], dtype=np.float32)),
                pb_utils.Tensor("INPUTS", np.array([[",".join(names).encode()]], dtype=object)),
            ]))
        return responses
'''

PROBE_OUTPUTS = [
    ("OUTPUT", "FP32", 1),
    ("INSTANCE", "STRING", 1),
    ("WHERE", "INT32", 2),
    ("CORRID", "STRING", 1),
    ("FLAGS", "INT32", 1),
    ("CONTROLS", "FP32", 3),
    ("INPUTS", "STRING", 1),
]


def write_probe_python(
    repo: Path, name: str, *, max_batch_size: int = 4, count: int = 1, sequence: str = ""
) -> None:
    """The Python twin of the accumulator, reporting instance, batch position, ids and flags."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(PROBE)
    outs = ", ".join(
        f'{{ name: "{n}" data_type: TYPE_{t} dims: [{d}] }}' for n, t, d in PROBE_OUTPUTS
    )
    flags = ", ".join(
        f'{{ name: "{n}" control [{{ kind: CONTROL_SEQUENCE_{n} int32_false_true: [0, 1] }}] }}'
        for n in ("START", "END", "READY")
    )
    (repo / name / "config.pbtxt").write_text(
        textwrap.dedent(f"""\
        backend: "python"
        max_batch_size: {max_batch_size}
        input [{{ name: "INPUT" data_type: TYPE_FP32 dims: [1] }}]
        output [{outs}]
        instance_group [{{ count: {count} kind: KIND_CPU }}]
        sequence_batching {{ {sequence} control_input [{flags}] {STATE % ""} }}
        """)
    )


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    write_acc_onnx(repo, "acc")
    write_acc_onnx(repo, "acc_nobatch", max_batch_size=0)
    write_acc_onnx(
        repo, "acc_one_slot", max_batch_size=1, sequence="max_sequence_idle_microseconds: 400000"
    )
    write_acc_onnx(repo, "acc_oldest", sequence="oldest { max_candidate_sequences: 4 }")
    write_acc_onnx(
        repo,
        "acc_oldest_idle",
        sequence="max_sequence_idle_microseconds: 200000 oldest { max_candidate_sequences: 2 }",
    )
    write_acc_onnx(
        repo,
        "acc_oldest_pref",
        max_batch_size=4,
        sequence="oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] }",
    )
    write_acc_onnx(
        repo,
        "acc_utilization",
        max_batch_size=2,
        sequence="direct { max_queue_delay_microseconds: 5000000 minimum_slot_utilization: 1.0 }",
    )
    write_acc_onnx(
        repo,
        "acc_zero_init",
        state_extra=(
            'initial_state: [{ name: "zeros" data_type: TYPE_FP32 dims: [1] zero_data: true }]'
        ),
    )
    write_acc_onnx(
        repo,
        "acc_file_init",
        state_extra=(
            'initial_state: [{ name: "hundred" data_type: TYPE_FP32 dims: [1] '
            'data_file: "hundred.bin" }]'
        ),
        outputs=', { name: "STATE_OUT" data_type: TYPE_FP32 dims: [1] }',
    )
    (repo / "acc_file_init" / "initial_state").mkdir()
    (repo / "acc_file_init" / "initial_state" / "hundred.bin").write_bytes(struct.pack("<f", 100))
    write_controls_onnx(repo, "ctl_int32", "int32", "UINT64", false_true="[5, 7]")
    write_controls_onnx(repo, "ctl_fp32", "fp32", "INT32", false_true="[-1.5, 2.5]")
    write_controls_onnx(repo, "ctl_bool", "bool", "STRING", false_true="[false, true]")
    write_probe_python(repo, "probe", count=2)
    write_probe_python(repo, "probe_one", count=1)
    return repo


def run(tmp_path: Path, body: Callable[[InferenceCore], Awaitable[None]]) -> None:
    run_core(_repo(tmp_path), body)


class Held:
    """Takes every idle instance of a model so nothing dispatches until ``release``."""

    def __init__(self, core: InferenceCore, name: str) -> None:
        self.model = core.repository.get(name)
        self.instances = [i for i in self.model.instances if self.model.take_idle(i)]

    def release(self) -> None:
        for inst in self.instances:
            self.model.return_idle(inst)
        self.instances = []
        self.model.scheduler.instance_free()


def req(
    model: str,
    seq: int | str,
    value: float = 1.0,
    *,
    start: bool = False,
    end: bool = False,
    batch: bool = True,
    rows: int = 1,
) -> InferRequest:
    shape = (rows, 1) if batch else (1,)
    data = np.full(shape, value, dtype=np.float32)
    return InferRequest(
        model_name=model,
        inputs=[InferInput("INPUT", "FP32", shape, data)],
        sequence_id=seq,
        sequence_start=start,
        sequence_end=end,
    )


def out(resp: InferResponse, name: str = "OUTPUT") -> Any:
    for o in resp.outputs:
        if o.name == name:
            assert o.data is not None
            value = o.data.reshape(-1)
            if value.size > 1:
                return value.tolist()
            return value[0] if value.dtype == object else value[0].item()
    raise AssertionError(f"no output {name} in {[o.name for o in resp.outputs]}")


async def sequence(
    core: InferenceCore, model: str, seq: int | str, values: list[float], **kw: Any
) -> list[float]:
    results = []
    for i, v in enumerate(values):
        r = await core.infer(req(model, seq, v, start=i == 0, end=i == len(values) - 1, **kw))
        results.append(out(r))
    return results


def _batches(core: InferenceCore, name: str) -> dict[int, int]:
    stats = core.repository.get(name).stats
    return {size: b.compute_infer.count for size, b in stats.batches.items()}


# -- implicit state -------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["acc", "acc_nobatch", "probe"])
def test_state_accumulates_over_a_sequence_and_resets_on_start(tmp_path: Path, model: str) -> None:
    async def body(core: InferenceCore) -> None:
        batch = model != "acc_nobatch"
        assert await sequence(core, model, 7, [1, 2, 3], batch=batch) == [1, 3, 6]
        # the same id again: a new sequence, a fresh state
        assert await sequence(core, model, 7, [10, 1], batch=batch) == [10, 11]
        # a START in the middle of a live sequence restarts its state (Triton warns)
        assert out(await core.infer(req(model, 8, 5, start=True, batch=batch))) == 5
        assert out(await core.infer(req(model, 8, 5, batch=batch))) == 10
        assert out(await core.infer(req(model, 8, 2, start=True, batch=batch))) == 2

    run(tmp_path, body)


def test_interleaved_sequences_keep_their_own_state(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        async def one(seq: int | str, values: list[float]) -> list[float]:
            return await sequence(core, "acc", seq, values)

        got = await asyncio.gather(
            one(1, [1, 1, 1, 1]), one("two", [10, 20, 30]), one(3, [0.5, 0.5])
        )
        assert got == [[1, 2, 3, 4], [10, 30, 60], [0.5, 1.0]]

    run(tmp_path, body)


def test_initial_state_zero_data_and_data_file(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        assert await sequence(core, "acc_zero_init", 1, [2, 2]) == [2, 4]
        assert await sequence(core, "acc_file_init", 1, [1, 1]) == [101, 102]
        # a state output listed among the config's outputs can be requested by the client
        r = await core.infer(req("acc_file_init", 2, 3, start=True))
        assert out(r, "STATE_OUT") == 103

    run(tmp_path, body)


def test_bad_initial_state_fails_the_load(tmp_path: Path) -> None:
    repo = tmp_path / "bad"
    write_acc_onnx(
        repo,
        "bad",
        state_extra=(
            'initial_state: [{ name: "x" data_type: TYPE_FP32 dims: [1, 2] zero_data: true }]'
        ),
    )

    async def main() -> None:
        core = InferenceCore(ServerOptions(model_repositories=(repo,)))
        assert await core.start() == ["bad"]
        try:
            index = core.repository_index()
            assert "Number of dimensions in 'initial_state' doesn't match" in index[0]["reason"]
        finally:
            await core.stop()

    asyncio.run(main())


# -- routing and batching -------------------------------------------------------------------------
def test_direct_binds_each_sequence_to_one_instance(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        async def one(seq: int, n: int) -> tuple[set[str], list[float]]:
            instances, values = set(), []
            for i in range(n):
                r = await core.infer(req("probe", seq, 1, start=i == 0, end=i == n - 1))
                instances.add(out(r, "INSTANCE"))
                values.append(out(r))
            return instances, values

        held = Held(core, "probe")
        tasks = [asyncio.ensure_future(one(s, 6)) for s in (1, 2)]
        await asyncio.sleep(0)
        held.release()
        (a_inst, a_vals), (b_inst, b_vals) = await asyncio.gather(*tasks)
        assert len(a_inst) == 1 and len(b_inst) == 1, (a_inst, b_inst)
        # a new sequence takes slot 0 of the next instance before slot 1 of the first
        assert a_inst != b_inst
        assert a_vals == b_vals == [1, 2, 3, 4, 5, 6]  # in order, one at a time

    run(tmp_path, body)


def test_direct_batches_slots_and_pads_empty_ones_with_null_requests(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "probe_one")
        starts = [
            asyncio.ensure_future(core.infer(req("probe_one", s, s, start=True))) for s in (1, 2, 3)
        ]
        await asyncio.sleep(0)
        held.release()
        first = await asyncio.gather(*starts)
        assert [out(r, "WHERE") for r in first] == [[0, 3], [1, 3], [2, 3]]
        assert _batches(core, "probe_one") == {3: 1}
        # only slot 2 has work: slots 0 and 1 get null requests, the model sees a batch of 3
        third = await core.infer(req("probe_one", 3, 1))
        assert out(third, "WHERE") == [2, 3] and out(third) == 4
        assert out(third, "CONTROLS") == [0, 0, 1]
        # the executed batch size counts the null requests (Triton's L0_sequence_batcher
        # test_backlog_fill_no_end expects {4: 3, 3: 2}), the inference count does not
        assert _batches(core, "probe_one") == {3: 2}
        assert core.repository.get("probe_one").stats.inference_count == 4
        assert core.repository.get("probe_one").stats.execution_count == 2
        # the null requests did not touch the other sequences' state
        assert out(await core.infer(req("probe_one", 1, 1, end=True))) == 2

    run(tmp_path, body)


def test_null_requests_in_an_onnx_batch(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "acc")
        starts = [
            asyncio.ensure_future(core.infer(req("acc", s, s, start=True))) for s in (1, 2, 3)
        ]
        await asyncio.sleep(0)
        held.release()
        assert [out(r) for r in await asyncio.gather(*starts)] == [1, 2, 3]
        assert out(await core.infer(req("acc", 3, 1))) == 4  # a batch of 3, two of them null
        assert out(await core.infer(req("acc", 1, 1))) == 2

    run(tmp_path, body)


def test_one_request_per_sequence_per_batch(tmp_path: Path) -> None:
    for model in ("acc", "acc_oldest"):

        async def body(core: InferenceCore, model: str = model) -> None:
            held = Held(core, model)
            tasks = [
                asyncio.ensure_future(core.infer(req(model, 1, v, start=v == 1))) for v in (1, 2, 3)
            ]
            tasks.append(asyncio.ensure_future(core.infer(req(model, 2, 10, start=True))))
            await asyncio.sleep(0)
            held.release()
            assert [out(r) for r in await asyncio.gather(*tasks)] == [1, 3, 6, 10]
            assert _batches(core, model) == {2: 1, 1: 2}

        run(tmp_path / model, body)


def test_oldest_takes_the_oldest_sequences_up_to_max_batch_size(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "acc_oldest")
        tasks = [
            asyncio.ensure_future(core.infer(req("acc_oldest", s, s, start=True)))
            for s in range(1, 7)
        ]  # 6 sequences, 4 candidate slots: 2 wait in the backlog
        await asyncio.sleep(0)
        assert sorted(core.repository.get("acc_oldest").scheduler.sequences().values()) == (
            ["backlog"] * 2 + [f"slot 0:{i}" for i in range(4)]
        )
        held.release()
        assert [out(r) for r in await asyncio.gather(*tasks)] == [1, 2, 3, 4, 5, 6]
        assert _batches(core, "acc_oldest") == {4: 1, 2: 1}

    run(tmp_path, body)


def test_slots_whose_idle_times_end_together_free_together(tmp_path: Path) -> None:
    """Two slotted sequences whose idle times end 3 ms apart leave their slots in one reaper
    pass, so the two backlogged sequences run as one batch, not as two batches of one."""

    async def body(core: InferenceCore) -> None:
        model = core.repository.get("acc_oldest_idle")
        held = Held(core, "acc_oldest_idle")
        tasks = [
            asyncio.ensure_future(core.infer(req("acc_oldest_idle", s, s, start=True)))
            for s in range(1, 5)
        ]  # 4 sequences, 2 candidate slots: 3 and 4 wait in the backlog
        await asyncio.sleep(0)
        first, second = model.scheduler._active[1], model.scheduler._active[2]
        second.last_ns = first.last_ns + 3_000_000  # sequence 2 arrived 3 ms after 1
        held.release()
        assert [out(r) for r in await asyncio.gather(*tasks)] == [1, 2, 3, 4]
        assert _batches(core, "acc_oldest_idle") == {2: 2}
        assert sorted(model.scheduler.sequences().values()) == ["slot 0:0", "slot 0:1"]

    run(tmp_path, body)


def test_oldest_sends_the_largest_preferred_size_that_fits(tmp_path: Path) -> None:
    """As Triton's dynamic batcher: 3 ready, preferred [2], no delay: 2 now, then 1."""

    async def body(core: InferenceCore) -> None:
        held = Held(core, "acc_oldest_pref")
        tasks = [
            asyncio.ensure_future(core.infer(req("acc_oldest_pref", s, s, start=True, end=True)))
            for s in (1, 2, 3)
        ]
        await asyncio.sleep(0)
        held.release()
        assert [out(r) for r in await asyncio.gather(*tasks)] == [1, 2, 3]
        assert _batches(core, "acc_oldest_pref") == {2: 1, 1: 1}

    run(tmp_path, body)


def test_oldest_is_held_by_the_delay_hook_until_n_sequences_are_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TRITONSERVER_DELAY_SCHEDULER=3: oldest's per-instance batcher waits for 3 sequences."""
    monkeypatch.setenv("TRITONSERVER_DELAY_SCHEDULER", "3")

    async def body(core: InferenceCore) -> None:
        model = core.repository.get("acc_oldest")
        two = [
            asyncio.ensure_future(core.infer(req("acc_oldest", s, s, start=True))) for s in (1, 2)
        ]
        await asyncio.sleep(0)
        assert len(model.scheduler.sequences()) == 2
        assert not any(t.done() for t in two) and model.executing == 0
        third = core.infer(req("acc_oldest", 3, 3, start=True))
        assert [out(r) for r in await asyncio.gather(*two, third)] == [1, 2, 3]
        assert _batches(core, "acc_oldest") == {3: 1}
        # released for good: a lone request runs at once
        assert out(await core.infer(req("acc_oldest", 1, 1, end=True))) == 2

    run(tmp_path, body)


def test_direct_waits_for_minimum_slot_utilization(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        first = asyncio.ensure_future(core.infer(req("acc_utilization", 1, 1, start=True)))
        await asyncio.sleep(0.05)
        assert not first.done()  # 1 of 2 slots ready < 1.0; the delay is 5 s
        second = asyncio.ensure_future(core.infer(req("acc_utilization", 2, 2, start=True)))
        assert [out(r) for r in await asyncio.gather(first, second)] == [1, 2]
        assert _batches(core, "acc_utilization") == {2: 1}

    run(tmp_path, body)


def test_idle_sequence_is_released_and_its_slot_reused(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        model = "acc_one_slot"  # one instance, one slot, 400 ms idle limit
        scheduler = core.repository.get(model).scheduler
        assert out(await core.infer(req(model, 1, 1, start=True))) == 1
        await asyncio.sleep(0.2)
        waiting = asyncio.ensure_future(core.infer(req(model, 2, 5, start=True)))
        await asyncio.sleep(0)
        assert scheduler.sequences() == {1: "slot 0:0", 2: "backlog"}
        # sequence 1 sends nothing more: 400 ms after its last request its slot goes to 2
        # (whose own idle time, as in Triton, counts from its request 200 ms later)
        assert out(await asyncio.wait_for(waiting, 10)) == 5
        assert scheduler.sequences() == {2: "slot 0:0"}
        assert out(await core.infer(req(model, 2, 1))) == 6
        with pytest.raises(TritonliteError, match="must specify the START flag") as info:
            await core.infer(req(model, 1, 1))
        assert info.value.code == ErrorCode.INVALID_ARG
        assert out(await core.infer(req(model, 2, 1, end=True))) == 7

    run(tmp_path, body)


# -- control inputs -------------------------------------------------------------------------------
def _controls(resp: InferResponse) -> tuple[Any, ...]:
    return tuple(out(resp, f"{n}_OUT") for n in ("START", "END", "READY", "CORRID"))


@pytest.mark.parametrize(
    "model,false,true,seq,corrid",
    [
        ("ctl_int32", 5, 7, 2**40 + 3, 2**40 + 3),
        ("ctl_fp32", -1.5, 2.5, 2**33 + 9, 9),  # an INT32 CORRID takes the id's low 32 bits
        ("ctl_bool", False, True, "user-42", b"user-42"),
    ],
)
def test_control_tensors(
    tmp_path: Path, model: str, false: Any, true: Any, seq: Any, corrid: Any
) -> None:
    async def body(core: InferenceCore) -> None:
        f, t = false, true
        got = [
            _controls(await core.infer(req(model, seq, start=True))),
            _controls(await core.infer(req(model, seq))),
            _controls(await core.infer(req(model, seq, end=True))),
            _controls(await core.infer(req(model, seq, start=True, end=True))),
        ]
        assert got == [(t, f, t, corrid), (f, f, t, corrid), (f, t, t, corrid), (t, t, t, corrid)]

    run(tmp_path, body)


def test_python_model_sees_ids_flags_and_the_added_inputs(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        for seq in (12, "abc"):
            rs = [
                await core.infer(req("probe", seq, start=True)),
                await core.infer(req("probe", seq)),
                await core.infer(req("probe", seq, end=True)),
                await core.infer(req("probe", seq, start=True, end=True)),
            ]
            assert [out(r, "CORRID") for r in rs] == [repr(seq).encode()] * 4
            assert [out(r, "FLAGS") for r in rs] == [1, 0, 2, 3]
            assert [out(r, "CONTROLS") for r in rs] == [[1, 0, 1], [0, 0, 1], [0, 1, 1], [1, 1, 1]]
        assert out(rs[0], "INPUTS") == b"END,INPUT,READY,START,STATE_IN"

    run(tmp_path, body)


# -- errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "request_,message",
    [
        (
            req("acc", 0, start=True),
            "inference request to model 'acc' must specify a non-zero or non-empty correlation ID",
        ),
        (
            req("acc", "", start=True),
            "inference request to model 'acc' must specify a non-zero or non-empty correlation ID",
        ),
        (
            req("acc", 99),
            "inference request for sequence 99 to model 'acc' must specify the START flag on the first "
            "request of the sequence",
        ),
        (
            req("acc", "nope", end=True),
            "inference request for sequence nope to model 'acc' must specify the START flag on the "
            "first request of the sequence",
        ),
        (
            req("acc", 5, start=True, rows=2),
            "inference request to model 'acc' must specify batch-size 1 due to requirements of "
            "sequence batcher",
        ),
        (
            req("ctl_int32", "text", start=True),
            "inference request to model 'ctl_int32' must specify an unsigned integer correlation ID",
        ),
    ],
    ids=["zero", "empty", "no-start", "no-start-string", "batch-2", "string-for-int-corrid"],
)
def test_errors(tmp_path: Path, request_: InferRequest, message: str) -> None:
    async def body(core: InferenceCore) -> None:
        with pytest.raises(TritonliteError) as info:
            await core.infer(request_)
        assert info.value.code == ErrorCode.INVALID_ARG
        assert info.value.message.startswith(message), info.value.message
        assert core.repository.get(request_.model_name).stats.execution_count == 0

    run(tmp_path, body)


def test_a_sequence_is_unknown_after_its_end(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        assert await sequence(core, "acc", 4, [1, 1]) == [1, 2]
        with pytest.raises(TritonliteError, match="must specify the START flag"):
            await core.infer(req("acc", 4, 1))
        assert core.repository.get("acc").scheduler.sequences() == {}

    run(tmp_path, body)


def test_control_and_state_inputs_are_not_client_inputs(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        r = req("acc", 1, start=True)
        r.inputs.append(InferInput("STATE_IN", "FP32", (1, 1), np.zeros((1, 1), np.float32)))
        # (Triton counts the inputs first: one more than the model has)
        with pytest.raises(
            TritonliteError,
            match=re.escape(
                "expected 1 inputs but got 2 inputs for model 'acc'. Got input(s) "
                "['STATE_IN','INPUT']"
            ),
        ):
            await core.infer(r)

    run(tmp_path, body)


def test_unload_fails_queued_requests(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        Held(core, "acc")
        queued = asyncio.ensure_future(core.infer(req("acc", 1, start=True)))
        await asyncio.sleep(0)
        core.repository.get("acc").scheduler.stop()
        with pytest.raises(TritonliteError, match="unloading"):
            await queued

    run(tmp_path, body)


def test_a_request_cancelled_while_queued_ends_its_sequence(tmp_path: Path) -> None:
    async def body(core: InferenceCore) -> None:
        held = Held(core, "acc")
        first = asyncio.ensure_future(core.infer(req("acc", 1, 1, start=True)))
        second = asyncio.ensure_future(core.infer(req("acc", 1, 2)))
        other = asyncio.ensure_future(core.infer(req("acc", 2, 3, start=True)))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        held.release()
        with pytest.raises(TritonliteError, match="sequence 1 of model 'acc' was cancelled") as i:
            await second
        assert i.value.code == ErrorCode.CANCELLED
        assert out(await other) == 3  # other sequences are not affected
        with pytest.raises(TritonliteError, match="must specify the START flag"):
            await core.infer(req("acc", 1, 1))

    run(tmp_path, body)
