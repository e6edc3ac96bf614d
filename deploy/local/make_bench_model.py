#!/usr/bin/env python3
"""Writes the batching benchmark's model, stream_mlp, to OUT_DIR/stream_mlp/1/model.onnx (run with the
project venv's python; used by scripts/bench-backend-batching.sh, not part of the example repository).

  stream_mlp/1  six 2048x2048 dense layers with tanh, x: FP32 [-1, 2048] -> y: FP32 [-1, 2048].
                96 MiB of weights: three times this machine's 32 MiB L3 (and any current server L3 per
                core complex), so every execution streams all of them from DRAM. At batch 1 that read is
                nearly the whole cost (a 2048-wide matrix-vector product does 2 flops per 4-byte weight);
                a batch of 32 reads the same weights once for 32 rows, so its cost per row is a fraction.
                This is the case the dynamic batcher is for: per-execution cost dominates.
                heavy_mlp (make_models.py, 16 MiB of weights) fits in L3 here, so its batch-1 path runs
                from cache and batching gains far less.
The weights are built at load time from a small seed (make_models.heavy_mlp), so the file stays a few KiB.

  python deploy/local/make_bench_model.py OUT_DIR [WIDTH LAYERS]   # default 2048 6
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import heavy_mlp, save, write_manifest  # noqa: E402


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    width = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    model = heavy_mlp(width, layers)
    model.graph.name = "stream_mlp"
    version = os.path.join(out, "stream_mlp", "1")
    save(model, os.path.join(version, "model.onnx"))
    write_manifest(version)
    print(f"wrote {version}: {layers} layers of {width}x{width} FP32, {layers * width * width * 4 / 2**20:.0f} MiB of weights")


if __name__ == "__main__":
    main()
