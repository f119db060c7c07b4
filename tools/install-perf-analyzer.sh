#!/usr/bin/env bash
# Install Triton's perf_analyzer (the C++ client binary) into DIR and write DIR/perf_analyzer,
# a wrapper that puts the libraries it links on LD_LIBRARY_PATH. Idempotent.
#
#   tools/install-perf-analyzer.sh DIR        then   DIR/perf_analyzer -m MODEL -u 127.0.0.1:8000
#
# perf_analyzer ships in the PyPI wheel tritonclient[all]; 2.51.0 is the newest release whose
# binary runs on glibc 2.36 (Debian 12). It links libb64.so.0d (Debian: libb64-0d) and
# libcudart.so.12 (PyPI: nvidia-cuda-runtime-cu12) even on machines without a GPU.
set -euo pipefail
DIR=${1:?usage: install-perf-analyzer.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -x "$DIR/perf_analyzer" ] && "$DIR/perf_analyzer" --version >/dev/null 2>&1; then
  exit 0
fi
if ! ldconfig -p | grep -q 'libb64\.so\.0d'; then
  if ! apt-get install -y -q libb64-0d >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q libb64-0d >/dev/null
  fi
fi
PY=${PYTHON:-python3}
[ -x "$DIR/venv/bin/python" ] || "$PY" -m venv "$DIR/venv"
"$DIR/venv/bin/python" -m pip install -q --disable-pip-version-check \
  'tritonclient[all]==2.51.0' nvidia-cuda-runtime-cu12
CUDART=$("$DIR/venv/bin/python" -c \
  'import os, nvidia.cuda_runtime as m; print(os.path.join(list(m.__path__)[0], "lib"))')
cat > "$DIR/perf_analyzer" <<WRAPPER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$CUDART\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$DIR/venv/bin/perf_analyzer" "\$@"
WRAPPER
chmod +x "$DIR/perf_analyzer"
"$DIR/perf_analyzer" --version
