"""The zoo's models from torch's dynamo exporter (export_dynamo.py): onnxruntime's outputs for their test inputs,
and their manifest entries.

    python dynamo_zoo.py ZOO_DIR SOURCE_JSON

Runs in the project venv (onnxruntime), after export_dynamo.py wrote ZOO_DIR/<name>.onnx. Writes into ZOO_DIR:
- dynamo.json: per model its source, exporter, inputs, test inputs and operators (the manifest.json format);
- ref/<name>/b<N>/: onnxruntime's outputs for the test inputs at batch 1 and 2, made as zoo_reference.py makes them.
"""
import argparse
import json
import os
import sys

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from detector_zoo import operators  # noqa: E402
from quantize_zoo import write_refs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("source_json")
    a = ap.parse_args()
    specs = json.loads(a.source_json)
    for name, spec in specs.items():
        write_refs(a.dir, name, spec)
        graph = onnx.load(os.path.join(a.dir, f"{name}.onnx"), load_external_data=False).graph
        spec["operators"] = sorted(set(operators(graph)))
        print(f"zoo dynamo: {name}: {', '.join(spec['operators'])}", flush=True)
    with open(os.path.join(a.dir, "dynamo.json"), "w") as f:
        json.dump(specs, f, indent=1)


if __name__ == "__main__":
    main()
