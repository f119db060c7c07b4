#!/usr/bin/env bash
# Points of side_by_side.sh with p99 and the dynamic batcher's batch sizes: two tritonlite trees
# and the real Triton up at once, and for each point the three alternated (the order rotates by
# point and round), so that the machine's load moves all three alike. The MLP points by default;
# POINTS may name any model of REPO (add_sub_nb, identity_4m too).
#
#   BASE=tree THIS=tree REPO=dir PA=perf_analyzer CPR=cpu-per-request \
#   TRITON="triton-reference start INSTALL" ROUNDS=2 bench/mlp_side_by_side.sh > out.txt
#
# REPO holds mlp (model_repository/mlp: 4 x 1024^2 FP32, max_batch_size 64,
# dynamic_batching { max_queue_delay_microseconds: 100 }) and mlp_nb (the same without
# dynamic_batching). One line per cell: served req/s and server CPU us per request (CPR),
# the event loop's busy share, cores used, perf_analyzer's p99 (n/s: no stable window), and
# from the model's statistics over the run the mean batch, compute us per execution and the
# commonest batch sizes (size, executions).
set -u
: "${BASE:?}" "${THIS:?}" "${REPO:?}" "${PA:?}" "${CPR:?}" "${TRITON:?}"
PY=${PY:-python}
POINTS=${POINTS:-"mlp:http:16 mlp:grpc:16 mlp:http:4 mlp:grpc:4 mlp_nb:http:16"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
start_tl() { # tree port
  (cd "$1" && PYTHONPATH=$1 exec $PY -m tritonlite --model-repository "$REPO" --http-port "$2" \
    --grpc-port $(($2 + 1)) --metrics-port $(($2 + 2)) --http-address 127.0.0.1 \
    --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 --log-info false) >/dev/null 2>&1 &
  echo $!
}
wait_ready() {
  for _ in $(seq 120); do
    curl -sf "localhost:$1/v2/models/mlp/ready" >/dev/null &&
      curl -sf "localhost:$1/v2/models/mlp_nb/ready" >/dev/null && return 0
    sleep 0.5
  done
  return 1
}
cell() { # name pid port model protocol concurrency
  local name=$1 pid=$2 p=$3 m=$4 proto=$5 c=$6 u=127.0.0.1:$3 shape=""
  [ "$proto" = grpc ] && u=127.0.0.1:$(($p + 1))
  [ "${m#mlp}" != "$m" ] && shape="--shape INPUT0:1024" # the MLP's batch dimension is -1
  # shellcheck disable=SC2086
  $PA -m "$m" -u "$u" -i "$proto" --concurrency-range "$c" --measurement-interval 1000 \
    --max-trials 2 $shape >/dev/null 2>&1 # warm-up
  curl -s "127.0.0.1:$p/v2/models/$m/stats" >"$TMP/s0"
  # shellcheck disable=SC2086
  $CPR --pid "$pid" --stats "127.0.0.1:$p" --model "$m" -- $PA -m "$m" -u "$u" -i "$proto" \
    --concurrency-range "$c" --measurement-interval 3000 --max-trials 4 \
    --stability-percentage 50 $shape -f "$TMP/pa.csv" 2>/dev/null | tail -1 >"$TMP/cpr"
  curl -s "127.0.0.1:$p/v2/models/$m/stats" >"$TMP/s1"
  $PY - "$name $m $proto c=$c load=$(cut -d' ' -f1 /proc/loadavg)" "$TMP" <<'EOF'
import csv, json, os, sys
tag, tmp = sys.argv[1:]
def stats(path):
    d = json.load(open(path))["model_stats"][0]
    b = {x["batch_size"]: (x["compute_infer"]["count"], x["compute_infer"]["ns"]) for x in d.get("batch_stats", [])}
    return d["execution_count"], d["inference_count"], b
e0, i0, b0 = stats(f"{tmp}/s0"); e1, i1, b1 = stats(f"{tmp}/s1")
ex, inf = e1 - e0, i1 - i0
hist = {k: v[0] - b0.get(k, (0, 0))[0] for k, v in b1.items() if v[0] - b0.get(k, (0, 0))[0] > 0}
ns = sum(v[1] - b0.get(k, (0, 0))[1] for k, v in b1.items())
cpr = json.loads(open(f"{tmp}/cpr").read() or "{}")
p99 = "n/s"
if os.path.exists(f"{tmp}/pa.csv"):
    rows = list(csv.DictReader(open(f"{tmp}/pa.csv")))
    if rows:
        p99 = int(rows[-1]["p99 latency"]) / 1000
    os.remove(f"{tmp}/pa.csv")
rps, cpu = cpr.get("requests_per_s", 0), cpr.get("cpu_us_per_request") or 0
top = sorted(hist.items(), key=lambda kv: -kv[1])[:6]
print(f"{tag} rps={rps:.0f} cpu/req={cpu:.0f} main_busy={cpr.get('main_thread_busy')} "
      f"cores={rps * cpu / 1e6:.2f} p99ms={p99} meanbatch={inf / max(ex, 1):.2f} "
      f"compute_us/exec={ns / max(ex, 1) / 1000:.0f} hist={top}", flush=True)
EOF
}
for round in $(seq 0 $((${ROUNDS:-2} - 1))); do
  PB=$((34000 + round * 100))
  PT=$((PB + 10))
  PR=$((PB + 20))
  bpid=$(start_tl "$BASE" $PB)
  tpid=$(start_tl "$THIS" $PT)
  read -r rpid _ < <($TRITON "$REPO" $PR $((PR + 1)) $((PR + 2)))
  wait_ready $PB && wait_ready $PT && wait_ready $PR || exit 1
  i=0
  for pt in $POINTS; do
    order=("base $bpid $PB" "this $tpid $PT" "triton $rpid $PR")
    for k in 0 1 2; do
      # shellcheck disable=SC2086
      set -- ${order[$(((k + i + round) % 3))]}
      cell "r$round $1" "$2" "$3" ${pt//:/ }
    done
    i=$((i + 1))
  done
  kill "$bpid" "$tpid" "$rpid"
  sleep 2
done
