"""The deployment files in deploy/ checked against the real processes.

There is no cluster here, so each manifest is checked for what would break it in one: the objects each overlay
renders (test_k8s_validate.py renders and validates them) reference each other consistently and ask for their
node kind's device, nodes and Vulkan driver; the fetch-models init container's command fills an empty models
volume, and later adds a new version the running backend serves; the processes start with exactly the arguments,
environment and files the manifests give them (paths and ports moved into a temporary folder and free ports), and
every probe answers 200; the KServe runtime's tritonserver-style arguments serve; the HPA's adapter rule reads a
series the backend exports; and the Dockerfile builds, stripped from the release-lto profile, the binary each
image's containers run, as a non-root user, with no Mesa in the gateway image (the dashboard and the alerts are
checked against a real Prometheus in test_prometheus.py). Run through `make test`."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "gateway", "tests", "python"))
from test_gateway_e2e import MODELS, binary, free_ports, wait_ready  # noqa: E402
from test_k8s_validate import OVERLAYS, kustomize  # noqa: E402

DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
BASE = os.path.join(K8S, "base")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def k8s_objects(overlay="cpu"):
    """The base kustomization, and the objects `kubectl kustomize` renders for an overlay."""
    return load_all(os.path.join(BASE, "kustomization.yaml"))[0], kustomize(f"overlays/{overlay}")


def one(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kustomization_objects_reference_each_other(overlay):
    kust, objects = k8s_objects(overlay)
    deploy = one(objects, "Deployment")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for svc in (o for o in objects if o["kind"] == "Service"):
        assert svc["spec"]["selector"].items() <= pod_labels.items(), f"Service {svc['metadata']['name']} selects no pod"
    assert one(objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deploy["metadata"]["name"]

    pod = deploy["spec"]["template"]["spec"]
    port_names = {p["name"] for c in pod["containers"] for p in c.get("ports", [])}
    for svc in (o for o in objects if o["kind"] == "Service"):
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in port_names, f"Service port {p['name']} targets unknown port {p['targetPort']}"
    volumes = {v["name"]: v for v in pod["volumes"]}
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    for v in volumes.values():
        if "persistentVolumeClaim" in v:
            assert v["persistentVolumeClaim"]["claimName"] in claims, "the models volume's claim is not rendered"
    for c in pod["containers"] + pod.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{c['name']} mounts unknown volume {m['name']}"
            # subPath mounts of a ConfigMap are never updated: live reload needs the folder.
            assert "subPath" not in m, f"{c['name']} mounts {m['name']} with subPath"
    generated = {g["name"] for g in kust["configMapGenerator"]}
    for v in volumes.values():
        if "configMap" in v:
            assert v["configMap"]["name"] in generated
    # Without this, every edit of the rules would be a new ConfigMap and a rollout instead of a live reload.
    assert kust["generatorOptions"]["disableNameSuffixHash"] is True
    assert pod["terminationGracePeriodSeconds"] > 30, "the kubelet must wait longer than the drain timeouts"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_asks_for_its_device_node_and_vulkan_driver(overlay):
    # What each node kind needs: the device resource the device plugin offers, nodes that have it, and the
    # Vulkan driver (ICD) that reaches it, in an image that holds it.
    want = {
        "cpu": (None, "kubernetes.io/arch", "/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", "infergate-backend-mesa"),
        "nvidia": ("nvidia.com/gpu", "nvidia.com/gpu.present", "/etc/vulkan/icd.d/nvidia_icd.json",
                   "infergate-backend"),
        "amd": ("amd.com/gpu", "feature.node.kubernetes.io/amd-gpu", "/usr/share/vulkan/icd.d/radeon_icd.x86_64.json",
                "infergate-backend-mesa"),
        "intel": ("gpu.intel.com/i915", "intel.feature.node.kubernetes.io/gpu",
                  "/usr/share/vulkan/icd.d/intel_icd.x86_64.json", "infergate-backend-mesa"),
    }[overlay]
    device, node_label, icd, image = want
    pod = one(k8s_objects(overlay)[1], "Deployment")["spec"]["template"]["spec"]
    backend = next(c for c in pod["containers"] if c["name"] == "backend")
    limits = backend["resources"]["limits"]
    gpus = {k for k in limits if k not in ("cpu", "memory")}
    assert gpus == ({device} if device else set()), f"{overlay}: device resources {gpus}"
    assert node_label in pod["nodeSelector"], f"{overlay}: nodes not selected by {node_label}"
    if device:
        assert any(t["key"] == device for t in pod["tolerations"]), f"{overlay}: no toleration of {device} taints"
    env = {e["name"]: e["value"] for e in backend["env"]}
    assert icd in env["VK_ICD_FILENAMES"].split(":"), f"{overlay}: VK_ICD_FILENAMES={env['VK_ICD_FILENAMES']}"
    assert backend["image"].split(":")[0] == image, f"{overlay}: backend image {backend['image']}"
    if overlay == "nvidia":
        assert "graphics" in env["NVIDIA_DRIVER_CAPABILITIES"], "the toolkit mounts the Vulkan ICD only for graphics"


def test_the_shipped_rules_pass_check():
    r = subprocess.run([binary("infergate-gateway"), "check", os.path.join(BASE, "routes.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


class Relocated:
    """Rewrites a container's arguments for this machine: manifest ports to free ports, manifest paths to
    temporary ones, all-interfaces addresses to loopback."""

    def __init__(self, ports, paths):
        self.ports = ports  # manifest port -> local port
        self.paths = paths  # manifest path -> local path

    def arg(self, a):
        for src, dst in self.paths.items():
            a = a.replace(src, dst)
        a = a.replace("0.0.0.0:", "127.0.0.1:")
        m = re.fullmatch(r"(--[a-z-]+(?:port)=)(\d+)", a) or re.fullmatch(r"(.*:)(\d+)", a)
        if m and int(m.group(2)) in self.ports:
            a = m.group(1) + str(self.ports[int(m.group(2))])
        return a

    def command(self, container):
        return [binary(container["command"][0])] + [self.arg(a) for a in container.get("args", [])]

    def env(self, container):
        env = dict(os.environ)
        for e in container.get("env", []):
            env[e["name"]] = self.arg(e["value"])
        return env


def start(argv, env, log):
    return subprocess.Popen(argv, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def probes(container):
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in container:
            yield kind, container[kind]["httpGet"]


def port_number(container, port):
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p["name"] == port)


def fetch_models(init, place, log):
    """Runs the fetch-models init container's command (busybox's sh in the models image; this machine's sh here)."""
    argv = [init["command"][0]] + [place.arg(a) for a in init["command"][1:] + init.get("args", [])]
    with open(log, "a") as out:
        return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT).returncode


@pytest.fixture(scope="module")
def pod(tmp_path_factory):
    """The cpu overlay's pod: the init container fills an empty models volume from the repository the models image
    holds (deploy/local/models here), then the two containers start as the manifest says."""
    tmp = tmp_path_factory.mktemp("k8s-pod")
    _, objects = k8s_objects()
    spec = one(objects, "Deployment")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    # Declared ports, and the ports the processes listen on inside the pod only (the backend's loopback ones).
    manifest_ports = sorted({p["containerPort"] for c in containers.values() for p in c["ports"]}
                            | {int(m) for c in containers.values() for a in c.get("args", [])
                               for m in re.findall(r"^--[a-z]+-port=(\d+)$", a)})
    ports = dict(zip(manifest_ports, free_ports(len(manifest_ports))))
    # The ConfigMap's folder, with the rules' upstream ports moved like the backend's.
    config_dir = tmp / "etc-infergate"
    config_dir.mkdir()
    rules = open(os.path.join(BASE, "routes.yaml")).read()
    for src, dst in ports.items():
        rules = rules.replace(f"127.0.0.1:{src}\"", f"127.0.0.1:{dst}\"")
    (config_dir / "routes.yaml").write_text(rules)
    (tmp / "cache").mkdir()
    (tmp / "models").mkdir()  # the PersistentVolumeClaim, empty at first
    place = Relocated(ports, {"/etc/infergate": str(config_dir), "/models": str(tmp / "models"),
                              "/cache": str(tmp / "cache"), "/scripts": BASE, "/repository": MODELS})
    init = next(c for c in spec["initContainers"] if c["name"] == "fetch-models")
    assert fetch_models(init, place, tmp / "fetch-models.log") == 0, (tmp / "fetch-models.log").read_text()
    backend, gateway = containers["backend"], containers["gateway"]
    blog, glog = tmp / "backend.log", tmp / "gateway.log"
    procs = [start(place.command(backend), place.env(backend), blog)]
    try:
        wait_ready(f"http://127.0.0.1:{ports[port_number(backend, 'metrics')]}/v2/health/ready", procs[0], blog)
        procs.append(start(place.command(gateway), place.env(gateway), glog))
        wait_ready(f"http://127.0.0.1:{ports[port_number(gateway, 'admin')]}/ready", procs[1], glog, timeout=20)
        yield {"containers": containers, "ports": ports, "rules": config_dir / "routes.yaml", "init": init,
               "place": place, "tmp": tmp,
               "data": f"127.0.0.1:{ports[port_number(gateway, 'http')]}",
               "admin": f"127.0.0.1:{ports[port_number(gateway, 'admin')]}",
               "metrics": f"127.0.0.1:{ports[port_number(backend, 'metrics')]}"}
    finally:
        stop(reversed(procs))


def test_every_probe_of_the_deployment_answers_200(pod):
    for name, c in pod["containers"].items():
        for kind, get in probes(c):
            port = pod["ports"][port_number(c, get["port"])]
            status, body = http_get(f"http://127.0.0.1:{port}{get['path']}")
            assert status == 200, f"{name} {kind} {get['path']}: {status} {body[:200]!r}"


def test_a_new_models_image_adds_a_version_the_running_backend_serves(pod):
    # A rollout with a newer models image reruns fetch-models on the filled volume: it adds the new version
    # folder (never rewriting one that is there) and the running backend loads it (--model-control-mode=poll).
    newer = pod["tmp"] / "newer-repository"
    shutil.copytree(MODELS, newer)
    shutil.copytree(newer / "simple" / "2", newer / "simple" / "3")
    (newer / "simple" / "1" / "model.onnx").write_bytes(b"not what the volume holds")
    place = Relocated(pod["place"].ports, {**pod["place"].paths, "/repository": str(newer)})
    log = pod["tmp"] / "fetch-models-again.log"
    assert fetch_models(pod["init"], place, log) == 0, log.read_text()
    assert "added simple/3" in log.read_text() and "added simple/1" not in log.read_text()
    volume = pod["tmp"] / "models"
    assert (volume / "simple" / "1" / "model.onnx").read_bytes() == open(
        os.path.join(MODELS, "simple", "1", "model.onnx"), "rb").read(), "an existing version was rewritten"
    assert not [p for p in os.listdir(volume) if p.startswith(".")], "fetch-models left its staging folder"
    url = f"http://127.0.0.1:{pod['ports'][8000]}/v2/models/simple/versions/3/ready"  # the backend's REST port
    for _ in range(300):  # the backend applies a change once the repository is quiet for 0.5 s
        if http_get(url)[0] == 200:
            break
        time.sleep(0.1)
    assert http_get(url)[0] == 200, "the backend did not load the version fetch-models added"


def infer(data_addr, caller):
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
    req = urllib.request.Request(f"http://{data_addr}/v2/models/simple/infer", data=body.encode(),
                                 headers={"x-caller-id": caller})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_backend_serves_inference_on_loopback_only(pod):
    backend = pod["containers"]["backend"]
    args = backend["args"]
    assert "--http-address=127.0.0.1" in args and "--grpc-address=127.0.0.1" in args
    assert {p["name"] for p in backend["ports"]} == {"metrics"}, "only metrics and probes leave the pod"
    _, objects = k8s_objects()
    for svc in (o for o in objects if o["kind"] == "Service"):
        assert all(p["targetPort"] != "admin" for p in svc["spec"]["ports"]), \
            f"Service {svc['metadata']['name']} exposes the gateway's admin API"


def test_the_shipped_rules_serve_and_throttle_a_noisy_caller(pod):
    # The rules allow 200/s with a burst of 400 per caller.
    assert infer(pod["data"], "alice") == 200
    statuses = []
    while 429 not in statuses and len(statuses) < 5000:
        statuses.append(infer(pod["data"], "noisy"))
    assert 429 in statuses and statuses.count(200) >= 400, "the shipped default quota did not throttle a noisy caller"


def test_the_hpa_scales_on_the_adapter_rules_metric_of_a_series_the_backend_exports(pod):
    # The HPA's custom metric is the adapter rule's output name, from a series the backend exports.
    hpa = one(k8s_objects()[1], "HorizontalPodAutoscaler")
    pods_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
    adapter = load_all(os.path.join(DEPLOY, "prometheus", "adapter-rules.yaml"))[0]["rules"]
    assert set(pods_metrics) <= {r["name"]["as"] for r in adapter}
    exported = http_get(f"http://{pod['metrics']}/metrics")[1].decode()
    for rule in adapter:
        series = rule["seriesQuery"].split("{")[0]
        assert f"\n{series}{{" in exported, f"the backend exports no {series}"


def test_the_kserve_runtime_arguments_serve_a_model_repository(tmp_path):
    runtime = load_all(os.path.join(DEPLOY, "kserve", "servingruntime.yaml"))[0]
    assert runtime["kind"] == "ClusterServingRuntime"
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert "onnx" in formats
    container = runtime["spec"]["containers"][0]
    assert container["name"] == "kserve-container", "KServe fills in the container named kserve-container"
    manifest_ports = [8080, 9000, int(runtime["spec"]["annotations"]["prometheus.kserve.io/port"])]
    ports = dict(zip(manifest_ports, free_ports(3)))
    place = Relocated(ports, {"/mnt/models": MODELS, "/tmp/cache": str(tmp_path)})
    log = tmp_path / "backend.log"
    proc = start(place.command(container), place.env(container), log)
    try:
        wait_ready(f"http://127.0.0.1:{ports[8080]}/v2/health/ready", proc, log)
        status, body = http_get(f"http://127.0.0.1:{ports[8080]}/v2/models/simple")
        assert status == 200 and json.loads(body)["name"] == "simple"
        status, body = http_get(f"http://127.0.0.1:{ports[manifest_ports[2]]}/metrics")
        assert status == 200 and b"nv_inference_request_success" in body
        import tritonclient.grpc as grpcclient
        assert grpcclient.InferenceServerClient(url=f"127.0.0.1:{ports[9000]}").is_server_ready()
    finally:
        stop([proc])


def test_the_kserve_runtime_takes_over_nothing_and_runs_unprivileged():
    runtime = load_all(os.path.join(DEPLOY, "kserve", "servingruntime.yaml"))[0]
    for f in runtime["spec"]["supportedModelFormats"]:
        assert f.get("autoSelect") is False, f"format {f['name']}: autoSelect would take over InferenceServices " \
            "that name no runtime"
    sc = runtime["spec"]["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["runAsNonRoot"] is True and sc["capabilities"]["drop"] == ["ALL"]


def test_inference_service_uses_the_runtime_and_a_supported_format():
    isvc = load_all(os.path.join(DEPLOY, "kserve", "inferenceservice.yaml"))[0]
    runtime = load_all(os.path.join(DEPLOY, "kserve", "servingruntime.yaml"))[0]
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["modelFormat"]["name"] in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]


def test_the_inference_service_with_the_gateway_sidecar_serves_through_the_gateway(tmp_path):
    objects = load_all(os.path.join(DEPLOY, "kserve", "inferenceservice-with-gateway.yaml"))
    routes = one(objects, "ConfigMap")
    predictor = one(objects, "InferenceService")["spec"]["predictor"]
    containers = {c["name"]: c for c in predictor["containers"]}
    backend, gateway = containers["kserve-container"], containers["transformer-container"]
    assert [p["containerPort"] for p in gateway["ports"]] == [8080], "KServe sends traffic to the port listed"
    assert "ports" not in backend, "only the gateway may list a port, or KServe would route around it"
    assert any(e["name"] == "STORAGE_URI" for e in backend["env"]), "the storage initializer fills /mnt/models"
    volume = next(v for v in predictor["volumes"] if v["name"] == gateway["volumeMounts"][0]["name"])
    assert volume["configMap"]["name"] == routes["metadata"]["name"]
    # The backend's REST and gRPC ports are on loopback, where the gateway's routes send requests.
    rules = yaml.safe_load(routes["data"]["routes.yaml"])
    endpoints = {u["name"]: u["endpoints"][0] for u in rules["upstreams"]}
    assert endpoints == {"rest": "127.0.0.1:8085", "grpc": "127.0.0.1:8086"}
    assert {"--http-address=127.0.0.1", "--http-port=8085", "--grpc-address=127.0.0.1",
            "--grpc-port=8086"} <= set(backend["args"])

    ports = dict(zip([8085, 8086, 8002, 8080, 9901], free_ports(5)))
    config = tmp_path / "etc"
    config.mkdir()
    text = routes["data"]["routes.yaml"]
    for manifest, local in ports.items():
        text = text.replace(f"127.0.0.1:{manifest}", f"127.0.0.1:{local}")
    (config / "routes.yaml").write_text(text)
    place = Relocated(ports, {"/mnt/models": MODELS, "/tmp/cache": str(tmp_path), "/etc/infergate": str(config)})
    blog, glog = tmp_path / "backend.log", tmp_path / "gateway.log"
    procs = [start(place.command(backend), place.env(backend), blog)]
    try:
        wait_ready(f"http://127.0.0.1:{ports[8002]}{backend['readinessProbe']['httpGet']['path']}", procs[0], blog)
        procs.append(start(place.command(gateway), place.env(gateway), glog))
        wait_ready(f"http://127.0.0.1:{ports[9901]}{gateway['readinessProbe']['httpGet']['path']}", procs[1], glog)
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]})
        req = urllib.request.Request(f"http://127.0.0.1:{ports[8080]}/v2/models/simple/versions/1/infer",
                                     data=body.encode(), headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["outputs"][0]["data"] == [2.0, 3.0, 4.0, 5.0], answer
        import tritonclient.grpc as grpcclient
        assert grpcclient.InferenceServerClient(url=f"127.0.0.1:{ports[8080]}").is_model_ready("simple")
        # The requests went through the gateway's rules: its metrics count them on their routes.
        status, metrics = http_get(f"http://127.0.0.1:{ports[9901]}/metrics")
        assert status == 200
        served = {}
        for line in metrics.decode().splitlines():
            m = re.match(r'infergate_gateway_requests_total\{route="(\w+)",.*response_code="200".*\} (\S+)$', line)
            if m:
                served[m.group(1)] = served.get(m.group(1), 0) + float(m.group(2))
        assert served.get("rest", 0) >= 1 and served.get("grpc", 0) >= 1, served
    finally:
        stop(reversed(procs))


def dockerfile_stages(path):
    """A Dockerfile's stages by name: {"from": base, "text": the stage's instructions}, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", open(path).read())
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
    stages, current = {}, None
    for line in text.splitlines():
        m = re.match(r"FROM (\S+) AS (\S+)", line)
        if m:
            base = re.sub(r"\$\{(\w+)\}", lambda a: args[a.group(1)], m.group(1))
            current = stages[m.group(2)] = {"from": base, "text": ""}
        elif current is not None and not line.startswith("#"):
            current["text"] += line + "\n"
    return stages


def lineage(stages, name):
    """The stage and the stages it is built FROM, nearest first."""
    while name in stages:
        yield stages[name]
        name = stages[name]["from"]


def manifest_images():
    """Every container image the overlays, the KServe runtime and the init container name, without tags."""
    images = set()
    for overlay in OVERLAYS:
        pod = one(k8s_objects(overlay)[1], "Deployment")["spec"]["template"]["spec"]
        images |= {c["image"].split(":")[0] for c in pod["containers"] + pod["initContainers"]}
    runtime = load_all(os.path.join(DEPLOY, "kserve", "servingruntime.yaml"))[0]
    images |= {c["image"].split(":")[0] for c in runtime["spec"]["containers"]}
    return images


DOCKERFILE = os.path.join(DEPLOY, "docker", "Dockerfile")


def test_make_image_builds_every_image_the_manifests_run():
    stages = dockerfile_stages(DOCKERFILE)
    script = open(os.path.join(ROOT, "scripts", "build-images.sh")).read()
    # build-images.sh tags each Dockerfile target as infergate-<target>, and the models image from its own file.
    built = {f"infergate-{t}" for t in re.search(r"for target in ([\w -]+); do", script).group(1).split()}
    built.add("infergate-models")
    assert "models.Dockerfile" in script
    assert manifest_images() <= built, f"images no build makes: {manifest_images() - built}"
    assert {b.removeprefix("infergate-") for b in built - {"infergate-models"}} <= stages.keys()


def test_each_image_builds_the_binary_its_containers_run_stripped_from_release_lto():
    stages = dockerfile_stages(DOCKERFILE)
    build = stages["build"]["text"]
    assert "--profile release-lto" in build, "the images ship the fat-LTO build the benchmarks measure"
    assert "CARGO_PROFILE_RELEASE_LTO_STRIP=symbols" in build, "binaries in the images are stripped"
    # The dependency layer: dependencies are built from the recipe before the sources are copied in.
    assert build.index("cargo chef cook") < build.index("COPY . .") < build.index("cargo build")
    runs = {}
    for overlay in OVERLAYS:
        pod = one(k8s_objects(overlay)[1], "Deployment")["spec"]["template"]["spec"]
        for c in pod["containers"]:
            runs[c["image"].split(":")[0]] = c["command"][0]
    runtime = load_all(os.path.join(DEPLOY, "kserve", "servingruntime.yaml"))[0]["spec"]["containers"][0]
    runs[runtime["image"].split(":")[0]] = runtime["command"][0]
    for image, command in runs.items():
        stage = image.removeprefix("infergate-")
        text = "".join(s["text"] for s in lineage(stages, stage))
        assert f"COPY --from=build /src/target/release-lto/{command} /usr/local/bin/{command}" in text, \
            f"image {image} does not hold {command} from the release-lto build"
        assert f"-p {command}" in build and f"--bin {command}" in build, f"the build does not build {command}"


def test_the_images_run_as_a_numeric_non_root_user():
    # Numeric, so the kubelet can check runAsNonRoot without a passwd file.
    for name, stage in dockerfile_stages(DOCKERFILE).items():
        if name in ("chef", "plan", "build"):
            continue
        users = re.findall(r"^USER (\S+)", stage["text"], re.M)
        assert users and users[-1] == "65532:65532", f"stage {name} ends as user {users[-1:] or 'root'}"
    models = open(os.path.join(DEPLOY, "docker", "models.Dockerfile")).read()
    assert re.findall(r"^USER (\S+)", models, re.M)[-1] == "65532:65532"


def test_the_gateway_image_holds_no_mesa_llvm_or_python_and_the_gpu_image_no_mesa():
    stages = dockerfile_stages(DOCKERFILE)
    gateway = list(lineage(stages, "gateway"))
    assert gateway[-1]["from"].startswith("gcr.io/distroless/cc"), "the gateway's base is distroless (glibc only)"
    text = "".join(s["text"] for s in gateway).lower()
    for heavy in ("mesa", "llvm", "python", "apt-get", "infergate-backend"):
        assert heavy not in text, f"the gateway image installs {heavy}"
    backend = "".join(s["text"] for s in lineage(stages, "backend"))
    assert "libvulkan1" in backend and "mesa" not in backend.lower()
    assert "mesa-vulkan-drivers" in stages["backend-mesa"]["text"] and stages["backend-mesa"]["from"] == "backend"


def test_the_images_run_with_a_read_only_root_filesystem():
    # Every container the overlays run says so, and the only paths they write are volumes.
    for overlay in OVERLAYS:
        pod = one(k8s_objects(overlay)[1], "Deployment")["spec"]["template"]["spec"]
        for c in pod["containers"] + pod["initContainers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, f"{overlay}: {c['name']}"
            assert "exec" not in c.get("lifecycle", {}).get("preStop", {}) or c["name"] == "backend", \
                f"{c['name']}: the distroless gateway image has no shell or sleep for an exec hook"
        backend = next(c for c in pod["containers"] if c["name"] == "backend")
        env = {e["name"]: e["value"] for e in backend["env"]}
        assert env["XDG_CACHE_HOME"] in {m["mountPath"] for m in backend["volumeMounts"]}, "the cache is no volume"


def test_the_build_context_leaves_out_build_outputs_and_git():
    ignored = {line.strip() for line in open(os.path.join(ROOT, ".dockerignore")) if not line.startswith("#")}
    assert {"target/", "**/target/", ".git/"} <= ignored
