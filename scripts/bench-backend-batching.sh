#!/usr/bin/env bash
# Backend batching benchmark (recorded in docs/benchmarks.md, section "backend batching"):
#   1. dynamic batching vs the same server with batching off, concurrency 32, on heavy_mlp (the example
#      repository's model meant to have a per-execution cost that dominates), through perf_analyzer over
#      gRPC: throughput ratio and p99;
#   2. adaptive mode (p99 target) vs a sweep of hand-tuned fixed queue delays;
#   3. cold start: process start to ready on deploy/local/models, and on the same repository with `simple`
#      on KIND_GPU (the difference is the wgpu adapter / driver start-up, reported separately).
#
#   bench-backend-batching.sh BIN_DIR        (BIN_DIR holds a release infergate-backend)
#
# Every model config is measured once per round, rounds one after another; the table gives the median
# over rounds (a shared machine is noisy: a single window can be off by a third). rows/exec is the mean
# batch size the server executed (perf_analyzer's server-side statistics).
# Env: BENCH_PORT_BASE (29000: uses +0..+2), BENCH_WINDOW_MS (3000), BENCH_CONCURRENCY (32),
#      BENCH_ROUNDS (3), BENCH_P99_TARGET_US (adaptive target, 50000),
#      BENCH_DELAYS_US ("0 500 1000 2000 5000 10000").
set -euo pipefail
bin="${1:?usage: bench-backend-batching.sh BIN_DIR}"
backend="$bin/infergate-backend"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
pa="${PERF_ANALYZER:-$root/../shared/tools/perf-analyzer}"
base="${BENCH_PORT_BASE:-29000}"
window="${BENCH_WINDOW_MS:-3000}"
conc="${BENCH_CONCURRENCY:-32}"
rounds="${BENCH_ROUNDS:-3}"
target="${BENCH_P99_TARGET_US:-50000}"
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
models=(heavy_unbatched)
mk heavy_unbatched ""
for d in $delays; do mk "heavy_delay_$d" "dynamic_batching { max_queue_delay_microseconds: $d }"; models+=("heavy_delay_$d"); done
mk heavy_adaptive "dynamic_batching { }
parameters { key: \"infergate.adaptive_p99_us\" value: { string_value: \"$target\" } }"
models+=(heavy_adaptive)

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

measure() { # model round -> appends "throughput p99_us rows_per_exec" to $work/<model>.results
  local csv="$work/$1-$2.csv" out="$work/$1-$2.out"
  # Stability is not asked for (--stability-percentage far above any swing): rounds take care of noise.
  if "$pa" -m "$1" -u "127.0.0.1:$grpc" -i grpc --concurrency-range "$conc" -p "$window" --percentile=99 \
    --stability-percentage 100000 --max-trials 3 -f "$csv" >"$out" 2>&1; then
    python3 - "$csv" "$out" >>"$work/$1.results" <<'EOF'
import csv, re, sys
row = next(csv.DictReader(open(sys.argv[1])))
text = open(sys.argv[2]).read()
inf = int(re.findall(r"Inference count: (\d+)", text)[-1])
ex = int(re.findall(r"Execution count: (\d+)", text)[-1])
print(f"{float(row['Inferences/Second']):.0f} {int(row['p99 latency'])} {inf / max(ex, 1):.1f}")
EOF
  else
    echo "perf_analyzer failed for $1 (round $2):" >&2; tail -5 "$out" >&2
  fi
}

# rounds_of model -> the throughput of each round, "a / b / c"
rounds_of() { [ -f "$work/$1.results" ] && awk '{print $1}' "$work/$1.results" | paste -sd/ - | sed 's|/| / |g' || echo "-"; }

# summary model -> "throughput p99_us rows_per_exec" (medians over rounds; "0 0 0" when every round failed)
summary() {
  python3 - "$work/$1.results" <<'EOF'
import statistics, sys
try:
    rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
except FileNotFoundError:
    rows = []
if not rows:
    print("0 0 0")
else:
    print(" ".join(f"{statistics.median(c):.{1 if i == 2 else 0}f}" for i, c in enumerate(zip(*rows))))
EOF
}

echo "==> backend batching: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), concurrency $conc, gRPC, perf_analyzer 2.41, ${window} ms windows, $rounds rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for m in "${models[@]}"; do measure "$m" "$r"; done
done
echo "load average after the sweep: $(cut -d' ' -f1-3 /proc/loadavg)"

read -r un_tput un_p99 un_rows < <(summary heavy_unbatched)
echo
echo "| heavy_mlp, c=$conc | infer/s | p99 (ms) | rows/exec | vs batching off | infer/s per round |"
echo "|---|---|---|---|---|---|"
ratio() { python3 -c "print(f'{$1 / max($2, 1):.2f}')"; }
ms() { python3 -c "print(f'{$1 / 1000:.1f}')"; }
echo "| batching off | $un_tput | $(ms "$un_p99") | $un_rows | 1.00x | $(rounds_of heavy_unbatched) |"
best_tput=0 best_delay="" best_p99=0 best_in_tput=0 best_in_delay="" best_in_p99=0
for d in $delays; do
  read -r t p rows < <(summary "heavy_delay_$d")
  echo "| delay ${d} us | $t | $(ms "$p") | $rows | $(ratio "$t" "$un_tput")x | $(rounds_of "heavy_delay_$d") |"
  if [ "$t" -gt "$best_tput" ]; then best_tput=$t best_delay=$d best_p99=$p; fi
  if [ "$p" -le "$target" ] && [ "$t" -gt "$best_in_tput" ]; then best_in_tput=$t best_in_delay=$d best_in_p99=$p; fi
done
read -r ad_tput ad_p99 ad_rows < <(summary heavy_adaptive)
echo "| adaptive, p99 target $(ms "$target") ms | $ad_tput | $(ms "$ad_p99") | $ad_rows | $(ratio "$ad_tput" "$un_tput")x | $(rounds_of heavy_adaptive) |"
echo
snap=$(curl -fsS "http://127.0.0.1:$metrics/metrics" | grep -E '^infergate_adaptive_(queue_delay_seconds|max_batch_size)\{model="heavy_adaptive"' | sed 's/{[^}]*}//' | tr '\n' ' ')
echo "adaptive choice at the end: $snap"
echo "best fixed delay: ${best_delay} us ($best_tput infer/s, p99 $(ms "$best_p99") ms); best within the target: ${best_in_delay:-none} us ($best_in_tput infer/s, p99 $(ms "$best_in_p99") ms)"
echo "batching speed-up (best fixed delay vs off): $(ratio "$best_tput" "$un_tput")x at p99 $(ms "$best_p99") ms"
ref=$best_in_tput; [ "$ref" -gt 0 ] || ref=$best_tput
echo "adaptive vs best fixed within target: $(python3 -c "print(f'{100 * $ad_tput / max($ref, 1):.0f}')")% of throughput, p99 $(ms "$ad_p99") ms (target $(ms "$target") ms)"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""

# --- cold start -------------------------------------------------------------------------------
cold() { # repository label -> "wall_ms server_ms": exec to ready as curl sees it, and the server's own
         # "started" log figure (median of 5 each)
  local times=() inner=()
  for i in 1 2 3 4 5; do
    local log="$work/cold-$2-$i.log"
    local t0; t0=$(date +%s%N)
    "$backend" --model-repository "$1" --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
      --http-port $http --grpc-port $grpc --metrics-port $metrics --log-format json 2>"$log" &
    pid=$!
    local end=$((SECONDS + 30))
    until curl -fsS -o /dev/null "http://127.0.0.1:$http/v2/health/ready" 2>/dev/null; do
      if [ $SECONDS -ge $end ]; then kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""; echo "-1 -1"; return; fi
      sleep 0.005
    done
    local t1; t1=$(date +%s%N)
    times+=($(((t1 - t0) / 1000000)))
    inner+=("$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("fields", {}).get("message") == "infergate backend started":
        print(e["fields"]["ms"])
        break
else:
    print(-1)' "$log")")
    kill "$pid"; wait "$pid" 2>/dev/null || true; pid=""
  done
  echo "$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p) $(printf '%s\n' "${inner[@]}" | sort -n | sed -n 3p)"
}
cp -r "$root/deploy/local/models" "$work/gpu-repo"
sed -i 's/KIND_CPU/KIND_GPU/' "$work/gpu-repo/simple/config.pbtxt"
read -r cpu_ms cpu_inner < <(cold "$root/deploy/local/models" cpu)
read -r gpu_ms gpu_inner < <(cold "$work/gpu-repo" gpu)
echo
echo "cold start, process start to ready (median of 5): example repository (KIND_CPU) ${cpu_ms} ms as a client sees it, ${cpu_inner} ms by the server's own clock"
if [ "$gpu_ms" -ge 0 ]; then
  adapter=$(grep -o '"adapter":"[^"]*"' "$work/cold-gpu-1.log" | head -1 | cut -d'"' -f4)
  echo "the same repository with simple on KIND_GPU: ${gpu_ms} ms (${gpu_inner} ms): wgpu adapter / driver start-up $((gpu_ms - cpu_ms)) ms more${adapter:+ (adapter: $adapter)}"
else
  echo "the same repository with simple on KIND_GPU: not ready within 30 s (no wgpu adapter? see the index reason)"
fi
