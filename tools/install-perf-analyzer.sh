#!/usr/bin/env bash
# Install Triton's perf_analyzer (the C++ client binary) into DIR and write DIR/perf_analyzer,
# a wrapper that puts the libraries it links on LD_LIBRARY_PATH. Idempotent: does nothing when
# DIR/perf_analyzer --version already works.
#
#   tools/install-perf-analyzer.sh DIR        then   DIR/perf_analyzer -m MODEL -u 127.0.0.1:8000
#
# perf_analyzer ships in the PyPI wheel tritonclient[all]; 2.51.0 is the newest release whose
# binary runs on glibc 2.36 (Debian 12), so it goes into a virtualenv of its own (DIR/venv),
# apart from the tritonclient the tests use. The binary links libb64.so.0d (Debian: libb64-0d)
# and libcudart.so.12 (PyPI: nvidia-cuda-runtime-cu12), even on a machine without a GPU.
# PYTHON picks the interpreter for DIR/venv (default python3); pip's output goes to DIR/install.log.
set -euo pipefail
DIR=${1:?usage: install-perf-analyzer.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -x "$DIR/perf_analyzer" ] && "$DIR/perf_analyzer" --version >/dev/null 2>&1; then
  exit 0
fi
LOG="$DIR/install.log"
: >"$LOG"
fail() {
  echo "install-perf-analyzer: $1 (end of $LOG follows)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
}

if ! ldconfig -p | grep -q 'libb64\.so\.0d'; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-perf-analyzer: perf_analyzer needs libb64.so.0d: apt-get install libb64-0d" >&2
    exit 1
  fi
  # A fresh machine may have no package lists yet; update only when the first try fails.
  if ! apt-get install -y -q libb64-0d >>"$LOG" 2>&1; then
    apt-get update -q >>"$LOG" 2>&1 || fail "apt-get update failed"
    apt-get install -y -q libb64-0d >>"$LOG" 2>&1 || fail "apt-get install libb64-0d failed"
  fi
fi

[ -x "$DIR/venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$DIR/venv" >>"$LOG" 2>&1 \
  || fail "could not create $DIR/venv"
"$DIR/venv/bin/python" -m pip install -q --disable-pip-version-check \
  'tritonclient[all]==2.51.0' nvidia-cuda-runtime-cu12 >>"$LOG" 2>&1 \
  || fail "pip install tritonclient[all]==2.51.0 nvidia-cuda-runtime-cu12 failed"
CUDART=$("$DIR/venv/bin/python" -c \
  'import os, nvidia.cuda_runtime as m; print(os.path.join(list(m.__path__)[0], "lib"))')
[ -x "$DIR/venv/bin/perf_analyzer" ] || fail "the wheel installed no perf_analyzer binary"

cat >"$DIR/perf_analyzer.tmp" <<WRAPPER
#!/usr/bin/env bash
# Written by tools/install-perf-analyzer.sh: Triton's perf_analyzer with the libraries it links.
export LD_LIBRARY_PATH="$CUDART\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$DIR/venv/bin/perf_analyzer" "\$@"
WRAPPER
chmod +x "$DIR/perf_analyzer.tmp"
mv "$DIR/perf_analyzer.tmp" "$DIR/perf_analyzer"
"$DIR/perf_analyzer" --version || fail "perf_analyzer --version failed"
