"""The hostile-input corpus (backend/server/tests/hostile/corpus.yaml) against the real infergate-backend,
directly and through the real infergate-gateway: every case gets its status (or gRPC code) and a message
naming the problem, a normal inference succeeds after each one, and the backend's RSS stays flat."""

import http.client
import json
import os
import shutil
import signal
import subprocess
import zlib

import grpc
import numpy as np
import pytest
import yaml
from tritonclient.grpc import service_pb2, service_pb2_grpc

import models
from conftest import free_ports, start_backend, wait_ready

CORPUS = os.path.join(os.path.dirname(__file__), "..", "hostile", "corpus.yaml")
LIMIT = 1 << 20  # --http-max-input-size and --grpc-max-message-size of the backend below
RSS_GROWTH_KIB = 64 << 10  # generous: the point is "no leak per case", not allocator precision

with open(CORPUS) as f:
    CASES = yaml.safe_load(f)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The test repository plus `link_out`, whose model file is a symlink to a copy outside the repository."""
    root = tmp_path_factory.mktemp("hostile")
    repo = models.write_onnx_repository(str(root / "repo"))
    outside = root / "outside"
    outside.mkdir()
    shutil.copy(os.path.join(repo, "add_sub", "1", "model.onnx"), outside / "model.onnx")
    link = os.path.join(repo, "link_out")
    os.makedirs(os.path.join(link, "1"))
    with open(os.path.join(repo, "add_sub", "config.pbtxt")) as f:
        config = f.read().replace('name: "add_sub"', 'name: "link_out"')
    with open(os.path.join(link, "config.pbtxt"), "w") as f:
        f.write(config)
    os.symlink(outside / "model.onnx", os.path.join(link, "1", "model.onnx"))
    return repo


@pytest.fixture(scope="module")
def backend(repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "hostile-backend.log"
    s = start_backend(repo, log, ["--http-max-input-size", str(LIMIT), "--grpc-max-message-size", str(LIMIT),
                                  "--model-control-mode", "explicit", "--load-model", "add_sub",
                                  "--load-model", "add_sub_int32", "--load-model", "identity_fp32"])
    yield s
    assert s.stop() == 0, f"the backend did not exit cleanly; log: {log}"


GATEWAY_ROUTES = """
listeners:
  data: {{ address: "127.0.0.1:{gw}" }}
  admin: {{ address: "127.0.0.1:{admin}" }}
upstreams:
  - name: rest
    endpoints: ["127.0.0.1:{http}"]
    protocol: h2c
  - name: grpc
    endpoints: ["127.0.0.1:{grpc}"]
    protocol: h2c
routes:
  - name: grpc
    match:
      headers: [{{ name: content-type, prefix: application/grpc }}]
    destinations: [{{ upstream: grpc }}]
  - name: rest
    destinations: [{{ upstream: rest }}]
"""


@pytest.fixture(scope="module")
def gateway(backend, tmp_path_factory):
    """infergate-gateway in front of the backend: REST bridged to h2c, gRPC passed through."""
    tmp = tmp_path_factory.mktemp("gateway")
    gw, admin = free_ports(2)
    routes = tmp / "routes.yaml"
    routes.write_text(GATEWAY_ROUTES.format(gw=gw, admin=admin, http=backend.http_port, grpc=backend.grpc_port))
    log = tmp / "gateway.log"
    exe = os.path.join(os.environ["INFERGATE_BIN_DIR"], "infergate-gateway")
    proc = subprocess.Popen([exe, "--config", str(routes)], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_ready(f"http://127.0.0.1:{admin}/ready", proc, str(log), timeout=20)
        yield {"http_port": gw, "grpc": f"127.0.0.1:{gw}", "proc": proc}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


# ---- building what a case sends ----

def expand(v):
    """`{repeat: x, times: n}` anywhere in a value becomes a list of n x's (or the text repeated)."""
    if isinstance(v, dict) and set(v) == {"repeat", "times"}:
        return [v["repeat"]] * v["times"]
    if isinstance(v, dict):
        return {k: expand(x) for k, x in v.items()}
    if isinstance(v, list):
        return [expand(x) for x in v]
    return v


def compressed_zeros(n, wbits):
    """n zero bytes compressed without holding them all (gzip: wbits 31, zlib: 15)."""
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    chunk = b"\0" * (1 << 20)
    out = [c.compress(chunk) for _ in range(n // len(chunk))]
    return b"".join(out) + c.compress(b"\0" * (n % len(chunk))) + c.flush()


def add_sub_request(input0):
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16},
              {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}]
    inputs[0].update(expand(input0))
    return {"inputs": inputs}


def rest_request(case):
    """(method, path, headers, body) of a REST case."""
    r = case["rest"]
    headers = dict(r.get("headers", {}))
    spec = r.get("body")
    if spec is None:
        body = None
    elif "text" in spec:
        body = spec["text"].encode("latin-1")  # \xNN escapes in the corpus are raw bytes
    elif "json" in spec:
        body = json.dumps(expand(spec["json"])).encode()
    elif "repeat" in spec:
        body = (spec["repeat"]["text"] * spec["repeat"]["times"]).encode()
    elif "add_sub" in spec:
        body = json.dumps(add_sub_request(spec["add_sub"])).encode()
    elif "binary" in spec:
        header = json.dumps(spec["binary"]["header"]).encode()
        headers["Inference-Header-Content-Length"] = str(spec["binary"].get("header_length", len(header)))
        body = header + b"\0" * spec["binary"]["tail"]
    elif "gzip_zeros" in spec:
        headers["Content-Encoding"] = "gzip"
        body = compressed_zeros(spec["gzip_zeros"], 31)
    elif "deflate_zeros" in spec:
        headers["Content-Encoding"] = "deflate"
        body = compressed_zeros(spec["deflate_zeros"], 15)
    elif "load" in spec:
        params = {}
        if "config" in spec["load"]:
            params["config"] = json.dumps(spec["load"]["config"])
        for path, b64 in spec["load"].get("files", {}).items():
            params[f"file:{path}"] = b64
        body = json.dumps({"parameters": params}).encode()
    else:
        raise ValueError(f"{case['name']}: unknown body {spec}")
    return r.get("method", "POST"), r["path"], headers, body


def infer_request(model="add_sub", shape=(1, 16), raw_bytes=64):
    req = service_pb2.ModelInferRequest(model_name=model)
    for name, dims, size in (("INPUT0", shape, raw_bytes), ("INPUT1", (1, 16), 64)):
        t = req.inputs.add()
        t.name, t.datatype = name, "FP32"
        t.shape.extend(dims)
        req.raw_input_contents.append(b"\0" * size)
    return req


def grpc_call(stub, g):
    """Makes a gRPC case's call; returns the RpcError it must raise (or fails)."""
    try:
        if g["call"] == "ModelInfer":
            stub.ModelInfer(infer_request(g.get("model", "add_sub"), g.get("shape", (1, 16)), g.get("raw_bytes", 64)))
        elif g["call"] == "ModelStreamInfer":
            for reply in stub.ModelStreamInfer(iter([infer_request(raw_bytes=g["raw_bytes"])])):
                if reply.error_message:
                    pytest.fail(f"the stream answered an error message instead of ending: {reply.error_message}")
        elif g["call"] == "RepositoryModelLoad":
            req = service_pb2.RepositoryModelLoadRequest(model_name=g["model"])
            if "config" in g:
                req.parameters["config"].string_param = json.dumps(g["config"])
            stub.RepositoryModelLoad(req)
        else:
            raise ValueError(f"unknown call {g['call']}")
    except grpc.RpcError as e:
        return e
    pytest.fail("the call succeeded")


# ---- running the corpus ----

GOOD = json.dumps(add_sub_request({})).encode()


def rest(port, method, path, headers, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def assert_still_serving(http_port, stub, after):
    status, text = rest(http_port, "POST", "/v2/models/add_sub/infer", {}, GOOD)
    assert status == 200, f"after '{after}': a normal REST inference got {status} {text[:300]!r}"
    assert json.loads(text)["outputs"][0]["data"] == [2.0] * 16
    reply = stub.ModelInfer(infer_request())
    assert np.frombuffer(reply.raw_output_contents[0], np.float32).tolist() == [0.0] * 16, after


def run_corpus(http_port, grpc_target, via_gateway):
    """Sends every case; returns the failures (all of them, so one run shows every hole)."""
    failures = []
    with grpc.insecure_channel(grpc_target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for case in CASES:
            name = case["name"]
            if via_gateway:
                case = {**case, **case.get("gateway", {})}
            if "rest" in case:
                status, text = rest(http_port, *rest_request(case))
                try:
                    message = json.loads(text)["error"]
                except (ValueError, KeyError, TypeError):
                    message = text.decode("utf-8", "replace")
                if status != case["status"] or case["message"] not in message:
                    failures.append(f"{name}: got {status} {message[:300]!r}, want {case['status']} "
                                    f"with {case['message']!r}")
            else:
                e = grpc_call(stub, case["grpc"])
                code, details = e.code().name, e.details() or ""
                if code != case["code"] or case["message"] not in details:
                    failures.append(f"{name}: got {code} {details[:300]!r}, want {case['code']} "
                                    f"with {case['message']!r}")
            assert_still_serving(http_port, stub, name)
    return failures


def check_corpus(backend, http_port, grpc_target, label, capsys):
    via_gateway = label != "direct"
    run_corpus(http_port, grpc_target, via_gateway)  # warm-up: allocator pools, connection buffers, lazy statics
    before = backend.rss_kib()
    failures = run_corpus(http_port, grpc_target, via_gateway)
    after = backend.rss_kib()
    with capsys.disabled():
        print(f"\n[hostile corpus, {label}] {len(CASES)} cases; backend RSS {before} KiB before the second "
              f"round, {after} KiB after")
    assert not failures, "\n".join(failures)
    assert backend.proc.poll() is None, "the backend exited"
    assert after - before < RSS_GROWTH_KIB, f"backend RSS grew by {after - before} KiB over one round of the corpus"


def test_corpus_cases_are_well_formed():
    for case in CASES:
        assert {"name", "class", "message"} <= set(case), case
        assert ("rest" in case) != ("grpc" in case), case["name"]
        assert ("status" in case) == ("rest" in case) and ("code" in case) == ("grpc" in case), case["name"]


def test_corpus_against_the_backend(backend, capsys):
    check_corpus(backend, backend.http_port, backend.grpc, "direct", capsys)


def test_corpus_through_the_gateway(backend, gateway, capsys):
    check_corpus(backend, gateway["http_port"], gateway["grpc"], "through the gateway", capsys)
    assert gateway["proc"].poll() is None, "the gateway exited"
