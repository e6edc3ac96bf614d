"""Dashboards and alerts against a real Prometheus.

Debian's `prometheus` binary (started directly, with a temporary config and data folder) scrapes a running
backend and gateway while this test sends traffic that exercises every family the dashboard and the alerts read:
gRPC successes and errors (the backend's INVALID_ARGUMENT in trailers, the gateway's own UNAVAILABLE as a
trailers-only answer), 429s from a quota, retries and a spent retry budget, a rejected edit of the routes file,
and a canary rollback. Then every Grafana panel query and every alert expression is evaluated through the HTTP
API and must return series; the alerts this traffic provokes must hold as written, comparison included.
The rules file is loaded as Prometheus loads it in a cluster, so the recording rules run too, with one change in a
test-only copy: the error-budget burn alerts wait 5 s (`for`) instead of 2 and 15 minutes, so a test can drive
errors through the gateway until they fire. Their expressions, windows and thresholds are the file's.

Run through `make test` (which installs `prometheus` and exports INFERGATE_BIN_DIR)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "gateway", "tests", "python"))
from test_gateway_e2e import MODELS, binary, free_ports, wait_ready  # noqa: E402

DEPLOY = os.path.join(ROOT, "deploy")
ALERTS = os.path.join(DEPLOY, "prometheus", "alerts.yaml")
DASHBOARD = os.path.join(DEPLOY, "grafana", "infergate.json")

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
  - name: gone
    endpoints: ["127.0.0.1:{dead}"]
    protocol: h2c
    connect_timeout: 200ms
callers:
  identify_by: {{ header: x-caller-id }}
  unidentified: shared
routes:
  - name: grpc-gone
    match:
      model: gone
      headers: [{{ name: content-type, prefix: application/grpc }}]
    destinations: [{{ upstream: gone }}]
  - name: grpc
    match:
      headers: [{{ name: content-type, prefix: application/grpc }}]
    destinations: [{{ upstream: grpc }}]
  - name: limited
    match: {{ model: simple, headers: [{{ name: x-test, exact: quota }}] }}
    destinations: [{{ upstream: rest }}]
    quota: {{ rate: 1/s, burst: 5 }}
  - name: canary
    match: {{ model: simple }}
    destinations:
      - {{ name: stable, upstream: rest, model_version: "1", weight: 50 }}
      - {{ name: candidate, upstream: gone, model_version: "2", weight: 50 }}
    retries:
      attempts: 1
      retry_on: [connect-failure]
      backoff: {{ base: 1ms, max: 2ms }}
      budget: {{ ratio: 0.01, min_per_second: 1, window: 10s }}
    canary:
      baseline: stable
      canary: candidate
      window: 5s
      min_requests: 10
  - name: rest
    destinations: [{{ upstream: rest }}]
"""

PROMETHEUS_CONFIG = """
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["{rules}"]
scrape_configs:
  - job_name: infergate-gateway
    static_configs: [{{ targets: ["127.0.0.1:{admin}"] }}]
  - job_name: infergate-backend
    static_configs: [{{ targets: ["127.0.0.1:{metrics}"] }}]
  # A target nobody listens on: the absent-target alert must see it.
  - job_name: infergate-missing
    static_configs: [{{ targets: ["127.0.0.1:{dead}"] }}]
"""

# Alerts the traffic below makes true: their whole expression, comparison included, must return series.
PROVOKED = {
    "InfergateConfigRejected", "InfergateCanaryRolledBack", "InfergateRetryBudgetExhausted", "InfergateQuotaSurge",
    "InfergateTargetDown",
    "InfergateModelNotReady", "InfergateBackendNotReady",
}
# The burn alerts need errors that keep coming (a failure series first seen at its first error gives rate() no
# increase): test_the_error_budget_burn_alerts_fire_while_a_route_keeps_failing drives them until they fire.

# The burn alerts' `for` in the test-only copy of the rules (the real file waits 2 and 15 minutes).
BURN_ALERTS = ("InfergateErrorBudgetBurnFast", "InfergateErrorBudgetBurnSlow")
TEST_BURN_FOR = "5s"


def prometheus_binary():
    exe = shutil.which("prometheus")
    if exe is None:
        pytest.fail("the `prometheus` binary is missing: `make test` installs it (Debian package prometheus), "
                    "or run `apt-get install prometheus`")
    return exe


def rules_for_test(tmp):
    """A copy of the alert rules whose burn alerts wait TEST_BURN_FOR instead of minutes; nothing else differs."""
    with open(ALERTS) as f:
        rules = yaml.safe_load(f)
    changed = 0
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in BURN_ALERTS:
                rule["for"] = TEST_BURN_FOR
                changed += 1
    assert changed == len(BURN_ALERTS), f"{ALERTS} lacks one of {BURN_ALERTS}"
    path = tmp / "alerts-test-copy.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


def broken_model_repository(tmp):
    """deploy/local/models plus a model whose file is not ONNX: it fails to load, so it is not ready; and a copy
    of `simple` on wgpu (lavapipe where there is no GPU), so the per-device memory series exist."""
    repo = tmp / "models"
    shutil.copytree(os.path.join(MODELS, "simple"), repo / "simple")
    shutil.copytree(os.path.join(MODELS, "simple"), repo / "simple_gpu")
    config = (repo / "simple_gpu" / "config.pbtxt").read_text()
    assert "KIND_CPU" in config and 'name: "simple"' in config
    (repo / "simple_gpu" / "config.pbtxt").write_text(
        config.replace("KIND_CPU", "KIND_GPU").replace('name: "simple"', 'name: "simple_gpu"'))
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.onnx").write_bytes(b"this is not an ONNX file")
    (repo / "broken" / "config.pbtxt").write_text(
        'name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        'input [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
        'output [ { name: "y", data_type: TYPE_FP32, dims: [ 4 ] } ]\n')
    return repo


def stop(procs):
    for p in procs:
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    http, grpc, metrics, gw, admin, prom, dead = free_ports(7)
    repo = broken_model_repository(tmp)
    blog, glog, plog = tmp / "backend.log", tmp / "gateway.log", tmp / "prometheus.log"
    procs = []
    try:
        procs.append(subprocess.Popen(
            [binary("infergate-backend"), "--model-repository", str(repo), "--http-port", str(http),
             "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
            stdout=open(blog, "w"), stderr=subprocess.STDOUT))
        # The broken model keeps the server unready (strict readiness); `simple` serves.
        wait_ready(f"http://127.0.0.1:{http}/v2/models/simple/ready", procs[0], blog)
        routes = tmp / "routes.yaml"
        routes.write_text(ROUTES.format(gw=gw, admin=admin, http=http, grpc=grpc, dead=dead))
        procs.append(subprocess.Popen([binary("infergate-gateway"), "--config", str(routes)],
                                      stdout=open(glog, "w"), stderr=subprocess.STDOUT))
        wait_ready(f"http://127.0.0.1:{admin}/ready", procs[1], glog, timeout=20)
        config = tmp / "prometheus.yml"
        config.write_text(PROMETHEUS_CONFIG.format(rules=rules_for_test(tmp), admin=admin, metrics=metrics,
                                                   dead=dead))
        procs.append(subprocess.Popen(
            [prometheus_binary(), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom}"],
            stdout=open(plog, "w"), stderr=subprocess.STDOUT))
        wait_ready(f"http://127.0.0.1:{prom}/-/ready", procs[2], plog, timeout=30)
        yield {"gateway": f"127.0.0.1:{gw}", "admin": f"127.0.0.1:{admin}", "prometheus": f"127.0.0.1:{prom}",
               "routes": routes, "logs": (blog, glog, plog)}
    finally:
        stop(reversed(procs))


def rest_infer(gateway, headers):
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
    req = urllib.request.Request(f"http://{gateway}/v2/models/simple/infer", data=body.encode(), headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def query(prom, expr):
    url = f"http://{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = get_json(url)
    except urllib.error.HTTPError as e:
        pytest.fail(f"Prometheus refused {expr!r}: {e.read().decode()}")
    assert body["status"] == "success", body
    return body["data"]["result"]


def send_traffic(stack):
    import tritonclient.grpc as grpcclient

    gateway = stack["gateway"]
    # Prometheus must hold a sample of every counter at zero before the first event, or increase() misses it.
    deadline = time.monotonic() + 20
    while len(query(stack["prometheus"], 'up{job=~"infergate-(gateway|backend)"} == 1')) < 2:
        assert time.monotonic() < deadline, "Prometheus did not scrape the gateway and the backend within 20 s"
        time.sleep(0.2)
    time.sleep(1.5)
    c = grpcclient.InferenceServerClient(url=gateway)
    good = grpcclient.InferInput("x", [1, 4], "FP32")
    good.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32))
    for _ in range(5):
        c.infer("simple", [good])  # grpc-status 0, in trailers
    wrong = grpcclient.InferInput("not_x", [1, 4], "FP32")
    wrong.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32))
    for _ in range(3):
        with pytest.raises(Exception, match="not_x"):
            c.infer("simple", [wrong])  # the backend's INVALID_ARGUMENT, in trailers
    for _ in range(3):
        with pytest.raises(Exception):
            c.infer("gone", [good])  # the gateway's UNAVAILABLE, trailers-only
    # The quota: a burst of 5, then 429s.
    statuses = [rest_infer(gateway, {"x-test": "quota", "x-caller-id": "noisy"}) for _ in range(30)]
    assert statuses.count(429) >= 20, statuses
    # The canary: half the requests go to a destination nobody serves; the analysis rolls it back, and the
    # retries that the spent budget skips are counted.
    # The analysis judges once per slot of its window, so the traffic spans a few slots.
    canary, deadline = [], time.monotonic() + 20
    while '"rolled' not in json.dumps(get_json(f"http://{stack['admin']}/canary")).lower():
        assert time.monotonic() < deadline, "the canary was not rolled back within 20 s"
        canary += [rest_infer(gateway, {"x-caller-id": f"c{i}"}) for i in range(20)]
        time.sleep(0.2)
    assert 200 in canary and 503 in canary, canary
    # A rejected edit: the running rules stay.
    routes = stack["routes"]
    good_text = routes.read_text()
    routes.write_text(good_text + "\nroutes: [ {name: broken\n")
    deadline = time.monotonic() + 10
    while not get_json(f"http://{stack['admin']}/config/errors")["last_rejection"]:
        assert time.monotonic() < deadline, "the broken edit was not rejected within 10 s"
        time.sleep(0.1)
    return good_text


def concrete(expr):
    """A dashboard query with Grafana's variables as Prometheus can run it: every label value, a 1m window."""
    expr = expr.replace("$__rate_interval", "1m")
    return re.sub(r"\$(namespace|pod|model|route)\b", ".*", expr)


def split_top(expr, ops):
    """Splits `expr` at the first operator of `ops` outside brackets and strings; None when there is none."""
    depth, quote, i = 0, None, 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            for op in ops:
                if expr.startswith(op, i):
                    return expr[:i].strip(), expr[i + len(op):].strip()
        i += 1
    return None


def operands(expr):
    """The parts of an alert expression that read data: each side of a top-level `and`/`or`, without its final
    comparison against a threshold; the argument of `absent()`."""
    expr = " ".join(expr.split())
    for op in (" and ", " or ", " unless "):
        parts = split_top(expr, [op])
        if parts:
            return operands(parts[0]) + operands(parts[1])
    m = re.fullmatch(r"absent\((.*)\)", expr)
    if m:
        return [m.group(1)]
    parts = split_top(expr, [" > ", " < ", " == ", " != ", " >= ", " <= "])
    return [parts[0]] if parts else [expr]


def alert_rules():
    with open(ALERTS) as f:
        groups = yaml.safe_load(f)["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_every_panel_and_alert_returns_series_from_live_processes(stack):
    good_text = send_traffic(stack)
    prom = stack["prometheus"]
    dashboard = json.load(open(DASHBOARD))
    checks = []
    for panel in dashboard["panels"]:
        for t in panel["targets"]:
            checks.append((f"panel {panel['title']!r} {t['refId']}", concrete(t["expr"])))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.*), (\w+)\)", var["query"]["query"])
            assert m, f"variable {var['name']}: expected label_values(selector, label)"
            # In a cluster the label comes from the scrape (namespace, pod); here the series must exist.
            checks.append((f"variable {var['name']}", concrete(m.group(1))))
    for rule in alert_rules():
        for i, part in enumerate(operands(rule["expr"])):
            checks.append((f"alert {rule['alert']} operand {i}", part))
        if rule["alert"] in PROVOKED:
            checks.append((f"alert {rule['alert']} (provoked)", rule["expr"]))

    # Scrapes every second and rules evaluated every second: give the last events time to arrive.
    deadline = time.monotonic() + 40
    missing = checks
    while missing and time.monotonic() < deadline:
        time.sleep(1)
        missing = [(where, expr) for where, expr in missing if not query(prom, expr)]
    assert not missing, "no series for:\n" + "\n".join(f"  {w}: {e}" for w, e in missing) + \
        "\n(logs: " + ", ".join(str(p) for p in stack["logs"]) + ")"

    # The counters that tell gRPC outcomes apart, as a user would query them (the error series registered at
    # zero are left out: only the outcomes requests actually had).
    by_status = {r["metric"]["grpc_status"]: r["metric"]["outcome"] for r in query(
        prom, 'sum by (grpc_status, outcome) (infergate_gateway_requests_total{grpc_status!=""}) > 0')}
    assert by_status.get("0") == "success", by_status
    assert by_status.get("3") == "client_error", by_status
    assert by_status.get("14") == "unavailable", by_status
    # 429s are counted, but not in the latency of served requests.
    limited = query(prom, 'sum(infergate_gateway_requests_total{route="limited",response_code="429"})')
    assert limited and float(limited[0]["value"][1]) >= 20
    served = query(prom, 'sum(infergate_gateway_request_duration_seconds_count{route="limited"})')
    assert float(served[0]["value"][1]) <= 10, served


def burn_alerts(prom):
    """The burn alerts Prometheus holds now, pending or firing, as (name, route, state)."""
    alerts = get_json(f"http://{prom}/api/v1/alerts")["data"]["alerts"]
    return sorted((a["labels"]["alertname"], a["labels"].get("route"), a["state"])
                  for a in alerts if a["labels"]["alertname"] in BURN_ALERTS)


def test_the_error_budget_burn_alerts_fire_while_a_route_keeps_failing(stack):
    """Errors driven through the gateway on the route `grpc-gone` (its upstream is not there, so every request
    gets the gateway's UNAVAILABLE) until both burn alerts fire for it. Uses the test-only copy of the rules:
    `for` is 5 s instead of minutes; the expressions and thresholds are the real file's."""
    import tritonclient.grpc as grpcclient

    prom = stack["prometheus"]
    c = grpcclient.InferenceServerClient(url=stack["gateway"])
    x = grpcclient.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.array([[1, 2, 3, 4]], dtype=np.float32))
    for _ in range(3):
        c.infer("simple", [x])  # the route `grpc` serves: it must not burn
    wanted = {(name, "grpc-gone", "firing") for name in BURN_ALERTS}
    deadline = time.monotonic() + 90
    while not wanted <= set(burn_alerts(prom)):
        assert time.monotonic() < deadline, \
            f"the burn alerts did not fire for route grpc-gone within 90 s; Prometheus holds {burn_alerts(prom)}"
        for _ in range(3):
            with pytest.raises(Exception, match="UNAVAILABLE|unavailable"):
                c.infer("gone", [x])
        time.sleep(1)
    held = burn_alerts(prom)
    assert not [a for a in held if a[1] == "grpc"], f"a route without failures burns: {held}"
    alerts = get_json(f"http://{prom}/api/v1/alerts")["data"]["alerts"]
    fast = next(a for a in alerts if a["labels"]["alertname"] == "InfergateErrorBudgetBurnFast"
                and a["labels"].get("route") == "grpc-gone")
    assert fast["labels"]["severity"] == "page", fast
    assert fast["annotations"]["runbook_url"] == "docs/operations.md#error-budget-burn", fast
    assert "route grpc-gone" in fast["annotations"]["summary"], fast


def test_the_alert_rules_pass_their_promtool_unit_tests():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make test` installs it (Debian package prometheus)"
    r = subprocess.run([promtool, "test", "rules", os.path.join(DEPLOY, "prometheus", "alerts.test.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_runbook_url_names_a_section_of_the_operations_guide():
    doc = open(os.path.join(ROOT, "docs", "operations.md")).read()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.*)$", doc, re.M)}
    for rule in alert_rules():
        url = rule["annotations"].get("runbook_url", "")
        assert url.startswith("docs/operations.md#"), f"{rule['alert']}: runbook_url {url!r}"
        assert url.split("#", 1)[1] in anchors, f"{rule['alert']}: docs/operations.md has no section #{url.split('#')[1]}"


def test_a_route_added_by_a_reload_reports_at_zero_before_its_first_request(stack):
    routes = stack["routes"]
    text = routes.read_text()
    if "routes: [ {name: broken" in text:  # the first test leaves its rejected edit behind
        text = text[: text.index("\nroutes: [ {name: broken")]
    fresh = "  - name: fresh\n    match: { model: fresh }\n    destinations: [{ name: only, upstream: rest }]\n"
    last = "  - name: rest\n    destinations"
    routes.write_text(text.replace(last, fresh + last))
    wanted = [
        'infergate_gateway_requests_total{route="fresh",destination="only",upstream="rest",outcome="success",'
        'status_class="2xx",response_code="200"} 0',
        'infergate_gateway_request_duration_seconds_count{route="fresh",destination="only"} 0',
        'infergate_gateway_quota_rejections_total{route="fresh"} 0',
        'infergate_gateway_retry_budget_exhausted_total{route="fresh"} 0',
        'infergate_gateway_canary_rollbacks_total{route="fresh"} 0',
        'infergate_gateway_configured_weight{route="fresh",destination="only"} 1',
        'infergate_gateway_request_bytes_total{route="fresh",destination="only"} 0',
        'infergate_gateway_response_bytes_total{route="fresh",destination="only"} 0',
        'infergate_gateway_retry_outcomes_total{route="fresh",outcome="succeeded"} 0',
        'infergate_gateway_requests_total{route="fresh",destination="only",upstream="rest",outcome="timeout",'
        'status_class="5xx",response_code="504"} 0',
        'infergate_gateway_requests_total{route="fresh",destination="only",upstream="rest",outcome="unavailable",'
        'status_class="2xx",response_code="200",grpc_status="14"} 0',
    ]
    deadline = time.monotonic() + 10
    while True:
        with urllib.request.urlopen(f"http://{stack['admin']}/metrics", timeout=5) as r:
            text = r.read().decode()
        missing = [w for w in wanted if w not in text]
        if not missing:
            break
        assert time.monotonic() < deadline, f"after the reload, /metrics lacks {missing}"
        time.sleep(0.2)
