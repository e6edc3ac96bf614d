"""The gateway's shutdown for a rollout: on SIGTERM `/ready` turns false at once while the data port keeps serving
new requests for `--drain-delay`, then the gateway drains and exits 0.

Run through `make test` (it exports INFERGATE_BIN_DIR)."""

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request

from test_gateway_e2e import MODELS, binary, free_ports, wait_ready

ROUTES = """
listeners:
  data: {{ address: "127.0.0.1:{gw}" }}
  admin: {{ address: "127.0.0.1:{admin}" }}
upstreams:
  - name: rest
    endpoints: ["127.0.0.1:{http}"]
    protocol: h2c
routes:
  - name: rest
    destinations: [{{ upstream: rest }}]
"""


def status(url, data=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def test_sigterm_fails_readiness_serves_through_the_drain_delay_then_exits(tmp_path):
    http, grpc, metrics, gw, admin = free_ports(5)
    blog, glog = tmp_path / "backend.log", tmp_path / "gateway.log"
    backend = subprocess.Popen(
        [binary("infergate-backend"), "--model-repository", MODELS, "--http-port", str(http),
         "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
        stdout=open(blog, "w"), stderr=subprocess.STDOUT)
    gateway = None
    try:
        wait_ready(f"http://127.0.0.1:{http}/v2/health/ready", backend, blog)
        routes = tmp_path / "routes.yaml"
        routes.write_text(ROUTES.format(gw=gw, admin=admin, http=http))
        gateway = subprocess.Popen(
            [binary("infergate-gateway"), "--config", str(routes), "--drain-delay", "2s", "--log-format", "json"],
            stdout=open(glog, "w"), stderr=subprocess.STDOUT)
        wait_ready(f"http://127.0.0.1:{admin}/ready", gateway, glog, timeout=20)
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                                       "data": [1, 2, 3, 4]}]}).encode()
        infer = f"http://127.0.0.1:{gw}/v2/models/simple/infer"
        assert status(infer, body) == 200

        gateway.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        time.sleep(0.2)
        assert status(f"http://127.0.0.1:{admin}/ready") == 503
        # Still serving new connections during the delay: a request the cluster still routes here succeeds.
        served = 0
        while time.monotonic() - sent < 1.5:
            assert status(infer, body) == 200
            served += 1
        assert served > 0
        assert gateway.wait(timeout=20) == 0
        assert time.monotonic() - sent >= 2.0, "the gateway exited before its drain delay ended"
        assert status(infer, body) is None, "the data port still accepts after exit"
        # Logs are JSON, one object per line, without colour codes.
        lines = [line for line in open(glog).read().splitlines() if line.strip()]
        assert lines and all(json.loads(line)["level"] for line in lines), lines[:3]
        assert not any("\x1b[" in line for line in lines)
    finally:
        for p in (gateway, backend):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
