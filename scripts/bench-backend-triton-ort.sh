#!/usr/bin/env bash
# Real exported models served with dynamic batching, side by side with what a CPU user of the Triton stack
# runs: a real Triton 2.51 whose Python backend executes the same ONNX file with onnxruntime (recorded in
# docs/benchmarks.md, section "Backend serving real exports against Triton + onnxruntime").
#
#   bench-backend-triton-ort.sh BIN_DIR      (BIN_DIR holds a release infergate-backend; `make bench` passes it)
#
# Models come from the engine's zoo (scripts/ensure-zoo.sh): the OCR text recogniser (PP-OCRv4 rec, a conv
# backbone then attention blocks) and the OCR direction classifier, at a fixed input size. Both servers hold
# one instance with max_batch_size 8 and dynamic batching with no queue delay (Triton's default and ours):
#   - infergate: platform onnxruntime_onnx, its CPU executor with its default threads (one per core);
#   - Triton: backend python, a model.py that concatenates the requests of each batch along axis 0, runs one
#     onnxruntime InferenceSession (CPUExecutionProvider, intra-op threads = cores) and splits the result.
# Two clients drive each server over gRPC at BENCH_CONCURRENCY, servers alternating, BENCH_ROUNDS rounds,
# after an unmeasured settling run (plans built, caches warm): NVIDIA's perf_analyzer, then our own
# infergate-load. Per round: throughput, p99 and the mean rows per execution (perf_analyzer's server-side
# statistics); the table gives the medians and the range of the per-round throughput ratios.
# Environment: BENCH_MODELS (default "ocr_rec ocr_cls"), BENCH_CONCURRENCY (8), BENCH_ROUNDS (3),
# BENCH_WINDOW_MS (5000), BENCH_SETTLE_MS (5000), INFERGATE_PYTHON (the project venv: onnx, onnxruntime),
# INFERGATE_ZOO_CACHE (the zoo's cache folder).
set -euo pipefail
bin_dir="${1:?usage: bench-backend-triton-ort.sh BIN_DIR (a release build of infergate-backend)}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
tools="${INFERGATE_SHARED_TOOLS:-$root/../shared/tools}"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
models="${BENCH_MODELS:-ocr_rec ocr_cls}"
conc="${BENCH_CONCURRENCY:-8}"
rounds="${BENCH_ROUNDS:-3}"
window="${BENCH_WINDOW_MS:-5000}"
settle="${BENCH_SETTLE_MS:-5000}"
for b in infergate-backend infergate-load; do
  [ -x "$bin_dir/$b" ] || { echo "no $bin_dir/$b: run make build-release (make bench does)" >&2; exit 1; }
done
[ -x "$py" ] || { echo "no python at $py: run make venv" >&2; exit 1; }
for t in triton-peer perf-analyzer; do
  [ -x "$tools/$t" ] || { echo "missing $tools/$t (the shared tools folder beside the checkout)" >&2; exit 1; }
done
zoo="$("$here/ensure-zoo.sh")"
"$tools/perf-analyzer" install >/dev/null
peer_py="$("$tools/triton-peer" python)"
# The peer's Python backend runs in its own venv (numpy 1.x, which its stub is built against): onnxruntime
# goes there at the version the project venv pins, so both sides of every engine benchmark run one release.
ort_version="$("$py" -c 'import onnxruntime; print(onnxruntime.__version__)')"
if ! "$peer_py" -c "import onnxruntime, sys; sys.exit(onnxruntime.__version__ != '$ort_version')" 2>/dev/null; then
  echo "==> installing onnxruntime $ort_version into the Triton peer's venv" >&2
  "$peer_py" -m pip install -q --disable-pip-version-check "onnxruntime==$ort_version" "numpy<2"
fi

work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# Both repositories: the same ONNX file, the same I/O and batching; only the backend line differs.
"$py" - "$zoo" "$work" "$(nproc)" $models <<'PYEOF'
import os, shutil, sys, textwrap
import onnx

zoo, work, cores, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
# Per model: the input size a user of the OCR pipeline sends (the zoo's benchmark size).
SHAPES = {"ocr_rec": [3, 48, 320], "ocr_cls": [3, 48, 192]}
TYPES = {onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.INT64: "TYPE_INT64"}
PY_MODEL = textwrap.dedent('''
    import json, os
    import numpy as np
    import onnxruntime as ort
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            cfg = json.loads(args["model_config"])
            self.input = cfg["input"][0]["name"]
            self.outputs = [o["name"] for o in cfg["output"]]
            options = ort.SessionOptions()
            options.intra_op_num_threads = CORES
            path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
            self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

        def execute(self, requests):
            parts = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
            values = self.session.run(self.outputs, {self.input: np.concatenate(parts)})
            responses, start = [], 0
            for part in parts:
                end = start + part.shape[0]
                outs = [pb_utils.Tensor(n, np.ascontiguousarray(v[start:end])) for n, v in zip(self.outputs, values)]
                responses.append(pb_utils.InferenceResponse(output_tensors=outs))
                start = end
            return responses
''')


def dims(value_info):
    return [d.dim_value if d.HasField("dim_value") else -1 for d in value_info.type.tensor_type.shape.dim][1:]


for name in names:
    path = os.path.join(zoo, f"{name}.onnx")
    model = onnx.load(path, load_external_data=False)
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    (inp,) = [i for i in graph.input if i.name not in initializers]
    io = [f'input [ {{ name: "{inp.name}", data_type: {TYPES[inp.type.tensor_type.elem_type]}, dims: {SHAPES[name]} }} ]']
    outs = ", ".join(f'{{ name: "{o.name}", data_type: {TYPES[o.type.tensor_type.elem_type]}, dims: {dims(o)} }}'
                     for o in graph.output)
    io.append(f"output [ {outs} ]")
    for side, backend in (("ours", 'platform: "onnxruntime_onnx"'), ("triton", 'backend: "python"')):
        d = os.path.join(work, side, name)
        os.makedirs(os.path.join(d, "1"))
        with open(os.path.join(d, "config.pbtxt"), "w") as f:
            f.write(f'name: "{name}"\n{backend}\nmax_batch_size: 8\n' + "\n".join(io) + "\n"
                    "instance_group [ { count: 1, kind: KIND_CPU } ]\ndynamic_batching { }\n")
        # A copy, not a link: infergate refuses model files that resolve outside their model folder.
        shutil.copyfile(path, os.path.join(d, "1", "model.onnx"))
        if side == "triton":
            with open(os.path.join(d, "1", "model.py"), "w") as f:
                f.write(PY_MODEL.replace("CORES", str(cores)))
PYEOF

# shellcheck source=scripts/lib-peer-servers.sh
. "$here/lib-peer-servers.sh"

ig_http=$(free_port); ig_grpc=$(free_port); ig_metrics=$(free_port)
"$bin_dir/infergate-backend" --model-repository "$work/ours" --http-port "$ig_http" --grpc-port "$ig_grpc" \
  --metrics-port "$ig_metrics" --http-address 127.0.0.1 --grpc-address 127.0.0.1 --metrics-address 127.0.0.1 \
  --log-verbose 0 >"$work/infergate.log" 2>&1 &
pids+=("$!")
tr_http=$(free_port); tr_grpc=$(free_port); tr_metrics=$(free_port)
"$tools/triton-peer" serve "$work/triton" "$tr_http" "$tr_grpc" "$tr_metrics" >"$work/triton.log" 2>&1 &
pids+=("$!")
wait_ready "http://127.0.0.1:$ig_http/v2/health/ready" infergate "$work/infergate.log"
wait_ready "http://127.0.0.1:$tr_http/v2/health/ready" triton "$work/triton.log"
tr_version=$(curl -sf "http://127.0.0.1:$tr_http/v2" | "$py" -c 'import json,sys; print(json.load(sys.stdin)["version"])')

# The same answers first: one random batch of 3 through both servers (tritonclient, gRPC); the outputs must
# agree to within what two float executors' orders of summation allow.
"$py" - "127.0.0.1:$ig_grpc" "127.0.0.1:$tr_grpc" $models <<'PYEOF'
import sys
import numpy as np
import tritonclient.grpc as grpcclient

ours, theirs = grpcclient.InferenceServerClient(sys.argv[1]), grpcclient.InferenceServerClient(sys.argv[2])
for name in sys.argv[3:]:
    meta = ours.get_model_metadata(name)
    (inp,) = meta.inputs
    x = np.random.default_rng(7).random([3] + list(inp.shape[1:]), dtype=np.float32)
    answers = []
    for client in (ours, theirs):
        request = grpcclient.InferInput(inp.name, list(x.shape), inp.datatype)
        request.set_data_from_numpy(x)
        result = client.infer(name, [request])
        answers.append([result.as_numpy(o.name) for o in meta.outputs])
    for o, a, b in zip(meta.outputs, *answers):
        worst = float(np.max(np.abs(a - b)))
        if a.shape != b.shape or worst > 1e-3:
            sys.exit(f"{name}: output {o.name} differs between the servers (shapes {a.shape} and {b.shape}, max |diff| {worst})")
    print(f"{name}: both servers give the same outputs for a batch of 3", file=sys.stderr)
PYEOF

# run SERVER MODEL GRPC_ADDRESS ROUND -> "throughput p99_us rows_per_execution load_throughput load_p99_ms"
run() {
  local base="$work/$1-$2-$4"
  "$tools/perf-analyzer" -m "$2" -u "$3" -i grpc --concurrency-range "$conc:$conc" -p "$settle" \
    --stability-percentage 100000 --max-trials 1 >"$base.settle" 2>&1 || true
  # Stability is not asked for (--stability-percentage far above any swing): a shared machine is noisy and
  # the comparison is made round by round instead.
  "$tools/perf-analyzer" -m "$2" -u "$3" -i grpc --concurrency-range "$conc:$conc" -p "$window" \
    --stability-percentage 100000 --max-trials 3 --percentile 99 -f "$base.csv" >"$base.log" 2>&1 \
    || { echo "perf_analyzer failed against $1 ($2):" >&2; tail -20 "$base.log" >&2; exit 1; }
  "$bin_dir/infergate-load" bench --target "$3" --protocol grpc --model "$2" --concurrency "$conc" \
    --warmup 1s --duration "${window}ms" --quiet --out "$base.load" >"$base.load.log" 2>&1 \
    || { echo "infergate-load failed against $1 ($2):" >&2; tail -20 "$base.load.log" >&2; exit 1; }
  "$py" - "$base.csv" "$base.log" "$base.load/bench.json" <<'PYEOF'
import csv, json, re, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
text = open(sys.argv[2]).read()
inferences = int(re.findall(r"Inference count: (\d+)", text)[-1])
executions = int(re.findall(r"Execution count: (\d+)", text)[-1])
load = json.load(open(sys.argv[3]))["total"]
if load["errors"]:
    sys.exit(f"infergate-load saw errors: {load['errors']}")
print(round(float(row["Inferences/Second"]), 1), row["p99 latency"], f"{inferences / max(executions, 1):.1f}",
      round(load["throughput_rps"], 1), round(load["latency_ms"]["p99"], 1))
PYEOF
}

median() { "$py" -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "==> backend vs Triton $tr_version + onnxruntime $ort_version (Python backend): $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), perf_analyzer 2.41 gRPC, concurrency $conc, ${window} ms windows, $rounds rounds"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "perf_analyzer:"
echo
echo "| model | infergate infer/s | infergate p99 (ms) | rows/exec | Triton + onnxruntime infer/s | Triton p99 (ms) | rows/exec | throughput ratio (median, range) |"
echo "|---|---|---|---|---|---|---|---|"
load_rows=()
for m in $models; do
  t_o=() p_o=() b_o=() t_t=() p_t=() b_t=() ratios=() lt_o=() lp_o=() lt_t=() lp_t=() load_ratios=()
  for r in $(seq "$rounds"); do
    read -r a b c d e < <(run infergate "$m" "127.0.0.1:$ig_grpc" "$r")
    read -r f g h i j < <(run triton "$m" "127.0.0.1:$tr_grpc" "$r")
    t_o+=("$a") p_o+=("$b") b_o+=("$c") lt_o+=("$d") lp_o+=("$e")
    t_t+=("$f") p_t+=("$g") b_t+=("$h") lt_t+=("$i") lp_t+=("$j")
    ratios+=("$("$py" -c "print($a / max($f, 0.1))")")
    load_ratios+=("$("$py" -c "print($d / max($i, 0.1))")")
  done
  spread() { "$py" -c 'import sys; r=[float(x) for x in sys.argv[1:]]; print(f"{min(r):.2f}-{max(r):.2f}")' "$@"; }
  printf '| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2fx (%s) |\n' "$m" \
    "$(median "${t_o[@]}")" "$("$py" -c "print($(median "${p_o[@]}") / 1000)")" "$(median "${b_o[@]}")" \
    "$(median "${t_t[@]}")" "$("$py" -c "print($(median "${p_t[@]}") / 1000)")" "$(median "${b_t[@]}")" \
    "$(median "${ratios[@]}")" "$(spread "${ratios[@]}")"
  load_rows+=("$(printf '| %s | %.1f | %.1f | %.1f | %.1f | %.2fx (%s) |' "$m" \
    "$(median "${lt_o[@]}")" "$(median "${lp_o[@]}")" "$(median "${lt_t[@]}")" "$(median "${lp_t[@]}")" \
    "$(median "${load_ratios[@]}")" "$(spread "${load_ratios[@]}")")")
done
echo
echo "infergate-load:"
echo
echo "| model | infergate infer/s | infergate p99 (ms) | Triton + onnxruntime infer/s | Triton p99 (ms) | throughput ratio (median, range) |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${load_rows[@]}"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
