#!/usr/bin/env bash
# The engine's zoo of real exported models (backend/engine/zoo/): exports them once into a cache and prints
# the folder. Later runs reuse it until zoo/requirements.txt or the zoo's scripts change.
#   ensure-zoo.sh [CACHE_DIR]          (default ~/.cache/infergate/zoo)
# Env: INFERGATE_PYTHON (the project venv's python, for onnxruntime's reference outputs).
# Torch and transformers live in CACHE_DIR/venv, not in the project venv: their wheels are large.
# The quantized models (zoo/quantize_zoo.py) are made from the exports with the project venv's onnxruntime, and
# so is the BERT fused by onnxruntime's transformer optimizer (zoo/fuse_zoo.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
zoo_src="$here/../backend/engine/zoo"
cache="${1:-${INFERGATE_ZOO_CACHE:-$HOME/.cache/infergate/zoo}}"
py="${INFERGATE_PYTHON:-$HOME/.cache/infergate/venv/bin/python}"
ocr_wheel_spec="rapidocr-onnxruntime==1.4.4"
mkdir -p "$cache"
want="$(cat "$zoo_src/requirements.txt" "$zoo_src/export_zoo.py" "$zoo_src/zoo_reference.py" | sha256sum | cut -d' ' -f1)"
out="$cache/models"
# Several test binaries may ask at once: one exports, the others wait for it.
exec 9>"$cache/.lock"
flock 9
[ -x "$py" ] || { echo "ensure-zoo: no project venv python at $py (run \`make venv\`)" >&2; exit 1; }

# ensure_venv DIR REQUIREMENTS WHAT: a venv at DIR with REQUIREMENTS installed, made again when they change.
ensure_venv() {
  local dir="$1" requirements="$2" req_sum
  req_sum="$(sha256sum "$requirements" | cut -d' ' -f1)"
  if [ ! -x "$dir/bin/python" ] || [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" != "$req_sum" ]; then
    echo "==> zoo: preparing $3 at $dir (a few GB, once)" >&2
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$requirements" >&2
    echo "$req_sum" > "$dir/.requirements.sha256"
  fi
}

# The quantized models (zoo/quantize_zoo.py, with the project venv's onnxruntime) are a second stage with
# its own stamp: changing the quantizer redoes only them, and a fresh export redoes them too.
quantize() {
  local quant_want
  quant_want="$(cat "$zoo_src/quantize_zoo.py" "$zoo_src/zoo_reference.py" "$out/.stamp" | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$out/.quant-stamp" ] || [ "$(cat "$out/.quant-stamp")" != "$quant_want" ]; then
    echo "==> zoo: quantized models (onnxruntime.quantization) into $out" >&2
    "$py" "$zoo_src/quantize_zoo.py" "$out" >&2
    echo "$quant_want" > "$out/.quant-stamp"
  fi
}
# The transformer fused by onnxruntime's optimizer (zoo/fuse_zoo.py) is a third stage: a small eager-attention
# BERT exported in the exporters' venv, then optimised with the project venv's onnxruntime.
fuse() {
  local fuse_want exported source
  fuse_want="$(cat "$zoo_src/export_bert_eager.py" "$zoo_src/fuse_zoo.py" "$zoo_src/quantize_zoo.py" \
    "$zoo_src/zoo_reference.py" "$out/.stamp" | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$out/.fuse-stamp" ] || [ "$(cat "$out/.fuse-stamp")" != "$fuse_want" ]; then
    [ -x "$cache/venv/bin/python" ] || { echo "ensure-zoo: no exporters' venv at $cache/venv; remove $out/.stamp to rebuild the zoo" >&2; exit 1; }
    echo "==> zoo: a BERT fused by onnxruntime.transformers.optimizer into $out" >&2
    exported="$cache/bert_eager.onnx"
    source="$("$cache/venv/bin/python" "$zoo_src/export_bert_eager.py" "$exported" | tail -n 1)"
    "$py" "$zoo_src/fuse_zoo.py" "$out" "$exported" "$source" >&2
    rm -f "$exported"
    echo "$fuse_want" > "$out/.fuse-stamp"
  fi
}
# The detector exported whole, NonMaxSuppression included (zoo/export_detector.py), is a fourth stage: exported
# in the exporters' venv, its reference outputs made with the project venv's onnxruntime (zoo/detector_zoo.py).
detector() {
  local detector_want source
  detector_want="$(cat "$zoo_src/export_detector.py" "$zoo_src/detector_zoo.py" "$zoo_src/quantize_zoo.py" \
    "$zoo_src/zoo_reference.py" "$out/.stamp" | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$out/.detector-stamp" ] || [ "$(cat "$out/.detector-stamp")" != "$detector_want" ]; then
    [ -x "$cache/venv/bin/python" ] || { echo "ensure-zoo: no exporters' venv at $cache/venv; remove $out/.stamp to rebuild the zoo" >&2; exit 1; }
    echo "==> zoo: a detector exported whole, NonMaxSuppression included, into $out" >&2
    source="$("$cache/venv/bin/python" "$zoo_src/export_detector.py" "$out/tv_ssdlite320_nms.onnx" 2>/dev/null | tail -n 1)"
    "$py" "$zoo_src/detector_zoo.py" "$out" "$source" >&2
    echo "$detector_want" > "$out/.detector-stamp"
  fi
}
# The models of torch's dynamo exporter (zoo/export_dynamo.py) are a fifth stage, in a venv of their own
# (zoo/requirements-dynamo.txt: a newer torch than the main zoo's), their reference outputs made with the project
# venv's onnxruntime (zoo/dynamo_zoo.py).
dynamo() {
  local dynamo_want venv="$cache/dynamo-venv" source
  dynamo_want="$(cat "$zoo_src/requirements-dynamo.txt" "$zoo_src/export_dynamo.py" "$zoo_src/dynamo_zoo.py" \
    "$zoo_src/detector_zoo.py" "$zoo_src/quantize_zoo.py" "$zoo_src/zoo_reference.py" "$out/.stamp" \
    | sha256sum | cut -d' ' -f1)"
  if [ ! -f "$out/.dynamo-stamp" ] || [ "$(cat "$out/.dynamo-stamp")" != "$dynamo_want" ]; then
    ensure_venv "$venv" "$zoo_src/requirements-dynamo.txt" "the dynamo exporter's venv (a newer torch)"
    echo "==> zoo: models of torch's dynamo exporter into $out" >&2
    source="$("$venv/bin/python" "$zoo_src/export_dynamo.py" "$out" | tail -n 1)"
    "$py" "$zoo_src/dynamo_zoo.py" "$out" "$source" >&2
    echo "$dynamo_want" > "$out/.dynamo-stamp"
  fi
}
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$want" ]; then
  quantize
  fuse
  detector
  dynamo
  echo "$out"
  exit 0
fi
ensure_venv "$cache/venv" "$zoo_src/requirements.txt" "the exporters' venv (torch, torchvision, transformers)"
mkdir -p "$cache/wheels"
wheel="$(ls "$cache"/wheels/rapidocr_onnxruntime-1.4.4-*.whl 2>/dev/null | head -1 || true)"
if [ -z "$wheel" ]; then
  "$cache/venv/bin/pip" download -q --disable-pip-version-check --no-deps "$ocr_wheel_spec" -d "$cache/wheels" >&2
  wheel="$(ls "$cache"/wheels/rapidocr_onnxruntime-1.4.4-*.whl | head -1)"
fi
echo "==> zoo: exporting into $out" >&2
rm -rf "$out.tmp"
"$cache/venv/bin/python" "$zoo_src/export_zoo.py" "$out.tmp" --ocr-wheel "$wheel" >&2
echo "==> zoo: onnxruntime reference outputs" >&2
"$py" "$zoo_src/zoo_reference.py" "$out.tmp" >&2
echo "$want" > "$out.tmp/.stamp"
rm -rf "$out"
mv "$out.tmp" "$out"
quantize
fuse
detector
dynamo
echo "$out"
