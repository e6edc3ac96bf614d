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


def case(out_dir, name, op, inputs, outputs, attrs=None, expected=None, domain="com.microsoft", out_types=None,
         initializers=()):
    """One single-node graph; `inputs` is [(name, array)] (an empty name and None leave an optional input
    out), `outputs` the node's output names ('' = unused), `out_types` their element types (FLOAT when not
    given). onnxruntime defines some of its operators (SimplifiedLayerNormalization) in the default domain,
    hence `domain`. The inputs named in `initializers` are model weights (initializers), not graph inputs."""
    given = [(n, a) for n, a in inputs if n and n not in initializers]
    model = single_node(name, op, inputs, outputs, attrs, domain, out_types, initializers)
    if expected is None:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = sess.run(None, dict(given))
    d = os.path.join(out_dir, name)
    data = os.path.join(d, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    for i, (n, a) in enumerate(given):
        with open(os.path.join(data, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for i, a in enumerate(expected):
        a = np.asarray(a)
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        with open(os.path.join(data, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())


def single_node(name, op, inputs, outputs, attrs=None, domain="com.microsoft", out_types=None, initializers=()):
    """The model of one `op` node, as `case` describes it."""
    given = [(n, a) for n, a in inputs if n and n not in initializers]
    value_infos = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in given
    ]
    weights = [numpy_helper.from_array(a, n) for n, a in inputs if n in initializers]
    out_types = out_types or {}
    outs = [helper.make_tensor_value_info(n, out_types.get(n, TensorProto.FLOAT), None) for n in outputs if n]
    node = helper.make_node(op, [n for n, _ in inputs], outputs, domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], name, value_infos, outs, weights)
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=9,
    )


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

    embed_layer_norm(out)
    simplified_layer_norm(out)
    fused_matmul(out)
    rotary_embedding(out)
    group_query_attention(out)
    fused_conv(out)
    quantized(out)
    simple_rnn(out)
    matmul_n_bits(out)
    dynamic_quantize_lstm(out)


def embed_layer_norm(out):
    """EmbedLayerNormalization as onnxruntime's BERT fusion writes it (INT32 ids), with and without
    segments, mask and position_ids; mask_index is INT32."""
    ids = rng.integers(0, 20, (2, 5)).astype(np.int32)
    segments = rng.integers(0, 2, (2, 5)).astype(np.int32)
    word, pos, seg = f32(20, 16, scale=0.5), f32(8, 16, scale=0.5), f32(2, 16, scale=0.5)
    gamma, beta = f32(16, scale=1.0), f32(16, scale=0.5)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=np.int32)
    int32 = {"mask_index": TensorProto.INT32}
    case(out, "embed_layer_norm", "EmbedLayerNormalization",
         [("ids", ids), ("segments", segments), ("word", word), ("pos", pos), ("seg", seg), ("gamma", gamma),
          ("beta", beta), ("mask", mask)],
         ["y", "mask_index", "sum"], {"epsilon": 1e-5}, out_types=int32)
    case(out, "embed_layer_norm_no_segment_no_mask", "EmbedLayerNormalization",
         [("ids", ids), ("", None), ("word", word), ("pos", pos), ("", None), ("gamma", gamma), ("beta", beta)],
         ["y", "mask_index"], out_types=int32)
    position_ids = np.array([[3, 2, 1, 0, 7], [0, 1, 2, 3, 4]], dtype=np.int32)
    case(out, "embed_layer_norm_position_ids", "EmbedLayerNormalization",
         [("ids", ids), ("segments", segments), ("word", word), ("pos", pos), ("seg", seg), ("gamma", gamma),
          ("beta", beta), ("mask", mask), ("position_ids", position_ids)],
         ["y", "mask_index"], {"epsilon": 1e-5}, out_types=int32)


def simplified_layer_norm(out):
    """SimplifiedLayerNormalization (RMS norm), which onnxruntime defines in the default domain."""
    x = f32(2, 3, 16)
    case(out, "simplified_layer_norm", "SimplifiedLayerNormalization", [("x", x), ("scale", f32(16, scale=1.0))],
         ["y", "inv_std_var"], {"epsilon": 1e-6}, domain="")
    case(out, "simplified_layer_norm_axis1", "SimplifiedLayerNormalization",
         [("x", x), ("scale", f32(3, 16, scale=1.0))], ["y"], {"axis": 1}, domain="")


def fused_matmul(out):
    """FusedMatMul: alpha, transA/transB on the last two dims, transBatchA/transBatchB."""
    a, b = f32(2, 3, 4, 5, scale=1.0), f32(2, 3, 5, 6, scale=1.0)
    case(out, "fused_matmul", "FusedMatMul", [("a", a), ("b", b)], ["y"], {"alpha": 0.5})
    case(out, "fused_matmul_trans", "FusedMatMul",
         [("a", f32(2, 3, 5, 4, scale=1.0)), ("b", f32(2, 3, 6, 5, scale=1.0))], ["y"],
         {"transA": 1, "transB": 1, "alpha": 1.25})
    case(out, "fused_matmul_2d_trans_a", "FusedMatMul", [("a", f32(5, 4, scale=1.0)), ("b", f32(5, 6, scale=1.0))],
         ["y"], {"transA": 1})
    # transBatch: A [4, 2, 3, 5] is read as [2, 3, 4, 5]; B [6, 2, 3, 5] as [2, 3, 6, 5], then transposed
    case(out, "fused_matmul_trans_batch", "FusedMatMul",
         [("a", f32(4, 2, 3, 5, scale=1.0)), ("b", f32(6, 2, 3, 5, scale=1.0))], ["y"],
         {"transBatchA": 1, "transBatchB": 1, "transB": 1})
    case(out, "fused_matmul_trans_batch_a_trans_a", "FusedMatMul",
         [("a", f32(5, 2, 3, 4, scale=1.0)), ("b", f32(2, 3, 5, 6, scale=1.0))], ["y"],
         {"transBatchA": 1, "transA": 1, "alpha": 2.0})


def fused_conv(out):
    """FusedConv: each activation onnxruntime accepts, with its activation_params; the Z sum input, with
    and without a bias; a strided, padded, grouped 1-D case."""
    x, w, b = f32(2, 4, 7, 6, scale=1.0), f32(6, 4, 3, 3, scale=0.5), f32(6, scale=0.5)
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    for act, params in [("Relu", None), ("Tanh", None), ("Sigmoid", None), ("LeakyRelu", [0.1]),
                        ("Clip", [-0.5, 1.5]), ("HardSigmoid", [0.3, 0.4])]:
        attrs = dict(conv, activation=act)
        if params:
            attrs["activation_params"] = params
        case(out, f"fused_conv_{act.lower()}", "FusedConv", [("x", x), ("w", w), ("b", b)], ["y"], attrs)
    z = f32(2, 6, 7, 6, scale=1.0)
    case(out, "fused_conv_sum", "FusedConv", [("x", x), ("w", w), ("b", b), ("z", z)], ["y"],
         dict(conv, activation="Relu"))
    case(out, "fused_conv_sum_no_bias", "FusedConv", [("x", x), ("w", w), ("", None), ("z", z)], ["y"],
         dict(conv, activation="Relu"))
    case(out, "fused_conv_no_activation", "FusedConv", [("x", x), ("w", w), ("b", b)], ["y"], conv)
    case(out, "fused_conv_1d_grouped", "FusedConv",
         [("x", f32(1, 4, 9, scale=1.0)), ("w", f32(4, 2, 3, scale=0.5))], ["y"],
         {"kernel_shape": [3], "strides": [2], "pads": [1, 0], "group": 2, "activation": "LeakyRelu",
          "activation_params": [0.2]})


def quantized(out):
    """QLinearAdd and QLinearMul (UINT8 and INT8, broadcasting, zero points left out) and
    DynamicQuantizeMatMul (INT8 and UINT8 B, per-tensor and per-column scales, bias)."""
    def q(dtype, *shape):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)

    def s(v):
        return np.array(v, dtype=np.float32)

    for op in ["QLinearAdd", "QLinearMul"]:
        base = op[len("QLinear"):].lower()
        for dtype, tag, zeros in [(np.uint8, "u8", (128, 120, 131)), (np.int8, "i8", (-3, 5, 2))]:
            za, zb, zc = (np.array(z, dtype=dtype) for z in zeros)
            sc = s(0.05) if op == "QLinearAdd" else s(0.6)
            case(out, f"qlinear_{base}_{tag}", op,
                 [("a", q(dtype, 2, 3, 8)), ("a_scale", s(0.02)), ("a_zero", za), ("b", q(dtype, 3, 8)),
                  ("b_scale", s(0.03)), ("b_zero", zb), ("c_scale", sc), ("c_zero", zc)],
                 ["c"], out_types={"c": helper.np_dtype_to_tensor_dtype(np.dtype(dtype))})
        # onnxruntime 1.20's type inference refuses a left-out A or B zero point, so only C's is left out
        case(out, f"qlinear_{base}_no_c_zero_point", op,
             [("a", q(np.uint8, 2, 1, 8)), ("a_scale", s(0.02)), ("a_zero", np.array(3, dtype=np.uint8)),
              ("b", q(np.uint8, 2, 5, 1)), ("b_scale", s(0.03)), ("b_zero", np.array(250, dtype=np.uint8)),
              ("c_scale", s(0.05) if op == "QLinearAdd" else s(6.0))],
             ["c"], out_types={"c": TensorProto.UINT8})
    a = f32(2, 3, 16, scale=1.0)
    case(out, "dynamic_quantize_matmul_i8", "DynamicQuantizeMatMul",
         [("a", a), ("b", q(np.int8, 16, 5)), ("b_scale", s(0.01)), ("b_zero", np.array(0, dtype=np.int8))],
         ["y"])
    case(out, "dynamic_quantize_matmul_u8_per_column_bias", "DynamicQuantizeMatMul",
         [("a", a), ("b", q(np.uint8, 16, 5)), ("b_scale", rng.uniform(0.005, 0.02, 5).astype(np.float32)),
          ("b_zero", rng.integers(100, 150, 5).astype(np.uint8)), ("bias", f32(5))],
         ["y"])
    case(out, "dynamic_quantize_matmul_no_zero_point", "DynamicQuantizeMatMul",
         [("a", f32(4, 16, scale=1.0)), ("b", q(np.int8, 16, 3)), ("b_scale", s(0.02))], ["y"])


def matmul_n_bits(out):
    """MatMulNBits as onnxruntime's 4-bit quantizer writes it: constant B, scales and zero points; block sizes
    16 and 32, K a multiple of the block size and not, packed UINT8 and float zero points or none (8), a bias,
    batch dims on A. onnxruntime 1.20.1's CPU kernel runs only 4-bit weights, so the 8-bit case is checked
    against numpy, written from the operator's definition."""

    def quantized(k, n, bits, block_size, zero_points):
        """B, scales, zero points (or None) and the float weight [K, N] they stand for."""
        blocks = -(-k // block_size)
        codes = rng.integers(0, 2 ** bits, (n, blocks * block_size)).astype(np.uint8)
        scales = rng.uniform(0.01, 0.1, (n, blocks)).astype(np.float32)
        if bits == 4:
            b = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8).reshape(n, blocks, block_size // 2)
        else:
            b = codes.reshape(n, blocks, block_size)
        zeros = np.full((n, blocks), 2 ** (bits - 1), dtype=np.float32)
        zp = None
        if zero_points == "uint8":
            z = rng.integers(0, 2 ** bits, (n, blocks)).astype(np.uint8)
            zeros = z.astype(np.float32)
            if bits == 4:
                z = np.concatenate([z, np.zeros((n, blocks % 2), np.uint8)], axis=1)
                z = (z[:, 0::2] | (z[:, 1::2] << 4)).astype(np.uint8)
            zp = z.reshape(-1)
        elif zero_points == "float":
            zeros = rng.uniform(0, 2 ** bits - 1, (n, blocks)).astype(np.float32)
            zp = zeros.reshape(-1)
        w = (codes.reshape(n, blocks, block_size) - zeros[:, :, None]) * scales[:, :, None]
        return b, scales.reshape(-1), zp, w.reshape(n, -1)[:, :k].T

    weights = ("b", "scales", "zero_points", "bias")
    none = ("", None)
    for name, a_shape, n, block_size, zero_points, bias in [
        ("matmul_n_bits", (3, 32), 8, 16, "uint8", False),
        ("matmul_n_bits_block32_default_zero_point", (2, 3, 64), 6, 32, None, False),
        ("matmul_n_bits_k_not_a_block_multiple", (2, 3, 40), 5, 16, "uint8", True),
        ("matmul_n_bits_k_short_of_one_block", (4, 20), 7, 32, "uint8", False),
        ("matmul_n_bits_float_zero_points_bias", (2, 2, 3, 48), 4, 32, "float", True),
    ]:
        k = a_shape[-1]
        b, scales, zp, _ = quantized(k, n, 4, block_size, zero_points)
        inputs = [("a", f32(*a_shape, scale=1.0)), ("b", b), ("scales", scales),
                  ("zero_points", zp) if zp is not None else none]
        if bias:
            inputs += [none, ("bias", f32(n, scale=0.5))]
        case(out, name, "MatMulNBits", inputs, ["y"], {"K": k, "N": n, "bits": 4, "block_size": block_size},
             initializers=weights)
    # FP16 A and scales (T1 = float16): the product and its output are FP16
    b, scales, zp, _ = quantized(32, 6, 4, 16, "uint8")
    case(out, "matmul_n_bits_fp16", "MatMulNBits",
         [("a", f32(3, 32, scale=1.0).astype(np.float16)), ("b", b), ("scales", scales.astype(np.float16)),
          ("zero_points", zp)], ["y"], {"K": 32, "N": 6, "bits": 4, "block_size": 16},
         out_types={"y": TensorProto.FLOAT16}, initializers=weights)
    a = f32(2, 3, 40, scale=1.0)
    b, scales, zp, w = quantized(40, 6, 8, 16, "uint8")
    bias = f32(6, scale=0.5)
    case(out, "matmul_n_bits_8_bits", "MatMulNBits",
         [("a", a), ("b", b), ("scales", scales), ("zero_points", zp), none, ("bias", bias)], ["y"],
         {"K": 40, "N": 6, "bits": 8, "block_size": 16}, expected=[a @ w + bias], initializers=weights)


def dynamic_quantize_lstm(out):
    """DynamicQuantizeLSTM as onnxruntime's quantize_dynamic writes it: constant INT8 or UINT8 W
    [num_directions, input, 4·hidden] and R [num_directions, hidden, 4·hidden] with FP32 scales and zero
    points per direction or per column; forward and bidirectional, a bias, sequence_lens, initial_h and
    initial_c, peepholes. Each case is written twice: `<name>` expects onnxruntime's kernel, which also
    quantizes X and H to UINT8 at every step, and `<name>_float_reference` expects onnxruntime's float LSTM on
    the dequantized weights, which the engine computes. onnxruntime 1.20.1 refuses per-column zero points
    that are not all zero (INT8) or not all equal (UINT8), so the generated ones are."""
    seq, batch, inp, hid = 5, 3, 4, 6
    x = f32(seq, batch, inp, scale=1.0)
    lens = np.array([5, 2, 4], dtype=np.int32)
    none = ("", None)

    def quantized(dtype, dirs, rows, per_column, zero_points):
        """Codes [dirs, rows, 4·hid], scale and zero point, and the ONNX LSTM weight [dirs, 4·hid, rows]
        they stand for."""
        info = np.iinfo(dtype)
        codes = rng.integers(info.min, info.max + 1, (dirs, rows, 4 * hid)).astype(dtype)
        shape = (dirs, 4 * hid) if per_column else (dirs,)
        scale = rng.uniform(0.002, 0.006, shape).astype(np.float32)
        zero = np.broadcast_to(np.array(zero_points, dtype=dtype).reshape((dirs,) + (1,) * (len(shape) - 1)),
                               shape).copy()
        columns = (lambda t: t[:, None, :]) if per_column else (lambda t: t[:, None, None])
        w = (codes.astype(np.float32) - columns(zero.astype(np.float32))) * columns(scale)
        return codes, scale, zero, np.ascontiguousarray(w.transpose(0, 2, 1))

    weights = ("w", "r", "w_scale", "w_zero", "r_scale", "r_zero")
    for name, dtype, direction, per_column, zeros, optional in [
        ("dynamic_quantize_lstm_i8", np.int8, "forward", False, [-3], ["b"]),
        ("dynamic_quantize_lstm_u8_per_column_lengths", np.uint8, "forward", True, [128],
         ["b", "lens", "h0", "c0"]),
        ("dynamic_quantize_lstm_bidirectional_i8_per_column", np.int8, "bidirectional", True, [0, 0],
         ["b", "lens", "h0", "c0", "p"]),
        ("dynamic_quantize_lstm_bidirectional_u8", np.uint8, "bidirectional", False, [120, 135],
         ["lens", "h0", "c0"]),
    ]:
        dirs = 2 if direction == "bidirectional" else 1
        w, w_scale, w_zero, w_float = quantized(dtype, dirs, inp, per_column, zeros)
        r, r_scale, r_zero, r_float = quantized(dtype, dirs, hid, per_column, zeros)
        given = {"b": f32(dirs, 8 * hid, scale=0.5), "lens": lens, "h0": f32(dirs, batch, hid, scale=0.5),
                 "c0": f32(dirs, batch, hid, scale=0.5), "p": f32(dirs, 3 * hid, scale=0.5)}
        lstm = [(n, given[n]) if n in optional else none for n in ["b", "lens", "h0", "c0", "p"]]
        inputs = [("x", x), ("w", w), ("r", r)] + lstm + [("w_scale", w_scale), ("w_zero", w_zero),
                                                         ("r_scale", r_scale), ("r_zero", r_zero)]
        attrs = {"hidden_size": hid, "direction": direction}
        outs = ["y", "y_h", "y_c"]
        case(out, name, "DynamicQuantizeLSTM", inputs, outs, attrs, initializers=weights)
        reference = single_node(name, "LSTM", [("x", x), ("w", w_float), ("r", r_float)] + lstm, outs, attrs,
                                domain="", initializers=("w", "r"))
        sess = ort.InferenceSession(reference.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = sess.run(None, {n: a for n, a in [("x", x)] + lstm if n})
        case(out, f"{name}_float_reference", "DynamicQuantizeLSTM", inputs, outs, attrs, expected=expected,
             initializers=weights)


def simple_rnn(out):
    """ONNX RNN (default domain) in the forms its node tests leave out: reverse and bidirectional,
    sequence_lens with initial_h, clip, Relu and per-direction activations (the batch-major layout is
    test_simple_rnn_batchwise's; onnxruntime's CPU RNN refuses layout=1)."""
    seq, batch, inp, hid = 5, 3, 4, 6

    def weights(dirs):
        return (f32(dirs, hid, inp, scale=0.5), f32(dirs, hid, hid, scale=0.5), f32(dirs, 2 * hid, scale=0.5))

    x = f32(seq, batch, inp, scale=1.0)
    w, r, b = weights(1)
    case(out, "rnn_reverse", "RNN", [("x", x), ("w", w), ("r", r), ("b", b)], ["y", "y_h"],
         {"hidden_size": hid, "direction": "reverse"}, domain="")
    w2, r2, b2 = weights(2)
    lens = np.array([5, 2, 4], dtype=np.int32)
    h0 = f32(2, batch, hid, scale=0.5)
    case(out, "rnn_bidirectional_lengths", "RNN",
         [("x", x), ("w", w2), ("r", r2), ("b", b2), ("lens", lens), ("h0", h0)], ["y", "y_h"],
         {"hidden_size": hid, "direction": "bidirectional", "activations": ["Relu", "Sigmoid"]}, domain="")
    case(out, "rnn_clip_no_bias", "RNN", [("x", x), ("w", w), ("r", r)], ["y", "y_h"],
         {"hidden_size": hid, "clip": 0.4}, domain="")


def rotary_embedding(out):
    """RotaryEmbedding (com.microsoft): [batch, seq] positions or one offset, 3-D and 4-D inputs, halves and
    interleaved pairs, a partial rotary_embedding_dim."""
    x3 = f32(2, 4, 16, scale=1.0)
    x4 = f32(2, 2, 4, 8, scale=1.0)
    angles = np.arange(12)[:, None] * (1.0 / 10000 ** (np.arange(4) / 4))[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    positions = np.array([[0, 1, 2, 3], [5, 6, 7, 8]], dtype=np.int64)
    offset = np.array([3], dtype=np.int64)
    case(out, "rotary_embedding", "RotaryEmbedding",
         [("x", x3), ("positions", positions), ("cos", cos), ("sin", sin)], ["y"])
    case(out, "rotary_embedding_interleaved", "RotaryEmbedding",
         [("x", x3), ("positions", positions), ("cos", cos), ("sin", sin)], ["y"], {"interleaved": 1, "num_heads": 2})
    case(out, "rotary_embedding_offset", "RotaryEmbedding",
         [("x", x3), ("positions", offset), ("cos", cos), ("sin", sin)], ["y"])
    case(out, "rotary_embedding_4d", "RotaryEmbedding",
         [("x", x4), ("positions", positions), ("cos", cos), ("sin", sin)], ["y"], {"interleaved": 1})
    half = np.ascontiguousarray(cos[:, :2]), np.ascontiguousarray(sin[:, :2])
    case(out, "rotary_embedding_partial", "RotaryEmbedding",
         [("x", x3), ("positions", positions), ("cos", half[0]), ("sin", half[1])], ["y"],
         {"num_heads": 2, "rotary_embedding_dim": 4})


def group_query_attention(out):
    """GroupQueryAttention as onnxruntime-genai's LLM exports use it: a prompt without past, token
    generation with a past and right-padded seqlens_k, 4 query heads on 2 KV heads, do_rotary (halves and
    interleaved) with positions from seqlens_k, a packed QKV query, a scale and softcap. onnxruntime leaves
    the present rows after a padded sequence's total length unwritten; the expected present has zeros there,
    as the engine writes (onnxruntime 1.20.1's CPU kernel gave zeros too)."""
    heads, kv_heads, head = 4, 2, 16
    batch, seq = 2, 5
    angles = np.arange(32)[:, None] * (1.0 / 10000 ** (np.arange(8) / 8))[None, :]
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    q = f32(batch, seq, heads * head, scale=1.0)
    k, v = f32(batch, seq, kv_heads * head, scale=1.0), f32(batch, seq, kv_heads * head, scale=1.0)
    prompt_lens = np.full(batch, seq - 1, dtype=np.int32)
    total = np.array(seq, dtype=np.int32)
    gqa = {"num_heads": heads, "kv_num_heads": kv_heads}
    outs = ["y", "present_key", "present_value"]
    none = ("", None)
    prompt = [("q", q), ("k", k), ("v", v), none, none, ("seqlens_k", prompt_lens), ("total", total)]
    case(out, "group_query_attention", "GroupQueryAttention", prompt, outs, gqa)
    case(out, "group_query_attention_rotary", "GroupQueryAttention", prompt + [("cos", cos), ("sin", sin)], outs,
         dict(gqa, do_rotary=1))
    case(out, "group_query_attention_rotary_interleaved", "GroupQueryAttention",
         prompt + [("cos", cos), ("sin", sin)], outs, dict(gqa, do_rotary=1, rotary_interleaved=1))
    case(out, "group_query_attention_softcap", "GroupQueryAttention", prompt, outs,
         dict(gqa, scale=0.3, softcap=2.0))
    packed = f32(batch, seq, (heads + 2 * kv_heads) * head, scale=1.0)
    case(out, "group_query_attention_packed", "GroupQueryAttention",
         [("qkv", packed), none, none, none, none, ("seqlens_k", prompt_lens), ("total", total)], outs, gqa)
    # one new token after a past of 6 rows, of which the second sequence uses 3
    past = 6
    past_key, past_value = f32(batch, kv_heads, past, head, scale=1.0), f32(batch, kv_heads, past, head, scale=1.0)
    lens = np.array([past, 3], dtype=np.int32)
    step = [("q", f32(batch, 1, heads * head, scale=1.0)), ("k", f32(batch, 1, kv_heads * head, scale=1.0)),
            ("v", f32(batch, 1, kv_heads * head, scale=1.0)), ("past_key", past_key), ("past_value", past_value),
            ("seqlens_k", lens), ("total", np.array(past + 1, dtype=np.int32))]
    written = np.arange(past + 1)[None, None, :, None] <= lens[:, None, None, None]

    def generated(inputs, attrs):
        model = single_node("gqa", "GroupQueryAttention", inputs, outs, attrs).SerializeToString()
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        y, pk, pv = sess.run(None, {n: a for n, a in inputs if n})
        return [y, np.where(written, pk, 0), np.where(written, pv, 0)]

    case(out, "group_query_attention_past_padded", "GroupQueryAttention", step, outs, gqa,
         expected=generated(step, gqa))
    rotary = dict(gqa, do_rotary=1)
    case(out, "group_query_attention_past_padded_rotary", "GroupQueryAttention",
         step + [("cos", cos), ("sin", sin)], outs, rotary, expected=generated(step + [("cos", cos), ("sin", sin)],
                                                                              rotary))


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
