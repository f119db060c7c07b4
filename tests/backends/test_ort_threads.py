"""How many intra-op threads the ONNX Runtime backend gives a session, configured and default.

``intra_op_thread_count`` is the parallelism of a run, as in Triton, and the session's pool has
that many threads whichever way its batches leave the loop: ``run`` on the instance thread
one batch at a time with the loop building the responses (``thread+batch``: a model with a
batcher), ``run`` on the instance thread that takes the next request (``thread+next``: a
model without), or ``run`` on the instance thread building its responses there (``thread``:
one thread asked for, ORT's own choice, string tensors). Real models in a real InferenceCore: the counts are read back from the live
sessions' options, and each model answers.
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


# model -> (config extra, datatype, live intra_op_num_threads, off-loop mode)
def _cases() -> dict[str, tuple[str, str, int, str]]:
    default = ortb.default_intra_op_threads(ortb.available_cores())
    return {
        "default": (ONE, "FP32", default, "thread+next"),
        "asked_2": (ONE + _intra(2), "FP32", 2, "thread+next"),
        "asked_3": (ONE + _intra(3), "FP32", 3, "thread+next"),
        "batched_default": (ONE + BATCHING, "FP32", default, "thread+batch"),
        "batched_2": (ONE + _intra(2) + BATCHING, "FP32", 2, "thread+batch"),
        "asked_1": (ONE + _intra(1) + BATCHING, "FP32", 1, "thread"),
        "unbatched_1": (ONE + _intra(1), "FP32", 1, "thread"),
        "ort_choice": (ONE + _intra(0) + BATCHING, "FP32", 0, "thread"),
        "strings": (ONE + _intra(2) + BATCHING, "BYTES", 2, "thread"),
        "strings_unbatched": (ONE + _intra(2), "BYTES", 2, "thread"),
        "strings_default": (ONE + BATCHING, "BYTES", default, "thread"),
    }


def test_the_session_options_carry_the_count_asked_for() -> None:
    s = ortb.session_settings(_cfg(), cores=2)
    assert s.intra_op_threads == 2  # the setting is the parallelism asked for
    assert ortb.session_options(s).intra_op_num_threads == 2


def test_live_sessions_get_the_parallelism_asked_for(tmp_path: Path) -> None:
    cases = _cases()
    repo = tmp_path / "repo"
    for name, (extra, dtype, _, _) in cases.items():
        write_identity(repo, name, dtype, [-1], 8, extra)

    async def main() -> None:
        core = InferenceCore(ServerOptions(model_repositories=(repo,)))
        assert await core.start() == []
        try:
            for name, (_, dtype, threads, mode) in cases.items():
                (inst,) = core.repository.get(name).instances
                live = inst.impl._session.get_session_options()
                assert (name, live.intra_op_num_threads) == (name, threads)
                assert (name, inst.mode, inst.depth) == (
                    name,
                    f"inline|{mode}",
                    2 if mode == "thread+next" else 1,
                )
                inst.policy.recent_ns = 10**9  # the request leaves the loop, in the mode tested
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
