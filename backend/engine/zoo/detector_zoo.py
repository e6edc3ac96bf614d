"""The zoo's detector ending in NonMaxSuppression (export_detector.py): onnxruntime's outputs for its test
input, and its manifest entry.

    python detector_zoo.py ZOO_DIR SOURCE_JSON

Runs in the project venv (onnxruntime), after export_detector.py wrote ZOO_DIR/tv_ssdlite320_nms.onnx.
Writes into ZOO_DIR:
- detector.json: its source, exporter, inputs, test inputs and operators (the manifest.json format);
- ref/tv_ssdlite320_nms/b1/: onnxruntime's outputs (boxes, scores, labels) for one image;
- bench/tv_ssdlite320_nms/image_<k>.f32: the benchmark's images (`bench_inputs` in detector.json).
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quantize_zoo import write_refs  # noqa: E402

NAME = "tv_ssdlite320_nms"
BENCH_IMAGES = 8


def operators(graph):
    """Every operator of the graph, including those inside If branches (torchvision's batched NMS is one)."""
    for n in graph.node:
        yield n.op_type
        for attr in n.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from operators(attr.g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("source_json")
    a = ap.parse_args()
    spec = json.loads(a.source_json)
    # one image, [3, H, W], no batch dim: the model takes a list of images
    image = {"name": "image", "dtype": "FP32", "shape": [3, 320, 320]}
    spec["inputs"] = [image]
    spec["test_inputs"] = [image]
    # Its post-processing depends on the values (how many boxes pass the score filter): benchmarks feed
    # both sides the same images, a different one on each run, as raw little-endian float32 files.
    bench = os.path.join("bench", NAME)
    os.makedirs(os.path.join(a.dir, bench), exist_ok=True)
    rng = np.random.default_rng(2000)
    spec["bench_inputs"] = []
    for k in range(BENCH_IMAGES):
        path = os.path.join(bench, f"image_{k}.f32")
        rng.standard_normal(image["shape"]).astype("<f4").tofile(os.path.join(a.dir, path))
        spec["bench_inputs"].append(path)
    write_refs(a.dir, NAME, spec, batches=(1,))
    graph = onnx.load(os.path.join(a.dir, f"{NAME}.onnx"), load_external_data=False).graph
    spec["operators"] = sorted(set(operators(graph)))
    print(f"zoo detector: {NAME}: {', '.join(spec['operators'])}", flush=True)
    with open(os.path.join(a.dir, "detector.json"), "w") as f:
        json.dump({NAME: spec}, f, indent=1)


if __name__ == "__main__":
    main()
