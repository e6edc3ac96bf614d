#!/usr/bin/env bash
# Backend batching benchmark (recorded in docs/benchmarks.md, section "backend batching"):
#   1. dynamic batching vs the same server with batching off, concurrency 32, on heavy_mlp (a model whose
#      cost per execution dominates), through perf_analyzer over gRPC: throughput ratio and p99;
#   2. adaptive mode (p99 target) vs a sweep of hand-tuned fixed queue delays;
#   3. cold start: process start to ready on deploy/local/models, and separately with a KIND_GPU model
#      (wgpu adapter / driver start-up).
#
#   bench-backend-batching.sh BIN_DIR        (BIN_DIR holds a release infergate-backend)
#
# Env: BENCH_PORT_BASE (29000: uses +0..+2), BENCH_WINDOW_MS (3000), BENCH_CONCURRENCY (32),
#      BENCH_P99_TARGET_US (adaptive target, 150000), BENCH_DELAYS_US ("0 500 1000 2000 5000 10000").
set -euo pipefail
bin="${1:?usage: bench-backend-batching.sh BIN_DIR}"
backend="$bin/infergate-backend"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
pa="${PERF_ANALYZER:-$root/../shared/tools/perf-analyzer}"
base="${BENCH_PORT_BASE:-29000}"
window="${BENCH_WINDOW_MS:-3000}"
conc="${BENCH_CONCURRENCY:-32}"
target="${BENCH_P99_TARGET_US:-150000}"
delays="${BENCH_DELAYS_US:-0 500 1000 2000 5000 10000}"
http=$base grpc=$((base + 1)) metrics=$((base + 2))

[ -x "$backend" ] || { echo "no $backend: run 'make build-release' (or cargo build --release -p infergate-backend)" >&2; exit 1; }
[ -x "$pa" ] || { echo "no perf_analyzer at $pa (set PERF_ANALYZER)" >&2; exit 1; }
"$pa" install >/dev/null

work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# --- a repository of heavy_mlp copies with different batching settings -------------------------
model_onnx="$root/deploy/local/models/heavy_mlp/1/model.onnx"
mk() { # name, extra config lines
  mkdir -p "$work/repo/$1/1"
  cp "$model_onnx" "$work/repo/$1/1/model.onnx"
  cat >"$work/repo/$1/config.pbtxt" <<EOF
name: "$1"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "x", data_type: TYPE_FP32, dims: [ 1024 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 1024 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
$2
EOF
}
mk heavy_unbatched ""
for d in $delays; do mk "heavy_delay_$d" "dynamic_batching { max_queue_delay_microseconds: $d }"; done
mk heavy_adaptive "dynamic_batching { }
parameters { key: \"infergate.adaptive_p99_us\" value: { string_value: \"$target\" } }"

wait_ready() { # seconds
  local end=$((SECONDS + $1))
  until curl -fsS -o /dev/null "http://127.0.0.1:$http/v2/health/ready" 2>/dev/null; do
    [ $SECONDS -lt $end ] || { echo "the backend did not become ready" >&2; exit 1; }
    sleep 0.05
  done
}

"$backend" --model-repository "$work/repo" --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
  --http-port $http --grpc-port $grpc --metrics-port $metrics --log-verbose 0 2>"$work/server.log" &
pid=$!
wait_ready 120

measure() { # model -> "throughput p99_us"
  local csv="$work/$1.csv"
  "$pa" -m "$1" -u "127.0.0.1:$grpc" -i grpc --concurrency-range "$conc" -p "$window" --percentile=99 \
    -s 100 --max-trials 4 -f "$csv" >"$work/$1.out" 2>&1 || { echo "perf_analyzer failed for $1:" >&2; tail -5 "$work/$1.out" >&2; echo "0 0"; return; }
  python3 - "$csv" <<'EOF'
import csv, sys
row = next(csv.DictReader(open(sys.argv[1])))
print(f"{float(row['Inferences/Second']):.0f} {int(row['p99 latency'])}")
EOF
}

echo "==> backend batching: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), concurrency $conc, gRPC, perf_analyzer window ${window} ms"
read -r un_tput un_p99 < <(measure heavy_unbatched)
printf "%-22s %10s %12s %10s\n" "model" "infer/s" "p99 (ms)" "vs off"
printf "%-22s %10s %12.1f %10s\n" "batching off" "$un_tput" "$(echo "$un_p99/1000" | bc -l)" "1.00x"
best_tput=0 best_delay="" best_p99=0 best_in_tput=0 best_in_delay="" best_in_p99=0
for d in $delays; do
  read -r t p < <(measure "heavy_delay_$d")
  ratio=$(echo "$t / ($un_tput + 0.000001)" | bc -l)
  printf "%-22s %10s %12.1f %9.2fx\n" "delay ${d} us" "$t" "$(echo "$p/1000" | bc -l)" "$ratio"
  if [ "$t" -gt "$best_tput" ]; then best_tput=$t best_delay=$d best_p99=$p; fi
  if [ "$p" -le "$target" ] && [ "$t" -gt "$best_in_tput" ]; then best_in_tput=$t best_in_delay=$d best_in_p99=$p; fi
done
read -r ad_tput ad_p99 < <(measure heavy_adaptive)
printf "%-22s %10s %12.1f %9.2fx\n" "adaptive p99<$((target / 1000))ms" "$ad_tput" "$(echo "$ad_p99/1000" | bc -l)" "$(echo "$ad_tput / ($un_tput + 0.000001)" | bc -l)"
snap=$(curl -fsS "http://127.0.0.1:$metrics/metrics" | grep -E '^infergate_adaptive_(queue_delay_seconds|max_batch_size)\{model="heavy_adaptive"' | sed 's/{[^}]*}//' | tr '\n' ' ')
echo "adaptive choice at the end: $snap"
echo "best fixed delay: ${best_delay} us ($best_tput infer/s, p99 $((best_p99 / 1000)) ms); best within the target: ${best_in_delay:-none} us ($best_in_tput infer/s)"
echo "batching speed-up (best fixed delay vs off): $(echo "$best_tput / ($un_tput + 0.000001)" | bc -l | cut -c1-5)x"
ref=$best_in_tput; [ "$ref" -gt 0 ] || ref=$best_tput
echo "adaptive vs best fixed within target: $(echo "100 * $ad_tput / ($ref + 0.000001)" | bc -l | cut -c1-5)% of throughput, p99 $((ad_p99 / 1000)) ms (target $((target / 1000)) ms)"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

# --- cold start -------------------------------------------------------------------------------
cold() { # repository -> milliseconds from exec to ready (median of 5)
  local times=()
  for _ in 1 2 3 4 5; do
    local t0; t0=$(date +%s%N)
    "$backend" --model-repository "$1" --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
      --http-port $http --grpc-port $grpc --metrics-port $metrics 2>>"$work/cold.log" &
    pid=$!
    local end=$((SECONDS + 30))
    until curl -fsS -o /dev/null "http://127.0.0.1:$http/v2/health/ready" 2>/dev/null; do
      if [ $SECONDS -ge $end ]; then kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; echo "-1"; return; fi
      sleep 0.005
    done
    local t1; t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000000)))
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n 3p
}
mkdir -p "$work/gpu/simple_gpu/1"
cp "$root/deploy/local/models/simple/1/model.onnx" "$work/gpu/simple_gpu/1/"
sed -e 's/name: "simple"/name: "simple_gpu"/' -e 's/KIND_CPU/KIND_GPU/' -e 's/version_policy: { all: {} }//' \
  "$root/deploy/local/models/simple/config.pbtxt" >"$work/gpu/simple_gpu/config.pbtxt"
cpu_ms=$(cold "$root/deploy/local/models")
gpu_ms=$(cold "$work/gpu")
echo "cold start (process start to ready, median of 5): example repository (KIND_CPU) ${cpu_ms} ms"
if [ "$gpu_ms" -ge 0 ]; then
  echo "with one KIND_GPU model: ${gpu_ms} ms (wgpu adapter/driver start-up and plan compile: $((gpu_ms - cpu_ms)) ms more)"
else
  echo "with one KIND_GPU model: not ready within 30 s (no wgpu adapter? see the index reason)"
fi
