"""Differential test: the same requests to infergate and to a real Triton 2.51 serving models with the
same names and signatures (Python backend), comparing status codes, metadata, configs and responses.

Where infergate answers differently on purpose, KNOWN_DIFFERENCES says so and why; both sides' codes
are asserted, so a change on either side shows up here (docs/protocol.md lists the same table)."""

import json
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

import models


def rest(server, method, path, body=None, headers=None):
    req = urllib.request.Request(f"http://{server.http}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def sample_inputs(name):
    """Deterministic inputs for a model, batch 2 where it batches."""
    spec = models.MODELS[name]
    rng = np.random.default_rng(7)
    out = {}
    for n, t, dims in spec["inputs"]:
        shape = ([2] if spec["max_batch_size"] > 0 else []) + [d if d >= 0 else 5 for d in dims]
        if t == "FP32":
            a = rng.standard_normal(shape).astype(np.float32)
        elif t == "FP64":
            a = rng.standard_normal(shape)
        elif t == "INT32":
            a = rng.integers(-1000, 1000, shape, dtype=np.int32)
        elif t == "INT64":
            a = rng.integers(-(2**40), 2**40, shape, dtype=np.int64)
        elif t == "UINT8":
            a = rng.integers(0, 256, shape, dtype=np.uint8)
        elif t == "BOOL":
            a = rng.integers(0, 2, shape).astype(bool)
        else:  # BYTES
            a = np.array([f"s{i}-ü".encode() for i in range(int(np.prod(shape)))], dtype=np.object_).reshape(shape)
        out[n] = a
    return out


def json_infer_body(inputs):
    items = []
    for n, a in inputs.items():
        data = [x.decode() for x in a.reshape(-1)] if a.dtype == np.object_ else a.reshape(-1).tolist()
        items.append({"name": n, "datatype": np_to_triton_dtype(a.dtype), "shape": list(a.shape), "data": data})
    return json.dumps({"id": "diff", "inputs": items}).encode()


def same_outputs(ours, theirs):
    assert [o["name"] for o in ours] == [o["name"] for o in theirs]
    for a, b in zip(ours, theirs):
        assert (a["datatype"], a["shape"]) == (b["datatype"], b["shape"]), a["name"]
        if a["datatype"] in ("FP32", "FP64"):
            np.testing.assert_allclose(a["data"], b["data"], rtol=1e-6, err_msg=a["name"])
        else:
            assert a["data"] == b["data"], a["name"]


def test_health_and_server_metadata(backend, triton):
    for path in ("/v2/health/live", "/v2/health/ready"):
        assert rest(backend, "GET", path)[0] == rest(triton, "GET", path)[0] == 200
    ours, theirs = (json.loads(rest(s, "GET", "/v2")[1]) for s in (backend, triton))
    assert set(ours) == set(theirs) == {"name", "version", "extensions"}
    # Every extension we advertise is one Triton has too (we advertise only what works).
    assert set(ours["extensions"]) <= set(theirs["extensions"])


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_model_metadata_and_config_match(backend, triton, name):
    ours, theirs = (json.loads(rest(s, "GET", f"/v2/models/{name}")[1]) for s in (backend, triton))
    for key in ("name", "versions", "inputs", "outputs"):
        assert ours[key] == theirs[key], key
    assert ours["platform"] == "onnxruntime_onnx" and theirs["platform"] == "python"
    ours, theirs = (json.loads(rest(s, "GET", f"/v2/models/{name}/config")[1]) for s in (backend, triton))
    for key in ("name", "max_batch_size"):
        assert ours[key] == theirs[key], key
    for io in ("input", "output"):
        pick = [{k: t[k] for k in ("name", "data_type", "dims")} for t in ours[io]]
        assert pick == [{k: t[k] for k in ("name", "data_type", "dims")} for t in theirs[io]], io
    assert ("dynamic_batching" in ours) == ("dynamic_batching" in theirs)


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_json_inference_matches(backend, triton, name):
    body = json_infer_body(sample_inputs(name))
    (s1, b1), (s2, b2) = (rest(s, "POST", f"/v2/models/{name}/infer", body) for s in (backend, triton))
    assert (s1, s2) == (200, 200), (b1[:300], b2[:300])
    ours, theirs = json.loads(b1), json.loads(b2)
    assert (ours["model_name"], ours["model_version"], ours["id"]) == (
        theirs["model_name"], theirs["model_version"], theirs["id"])
    same_outputs(ours["outputs"], theirs["outputs"])


def http_infer(server, name, inputs, binary):
    c = httpclient.InferenceServerClient(server.http)
    try:
        ins = []
        for n, a in inputs.items():
            i = httpclient.InferInput(n, list(a.shape), np_to_triton_dtype(a.dtype))
            i.set_data_from_numpy(a, binary_data=binary)
            ins.append(i)
        outs = [httpclient.InferRequestedOutput(o[0], binary_data=binary) for o in models.MODELS[name]["outputs"]]
        r = c.infer(name, ins, outputs=outs)
        return {o[0]: r.as_numpy(o[0]) for o in models.MODELS[name]["outputs"]}
    finally:
        c.close()


def grpc_infer(server, name, inputs):
    c = grpcclient.InferenceServerClient(server.grpc)
    try:
        ins = []
        for n, a in inputs.items():
            i = grpcclient.InferInput(n, list(a.shape), np_to_triton_dtype(a.dtype))
            i.set_data_from_numpy(a)
            ins.append(i)
        r = c.infer(name, ins)
        return {o[0]: r.as_numpy(o[0]) for o in models.MODELS[name]["outputs"]}
    finally:
        c.close()


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_binary_and_grpc_inference_match(backend, triton, name):
    inputs = sample_inputs(name)
    for call in (lambda s: http_infer(s, name, inputs, True), lambda s: grpc_infer(s, name, inputs)):
        ours, theirs = call(backend), call(triton)
        assert ours.keys() == theirs.keys()
        for k in ours:
            assert ours[k].dtype == theirs[k].dtype and ours[k].shape == theirs[k].shape, k
            np.testing.assert_array_equal(ours[k], theirs[k], err_msg=k)


def add_sub_body(shape0=(1, 16), dtype0="FP32", n0=None, outputs=None, extra=None):
    inputs = [{"name": "INPUT0", "datatype": dtype0, "shape": list(shape0), "data": [1] * (n0 or int(np.prod(shape0)))},
              {"name": "INPUT1", "datatype": "FP32", "shape": list(shape0), "data": [1] * int(np.prod(shape0))}]
    if extra:
        inputs.append(extra)
    body = {"inputs": inputs}
    if outputs:
        body["outputs"] = [{"name": o} for o in outputs]
    return json.dumps(body).encode()


# (case, method, path, body): infergate and Triton answer with the same status.
SAME_STATUS = [
    ("unknown model metadata", "GET", "/v2/models/no_such_model", None, 404),
    ("unknown model infer", "POST", "/v2/models/no_such_model/infer", add_sub_body(), 404),
    ("missing input", "POST", "/v2/models/add_sub/infer",
     json.dumps({"inputs": [json.loads(add_sub_body())["inputs"][0]]}).encode(), 400),
    ("extra input", "POST", "/v2/models/add_sub/infer",
     add_sub_body(extra={"name": "EXTRA", "datatype": "FP32", "shape": [1], "data": [1]}), 400),
    ("wrong datatype", "POST", "/v2/models/add_sub/infer", add_sub_body(dtype0="INT32"), 400),
    ("wrong shape", "POST", "/v2/models/add_sub/infer", add_sub_body(shape0=(1, 15)), 400),
    ("batch over max_batch_size", "POST", "/v2/models/add_sub/infer", add_sub_body(shape0=(9, 16)), 400),
    ("unknown output", "POST", "/v2/models/add_sub/infer", add_sub_body(outputs=["NOPE"]), 400),
    ("FP16 as JSON", "POST", "/v2/models/add_sub/infer",
     b'{"inputs":[{"name":"INPUT0","datatype":"FP16","shape":[1,16],"data":[' + b",".join([b"1"] * 16) + b"]}]}", 400),
    ("wrong method", "DELETE", "/v2", None, 405),
    ("unknown path", "GET", "/v2/nothing/here", None, 404),
]


@pytest.mark.parametrize("case,method,path,body,status", SAME_STATUS, ids=[c[0] for c in SAME_STATUS])
def test_same_status_as_triton(backend, triton, case, method, path, body, status):
    (s1, b1), (s2, b2) = (rest(s, method, path, body) for s in (backend, triton))
    assert s2 == status, f"Triton changed: {s2} {b2[:200]}"
    assert s1 == status, f"infergate: {s1} {b1[:300]}"
    assert json.loads(b1)["error"], "errors carry a message"


# (case, method, path, body, infergate's status, Triton's status, why we differ).
KNOWN_DIFFERENCES = [
    ("malformed JSON", "POST", "/v2/models/add_sub/infer", b'{"inputs": [', 400, 500,
     "a client's malformed body is a client error (4xx), not INTERNAL"),
    ("data count differs from shape", "POST", "/v2/models/add_sub/infer", add_sub_body(n0=15), 400, 500,
     "likewise: Triton reports INTERNAL for a request that does not match its own shape"),
    ("model not ready", "GET", "/v2/models/no_such_model/ready", None, 503, 400,
     "503 lets the kserve SDK's is_model_ready return False instead of raising; tritonclient checks for 200 only"),
    ("non-numeric version", "GET", "/v2/models/add_sub/versions/latest", None, 400, 404,
     "Triton's route does not match and says only 'Not Found'; we name the bad version"),
]


@pytest.mark.parametrize("case,method,path,body,ours,theirs,why", KNOWN_DIFFERENCES,
                         ids=[c[0] for c in KNOWN_DIFFERENCES])
def test_known_differences(backend, triton, case, method, path, body, ours, theirs, why):
    (s1, b1), (s2, b2) = (rest(s, method, path, body) for s in (backend, triton))
    assert s2 == theirs, f"Triton changed ({why}): {s2} {b2[:200]}"
    assert s1 == ours, f"infergate ({why}): {s1} {b1[:300]}"


GRPC_SAME_CODE = [
    ("unknown model", "no_such_model", {"INPUT0": np.ones((1, 16), np.float32)}, "NOT_FOUND"),
    ("missing input", "add_sub", {"INPUT0": np.ones((1, 16), np.float32)}, "INVALID_ARGUMENT"),
    ("wrong shape", "add_sub", {"INPUT0": np.ones((1, 4), np.float32), "INPUT1": np.ones((1, 4), np.float32)},
     "INVALID_ARGUMENT"),
    ("wrong datatype", "add_sub", {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.float32)},
     "INVALID_ARGUMENT"),
]


@pytest.mark.parametrize("case,model,inputs,code", GRPC_SAME_CODE, ids=[c[0] for c in GRPC_SAME_CODE])
def test_same_grpc_codes_as_triton(backend, triton, case, model, inputs, code):
    for server in (triton, backend):
        with pytest.raises(InferenceServerException) as e:
            grpc_infer_raw(server, model, inputs)
        assert e.value.status() == f"StatusCode.{code}", f"{server.grpc}: {e.value}"


def grpc_infer_raw(server, name, inputs):
    c = grpcclient.InferenceServerClient(server.grpc)
    try:
        ins = []
        for n, a in inputs.items():
            i = grpcclient.InferInput(n, list(a.shape), np_to_triton_dtype(a.dtype))
            i.set_data_from_numpy(a)
            ins.append(i)
        return c.infer(name, ins)
    finally:
        c.close()


def test_statistics_and_index_have_the_same_shape(backend, triton):
    body = json_infer_body(sample_inputs("add_sub"))
    for s in (backend, triton):
        assert rest(s, "POST", "/v2/models/add_sub/infer", body)[0] == 200
    ours, theirs = (json.loads(rest(s, "GET", "/v2/models/add_sub/stats")[1])["model_stats"][0] for s in (backend, triton))
    assert set(ours) == set(theirs)
    assert set(ours["inference_stats"]) == set(theirs["inference_stats"])
    assert ours["inference_count"] >= 2 and theirs["inference_count"] >= 2
    ours, theirs = (json.loads(rest(s, "POST", "/v2/repository/index", b"")[1]) for s in (backend, triton))
    pick = lambda index: sorted((m["name"], m["version"], m["state"]) for m in index if m["name"] in models.MODELS)  # noqa: E731
    assert pick(ours) == pick(theirs)
