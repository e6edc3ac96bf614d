"""A transformer fused by onnxruntime's optimizer for the zoo: the small eager-attention BERT
(export_bert_eager.py) run through `onnxruntime.transformers.optimizer.optimize_model`, as users prepare
BERT for onnxruntime. Its embeddings become com.microsoft EmbedLayerNormalization (whose mask_index output,
the attention mask's valid lengths, feeds every Attention) and its layers Attention, SkipLayerNormalization
and BiasGelu.

    python fuse_zoo.py ZOO_DIR EXPORTED.onnx SOURCE_JSON

Runs in the project venv (onnxruntime). Writes into ZOO_DIR:
- hf_bert_fused.onnx: the optimised graph, with the optimizer's default BERT fusions;
- fused.json: its source, optimizer, inputs, test inputs and operators (the manifest.json format);
- ref/hf_bert_fused/b<N>/: onnxruntime's outputs for the test inputs.
"""
import argparse
import json
import os
import sys

import onnx
import onnxruntime as ort
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quantize_zoo import write_refs  # noqa: E402

NAME = "hf_bert_fused"
HEADS, HIDDEN, SEQ, TEST_SEQ, VOCAB = 4, 256, 128, 32, 30522


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("exported")
    ap.add_argument("source_json")
    a = ap.parse_args()
    ort.set_default_logger_severity(3)
    options = FusionOptions("bert")
    fused = optimize_model(a.exported, model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, opt_level=0,
                           optimization_options=options, use_gpu=False)
    fused.save_model_to_file(os.path.join(a.dir, f"{NAME}.onnx"))

    spec = json.loads(a.source_json)
    spec["exporter"] += (f"; onnxruntime {ort.__version__} transformers.optimizer.optimize_model("
                         f"model_type='bert', num_heads={HEADS}, hidden_size={HIDDEN}, opt_level=0)")

    def ids(seq):
        return {"name": "input_ids", "dtype": "INT64", "shape": [-1, seq], "high": VOCAB}

    def mask(seq):
        return {"name": "attention_mask", "dtype": "INT64", "shape": [-1, seq], "high": 2}

    spec["inputs"] = [ids(SEQ), mask(SEQ)]
    spec["test_inputs"] = [ids(TEST_SEQ), mask(TEST_SEQ)]
    write_refs(a.dir, NAME, spec)
    graph = onnx.load(os.path.join(a.dir, f"{NAME}.onnx"), load_external_data=False).graph
    spec["operators"] = sorted({f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in graph.node})
    print(f"zoo fused: {NAME}: {', '.join(spec['operators'])}", flush=True)
    with open(os.path.join(a.dir, "fused.json"), "w") as f:
        json.dump({NAME: spec}, f, indent=1)


if __name__ == "__main__":
    main()
