#!/usr/bin/env bash
# One prepared run on a machine with an NVIDIA GPU, from the repository root:
#
#   OUT=DIR bash bench/gpu_check.sh [WHEEL_DIR]
#
# 1. records the machine (nvidia-smi, versions of python, torch, onnxruntime, tensorrt);
# 2. makes .gpu-venv, a virtualenv that sees the system's packages (CUDA torch, onnxruntime-gpu,
#    tensorrt are often preinstalled on such machines), and installs what is still missing:
#    from WHEEL_DIR when given (no index), else from the package index;
# 3. builds tritonlite's Cython extension in place (the pure-Python twins serve if it fails);
# 4. runs the gpu-marked tests (tests/gpu) and the shared-memory and PyTorch suites;
# 5. runs bench/bench_gpu.py (ResNet-50-sized ONNX and TorchScript models, perf_analyzer at
#    batch 1/8/32, system vs CUDA shared memory, in-process baseline).
# Everything lands under $OUT (default bench/results/gpu); summary.txt says what ran and how it
# ended. A step that fails is recorded and the next one still runs; the exit status is that of
# the test step.
set -uo pipefail
OUT=${OUT:-bench/results/gpu}
WHEELS=${1:-}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "== $*" | tee -a "$SUMMARY"; }

note "start $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (see nvidia-smi.txt)"

[ -x .gpu-venv/bin/python ] || "$PY" -m venv --system-site-packages .gpu-venv
VPY=$PWD/.gpu-venv/bin/python
pip_install() {
  if [ -n "$WHEELS" ]; then
    "$VPY" -m pip install -q --no-index --find-links "$WHEELS" "$@"
  else
    "$VPY" -m pip install -q "$@"
  fi
}
# import name -> requirement
while read -r mod req; do
  "$VPY" -c "import $mod" 2>/dev/null && continue
  pip_install "$req" >>"$OUT/pip.log" 2>&1 && note "installed $req" || note "could not install $req"
done <<'EOF'
numpy numpy>=1.26
numba numba>=0.60
aiohttp aiohttp>=3.9
orjson orjson>=3.9
grpc grpcio>=1.66
grpc_health grpcio-health-checking>=1.66
google.protobuf protobuf>=5.28,<7
prometheus_client prometheus-client>=0.20
ml_dtypes ml-dtypes<=0.5.4
uvloop uvloop>=0.19
onnx onnx>=1.16
onnxruntime onnxruntime-gpu
pytest pytest>=8
pytest_timeout pytest-timeout>=2.3
hypothesis hypothesis>=6.100
tritonclient tritonclient[http,grpc]==2.73.0
cuda cuda-python
Cython cython>=3.0
EOF

"$VPY" - >"$OUT/versions.txt" 2>&1 <<'EOF'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "onnxruntime", "tensorrt", "numpy", "tritonclient", "cuda"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "?"))
    except Exception as exc:
        print(name, "missing:", exc)
try:
    import torch
    print("torch.cuda", torch.cuda.is_available(), torch.version.cuda, torch.cuda.device_count())
except Exception:
    pass
try:
    import onnxruntime as ort
    print("ort providers", ort.get_available_providers())
except Exception:
    pass
EOF
cat "$OUT/versions.txt" >>"$SUMMARY"

if "$VPY" setup.py build_ext --inplace >"$OUT/build.log" 2>&1; then
  note "Cython extension built"
else
  note "Cython extension did not build (see build.log): the pure-Python twins serve"
  export TRITONLITE_NO_EXTENSIONS=1
fi

if [ -z "${PERF_ANALYZER:-}" ]; then
  if PYTHON="$PY" bash tools/install-perf-analyzer.sh .tools/perf_analyzer >"$OUT/perf_analyzer.log" 2>&1; then
    export PERF_ANALYZER=$PWD/.tools/perf_analyzer/perf_analyzer
  else
    note "perf_analyzer could not be installed (see perf_analyzer.log); its tests and the served rows skip"
  fi
fi

export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
"$VPY" -m pytest -p no:cacheprovider -rs -q tests/gpu tests/core/test_cuda_shm.py \
  tests/compat/test_pytorch_models.py tests/backends >"$OUT/gpu_tests.txt" 2>&1
TESTS_RC=$?
note "tests: rc $TESTS_RC; $(tail -n 1 "$OUT/gpu_tests.txt")"
grep -E "^(SKIPPED|FAILED|ERROR)" "$OUT/gpu_tests.txt" >>"$SUMMARY" || true

if [ -n "${PERF_ANALYZER:-}" ]; then
  if "$VPY" bench/bench_gpu.py --out "$OUT/bench" >"$OUT/bench.txt" 2>&1; then
    note "benchmark done: $OUT/bench/gpu.md"
    cat "$OUT/bench/gpu.md" >>"$SUMMARY"
  else
    note "benchmark failed: $(tail -n 3 "$OUT/bench.txt" | tr '\n' ' ')"
  fi
fi
note "end $(date -u +%FT%TZ)"
exit $TESTS_RC
