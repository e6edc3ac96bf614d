"""The example `make run` starts, checked end to end: deploy/local/routes.yaml in front of deploy/local/models.

The shipped rules are used as written, only moved to free ports. Model `simple` must be split 90/10 between its
versions for REST and gRPC callers alike, each caller sticking to one version; other calls pass through.
Run through `make test` (it exports INFERGATE_BIN_DIR and INFERGATE_PYTHON)."""

import json
import os
import signal
import subprocess
import urllib.request

import numpy as np
import pytest

from test_gateway_e2e import MODELS, ROOT, binary, free_ports, wait_ready

EXAMPLE_ROUTES = os.path.join(ROOT, "deploy", "local", "routes.yaml")
CALLERS = 300


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("example")
    http, grpc, metrics, gw, admin = free_ports(5)
    text = open(EXAMPLE_ROUTES).read()
    for fixed, port in (("127.0.0.1:8000", http), ("127.0.0.1:8001", grpc), ("127.0.0.1:8080", gw),
                        ("127.0.0.1:9901", admin)):
        assert fixed in text, f"{EXAMPLE_ROUTES} no longer names {fixed}; update this test with it"
        text = text.replace(fixed, f"127.0.0.1:{port}")
    routes = tmp / "routes.yaml"
    routes.write_text(text)
    blog, glog = tmp / "backend.log", tmp / "gateway.log"
    backend = subprocess.Popen(
        [binary("infergate-backend"), "--model-repository", MODELS, "--http-port", str(http),
         "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--http-address", "127.0.0.1",
         "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1"],
        stdout=open(blog, "w"), stderr=subprocess.STDOUT)
    gateway = None
    try:
        wait_ready(f"http://127.0.0.1:{http}/v2/health/ready", backend, blog)
        gateway = subprocess.Popen([binary("infergate-gateway"), "--config", str(routes)],
                                   stdout=open(glog, "w"), stderr=subprocess.STDOUT)
        wait_ready(f"http://127.0.0.1:{admin}/ready", gateway, glog, timeout=20)
        yield f"127.0.0.1:{gw}"
    finally:
        for p in (gateway, backend):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


X = [1.0, 2.0, 3.0, 4.0]
# Version 1 of `simple` adds one, version 2 doubles.
EXPECTED = {"1": [2.0, 3.0, 4.0, 5.0], "2": [2.0, 4.0, 6.0, 8.0]}


def rest_infer(gateway, caller):
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": X}]}).encode()
    req = urllib.request.Request(f"http://{gateway}/v2/models/simple/infer", data=body,
                                 headers={"x-caller-id": caller})
    with urllib.request.urlopen(req, timeout=10) as r:
        out = json.loads(r.read())
    version = out["model_version"]
    assert out["outputs"][0]["data"] == EXPECTED[version], out
    return version


def assert_split(versions, what):
    canary = sum(1 for v in versions.values() if v == "2")
    # 10% of 300 callers is 30, binomial standard deviation about 5.2: 5 deviations either side.
    assert 4 <= canary <= 56, f"{what}: {canary} of {len(versions)} callers on the canary, expected about 10%"


def test_rest_callers_are_split_90_10_and_stick_to_their_version(example):
    versions = {f"user-{i}": rest_infer(example, f"user-{i}") for i in range(CALLERS)}
    assert_split(versions, "REST")
    for caller in list(versions)[:20]:
        assert rest_infer(example, caller) == versions[caller], f"{caller} changed version"


def test_grpc_callers_reach_the_grpc_port_with_the_same_split(example):
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url=example)
    assert c.is_server_ready()
    assert c.get_model_metadata("simple").name == "simple"
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(np.array([X], dtype=np.float32))
    versions = {}
    for i in range(CALLERS):
        r = c.infer("simple", [inp], headers={"x-caller-id": f"grpc-user-{i}"})
        v = r.get_response().model_version
        np.testing.assert_allclose(r.as_numpy("y")[0], EXPECTED[v])
        versions[i] = v
    assert_split(versions, "gRPC")


def test_other_calls_pass_through_unchanged(example):
    with urllib.request.urlopen(f"http://{example}/v2/models/heavy_mlp", timeout=10) as r:
        meta = json.loads(r.read())
    assert meta["name"] == "heavy_mlp" and meta["inputs"][0]["shape"] == [-1, 1024]
