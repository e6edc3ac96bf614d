"""The Triton peer's model: one onnxruntime session per model instance that runs each dynamic batch at once.

Written by infergate-load beside every model.onnx of the peer's repository (loadtests/src/peer/). Triton's
Python backend hands execute() the requests of one batch; they are concatenated along axis 0, run through the
session once and split back, as Triton's own onnxruntime backend would do. Intra-op threads: one per core
the process may run on, as infergate's CPU executor uses by default.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.outputs = [o["name"] for o in config["output"]]
        options = ort.SessionOptions()
        options.intra_op_num_threads = len(os.sched_getaffinity(0))
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def execute(self, requests):
        parts = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
        values = self.session.run(self.outputs, {self.input: np.concatenate(parts)})
        responses, start = [], 0
        for part in parts:
            end = start + part.shape[0]
            tensors = [pb_utils.Tensor(n, np.ascontiguousarray(v[start:end])) for n, v in zip(self.outputs, values)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start = end
        return responses
