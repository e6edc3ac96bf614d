#!/usr/bin/env bash
# Real exported models served with dynamic batching, side by side with what a CPU user of the Triton stack
# runs: a real Triton 2.51 whose Python backend executes the same ONNX file with onnxruntime (recorded in
# docs/benchmarks.md, section "Backend serving real exports against Triton + onnxruntime").
#
#   bench-backend-triton-ort.sh BIN_DIR      (BIN_DIR holds a release build of infergate-backend and
#                                             infergate-load; `make bench` passes it)
#
# The servers, models and load are the case loadtests/cases/backend-vs-triton-onnxruntime: the OCR text
# recogniser and direction classifier of the engine's zoo, each server with one instance, max_batch_size 8 and
# dynamic batching with no queue delay, loaded over gRPC at concurrency 8, alternating, 3 rounds of 5 s windows
# after 5 s of warm-up; the case also checks that both give the same outputs for a batch of 3. Two clients:
#   1. NVIDIA's perf_analyzer, against the case's servers started by `infergate-load up` (per round:
#      throughput, p99 and the mean rows per execution from perf_analyzer's server-side statistics);
#   2. infergate-load, running the case (`infergate-load run`), or reading its case.json where `make bench`
#      has just run every case into INFERGATE_LOADTESTS_OUT.
# Each table gives the medians and the range of the per-round throughput ratios.
# Environment: INFERGATE_PYTHON (the project venv), INFERGATE_SHARED_TOOLS (default ../shared/tools beside
# the checkout), INFERGATE_LOADTESTS_OUT (see 2.).
set -euo pipefail
bin_dir="${1:?usage: bench-backend-triton-ort.sh BIN_DIR (a release build of infergate-backend and infergate-load)}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
case_dir="$root/loadtests/cases/backend-vs-triton-onnxruntime"
tools="${INFERGATE_SHARED_TOOLS:-$root/../shared/tools}"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
# perf_analyzer's rounds and windows, as the case's phases (case.yaml: warmup 5s, duration 5s, three rounds).
models="ocr_rec ocr_cls" conc=8 rounds=3 window=5000 settle=5000
for b in infergate-backend infergate-load; do
  [ -x "$bin_dir/$b" ] || { echo "no $bin_dir/$b: run make build-release (make bench does)" >&2; exit 1; }
done
[ -x "$py" ] || { echo "no python at $py: run make venv" >&2; exit 1; }
[ -x "$tools/perf-analyzer" ] || { echo "missing $tools/perf-analyzer (the shared tools folder beside the checkout)" >&2; exit 1; }
"$tools/perf-analyzer" install >/dev/null

work="$(mktemp -d)"
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then kill -TERM "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# 1. perf_analyzer against the case's servers.
"$bin_dir/infergate-load" up "$case_dir" --bin-dir "$bin_dir" --out "$work/up" >"$work/up.txt" 2>"$work/up.log" &
up_pid=$!
until grep -qx ready "$work/up.txt"; do
  kill -0 "$up_pid" 2>/dev/null || { echo "infergate-load up failed:" >&2; tail -30 "$work/up.log" >&2; exit 1; }
  sleep 1
done
address() { awk -v k="$1" '$1 == k { print $2 }' "$work/up.txt"; }
ig_grpc="$(address backend_grpc)" tr_grpc="$(address peer_grpc)" tr_http="$(address peer_http)"
tr_version=$(curl -sf "http://$tr_http/v2" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["version"])')
ort_version="$("$py" -c 'import onnxruntime; print(onnxruntime.__version__)')"

# analyse SERVER MODEL GRPC_ADDRESS ROUND -> "throughput p99_us rows_per_execution"
analyse() {
  local base="$work/$1-$2-$4"
  "$tools/perf-analyzer" -m "$2" -u "$3" -i grpc --concurrency-range "$conc:$conc" -p "$settle" \
    --stability-percentage 100000 --max-trials 1 >"$base.settle" 2>&1 || true
  # Stability is not asked for (--stability-percentage far above any swing): a shared machine is noisy and
  # the comparison is made round by round instead.
  "$tools/perf-analyzer" -m "$2" -u "$3" -i grpc --concurrency-range "$conc:$conc" -p "$window" \
    --stability-percentage 100000 --max-trials 3 --percentile 99 -f "$base.csv" >"$base.log" 2>&1 \
    || { echo "perf_analyzer failed against $1 ($2):" >&2; tail -20 "$base.log" >&2; exit 1; }
  "$py" - "$base.csv" "$base.log" <<'PYEOF'
import csv, re, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
text = open(sys.argv[2]).read()
inferences = int(re.findall(r"Inference count: (\d+)", text)[-1])
executions = int(re.findall(r"Execution count: (\d+)", text)[-1])
print(round(float(row["Inferences/Second"]), 1), row["p99 latency"], f"{inferences / max(executions, 1):.1f}")
PYEOF
}

median() { "$py" -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
spread() { "$py" -c 'import sys; r=[float(x) for x in sys.argv[1:]]; print(f"{min(r):.2f}-{max(r):.2f}")' "$@"; }

echo "==> backend vs Triton $tr_version + onnxruntime $ort_version (Python backend): $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), gRPC, concurrency $conc, ${window} ms windows, $rounds rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "perf_analyzer:"
echo
echo "| model | infergate infer/s | infergate p99 (ms) | rows/exec | Triton + onnxruntime infer/s | Triton p99 (ms) | rows/exec | throughput ratio (median, range) |"
echo "|---|---|---|---|---|---|---|---|"
for m in $models; do
  t_o=() p_o=() b_o=() t_t=() p_t=() b_t=() ratios=()
  for r in $(seq "$rounds"); do
    read -r a b c < <(analyse infergate "$m" "$ig_grpc" "$r")
    read -r f g h < <(analyse triton "$m" "$tr_grpc" "$r")
    t_o+=("$a") p_o+=("$b") b_o+=("$c") t_t+=("$f") p_t+=("$g") b_t+=("$h")
    ratios+=("$("$py" -c "print($a / max($f, 0.1))")")
  done
  printf '| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2fx (%s) |\n' "$m" \
    "$(median "${t_o[@]}")" "$("$py" -c "print($(median "${p_o[@]}") / 1000)")" "$(median "${b_o[@]}")" \
    "$(median "${t_t[@]}")" "$("$py" -c "print($(median "${p_t[@]}") / 1000)")" "$(median "${b_t[@]}")" \
    "$(median "${ratios[@]}")" "$(spread "${ratios[@]}")"
done
kill -TERM "$up_pid"; wait "$up_pid" || true; up_pid=""

# 2. infergate-load: the case itself (its invariants included).
case_json="${INFERGATE_LOADTESTS_OUT:-}/backend-vs-triton-onnxruntime/case.json"
if [ -z "${INFERGATE_LOADTESTS_OUT:-}" ] || [ ! -f "$case_json" ]; then
  "$bin_dir/infergate-load" run "$case_dir" --bin-dir "$bin_dir" --out "$work/load" --quiet >"$work/load.log" 2>&1 \
    || { echo "infergate-load run $case_dir failed:" >&2; tail -40 "$work/load.log" >&2; exit 1; }
  case_json="$work/load/backend-vs-triton-onnxruntime/case.json"
fi
echo
echo "infergate-load ($(basename "$case_dir")):"
echo
echo "| model | infergate infer/s | infergate p99 (ms) | Triton + onnxruntime infer/s | Triton p99 (ms) | throughput ratio (median, range) |"
echo "|---|---|---|---|---|---|"
"$py" - "$case_json" <<'PYEOF'
import json, re, statistics, sys
case = json.load(open(sys.argv[1]))
if not all(v["pass"] for v in case["verdicts"]):
    sys.exit("the case's invariants failed: " + "; ".join(v["check"] for v in case["verdicts"] if not v["pass"]))
# Phases are named MODEL-SERVER-ROUND (ocr_rec-infergate-1, ocr_rec-triton-1, ...).
rows = {}
for phase in case["phases"]:
    model, server, round_ = re.fullmatch(r".*/(.+)-(infergate|triton)-(\d+)", phase["name"]).groups()
    rows.setdefault(model, {}).setdefault(round_, {})[server] = phase["total"]
for model, rounds in rows.items():
    med = lambda server, f: statistics.median(f(r[server]) for r in rounds.values())
    rps = lambda t: t["throughput_rps"]
    p99 = lambda t: t["latency_ms"]["p99"]
    ratios = [r["infergate"]["throughput_rps"] / max(r["triton"]["throughput_rps"], 0.1) for r in rounds.values()]
    print(f"| {model} | {med('infergate', rps):.1f} | {med('infergate', p99):.1f} | {med('triton', rps):.1f} "
          f"| {med('triton', p99):.1f} | {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
PYEOF
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
