"""Write tiny graphs of onnxruntime's com.microsoft operators, with inputs and onnxruntime's outputs, in the
ONNX node-test layout (model.onnx, test_data_set_0/input_N.pb, output_N.pb) under the folder given.

Run by tests/contrib_ops.rs with the project venv (onnx, onnxruntime). BiasAdd has no CPU kernel in
onnxruntime (CUDA only), so its expected output is numpy's x + bias + skip; MultiHeadAttention with a key
padding mask is checked against numpy too (see the case).
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(23)


def case(out_dir, name, op, inputs, outputs, attrs=None, expected=None):
    """One single-node graph; `inputs` is [(name, array)], `outputs` the node's output names ('' = unused)."""
    value_infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs if n]
    node = helper.make_node(op, [n for n, _ in inputs], outputs, domain="com.microsoft", **(attrs or {}))
    graph = helper.make_graph([node], name, value_infos, outs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=9,
    )
    if expected is None:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = sess.run(None, dict(inputs))
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, (n, a) in enumerate(inputs):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for i, a in enumerate(expected):
        with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(a, dtype=np.float32)).SerializeToString())


def f32(*shape, scale=2.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def main():
    out = sys.argv[1]
    x, bias, skip = f32(2, 3, 16), f32(16), f32(2, 3, 16)
    gamma, beta = f32(16, scale=1.0), f32(16, scale=0.5)
    case(out, "fast_gelu", "FastGelu", [("x", x), ("bias", bias)], ["y"])
    case(out, "fast_gelu_no_bias", "FastGelu", [("x", x)], ["y"])
    case(out, "bias_gelu", "BiasGelu", [("x", x), ("bias", bias)], ["y"])
    case(out, "gelu", "Gelu", [("x", x)], ["y"])
    case(out, "quick_gelu", "QuickGelu", [("x", x)], ["y"], {"alpha": 1.5})
    case(out, "bias_add", "BiasAdd", [("x", x), ("bias", bias), ("skip", skip)], ["y"], expected=[x + bias + skip])
    case(
        out,
        "skip_layer_norm",
        "SkipLayerNormalization",
        [("x", x), ("skip", skip), ("gamma", gamma), ("beta", beta), ("bias", bias)],
        ["y", "", "", "sum"],
        {"epsilon": 1e-5},
    )
    case(
        out,
        "skip_layer_norm_no_beta_no_bias",
        "SkipLayerNormalization",
        [("x", x), ("skip", skip), ("gamma", gamma)],
        ["y"],
    )
    case(
        out,
        "skip_simplified_layer_norm",
        "SkipSimplifiedLayerNormalization",
        [("x", x), ("skip", skip), ("gamma", gamma), ("bias", bias)],
        ["y", "", "", "sum"],
        {"epsilon": 1e-6},
    )
    # Attention: packed projection, 2 heads, with onnxruntime BERT fusion's [batch] valid lengths and a 0/1 mask
    seq = f32(2, 5, 16, scale=1.0)
    w, b = f32(16, 48, scale=0.3), f32(48, scale=0.1)
    case(out, "attention", "Attention", [("x", seq), ("w", w), ("b", b)], ["y"], {"num_heads": 2})
    lengths = np.array([5, 3], dtype=np.int32)
    case(out, "attention_lengths", "Attention", [("x", seq), ("w", w), ("b", b), ("mask", lengths)], ["y"],
         {"num_heads": 2})
    keys = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.int32)
    case(out, "attention_mask", "Attention", [("x", seq), ("w", w), ("b", b), ("mask", keys)], ["y"],
         {"num_heads": 4, "scale": 0.3})
    # MultiHeadAttention: separate query/key/value of different lengths
    q, k, v = f32(2, 4, 16, scale=1.0), f32(2, 6, 16, scale=1.0), f32(2, 6, 16, scale=1.0)
    case(out, "multi_head_attention", "MultiHeadAttention", [("q", q), ("k", k), ("v", v)], ["y"], {"num_heads": 4})
    mha_bias = f32(48, scale=0.1)
    case(out, "multi_head_attention_bias", "MultiHeadAttention",
         [("q", q), ("k", k), ("v", v), ("bias", mha_bias)], ["y"], {"num_heads": 2})
    # With a [batch, kv_len] key padding mask, onnxruntime 1.20's CPU kernel disagrees with itself (a row
    # of all ones in a batch of two changes the answer; zeros in a batch of one are ignored), so the
    # expected output is numpy's, written from the operator's definition.
    pad = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=np.int32)
    case(out, "multi_head_attention_bias_mask", "MultiHeadAttention",
         [("q", q), ("k", k), ("v", v), ("bias", mha_bias), ("pad", pad)], ["y"], {"num_heads": 2},
         expected=[multi_head_attention(q, k, v, mha_bias, pad, num_heads=2)])


def multi_head_attention(q, k, v, bias, key_padding_mask, num_heads):
    """softmax(q·kᵀ/√head_size + mask) · v per head, the projections' bias added first; masked keys
    (0 in the mask) get onnxruntime's mask_filter_value, -10000."""
    hidden = q.shape[-1]
    q, k, v = q + bias[:hidden], k + bias[hidden:2 * hidden], v + bias[2 * hidden:]
    batch, q_len, _ = q.shape
    kv_len, head = k.shape[1], hidden // num_heads

    def heads(t, n):
        return t.reshape(batch, n, num_heads, head).transpose(0, 2, 1, 3)

    scores = heads(q, q_len) @ heads(k, kv_len).transpose(0, 1, 3, 2) / np.sqrt(head)
    scores = scores + np.where(key_padding_mask[:, None, None, :] == 1, 0.0, -10000.0)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ heads(v, kv_len)).transpose(0, 2, 1, 3).reshape(batch, q_len, hidden).astype(np.float32)


if __name__ == "__main__":
    main()
