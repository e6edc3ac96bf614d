//! QDQ-wrapped products as integer ones: `Q(Conv(DQ(x), DQ(w)))` and `Q(MatMul(DQ(a), DQ(b)))`, with
//! 8-bit codes, a constant weight (per tensor, or per output channel / column) and a per-tensor
//! activation, become QLinearConv and QLinearMatMul on the codes, as onnxruntime runs
//! `quantize_static`'s QDQ models; `Q(Add(DQ(a), DQ(b)))` and `Q(Mul(…))` of per-tensor codes of
//! one type (a ResNet's residual adds) become QLinearAdd and QLinearMul, one pass over the codes
//! with the float graph's numbers, and `Q(MaxPool(DQ(c)))` with one scale and zero point a MaxPool
//! on the codes. A Conv's bias, and a Gemm's C (the Gemm becoming a QLinearMatMul with a bias), is
//! kept when it is the DequantizeLinear of INT32 codes at scale `x_scale · w_scale` with zero point
//! 0 (as `quantize_static` writes them), whose codes the integer node adds before requantizing.
//!
//! The pass runs before constant folding, which would otherwise turn the weight's DequantizeLinear
//! (and the QuantizeLinear of a float weight before it) into a float constant. Grouped and
//! depthwise convolutions stay float: their products are too narrow for the integer GEMM.
//!
//! By default only products whose weight holds [`LARGE_WEIGHT_CODES`] codes or more are rewritten,
//! convolutions doing [`WIDE_CONV_MACS`] multiply-adds per image or more whatever their weight, and
//! the Adds and Muls between the codes of integer nodes: on those (a quantized ResNet-50's) the
//! integer product is the faster, while on small ones (the zoo's `ocr_cls_qdq`, whose weights hold
//! at most 10,000 codes and whose convolutions do at most 1.2 M multiply-adds on its 48 × 192 images) the float kernels
//! between element-wise QuantizeLinear/DequantizeLinear are, and the float graph splits a batch
//! into one-sample runs where the integer one cannot (figures in `docs/benchmarks.md`).
//! `INFERGATE_QDQ_INTEGER=1` rewrites every product, `=0` none (read once per process).

use std::sync::OnceLock;

use crate::error::Result;
use crate::ir::{BinaryOp, ConvWindow, Graph, Node, Op, QuantOp, ValueId};
use crate::passes::{Facts, fold, is_output, same_parameter, sweep};
use crate::specialise::ProbedShapes;
use crate::tensor::{DataType, Tensor};

/// The weight size (codes) from which a product is rewritten by default.
pub(crate) const LARGE_WEIGHT_CODES: usize = 1 << 14;

/// The multiply-adds per image from which a convolution is rewritten by default whatever its
/// weight's size: a ResNet's stem (9,408 codes) runs faster on the codes. Counted on the shapes the
/// model takes at the probe sizes of its dynamic dims (the smaller count of the two), as the model
/// is loaded before any request sets them: a stem of a ResNet with dynamic height and width does
/// 9.6 M there, the zoo's `ocr_cls_qdq`'s largest convolution 0.4 M. (A ResNet's first 1×1
/// convolution, 4,096 codes, does 1 M there and stays float.)
pub(crate) const WIDE_CONV_MACS: usize = 1 << 22;

/// The rewrite of the products `INFERGATE_QDQ_INTEGER` selects (read once); see the module
/// documentation.
pub(crate) fn qdq_to_qlinear(g: &mut Graph) -> Result<bool> {
    static FROM: OnceLock<Option<usize>> = OnceLock::new();
    let from = FROM.get_or_init(|| match std::env::var("INFERGATE_QDQ_INTEGER").as_deref() {
        Ok("1") => Some(0),
        Ok("0") => None,
        _ => Some(LARGE_WEIGHT_CODES),
    });
    match from {
        Some(codes) => rewrite_from(g, *codes),
        None => Ok(false),
    }
}

/// Every QDQ-wrapped Conv and MatMul of `g` whose weight holds `min_codes` codes or more as
/// QLinearConv and QLinearMatMul, and the QDQ-wrapped Adds and Muls of integer nodes' codes (every
/// one when `min_codes` is 0) as QLinearAdd and QLinearMul.
pub(crate) fn rewrite_from(g: &mut Graph, min_codes: usize) -> Result<bool> {
    let mut probes = Probes::default();
    sweep(g, |g, facts, i| {
        let Some(rw) = matched(g, facts, i, min_codes, &mut probes)? else {
            return Ok(None);
        };
        Ok(Some(apply(g, i, rw)))
    })
}

/// What a match rewrites: a node of `op` on `inputs` replaces the product and writes the
/// QuantizeLinear's output; the `dead` nodes go.
struct Rewrite {
    name: String,
    op: Op,
    inputs: Vec<Input>,
    output: ValueId,
    /// the codes' type, recorded on the output so that a product reading it matches in turn
    output_dtype: DataType,
    dead: Vec<usize>,
}

/// An input of the new node: a value of the graph, or a new constant (named after the node).
enum Input {
    Value(ValueId),
    New(&'static str, Tensor),
}

/// A DequantizeLinear feeding the product: its node, its codes, scale and zero point.
struct Dq {
    node: usize,
    codes: ValueId,
    scale: Tensor,
    zero_point: Option<Tensor>,
}

/// The value shapes at the two probe sizes ([`crate::specialise::probe_shapes`]), inferred once a
/// convolution's size is asked for; the rewrites keep the ids of the values they do not remove.
#[derive(Default)]
struct Probes(Option<Option<ProbedShapes>>);

impl Probes {
    /// The multiply-adds per image of a convolution with `weight_codes` codes writing `y`: the
    /// smaller of the two probes' counts, 0 when a probe does not know `y`'s shape.
    fn conv_macs(&mut self, g: &Graph, y: ValueId, weight_codes: usize) -> usize {
        let probes = self.0.get_or_insert_with(|| crate::specialise::probe_shapes(g));
        let Some(probes) = probes else {
            return 0;
        };
        probes
            .iter()
            .map(|m| {
                m.get(&y)
                    .map_or(0, |s| weight_codes * s.iter().skip(2).product::<usize>())
            })
            .min()
            .unwrap_or(0)
    }
}

fn matched(
    g: &Graph,
    facts: &Facts,
    i: usize,
    min_codes: usize,
    probes: &mut Probes,
) -> Result<Option<Rewrite>> {
    let n = &g.nodes[i];
    if let Op::Binary(op @ (BinaryOp::Add | BinaryOp::Mul)) = n.op {
        return matched_binary(g, facts, i, op, min_codes == 0);
    }
    if matches!(n.op, Op::MaxPool { .. }) {
        return matched_max_pool(g, facts, i, min_codes == 0);
    }
    let product = match &n.op {
        Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group: 1,
            auto_pad,
            activation,
        } if activation.is_empty() => Product::Conv(ConvWindow {
            kernel_shape: kernel_shape.clone(),
            strides: strides.clone(),
            pads: pads.clone(),
            dilations: dilations.clone(),
            group: 1,
            auto_pad: *auto_pad,
        }),
        Op::MatMul {
            trans_a: false,
            trans_b: false,
            epilogue,
        } if epilogue.is_empty() => Product::MatMul { trans_b: false },
        Op::Gemm {
            alpha,
            beta,
            trans_a: false,
            trans_b,
            epilogue,
        } if epilogue.is_empty() && *alpha == 1.0 && *beta == 1.0 => Product::MatMul { trans_b: *trans_b },
        _ => return Ok(None),
    };
    let is_conv = matches!(product, Product::Conv(_));
    let (Some(x), Some(w), Some(y)) = (n.input(0), n.input(1), n.output(0)) else {
        return Ok(None);
    };
    let Some(Quantized {
        node: qi,
        codes: qy,
        scale: y_scale,
        zero_point: y_zp,
        dtype: y_dtype,
    }) = quantized(g, facts, y)
    else {
        return Ok(None);
    };
    let Some(dx) = dequantized(g, facts, x, None)? else {
        return Ok(None);
    };
    let Some(x_dtype) = code_dtype(g, facts, dx.codes) else {
        return Ok(None);
    };
    if dx.scale.len() != 1 || !is_int8(x_dtype) {
        return Ok(None);
    }
    // the weight's channels: a Conv's output channels (axis 0), a MatMul's columns (axis 1 of 2,
    // or 0 of a Gemm's transposed weight)
    let channel_axis = match product {
        Product::Conv(_) | Product::MatMul { trans_b: true } => 0,
        Product::MatMul { trans_b: false } => 1,
    };
    let Some(dw) = dequantized(g, facts, w, Some(channel_axis))? else {
        return Ok(None);
    };
    let Some(w_codes) = constant_codes(g, facts, dw.codes)? else {
        return Ok(None);
    };
    if !is_int8(w_codes.dtype) || (!is_conv && w_codes.shape.len() != 2) || w_codes.shape.len() < 2 {
        return Ok(None);
    }
    if w_codes.len() < min_codes && !(is_conv && probes.conv_macs(g, y, w_codes.len()) >= WIDE_CONV_MACS) {
        return Ok(None);
    }
    let channels = w_codes.shape[channel_axis];
    if dw.scale.len() != 1 && dw.scale.len() != channels {
        return Ok(None);
    }
    let mut dead = vec![i, qi];
    // a Conv's bias, a Gemm's C (a MatMul has none)
    let bias = match n.input(2) {
        None => None,
        Some(b) => {
            let Some(db) = dequantized(g, facts, b, Some(0))? else {
                return Ok(None);
            };
            if !bias_scale_is_the_products(&db.scale, &dx.scale, &dw.scale, channels) {
                return Ok(None);
            }
            let Some(codes) = constant_codes(g, facts, db.codes)? else {
                return Ok(None);
            };
            let zero = db
                .zero_point
                .as_ref()
                .is_none_or(|z| z.to_i64_vec().is_ok_and(|v| v.iter().all(|&x| x == 0)));
            if codes.dtype != DataType::I32 || codes.shape != [channels] || !zero {
                return Ok(None);
            }
            dead.extend(private(g, facts, b, db.node));
            Some(Input::New("bias", codes))
        }
    };
    let x_zp = input_zero_point(dx.zero_point, x_dtype, &dx.scale)?;
    let w_zp = input_zero_point(dw.zero_point, w_codes.dtype, &dw.scale)?;
    let y_zp = output_zero_point(y_zp, y_dtype, "y_zero_point")?;
    dead.extend(private(g, facts, x, dx.node));
    if let Some(wdq) = private(g, facts, w, dw.node) {
        dead.push(wdq);
        // the weight's QuantizeLinear (of a float constant) goes with its DequantizeLinear
        if let Some(&p) = facts.producers.get(&dw.codes)
            && facts.uses[dw.codes.0] == 1
            && !is_output(g, dw.codes)
        {
            dead.push(p);
        }
    }
    let (op, w_codes) = match product {
        Product::Conv(win) => (QuantOp::QLinearConv(win), w_codes),
        Product::MatMul { trans_b: false } => (QuantOp::QLinearMatMul, w_codes),
        Product::MatMul { trans_b: true } => (QuantOp::QLinearMatMul, transposed(&w_codes)?),
    };
    let mut inputs = vec![
        Input::Value(dx.codes),
        Input::New("x_scale", dx.scale),
        Input::New("x_zero_point", x_zp),
        Input::New("w", w_codes),
        Input::New("w_scale", dw.scale),
        Input::New("w_zero_point", w_zp),
        Input::New("y_scale", Tensor::scalar_f32(y_scale)),
        y_zp,
    ];
    inputs.extend(bias);
    Ok(Some(Rewrite {
        name: n.name.clone(),
        op: Op::Quant(op),
        inputs,
        output: qy,
        output_dtype: y_dtype,
        dead,
    }))
}

/// The product a match rewrites: a Conv, or a MatMul or Gemm (`trans_b`: its weight is [N, K]).
enum Product {
    Conv(ConvWindow),
    MatMul { trans_b: bool },
}

/// Whether a bias dequantized with `bias_scale` is in the units of the integer product's sums, the
/// input's scale times each channel's weight scale, as `quantize_static` writes it (the same FP32
/// product): only then can its codes be added to the sums.
fn bias_scale_is_the_products(
    bias_scale: &Tensor,
    x_scale: &Tensor,
    w_scale: &Tensor,
    channels: usize,
) -> bool {
    let (Ok(b), Ok(x), Ok(w)) = (
        bias_scale.to_vec::<f32>(),
        x_scale.to_vec::<f32>(),
        w_scale.to_vec::<f32>(),
    ) else {
        return false;
    };
    let per = |v: &[f32], c: usize| if v.len() == 1 { v[0] } else { v[c] };
    (b.len() == 1 || b.len() == channels)
        && (0..channels).all(|c| {
            let want = x[0] * per(&w, c);
            (per(&b, c) - want).abs() <= want.abs() * 1e-6
        })
}

/// A 2-D tensor of one-byte codes, transposed.
fn transposed(t: &Tensor) -> Result<Tensor> {
    let (rows, cols) = (t.shape[0], t.shape[1]);
    let mut out = vec![0u8; rows * cols];
    for (r, row) in t.data.chunks_exact(cols.max(1)).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    Tensor::new(t.dtype, vec![cols, rows], out.into())
}

/// `Q(DQ(a) ∘ DQ(b))` for an Add or a Mul (node `i`) of per-tensor 8-bit codes of one type: a
/// QLinearAdd or QLinearMul on the codes, one pass over them instead of two FP32 tensors. Unless
/// `every`, only where integer nodes write both operands' codes: elsewhere the float graph runs
/// each QuantizeLinear/DequantizeLinear pair as one rounding, fused into the node before it, and
/// the rewrite would write codes the float graph never stores (the zoo's `ocr_cls_qdq`: 290
/// nodes became 359, 15 % slower).
fn matched_binary(g: &Graph, facts: &Facts, i: usize, op: BinaryOp, every: bool) -> Result<Option<Rewrite>> {
    let n = &g.nodes[i];
    let (Some(a), Some(b), Some(y)) = (n.input(0), n.input(1), n.output(0)) else {
        return Ok(None);
    };
    let Some(q) = quantized(g, facts, y) else {
        return Ok(None);
    };
    let (Some(da), Some(db)) = (dequantized(g, facts, a, None)?, dequantized(g, facts, b, None)?) else {
        return Ok(None);
    };
    let integer_operands = integer_codes(g, facts, da.codes) && integer_codes(g, facts, db.codes);
    if !(every || integer_operands) {
        return Ok(None);
    }
    let types = [code_dtype(g, facts, da.codes), code_dtype(g, facts, db.codes)];
    if da.scale.len() != 1 || db.scale.len() != 1 || types.iter().any(|&t| t != Some(q.dtype)) {
        return Ok(None);
    }
    let mut dead = vec![i, q.node];
    dead.extend(private(g, facts, a, da.node));
    dead.extend(private(g, facts, b, db.node));
    let a_zp = input_zero_point(da.zero_point, q.dtype, &da.scale)?;
    let b_zp = input_zero_point(db.zero_point, q.dtype, &db.scale)?;
    let inputs = vec![
        Input::Value(da.codes),
        Input::New("a_scale", da.scale),
        Input::New("a_zero_point", a_zp),
        Input::Value(db.codes),
        Input::New("b_scale", db.scale),
        Input::New("b_zero_point", b_zp),
        Input::New("c_scale", Tensor::scalar_f32(q.scale)),
        output_zero_point(q.zero_point, q.dtype, "c_zero_point")?,
    ];
    Ok(Some(Rewrite {
        name: n.name.clone(),
        op: Op::Quant(QuantOp::QLinearBinary(op)),
        inputs,
        output: q.codes,
        output_dtype: q.dtype,
        dead,
    }))
}

/// `Q(MaxPool(DQ(c)))` (node `i`) where the QuantizeLinear has the DequantizeLinear's per-tensor
/// scale, zero point and type: a MaxPool on the codes, which gives the same codes (dequantizing is
/// increasing, and quantizing a dequantized code gives it back). Unless `every`, only where an
/// integer node writes `c` (a ResNet's stem), as for the Adds.
fn matched_max_pool(g: &Graph, facts: &Facts, i: usize, every: bool) -> Result<Option<Rewrite>> {
    let n = &g.nodes[i];
    if n.outputs.iter().skip(1).any(Option::is_some) {
        return Ok(None);
    }
    let (Some(x), Some(y)) = (n.input(0), n.output(0)) else {
        return Ok(None);
    };
    let (Some(q), Some(dx)) = (quantized(g, facts, y), dequantized(g, facts, x, None)?) else {
        return Ok(None);
    };
    if !(every || integer_codes(g, facts, dx.codes)) {
        return Ok(None);
    }
    // one scale and zero point; a positive scale, so that dequantizing is increasing
    let (qn, dqn) = (&g.nodes[q.node], &g.nodes[dx.node]);
    let same_parameters =
        same_parameter(g, qn.input(1), dqn.input(1)) && same_parameter(g, qn.input(2), dqn.input(2));
    if !same_parameters || q.scale <= 0.0 || code_dtype(g, facts, dx.codes) != Some(q.dtype) {
        return Ok(None);
    }
    let mut dead = vec![i, q.node];
    dead.extend(private(g, facts, x, dx.node));
    Ok(Some(Rewrite {
        name: n.name.clone(),
        op: n.op.clone(),
        inputs: vec![Input::Value(dx.codes)],
        output: q.codes,
        output_dtype: q.dtype,
        dead,
    }))
}

/// Whether an integer node (one this pass wrote, or the model's own) writes the codes `v`.
fn integer_codes(g: &Graph, facts: &Facts, v: ValueId) -> bool {
    facts.producers.get(&v).is_some_and(|&p| {
        matches!(
            g.nodes[p].op,
            Op::Quant(QuantOp::QLinearConv(_) | QuantOp::QLinearMatMul | QuantOp::QLinearBinary(_))
        )
    })
}

/// A per-tensor QuantizeLinear to 8-bit codes, the only reader of a value.
struct Quantized {
    node: usize,
    codes: ValueId,
    scale: f32,
    /// a constant of one value, when the node has one
    zero_point: Option<ValueId>,
    dtype: DataType,
}

/// The only reader of `y`, when it is a per-tensor QuantizeLinear to 8 bits with a constant
/// scale and zero point.
fn quantized(g: &Graph, facts: &Facts, y: ValueId) -> Option<Quantized> {
    let (node, q) = only_reader(g, facts, y)?;
    let Op::Quant(QuantOp::QuantizeLinear {
        block_size: 0,
        output_dtype,
        ..
    }) = &q.op
    else {
        return None;
    };
    let (codes, scale) = (q.output(0)?, scalar_f32(g, q.input(1)?)?);
    let zero_point = match q.input(2) {
        Some(z) => match g.constants.get(&z) {
            Some(t) if t.len() == 1 => Some(z),
            _ => return None,
        },
        None => None,
    };
    let dtype = zero_point
        .and_then(|z| g.constants.get(&z).map(|t| t.dtype))
        .or(*output_dtype)
        .unwrap_or(DataType::U8);
    is_int8(dtype).then_some(Quantized {
        node,
        codes,
        scale,
        zero_point,
        dtype,
    })
}

/// A DequantizeLinear's zero point for the new node: its own, or zeros of `dtype` shaped as its
/// `scale`.
fn input_zero_point(z: Option<Tensor>, dtype: DataType, scale: &Tensor) -> Result<Tensor> {
    match z {
        Some(z) => Ok(z),
        None => Tensor::zeros(dtype, scale.shape.clone()),
    }
}

/// The output's zero point as an input of the new node: the QuantizeLinear's, or a zero of
/// `dtype` (named `what`) when it has none.
fn output_zero_point(z: Option<ValueId>, dtype: DataType, what: &'static str) -> Result<Input> {
    Ok(match z {
        Some(z) => Input::Value(z),
        None => Input::New(what, Tensor::zeros(dtype, Vec::new())?),
    })
}

/// Rewrites node `i` as `rw` says; returns where the sweep goes on.
fn apply(g: &mut Graph, i: usize, rw: Rewrite) -> usize {
    let inputs = rw
        .inputs
        .into_iter()
        .map(|inp| {
            Some(match inp {
                Input::Value(v) => v,
                Input::New(what, t) => {
                    let id = g.add_value(format!("{}#{what}", rw.name), Some(t.dtype));
                    g.values[id.0].shape = Some(t.shape.iter().map(|&d| crate::ir::Dim::Fixed(d)).collect());
                    g.constants.insert(id, t);
                    id
                }
            })
        })
        .collect();
    g.values[rw.output.0].dtype = Some(rw.output_dtype);
    g.nodes[i] = Node {
        name: rw.name,
        op: rw.op,
        inputs,
        outputs: vec![Some(rw.output)],
    };
    let mut dead: Vec<usize> = rw.dead.into_iter().filter(|&d| d != i).collect();
    dead.sort_unstable();
    dead.dedup();
    let before = dead.iter().filter(|&&d| d < i).count();
    for &d in dead.iter().rev() {
        g.nodes.remove(d);
    }
    i - before + 1
}

/// The node reading `v` when it is the only reader (and `v` no graph output).
fn only_reader<'g>(g: &'g Graph, facts: &Facts, v: ValueId) -> Option<(usize, &'g Node)> {
    if facts.uses[v.0] != 1 || is_output(g, v) {
        return None;
    }
    g.nodes
        .iter()
        .enumerate()
        .find(|(_, n)| n.inputs.iter().flatten().any(|&u| u == v))
}

/// Node `node` (producing `v`) when nothing but the product reads `v`, so it goes with the rewrite.
fn private(g: &Graph, facts: &Facts, v: ValueId, node: usize) -> Option<usize> {
    (facts.uses[v.0] == 1 && !is_output(g, v)).then_some(node)
}

/// The DequantizeLinear producing `v`, with a constant FP32 scale: per tensor, or (when
/// `channel_axis` is given) one per index of that axis of its codes.
fn dequantized(g: &Graph, facts: &Facts, v: ValueId, channel_axis: Option<usize>) -> Result<Option<Dq>> {
    let Some(&node) = facts.producers.get(&v) else {
        return Ok(None);
    };
    let n = &g.nodes[node];
    let Op::Quant(QuantOp::DequantizeLinear {
        axis,
        block_size: 0,
        output_dtype,
    }) = &n.op
    else {
        return Ok(None);
    };
    if output_dtype.is_some_and(|d| d != DataType::F32) {
        return Ok(None);
    }
    let (Some(codes), Some(scale)) = (n.input(0), n.input(1).and_then(|s| g.constants.get(&s))) else {
        return Ok(None);
    };
    if scale.dtype != DataType::F32 {
        return Ok(None);
    }
    let zero_point = match n.input(2) {
        None => None,
        Some(z) => match g.constants.get(&z) {
            Some(t) if t.shape == scale.shape || (t.len() == 1 && scale.len() == 1) => Some(t.clone()),
            _ => return Ok(None),
        },
    };
    if scale.len() != 1 {
        // per channel: a 1-D scale along the channel axis of codes whose rank is known
        let Some(want) = channel_axis else {
            return Ok(None);
        };
        let Some(rank) = constant_rank(g, facts, codes) else {
            return Ok(None);
        };
        let ax = if *axis < 0 { *axis + rank as i64 } else { *axis };
        if scale.shape.len() != 1 || ax != want as i64 {
            return Ok(None);
        }
    }
    Ok(Some(Dq {
        node,
        codes,
        scale: scale.clone(),
        zero_point,
    }))
}

/// The rank of a constant (or foldable) value, without evaluating it.
fn constant_rank(g: &Graph, facts: &Facts, v: ValueId) -> Option<usize> {
    if let Some(t) = g.constants.get(&v) {
        return Some(t.shape.len());
    }
    let n = &g.nodes[*facts.producers.get(&v)?];
    n.input(0)
        .and_then(|x| g.constants.get(&x))
        .map(|t| t.shape.len())
}

/// A constant's value, or the value of a QuantizeLinear whose inputs are all constants (a float
/// weight quantized in the graph, which constant folding would otherwise turn into codes later).
fn constant_codes(g: &Graph, facts: &Facts, v: ValueId) -> Result<Option<Tensor>> {
    if let Some(t) = g.constants.get(&v) {
        return Ok(Some(t.clone()));
    }
    let Some(&p) = facts.producers.get(&v) else {
        return Ok(None);
    };
    let n = &g.nodes[p];
    let foldable = matches!(n.op, Op::Quant(QuantOp::QuantizeLinear { .. }))
        && n.inputs.iter().flatten().all(|i| g.constants.contains_key(i));
    if !foldable {
        return Ok(None);
    }
    Ok(fold::evaluate(g, n)?.into_iter().next().flatten())
}

/// The type of the codes `v`: its declared type, or what the QuantizeLinear making it writes.
fn code_dtype(g: &Graph, facts: &Facts, v: ValueId) -> Option<DataType> {
    if let Some(d) = g.values[v.0].dtype {
        return Some(d);
    }
    let n = &g.nodes[*facts.producers.get(&v)?];
    let Op::Quant(QuantOp::QuantizeLinear { output_dtype, .. }) = &n.op else {
        return None;
    };
    let zp = n.input(2).and_then(|z| g.values[z.0].dtype);
    Some(zp.or(*output_dtype).unwrap_or(DataType::U8))
}

/// The one value of a constant FP32 scalar.
fn scalar_f32(g: &Graph, v: ValueId) -> Option<f32> {
    let t = g.constants.get(&v)?;
    match (t.dtype, t.len()) {
        (DataType::F32, 1) => t.to_vec::<f32>().ok()?.first().copied(),
        _ => None,
    }
}

fn is_int8(d: DataType) -> bool {
    matches!(d, DataType::U8 | DataType::I8)
}
