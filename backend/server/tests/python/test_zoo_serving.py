"""Real exported models from the engine's zoo (backend/engine/zoo/, made by scripts/ensure-zoo.sh) served by
infergate-backend with auto-completed configs, asked over gRPC by tritonclient, and compared with
onnxruntime's outputs for the same inputs: PaddleOCR's recogniser and classifier as shipped in a PyPI wheel,
and a Whisper-like encoder exported by torch."""

import os
import subprocess

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from onnx import numpy_helper
from tritonclient.utils import np_to_triton_dtype

from conftest import start_backend

MODELS = ["ocr_rec", "ocr_cls", "hf_whisper_encoder"]
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
    for name in MODELS:
        d = repo / name / "1"
        d.mkdir(parents=True)
        with open(os.path.join(zoo, f"{name}.onnx"), "rb") as src, open(d / "model.onnx", "wb") as dst:
            dst.write(src.read())
    log = tmp_path_factory.mktemp("logs") / "zoo-backend.log"
    s = start_backend(str(repo), log)
    yield s
    assert s.stop() == 0, f"infergate-backend did not stop cleanly; log: {log}"


def load_pb(path):
    t = onnx.load_tensor(path)
    return t.name, numpy_helper.to_array(t)


@pytest.mark.parametrize("name", MODELS)
def test_served_zoo_model_matches_onnxruntime(zoo, server, name):
    client = grpcclient.InferenceServerClient(server.grpc)
    try:
        assert client.is_model_ready(name)
        meta = client.get_model_metadata(name, as_json=True)
        out_names = [o["name"] for o in meta["outputs"]]
        for batch in (1, 2):
            ref = os.path.join(zoo, "ref", name, f"b{batch}")
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
                scale = max(float(np.abs(want).max()), 1e-6)
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * scale,
                                           err_msg=f"{name} batch {batch} output {o}")
    finally:
        client.close()
