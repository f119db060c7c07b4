#!/usr/bin/env bash
# Two tritonlite trees and the real Triton, side by side on one model repository: server CPU per
# request (its kernel part), requests/s and cores, for each point below; servers alternated
# (base, this, Triton) in each round.
#
#   BASE=tree THIS=tree REPO=dir PA=perf_analyzer CPR=cpu-per-request \
#   TRITON="triton-reference start INSTALL" ROUNDS=2 bench/side_by_side.sh > out.txt
#
# REPO holds add_sub_nb (model_repository/add_sub without dynamic_batching), identity_4m
# (FP32[1048576] in and out, max_batch_size 0), mlp (model_repository/mlp) and mlp_nb (mlp
# without dynamic_batching). CPR is a tool that runs a load generator and prints one JSON line
# of the server's CPU per request (--pid, --stats HOST:PORT, --model, -- command). Each tree's
# server starts from inside that tree: `python -m` puts the working directory ahead of
# PYTHONPATH. POINTS replaces the perf_analyzer points: "model:protocol:concurrency ..." (wrk's
# JSON point always runs).
set -u
: "${BASE:?}" "${THIS:?}" "${REPO:?}" "${PA:?}" "${CPR:?}" "${TRITON:?}"
PY=${PY:-python}
LUA=$THIS/bench/json_add_sub.lua
start_tl() { # tree port
  (cd "$1" && PYTHONPATH=$1 exec $PY -m tritonlite --model-repository "$REPO" --http-port "$2" \
    --grpc-port $(($2 + 1)) --metrics-port $(($2 + 2)) --http-address 127.0.0.1 \
    --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 --log-info false) >/dev/null 2>&1 &
  echo $!
}
wait_ready() {
  for _ in $(seq 120); do
    curl -sf "localhost:$1/v2/models/mlp_nb/ready" >/dev/null && return 0
    sleep 0.5
  done
  return 1
}
pa() { # name pid port model protocol concurrency
  local name=$1 pid=$2 p=$3 m=$4 proto=$5 c=$6 u=127.0.0.1:$3
  [ "$proto" = grpc ] && u=127.0.0.1:$(($p + 1))
  $PA -m "$m" -u "$u" -i "$proto" --concurrency-range "$c" --measurement-interval 1000 \
    --max-trials 2 >/dev/null 2>&1 # warm-up
  echo "$name $m $proto c=$c load=$(cut -d' ' -f1 /proc/loadavg) $($CPR --pid "$pid" \
    --stats "127.0.0.1:$p" --model "$m" -- $PA -m "$m" -u "$u" -i "$proto" \
    --concurrency-range "$c" --measurement-interval 3000 --max-trials 4 \
    --stability-percentage 50 2>/dev/null | tail -1)"
}
points() { # name pid port
  local pt
  for pt in ${POINTS:-add_sub_nb:http:16 add_sub_nb:grpc:16 add_sub_nb:http:4 add_sub_nb:grpc:4 \
    identity_4m:grpc:4 mlp:http:16 mlp_nb:http:16 mlp_nb:grpc:16}; do
    # shellcheck disable=SC2086
    pa "$1" "$2" "$3" ${pt//:/ }
  done
  local url=http://127.0.0.1:$3/v2/models/add_sub_nb/infer
  wrk -t2 -c16 -d1s -s "$LUA" "$url" >/dev/null 2>&1
  echo "$1 add_sub_nb wrk c=16 load=$(cut -d' ' -f1 /proc/loadavg) $($CPR --pid "$2" \
    --stats "127.0.0.1:$3" --model add_sub_nb -- wrk -t2 -c16 -d5s -s "$LUA" "$url" \
    2>/dev/null | tail -1)"
}
for round in $(seq 0 $((${ROUNDS:-2} - 1))); do
  P=$((32000 + round * 10))
  for side in base this; do
    tree=$BASE
    [ $side = this ] && tree=$THIS
    pid=$(start_tl "$tree" $P)
    wait_ready $P && points $side "$pid" $P
    kill "$pid"
    wait "$pid" 2>/dev/null
    P=$((P + 3))
  done
  read -r tpid _ < <($TRITON "$REPO" $P $(($P + 1)) $(($P + 2)))
  wait_ready $P && points triton "$tpid" $P
  kill "$tpid"
  sleep 2
done
