"""GPU benchmark: a ResNet-50-sized model served by tritonlite vs the same model run in-process.

    python bench/bench_gpu.py --out DIR [--batches 1,8,32] [--concurrency 2]

Builds a ResNet-50 (bottleneck blocks 3-4-6-3, random weights from a fixed seed) in torch, saves
it as TorchScript (``model.pt``) and, when torch's ONNX exporter works here, as ONNX
(``model.onnx``); serves both from one tritonlite on KIND_GPU and measures, in one invocation:

* in-process: the module / ORT CUDA session called in a loop on pinned host inputs, copies to and
  from the device included (what a server must do too), images/s at each batch size;
* served: perf_analyzer over gRPC at each batch size, with inputs in system shared memory and,
  for the same points, in CUDA shared memory;

and writes ``gpu.csv``, ``gpu.json`` and a table (``gpu.md``) under DIR. Needs a CUDA device, a
CUDA build of torch, perf_analyzer (``$PERF_ANALYZER``), and onnxruntime-gpu for the ONNX rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from perf import Point, TritonliteServer, parse_stdout, perf_analyzer_bin  # noqa: E402


def resnet50() -> Any:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.skip = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.relu(self.body(x) + self.skip(x))

    layers: list[nn.Module] = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    torch.manual_seed(0)
    return nn.Sequential(*layers).eval()


CONFIG = """platform: "{platform}"
max_batch_size: 32
input {{ name: "{inp}" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] }}
output {{ name: "{out}" data_type: TYPE_FP32 dims: [ 1000 ] }}
instance_group [ {{ kind: KIND_GPU count: 2 gpus: [ 0 ] }} ]
dynamic_batching {{ }}
"""


def build_repo(repo: Path) -> dict[str, str]:
    """Write the models; returns model name -> what it is (models that could not be built are
    left out, with the reason printed)."""
    import torch

    model = resnet50()
    built = {}
    (repo / "resnet50_pt" / "1").mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(model, torch.randn(1, 3, 224, 224)).save(
            str(repo / "resnet50_pt" / "1" / "model.pt")
        )
    (repo / "resnet50_pt" / "config.pbtxt").write_text(
        CONFIG.format(platform="pytorch_libtorch", inp="INPUT__0", out="OUTPUT__0")
    )
    built["resnet50_pt"] = "TorchScript"
    try:
        (repo / "resnet50_onnx" / "1").mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (torch.randn(1, 3, 224, 224),),
                str(repo / "resnet50_onnx" / "1" / "model.onnx"),
                input_names=["input"],
                output_names=["logits"],
                dynamic_axes={"input": {0: "b"}, "logits": {0: "b"}},
                dynamo=False,
            )
        (repo / "resnet50_onnx" / "config.pbtxt").write_text(
            CONFIG.format(platform="onnxruntime_onnx", inp="input", out="logits")
        )
        built["resnet50_onnx"] = "ONNX"
    except Exception as exc:  # the exporter's dependencies vary by torch version
        print(f"ONNX export failed, ONNX rows skipped: {exc}", flush=True)
    return built


def in_process(repo: Path, name: str, batch: int, seconds: float = 5.0) -> float:
    """Images/s of the model called directly, host -> device -> host each call."""
    import numpy as np
    import torch

    host = torch.randn(batch, 3, 224, 224).pin_memory()
    if name.endswith("_pt"):
        module = torch.jit.load(str(repo / name / "1" / "model.pt"), map_location="cuda:0")

        def call() -> None:
            with torch.inference_mode():
                module(host.to("cuda:0", non_blocking=True)).cpu()
    else:
        import onnxruntime as ort

        session = ort.InferenceSession(
            str(repo / name / "1" / "model.onnx"), providers=["CUDAExecutionProvider"]
        )
        feed = {"input": host.numpy()}

        def call() -> None:
            np.asarray(session.run(["logits"], feed)[0])

    for _ in range(5):
        call()
    torch.cuda.synchronize()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        n += 1
    return n * batch / (time.perf_counter() - start)


def served(pa: Path, url: str, name: str, batch: int, concurrency: int, shm: str) -> Point:
    point = Point("tritonlite", name, name, "grpc", concurrency)
    cmd = [
        str(pa),
        "-m",
        name,
        "-u",
        url,
        "-i",
        "grpc",
        "-b",
        str(batch),
        "--concurrency-range",
        f"{concurrency}:{concurrency}",
        "--measurement-interval",
        "3000",
        "--stability-percentage",
        "30",
        "--max-trials",
        "8",
        f"--shared-memory={shm}",
        "--output-shared-memory-size",
        str(batch * 1000 * 4),
    ]
    point.command = " ".join(cmd)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0:
        point.status = f"failed (rc {proc.returncode}): {out.strip().splitlines()[-1][:160]}"
    else:
        parse_stdout(point, out)
        point.throughput *= batch  # perf_analyzer counts requests; a request carries `batch` images
    return point


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    repo = out / "repo"
    models = build_repo(repo)
    batches = [int(b) for b in args.batches.split(",")]
    pa = perf_analyzer_bin()
    server = TritonliteServer(repo, out / "tritonlite.log")
    ports = server.start(timeout_s=300)
    rows: list[dict[str, Any]] = []
    try:
        for name, kind in models.items():
            for batch in batches:
                base = in_process(repo, name, batch)
                row: dict[str, Any] = {
                    "model": kind,
                    "batch": batch,
                    "in_process_img_s": round(base, 1),
                }
                for shm in ("system", "cuda"):
                    p = served(pa, f"127.0.0.1:{ports['grpc']}", name, batch, args.concurrency, shm)
                    row[f"served_{shm}_img_s"] = round(p.throughput, 1) if p.ok else p.status
                    row[f"served_{shm}_p50_us"] = p.p50_us
                sys_tp = row["served_system_img_s"]
                if isinstance(sys_tp, float) and base:
                    row["served_over_in_process"] = round(sys_tp / base, 3)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        server.stop()
    (out / "gpu.json").write_text(json.dumps(rows, indent=2))
    cols = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    (out / "gpu.md").write_text("\n".join(lines) + "\n")
    (out / "gpu.csv").write_text(
        "\n".join([",".join(cols)] + [",".join(str(r.get(c, "")) for c in cols) for r in rows])
        + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
