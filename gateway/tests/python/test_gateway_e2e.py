"""End to end through the gateway: the real infergate-backend behind the real infergate-gateway, driven by
tritonclient over HTTP/1.1 (bridged to h2c upstream) and gRPC (passed through as h2), with a model-version
rewrite, plus the gateway's `check` command and its SIGTERM drain.

Run through `make test` (it exports INFERGATE_BIN_DIR and INFERGATE_PYTHON)."""

import os
import signal
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MODELS = os.path.join(ROOT, "deploy", "local", "models")


def binary(name):
    bin_dir = os.environ.get("INFERGATE_BIN_DIR")
    if not bin_dir:
        pytest.fail("INFERGATE_BIN_DIR is not set: run these tests through `make test` (or `make test-python`)")
    exe = os.path.join(bin_dir, name)
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} is missing: build it with `make build` (or run `make test`)")
    return exe


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_ready(url, proc, log, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"process exited with {proc.returncode} during start-up:\n{open(log).read()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    pytest.fail(f"not ready at {url} after {timeout} s:\n{open(log).read()[-4000:]}")


ROUTES = """
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
  - name: grpc-simple-v2
    match:
      model: simple
      headers: [{{ name: content-type, prefix: application/grpc }}]
    destinations: [{{ upstream: grpc, model_version: "2" }}]
  - name: grpc
    match:
      headers: [{{ name: content-type, prefix: application/grpc }}]
    destinations: [{{ upstream: grpc }}]
  - name: rest-simple-v2
    match: {{ model: simple }}
    destinations: [{{ upstream: rest, model_version: "2" }}]
  - name: rest
    destinations: [{{ upstream: rest }}]
"""


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pod")
    http, grpc, metrics, gw, admin = free_ports(5)
    blog = tmp / "backend.log"
    backend = subprocess.Popen(
        [binary("infergate-backend"), "--model-repository", MODELS, "--http-port", str(http),
         "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
        stdout=open(blog, "w"), stderr=subprocess.STDOUT)
    routes = tmp / "routes.yaml"
    routes.write_text(ROUTES.format(gw=gw, admin=admin, http=http, grpc=grpc))
    glog = tmp / "gateway.log"
    gateway = None
    try:
        wait_ready(f"http://127.0.0.1:{http}/v2/health/ready", backend, blog)
        gateway = subprocess.Popen([binary("infergate-gateway"), "--config", str(routes)],
                                   stdout=open(glog, "w"), stderr=subprocess.STDOUT)
        wait_ready(f"http://127.0.0.1:{admin}/ready", gateway, glog, timeout=20)
        yield {"gateway": f"127.0.0.1:{gw}", "admin": f"127.0.0.1:{admin}", "proc": gateway, "routes": routes,
               "log": glog}
    finally:
        for p in (gateway, backend):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


def x():
    return np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)


def test_tritonclient_http_through_the_gateway_reaches_the_rewritten_version(pod):
    import tritonclient.http as httpclient

    c = httpclient.InferenceServerClient(url=pod["gateway"])
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("simple")
    inp = httpclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x())
    r = c.infer("simple", [inp])
    # Version 2 of `simple` doubles its input; version 1 adds one. The route rewrites every request to v2.
    np.testing.assert_allclose(r.as_numpy("y"), x() * 2)
    assert r.get_response()["model_version"] == "2"


def test_tritonclient_grpc_through_the_gateway_reaches_the_rewritten_version(pod):
    import tritonclient.grpc as grpcclient

    c = grpcclient.InferenceServerClient(url=pod["gateway"])
    assert c.is_server_ready()
    inp = grpcclient.InferInput("x", [1, 4], "FP32")
    inp.set_data_from_numpy(x())
    r = c.infer("simple", [inp])
    np.testing.assert_allclose(r.as_numpy("y"), x() * 2)
    assert r.get_response().model_version == "2"
    # An unknown model is the backend's error, passed through unchanged.
    with pytest.raises(Exception) as e:
        c.get_model_metadata("no-such-model")
    assert "no-such-model" in str(e.value)


def test_check_command_reports_every_problem(pod, tmp_path):
    gw = binary("infergate-gateway")
    ok = subprocess.run([gw, "check", str(pod["routes"])], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstreams:\n  - name: a\n    endpoints: ['127.0.0.1:1']\nroutes:\n  - name: r\n"
                   "    destinations: [{upstream: missing}]\n  - name: s\n    destinations: [{upstream: gone}]\n")
    r = subprocess.run([gw, "check", str(bad)], capture_output=True, text=True)
    assert r.returncode == 1
    # Both problems, each with file and line.
    assert "bad.yaml:6" in r.stderr and "'missing'" in r.stderr, r.stderr
    assert "bad.yaml:8" in r.stderr and "'gone'" in r.stderr, r.stderr


def test_an_edited_file_is_applied_live_and_sigterm_exits_zero(pod):
    admin = pod["admin"]
    routes = pod["routes"]
    before = routes.read_text()
    routes.write_text(before + "\n# edited\n")
    deadline = time.monotonic() + 10
    import json
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://{admin}/metrics") as r:
            if 'infergate_gateway_config_reloads_total{result="applied"}' in r.read().decode():
                break
        time.sleep(0.2)
    else:
        pytest.fail("the edited routes file was not reloaded within 10 s")
    routes.write_text("routes: [ {name: broken")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://{admin}/config/errors") as r:
            body = json.loads(r.read())
            if body["last_rejection"]:
                assert "routes.yaml" in body["last_rejection"]["error"]
                break
        time.sleep(0.2)
    else:
        pytest.fail("the invalid routes file was not rejected within 10 s")
    routes.write_text(before)
    proc = pod["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, open(pod["log"]).read()[-2000:]
