"""Quantized models for the zoo: PaddleOCR's direction classifier (`ocr_cls`, a small conv net from the
zoo) quantized by `onnxruntime.quantization`, the usual way users make CPU inference cheaper.

    python quantize_zoo.py ZOO_DIR
    python quantize_zoo.py ZOO_DIR --resnet50


Runs in the project venv (onnxruntime) after export_zoo.py and zoo_reference.py. Writes into ZOO_DIR:
- ocr_cls_qdq.onnx: `quantize_static` in QDQ format (QuantizeLinear/DequantizeLinear pairs), INT8
  per-channel weights and UINT8 activations, MinMax-calibrated on 8 seeded random images;
- ocr_cls_dynamic.onnx: `quantize_dynamic` (DynamicQuantizeLinear feeding ConvInteger/MatMulInteger), UINT8
  weights;
- quantized.json: per model its source, quantizer and test inputs (the manifest.json format);
- ref/<name>/b<N>/: onnxruntime's outputs for the test inputs, made as zoo_reference.py makes them.
Deterministic: the calibration images and test inputs are seeded.

With --resnet50 it writes only tv_resnet50_qdq.onnx: the zoo's torchvision ResNet-50 through
`quant_pre_process` and `quantize_static` as above (224×224 calibration images), for benchmarks; no
test reads it (on lavapipe it would take minutes).
"""
import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_reference import make_input  # noqa: E402

BASE = "ocr_cls"
SHAPE = [3, 48, 192]


class RandomImages(CalibrationDataReader):
    """Seeded random images: real calibration data is not needed to exercise the operators."""

    def __init__(self, input_name, count=8, shape=SHAPE):
        rng = np.random.default_rng(7)
        self.batches = iter([{input_name: rng.standard_normal([1] + shape).astype(np.float32)}
                             for _ in range(count)])

    def get_next(self):
        return next(self.batches, None)


def write_refs(zoo, name, spec, batches=(1, 2)):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(zoo, f"{name}.onnx"), opts, providers=["CPUExecutionProvider"])
    for batch in batches:
        rng = np.random.default_rng(1000 + batch)
        feeds = {s["name"]: make_input(s, batch, rng) for s in spec["test_inputs"]}
        outs = sess.run(None, feeds)
        d = os.path.join(zoo, "ref", name, f"b{batch}")
        os.makedirs(d, exist_ok=True)
        for i, inp in enumerate(sess.get_inputs()):
            onnx.save_tensor(numpy_helper.from_array(feeds[inp.name], inp.name), os.path.join(d, f"input_{i}.pb"))
        for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
            onnx.save_tensor(numpy_helper.from_array(v, o.name), os.path.join(d, f"output_{i}.pb"))


def quantize_resnet50(zoo):
    src = os.path.join(zoo, "tv_resnet50.onnx")
    pre = os.path.join(zoo, "tv_resnet50_pre.onnx")
    dst = os.path.join(zoo, "tv_resnet50_qdq.onnx")
    input_name = onnx.load(src, load_external_data=False).graph.input[0].name
    quant_pre_process(src, pre)
    quantize_static(pre, dst, RandomImages(input_name, shape=[3, 224, 224]), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    os.remove(pre)
    print(f"zoo quantized: {dst}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--resnet50", action="store_true", help="write only tv_resnet50_qdq.onnx (benchmarks)")
    a = ap.parse_args()
    ort.set_default_logger_severity(3)  # the quantizer's per-initializer warnings are noise here
    if a.resnet50:
        quantize_resnet50(a.dir)
        return
    base = json.load(open(os.path.join(a.dir, "manifest.json")))[BASE]
    src = os.path.join(a.dir, f"{BASE}.onnx")
    input_name = onnx.load(src, load_external_data=False).graph.input[0].name
    version = f"onnxruntime {ort.__version__}"
    models = {}

    qdq = os.path.join(a.dir, f"{BASE}_qdq.onnx")
    quantize_static(src, qdq, RandomImages(input_name), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    models[f"{BASE}_qdq"] = {
        "source": f"{BASE}: {base['source']}",
        "exporter": f"{version} quantization.quantize_static(QuantFormat.QDQ, per_channel=True, "
                    "activations QUInt8, weights QInt8), MinMax calibration on 8 seeded random images",
    }

    dynamic = os.path.join(a.dir, f"{BASE}_dynamic.onnx")
    quantize_dynamic(src, dynamic, weight_type=QuantType.QUInt8)
    models[f"{BASE}_dynamic"] = {
        "source": f"{BASE}: {base['source']}",
        "exporter": f"{version} quantization.quantize_dynamic(weight_type=QUInt8)",
    }

    for name, spec in models.items():
        spec["inputs"] = base["inputs"]
        spec["test_inputs"] = base["test_inputs"]
        write_refs(a.dir, name, spec)
        ops = sorted({n.op_type for n in onnx.load(os.path.join(a.dir, f"{name}.onnx")).graph.node})
        spec["operators"] = ops
        print(f"zoo quantized: {name}: {', '.join(ops)}", flush=True)
    with open(os.path.join(a.dir, "quantized.json"), "w") as f:
        json.dump(models, f, indent=1)


if __name__ == "__main__":
    main()
