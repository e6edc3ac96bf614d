#!/usr/bin/env bash
# Engine benchmark: CPU executor next to onnxruntime (Python, CPU provider) on the same model files,
# in one run. Prints MatMul/Conv GFLOP/s per shape and model latency/throughput at batch 1, 8, 32.
#   bench-engine.sh [RELEASE_BIN_DIR]       (the argument is accepted for scripts/bench.sh; unused)
# Env: INFERGATE_BENCH_BATCHES (default 1,8,32), INFERGATE_BENCH_SECONDS (default 2),
#      INFERGATE_BENCH_ONLY (comma-separated model names), INFERGATE_PYTHON (the venv's python),
#      INFERGATE_BENCH_ROUNDS (default 1: rounds of both sides, alternating; the table shows each
#      figure's best round, since other load on a shared machine only ever adds time).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
[ -x "$py" ] || { echo "bench-engine: no venv python at $py (run \`make venv\`)" >&2; exit 1; }
models="${INFERGATE_BENCH_MODELS:-${TMPDIR:-/tmp}/infergate-bench-models}"
export INFERGATE_BENCH_MODELS="$models"
export INFERGATE_BENCH_BATCHES="${INFERGATE_BENCH_BATCHES:-1,8,32}"
export INFERGATE_BENCH_SECONDS="${INFERGATE_BENCH_SECONDS:-2}"
rounds="${INFERGATE_BENCH_ROUNDS:-1}"
echo "==> generating bench-size models in $models"
"$py" "$root/backend/engine/models/export_models.py" "$models" --size bench --manifest
echo "==> machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
only=()
[ -n "${INFERGATE_BENCH_ONLY:-}" ] && only=(--only "$INFERGATE_BENCH_ONLY")
: > "$models/cpu.txt"
: > "$models/ort.txt"
for r in $(seq 1 "$rounds"); do
  echo "==> round $r/$rounds: infergate CPU executor (cargo bench -p infergate-engine --bench engine_cpu)"
  (cd "$root" && cargo bench -q --profile release-lto -p infergate-engine --bench engine_cpu) | tee -a "$models/cpu.txt"
  echo "==> round $r/$rounds: onnxruntime $("$py" -c 'import onnxruntime; print(onnxruntime.__version__)') (CPUExecutionProvider, default threads)"
  "$py" "$root/backend/engine/models/bench_ort.py" "$models" --batches "$INFERGATE_BENCH_BATCHES" \
    --seconds "$INFERGATE_BENCH_SECONDS" "${only[@]}" | tee -a "$models/ort.txt"
done
echo "==> side by side (latency ms, best of $rounds round(s); ratio = infergate / onnxruntime, lower is better)"
"$py" - "$models/cpu.txt" "$models/ort.txt" <<'PY'
import sys
def load(p):
    runs = {}
    for line in open(p):
        f = line.split()
        if len(f) >= 7 and f[2] == "batch":
            runs.setdefault((f[1], int(f[3])), []).append((float(f[5]), f[9] if len(f) > 9 else ""))
    d = {}
    for k, v in runs.items():
        lat = min(x for x, _ in v)
        g = max(float(x) for _, x in v) if v[0][1] else None
        d[k] = (lat, f"{g:.2f}" if g is not None else "")
    return d
cpu, ort = load(sys.argv[1]), load(sys.argv[2])
print(f"{'model':40} {'batch':>5} {'infergate':>10} {'ort':>10} {'ratio':>6} {'ms/sample ig/ort':>17} {'GFLOP/s ig/ort':>16}")
for k in sorted(cpu, key=lambda k: (k[0], k[1])):
    if k in ort:
        a, ga = cpu[k]; b, gb = ort[k]
        g = f"{ga}/{gb}" if ga else ""
        per = f"{a / k[1]:.3f}/{b / k[1]:.3f}"
        print(f"{k[0]:40} {k[1]:>5} {a:>10.3f} {b:>10.3f} {a/b:>6.2f} {per:>17} {g:>16}")
PY
