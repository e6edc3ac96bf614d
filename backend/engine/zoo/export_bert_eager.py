"""A small BERT exported with eager attention, for onnxruntime's transformer optimizer (fuse_zoo.py).

    python export_bert_eager.py OUT.onnx

Runs in the zoo's exporter venv (torch, transformers). The zoo's hf_bert_base is exported with transformers'
default SDPA attention, whose traced form onnxruntime's optimizer does not fuse into Attention; eager
attention is the form its BERT fusion recognises, as users who optimise BERT for onnxruntime export it.
Prints one JSON line: the model's source and exporter.
"""
import json
import sys

import torch
import transformers
from transformers import BertConfig, BertModel

SEQ = 128


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                        attn_implementation="eager")
    model = BertModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.int64)
    tokens = {0: "batch", 1: "sequence"}
    torch.onnx.export(model, (ids, mask), out, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={"input_ids": tokens, "attention_mask": tokens, "last_hidden_state": tokens,
                                    "pooler_output": {0: "batch"}},
                      opset_version=17, dynamo=False)
    print(json.dumps({
        "source": f"transformers {transformers.__version__} BertModel(BertConfig(hidden_size=256, "
                  "num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024, "
                  "attn_implementation='eager')), torch.manual_seed(0)",
        "exporter": f"torch.onnx.export (TorchScript) torch {torch.__version__}, opset 17",
    }))


if __name__ == "__main__":
    main()
