"""onnxruntime's outputs for the zoo's test inputs: the reference the engine's zoo tests compare with.

    python zoo_reference.py ZOO_DIR [--batches 1,2]

Runs in the project venv (onnxruntime). For each model of ZOO_DIR/manifest.json, feeds seeded random
inputs shaped as its `test_inputs` and writes ZOO_DIR/ref/<name>/b<N>/input_<i>.pb and output_<i>.pb
(TensorProto), with onnxruntime on one thread (its results do not depend on the machine's core count).
"""
import argparse
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def make_input(spec, batch, rng):
    shape = [batch if d == -1 else d for d in spec["shape"]]
    if spec["dtype"] == "INT64":
        if "mask" in spec["name"]:
            # Real padding: every sample but the first has its last positions masked out.
            m = np.ones(shape, dtype=np.int64)
            for b in range(1, shape[0]):
                m[b, shape[1] - 3 * b:] = 0
            return m
        return rng.integers(0, spec.get("high", 100), size=shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--batches", default="1,2")
    a = ap.parse_args()
    manifest = json.load(open(os.path.join(a.dir, "manifest.json")))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    for name, spec in manifest.items():
        sess = ort.InferenceSession(os.path.join(a.dir, f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
        for batch in [int(x) for x in a.batches.split(",") if x]:
            rng = np.random.default_rng(1000 + batch)
            feeds = {s["name"]: make_input(s, batch, rng) for s in spec["test_inputs"]}
            outs = sess.run(None, feeds)
            d = os.path.join(a.dir, "ref", name, f"b{batch}")
            os.makedirs(d, exist_ok=True)
            for i, inp in enumerate(sess.get_inputs()):
                onnx.save_tensor(numpy_helper.from_array(feeds[inp.name], inp.name), os.path.join(d, f"input_{i}.pb"))
            for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
                onnx.save_tensor(numpy_helper.from_array(v, o.name), os.path.join(d, f"output_{i}.pb"))
        print(f"zoo reference: {name}", flush=True)


if __name__ == "__main__":
    main()
