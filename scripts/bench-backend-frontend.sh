#!/usr/bin/env bash
# Front-end overhead of the backend, side by side with a real Triton 2.51 in one run.
#
#   bench-backend-frontend.sh BIN_DIR        (BIN_DIR holds a release infergate-backend; `make bench` passes it)
#
# Both servers serve `add_sub` (two FP32 [16] inputs, their sum and difference; max_batch_size 8,
# dynamic batching with no delay): ONNX on infergate, a Python-backend model on Triton (the only backend
# the peer ships). perf_analyzer drives each over HTTP (binary tensors) and gRPC at concurrency 1 and 8,
# alternating servers; the table gives throughput (infer/s) and p99 latency (us) from its CSV (three
# windows each; stability is not required: a shared machine is noisy, so compare ratios, not absolutes).
# Environment: BENCH_WINDOW_MS (default 3000), BENCH_CONCURRENCY (default "1 8"),
# INFERGATE_PYTHON (venv python with onnx, default ~/.cache/infergate/venv/bin/python).
set -euo pipefail
bin_dir="${1:?usage: bench-backend-frontend.sh BIN_DIR (a release build of infergate-backend)}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
tools="${INFERGATE_SHARED_TOOLS:-$root/../shared/tools}"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
window="${BENCH_WINDOW_MS:-3000}"
concurrency="${BENCH_CONCURRENCY:-1 8}"
[ -x "$bin_dir/infergate-backend" ] || { echo "no $bin_dir/infergate-backend: run make build-release (make bench does)" >&2; exit 1; }
[ -x "$py" ] || { echo "no python at $py: run make venv" >&2; exit 1; }
for t in triton-peer perf-analyzer; do
  [ -x "$tools/$t" ] || { echo "missing $tools/$t (the shared tools folder beside the checkout)" >&2; exit 1; }
done

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

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {  # url name log
  for _ in $(seq 600); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "$2 did not become ready; its log:" >&2; tail -30 "$3" >&2; exit 1
}

ig_http=$(free_port); ig_grpc=$(free_port); ig_metrics=$(free_port)
"$bin_dir/infergate-backend" --model-repository "$work/ours" --http-port "$ig_http" --grpc-port "$ig_grpc" \
  --metrics-port "$ig_metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
  >"$work/infergate.log" 2>&1 &
pids+=($!)
tr_http=$(free_port); tr_grpc=$(free_port); tr_metrics=$(free_port)
"$tools/triton-peer" serve "$work/triton" "$tr_http" "$tr_grpc" "$tr_metrics" >"$work/triton.log" 2>&1 &
pids+=($!)
wait_ready "http://127.0.0.1:$ig_http/v2/health/ready" infergate "$work/infergate.log"
wait_ready "http://127.0.0.1:$tr_http/v2/health/ready" triton "$work/triton.log"

# run SERVER PROTOCOL URL CONCURRENCY -> "throughput p99"
run() {
  local csv="$work/$1-$2-$4.csv" extra=()
  [ "$2" = http ] && extra=(--input-tensor-format=binary --output-tensor-format=binary)
  "$tools/perf-analyzer" -m add_sub -u "$3" -i "$2" "${extra[@]}" --concurrency-range "$4:$4" \
    --measurement-interval "$window" --stability-percentage 999 --max-trials 3 --percentile 99 -f "$csv" \
    >"$work/$1-$2-$4.log" 2>&1 || { echo "perf_analyzer failed against $1 ($2, c=$4):" >&2; tail -20 "$work/$1-$2-$4.log" >&2; exit 1; }
  "$py" -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1])))[-1]; print(round(float(r["Inferences/Second"])), r["p99 latency"])' "$csv"
}

echo "| protocol | concurrency | infergate infer/s | infergate p99 (us) | Triton infer/s | Triton p99 (us) | throughput ratio |"
echo "|---|---|---|---|---|---|---|"
for proto in http grpc; do
  for c in $concurrency; do
    if [ "$proto" = http ]; then ours="127.0.0.1:$ig_http"; theirs="127.0.0.1:$tr_http"; else ours="127.0.0.1:$ig_grpc"; theirs="127.0.0.1:$tr_grpc"; fi
    read -r t_ours p_ours < <(run infergate "$proto" "$ours" "$c")
    read -r t_theirs p_theirs < <(run triton "$proto" "$theirs" "$c")
    ratio=$("$py" -c "print(f'{$t_ours / max($t_theirs, 1):.1f}x')")
    echo "| $proto | $c | $t_ours | $p_ours | $t_theirs | $p_theirs | $ratio |"
  done
done
