#!/usr/bin/env bash
# The real Triton Inference Server as a reference to diff tritonlite against, on a CPU-only machine.
#
# The tritonserver binary comes from the PyPI wheel nvidia-pytriton 0.7.0, which ships it together
# with its Python backend and nothing else (no ONNX Runtime, PyTorch or TensorRT backend): every
# reference model is therefore a Python-backend model (a model.py file).
#
#   tools/triton-reference.sh install DIR
#       DIR/venv (nvidia-pytriton 0.7.0) and DIR/tree/{bin,backends,caches} with the stub for
#       DIR/venv's Python copied into backends/python/.
#   tools/triton-reference.sh start DIR REPO HTTP_PORT GRPC_PORT METRICS_PORT [tritonserver flags...]
#       runs tritonserver in the background on 127.0.0.1 (installing first if needed), waits until
#       /v2/health/ready answers 200, prints "PID LOGFILE" and writes DIR/triton.pid; exits non-zero,
#       with the log's tail on stderr, if the server dies or is not ready within 90 s.
#   tools/triton-reference.sh stop DIR
#       stops the server started by `start` (SIGTERM, then SIGKILL after 15 s).
#
# model.py files run under DIR/venv's python (the wheel brings numpy); pip-install more into
# DIR/venv when a reference model needs it.
set -euo pipefail
usage="usage: tools/triton-reference.sh install|start|stop DIR ..."
action=${1:?$usage}
DIR=${2:?$usage}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
VPY="$DIR/venv/bin/python"

site_packages() { "$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

case "$action" in
install)
  [ -x "$VPY" ] || "${PYTHON:-python3}" -m venv "$DIR/venv"
  "$DIR/venv/bin/pip" install -q --disable-pip-version-check nvidia-pytriton==0.7.0
  src="$(site_packages)/pytriton/tritonserver"
  rm -rf "$DIR/tree"
  mkdir -p "$DIR/tree"
  cp -r "$src/bin" "$src/backends" "$src/caches" "$DIR/tree/"
  pyver=$("$VPY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  stub="$src/python_backend_stubs/$pyver/triton_python_backend_stub"
  [ -f "$stub" ] || { echo "no Python backend stub for Python $pyver in the wheel" >&2; exit 1; }
  cp "$stub" "$DIR/tree/backends/python/"
  echo "tritonserver installed under $DIR/tree"
  ;;
start)
  REPO=${3:?REPO}; HTTP_PORT=${4:?HTTP_PORT}; GRPC_PORT=${5:?GRPC_PORT}; METRICS_PORT=${6:?METRICS_PORT}
  shift 6
  [ -x "$DIR/tree/bin/tritonserver" ] || "$0" install "$DIR" >&2
  log="$DIR/triton-$HTTP_PORT.log"
  libs="$(site_packages)/nvidia_pytriton.libs"
  # libtritonserver and its CUDA stubs sit in the wheel's .libs folder; the Python backend stub
  # starts the interpreter it finds as `python3` on PATH, which must be the venv's (numpy).
  LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$DIR/venv/bin:$PATH" \
    nohup "$DIR/tree/bin/tritonserver" \
      --model-repository="$REPO" \
      --backend-directory="$DIR/tree/backends" --cache-directory="$DIR/tree/caches" \
      --http-address=127.0.0.1 --http-port="$HTTP_PORT" \
      --grpc-address=127.0.0.1 --grpc-port="$GRPC_PORT" \
      --metrics-address=127.0.0.1 --metrics-port="$METRICS_PORT" \
      --allow-gpu-metrics=false "$@" >"$log" 2>&1 &
  pid=$!
  echo "$pid" >"$DIR/triton.pid"
  ready_url="http://127.0.0.1:$HTTP_PORT/v2/health/ready"
  for _ in $(seq 1 180); do
    if "$VPY" -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=1)' "$ready_url" \
        2>/dev/null; then
      echo "$pid $log"
      exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "tritonserver exited before it was ready; end of $log:" >&2
      tail -n 40 "$log" >&2
      exit 1
    fi
    sleep 0.5   # polling interval for readiness, not a synchronisation point
  done
  echo "tritonserver not ready after 90 s; end of $log:" >&2
  tail -n 40 "$log" >&2
  kill "$pid" 2>/dev/null || true
  exit 1
  ;;
stop)
  [ -f "$DIR/triton.pid" ] || exit 0
  pid=$(cat "$DIR/triton.pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR/triton.pid"
  ;;
*)
  echo "$usage" >&2
  exit 2
  ;;
esac
