"""Bad input over REST and gRPC: each gets a 4xx (or INVALID_ARGUMENT / NOT_FOUND) naming the problem,
the server keeps serving everyone else, and its memory is reported after thousands of bad requests."""

import gzip
import http.client
import json

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from conftest import start_backend

MAX_BODY = 1 << 20  # the server below runs with --http-max-input-size=1 MiB


@pytest.fixture(scope="module")
def server(onnx_repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "bad-input.log"
    s = start_backend(onnx_repo, log, ["--http-max-input-size", str(MAX_BODY), "--model-control-mode", "explicit",
                                       "--load-model", "*"])
    yield s
    assert s.stop() == 0


def f32(n, v=1.0):
    return json.dumps([v] * n)


def add_sub_json(shape0="[1,16]", data0=None, extra=""):
    data0 = data0 or f32(16)
    return (f'{{"inputs":[{{"name":"INPUT0","datatype":"FP32","shape":{shape0},"data":{data0}}},'
            f'{{"name":"INPUT1","datatype":"FP32","shape":[1,16],"data":{f32(16)}}}{extra}]}}').encode()


BINARY_HEADER = b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],"parameters":{"binary_data_size":64}},' \
                b'{"name":"INPUT1","datatype":"FP32","shape":[1,16],"parameters":{"binary_data_size":64}}]}'

# (name, path, headers, body, expected status, words the error must contain)
REST_CASES = [
    ("malformed JSON", "/v2/models/add_sub/infer", {}, b'{"inputs": [', 400, "malformed inference request JSON"),
    ("not an object", "/v2/models/add_sub/infer", {}, b"[1,2]", 400, "malformed inference request JSON"),
    ("data shorter than shape", "/v2/models/add_sub/infer", {}, add_sub_json(data0=f32(15)), 400,
     "the shape has 16 elements but 'data' holds 15"),
    ("data of the wrong type", "/v2/models/add_sub/infer", {}, add_sub_json(data0='["a"]*16'.replace('*16', '')), 400,
     "INPUT0"),
    ("wrong datatype for the model", "/v2/models/add_sub/infer", {},
     add_sub_json().replace(b'"FP32"', b'"INT32"', 1), 400, "INPUT0"),
    ("missing input", "/v2/models/add_sub/infer", {},
     f'{{"inputs":[{{"name":"INPUT0","datatype":"FP32","shape":[1,16],"data":{f32(16)}}}]}}'.encode(), 400, "INPUT1"),
    ("extra input", "/v2/models/add_sub/infer", {},
     add_sub_json(extra=',{"name":"EXTRA","datatype":"FP32","shape":[1],"data":[1]}'), 400, "EXTRA"),
    ("negative dimension", "/v2/models/add_sub/infer", {}, add_sub_json(shape0="[-1,16]"), 400, "negative dimension"),
    ("huge dimensions", "/v2/models/add_sub/infer", {}, add_sub_json(shape0="[4611686018427387904,16]"), 400,
     "INPUT0"),
    ("shape not the model's", "/v2/models/add_sub/infer", {}, add_sub_json(shape0="[2,8]"), 400, "[-1,16]"),
    ("truncated binary section", "/v2/models/add_sub/infer",
     {"Inference-Header-Content-Length": str(len(BINARY_HEADER))}, BINARY_HEADER + b"\0" * 100, 400,
     "only 36 bytes of binary data remain"),
    ("binary data left over", "/v2/models/add_sub/infer",
     {"Inference-Header-Content-Length": str(len(BINARY_HEADER))}, BINARY_HEADER + b"\0" * 130, 400,
     "130 bytes of binary data follow"),
    ("header length past the body", "/v2/models/add_sub/infer", {"Inference-Header-Content-Length": "99999"},
     BINARY_HEADER, 400, "Inference-Header-Content-Length is 99999"),
    ("header length not a number", "/v2/models/add_sub/infer", {"Inference-Header-Content-Length": "ten"},
     BINARY_HEADER, 400, "Unable to parse Inference-Header-Content-Length"),
    ("header length cutting the JSON", "/v2/models/add_sub/infer", {"Inference-Header-Content-Length": "20"},
     BINARY_HEADER + b"\0" * 128, 400, "malformed inference request JSON"),
    ("gzip bomb", "/v2/models/add_sub/infer", {"Content-Encoding": "gzip"}, gzip.compress(b"\0" * (64 << 20)), 400,
     "decompresses to more than the limit"),
    ("corrupt gzip", "/v2/models/add_sub/infer", {"Content-Encoding": "gzip"}, b"\x1f\x8bnot really", 400,
     "could not be decompressed"),
    ("body over the limit", "/v2/models/add_sub/infer", {}, b" " * (MAX_BODY + 1), 400,
     f"exceeds the server's limit of {MAX_BODY} bytes"),
    ("FP16 as JSON", "/v2/models/add_sub/infer", {},
     b'{"inputs":[{"name":"INPUT0","datatype":"FP16","shape":[1],"data":[1]}]}', 400, "FP16"),
    ("unknown model", "/v2/models/no_such_model/infer", {}, add_sub_json(), 404,
     "Request for unknown model: 'no_such_model' is not found"),
    ("non-numeric version", "/v2/models/add_sub/versions/latest/infer", {}, add_sub_json(), 400, "'latest'"),
    ("load of a missing model", "/v2/repository/models/missing_folder/load", {}, b"", 400, "missing_folder"),
    ("load with a broken config", "/v2/repository/models/identity_fp32/load", {},
     b'{"parameters":{"config":"{not json"}}', 400, "config"),
]


def post(conn, path, headers, body):
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()


GOOD = add_sub_json()


def test_rest_bad_input_gets_4xx_naming_the_problem(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    for name, path, headers, body, status, words in REST_CASES:
        got, text = post(conn, path, headers, body)
        assert got == status, f"{name}: {got} {text[:300]}"
        message = json.loads(text)["error"]
        assert words in message, f"{name}: {message}"
        if got == 400 and path.endswith("/infer"):
            # Whatever came before, the next good request on the same connection is served.
            assert post(conn, "/v2/models/add_sub/infer", {}, GOOD)[0] == 200, name
    conn.close()


def test_unknown_versions_are_refused_naming_the_version(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    status, text = post(conn, "/v2/models/add_sub/versions/7/infer", {}, GOOD)
    assert status in (404, 503) and "version 7" in json.loads(text)["error"], text


def grpc_request(**changes):
    req = service_pb2.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        t = req.inputs.add()
        t.name, t.datatype = name, "FP32"
        t.shape.extend([1, 16])
        req.raw_input_contents.append(np.ones(16, np.float32).tobytes())
    for k, v in changes.items():
        v(req) if callable(v) else setattr(req, k, v)
    return req


def short_raw(r):
    r.raw_input_contents[1] = b"\0" * 60


def one_raw_only(r):
    del r.raw_input_contents[1]


def negative_dim(r):
    r.inputs[0].shape[0] = -1


def typed_and_raw(r):
    r.inputs[0].contents.fp32_contents.extend([1.0] * 16)


def fp16_typed(r):
    r.inputs[0].datatype = "FP16"
    del r.raw_input_contents[:]
    r.inputs[0].contents.fp32_contents.extend([1.0] * 16)
    r.inputs[1].contents.fp32_contents.extend([1.0] * 16)


def wrong_field(r):
    del r.raw_input_contents[:]
    r.inputs[0].contents.int_contents.extend([1] * 16)
    r.inputs[1].contents.fp32_contents.extend([1.0] * 16)


GRPC_CASES = [
    ("raw contents shorter than the shape", dict(x=short_raw), grpc.StatusCode.INVALID_ARGUMENT, "needs 64 bytes"),
    ("raw contents count", dict(x=one_raw_only), grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents has 1 entries"),
    ("negative dimension", dict(x=negative_dim), grpc.StatusCode.INVALID_ARGUMENT, "negative dimension"),
    ("typed and raw together", dict(x=typed_and_raw), grpc.StatusCode.INVALID_ARGUMENT, "raw_input_contents"),
    ("FP16 in typed contents", dict(x=fp16_typed), grpc.StatusCode.INVALID_ARGUMENT, "FP16"),
    ("typed contents in the wrong field", dict(x=wrong_field), grpc.StatusCode.INVALID_ARGUMENT, "int_contents"),
    ("unknown model", dict(model_name="no_such_model"), grpc.StatusCode.NOT_FOUND, "no_such_model"),
    ("bad version", dict(model_version="v2"), grpc.StatusCode.INVALID_ARGUMENT, "'v2'"),
]


def test_grpc_bad_input_gets_invalid_argument_or_not_found(server):
    with grpc.insecure_channel(server.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for name, changes, code, words in GRPC_CASES:
            with pytest.raises(grpc.RpcError) as e:
                stub.ModelInfer(grpc_request(**changes))
            assert e.value.code() == code, f"{name}: {e.value.code()} {e.value.details()}"
            assert words in e.value.details(), f"{name}: {e.value.details()}"
        good = stub.ModelInfer(grpc_request())
        assert np.frombuffer(good.raw_output_contents[0], np.float32).tolist() == [2.0] * 16


def test_memory_stays_flat_under_repeated_bad_input(server, capsys):
    conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    cases = [c for c in REST_CASES if c[2].get("Content-Encoding") != "gzip" and len(c[3]) < 4096]

    def round_of_bad_requests(n):
        for _ in range(n):
            for _, path, headers, body, status, _ in cases:
                assert post(conn, path, headers, body)[0] == status

    round_of_bad_requests(20)  # warm up allocator pools and connection buffers
    before = server.rss_kib()
    round_of_bad_requests(100)
    after = server.rss_kib()
    assert post(conn, "/v2/models/add_sub/infer", {}, GOOD)[0] == 200
    with capsys.disabled():
        print(f"\n[bad input] RSS after warm-up {before} KiB, after {100 * len(cases)} more bad requests {after} KiB")
