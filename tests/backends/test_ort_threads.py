"""How many intra-op threads the ONNX Runtime backend gives a session, configured and default.

``intra_op_thread_count`` is the parallelism of a run, as in Triton. A session whose batches
start with ``run_async`` runs the graph on one of its pool's threads rather than the caller's,
so its pool is one thread larger; a session that runs on its instance thread (one thread asked
for, ORT's own choice, string tensors) gets the count as it is. Real models in a real
InferenceCore: the counts are read back from the live sessions' options, and each model answers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from onnx_models import write_identity

from tritonlite._proto import pb
from tritonlite.backends import onnxruntime as ortb
from tritonlite.contracts.types import InferInput, InferRequest
from tritonlite.core.core import InferenceCore
from tritonlite.options import ServerOptions

pytestmark = pytest.mark.timeout(60)

ONE = "instance_group [{count: 1 kind: KIND_CPU}]\n"
BATCHING = "dynamic_batching { }\n"


def _intra(n: int) -> str:
    return f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{n}" }} }}\n'


def _cfg() -> Any:
    return text_format.Parse('name: "m"\nplatform: "onnxruntime_onnx"\n', pb.ModelConfig())


# model -> (config extra, datatype, live intra_op_num_threads, starts batches with run_async)
def _cases() -> dict[str, tuple[str, str, int, bool]]:
    default = ortb.default_intra_op_threads(ortb.available_cores())
    return {
        "default": (ONE, "FP32", default + 1, True),
        "asked_2": (ONE + _intra(2), "FP32", 3, True),
        "asked_3": (ONE + _intra(3), "FP32", 4, True),
        # a batcher keeps the loop busy while a run goes: no extra pool thread there
        "batched_default": (ONE + BATCHING, "FP32", default, True),
        "batched_2": (ONE + _intra(2) + BATCHING, "FP32", 2, True),
        "asked_1": (ONE + _intra(1) + BATCHING, "FP32", 1, False),
        "ort_choice": (ONE + _intra(0) + BATCHING, "FP32", 0, False),
        "strings": (ONE + _intra(2) + BATCHING, "BYTES", 2, False),
        "strings_default": (ONE + BATCHING, "BYTES", default, False),
    }


def test_pool_threads_adds_the_runner_only_to_run_async_sessions() -> None:
    assert [ortb.pool_threads(n, True) for n in (0, 1, 2, 3, 7)] == [0, 1, 3, 4, 8]
    assert [ortb.pool_threads(n, False) for n in (0, 1, 2, 3, 7)] == [0, 1, 2, 3, 7]
    s = ortb.session_settings(_cfg(), cores=2)
    assert s.intra_op_threads == 2  # the setting stays the parallelism asked for
    assert ortb.session_options(s).intra_op_num_threads == 2
    assert ortb.session_options(s, starts_async=True).intra_op_num_threads == 3


def test_live_sessions_get_the_parallelism_plus_the_run_async_runner(tmp_path: Path) -> None:
    cases = _cases()
    repo = tmp_path / "repo"
    for name, (extra, dtype, _, _) in cases.items():
        write_identity(repo, name, dtype, [-1], 8, extra)

    async def main() -> None:
        core = InferenceCore(ServerOptions(model_repositories=(repo,)))
        assert await core.start() == []
        try:
            for name, (_, dtype, threads, starts_async) in cases.items():
                (inst,) = core.repository.get(name).instances
                live = inst.impl._session.get_session_options()
                assert (name, live.intra_op_num_threads) == (name, threads)
                assert (name, inst.impl.runs_async) == (name, starts_async)
                inst.allow_inline(False)  # the batch leaves the loop: run_async where it can
                if dtype == "BYTES":
                    data: Any = np.array([[b"a", b"bc"]], dtype=object)
                else:
                    data = np.arange(4, dtype=np.float32).reshape(1, 4)
                req = InferRequest(
                    model_name=name, inputs=[InferInput("INPUT0", dtype, data.shape, data)]
                )
                resp = await core.infer(req)
                np.testing.assert_array_equal(resp.outputs[0].data, data)
        finally:
            await core.stop()

    asyncio.run(main())
