"""A detector exported whole, post-processing included: torchvision's SSDlite320 (MobileNetV3 backbone) as
`torch.onnx.export` writes it, with its input normalisation and resize, box decoding, per-class score
filtering (NonZero), top-k and batched non-maximum suppression (NonMaxSuppression) in the graph.

    python export_detector.py OUT.onnx

Runs in the zoo's exporter venv (torch, torchvision). Random weights, seeded; the batch-norm statistics are
set from a forward pass on random images (as a trained network's are from data) so that activations keep
their scale through the backbone: with the freshly initialised statistics they shrink to 1e-20 and every
class score is the same, which would make the detections a tie-break of equal scores. Prints one JSON line:
the model's source and exporter.
"""
import json
import sys

import torch
import torchvision

OPSET = 17
SCORE_THRESH, TOPK, DETECTIONS = 0.03, 100, 100


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, score_thresh=SCORE_THRESH, topk_candidates=TOPK,
        detections_per_img=DETECTIONS)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 1.0  # the next forward pass's statistics replace the initial ones
    model.train()
    with torch.no_grad():
        features = model.backbone(torch.rand(4, 3, 320, 320))
        model.head(list(features.values()))
    model.eval()
    image = torch.rand(3, 320, 320)
    torch.onnx.export(model, ([image],), out, input_names=["image"], output_names=["boxes", "scores", "labels"],
                      opset_version=OPSET, dynamo=False)
    print(json.dumps({
        "source": f"torchvision {torchvision.__version__} models.detection.ssdlite320_mobilenet_v3_large("
                  f"weights=None, weights_backbone=None, score_thresh={SCORE_THRESH}, topk_candidates={TOPK}, "
                  f"detections_per_img={DETECTIONS}), whole (transform, box decoding, NonZero score filter, "
                  "top-k, batched NMS), torch.manual_seed(0), batch-norm statistics from random images",
        "exporter": f"torch.onnx.export (TorchScript) torch {torch.__version__}, opset {OPSET}",
    }))


if __name__ == "__main__":
    main()
