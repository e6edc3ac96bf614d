//! QDQ-wrapped Conv and MatMul (as `quantize_static` writes them) become QLinearConv and
//! QLinearMatMul on the codes, and compute what the float graph between the QDQ pairs computes, to
//! within one step of the output's quantization.

use std::sync::Arc;

use super::{model_bytes, op_names, run_cpu, run_on, value};
use crate::onnx::proto::*;
use crate::onnx::test_graph::{init, node};
use crate::{AdapterChoice, ExecutorKind, Model};

/// A one-input (`x`), one-output (`y`) opset-17 model, as bytes.
fn bytes(nodes: Vec<NodeProto>, initializer: Vec<TensorProto>, x: &[i64], y: &[i64]) -> Vec<u8> {
    model_bytes(nodes, initializer, value("x", x, &[]), value("y", y, &[]))
}

/// An 8-bit initializer (`elem_type` 2 = UINT8, 3 = INT8).
fn codes(name: &str, elem_type: i32, dims: &[i64], v: &[i32]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: elem_type,
        int32_data: v.to_vec(),
        ..Default::default()
    }
}

/// `y = DQ(Q(product(DQ(Q(x)), DQ(Q(w)))))`, the product `op` with float weights `w` quantized per
/// output channel to INT8 and activations per tensor to UINT8.
fn qdq_model(op: &str, x: &[i64], w_dims: &[i64], w: &[f32], channels: usize, y: &[i64]) -> Vec<u8> {
    let axis = if op == "Conv" { 0 } else { 1 };
    let w_scale: Vec<f32> = (0..channels).map(|c| 0.01 + 0.005 * c as f32).collect();
    let nodes = vec![
        node("QuantizeLinear", &["x", "sx", "zx"], "xq", vec![]),
        node("DequantizeLinear", &["xq", "sx", "zx"], "xd", vec![]),
        node(
            "QuantizeLinear",
            &["w", "sw", "zw"],
            "wq",
            vec![super::int("axis", axis)],
        ),
        node(
            "DequantizeLinear",
            &["wq", "sw", "zw"],
            "wd",
            vec![super::int("axis", axis)],
        ),
        node(op, &["xd", "wd"], "p", vec![]),
        node("QuantizeLinear", &["p", "sy", "zy"], "pq", vec![]),
        node("DequantizeLinear", &["pq", "sy", "zy"], "y", vec![]),
    ];
    let inits = vec![
        init("w", w_dims, w),
        init("sx", &[], &[0.05]),
        codes("zx", 2, &[], &[100]),
        init("sw", &[channels as i64], &w_scale),
        codes("zw", 3, &[channels as i64], &vec![0; channels]),
        init("sy", &[], &[0.1]),
        codes("zy", 2, &[], &[120]),
    ];
    bytes(nodes, inits, x, y)
}

/// The model loaded as is and with the pass applied first; both run on `x`.
fn check(model: &[u8], shape: &[usize], want_op: &str) {
    let plain = Arc::new(Model::from_bytes(model, None).unwrap());
    let mut g = crate::onnx::load_graph(model, None).unwrap();
    assert!(crate::passes::qdq::rewrite_from(&mut g, 0).unwrap());
    let rewritten = Arc::new(Model::from_graph(g).unwrap());
    let ops = op_names(&rewritten);
    assert!(ops.contains(&want_op), "{ops:?}");
    assert!(!ops.contains(&"Conv") && !ops.contains(&"MatMul"), "{ops:?}");
    let n: usize = shape.iter().product();
    let x: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.5).collect();
    let want = run_cpu(&plain, shape.to_vec(), x.clone())
        .to_vec::<f32>()
        .unwrap();
    let got = run_cpu(&rewritten, shape.to_vec(), x).to_vec::<f32>().unwrap();
    assert_eq!(got.len(), want.len());
    let mut moved = 0;
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        // one output step (0.1) at most: the float product rounds to the grid once, the integer
        // one through its f32 multiplier
        assert!((g - w).abs() <= 0.1 + 1e-6, "element {k}: {g} against {w}");
        moved += usize::from(g != w);
    }
    assert!(
        moved * 10 <= got.len(),
        "{moved} of {} outputs moved a step",
        got.len()
    );
}

#[test]
fn qdq_conv_becomes_qlinear_conv_with_the_same_numbers() {
    let (c, m) = (5, 6);
    let w: Vec<f32> = (0..m * c * 9)
        .map(|i| ((i * 13) % 29) as f32 * 0.02 - 0.28)
        .collect();
    let model = qdq_model("Conv", &[1, 5, 7, 6], &[6, 5, 3, 3], &w, m, &[1, 6, 5, 4]);
    check(&model, &[1, c, 7, 6], "QLinearConv");
}

#[test]
fn qdq_matmul_becomes_qlinear_matmul_with_the_same_numbers() {
    let (k, n) = (10, 7);
    let w: Vec<f32> = (0..k * n).map(|i| ((i * 7) % 23) as f32 * 0.03 - 0.33).collect();
    let model = qdq_model("MatMul", &[3, 10], &[10, 7], &w, n, &[3, 7]);
    check(&model, &[3, k], "QLinearMatMul");
}

#[test]
fn qdq_matmul_of_stacked_rows_becomes_qlinear_matmul_with_the_same_numbers() {
    let (k, n) = (10, 7);
    let w: Vec<f32> = (0..k * n).map(|i| ((i * 11) % 19) as f32 * 0.03 - 0.27).collect();
    let model = qdq_model("MatMul", &[2, 3, 10], &[10, 7], &w, n, &[2, 3, 7]);
    check(&model, &[2, 3, k], "QLinearMatMul");
}

#[test]
fn chained_qdq_convs_all_become_qlinear_convs() {
    // x → Conv a → Q/DQ → Conv b → Q/DQ: the second Conv reads the codes the first one's rewrite
    // writes, whose type the pass must know to match it (a ResNet's convolutions all chain so)
    let (c, m) = (4, 6);
    let wa: Vec<f32> = (0..m * c * 9)
        .map(|i| ((i * 13) % 29) as f32 * 0.02 - 0.28)
        .collect();
    let wb: Vec<f32> = (0..m * m).map(|i| ((i * 7) % 17) as f32 * 0.03 - 0.24).collect();
    let per_channel = || vec![super::int("axis", 0)];
    let nodes = vec![
        node("QuantizeLinear", &["x", "sx", "zx"], "xq", vec![]),
        node("DequantizeLinear", &["xq", "sx", "zx"], "xd", vec![]),
        node("QuantizeLinear", &["wa", "sw", "zw"], "waq", per_channel()),
        node("DequantizeLinear", &["waq", "sw", "zw"], "wad", per_channel()),
        node("Conv", &["xd", "wad"], "a", vec![]),
        node("QuantizeLinear", &["a", "sa", "za"], "aq", vec![]),
        node("DequantizeLinear", &["aq", "sa", "za"], "ad", vec![]),
        node("QuantizeLinear", &["wb", "sw", "zw"], "wbq", per_channel()),
        node("DequantizeLinear", &["wbq", "sw", "zw"], "wbd", per_channel()),
        node("Conv", &["ad", "wbd"], "b", vec![]),
        node("QuantizeLinear", &["b", "sy", "zy"], "bq", vec![]),
        node("DequantizeLinear", &["bq", "sy", "zy"], "y", vec![]),
    ];
    let w_scale: Vec<f32> = (0..m).map(|c| 0.01 + 0.004 * c as f32).collect();
    let inits = vec![
        init("wa", &[6, 4, 3, 3], &wa),
        init("wb", &[6, 6, 1, 1], &wb),
        init("sx", &[], &[0.05]),
        codes("zx", 2, &[], &[100]),
        init("sw", &[m as i64], &w_scale),
        codes("zw", 3, &[m as i64], &vec![0; m]),
        init("sa", &[], &[0.08]),
        codes("za", 2, &[], &[110]),
        init("sy", &[], &[0.1]),
        codes("zy", 2, &[], &[120]),
    ];
    let model = bytes(nodes, inits, &[1, 4, 7, 6], &[1, 6, 5, 4]);
    check(&model, &[1, c, 7, 6], "QLinearConv");
}

#[test]
fn by_default_only_products_with_large_weights_or_wide_outputs_become_integer() {
    use crate::passes::qdq::{LARGE_WEIGHT_CODES, WIDE_CONV_MACS, rewrite_from};
    let rewritten = |model: &[u8]| {
        let mut g = crate::onnx::load_graph(model, None).unwrap();
        rewrite_from(&mut g, LARGE_WEIGHT_CODES).unwrap()
    };
    // 6 × 5 × 3 × 3 codes: the float kernels between the pairs are the faster
    let w: Vec<f32> = (0..270).map(|i| ((i * 13) % 29) as f32 * 0.02 - 0.28).collect();
    let small = qdq_model("Conv", &[1, 5, 7, 6], &[6, 5, 3, 3], &w, 6, &[1, 6, 5, 4]);
    assert!(!rewritten(&small));
    // the same weight over 128² positions (4.4 M multiply-adds, like a ResNet's stem): integer
    let wide = qdq_model("Conv", &[1, 5, 130, 130], &[6, 5, 3, 3], &w, 6, &[1, 6, 128, 128]);
    const { assert!(270 * 128 * 128 >= WIDE_CONV_MACS && 270 * 120 * 120 < WIDE_CONV_MACS) };
    assert!(rewritten(&wide));
    let narrower = qdq_model("Conv", &[1, 5, 122, 122], &[6, 5, 3, 3], &w, 6, &[1, 6, 120, 120]);
    assert!(!rewritten(&narrower));
    // 256 × 64 codes, the size of a ResNet's 1×1 convolutions: integer
    let (c, m) = (64, 256);
    assert_eq!(m * c, LARGE_WEIGHT_CODES);
    let w: Vec<f32> = (0..m * c).map(|i| ((i * 7) % 31) as f32 * 0.01 - 0.15).collect();
    let large = qdq_model("Conv", &[1, 64, 2, 3], &[256, 64, 1, 1], &w, m, &[1, 256, 2, 3]);
    assert!(rewritten(&large));
    check(&large, &[1, c, 2, 3], "QLinearConv");
}

/// What QuantizeLinear then DequantizeLinear give, from the ONNX definitions.
fn fake_quantized(x: f32, scale: f32, zero_point: i32, (lo, hi): (i32, i32)) -> f32 {
    let q = ((x / scale).round_ties_even() as i32 + zero_point).clamp(lo, hi);
    (q - zero_point) as f32 * scale
}

fn inputs(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 37) % 101) as f32 * 0.125 - 6.25).collect()
}

#[test]
fn a_quantize_dequantize_pair_runs_as_one_node_with_the_values_of_the_pair() {
    // UINT8 per tensor, and INT8 per channel (axis 1) as quantize_static writes activations and weights
    for (zp_type, scale, zero_point, axis) in [
        (2, vec![0.25f32], vec![100], None),
        (3, vec![0.5, 0.125, 1.0], vec![-3, 0, 7], Some(1)),
    ] {
        let dims = [scale.len() as i64];
        let attrs = || axis.map(|a| vec![super::int("axis", a)]).unwrap_or_default();
        let param_dims: &[i64] = if axis.is_some() { &dims } else { &[] };
        let model = bytes(
            vec![
                node("QuantizeLinear", &["x", "s", "z"], "q", attrs()),
                node("DequantizeLinear", &["q", "s", "z"], "y", attrs()),
            ],
            vec![
                init("s", param_dims, &scale),
                codes("z", zp_type, param_dims, &zero_point),
            ],
            &[2, 3, 4],
            &[2, 3, 4],
        );
        let model = Arc::new(Model::from_bytes(&model, None).unwrap());
        // one scale and zero point: a unary with them as constants; one per channel: the quant op
        let fused = if axis.is_some() {
            "QuantizeDequantize"
        } else {
            "Unary"
        };
        assert_eq!(op_names(&model), [fused]);
        let x = inputs(24);
        let got = run_cpu(&model, vec![2, 3, 4], x.clone()).to_vec::<f32>().unwrap();
        let range = if zp_type == 2 { (0, 255) } else { (-128, 127) };
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            let c = if axis.is_some() { (i / 4) % 3 } else { 0 };
            assert_eq!(
                g,
                fake_quantized(v, scale[c], zero_point[c], range),
                "element {i} of {v}"
            );
        }
    }
}

#[test]
fn a_quantize_read_with_other_parameters_too_stays_for_that_reader() {
    let model = bytes(
        vec![
            node("QuantizeLinear", &["x", "s", "z"], "q", vec![]),
            node("DequantizeLinear", &["q", "s", "z"], "a", vec![]),
            node("DequantizeLinear", &["q", "s2", "z"], "b", vec![]),
            node("Add", &["a", "b"], "y", vec![]),
        ],
        vec![
            init("s", &[], &[0.25]),
            init("s2", &[], &[0.5]),
            codes("z", 2, &[], &[10]),
        ],
        &[6],
        &[6],
    );
    let model = Arc::new(Model::from_bytes(&model, None).unwrap());
    let ops = op_names(&model);
    for op in ["QuantizeLinear", "Unary", "DequantizeLinear"] {
        assert!(ops.contains(&op), "{ops:?}");
    }
    let x = inputs(6);
    let got = run_cpu(&model, vec![6], x.clone()).to_vec::<f32>().unwrap();
    for (&g, &v) in got.iter().zip(&x) {
        let a = fake_quantized(v, 0.25, 10, (0, 255));
        let q = ((v / 0.25).round_ties_even() as i32 + 10).clamp(0, 255);
        assert_eq!(g, a + (q - 10) as f32 * 0.5, "{v}");
    }
}

/// A Conv's output rounded by a per-tensor pair (a QDQ model's activation) is rounded in the Conv's epilogue,
/// after its Relu, with the values of the pair: no node of its own.
#[test]
fn a_per_tensor_pair_after_a_conv_is_rounded_in_the_conv_epilogue() {
    let (c, m) = (3usize, 4usize);
    let w: Vec<f32> = (0..m * c).map(|i| ((i * 5) % 11) as f32 * 0.2 - 1.0).collect();
    let model = bytes(
        vec![
            node("Conv", &["x", "w"], "conv", vec![]),
            node("Relu", &["conv"], "r", vec![]),
            node("QuantizeLinear", &["r", "s", "z"], "q", vec![]),
            node("DequantizeLinear", &["q", "s", "z"], "y", vec![]),
        ],
        vec![
            init("w", &[m as i64, c as i64, 1, 1], &w),
            init("s", &[], &[0.05]),
            codes("z", 2, &[], &[3]),
        ],
        &[1, c as i64, 2, 5],
        &[1, m as i64, 2, 5],
    );
    let model = Arc::new(Model::from_bytes(&model, None).unwrap());
    assert_eq!(op_names(&model), ["Conv"], "the pair is in the Conv");
    let x = inputs(c * 10);
    let got = run_cpu(&model, vec![1, c, 2, 5], x.clone())
        .to_vec::<f32>()
        .unwrap();
    for (i, &g) in got.iter().enumerate() {
        let (o, px) = (i / 10, i % 10);
        let conv: f32 = (0..c).map(|k| w[o * c + k] * x[k * 10 + px]).sum();
        assert_eq!(g, fake_quantized(conv.max(0.0), 0.05, 3, (0, 255)), "element {i}");
    }
}

/// `y = DQ(Q(DQ(Q(x, sa, za)) ∘ DQ(Q(x, sb, zb)), sy, zy))`: two quantizations of x added or
/// multiplied (`op`), as `quantize_static` writes a residual add, in UINT8 or INT8 codes.
fn qdq_binary_model(op: &str, signed: bool, x: &[i64]) -> Vec<u8> {
    let (t, [za, zb, zy]) = if signed {
        (3, [-10, 20, 5])
    } else {
        (2, [100, 130, 120])
    };
    let nodes = vec![
        node("QuantizeLinear", &["x", "sa", "za"], "aq", vec![]),
        node("DequantizeLinear", &["aq", "sa", "za"], "ad", vec![]),
        node("QuantizeLinear", &["x", "sb", "zb"], "bq", vec![]),
        node("DequantizeLinear", &["bq", "sb", "zb"], "bd", vec![]),
        node(op, &["ad", "bd"], "p", vec![]),
        node("QuantizeLinear", &["p", "sy", "zy"], "pq", vec![]),
        node("DequantizeLinear", &["pq", "sy", "zy"], "y", vec![]),
    ];
    let inits = vec![
        init("sa", &[], &[0.05]),
        codes("za", t, &[], &[za]),
        init("sb", &[], &[0.03]),
        codes("zb", t, &[], &[zb]),
        init("sy", &[], &[0.07]),
        codes("zy", t, &[], &[zy]),
    ];
    bytes(nodes, inits, x, x)
}

#[test]
fn qdq_add_and_mul_become_qlinear_add_and_mul_with_the_same_codes() {
    // 36,864 values: the CPU's pass over the codes runs in pieces on the pool's threads
    let shape = [1, 4, 96, 96];
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let n: usize = shape.iter().product();
    let x: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 * 0.05 - 2.5).collect();
    for (op, want_op) in [("Add", "QLinearAdd"), ("Mul", "QLinearMul")] {
        for signed in [false, true] {
            let model = qdq_binary_model(op, signed, &dims);
            let plain = Arc::new(Model::from_bytes(&model, None).unwrap());
            let mut g = crate::onnx::load_graph(&model, None).unwrap();
            assert!(crate::passes::qdq::rewrite_from(&mut g, 0).unwrap());
            let rewritten = Arc::new(Model::from_graph(g).unwrap());
            let ops = op_names(&rewritten);
            assert!(ops.contains(&want_op) && !ops.contains(&"Binary"), "{ops:?}");
            let want = run_cpu(&plain, shape.to_vec(), x.clone())
                .to_vec::<f32>()
                .unwrap();
            let got = run_cpu(&rewritten, shape.to_vec(), x.clone())
                .to_vec::<f32>()
                .unwrap();
            // the float graph's numbers exactly: the same dequantized values, sum and rounding
            assert!(
                got == want,
                "{op}, signed {signed}: the codes differ from the float graph's"
            );
            // one kernel on wgpu, whose division may round a value at a half step the other way
            let gpu = run_on(
                ExecutorKind::Wgpu(AdapterChoice::Auto),
                &rewritten,
                shape.to_vec(),
                x.clone(),
            )
            .to_vec::<f32>()
            .unwrap();
            let moved = gpu.iter().zip(&want).filter(|(g, w)| g != w).count();
            let worst = gpu
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= 0.07 + 1e-6 && moved * 100 <= n,
                "{op}, signed {signed}: wgpu {moved} moved, by up to {worst}"
            );
        }
    }
}

#[test]
fn by_default_only_adds_of_integer_products_become_qlinear_adds() {
    use crate::passes::qdq::{LARGE_WEIGHT_CODES, rewrite_from};
    let ops_after = |model: &[u8]| {
        let mut g = crate::onnx::load_graph(model, None).unwrap();
        rewrite_from(&mut g, LARGE_WEIGHT_CODES).unwrap();
        g.nodes.iter().map(|n| n.op.name()).collect::<Vec<_>>()
    };
    // between float nodes' rounded values: the float graph fuses each pair into the node before it
    let float_operands = qdq_binary_model("Add", false, &[1, 4, 6, 6]);
    assert!(ops_after(&float_operands).contains(&"Binary"));
    // a residual add of two 64 → 256 1×1 convolutions (16,384 codes each) that become QLinearConv
    let (c, m) = (64usize, 256usize);
    let weight = |seed: usize| -> Vec<f32> {
        (0..m * c)
            .map(|i| ((i * seed) % 31) as f32 * 0.02 - 0.3)
            .collect()
    };
    let per_channel = || vec![super::int("axis", 0)];
    let mut nodes = vec![
        node("QuantizeLinear", &["x", "sx", "zx"], "xq", vec![]),
        node("DequantizeLinear", &["xq", "sx", "zx"], "xd", vec![]),
    ];
    for branch in ["a", "b"] {
        let [w, wq, wd, p, pq, pd] = ["w", "wq", "wd", "p", "pq", "pd"].map(|s| format!("{branch}_{s}"));
        nodes.extend([
            node("QuantizeLinear", &[&w, "sw", "zw"], &wq, per_channel()),
            node("DequantizeLinear", &[&wq, "sw", "zw"], &wd, per_channel()),
            node("Conv", &["xd", &wd], &p, vec![]),
            node("QuantizeLinear", &[&p, "sp", "zp"], &pq, vec![]),
            node("DequantizeLinear", &[&pq, "sp", "zp"], &pd, vec![]),
        ]);
    }
    nodes.extend([
        node("Add", &["a_pd", "b_pd"], "s", vec![]),
        node("QuantizeLinear", &["s", "sy", "zy"], "sq", vec![]),
        node("DequantizeLinear", &["sq", "sy", "zy"], "y", vec![]),
    ]);
    let inits = vec![
        init("a_w", &[m as i64, c as i64, 1, 1], &weight(7)),
        init("b_w", &[m as i64, c as i64, 1, 1], &weight(11)),
        init("sx", &[], &[0.05]),
        codes("zx", 2, &[], &[100]),
        init("sw", &[m as i64], &vec![0.01; m]),
        codes("zw", 3, &[m as i64], &vec![0; m]),
        init("sp", &[], &[0.1]),
        codes("zp", 2, &[], &[120]),
        init("sy", &[], &[0.2]),
        codes("zy", 2, &[], &[110]),
    ];
    let model = bytes(nodes, inits, &[1, c as i64, 5, 5], &[1, m as i64, 5, 5]);
    let ops = ops_after(&model);
    assert!(ops.contains(&"QLinearAdd") && !ops.contains(&"Binary"), "{ops:?}");
    check(&model, &[1, c, 5, 5], "QLinearAdd");
}

/// `y = DQ(Q(Gemm(DQ(Q(x)), DQ(Q(w)), DQ(bias))))` with `transB = 1`, as `quantize_static`
/// writes a classifier's head: w [n, k] per output channel, the bias INT32 codes at scale
/// `sx · sw` per channel (`bias_scale_factor` scales that, to make it wrong), or w and the bias per
/// tensor unless `per_channel`.
fn qdq_gemm_model(k: usize, n: usize, rows: usize, bias_scale_factor: f32, per_channel: bool) -> Vec<u8> {
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 7) % 23) as f32 * 0.03 - 0.33).collect();
    let channels = if per_channel { n } else { 1 };
    let w_scale: Vec<f32> = (0..channels).map(|c| 0.01 + 0.005 * c as f32).collect();
    let param_dims: &[i64] = if per_channel { &[n as i64] } else { &[] };
    let sx = 0.05f32;
    let bias_scale: Vec<f32> = w_scale.iter().map(|s| sx * s * bias_scale_factor).collect();
    let bias: Vec<i32> = (0..n as i32).map(|c| (c - 3) * 97).collect();
    let axis0 = || vec![super::int("axis", 0)];
    let nodes = vec![
        node("QuantizeLinear", &["x", "sx", "zx"], "xq", vec![]),
        node("DequantizeLinear", &["xq", "sx", "zx"], "xd", vec![]),
        node("QuantizeLinear", &["w", "sw", "zw"], "wq", axis0()),
        node("DequantizeLinear", &["wq", "sw", "zw"], "wd", axis0()),
        node("DequantizeLinear", &["b", "sb", "zb"], "bd", axis0()),
        node("Gemm", &["xd", "wd", "bd"], "p", vec![super::int("transB", 1)]),
        node("QuantizeLinear", &["p", "sy", "zy"], "pq", vec![]),
        node("DequantizeLinear", &["pq", "sy", "zy"], "y", vec![]),
    ];
    let inits = vec![
        init("w", &[n as i64, k as i64], &w),
        init("sx", &[], &[sx]),
        codes("zx", 2, &[], &[100]),
        init("sw", param_dims, &w_scale),
        codes("zw", 3, param_dims, &vec![0; channels]),
        codes("b", 6, &[n as i64], &bias),
        init("sb", param_dims, &bias_scale),
        codes("zb", 6, param_dims, &vec![0; channels]),
        init("sy", &[], &[0.1]),
        codes("zy", 2, &[], &[120]),
    ];
    bytes(nodes, inits, &[rows as i64, k as i64], &[rows as i64, n as i64])
}

#[test]
fn qdq_gemm_with_a_bias_becomes_qlinear_matmul_with_the_same_numbers_on_both_executors() {
    let (k, n, rows) = (10, 7, 3);
    for per_channel in [true, false] {
        let model = qdq_gemm_model(k, n, rows, 1.0, per_channel);
        check(&model, &[rows, k], "QLinearMatMul");
        let mut g = crate::onnx::load_graph(&model, None).unwrap();
        assert!(crate::passes::qdq::rewrite_from(&mut g, 0).unwrap());
        let rewritten = Arc::new(Model::from_graph(g).unwrap());
        assert!(!op_names(&rewritten).contains(&"Gemm"));
        // the bias is one per column on wgpu too, whether the scale is one per column or one
        let plain = Arc::new(Model::from_bytes(&model, None).unwrap());
        let x = inputs(rows * k);
        let want = run_cpu(&plain, vec![rows, k], x.clone()).to_vec::<f32>().unwrap();
        let gpu = run_on(
            ExecutorKind::Wgpu(AdapterChoice::Auto),
            &rewritten,
            vec![rows, k],
            x,
        )
        .to_vec::<f32>()
        .unwrap();
        for (i, (g, w)) in gpu.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 0.1 + 1e-6,
                "per channel {per_channel}: wgpu element {i}: {g} against {w}"
            );
        }
    }
}

#[test]
fn a_bias_at_another_scale_than_the_products_keeps_the_float_product() {
    // its codes added to the sums would be off by the factor
    let model = qdq_gemm_model(10, 7, 3, 2.0, true);
    let mut g = crate::onnx::load_graph(&model, None).unwrap();
    crate::passes::qdq::rewrite_from(&mut g, 0).unwrap();
    let ops: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
    assert!(
        ops.contains(&"Gemm") && !ops.contains(&"QLinearMatMul"),
        "{ops:?}"
    );
}

/// x → Q/DQ → Conv 3×3 (8 channels, INT8 per channel) → Q/DQ, then (when `pool`) MaxPool 3×3 / 2
/// padded by 1 between QDQ pairs of the convolution's output scale and zero point: a ResNet's stem.
fn qdq_stem_model(pool: bool) -> Vec<u8> {
    let (c, m) = (3, 8);
    let w: Vec<f32> = (0..m * c * 9)
        .map(|i| ((i * 13) % 29) as f32 * 0.02 - 0.28)
        .collect();
    let per_channel = || vec![super::int("axis", 0)];
    let mut nodes = vec![
        node("QuantizeLinear", &["x", "sx", "zx"], "xq", vec![]),
        node("DequantizeLinear", &["xq", "sx", "zx"], "xd", vec![]),
        node("QuantizeLinear", &["w", "sw", "zw"], "wq", per_channel()),
        node("DequantizeLinear", &["wq", "sw", "zw"], "wd", per_channel()),
        node(
            "Conv",
            &["xd", "wd"],
            "a",
            vec![super::ints("pads", &[1, 1, 1, 1])],
        ),
        node("QuantizeLinear", &["a", "sa", "za"], "aq", vec![]),
    ];
    let out = if pool {
        let window = vec![
            super::ints("kernel_shape", &[3, 3]),
            super::ints("strides", &[2, 2]),
            super::ints("pads", &[1, 1, 1, 1]),
        ];
        nodes.extend([
            node("DequantizeLinear", &["aq", "sa", "za"], "ad", vec![]),
            node("MaxPool", &["ad"], "p", window),
            node("QuantizeLinear", &["p", "sa", "za"], "pq", vec![]),
            node("DequantizeLinear", &["pq", "sa", "za"], "y", vec![]),
        ]);
        [1, m as i64, 7, 6]
    } else {
        nodes.push(node("DequantizeLinear", &["aq", "sa", "za"], "y", vec![]));
        [1, m as i64, 13, 11]
    };
    let inits = vec![
        init("w", &[m as i64, c as i64, 3, 3], &w),
        init("sx", &[], &[0.05]),
        codes("zx", 2, &[], &[100]),
        init("sw", &[m as i64], &vec![0.02; m]),
        codes("zw", 3, &[m as i64], &vec![0; m]),
        init("sa", &[], &[0.04]),
        codes("za", 2, &[], &[90]),
    ];
    bytes(nodes, inits, &[1, c as i64, 13, 11], &out)
}

#[test]
fn a_max_pool_between_pairs_of_one_scale_pools_the_codes_on_both_executors() {
    let rewritten = |model: &[u8]| {
        let mut g = crate::onnx::load_graph(model, None).unwrap();
        assert!(crate::passes::qdq::rewrite_from(&mut g, 0).unwrap());
        Arc::new(Model::from_graph(g).unwrap())
    };
    let (stem, pooled) = (
        rewritten(&qdq_stem_model(false)),
        rewritten(&qdq_stem_model(true)),
    );
    let ops = op_names(&pooled);
    assert!(ops.contains(&"MaxPool"), "{ops:?}");
    assert_eq!(
        ops.iter().filter(|&&o| o == "DequantizeLinear").count(),
        1,
        "{ops:?}"
    );
    let shape = vec![1, 3, 13, 11];
    let x = inputs(3 * 13 * 11);
    for kind in [ExecutorKind::Cpu, ExecutorKind::Wgpu(AdapterChoice::Auto)] {
        // the pool of the convolution's values, from the model without it: −∞ outside the plane
        let conv = run_on(kind.clone(), &stem, shape.clone(), x.clone())
            .to_vec::<f32>()
            .unwrap();
        let got = run_on(kind.clone(), &pooled, shape.clone(), x.clone())
            .to_vec::<f32>()
            .unwrap();
        for (i, &g) in got.iter().enumerate() {
            let (ch, oy, ox) = (i / 42, i % 42 / 6, i % 6);
            let mut want = f32::NEG_INFINITY;
            for (ky, kx) in (0..3).flat_map(|ky| (0..3).map(move |kx| (ky, kx))) {
                let (iy, ix) = ((2 * oy + ky) as isize - 1, (2 * ox + kx) as isize - 1);
                if (0..13).contains(&iy) && (0..11).contains(&ix) {
                    want = want.max(conv[ch * 143 + iy as usize * 11 + ix as usize]);
                }
            }
            assert_eq!(g, want, "{kind:?} element {i}");
        }
    }
}
