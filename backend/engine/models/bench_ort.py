"""onnxruntime side of the engine benchmark: the same model files and batch sizes as the Rust bench.

    python bench_ort.py MODELS_DIR [--batches 1,8,32] [--seconds 2] [--threads N]

Prints one line per measurement in the Rust bench's format:
    ort  <model>  batch <b>  latency_ms <x>  throughput <samples/s>  [gflops <g>]
"""
import argparse
import json
import os
import time

import numpy as np
import onnxruntime as ort


def feeds_for(spec, batch, rng):
    feeds = {}
    for i in spec["inputs"]:
        shape = [batch if d == -1 else d for d in i["shape"]]
        if i["dtype"] == "INT64":
            feeds[i["name"]] = rng.integers(0, i.get("high", 100), size=shape).astype(np.int64)
        else:
            feeds[i["name"]] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def feed_sets(zoo, spec, batch, rng):
    """One generated input set, or for a model with `bench_inputs` (raw float32 files of its one input) one set
    per file: the images the Rust bench runs too."""
    if "bench_inputs" not in spec:
        return [feeds_for(spec, batch, rng)]
    i = spec["inputs"][0]
    return [{i["name"]: np.fromfile(os.path.join(zoo, f), dtype="<f4").reshape(i["shape"])}
            for f in spec["bench_inputs"]]


def measure(sess, sets, seconds):
    for k in range(3):
        sess.run(None, sets[k % len(sets)])
    n, t0 = 0, time.perf_counter()
    while True:
        sess.run(None, sets[n % len(sets)])
        n += 1
        el = time.perf_counter() - t0
        if el >= seconds and n >= 5:
            return el / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(a.dir, "manifest.json")))
    for side in ("detector.json", "quantized.json", "dynamo.json"):
        path = os.path.join(a.dir, side)
        if os.path.exists(path):
            manifest.update(json.load(open(path)))
    rng = np.random.default_rng(0)
    for name, spec in manifest.items():
        if a.only and name not in a.only.split(","):
            continue
        opts = ort.SessionOptions()
        if a.threads:
            opts.intra_op_num_threads = a.threads
        sess = ort.InferenceSession(os.path.join(a.dir, f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
        if "flops" in spec:
            lat = measure(sess, feed_sets(a.dir, spec, 1, rng), a.seconds)
            print(f"ort  {name}  batch 1  latency_ms {lat * 1e3:.3f}  throughput {1 / lat:.1f}  gflops {spec['flops'] / lat / 1e9:.2f}", flush=True)
            continue
        batched = any(-1 in i["shape"] for i in spec["inputs"])
        for b in [int(x) for x in a.batches.split(",") if batched or int(x) == 1]:
            lat = measure(sess, feed_sets(a.dir, spec, b, rng), a.seconds)
            print(f"ort  {name}  batch {b}  latency_ms {lat * 1e3:.3f}  throughput {b / lat:.1f}", flush=True)


if __name__ == "__main__":
    main()
