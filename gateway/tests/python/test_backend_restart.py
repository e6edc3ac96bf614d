"""Reliability drill: the backend restarts under load and the gateway's retries absorb it.

Clients keep sending inference requests through the real gateway while the real backend is stopped (SIGTERM) and
started again on the same ports. With the route's retries on connect failures and resets and a back-off that
spans the restart, every request succeeds, and the gateway's metrics show the retries that hid the outage.
Run through `make test` (it exports INFERGATE_BIN_DIR and INFERGATE_PYTHON)."""

import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

from test_gateway_e2e import MODELS, binary, free_ports, wait_ready

ROUTES = """
listeners:
  data: {{ address: "127.0.0.1:{gw}" }}
  admin: {{ address: "127.0.0.1:{admin}" }}
upstreams:
  - name: backend
    endpoints: ["127.0.0.1:{http}"]
    protocol: h2c
    connect_timeout: 250ms
routes:
  - name: simple
    match: {{ model: simple }}
    destinations: [{{ upstream: backend, model_version: "1" }}]
    timeout: 20s
    retries:
      attempts: 10
      per_try_timeout: 2s
      retry_on: [connect-failure, refused-stream, reset, unavailable, gateway-error]
      backoff: {{ base: 50ms, max: 1s }}
      budget: {{ ratio: 1.0, min_per_second: 1000, window: 10s }}
"""

BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()


def start_backend(http, grpc, metrics, log):
    proc = subprocess.Popen(
        [binary("infergate-backend"), "--model-repository", MODELS, "--http-port", str(http),
         "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--http-address", "127.0.0.1",
         "--grpc-address", "127.0.0.1", "--metrics-address", "127.0.0.1"],
        stdout=open(log, "a"), stderr=subprocess.STDOUT)
    wait_ready(f"http://127.0.0.1:{http}/v2/health/ready", proc, log)
    return proc


def metric_total(admin, name):
    with urllib.request.urlopen(f"http://{admin}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


class Client(threading.Thread):
    """Sends requests one after another until stopped; records each outcome with its start time."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.outcomes = []  # (start, ok, detail)

    def run(self):
        while not self.stop.is_set():
            start = time.monotonic()
            req = urllib.request.Request(self.url, data=BODY, headers={"content-type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    out = json.loads(r.read())["outputs"][0]["data"]
                    self.outcomes.append((start, out == [2.0, 3.0, 4.0, 5.0], out))
            except urllib.error.HTTPError as e:
                self.outcomes.append((start, False, f"{e.code} {e.read()[:300]!r}"))
            except Exception as e:  # noqa: BLE001 - any failure is a lost request
                self.outcomes.append((start, False, repr(e)))
            time.sleep(0.005)


def test_retries_absorb_a_backend_restart(tmp_path):
    http, grpc, metrics, gw, admin = free_ports(5)
    blog = tmp_path / "backend.log"
    glog = tmp_path / "gateway.log"
    routes = tmp_path / "routes.yaml"
    routes.write_text(ROUTES.format(gw=gw, admin=admin, http=http))
    backend = start_backend(http, grpc, metrics, blog)
    gateway = subprocess.Popen([binary("infergate-gateway"), "--config", str(routes)],
                               stdout=open(glog, "w"), stderr=subprocess.STDOUT)
    clients = []
    try:
        wait_ready(f"http://127.0.0.1:{admin}/ready", gateway, glog, timeout=20)
        clients = [Client(f"http://127.0.0.1:{gw}/v2/models/simple/infer") for _ in range(4)]
        for c in clients:
            c.start()
        time.sleep(1.0)
        retries_before = metric_total(f"127.0.0.1:{admin}", "infergate_gateway_retries_total")

        # The restart: SIGTERM (the backend drains and exits 0), a pause with nothing listening, a new process.
        down_at = time.monotonic()
        backend.send_signal(signal.SIGTERM)
        assert backend.wait(timeout=30) == 0, open(blog).read()[-3000:]
        time.sleep(0.5)
        backend = start_backend(http, grpc, metrics, blog)
        up_at = time.monotonic()
        time.sleep(1.0)
    finally:
        for c in clients:
            c.stop.set()
        for c in clients:
            c.join(timeout=60)
    try:
        outcomes = [o for c in clients for o in c.outcomes]
        failed = [o for o in outcomes if not o[1]]
        during = [o for o in outcomes if down_at - 0.1 <= o[0] <= up_at]
        retries = metric_total(f"127.0.0.1:{admin}", "infergate_gateway_retries_total") - retries_before
        print(f"[restart drill] backend down for {up_at - down_at:.2f} s; {len(outcomes)} requests, "
              f"{len(during)} started while it was down or starting, {len(failed)} failed, {retries:.0f} retries")
        assert not failed, f"{len(failed)} of {len(outcomes)} requests failed, e.g. {failed[:3]}"
        assert len(during) >= 4, "the clients sent too few requests during the restart to show anything"
        assert retries > 0, "no retries were counted: the restart was not seen by the gateway"
    finally:
        for p in (gateway, backend):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
