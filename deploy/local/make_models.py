#!/usr/bin/env python3
"""Writes the example model repository in deploy/local/models/ (run with the project venv's python).

Models (all real ONNX, opset 17, made with onnx.helper so nothing is downloaded):
  simple/1     y = x + 1      x: FP32 [-1, 4]   (two versions of one signature: the gateway's canary demo)
  simple/2     y = x * 2
  heavy_mlp/1  four 1024x1024 dense layers with tanh, x: FP32 [-1, 1024] -> y: FP32 [-1, 1024].
               Its cost per execution is dominated by streaming the 16 MiB of weights, so batching 32
               requests costs little more than one: the model behind the dynamic-batching benchmark.
               The weights are built at load time from a small seed (ConstantOfShape + Sin), so the file
               stays a few KiB.
Each version folder also gets a MANIFEST.sha256 (see docs/backend.md) that the backend verifies before load.

  python deploy/local/make_models.py [OUT_DIR]   # default: deploy/local/models
"""
import hashlib
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def save(model: onnx.ModelProto, path: str) -> None:
    onnx.checker.check_model(model, full_check=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save(model, path)


def simple(op: str, value: float, doc: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    c = numpy_helper.from_array(np.array([value], dtype=np.float32), "c")
    node = helper.make_node(op, ["x", "c"], ["y"])
    graph = helper.make_graph([node], "simple", [x], [y], initializer=[c], doc_string=doc)
    return helper.make_model(graph, opset_imports=OPSET, producer_name="infergate make_models.py", ir_version=8)


def heavy_mlp(width: int = 1024, layers: int = 4) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])
    inits = [numpy_helper.from_array(np.array([width, width], dtype=np.int64), "w_shape")]
    nodes = []
    prev = "x"
    for i in range(layers):
        # W_i = sin(k_i * (row-major index pattern)) / sqrt(width): deterministic, bounded, not all equal.
        seed = f"seed{i}"
        nodes.append(
            helper.make_node(
                "ConstantOfShape",
                ["w_shape"],
                [seed],
                value=numpy_helper.from_array(np.array([1.0], dtype=np.float32)),
            )
        )
        ramp = np.linspace(0.0, 1.0 + i, width, dtype=np.float32).reshape(1, width)
        inits.append(numpy_helper.from_array(ramp, f"ramp{i}"))
        inits.append(
            numpy_helper.from_array(
                np.linspace(1.0, 3.0 + i, width, dtype=np.float32).reshape(width, 1), f"col{i}"
            )
        )
        inits.append(numpy_helper.from_array(np.array([1.0 / np.sqrt(width)], dtype=np.float32), f"scale{i}"))
        nodes += [
            helper.make_node("Mul", [seed, f"ramp{i}"], [f"r{i}"]),
            helper.make_node("Mul", [f"r{i}", f"col{i}"], [f"rc{i}"]),
            helper.make_node("Sin", [f"rc{i}"], [f"s{i}"]),
            helper.make_node("Mul", [f"s{i}", f"scale{i}"], [f"w{i}"]),
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Tanh", [f"m{i}"], [f"h{i}" if i < layers - 1 else "y"]),
        ]
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "heavy_mlp", [x], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=OPSET, producer_name="infergate make_models.py", ir_version=8)


SIMPLE_CONFIG = """\
# y = x + 1 (version 1) or y = x * 2 (version 2): one signature, two behaviours, for canary rollouts.
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { all: {} }
input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
"""

HEAVY_CONFIG = """\
# Four 1024x1024 dense layers: each execution streams 16 MiB of weights, so batching pays off.
name: "heavy_mlp"
platform: "onnxruntime_onnx"
max_batch_size: 32
input [ { name: "x", data_type: TYPE_FP32, dims: [ 1024 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 1024 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
dynamic_batching {
  preferred_batch_size: [ 16, 32 ]
  max_queue_delay_microseconds: 2000
}
"""


def write_manifest(version_dir: str) -> None:
    """MANIFEST.sha256: one `<sha256 hex>  <path relative to the version folder>` line per file, sorted."""
    lines = []
    for root, _, files in os.walk(version_dir):
        for f in files:
            full = os.path.join(root, f)
            rel = os.path.relpath(full, version_dir).replace(os.sep, "/")
            if rel == "MANIFEST.sha256":
                continue
            with open(full, "rb") as fh:
                lines.append(f"{hashlib.sha256(fh.read()).hexdigest()}  {rel}")
    with open(os.path.join(version_dir, "MANIFEST.sha256"), "w") as fh:
        fh.write("\n".join(sorted(lines, key=lambda l: l.split("  ", 1)[1])) + "\n")


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
    save(simple("Add", 1.0, "y = x + 1"), os.path.join(out, "simple", "1", "model.onnx"))
    save(simple("Mul", 2.0, "y = x * 2"), os.path.join(out, "simple", "2", "model.onnx"))
    save(heavy_mlp(), os.path.join(out, "heavy_mlp", "1", "model.onnx"))
    with open(os.path.join(out, "simple", "config.pbtxt"), "w") as fh:
        fh.write(SIMPLE_CONFIG)
    with open(os.path.join(out, "heavy_mlp", "config.pbtxt"), "w") as fh:
        fh.write(HEAVY_CONFIG)
    for model, versions in (("simple", ("1", "2")), ("heavy_mlp", ("1",))):
        for v in versions:
            write_manifest(os.path.join(out, model, v))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
