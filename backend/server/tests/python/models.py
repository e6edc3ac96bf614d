"""Test model repositories, built at test time: ONNX models for infergate and Triton Python-backend
models with the same names and signatures for the real Triton peer (the differential test)."""

import os
import textwrap

# Every model: name -> (max_batch_size, inputs, outputs, op). Dims exclude the batch dimension.
# op is "add_sub" (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) or "identity".
MODELS = {
    "add_sub": dict(
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [16]), ("INPUT1", "FP32", [16])],
        outputs=[("OUTPUT0", "FP32", [16]), ("OUTPUT1", "FP32", [16])],
        op="add_sub",
    ),
    "add_sub_int32": dict(
        max_batch_size=8,
        inputs=[("INPUT0", "INT32", [16]), ("INPUT1", "INT32", [16])],
        outputs=[("OUTPUT0", "INT32", [16]), ("OUTPUT1", "INT32", [16])],
        op="add_sub",
    ),
    "identity_bytes": dict(
        max_batch_size=8,
        inputs=[("INPUT0", "BYTES", [1])],
        outputs=[("OUTPUT0", "BYTES", [1])],
        op="identity",
    ),
    "identity_mixed": dict(
        max_batch_size=0,
        inputs=[("INPUT0", "BOOL", [3]), ("INPUT1", "INT64", [2]), ("INPUT2", "UINT8", [2]), ("INPUT3", "FP64", [2])],
        outputs=[("OUTPUT0", "BOOL", [3]), ("OUTPUT1", "INT64", [2]), ("OUTPUT2", "UINT8", [2]), ("OUTPUT3", "FP64", [2])],
        op="identity",
    ),
    "identity_fp32": dict(
        max_batch_size=0,
        inputs=[("INPUT0", "FP32", [-1])],
        outputs=[("OUTPUT0", "FP32", [-1])],
        op="identity",
    ),
}

_CONFIG_TYPE = {"FP32": "TYPE_FP32", "INT32": "TYPE_INT32", "INT64": "TYPE_INT64", "BYTES": "TYPE_STRING",
                "BOOL": "TYPE_BOOL", "FP64": "TYPE_FP64", "UINT8": "TYPE_UINT8"}


def _config(name, spec, backend_line, dynamic_batching):
    def io(items):
        return ",\n".join(
            f'  {{ name: "{n}", data_type: {_CONFIG_TYPE[t]}, dims: [ {", ".join(map(str, d))} ] }}' for n, t, d in items
        )

    text = f'name: "{name}"\n{backend_line}\nmax_batch_size: {spec["max_batch_size"]}\n'
    text += f"input [\n{io(spec['inputs'])}\n]\noutput [\n{io(spec['outputs'])}\n]\n"
    text += "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
    if dynamic_batching and spec["max_batch_size"] > 0:
        text += "dynamic_batching { }\n"
    return text


def _onnx_model(spec):
    import onnx
    from onnx import TensorProto, helper

    elem = {"FP32": TensorProto.FLOAT, "INT32": TensorProto.INT32, "INT64": TensorProto.INT64,
            "BYTES": TensorProto.STRING, "BOOL": TensorProto.BOOL, "FP64": TensorProto.DOUBLE,
            "UINT8": TensorProto.UINT8}
    batch = ["batch"] if spec["max_batch_size"] > 0 else []

    def vi(n, t, d):
        return helper.make_tensor_value_info(n, elem[t], batch + [x if x >= 0 else f"{n}_d{i}" for i, x in enumerate(d)])

    if spec["op"] == "add_sub":
        nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                 helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    else:
        nodes = [helper.make_node("Identity", [i[0]], [o[0]]) for i, o in zip(spec["inputs"], spec["outputs"])]
    graph = helper.make_graph(nodes, "g", [vi(*i) for i in spec["inputs"]], [vi(*o) for o in spec["outputs"]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_onnx_repository(root, names=None):
    """infergate's repository: config.pbtxt + 1/model.onnx per model."""
    for name, spec in MODELS.items():
        if names is not None and name not in names:
            continue
        d = os.path.join(root, name)
        os.makedirs(os.path.join(d, "1"), exist_ok=True)
        with open(os.path.join(d, "config.pbtxt"), "w") as f:
            f.write(_config(name, spec, 'platform: "onnxruntime_onnx"', dynamic_batching=True))
        with open(os.path.join(d, "1", "model.onnx"), "wb") as f:
            f.write(_onnx_model(spec))
    return root


_PY_MODEL = textwrap.dedent('''
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            cfg = json.loads(args["model_config"])
            self.inputs = [i["name"] for i in cfg["input"]]
            self.outputs = [(o["name"], pb_utils.triton_string_to_numpy(o["data_type"])) for o in cfg["output"]]

        def execute(self, requests):
            responses = []
            for request in requests:
                xs = [pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.inputs]
                if OP == "add_sub":
                    values = [xs[0] + xs[1], xs[0] - xs[1]]
                else:
                    values = xs
                outs = [pb_utils.Tensor(n, v.astype(t)) for (n, t), v in zip(self.outputs, values)]
                responses.append(pb_utils.InferenceResponse(output_tensors=outs))
            return responses
''')


def write_python_backend_repository(root, names=None):
    """The same models for the Triton peer, as Python-backend models (no ONNX Runtime ships there)."""
    for name, spec in MODELS.items():
        if names is not None and name not in names:
            continue
        d = os.path.join(root, name)
        os.makedirs(os.path.join(d, "1"), exist_ok=True)
        with open(os.path.join(d, "config.pbtxt"), "w") as f:
            f.write(_config(name, spec, 'backend: "python"', dynamic_batching=True))
        with open(os.path.join(d, "1", "model.py"), "w") as f:
            f.write(f'OP = "{spec["op"]}"\n' + _PY_MODEL)
    return root
