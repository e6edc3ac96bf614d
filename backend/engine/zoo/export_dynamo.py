"""Zoo models written by torch's dynamo exporter (`torch.onnx.export(..., dynamo=True)`: torch.export, then
onnxscript), the exporter torch recommends and makes the default from 2.9 on.

    python export_dynamo.py OUT_DIR

Runs in its own venv (zoo/requirements-dynamo.txt: torch, torchvision, transformers, onnxscript), exporting a
torchvision ResNet-50 and transformers' BERT-base and ViT-S. The dynamo exporter of the main zoo's torch 2.5.1
fails on these models with the onnx the zoo pins (docs/engine.md, *The zoo of real exports*), so it comes from a
newer torch. Random weights, seeded; the batch (and the ResNet's height and width, BERT's sequence) are dynamic
(torch.export.Dim.DYNAMIC). Writes OUT_DIR/<name>.onnx and prints, as its last line, one JSON object: per model
its source, exporter, inputs and test inputs (the manifest.json format).
"""
import json
import os
import sys

import onnxscript
import torch
import torchvision
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_zoo import ids, image  # noqa: E402

OPSET = 18  # the dynamo exporter's own opset: asked for 17, it writes 18 and converts down, a second pass
EXPORTER = (f"torch.onnx.export (dynamo=True: torch.export + onnxscript {onnxscript.__version__}) "
            f"torch {torch.__version__}, opset {OPSET}")
DYNAMIC = torch.export.Dim.DYNAMIC


def export(model, args, out, input_names, output_names, dynamic_shapes):
    """The dynamo exporter as a user calls it: one file (no external data), torch's own graph optimisation."""
    torch.onnx.export(model.eval(), args, out, input_names=input_names, output_names=output_names,
                      opset_version=OPSET, dynamo=True, external_data=False, dynamic_shapes=dynamic_shapes)


def classifier(arch, out):
    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(weights=None)
    export(model, (torch.randn(2, 3, 224, 224),), out, ["input"], ["logits"],
           ({0: DYNAMIC, 2: DYNAMIC, 3: DYNAMIC},))
    return {
        "source": f"torchvision {torchvision.__version__} models.{arch}(weights=None), torch.manual_seed(0)",
        "exporter": EXPORTER,
        "inputs": [image("input", 3, 224, 224)],
        "test_inputs": [image("input", 3, 96, 96)],
    }


def hf_bert(out):
    torch.manual_seed(0)
    cfg = transformers.BertConfig()  # bert-base-uncased's dimensions: 12 layers, 768 wide, 12 heads
    model = transformers.BertModel(cfg)
    ids_ = torch.randint(0, cfg.vocab_size, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    export(model, (ids_, mask), out, ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"],
           ({0: DYNAMIC, 1: DYNAMIC}, {0: DYNAMIC, 1: DYNAMIC}))
    return {
        "source": f"transformers {transformers.__version__} BertModel(BertConfig()) (bert-base dimensions), "
                  "torch.manual_seed(0)",
        "exporter": EXPORTER,
        "inputs": [ids("input_ids", 128, cfg.vocab_size), ids("attention_mask", 128, 2)],
        "test_inputs": [ids("input_ids", 32, cfg.vocab_size), ids("attention_mask", 32, 2)],
    }


def hf_vit(out):
    torch.manual_seed(0)
    # ViT-S/16 (DeiT-small dimensions) at 224 px, as the main zoo's hf_vit_small.
    cfg = transformers.ViTConfig(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                 intermediate_size=1536, image_size=224, patch_size=16)
    model = transformers.ViTModel(cfg, add_pooling_layer=False)
    export(model, (torch.randn(2, 3, 224, 224),), out, ["pixel_values"], ["last_hidden_state"],
           ({0: DYNAMIC},))
    return {
        "source": f"transformers {transformers.__version__} ViTModel(ViTConfig(hidden 384, 12 layers, 6 heads, "
                  "patch 16, 224 px)), torch.manual_seed(0)",
        "exporter": EXPORTER,
        "inputs": [image("pixel_values", 3, 224, 224)],
        "test_inputs": [image("pixel_values", 3, 224, 224)],
    }


MODELS = {
    "dyn_resnet50": lambda out: classifier("resnet50", out),
    "dyn_bert_base": hf_bert,
    "dyn_vit_small": hf_vit,
}


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    specs = {}
    for name, export in MODELS.items():
        specs[name] = export(os.path.join(out_dir, f"{name}.onnx"))
    print(json.dumps(specs))


if __name__ == "__main__":
    main()
