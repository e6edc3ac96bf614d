"""Build the engine's reference models with onnx.helper and seeded random weights, and (optionally)
onnxruntime reference outputs for given batch sizes.

    python export_models.py OUT_DIR [--size ci|bench] [--reference 1,3,16]

Writes OUT_DIR/<name>.onnx for: mobilenet_v3, resnet, detection, transformer, lstm_speech.
With --reference, also OUT_DIR/<name>/b<N>/input_<i>.pb and output_<i>.pb (TensorProto), computed
by onnxruntime (CPU) on seeded random inputs.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.n = 0

    def uniq(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def const(self, arr, p="c"):
        name = self.uniq(p)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, shape, scale=None, p="w"):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else np.sqrt(2.0 / max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * s).astype(np.float32), p)

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.uniq(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.uniq(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def bn(self, x, c):
        scale = self.const((1.0 + 0.1 * self.rng.standard_normal(c)).astype(np.float32))
        bias = self.const((0.1 * self.rng.standard_normal(c)).astype(np.float32))
        mean = self.const((0.1 * self.rng.standard_normal(c)).astype(np.float32))
        var = self.const((1.0 + 0.1 * np.abs(self.rng.standard_normal(c))).astype(np.float32))
        return self.op("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def conv(self, x, cin, cout, k, stride=1, group=1, bias=False):
        w = self.weight([cout, cin // group, k, k])
        ins = [x, w]
        if bias:
            ins.append(self.const((0.1 * self.rng.standard_normal(cout)).astype(np.float32)))
        p = k // 2
        return self.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p], group=group)

    def model(self, inputs, outputs):
        g = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="infergate-export")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def mobilenet_v3(size):
    b = Builder("mobilenet_v3", 1)
    res = 64 if size == "ci" else 224
    x = "input"
    h = b.op("HardSwish", [b.bn(b.conv(x, 3, 16, 3, 2), 16)])
    # (kernel, expand, out, se, act, stride)
    cfg = [
        (3, 16, 16, True, "Relu", 2),
        (3, 72, 24, False, "Relu", 2),
        (3, 88, 24, False, "Relu", 1),
        (5, 96, 40, True, "HardSwish", 2),
        (5, 240, 40, True, "HardSwish", 1),
        (5, 120, 48, True, "HardSwish", 1),
        (5, 288, 96, True, "HardSwish", 2),
        (5, 576, 96, True, "HardSwish", 1),
    ]
    cin = 16
    for k, exp, cout, se, act, s in cfg:
        y = h
        if exp != cin:
            y = b.op(act, [b.bn(b.conv(y, cin, exp, 1), exp)])
        y = b.op(act, [b.bn(b.conv(y, exp, exp, k, s, group=exp), exp)])
        if se:
            sq = max(8, exp // 4)
            p = b.op("GlobalAveragePool", [y])
            p = b.op("Relu", [b.conv(p, exp, sq, 1, bias=True)])
            p = b.op("HardSigmoid", [b.conv(p, sq, exp, 1, bias=True)], alpha=1.0 / 6, beta=0.5)
            y = b.op("Mul", [y, p])
        y = b.bn(b.conv(y, exp, cout, 1), cout)
        if s == 1 and cin == cout:
            y = b.op("Add", [y, h])
        h, cin = y, cout
    h = b.op("HardSwish", [b.bn(b.conv(h, cin, 576, 1), 576)])
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])])
    h = b.op("HardSwish", [b.op("Gemm", [h, b.weight([1024, 576]), b.const(np.zeros(1024, np.float32))], transB=1)])
    out = b.op("Gemm", [h, b.weight([100, 1024]), b.const(np.zeros(100, np.float32))], transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, res, res])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 100])],
    ), {"input": (3, res, res)}


def resnet(size):
    b = Builder("resnet", 2)
    res = 64 if size == "ci" else 224
    h = b.op("Relu", [b.bn(b.conv("input", 3, 32, 7, 2), 32)])
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 32
    for cout, s in [(32, 1), (64, 2), (128, 2), (256, 2)]:
        y = b.op("Relu", [b.bn(b.conv(h, cin, cout, 3, s), cout)])
        y = b.bn(b.conv(y, cout, cout, 3), cout)
        sc = h if (s == 1 and cin == cout) else b.bn(b.conv(h, cin, cout, 1, s), cout)
        h = b.op("Relu", [b.op("Add", [y, sc])])
        cin = cout
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])])
    b.op("Gemm", [h, b.weight([10, cin]), b.const(np.zeros(10, np.float32))], transB=1)
    b.nodes[-1].output[0] = "logits"
    return b.model(
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, res, res])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
    ), {"input": (3, res, res)}


def detection(size):
    b = Builder("detection", 3)
    res = 64 if size == "ci" else 256
    c1 = b.op("Relu", [b.bn(b.conv("image", 3, 16, 3, 2), 16)])        # /2
    c2 = b.op("Relu", [b.bn(b.conv(c1, 16, 32, 3, 2), 32)])            # /4
    c3 = b.op("Relu", [b.bn(b.conv(c2, 32, 64, 3, 2), 64)])            # /8
    scales = b.const(np.array([1, 1, 2, 2], np.float32))
    up = b.op("Resize", [c3, "", scales], mode="nearest")              # /4
    lat = b.conv(c2, 32, 64, 1)
    p2 = b.op("Relu", [b.op("Add", [up, lat])])
    wt = b.weight([64, 32, 2, 2])
    dec = b.op("Relu", [b.op("ConvTranspose", [p2, wt], kernel_shape=[2, 2], strides=[2, 2])])  # /2
    lin = b.op("Resize", [c3, "", b.const(np.array([1, 1, 4, 4], np.float32))],
               mode="linear", coordinate_transformation_mode="half_pixel")  # /2
    cat = b.op("Concat", [dec, lin], axis=1)
    heat = b.op("Sigmoid", [b.conv(cat, 96, 4, 3, bias=True)])
    boxes = b.conv(cat, 96, 4, 1, bias=True)
    b.nodes.append(helper.make_node("Identity", [heat], ["heatmap"]))
    b.nodes.append(helper.make_node("Identity", [boxes], ["boxes"]))
    half = res // 2
    return b.model(
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, res, res])],
        [
            helper.make_tensor_value_info("heatmap", TensorProto.FLOAT, ["batch", 4, half, half]),
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", 4, half, half]),
        ],
    ), {"image": (3, res, res)}


def layer_norm_decomposed(b, x, d):
    mean = b.op("ReduceMean", [x], axes=[-1])
    xc = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [xc, b.const(np.array(2.0, np.float32))])], axes=[-1])
    std = b.op("Sqrt", [b.op("Add", [var, b.const(np.array(1e-5, np.float32))])])
    y = b.op("Div", [xc, std])
    g = b.const((1.0 + 0.1 * b.rng.standard_normal(d)).astype(np.float32))
    be = b.const((0.1 * b.rng.standard_normal(d)).astype(np.float32))
    return b.op("Add", [b.op("Mul", [y, g]), be])


def gelu_erf(b, x):
    e = b.op("Erf", [b.op("Div", [x, b.const(np.array(np.sqrt(2.0), np.float32))])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.const(np.array(1.0, np.float32))])]),
                        b.const(np.array(0.5, np.float32))])


def transformer(size):
    b = Builder("transformer", 4)
    vocab, d, heads, ff, layers, max_len = (1000, 64, 4, 256, 2) + (128,) if size == "ci" else (8000, 256, 8, 1024, 4, 512)
    dh = d // heads
    ids = "input_ids"
    emb = b.op("Gather", [b.weight([vocab, d], 0.05), ids])
    seq = b.op("Gather", [b.op("Shape", [ids]), b.const(np.array(1, np.int64))])
    pos_ids = b.op("Range", [b.const(np.array(0, np.int64)), seq, b.const(np.array(1, np.int64))])
    pos = b.op("Gather", [b.weight([max_len, d], 0.05), pos_ids])
    h = b.op("Add", [emb, pos])
    batch = b.op("Gather", [b.op("Shape", [ids]), b.const(np.array(0, np.int64))])
    unsq = lambda v: b.op("Unsqueeze", [v, b.const(np.array([0], np.int64))])
    heads_shape = b.op("Concat", [unsq(batch), unsq(seq), b.const(np.array([heads, dh], np.int64))], axis=0)
    flat_shape = b.op("Concat", [unsq(batch), unsq(seq), b.const(np.array([d], np.int64))], axis=0)
    for _ in range(layers):
        def proj(x, o, i=d):
            return b.op("Add", [b.op("MatMul", [x, b.weight([i, o], 1 / np.sqrt(i))]), b.const(np.zeros(o, np.float32))])
        def split_heads(x):
            return b.op("Transpose", [b.op("Reshape", [x, heads_shape])], perm=[0, 2, 1, 3])
        q, k, v = split_heads(proj(h, d)), split_heads(proj(h, d)), split_heads(proj(h, d))
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        att = b.op("Div", [b.op("MatMul", [q, kt]), b.const(np.array(np.sqrt(dh), np.float32))])
        att = b.op("Softmax", [att], axis=-1)
        ctx = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [att, v])], perm=[0, 2, 1, 3]), flat_shape])
        h = layer_norm_decomposed(b, b.op("Add", [h, proj(ctx, d)]), d)
        f = proj(gelu_erf(b, proj(h, ff)), d, ff)
        h = layer_norm_decomposed(b, b.op("Add", [h, f]), d)
    b.nodes.append(helper.make_node("Identity", [h], ["hidden"]))
    return b.model(
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", d])],
    ), {"input_ids": ("ids", 16 if size == "ci" else 128, vocab)}


def lstm_speech(size):
    b = Builder("lstm_speech", 5)
    feat, hid, classes, seq = (40, 48, 29, 20) if size == "ci" else (80, 256, 29, 100)
    x = b.op("Transpose", ["features"], perm=[1, 0, 2])                  # [seq, batch, feat]
    w = b.weight([2, 4 * hid, feat], 1 / np.sqrt(feat))
    r = b.weight([2, 4 * hid, hid], 1 / np.sqrt(hid))
    bias = b.const((0.1 * b.rng.standard_normal((2, 8 * hid))).astype(np.float32))
    y, _, _ = b.op("LSTM", [x, w, r, bias], n_out=3, hidden_size=hid, direction="bidirectional")
    y = b.op("Transpose", [y], perm=[0, 2, 1, 3])                           # [seq, batch, 2, hid]
    y = b.op("Reshape", [y, b.const(np.array([0, 0, -1], np.int64))])      # [seq, batch, 2*hid]
    logits = b.op("Add", [b.op("MatMul", [y, b.weight([2 * hid, classes])]), b.const(np.zeros(classes, np.float32))])
    out = b.op("LogSoftmax", [b.op("Transpose", [logits], perm=[1, 0, 2])], axis=-1)
    b.nodes.append(helper.make_node("Identity", [out], ["log_probs"]))
    return b.model(
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "time", feat])],
        [helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, ["batch", "time", classes])],
    ), {"features": (seq, feat)}


MODELS = {
    "mobilenet_v3": mobilenet_v3,
    "resnet": resnet,
    "detection": detection,
    "transformer": transformer,
    "lstm_speech": lstm_speech,
}


def op_models():
    """Single-op models for GFLOP/s figures: (name, model, inputs spec, flops)."""
    out = []
    rng = np.random.default_rng(7)
    for m, k, n in [(256, 256, 256), (1024, 1024, 1024), (128, 768, 3072), (8, 1024, 1024)]:
        b = Builder(f"op_matmul_{m}x{k}x{n}", 0)
        b.const(rng.standard_normal((k, n)).astype(np.float32), "w")
        b.nodes.append(helper.make_node("MatMul", ["a", b.inits[-1].name], ["y"]))
        model = b.model([helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])])
        out.append((b.name, model, {"a": [m, k]}, 2 * m * k * n))
    for c, h, mo, k, g, s in [(64, 56, 64, 3, 1, 1), (256, 14, 256, 1, 1, 1), (144, 56, 144, 3, 144, 1), (32, 112, 64, 3, 1, 2)]:
        b = Builder(f"op_conv_c{c}_h{h}_m{mo}_k{k}_g{g}_s{s}", 0)
        w = b.const((rng.standard_normal((mo, c // g, k, k)) * 0.1).astype(np.float32), "w")
        p = k // 2
        b.nodes.append(helper.make_node("Conv", ["x", w], ["y"], kernel_shape=[k, k], pads=[p] * 4, strides=[s, s], group=g))
        ho = (h + 2 * p - k) // s + 1
        model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, mo, ho, ho])])
        out.append((b.name, model, {"x": [1, c, h, h]}, 2 * mo * ho * ho * (c // g) * k * k))
    # The same products on 8-bit codes, as quantize_dynamic writes them: the float input quantized per call
    # (DynamicQuantizeLinear, uint8), int8 weights with a zero point, i32 sums out.
    for m, k, n in [(1024, 1024, 1024)]:
        b = Builder(f"op_matmul_int8_{m}x{k}x{n}", 0)
        q, scale, zp = b.op("DynamicQuantizeLinear", ["a"], n_out=3)
        w = b.const(rng.integers(-128, 128, size=(k, n), dtype=np.int8), "w")
        wz = b.const(np.int8(3), "wz")
        b.nodes.append(helper.make_node("MatMulInteger", [q, w, zp, wz], ["y"]))
        model = b.model([helper.make_tensor_value_info("a", TensorProto.FLOAT, [m, k])],
                        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])])
        out.append((b.name, model, {"a": [m, k]}, 2 * m * k * n))
    for c, h, mo, k in [(64, 56, 64, 3)]:
        b = Builder(f"op_conv_int8_c{c}_h{h}_m{mo}_k{k}_g1_s1", 0)
        q, scale, zp = b.op("DynamicQuantizeLinear", ["x"], n_out=3)
        # uint8 weights: onnxruntime's ConvInteger takes no other
        w = b.const(rng.integers(0, 256, size=(mo, c, k, k), dtype=np.uint8), "w")
        wz = b.const(np.uint8(128), "wz")
        p = k // 2
        b.nodes.append(helper.make_node("ConvInteger", [q, w, zp, wz], ["y"], kernel_shape=[k, k], pads=[p] * 4))
        model = b.model([helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, mo, h, h])])
        out.append((b.name, model, {"x": [1, c, h, h]}, 2 * mo * h * h * c * k * k))
    return out


def make_input(spec, batch, rng):
    if spec[0] == "ids":
        _, seq, vocab = spec
        return rng.integers(0, vocab, size=(batch, seq)).astype(np.int64)
    return rng.standard_normal((batch,) + tuple(spec)).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--size", default="ci", choices=["ci", "bench"])
    ap.add_argument("--reference", default="")
    ap.add_argument("--only", default="")
    ap.add_argument("--manifest", action="store_true", help="also write single-op models and manifest.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.manifest:
        import json
        manifest = {}
        for name, fn in MODELS.items():
            _, specs = fn(a.size)
            inputs = []
            for k, sp in specs.items():
                if sp[0] == "ids":
                    inputs.append({"name": k, "dtype": "INT64", "shape": [-1, sp[1]], "high": sp[2]})
                else:
                    inputs.append({"name": k, "dtype": "FP32", "shape": [-1] + list(sp)})
            manifest[name] = {"inputs": inputs}
        for name, model, specs, flops in op_models():
            onnx.save(model, os.path.join(a.out, f"{name}.onnx"))
            manifest[name] = {"inputs": [{"name": k, "dtype": "FP32", "shape": v} for k, v in specs.items()], "flops": flops}
        with open(os.path.join(a.out, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
    batches = [int(x) for x in a.reference.split(",") if x]
    for name, fn in MODELS.items():
        if a.only and name not in a.only.split(","):
            continue
        model, specs = fn(a.size)
        path = os.path.join(a.out, f"{name}.onnx")
        onnx.save(model, path)
        if not batches:
            continue
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for batch in batches:
            rng = np.random.default_rng(1000 + batch)
            feeds = {k: make_input(s, batch, rng) for k, s in specs.items()}
            outs = sess.run(None, feeds)
            d = os.path.join(a.out, name, f"b{batch}")
            os.makedirs(d, exist_ok=True)
            for i, k in enumerate(specs):
                onnx.save_tensor(numpy_helper.from_array(feeds[k], k), os.path.join(d, f"input_{i}.pb"))
            for i, (o, v) in enumerate(zip(sess.get_outputs(), outs)):
                onnx.save_tensor(numpy_helper.from_array(v, o.name), os.path.join(d, f"output_{i}.pb"))


if __name__ == "__main__":
    main()
