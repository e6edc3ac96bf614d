"""Differential test of the gateway's reading of a request against the backend's: for every request of the
committed corpus (gateway/tests/corpus/differential) that neither refuses, the route the gateway chose and the
model and version the real infergate-backend served must agree.

The rules pin model `simple` to version 1 (REST and gRPC); the backend serves version 2 when no version is named,
so a request routed past the `simple` rules but served as `simple` shows up twice: as the wrong route in the
gateway's metrics and as version 2 in the backend's answer. REST cases are raw HTTP/1.1 files sent byte for byte;
gRPC cases are ModelInferRequest messages in hex, sent as they are.

Run through `make test` (it exports INFERGATE_BIN_DIR and INFERGATE_PYTHON)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import urllib.request

import pytest

from test_gateway_e2e import binary, free_ports, wait_ready

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CORPUS = os.path.join(ROOT, "gateway", "tests", "corpus", "differential")
SIMPLE = os.path.join(ROOT, "deploy", "local", "models", "simple")

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
  - name: grpc-simple
    match:
      model: simple
      headers: [{{ name: content-type, prefix: application/grpc }}]
    destinations: [{{ upstream: grpc, model_version: "1" }}]
  - name: grpc-other
    match:
      headers: [{{ name: content-type, prefix: application/grpc }}]
    destinations: [{{ upstream: grpc }}]
  - name: rest-simple
    match: {{ model: simple }}
    destinations: [{{ upstream: rest, model_version: "1" }}]
  - name: rest-other
    destinations: [{{ upstream: rest }}]
"""

# The route each served model must have come through, and the version that route pins.
EXPECTED = {("rest", "simple"): ("rest-simple", "1"), ("grpc", "simple"): ("grpc-simple", "1")}


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one_reading")
    repo = tmp / "models"
    shutil.copytree(SIMPLE, repo / "simple")
    http, grpc, metrics, gw, admin = free_ports(5)
    blog = tmp / "backend.log"
    backend = subprocess.Popen(
        [binary("infergate-backend"), "--model-repository", str(repo), "--http-port", str(http),
         "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--http-address", "127.0.0.1",
         "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1"],
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
        yield {"gateway": ("127.0.0.1", gw), "admin": f"127.0.0.1:{admin}"}
    finally:
        for p in (gateway, backend):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


def routes_taken(admin):
    """Requests counted per route so far (infergate_gateway_requests_total summed over the other labels)."""
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    totals = {}
    for line in text.splitlines():
        if line.startswith("infergate_gateway_requests_total{"):
            route = re.search(r'route="([^"]*)"', line).group(1)
            totals[route] = totals.get(route, 0) + float(line.rsplit(" ", 1)[1])
    return totals


def route_of(admin, before):
    after = routes_taken(admin)
    moved = [r for r in after if after[r] != before.get(r, 0)]
    assert len(moved) == 1, f"expected one route to count the request, got {moved}"
    return moved[0]


def send_rest(addr, data):
    """Sends a raw request; returns (status, headers text, body)."""
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head.decode("latin-1").lower(), body


def send_grpc(addr, message):
    """Sends one ModelInfer message as raw bytes; returns (ok, served (model, version) or error, from gateway)."""
    import grpc
    from tritonclient.grpc import service_pb2

    with grpc.insecure_channel(f"{addr[0]}:{addr[1]}") as ch:
        call = ch.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        try:
            raw = call(message, timeout=10)
        except grpc.RpcError as e:
            meta = dict(e.initial_metadata() or ()) | dict(e.trailing_metadata() or ())
            return False, f"{e.code()}: {e.details()}", meta.get("x-infergate-error-origin") == "gateway"
    r = service_pb2.ModelInferResponse.FromString(raw)
    return True, (r.model_name, r.model_version), False


def cases():
    return sorted(f for f in os.listdir(CORPUS) if f.endswith(".http") or f.endswith(".grpc.hex"))


def test_gateway_route_and_backend_model_agree_for_every_request_served(pod):
    addr, admin = pod["gateway"], pod["admin"]
    served, refused_by_gateway, refused_by_backend, disagreements = {}, [], [], []
    for name in cases():
        path = os.path.join(CORPUS, name)
        before = routes_taken(admin)
        if name.endswith(".http"):
            kind = "rest"
            with open(path, "rb") as f:
                status, head, body = send_rest(addr, f.read())
            if "x-infergate-error-origin: gateway" in head:
                refused_by_gateway.append(name)
                continue
            route = route_of(admin, before)
            if status != 200:
                refused_by_backend.append(name)
                continue
            answer = json.loads(body)
            model = (answer["model_name"], answer["model_version"])
        else:
            kind = "grpc"
            with open(path) as f:
                message = bytes.fromhex("".join(line.strip() for line in f if not line.startswith("#")))
            ok, result, from_gateway = send_grpc(addr, message)
            if from_gateway:
                refused_by_gateway.append(name)
                continue
            route = route_of(admin, before)
            if not ok:
                refused_by_backend.append(name)
                continue
            model = result
        served[name] = (route, model)
        expected_route, pinned = EXPECTED.get((kind, model[0]), (f"{kind}-other", None))
        if route != expected_route or (pinned is not None and model[1] != pinned):
            disagreements.append(f"{name}: gateway chose route {route}, backend served {model[0]} v{model[1]}")
    assert not disagreements, "\n".join(disagreements)
    # The corpus exercises what it is meant to: escapes and dot segments served as `simple` through its rules,
    # repeated gRPC fields read last-wins, and the ambiguous requests refused before the backend.
    for name in ["encoded-first-letter.http", "encoded-every-letter.http", "dot-segment-before-name.http",
                 "encoded-dot-segment.http", "version-encoded.http", "absolute-form.http",
                 "name-repeated-last-wins.grpc.hex", "version-before-and-after.grpc.hex"]:
        assert name in served, f"{name} was not served: gateway refused {refused_by_gateway}, backend {refused_by_backend}"
    for name in ["encoded-slash.http", "encoded-nul.http", "bad-escape.http", "two-hosts.http", "no-host.http",
                 "absolute-form-other-host.http"]:
        assert name in refused_by_gateway, f"{name} was not refused by the gateway"
    assert len(served) >= 15, served
