"""Model repositories the benchmarks serve, generated on the spot (nothing here is committed data).

Two models, each in two twins with the same name, inputs, outputs, dims and max_batch_size:

* ``add_sub``: FP32[16] x 2 -> OUTPUT0 = a + b, OUTPUT1 = a - b; max_batch_size 8,
  ``dynamic_batching {}``. Tiny compute: what it measures is the server's own cost per request.
* ``mlp``: FP32[1024] -> 4 x (MatMul 1024x1024 + Add + Relu) -> FP32[1024]; max_batch_size 64.
  Random weights from a fixed seed, so every twin computes the same function. Batch-efficient:
  one sample reads all 16 MiB of weights (a matrix-vector product, memory-bound), 64 samples
  reuse them (a matrix-matrix product, compute-bound), so batching multiplies throughput.
  ``mlp`` has ``dynamic_batching { max_queue_delay_microseconds: MLP_QUEUE_DELAY_US }``;
  ``mlp_nobatch`` is the same model with no ``dynamic_batching`` block (every request runs alone).

Twins: ONNX (``platform: "onnxruntime_onnx"``, what tritonlite runs) and Python backend
(``backend: "python"``, a ``model.py`` running numpy; the only kind of model the reference
tritonserver of tools/triton-reference.sh can run). The Python ``mlp`` twin stacks the requests
of a batch and runs one numpy matmul chain over them, so it is batch-efficient like the ONNX one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools import onnx_graphs  # noqa: E402  (the one copy of the ONNX graph code)

MLP_WIDTH = 1024
MLP_LAYERS = 4
MLP_MAX_BATCH = 64
# Why 100 us (Triton's documentation uses it in its dynamic batching examples, and so does the
# mlp of model_repository/): under load the delay is what a free instance waits, with a partial
# batch queued, for the oldest request to have waited that long. Measured on 2 cores, native
# HTTP, concurrency 16 (bench/RESULTS.md, Issue 16 (19)): 500 us 5,310-5,350 req/s, 100 us
# 6,120-6,160, 0 us 5,790-6,050. At concurrency 1 every request waits the whole delay, so a
# short one costs least there too.
MLP_QUEUE_DELAY_US = 100
SEED = 20240601

ADD_SUB_IO = """max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

MLP_IO = f"""max_batch_size: {MLP_MAX_BATCH}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {MLP_WIDTH} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {MLP_WIDTH} ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""

DYNAMIC = {
    "add_sub": "dynamic_batching { }\n",
    "mlp": f"dynamic_batching {{ max_queue_delay_microseconds: {MLP_QUEUE_DELAY_US} }}\n",
    "mlp_nobatch": "",
}

ADD_SUB_PY = '''\
"""add_sub, Python backend: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 (bench twin)."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pass

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
'''

MLP_PY = '''\
"""MLP, Python backend: 4 x (x @ W + b, relu) with numpy over the whole batch (bench twin).

The weights sit next to this file in weights.npz, the same values as the ONNX twin's."""
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        here = os.path.dirname(os.path.abspath(__file__))
        with np.load(os.path.join(here, "weights.npz")) as z:
            self.layers = [(z["w%d" % i], z["b%d" % i]) for i in range(len(z.files) // 2)]

    def execute(self, requests):
        xs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        x = np.concatenate(xs, axis=0) if len(xs) > 1 else xs[0]
        for w, b in self.layers:
            x = np.maximum(x @ w + b, 0.0, dtype=np.float32)
        responses, row = [], 0
        for part in xs:
            n = part.shape[0]
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT0", x[row:row + n])]))
            row += n
        return responses
'''


def mlp_weights() -> list[tuple[np.ndarray, np.ndarray]]:
    """The MLP's (W, b) per layer, the same for every twin."""
    return onnx_graphs.mlp_weights(MLP_LAYERS, MLP_WIDTH, SEED)


def mlp_reference(x: np.ndarray) -> np.ndarray:
    """What every MLP twin computes (for checks)."""
    return onnx_graphs.mlp_reference(x, MLP_LAYERS, MLP_WIDTH, SEED)


def _save_onnx(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def _write(model_dir: Path, header: str, io: str, dynamic: str) -> None:
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(f'name: "{model_dir.name}"\n{header}\n{io}{dynamic}')


def write_onnx_repo(
    repo: Path, models: tuple[str, ...] = ("add_sub", "mlp", "mlp_nobatch")
) -> Path:
    """tritonlite's repository: ONNX twins."""
    for name in models:
        d = repo / name
        if name == "add_sub":
            _write(d, 'platform: "onnxruntime_onnx"', ADD_SUB_IO, DYNAMIC[name])
            _save_onnx(onnx_graphs.add_sub("FP32", (16,)), d / "1" / "model.onnx")
        else:
            _write(d, 'platform: "onnxruntime_onnx"', MLP_IO, DYNAMIC[name])
            _save_onnx(onnx_graphs.mlp(MLP_LAYERS, MLP_WIDTH, seed=SEED), d / "1" / "model.onnx")
    return repo


def write_python_repo(
    repo: Path, models: tuple[str, ...] = ("add_sub", "mlp", "mlp_nobatch")
) -> Path:
    """The Python-backend twins (what the reference tritonserver runs)."""
    for name in models:
        d = repo / name
        if name == "add_sub":
            _write(d, 'backend: "python"', ADD_SUB_IO, DYNAMIC[name])
            (d / "1" / "model.py").write_text(ADD_SUB_PY)
        else:
            _write(d, 'backend: "python"', MLP_IO, DYNAMIC[name])
            (d / "1" / "model.py").write_text(MLP_PY)
            arrays: dict[str, Any] = {}
            for i, (w, b) in enumerate(mlp_weights()):
                arrays[f"w{i}"], arrays[f"b{i}"] = w, b
            np.savez(d / "1" / "weights.npz", allow_pickle=False, **arrays)
    return repo


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench_repos")
    write_onnx_repo(out / "onnx")
    write_python_repo(out / "python")
    print(f"wrote {out / 'onnx'} and {out / 'python'} (add_sub, mlp, mlp_nobatch)")
