"""tritonclient.grpc against infergate: raw tensors, BYTES, streaming, config, statistics, repository
calls, errors, and grpc.health.v1. (kserve is tested in a subprocess: it cannot share this process.)"""

import queue

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype


@pytest.fixture(scope="module")
def client(backend):
    c = grpcclient.InferenceServerClient(backend.grpc)
    yield c
    c.close()


def make_input(name, array):
    i = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    i.set_data_from_numpy(array)
    return i


def test_health_metadata_and_config(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("add_sub") and not client.is_model_ready("no_such_model")
    assert "statistics" in client.get_server_metadata(as_json=True)["extensions"]
    md = client.get_model_metadata("add_sub", as_json=True)
    assert md["inputs"][0] == {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}
    cfg = client.get_model_config("add_sub", as_json=True)["config"]
    assert cfg["name"] == "add_sub" and cfg["max_batch_size"] == 8
    assert cfg["input"][0]["data_type"] == "TYPE_FP32" and cfg["input"][0]["dims"] == ["16"]
    assert "dynamic_batching" in cfg


@pytest.mark.parametrize("model,dtype", [("add_sub", np.float32), ("add_sub_int32", np.int32)])
def test_infer(client, model, dtype):
    a = np.arange(48, dtype=dtype).reshape(3, 16)
    b = np.full((3, 16), 2, dtype=dtype)
    r = client.infer(model, [make_input("INPUT0", a), make_input("INPUT1", b)], request_id="g1",
                     outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), a - b)
    assert r.as_numpy("OUTPUT0") is None
    resp = r.get_response()
    assert resp.id == "g1" and resp.model_version == "1" and len(resp.raw_output_contents) == 1


def test_bytes_and_mixed_datatypes(client):
    data = np.array([[b"a"], ["ü".encode()], [b"x" * 1000]], dtype=np.object_)
    r = client.infer("identity_bytes", [make_input("INPUT0", data)])
    assert [x for x in r.as_numpy("OUTPUT0").reshape(-1)] == [b"a", "ü".encode(), b"x" * 1000]
    arrays = [np.array([True, False, True]), np.array([-5, 2**62], np.int64),
              np.array([0, 255], np.uint8), np.array([0.1, -1e300], np.float64)]
    r = client.infer("identity_mixed", [make_input(f"INPUT{i}", a) for i, a in enumerate(arrays)])
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(r.as_numpy(f"OUTPUT{i}"), a)


def test_large_message_beyond_grpc_default_4_mib(client):
    big = np.random.default_rng(0).standard_normal((1, 2_000_000)).astype(np.float32)  # 8 MB
    r = client.infer("identity_fp32", [make_input("INPUT0", big.reshape(-1))])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), big.reshape(-1))


def test_compressed_calls(client):
    a = np.ones((2, 16), np.float32)
    for algo in ("gzip", "deflate"):
        r = client.infer("add_sub", [make_input("INPUT0", a), make_input("INPUT1", a)], compression_algorithm=algo)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), 2 * a)


def test_stream_infer(client):
    results = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        a = np.ones((1, 16), np.float32)
        for i in range(8):
            client.async_stream_infer("add_sub", [make_input("INPUT0", a * i), make_input("INPUT1", a)],
                                      request_id=str(i))
        bad = np.ones((1, 3), np.float32)
        client.async_stream_infer("add_sub", [make_input("INPUT0", bad), make_input("INPUT1", bad)], request_id="bad")
        seen, errors = {}, []
        for _ in range(9):
            result, error = results.get(timeout=30)
            if error is not None:
                errors.append(str(error))
            else:
                seen[result.get_response().id] = result.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    assert sorted(seen) == [str(i) for i in range(8)]
    for i in range(8):
        np.testing.assert_array_equal(seen[str(i)], a * i + 1)
    assert len(errors) == 1 and "INPUT0" in errors[0] and "[-1,16]" in errors[0]


def test_errors_carry_grpc_codes(client):
    a = np.ones((1, 16), np.float32)
    with pytest.raises(InferenceServerException) as e:
        client.infer("no_such_model", [make_input("INPUT0", a)])
    assert e.value.status() == "StatusCode.NOT_FOUND"
    assert "Request for unknown model: 'no_such_model' is not found" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_sub", [make_input("INPUT0", np.ones((1, 4), np.float32)), make_input("INPUT1", a)])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "INPUT0" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("add_sub", model_version="nine")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "'nine'" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.get_system_shared_memory_status()
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"


def test_statistics_and_repository(client):
    a = np.ones((1, 16), np.float32)
    client.infer("add_sub", [make_input("INPUT0", a), make_input("INPUT1", a)])
    stats = client.get_inference_statistics("add_sub", as_json=True)["model_stats"][0]
    assert stats["name"] == "add_sub" and int(stats["inference_count"]) >= 1
    assert "success" in stats["inference_stats"]
    names = {m.name for m in client.get_model_repository_index().models}
    assert {"add_sub", "identity_bytes", "identity_fp32"} <= names
    client.unload_model("identity_mixed")
    assert not client.is_model_ready("identity_mixed")
    client.load_model("identity_mixed")
    assert client.is_model_ready("identity_mixed")


def test_grpc_health_v1(backend):
    # grpc.health.v1.Health/Check with hand-encoded messages: request {service: ""} is empty; a reply of
    # status SERVING (1) is the bytes 08 01.
    with grpc.insecure_channel(backend.grpc) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        assert check(b"") == b"\x08\x01", "SERVING while the server is ready"
        service = b"inference.GRPCInferenceService"
        assert check(b"\x0a" + bytes([len(service)]) + service) == b"\x08\x01"
        with pytest.raises(grpc.RpcError) as e:
            check(b"\x0a\x03abc")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
