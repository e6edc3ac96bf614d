#!/usr/bin/env bash
# Front-end overhead of the backend, side by side with a real Triton 2.51 in one run
# (recorded in docs/benchmarks.md, section "backend front end").
#
#   bench-backend-frontend.sh BIN_DIR        (BIN_DIR holds a release infergate-backend; `make bench` passes it)
#
# Both servers serve `add_sub` (two FP32 [16] inputs, their sum and difference; max_batch_size 8,
# dynamic batching with no delay): ONNX on infergate, a Python-backend model on Triton (the only backend
# the peer ships). perf_analyzer drives each over HTTP (binary tensors) and gRPC at each concurrency,
# alternating servers, BENCH_ROUNDS times. Per round and server: throughput (infer/s) and p99 (us) from
# perf_analyzer's CSV (the last stable windows), and the server's CPU time per request (user + system of
# the server process and its children, from /proc, over the whole perf_analyzer run). The table gives
# the median over rounds, and the median and range of the per-round throughput ratios: on a shared
# machine absolute figures are noisy, the ratio inside one round (same minute, same load) is what counts.
# Environment: BENCH_WINDOW_MS (default 3000), BENCH_CONCURRENCY (default "1 8"), BENCH_ROUNDS (default 3),
# BENCH_INTRA_OP_THREADS (threads of our add_sub instance, `intra_op_thread_count`; default 1, 0 = the default),
# INFERGATE_PYTHON (venv python with onnx, default ~/.cache/infergate/venv/bin/python).
set -euo pipefail
bin_dir="${1:?usage: bench-backend-frontend.sh BIN_DIR (a release build of infergate-backend)}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
tools="${INFERGATE_SHARED_TOOLS:-$root/../shared/tools}"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
window="${BENCH_WINDOW_MS:-3000}"
concurrency="${BENCH_CONCURRENCY:-1 8}"
rounds="${BENCH_ROUNDS:-3}"
threads="${BENCH_INTRA_OP_THREADS:-1}"
[ -x "$bin_dir/infergate-backend" ] || { echo "no $bin_dir/infergate-backend: run make build-release (make bench does)" >&2; exit 1; }
[ -x "$py" ] || { echo "no python at $py: run make venv" >&2; exit 1; }
for t in triton-peer perf-analyzer; do
  [ -x "$tools/$t" ] || { echo "missing $tools/$t (the shared tools folder beside the checkout)" >&2; exit 1; }
done
"$tools/perf-analyzer" install >/dev/null
"$tools/triton-peer" install >/dev/null

work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$py" - "$root/backend/server/tests/python" "$work" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import models
models.write_onnx_repository(sys.argv[2] + "/ours", ["add_sub"])
models.write_python_backend_repository(sys.argv[2] + "/triton", ["add_sub"])
PYEOF
# One execution thread per instance on both sides: a Triton Python-backend instance is one Python thread;
# ours would otherwise get a pool of one thread per core for a model that runs in microseconds.
if [ "$threads" != 0 ]; then
  echo "parameters { key: \"intra_op_thread_count\" value: { string_value: \"$threads\" } }" >>"$work/ours/add_sub/config.pbtxt"
fi

# shellcheck source=scripts/lib-peer-servers.sh
. "$here/lib-peer-servers.sh"

ig_http=$(free_port); ig_grpc=$(free_port); ig_metrics=$(free_port)
"$bin_dir/infergate-backend" --model-repository "$work/ours" --http-port "$ig_http" --grpc-port "$ig_grpc" \
  --metrics-port "$ig_metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
  >"$work/infergate.log" 2>&1 &
ig_pid=$!
pids+=("$ig_pid")
tr_http=$(free_port); tr_grpc=$(free_port); tr_metrics=$(free_port)
"$tools/triton-peer" serve "$work/triton" "$tr_http" "$tr_grpc" "$tr_metrics" >"$work/triton.log" 2>&1 &
tr_pid=$!   # triton-peer execs tritonserver: this is the server's pid; its Python stub is a child
pids+=("$tr_pid")
wait_ready "http://127.0.0.1:$ig_http/v2/health/ready" infergate "$work/infergate.log"
wait_ready "http://127.0.0.1:$tr_http/v2/health/ready" triton "$work/triton.log"
tr_version=$(curl -sf "http://127.0.0.1:$tr_http/v2" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["version"])')

# Successful requests the server has answered for add_sub (its statistics extension).
served() {
  curl -sf "http://127.0.0.1:$1/v2/models/add_sub/stats" \
    | "$py" -c 'import json,sys; print(sum(m["inference_stats"]["success"]["count"] for m in json.load(sys.stdin)["model_stats"]))'
}

# CPU clock ticks (user + system) of a process and its children.
ticks() {
  local t=0 p
  for p in "$1" $(ps -o pid= --ppid "$1"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
hz=$(getconf CLK_TCK)

# run SERVER PROTOCOL URL CONCURRENCY PID HTTP_PORT ROUND -> "throughput p99 cpu_us_per_request"
run() {
  local csv="$work/$1-$2-$4-$7.csv" extra=()
  [ "$2" = http ] && extra=(--input-tensor-format=binary --output-tensor-format=binary)
  local t0 n0; t0=$(ticks "$5"); n0=$(served "$6")
  # Stability is not asked for (--stability-percentage far above any swing): a shared machine is noisy and
  # the comparison is made round by round instead.
  "$tools/perf-analyzer" -m add_sub -u "$3" -i "$2" "${extra[@]}" --concurrency-range "$4:$4" \
    --measurement-interval "$window" --stability-percentage 100000 --max-trials 3 --percentile 99 -f "$csv" \
    >"$work/$1-$2-$4-$7.log" 2>&1 || { echo "perf_analyzer failed against $1 ($2, c=$4):" >&2; tail -20 "$work/$1-$2-$4-$7.log" >&2; exit 1; }
  local t1 n1; t1=$(ticks "$5"); n1=$(served "$6")
  "$py" - "$csv" "$((t1 - t0))" "$hz" "$((n1 - n0))" <<'PYEOF'
import csv, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
ticks, hz, requests = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
# Ticks and requests both cover the whole perf_analyzer run (its warm-up too).
per = ticks / hz * 1e6 / max(requests, 1)
print(round(float(row["Inferences/Second"])), row["p99 latency"], f"{per:.0f}")
PYEOF
}

median() { "$py" -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "==> backend front end: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), Triton $tr_version (Python backend), perf_analyzer 2.41, ${window} ms windows, $rounds rounds, infergate intra_op_thread_count $threads"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| protocol | concurrency | infergate infer/s | infergate p99 (us) | Triton infer/s | Triton p99 (us) | throughput ratio (median, range) | server CPU us/request (infergate / Triton) |"
echo "|---|---|---|---|---|---|---|---|"
for proto in http grpc; do
  for c in $concurrency; do
    if [ "$proto" = http ]; then ours="127.0.0.1:$ig_http"; theirs="127.0.0.1:$tr_http"; else ours="127.0.0.1:$ig_grpc"; theirs="127.0.0.1:$tr_grpc"; fi
    t_o=() p_o=() c_o=() t_t=() p_t=() c_t=() ratios=()
    for r in $(seq "$rounds"); do
      read -r a b d < <(run infergate "$proto" "$ours" "$c" "$ig_pid" "$ig_http" "$r")
      read -r e f g < <(run triton "$proto" "$theirs" "$c" "$tr_pid" "$tr_http" "$r")
      t_o+=("$a") p_o+=("$b") c_o+=("$d") t_t+=("$e") p_t+=("$f") c_t+=("$g")
      ratios+=("$("$py" -c "print($a / max($e, 1))")")
    done
    range=$("$py" -c 'import sys; r=[float(x) for x in sys.argv[1:]]; print(f"{min(r):.1f}-{max(r):.1f}")' "${ratios[@]}")
    printf '| %s | %s | %.0f | %.0f | %.0f | %.0f | %.1fx (%s) | %.0f / %.0f |\n' "$proto" "$c" \
      "$(median "${t_o[@]}")" "$(median "${p_o[@]}")" "$(median "${t_t[@]}")" "$(median "${p_t[@]}")" \
      "$(median "${ratios[@]}")" "$range" "$(median "${c_o[@]}")" "$(median "${c_t[@]}")"
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
