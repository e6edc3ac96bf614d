#!/usr/bin/env bash
# Backend batching benchmark (recorded in docs/benchmarks.md, section "backend batching"):
#   1. dynamic batching vs the same server with batching off, concurrency 32, on stream_mlp (six 2048x2048
#      dense layers, 96 MiB of weights: more than L3, so each execution streams its weights from memory and
#      per-execution cost dominates; made by deploy/local/make_bench_model.py), through perf_analyzer over
#      gRPC: throughput ratio and p99;
#   2. adaptive mode (p99 target) vs a sweep of hand-tuned fixed queue delays;
#   3. cold start: process start to ready on deploy/local/models, and on the same repository with `simple`
#      on KIND_GPU (the difference is the wgpu adapter / driver start-up, reported separately).
#
#   bench-backend-batching.sh BIN_DIR        (BIN_DIR holds a release infergate-backend)
#
# Every model config is measured once per round, rounds one after another; the table gives the median
# over rounds (a shared machine is noisy: a single window can be off by a third). rows/exec is the mean
# batch size the server executed (perf_analyzer's server-side statistics). The server runs in explicit
# model-control mode and holds one config at a time (load, unmeasured settling load, measure, unload), so
# configs do not compete for memory or cache; a batched config keeps one engine plan per batch size (the plans
# share one copy of the weights), all built at load by a warmup of every size.
# Env: BENCH_PORT_BASE (29000: uses +0..+2), BENCH_WINDOW_MS (3000), BENCH_SETTLE_MS (unmeasured load
#      after each load, 3000), BENCH_CONCURRENCY (32),
#      BENCH_ROUNDS (3), BENCH_P99_TARGET_US (adaptive target, 200000),
#      BENCH_DELAYS_US ("0 1000 5000 20000"; four delays keep `make bench` to minutes), BENCH_MODEL_WIDTH (2048), BENCH_MODEL_LAYERS (6),
#      BENCH_PYTHON (a python with onnx and numpy; default $INFERGATE_PYTHON, else python3).
set -euo pipefail
bin="${1:?usage: bench-backend-batching.sh BIN_DIR}"
backend="$bin/infergate-backend"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
pa="${PERF_ANALYZER:-$root/../shared/tools/perf-analyzer}"
base="${BENCH_PORT_BASE:-29000}"
window="${BENCH_WINDOW_MS:-3000}"
settle="${BENCH_SETTLE_MS:-3000}"
conc="${BENCH_CONCURRENCY:-32}"
rounds="${BENCH_ROUNDS:-3}"
target="${BENCH_P99_TARGET_US:-200000}"
delays="${BENCH_DELAYS_US:-0 1000 5000 20000}"
width="${BENCH_MODEL_WIDTH:-2048}"
layers="${BENCH_MODEL_LAYERS:-6}"
py="${BENCH_PYTHON:-${INFERGATE_PYTHON:-python3}}"
http=$base grpc=$((base + 1)) metrics=$((base + 2))

[ -x "$backend" ] || { echo "no $backend: run 'make build-release' (or cargo build --release -p infergate-backend)" >&2; exit 1; }
[ -x "$pa" ] || { echo "no perf_analyzer at $pa (set PERF_ANALYZER)" >&2; exit 1; }
"$pa" install >/dev/null

work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# --- a repository of stream_mlp copies with different batching settings ------------------------
"$py" "$root/deploy/local/make_bench_model.py" "$work/gen" "$width" "$layers" >&2
model_onnx="$work/gen/stream_mlp/1/model.onnx"
# model_warmup samples of batch sizes 1..N: the engine builds one plan per batch size, so with these every
# plan exists before the first measurement (building one takes a few hundred ms with this model).
warmups() { # N
  local out="model_warmup [" sep=""
  for b in $(seq "$1"); do
    out+="$sep { name: \"b$b\", batch_size: $b, inputs { key: \"x\" value: { data_type: TYPE_FP32, dims: [ $width ], zero_data: true } } }"
    sep=","
  done
  echo "$out ]"
}
mk() { # name, warmup batch sizes, extra config lines
  mkdir -p "$work/repo/$1/1"
  cp "$model_onnx" "$work/repo/$1/1/model.onnx"
  cat >"$work/repo/$1/config.pbtxt" <<EOF
name: "$1"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "x", data_type: TYPE_FP32, dims: [ $width ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ $width ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
$(warmups "$2")
$3
EOF
}
models=(stream_unbatched)
mk stream_unbatched 1 ""
for d in $delays; do mk "stream_delay_$d" 32 "dynamic_batching { max_queue_delay_microseconds: $d }"; models+=("stream_delay_$d"); done
mk stream_adaptive 32 "dynamic_batching { }
parameters { key: \"infergate.adaptive_p99_us\" value: { string_value: \"$target\" } }"
models+=(stream_adaptive)

wait_ready() { # seconds
  local end=$((SECONDS + $1))
  until curl -fsS -o /dev/null "http://127.0.0.1:$http/v2/health/ready" 2>/dev/null; do
    [ $SECONDS -lt $end ] || { echo "the backend did not become ready" >&2; exit 1; }
    sleep 0.05
  done
}

"$backend" --model-repository "$work/repo" --model-control-mode explicit \
  --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
  --http-port $http --grpc-port $grpc --metrics-port $metrics --log-verbose 0 2>"$work/server.log" &
pid=$!
wait_ready 120

repo_call() { # model load|unload
  curl -fsS -o /dev/null -X POST "http://127.0.0.1:$http/v2/repository/models/$1/$2" \
    || { echo "$2 of $1 failed:" >&2; tail -5 "$work/server.log" >&2; exit 1; }
}

measure() { # model round -> appends "throughput p99_us rows_per_exec" to $work/<model>.results
  local csv="$work/$1-$2.csv" out="$work/$1-$2.out"
  repo_call "$1" load
  # Every config is freshly loaded: the same unmeasured load first brings each to its steady state (for
  # the adaptive one, lets its controller settle from its starting point as it would in service).
  "$pa" -m "$1" -u "127.0.0.1:$grpc" -i grpc --concurrency-range "$conc" -p "$settle" \
    --stability-percentage 100000 --max-trials 1 >"$work/$1-$2.settle" 2>&1 || true
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
  if [ "$1" = stream_adaptive ]; then
    curl -fsS "http://127.0.0.1:$metrics/metrics" | grep -E '^infergate_adaptive_(queue_delay_seconds|max_batch_size)\{model="stream_adaptive"' \
      | sed 's/{[^}]*}//' | tr '\n' ' ' >"$work/adaptive-choice" || true
  fi
  repo_call "$1" unload
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

echo "==> backend batching: stream_mlp ${layers}x${width}x${width}, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), concurrency $conc, gRPC, perf_analyzer 2.41, ${window} ms windows, $rounds rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for m in "${models[@]}"; do measure "$m" "$r"; done
done
echo "load average after the sweep: $(cut -d' ' -f1-3 /proc/loadavg)"

read -r un_tput un_p99 un_rows < <(summary stream_unbatched)
echo
echo "| stream_mlp, c=$conc | infer/s | p99 (ms) | rows/exec | vs batching off | infer/s per round |"
echo "|---|---|---|---|---|---|"
ratio() { python3 -c "print(f'{$1 / max($2, 1):.2f}')"; }
ms() { python3 -c "print(f'{$1 / 1000:.1f}')"; }
echo "| batching off | $un_tput | $(ms "$un_p99") | $un_rows | 1.00x | $(rounds_of stream_unbatched) |"
best_tput=0 best_delay="" best_p99=0 best_in_tput=0 best_in_delay="" best_in_p99=0
for d in $delays; do
  read -r t p rows < <(summary "stream_delay_$d")
  echo "| delay ${d} us | $t | $(ms "$p") | $rows | $(ratio "$t" "$un_tput")x | $(rounds_of "stream_delay_$d") |"
  if [ "$t" -gt "$best_tput" ]; then best_tput=$t best_delay=$d best_p99=$p; fi
  if [ "$p" -le "$target" ] && [ "$t" -gt "$best_in_tput" ]; then best_in_tput=$t best_in_delay=$d best_in_p99=$p; fi
done
read -r ad_tput ad_p99 ad_rows < <(summary stream_adaptive)
echo "| adaptive, p99 target $(ms "$target") ms | $ad_tput | $(ms "$ad_p99") | $ad_rows | $(ratio "$ad_tput" "$un_tput")x | $(rounds_of stream_adaptive) |"
echo
echo "adaptive choice at the end of the last round: $(cat "$work/adaptive-choice" 2>/dev/null)"
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
