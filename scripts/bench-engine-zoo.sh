#!/usr/bin/env bash
# The CPU executor against onnxruntime (in-process, CPU provider, intra-op threads = cores) on the engine's
# zoo of real exported models (backend/engine/zoo/, made by scripts/ensure-zoo.sh), at batch 1 and 8 (the
# detector, which takes one image, at batch 1, with a different image on each run).
# The two sides alternate model by model, for INFERGATE_BENCH_ROUNDS rounds; each figure is its best round
# (other load on a shared machine only ever adds time). Our batch sizes of a model take turns in blocks of
# runs (benches/engine_cpu.rs, `measure`), so that their per-sample times compare within a round.
#   bench-engine-zoo.sh [RELEASE_BIN_DIR]   (the argument is accepted for scripts/bench.sh; unused)
# Env: INFERGATE_BENCH_BATCHES (default 1,8), INFERGATE_BENCH_SECONDS (default 2),
#      INFERGATE_BENCH_ROUNDS (default 2), INFERGATE_BENCH_ONLY (comma-separated zoo model names).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
[ -x "$py" ] || { echo "bench-engine-zoo: no venv python at $py (run \`make venv\`)" >&2; exit 1; }
zoo="$("$here/ensure-zoo.sh")"
export INFERGATE_BENCH_MODELS="$zoo"
export INFERGATE_BENCH_BATCHES="${INFERGATE_BENCH_BATCHES:-1,8}"
export INFERGATE_BENCH_SECONDS="${INFERGATE_BENCH_SECONDS:-2}"
rounds="${INFERGATE_BENCH_ROUNDS:-2}"
threads="$(nproc)"
models="${INFERGATE_BENCH_ONLY:-$("$py" -c 'import json,sys; print(",".join(m for p in sys.argv[1:] for m in json.load(open(p))))' "$zoo/manifest.json" "$zoo/detector.json" "$zoo/quantized.json" "$zoo/dynamo.json")}"
out="$(mktemp -d)"
echo "==> machine: $threads cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "==> onnxruntime $("$py" -c 'import onnxruntime; print(onnxruntime.__version__)'), $threads intra-op threads; zoo $zoo"
(cd "$root" && cargo bench -q --profile release-lto -p infergate-engine --bench engine_cpu --no-run)
for r in $(seq 1 "$rounds"); do
  for m in ${models//,/ }; do
    echo "==> round $r/$rounds: $m"
    (cd "$root" && INFERGATE_BENCH_ONLY="$m" cargo bench -q --profile release-lto -p infergate-engine --bench engine_cpu) | tee -a "$out/cpu.txt"
    "$py" "$root/backend/engine/models/bench_ort.py" "$zoo" --batches "$INFERGATE_BENCH_BATCHES" \
      --seconds "$INFERGATE_BENCH_SECONDS" --threads "$threads" --only "$m" | tee -a "$out/ort.txt"
  done
done
echo "==> side by side (latency ms, best of $rounds round(s); ratio = infergate / onnxruntime, lower is better)"
"$py" - "$out/cpu.txt" "$out/ort.txt" <<'PY'
import math, sys
def load(p):
    """Each (model, batch)'s latency in every round, in round order."""
    d = {}
    for line in open(p):
        f = line.split()
        if len(f) >= 6 and f[2] == "batch":
            d.setdefault((f[1], int(f[3])), []).append(float(f[5]))
    return d
rounds = load(sys.argv[1])
cpu = {k: min(v) for k, v in rounds.items()}
ort = {k: min(v) for k, v in load(sys.argv[2]).items()}
print(f"{'model':24} {'batch':>5} {'infergate':>10} {'ort':>10} {'ratio':>6} {'ms/sample ig':>13} {'ms/sample ort':>14}")
ratios = {}
for k in sorted(cpu):
    if k in ort:
        a, b = cpu[k], ort[k]
        ratios.setdefault(k[1], []).append(a / b)
        print(f"{k[0]:24} {k[1]:>5} {a:>10.3f} {b:>10.3f} {a/b:>6.2f} {a/k[1]:>13.3f} {b/k[1]:>14.3f}")
for b, r in sorted(ratios.items()):
    print(f"geometric mean ratio at batch {b}: {math.exp(sum(map(math.log, r)) / len(r)):.2f} over {len(r)} models, worst {max(r):.2f}")
# Batching against single runs: the bench measures a model's batch sizes in turns, so each round's pair saw
# the same load; a batch hurts when it cost more per sample in every round.
per_sample = {}
for (n, b), times in rounds.items():
    if b == 8 and (n, 1) in rounds:
        per_sample[n] = [t8 / 8 / t1 for t8, t1 in zip(times, rounds[(n, 1)])]
print("per sample, batch 8 over batch 1, each round (measured in turns): " +
      ", ".join(f"{n} {' / '.join(f'{r:.3f}' for r in rs)}" for n, rs in sorted(per_sample.items())))
hurt = [n for n, rs in sorted(per_sample.items()) if rs and min(rs) > 1]
print("batch 8 costs more per sample than batch 1 in every round on: " + (", ".join(hurt) if hurt else "none"))
PY
rm -rf "$out"
