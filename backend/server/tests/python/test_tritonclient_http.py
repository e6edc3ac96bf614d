"""tritonclient.http against infergate: JSON and binary tensors, BYTES, every datatype, compression,
metadata and config, statistics, repository load/unload, errors."""

import json
import os

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype


@pytest.fixture(scope="module")
def client(backend):
    c = httpclient.InferenceServerClient(backend.http, concurrency=4)
    yield c
    c.close()


def make_input(name, array, binary):
    i = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    i.set_data_from_numpy(array, binary_data=binary)
    return i


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_sub")
    assert client.is_model_ready("add_sub", "1")
    assert not client.is_model_ready("no_such_model")
    md = client.get_server_metadata()
    assert md["name"] == "infergate"
    assert "binary_tensor_data" in md["extensions"] and "statistics" in md["extensions"]


def test_model_metadata_and_config(client):
    md = client.get_model_metadata("add_sub")
    assert md["name"] == "add_sub" and md["versions"] == ["1"]
    assert md["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": [-1, 16]}
    assert [o["name"] for o in md["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert client.get_model_metadata("identity_fp32")["inputs"][0]["shape"] == [-1]
    cfg = client.get_model_config("add_sub")
    assert cfg["max_batch_size"] == 8
    assert cfg["input"][0]["dims"] == [16] and cfg["input"][0]["data_type"] == "TYPE_FP32"


@pytest.mark.parametrize("binary", [False, True])
@pytest.mark.parametrize("model,dtype", [("add_sub", np.float32), ("add_sub_int32", np.int32)])
def test_add_sub_json_and_binary(client, model, dtype, binary):
    a = np.arange(32, dtype=dtype).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=dtype)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    r = client.infer(model, [make_input("INPUT0", a, binary), make_input("INPUT1", b, binary)],
                     outputs=outputs, request_id="req-1")
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    resp = r.get_response()
    assert resp["model_name"] == model and resp["model_version"] == "1" and resp["id"] == "req-1"


def test_default_outputs_and_one_requested_output(client):
    a = np.ones((1, 16), np.float32)
    r = client.infer("add_sub", [make_input("INPUT0", a, True), make_input("INPUT1", a, True)])
    assert {o["name"] for o in r.get_response()["outputs"]} == {"OUTPUT0", "OUTPUT1"}
    r = client.infer("add_sub", [make_input("INPUT0", a, False), make_input("INPUT1", a, False)],
                     outputs=[httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)])
    assert [o["name"] for o in r.get_response()["outputs"]] == ["OUTPUT1"]
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), np.zeros((1, 16), np.float32))


@pytest.mark.parametrize("binary", [False, True])
def test_bytes_tensors(client, binary):
    data = np.array([[b"hello"], ["wörld".encode()], [b""]], dtype=np.object_)
    r = client.infer("identity_bytes", [make_input("INPUT0", data, binary)],
                     outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    out = r.as_numpy("OUTPUT0")
    assert out.shape == (3, 1)
    got = [x if isinstance(x, bytes) else x.encode() for x in out.reshape(-1)]
    assert got == [b"hello", "wörld".encode(), b""]


@pytest.mark.parametrize("binary", [False, True])
def test_bool_int64_uint8_fp64(client, binary):
    arrays = [np.array([True, False, True]), np.array([-5, 2**53 + 1], np.int64),
              np.array([0, 255], np.uint8), np.array([0.1, -1e300], np.float64)]
    inputs = [make_input(f"INPUT{i}", a, binary) for i, a in enumerate(arrays)]
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=binary) for i in range(4)]
    r = client.infer("identity_mixed", inputs, outputs=outputs)
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(r.as_numpy(f"OUTPUT{i}"), a)


@pytest.mark.parametrize("req,resp", [("gzip", "deflate"), ("deflate", "gzip"), (None, "gzip")])
def test_compressed_bodies(client, req, resp):
    a = np.linspace(0, 1, 64, dtype=np.float32).reshape(4, 16)
    r = client.infer("add_sub", [make_input("INPUT0", a, True), make_input("INPUT1", a, True)],
                     request_compression_algorithm=req, response_compression_algorithm=resp)
    np.testing.assert_allclose(r.as_numpy("OUTPUT0"), 2 * a)


def test_async_infer_many(client):
    a = np.ones((1, 16), np.float32)
    futures = [client.async_infer("add_sub", [make_input("INPUT0", a * i, True), make_input("INPUT1", a, True)])
               for i in range(16)]
    for i, f in enumerate(futures):
        np.testing.assert_array_equal(f.get_result().as_numpy("OUTPUT0"), a * i + 1)


def test_errors_name_the_problem(client):
    a = np.ones((1, 16), np.float32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("no_such_model", [make_input("INPUT0", a, True)])
    assert "Request for unknown model: 'no_such_model' is not found" in str(e.value)
    assert e.value.status() == "404"
    bad = np.ones((1, 15), np.float32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_sub", [make_input("INPUT0", bad, False), make_input("INPUT1", bad, False)])
    assert "INPUT0" in str(e.value) and "[-1,16]" in str(e.value) and e.value.status() == "400"
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_sub", [make_input("INPUT0", a, True)])
    assert "INPUT1" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_sub", [make_input("INPUT0", np.ones((9, 16), np.float32), True),
                                 make_input("INPUT1", np.ones((9, 16), np.float32), True)])
    assert "max_batch_size" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("add_sub", model_version="7")
    assert "version 7" in str(e.value)


def test_statistics_have_every_field_perf_analyzer_reads(client):
    a = np.ones((2, 16), np.float32)
    client.infer("add_sub", [make_input("INPUT0", a, True), make_input("INPUT1", a, True)])
    stats = client.get_inference_statistics("add_sub")["model_stats"]
    assert stats[0]["name"] == "add_sub" and stats[0]["version"] == "1"
    s = stats[0]
    assert s["inference_count"] >= 2 and s["execution_count"] >= 1 and s["last_inference"] > 0
    for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"):
        assert set(s["inference_stats"][k]) == {"count", "ns"}, k
    assert s["inference_stats"]["success"]["count"] >= 1
    everyone = client.get_inference_statistics()["model_stats"]
    assert {m["name"] for m in everyone} >= {"add_sub", "identity_bytes"}


def test_repository_unload_load_with_config_override_and_files(client, onnx_repo):
    index = client.get_model_repository_index()
    assert {"name": "identity_fp32", "version": "1", "state": "READY"} in index
    client.unload_model("identity_fp32")
    assert not client.is_model_ready("identity_fp32")
    entry = [m for m in client.get_model_repository_index() if m["name"] == "identity_fp32"]
    assert entry and entry[0]["state"] == "UNAVAILABLE"
    client.load_model("identity_fp32")
    assert client.is_model_ready("identity_fp32")

    # Load a new model from files sent in the request, with its config as JSON.
    with open(os.path.join(onnx_repo, "identity_fp32", "1", "model.onnx"), "rb") as f:
        onnx_bytes = f.read()
    config = json.dumps({"name": "uploaded", "platform": "onnxruntime_onnx", "max_batch_size": 0,
                         "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
                         "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}]})
    client.load_model("uploaded", config=config, files={"file:1/model.onnx": onnx_bytes})
    assert client.is_model_ready("uploaded")
    x = np.array([1.5, -2.0, 3.25], np.float32)
    r = client.infer("uploaded", [make_input("INPUT0", x, True)])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
    client.unload_model("uploaded")

