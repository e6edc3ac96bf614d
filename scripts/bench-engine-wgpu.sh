#!/usr/bin/env bash
# Engine benchmark, wgpu executor: single-op MatMul/Conv GFLOP/s, the per-execution overhead of a 50-node model,
# and model latency/throughput at each batch of INFERGATE_BENCH_BATCHES — next to onnxruntime (Python, CPU provider) on the same files,
# in one run (`backend/engine/benches/wgpu_engine.rs`). The adapter is the production choice: a real GPU first,
# then Mesa's lavapipe; WGPU_ADAPTER_NAME / WGPU_BACKEND pick another.
#   bench-engine-wgpu.sh [RELEASE_BIN_DIR]   (the argument is accepted for scripts/bench.sh; unused)
# Env: INFERGATE_BENCH_BATCHES (default 1: on lavapipe, where `make bench` runs it, a ResNet-style batch of 32
#      takes 20 s an execution; on a GPU ask for 1,8,32), INFERGATE_BENCH_SECONDS (default 2), INFERGATE_BENCH_ONLY
#      (comma-separated model names; "none" = only the overhead model), INFERGATE_PYTHON (the venv's python).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
[ -x "$py" ] || { echo "bench-engine-wgpu: no venv python at $py (run \`make venv\`)" >&2; exit 1; }
export INFERGATE_PYTHON="$py"
models="${INFERGATE_BENCH_MODELS:-${TMPDIR:-/tmp}/infergate-bench-models}"
export INFERGATE_BENCH_MODELS="$models"
export INFERGATE_BENCH_BATCHES="${INFERGATE_BENCH_BATCHES:-1}"
export INFERGATE_BENCH_SECONDS="${INFERGATE_BENCH_SECONDS:-2}"
echo "==> generating bench-size models in $models"
"$py" "$root/backend/engine/models/export_models.py" "$models" --size bench --manifest
echo "==> machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "==> wgpu executor vs onnxruntime $("$py" -c 'import onnxruntime; print(onnxruntime.__version__)') (cargo bench -p infergate-engine --bench wgpu_engine)"
cd "$root" && cargo bench -q --profile release-lto -p infergate-engine --bench wgpu_engine
