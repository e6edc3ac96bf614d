"""Real exported models from the engine's zoo (backend/engine/zoo/, made by scripts/ensure-zoo.sh) served by
infergate-backend with auto-completed configs, asked over gRPC by tritonclient, and compared with
onnxruntime's outputs for the same inputs: PaddleOCR's recogniser and classifier as shipped in a PyPI wheel,
a Whisper-like encoder exported by torch, the classifier quantized by onnxruntime.quantization (QDQ and
dynamic; on wgpu the dynamic one's ConvIntegers run on packed dot products), a BERT fused by onnxruntime's transformer optimizer (Attention, SkipLayerNormalization,
BiasGelu), and torchvision's SSDlite detector exported whole (its NonZero score filter and NonMaxSuppression
run between the stages of its plan). The `_gpu` copies run on the wgpu executor (KIND_GPU; lavapipe where
there is no GPU)."""

import os
import subprocess

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from onnx import numpy_helper
from tritonclient.utils import np_to_triton_dtype

from conftest import start_backend

# Served name -> (zoo model, instance kind or None for auto-complete's CPU default).
MODELS = {
    "ocr_rec": ("ocr_rec", None),
    "ocr_cls": ("ocr_cls", None),
    "hf_whisper_encoder": ("hf_whisper_encoder", None),
    "ocr_cls_qdq": ("ocr_cls_qdq", None),
    "ocr_cls_dynamic": ("ocr_cls_dynamic", None),
    "hf_bert_fused": ("hf_bert_fused", None),
    "ocr_cls_qdq_gpu": ("ocr_cls_qdq", "KIND_GPU"),
    "ocr_cls_dynamic_gpu": ("ocr_cls_dynamic", "KIND_GPU"),
    "hf_bert_fused_gpu": ("hf_bert_fused", "KIND_GPU"),
    "tv_ssdlite320_nms": ("tv_ssdlite320_nms", None),
    "tv_ssdlite320_nms_gpu": ("tv_ssdlite320_nms", "KIND_GPU"),
}
# Models that take one image without a batch dim: no batching, and reference outputs for one request only.
UNBATCHED = {"tv_ssdlite320_nms"}
# onnxruntime runs the quantized models with integer kernels and we run float ones between the QDQ pairs, so
# an activation can land one quantization step apart: their outputs (class probabilities) get an absolute
# tolerance, as in the engine's zoo tests.
QUANTIZED_ATOL = 0.05
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "scripts", "ensure-zoo.sh")


@pytest.fixture(scope="module")
def zoo():
    r = subprocess.run(["bash", SCRIPT], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"scripts/ensure-zoo.sh failed (run `make zoo` to see why):\n{r.stderr[-4000:]}")
    return r.stdout.strip()


@pytest.fixture(scope="module")
def server(zoo, tmp_path_factory):
    repo = tmp_path_factory.mktemp("zoo_repo")
    for name, (source, kind) in MODELS.items():
        d = repo / name / "1"
        d.mkdir(parents=True)
        with open(os.path.join(zoo, f"{source}.onnx"), "rb") as src, open(d / "model.onnx", "wb") as dst:
            dst.write(src.read())
        if kind:
            # A partial config: inputs and outputs still come from the model's signature.
            max_batch = 0 if source in UNBATCHED else 4
            (repo / name / "config.pbtxt").write_text(
                f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch}\n'
                f'instance_group [ {{ kind: {kind} }} ]\n')
    log = tmp_path_factory.mktemp("logs") / "zoo-backend.log"
    s = start_backend(str(repo), log)
    yield s
    assert s.stop() == 0, f"infergate-backend did not stop cleanly; log: {log}"


def load_pb(path):
    t = onnx.load_tensor(path)
    return t.name, numpy_helper.to_array(t)


@pytest.mark.parametrize("name", list(MODELS))
def test_served_zoo_model_matches_onnxruntime(zoo, server, name):
    source, kind = MODELS[name]
    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        assert client.is_model_ready(name)
        if kind:
            config = client.get_model_config(name, as_json=True)["config"]
            assert config["instance_group"][0]["kind"] == kind, config
        meta = client.get_model_metadata(name, as_json=True)
        out_names = [o["name"] for o in meta["outputs"]]
        for batch in (1,) if source in UNBATCHED else (1, 2):
            ref = os.path.join(zoo, "ref", source, f"b{batch}")
            inputs = []
            for i in range(len(meta["inputs"])):
                n, a = load_pb(os.path.join(ref, f"input_{i}.pb"))
                inp = grpcclient.InferInput(n, list(a.shape), np_to_triton_dtype(a.dtype))
                inp.set_data_from_numpy(a)
                inputs.append(inp)
            r = client.infer(name, inputs)
            for i, o in enumerate(out_names):
                _, want = load_pb(os.path.join(ref, f"output_{i}.pb"))
                got = r.as_numpy(o)
                assert got.shape == want.shape, f"{name} batch {batch} output {o}"
                if "_qdq" in source or "_dynamic" in source:
                    rtol, atol = 0.0, QUANTIZED_ATOL
                else:
                    rtol, atol = 1e-3, 1e-4 * max(float(np.abs(want).max()), 1e-6)
                np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                           err_msg=f"{name} batch {batch} output {o}")
    finally:
        client.close()
