"""The ONNX Runtime parameters tune writes reach the session, and bad values fail the load.

``session_settings`` reads a config's ``parameters`` (Triton's onnxruntime backend names, and
ONNX Runtime's own session keys for spinning); ``session_options`` builds the real
``onnxruntime.SessionOptions`` from them. A config that tune writes goes through the same two,
and a real InferenceCore loads (or refuses) real ONNX models configured that way.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from onnx_models import write_identity

from tritonlite._proto import pb
from tritonlite.backends import onnxruntime as ortb
from tritonlite.contracts.errors import ErrorCode, TritonliteError
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.options import ServerOptions
from tritonlite.tune import space

pytestmark = pytest.mark.timeout(60)


def param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}\n'


def cfg(*params: tuple[str, str]) -> Any:
    text = 'name: "m"\nplatform: "onnxruntime_onnx"\n' + "".join(param(k, v) for k, v in params)
    return text_format.Parse(text, pb.ModelConfig())


def entry(opts: Any, key: str) -> str:
    return str(opts.get_session_config_entry(key))


def test_defaults_leave_the_event_loop_a_core_and_do_not_spin() -> None:
    s = ortb.session_settings(cfg(), cores=8)
    assert (s.intra_op_threads, s.inter_op_threads, s.parallel) == (7, 1, False)
    assert ortb.session_settings(cfg(), cores=2).intra_op_threads == 2
    opts = ortb.session_options(s)
    assert opts.intra_op_num_threads == 7
    assert opts.inter_op_num_threads == 1
    assert opts.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert entry(opts, ortb.INTRA_OP_SPINNING) == "0"
    assert entry(opts, ortb.INTER_OP_SPINNING) == "0"


def test_parameters_reach_the_session_options() -> None:
    c = cfg(
        ("intra_op_thread_count", "3"),
        ("inter_op_thread_count", "2"),
        ("execution_mode", "1"),
        ("session.intra_op.allow_spinning", "1"),
        ("session.inter_op.allow_spinning", "TRUE"),
        ("enable_mem_arena", "0"),
        ("enable_mem_pattern", "off"),
        ("session.use_device_allocator_for_initializers", "1"),
    )
    opts = ortb.session_options(ortb.session_settings(c, cores=8))
    assert opts.intra_op_num_threads == 3
    assert opts.inter_op_num_threads == 2
    assert opts.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert entry(opts, "session.intra_op.allow_spinning") == "1"
    assert entry(opts, "session.inter_op.allow_spinning") == "1"
    assert opts.enable_cpu_mem_arena is False
    assert opts.enable_mem_pattern is False
    assert entry(opts, "session.use_device_allocator_for_initializers") == "1"


def test_zero_or_negative_thread_counts_leave_the_count_to_ort() -> None:
    # Triton's backend sets a count only when it is > 0.
    s = ortb.session_settings(
        cfg(("intra_op_thread_count", "0"), ("inter_op_thread_count", "-1")), cores=8
    )
    assert (s.intra_op_threads, s.inter_op_threads) == (0, 0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "intra_op_thread_count",
            "two",
            "parameter 'intra_op_thread_count': failed to convert 'two' to integral number",
        ),
        (
            "inter_op_thread_count",
            "1.5",
            "parameter 'inter_op_thread_count': failed to convert '1.5' to integral number",
        ),
        (
            "execution_mode",
            "2",
            "Expected values for execution_mode are 0 or 1 but got 2 .",
        ),
        (
            "session.intra_op.allow_spinning",
            "yes",
            "parameter 'session.intra_op.allow_spinning': failed to convert 'yes' to boolean",
        ),
        (
            "session.inter_op.allow_spinning",
            "",
            "parameter 'session.inter_op.allow_spinning': failed to convert '' to boolean",
        ),
        (
            "enable_mem_arena",
            "maybe",
            "parameter 'enable_mem_arena': failed to convert 'maybe' to boolean",
        ),
    ],
)
def test_a_bad_value_is_an_invalid_argument_naming_the_parameter(
    key: str, value: str, message: str
) -> None:
    with pytest.raises(TritonliteError) as err:
        ortb.session_settings(cfg((key, value)))
    assert err.value.code == ErrorCode.INVALID_ARG
    assert message in err.value.message


@pytest.mark.parametrize("spinning", [True, False])
def test_what_tune_writes_is_what_the_backend_reads(spinning: bool) -> None:
    assert space.INTRA_OP_PARAMETER == ortb.INTRA_OP_THREADS
    assert space.SPINNING_PARAMETER == ortb.INTRA_OP_SPINNING
    assert space.ort_default_intra(8) == ortb.default_intra_op_threads(8)
    assert space.ort_default_intra(2) == ortb.default_intra_op_threads(2)
    tuned = space.apply(cfg(), space.Candidate(intra_op_threads=1, spinning=spinning))
    opts = ortb.session_options(ortb.session_settings(tuned))
    assert opts.intra_op_num_threads == 1
    assert entry(opts, ortb.INTRA_OP_SPINNING) == ("1" if spinning else "0")
    assert space.from_config(tuned) == space.Candidate(intra_op_threads=1, spinning=spinning)


def test_a_real_load_spins_when_asked_and_refuses_a_bad_value(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    one = "instance_group [{count: 1 kind: KIND_CPU}]\n"
    spin = param("session.intra_op.allow_spinning", "1") + param("intra_op_thread_count", "2")
    write_identity(repo, "spinning", "FP32", [-1], 8, one + spin + "dynamic_batching { }\n")
    write_identity(repo, "bad", "FP32", [-1], 8, one + param("execution_mode", "parallel"))

    async def main() -> None:
        core = InferenceCore(ServerOptions(model_repositories=(repo,)))
        failed = await core.start()
        try:
            assert failed == ["bad"]
            rows = {r["name"]: r for r in core.repository_index()}
            assert rows["spinning"]["state"] == "READY"
            assert rows["bad"]["state"] == "UNAVAILABLE"
            assert (
                "parameter 'execution_mode': failed to convert 'parallel' to integral number"
                in rows["bad"]["reason"]
            )
            # The live session carries them (ORT reads them back from its own options).
            (inst,) = core.repository.get("spinning").instances
            live = inst.impl._session.get_session_options()
            assert live.intra_op_num_threads == 2  # batched: the parallelism of a run
            assert entry(live, ortb.INTRA_OP_SPINNING) == "1"
            assert entry(live, ortb.INTER_OP_SPINNING) == "0"
            data = np.arange(4, dtype=np.float32).reshape(1, 4)
            req = InferRequest(
                model_name="spinning", inputs=[InferInput("INPUT0", "FP32", (1, 4), data)]
            )
            resp = await core.infer(req)
            np.testing.assert_array_equal(resp.outputs[0].data, data)
        finally:
            await core.stop()

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_thread_defaults_follow_the_cpu_affinity_not_the_machine() -> None:
    cores = len(os.sched_getaffinity(0))
    assert ortb.available_cores() == space.available_cores() == cores
    expected = ortb.default_intra_op_threads(cores)
    assert ortb.session_settings(cfg()).intra_op_threads == expected
