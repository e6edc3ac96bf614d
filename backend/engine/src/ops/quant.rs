//! Quantization: QuantizeLinear, DequantizeLinear (per-tensor, per-axis and blocked), DynamicQuantizeLinear,
//! MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators. The kernels
//! are in `cpu/quant/`; scales and zero points are ordinary inputs (constants in exported models,
//! graph inputs in the ONNX node tests), so nothing here needs their values when the plan is built.

use super::chain::Chain;
use super::prelude::*;
use crate::cpu::quant::igemm::{self, ConvGeom};
use crate::cpu::quant::linear::{self, Layout, int_buf, int_range, ints};
use crate::cpu::quant::linear::{Bias, Requantize};
use crate::cpu::quant::qconv::{PackedFilters, conv_q};
use crate::cpu::quant::qdepthwise;
use crate::cpu::quant::qgemm::{Codes, PackedLeft, PackedRight, QKernel, RowOffset, Sink, Sums, qgemm};
use crate::ir::{AutoPad, ConvWindow, QuantOp, UnaryOp};
use crate::wgpu::kernels::idot::ByteCodes;
use crate::wgpu::kernels::quant::{self as gpu_quant, IconvGeom, IgemmShape, ParamLayout, ScaleIndex};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("QuantizeLinear", 10, convert, &FAMILY),
    OnnxOp::new("DequantizeLinear", 10, convert, &FAMILY),
    OnnxOp::new("DynamicQuantizeLinear", 11, convert, &FAMILY),
    OnnxOp::new("MatMulInteger", 10, convert, &FAMILY),
    OnnxOp::new("ConvInteger", 10, convert, &FAMILY),
    OnnxOp::new("QLinearMatMul", 10, convert, &FAMILY),
    OnnxOp::new("QLinearConv", 10, convert, &FAMILY),
];

/// The IR ops of this module: `Op::Quant`.
pub(super) static FAMILY: Family = Family {
    name: "quant",
    plan_time: false,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu,
    wgpu,
};

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let q = match n.op_type.as_str() {
        "QuantizeLinear" => return quantize_linear(cx, name, a, inputs),
        "DequantizeLinear" => QuantOp::DequantizeLinear {
            axis: a.int("axis", 1)?,
            block_size: block_size(a)?,
            output_dtype: output_dtype(a)?,
        },
        "DynamicQuantizeLinear" => QuantOp::DynamicQuantizeLinear,
        "MatMulInteger" => QuantOp::MatMulInteger,
        // the IR op's ninth input (a bias) is the QDQ pass's, not ONNX's
        "QLinearMatMul" if inputs.len() > 8 => {
            return Err(EngineError::invalid(format!(
                "QLinearMatMul takes 8 inputs; '{name}' has {}: remove the inputs after y_zero_point",
                inputs.len()
            )));
        }
        "QLinearMatMul" => QuantOp::QLinearMatMul,
        "ConvInteger" => QuantOp::ConvInteger(conv_window(a)?),
        "QLinearConv" => QuantOp::QLinearConv(conv_window(a)?),
        other => return Err(not_registered(other)),
    };
    Ok(Converted::Node(Op::Quant(q), inputs.to_vec()))
}

/// QuantizeLinear; to INT4 or UINT4 (by `output_dtype` or a 4-bit zero point) it quantizes to the
/// byte type that carries the 4-bit one, then saturates to the 4-bit range: clamping to the byte's
/// range first does not change the result, as the 4-bit range lies inside it.
fn quantize_linear(
    cx: &mut Ctx<'_>,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let code = a.int("output_dtype", 0)?;
    let zero_point = inputs.get(2).copied().flatten();
    let four_bit = match crate::onnx::int4::widened(code as i32) {
        Some(wide) => Some(wide),
        None => zero_point
            .filter(|z| cx.four_bit.contains(z))
            .and_then(|z| cx.graph.values[z.0].dtype),
    };
    let output_dtype = match four_bit {
        Some(wide) => Some(wide),
        None => output_dtype(a)?,
    };
    let q = Op::Quant(QuantOp::QuantizeLinear {
        axis: a.int("axis", 1)?,
        block_size: block_size(a)?,
        output_dtype,
    });
    let Some(wide) = four_bit else {
        return Ok(Converted::Node(q, inputs.to_vec()));
    };
    let x = need(inputs, 0, "x")?;
    let scale = need(inputs, 1, "y_scale")?;
    let mut chain = Chain::new(cx, name);
    let mut q_inputs = vec![x, scale];
    q_inputs.extend(zero_point);
    let wide_q = chain.push("quantized", q, &q_inputs);
    let (min, max) = crate::onnx::int4::range(wide);
    Ok(chain.finish(Op::Unary(UnaryOp::Clip { min, max }), &[wide_q]))
}

fn block_size(a: &Attrs<'_>) -> Result<usize> {
    let b = a.int("block_size", 0)?;
    usize::try_from(b).map_err(|_| EngineError::invalid(format!("block_size {b} is negative")))
}

fn output_dtype(a: &Attrs<'_>) -> Result<Option<DataType>> {
    match a.int("output_dtype", 0)? {
        0 => Ok(None),
        code => DataType::from_onnx(code as i32).map(Some).ok_or_else(|| {
            EngineError::unsupported(format!(
                "output_dtype {code} (an ONNX TensorProto type code) has no KServe datatype; \
                 quantize to UINT8, INT8, UINT16, INT16, UINT4 or INT4"
            ))
        }),
    }
}

fn conv_window(a: &Attrs<'_>) -> Result<ConvWindow> {
    Ok(ConvWindow {
        kernel_shape: a.usizes("kernel_shape")?,
        strides: a.usizes("strides")?,
        pads: a.usizes("pads")?,
        dilations: a.usizes("dilations")?,
        group: a.int("group", 1)?.max(1) as usize,
        auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
    })
}

fn param_input(_op: &Op, _i: usize) -> bool {
    false
}

/// Refuses a QuantizeLinear input that is neither a float type nor INT32.
fn quantizable(x: DataType) -> Result<()> {
    if x.is_float() || x == DataType::I32 {
        return Ok(());
    }
    Err(EngineError::invalid(format!(
        "QuantizeLinear input x is {x}; it must be a float type or INT32"
    )))
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    let Op::Quant(q) = op else {
        return Err(wrong_family(op, "quant"));
    };
    let n_in = ins.len();
    let quant = |q: QuantOp, outputs: Vec<(DataType, Vec<usize>)>| -> Result<Resolved> {
        Ok(concrete(Op::Quant(q), n_in, outputs))
    };
    match q {
        QuantOp::QLinearBinary(_) => Err(wrong_family(op, "quant")),
        QuantOp::QuantizeLinear {
            axis,
            block_size,
            output_dtype,
        } => {
            let x = req(ins, 0, "x")?;
            quantizable(x.dtype)?;
            let axis = check_params(x.shape, req(ins, 1, "y_scale")?, opt(ins, 2), *axis, *block_size)?;
            let zp_dtype = opt(ins, 2).map(|z| z.dtype);
            let to = match (output_dtype, zp_dtype) {
                (Some(o), Some(z)) if *o != z => {
                    return Err(EngineError::invalid(format!(
                        "QuantizeLinear: output_dtype {o} differs from y_zero_point's type {z}; they must agree"
                    )));
                }
                (Some(o), _) => *o,
                (None, Some(z)) => z,
                (None, None) => DataType::U8,
            };
            int_range(to)?;
            let q = QuantOp::QuantizeLinear {
                axis: axis as i64,
                block_size: *block_size,
                output_dtype: Some(to),
            };
            quant(q, vec![(to, x.shape.to_vec())])
        }
        QuantOp::DequantizeLinear {
            axis,
            block_size,
            output_dtype,
        } => {
            let x = req(ins, 0, "x")?;
            let scale = req(ins, 1, "x_scale")?;
            if !matches!(
                x.dtype,
                DataType::U8 | DataType::I8 | DataType::U16 | DataType::I16 | DataType::I32
            ) {
                return Err(EngineError::unsupported(format!(
                    "DequantizeLinear input x is {}; the engine dequantizes UINT8, INT8, UINT16, INT16 and INT32",
                    x.dtype
                )));
            }
            if let Some(z) = opt(ins, 2)
                && z.dtype != x.dtype
            {
                return Err(EngineError::invalid(format!(
                    "DequantizeLinear: x is {} but x_zero_point is {}; they must have one type",
                    x.dtype, z.dtype
                )));
            }
            let axis = check_params(x.shape, scale, opt(ins, 2), *axis, *block_size)?;
            let to = output_dtype.unwrap_or(scale.dtype);
            float_only(to, "DequantizeLinear output")?;
            let q = QuantOp::DequantizeLinear {
                axis: axis as i64,
                block_size: *block_size,
                output_dtype: Some(to),
            };
            quant(q, vec![(to, x.shape.to_vec())])
        }
        QuantOp::QuantizeDequantize {
            axis,
            block_size,
            codes,
        } => {
            let x = req(ins, 0, "x")?;
            let scale = req(ins, 1, "scale")?;
            quantizable(x.dtype)?;
            if scale.dtype != DataType::F32 {
                return Err(EngineError::internal(format!(
                    "QuantizeDequantize with a {} scale: the pass makes it for FP32 scales only",
                    scale.dtype
                )));
            }
            let axis = check_params(x.shape, scale, opt(ins, 2), *axis, *block_size)?;
            int_range(*codes)?;
            let q = QuantOp::QuantizeDequantize {
                axis: axis as i64,
                block_size: *block_size,
                codes: *codes,
            };
            quant(q, vec![(DataType::F32, x.shape.to_vec())])
        }
        QuantOp::DynamicQuantizeLinear => {
            let x = req(ins, 0, "x")?;
            if x.dtype != DataType::F32 {
                return Err(EngineError::invalid(format!(
                    "DynamicQuantizeLinear input x is {}; it must be FP32",
                    x.dtype
                )));
            }
            quant(
                q.clone(),
                vec![
                    (DataType::U8, x.shape.to_vec()),
                    (DataType::F32, Vec::new()),
                    (DataType::U8, Vec::new()),
                ],
            )
        }
        QuantOp::MatMulInteger => {
            let a = int8(req(ins, 0, "A")?, "MatMulInteger input A")?;
            let b = int8(req(ins, 1, "B")?, "MatMulInteger input B")?;
            let mm = MatMulShape::new(a.shape, b.shape)?;
            zero_point_shape(
                opt(ins, 2),
                a.dtype,
                &[mm.m],
                "MatMulInteger a_zero_point",
                "row of A",
            )?;
            zero_point_shape(
                opt(ins, 3),
                b.dtype,
                &[mm.n],
                "MatMulInteger b_zero_point",
                "column of B",
            )?;
            quant(q.clone(), vec![(DataType::I32, mm.out)])
        }
        QuantOp::QLinearMatMul => {
            let a = int8(req(ins, 0, "a")?, "QLinearMatMul input a")?;
            let b = int8(req(ins, 3, "b")?, "QLinearMatMul input b")?;
            let mm = MatMulShape::new(a.shape, b.shape)?;
            scale_shape(
                req(ins, 1, "a_scale")?,
                &[mm.m],
                "QLinearMatMul a_scale",
                "row of a",
            )?;
            zero_point_shape(
                Some(req(ins, 2, "a_zero_point")?),
                a.dtype,
                &[mm.m],
                "QLinearMatMul a_zero_point",
                "row of a",
            )?;
            scale_shape(
                req(ins, 4, "b_scale")?,
                &[mm.n],
                "QLinearMatMul b_scale",
                "column of b",
            )?;
            zero_point_shape(
                Some(req(ins, 5, "b_zero_point")?),
                b.dtype,
                &[mm.n],
                "QLinearMatMul b_zero_point",
                "column of b",
            )?;
            scale_shape(req(ins, 6, "y_scale")?, &[], "QLinearMatMul y_scale", "")?;
            let yz = req(ins, 7, "y_zero_point")?;
            int8(yz, "QLinearMatMul y_zero_point")?;
            zero_point_shape(Some(yz), yz.dtype, &[], "QLinearMatMul y_zero_point", "")?;
            // not an ONNX input: the QDQ pass's bias of a Gemm
            if let Some(bias) = opt(ins, 8)
                && (bias.dtype != DataType::I32 || bias.shape != [mm.n])
            {
                return Err(EngineError::invalid(format!(
                    "QLinearMatMul bias is {} {:?}; it must be INT32 [{}] (one per column of b)",
                    bias.dtype, bias.shape, mm.n
                )));
            }
            quant(q.clone(), vec![(yz.dtype, mm.out)])
        }
        QuantOp::ConvInteger(win) => {
            let x = int8(req(ins, 0, "x")?, "ConvInteger input x")?;
            let w = int8(req(ins, 1, "w")?, "ConvInteger input w")?;
            let (win, out) = conv_shape(win, x.shape, w.shape, "ConvInteger")?;
            zero_point_shape(opt(ins, 2), x.dtype, &[], "ConvInteger x_zero_point", "")?;
            zero_point_shape(
                opt(ins, 3),
                w.dtype,
                &[w.shape[0]],
                "ConvInteger w_zero_point",
                "output channel",
            )?;
            quant(QuantOp::ConvInteger(win), vec![(DataType::I32, out)])
        }
        QuantOp::QLinearConv(win) => {
            let x = int8(req(ins, 0, "x")?, "QLinearConv input x")?;
            let w = int8(req(ins, 3, "w")?, "QLinearConv input w")?;
            let (win, out) = conv_shape(win, x.shape, w.shape, "QLinearConv")?;
            let m = w.shape[0];
            scale_shape(req(ins, 1, "x_scale")?, &[], "QLinearConv x_scale", "")?;
            zero_point_shape(
                Some(req(ins, 2, "x_zero_point")?),
                x.dtype,
                &[],
                "QLinearConv x_zero_point",
                "",
            )?;
            scale_shape(
                req(ins, 4, "w_scale")?,
                &[m],
                "QLinearConv w_scale",
                "output channel",
            )?;
            zero_point_shape(
                Some(req(ins, 5, "w_zero_point")?),
                w.dtype,
                &[m],
                "QLinearConv w_zero_point",
                "output channel",
            )?;
            scale_shape(req(ins, 6, "y_scale")?, &[], "QLinearConv y_scale", "")?;
            let yz = req(ins, 7, "y_zero_point")?;
            int8(yz, "QLinearConv y_zero_point")?;
            zero_point_shape(Some(yz), yz.dtype, &[], "QLinearConv y_zero_point", "")?;
            if let Some(bias) = opt(ins, 8)
                && (bias.dtype != DataType::I32 || bias.shape != [m])
            {
                return Err(EngineError::invalid(format!(
                    "QLinearConv bias is {} {:?}; it must be INT32 [{m}] (one per output channel)",
                    bias.dtype, bias.shape
                )));
            }
            quant(QuantOp::QLinearConv(win), vec![(yz.dtype, out)])
        }
    }
}

/// Checks a scale and its zero point against `x` and returns the normalised axis (0 when per-tensor).
fn check_params(
    x: &[usize],
    scale: InVal<'_>,
    zero_point: Option<InVal<'_>>,
    axis: i64,
    block_size: usize,
) -> Result<usize> {
    float_only(scale.dtype, "quantization scale")?;
    let per_tensor = block_size == 0 && scale.shape.len() <= 1 && scale.shape.iter().product::<usize>() == 1;
    let axis = if per_tensor {
        0
    } else {
        norm_axis(axis, x.len(), "axis")?
    };
    Layout::new(x, scale.shape, axis, block_size, "scale")?;
    if let Some(z) = zero_point
        && z.shape != scale.shape
        && !(per_tensor && z.shape.iter().product::<usize>() == 1)
    {
        return Err(EngineError::invalid(format!(
            "zero point of shape {:?} differs from the scale's shape {:?}; they must match",
            z.shape, scale.shape
        )));
    }
    Ok(axis)
}

/// Refuses anything but UINT8 and INT8 for the integer products.
pub(super) fn int8<'a>(v: InVal<'a>, what: &str) -> Result<InVal<'a>> {
    if matches!(v.dtype, DataType::U8 | DataType::I8) {
        Ok(v)
    } else {
        Err(EngineError::invalid(format!(
            "{what} is {}; it must be UINT8 or INT8",
            v.dtype
        )))
    }
}

/// A scale: one value, or one per `per` (`per_what` names it).
pub(super) fn scale_shape(v: InVal<'_>, per: &[usize], what: &str, per_what: &str) -> Result<()> {
    float_only(v.dtype, what)?;
    per_value_shape(v.shape, per, what, per_what)
}

/// A zero point (when present): `dtype`, and one value or one per `per`.
pub(super) fn zero_point_shape(
    v: Option<InVal<'_>>,
    dtype: DataType,
    per: &[usize],
    what: &str,
    per_what: &str,
) -> Result<()> {
    let Some(v) = v else { return Ok(()) };
    if v.dtype != dtype {
        return Err(EngineError::invalid(format!(
            "{what} is {} but its tensor is {dtype}; they must have one type",
            v.dtype
        )));
    }
    per_value_shape(v.shape, per, what, per_what)
}

fn per_value_shape(shape: &[usize], per: &[usize], what: &str, per_what: &str) -> Result<()> {
    let one = shape.len() <= 1 && shape.iter().product::<usize>() == 1;
    if one || (!per.is_empty() && shape == per) {
        return Ok(());
    }
    let expected = if per.is_empty() {
        "one value".to_string()
    } else {
        format!("one value or {per:?} (one per {per_what})")
    };
    Err(EngineError::invalid(format!(
        "{what} has shape {shape:?}; expected {expected}"
    )))
}

/// The shapes of a numpy matmul: 1-D operands promoted, batch dims broadcast.
struct MatMulShape {
    /// a's shape, 1-D promoted to [1, K]
    a: Vec<usize>,
    /// b's shape, 1-D promoted to [K, 1]
    b: Vec<usize>,
    /// the broadcast batch dims
    batch: Vec<usize>,
    m: usize,
    k: usize,
    n: usize,
    /// the output shape (promoted dims removed)
    out: Vec<usize>,
}

impl MatMulShape {
    fn new(a: &[usize], b: &[usize]) -> Result<MatMulShape> {
        if a.is_empty() || b.is_empty() {
            return Err(EngineError::invalid("matrix product inputs must have rank ≥ 1"));
        }
        let mut pa = a.to_vec();
        let mut pb = b.to_vec();
        if a.len() == 1 {
            pa.insert(0, 1);
        }
        if b.len() == 1 {
            pb.push(1);
        }
        let (ra, rb) = (pa.len(), pb.len());
        let (m, k, k2, n) = (pa[ra - 2], pa[ra - 1], pb[rb - 2], pb[rb - 1]);
        if k != k2 {
            return Err(EngineError::invalid(format!(
                "matrix product of {a:?} and {b:?}: inner dims {k} and {k2} differ"
            )));
        }
        let batch = broadcast_shapes(&pa[..ra - 2], &pb[..rb - 2])?;
        let mut out = batch.clone();
        if a.len() > 1 {
            out.push(m);
        }
        if b.len() > 1 {
            out.push(n);
        }
        Ok(MatMulShape {
            a: pa,
            b: pb,
            batch,
            m,
            k,
            n,
            out,
        })
    }

    /// For each output matrix, the index of the a and b matrices it multiplies (broadcasting).
    fn pairs(&self) -> Vec<(usize, usize)> {
        let count: usize = self.batch.iter().product();
        let ia = source_index(&self.batch, &self.a[..self.a.len() - 2], count);
        let ib = source_index(&self.batch, &self.b[..self.b.len() - 2], count);
        ia.into_iter().zip(ib).collect()
    }
}

/// For each of `count` row-major indices over `out`, the index over `src` (right-aligned, size-1 dims
/// broadcast).
fn source_index(out: &[usize], src: &[usize], count: usize) -> Vec<usize> {
    let lead = out.len() - src.len();
    (0..count)
        .map(|mut i| {
            let (mut idx, mut stride) = (0, 1);
            for d in (0..out.len()).rev() {
                let coord = i % out[d];
                i /= out[d];
                if d >= lead {
                    let s = src[d - lead];
                    idx += if s == 1 { 0 } else { coord * stride };
                    stride *= s;
                }
            }
            idx
        })
        .collect()
}

/// Resolves a convolution window for x and w; returns it with explicit pads and the output shape.
fn conv_shape(win: &ConvWindow, x: &[usize], w: &[usize], what: &str) -> Result<(ConvWindow, Vec<usize>)> {
    if x.len() < 3 || w.len() != x.len() {
        return Err(EngineError::invalid(format!(
            "{what} needs x [N, C, spatial…] and w of the same rank, got {x:?} and {w:?}"
        )));
    }
    let ns = x.len() - 2;
    let kernel = if win.kernel_shape.is_empty() {
        w[2..].to_vec()
    } else {
        win.kernel_shape.clone()
    };
    if kernel != w[2..] {
        return Err(EngineError::invalid(format!(
            "{what}: kernel_shape {kernel:?} differs from w's spatial dims {:?}",
            &w[2..]
        )));
    }
    let (c, group) = (x[1], win.group);
    if group == 0 || !w[0].is_multiple_of(group) || w[1] * group != c {
        return Err(EngineError::invalid(format!(
            "{what}: x has {c} channels, w {w:?} with group {group} expects {}",
            w[1] * group
        )));
    }
    let strides = defaults(&win.strides, ns, 1);
    let dilations = defaults(&win.dilations, ns, 1);
    let (spatial, pads) = window(
        &x[2..],
        &kernel,
        &strides,
        &win.pads,
        &dilations,
        win.auto_pad,
        false,
    )?;
    let mut out = vec![x[0], w[0]];
    out.extend(spatial);
    Ok((
        ConvWindow {
            kernel_shape: kernel,
            strides,
            pads,
            dilations,
            group,
            auto_pad: AutoPad::NotSet,
        },
        out,
    ))
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let Op::Quant(q) = op else {
        return Err(wrong_family(op, "quant"));
    };
    let out0 = outs
        .first()
        .ok_or_else(|| EngineError::internal(format!("{} without outputs", q.name())))?;
    match q {
        QuantOp::QLinearBinary(_) => Err(wrong_family(op, "quant")),
        QuantOp::QuantizeLinear { axis, block_size, .. } => {
            let (x, xs) = arg(ins, 0)?;
            let (scale, ss) = arg(ins, 1)?;
            let layout = Layout::new(xs, ss, *axis as usize, *block_size, "y_scale")?;
            let zp = optional_ints(ins, 2, "y_zero_point")?;
            let (x, scale) = (f32_of(x), f32_of(scale));
            if let Some(codes) = linear::quantize_8bit(&x, &scale, zp.as_deref(), layout, out0.0) {
                return Ok(vec![codes]);
            }
            let y = linear::quantize(&x, &scale, zp.as_deref(), layout, int_range(out0.0)?);
            Ok(vec![int_buf(out0.0, y)?])
        }
        QuantOp::DequantizeLinear { axis, block_size, .. } => {
            let (x, xs) = arg(ins, 0)?;
            let (scale, ss) = arg(ins, 1)?;
            let layout = Layout::new(xs, ss, *axis as usize, *block_size, "x_scale")?;
            let zp = optional_ints(ins, 2, "x_zero_point")?;
            if let Some(y) = linear::dequantize_8bit(x, &f32_of(scale), zp.as_deref(), layout) {
                return Ok(vec![back(out0.0, y)]);
            }
            let narrow = !matches!(x, Buf::I32(_));
            let y = linear::dequantize(&ints(x, "x")?, &f32_of(scale), zp.as_deref(), layout, narrow);
            Ok(vec![back(out0.0, y)])
        }
        QuantOp::QuantizeDequantize {
            axis,
            block_size,
            codes,
        } => {
            let (x, xs) = arg(ins, 0)?;
            let (scale, ss) = arg(ins, 1)?;
            let layout = Layout::new(xs, ss, *axis as usize, *block_size, "scale")?;
            let zp = optional_ints(ins, 2, "zero_point")?;
            let y = linear::quantize_dequantize(
                &f32_of(x),
                &f32_of(scale),
                zp.as_deref(),
                layout,
                int_range(*codes)?,
            );
            Ok(vec![back(out0.0, y)])
        }
        QuantOp::DynamicQuantizeLinear => {
            let (x, _) = arg(ins, 0)?;
            let (y, scale, zp) = linear::dynamic_quantize(&f32_of(x));
            Ok(vec![Buf::U8(y), Buf::F32(vec![scale]), Buf::U8(vec![zp])])
        }
        QuantOp::MatMulInteger => {
            let (values, _) = matmul_acc(ins, [0, 1, 2, 3], prep, &Sums)?;
            Ok(vec![Buf::I32(values)])
        }
        QuantOp::QLinearMatMul => {
            let (_, sa) = arg(ins, 0)?;
            let (_, sb) = arg(ins, 3)?;
            let shape = MatMulShape::new(sa, sb)?;
            let a_scale = f32_of(arg(ins, 1)?.0);
            let b_scale = f32_of(arg(ins, 4)?.0);
            let y_scale = first_f32(arg(ins, 6)?.0)?;
            // the product's rows: each matrix's m rows, one matrix after another
            let rows = shape.pairs().len() * shape.m;
            let row_mult: Vec<f32> = if a_scale.len() == 1 {
                vec![a_scale[0] / y_scale]
            } else {
                (0..rows).map(|i| a_scale[i % shape.m] / y_scale).collect()
            };
            let (zp, range) = (first_int(arg(ins, 7)?.0)?, int_range(out0.0)?);
            let bias = optional_bias(ins)?;
            let bias = bias.as_deref().map_or(Bias::None, Bias::Columns);
            let idx = [0, 3, 2, 5];
            Ok(vec![match out0.0 {
                DataType::U8 => {
                    let sink = Requantize::new(bias, &row_mult, &b_scale, zp, range);
                    Buf::U8(matmul_acc(ins, idx, prep, &sink)?.0)
                }
                DataType::I8 => {
                    let sink = Requantize::new(bias, &row_mult, &b_scale, zp, range);
                    Buf::I8(matmul_acc(ins, idx, prep, &sink)?.0)
                }
                other => return Err(EngineError::internal(format!("QLinearMatMul writing {other}"))),
            }])
        }
        QuantOp::ConvInteger(win) => Ok(vec![Buf::I32(conv_acc(ins, win, [0, 1, 2, 3], prep, &Sums)?)]),
        QuantOp::QLinearConv(win) => {
            let x_scale = first_f32(arg(ins, 1)?.0)?;
            let (w_scale, m) = (f32_of(arg(ins, 4)?.0), arg(ins, 3)?.1[0]);
            let y_scale = first_f32(arg(ins, 6)?.0)?;
            let bias = optional_bias(ins)?;
            let bias = bias.as_deref().map_or(Bias::None, Bias::Rows);
            let row_mult: Vec<f32> = (0..m).map(|c| x_scale * per(&w_scale, c) / y_scale).collect();
            let (zp, range) = (first_int(arg(ins, 7)?.0)?, int_range(out0.0)?);
            let idx = [0, 3, 2, 5];
            Ok(vec![match out0.0 {
                DataType::U8 => {
                    let sink = Requantize::new(bias, &row_mult, &[1.0], zp, range);
                    Buf::U8(conv_acc(ins, win, idx, prep, &sink)?)
                }
                DataType::I8 => {
                    let sink = Requantize::new(bias, &row_mult, &[1.0], zp, range);
                    Buf::I8(conv_acc(ins, win, idx, prep, &sink)?)
                }
                other => return Err(EngineError::internal(format!("QLinearConv writing {other}"))),
            }])
        }
    }
}

/// QLinearConv's and the QDQ pass's QLinearMatMul's INT32 bias (input 8), when given.
fn optional_bias(ins: &[In<'_>]) -> Result<Option<Vec<i32>>> {
    ins.get(8)
        .copied()
        .flatten()
        .map(|(b, _)| ints(b, "B"))
        .transpose()
}

/// Value `i` of a per-tensor or per-index parameter.
fn per(v: &[f32], i: usize) -> f32 {
    if v.len() == 1 { v[0] } else { v[i] }
}

pub(super) fn first_f32(b: &Buf) -> Result<f32> {
    f32_of(b)
        .first()
        .copied()
        .ok_or_else(|| EngineError::invalid("an empty scale tensor"))
}

pub(super) fn first_int(b: &Buf) -> Result<i32> {
    ints(b, "zero point")?
        .first()
        .copied()
        .ok_or_else(|| EngineError::invalid("an empty zero point tensor"))
}

/// Optional input `i` (a zero point) as integers, when present.
fn optional_ints(ins: &[In<'_>], i: usize, what: &str) -> Result<Option<Vec<i32>>> {
    ins.get(i)
        .copied()
        .flatten()
        .map(|(z, _)| ints(z, what))
        .transpose()
}

/// The integer matmul of inputs `[a, b, a_zero_point, b_zero_point]` at the given indices, its
/// rows (each matrix's, one matrix after another) through `sink`, and its shape; `prep`: b packed
/// at plan time, when it is a constant.
fn matmul_acc<S: Sink>(
    ins: &[In<'_>],
    [ia, ib, iaz, ibz]: [usize; 4],
    prep: Option<&Prepared>,
    sink: &S,
) -> Result<(Vec<S::Out>, MatMulShape)> {
    let (a, sa) = arg(ins, ia)?;
    let (b, sb) = arg(ins, ib)?;
    let shape = MatMulShape::new(sa, sb)?;
    let zero_points = |i: usize| optional_ints(ins, i, "zero point");
    let (az, bz) = (zero_points(iaz)?, zero_points(ibz)?);
    if let (Some(kernel), Some(ac), Some(bc)) = (QKernel::current(), codes(a), codes(b)) {
        let packed_b = match prep {
            Some(Prepared::QRhs(r)) if sb.len() == 2 && r.fits(kernel, shape.k, shape.n, ac.signed()) => {
                Some(r)
            }
            _ => None,
        };
        let values = matmul_codes(
            kernel,
            ac,
            bc,
            packed_b,
            &shape,
            az.as_deref(),
            bz.as_deref(),
            sink,
        );
        return Ok((values, shape));
    }
    let (m, k, n) = (shape.m, shape.k, shape.n);
    let a = igemm::centred(&ints(a, "A")?, |i| {
        az.as_ref()
            .map_or(0, |z| z[if z.len() == 1 { 0 } else { (i / k) % m }])
    });
    let b = igemm::centred(&ints(b, "B")?, |i| {
        bz.as_ref().map_or(0, |z| z[if z.len() == 1 { 0 } else { i % n }])
    });
    let pairs = shape.pairs();
    let mut values = vec![0i32; pairs.len() * m * n];
    for (o, (pa, pb)) in pairs.into_iter().enumerate() {
        igemm::igemm(
            m,
            k,
            n,
            &a[pa * m * k..(pa + 1) * m * k],
            &b[pb * k * n..(pb + 1) * k * n],
            &mut values[o * m * n..(o + 1) * m * n],
        );
    }
    let rows = values.len() / n.max(1);
    Ok((sink.rows(values, rows, n), shape))
}

/// An 8-bit buffer's codes (the integer products take UINT8 and INT8 only).
fn codes(b: &Buf) -> Option<Codes<'_>> {
    match b {
        Buf::U8(v) => Some(Codes::u8(v)),
        Buf::I8(v) => Some(Codes::i8(v)),
        _ => None,
    }
}

/// [`matmul_acc`] on the raw codes with [`qgemm`]: a's zero points one or one per row, b's one or
/// one per column (absent = 0); `packed_b`: a 2-D b already packed.
#[allow(clippy::too_many_arguments)]
fn matmul_codes<S: Sink>(
    kernel: QKernel,
    a: Codes<'_>,
    b: Codes<'_>,
    packed_b: Option<&PackedRight>,
    shape: &MatMulShape,
    az: Option<&[i32]>,
    bz: Option<&[i32]>,
    sink: &S,
) -> Vec<S::Out> {
    let (m, k, n) = (shape.m, shape.k, shape.n);
    let (za, zb) = (az.unwrap_or(&[0]), bz.unwrap_or(&[0]));
    let pairs = shape.pairs();
    let mut values = vec![S::Out::default(); pairs.len() * m * n];
    let stacked = pairs.iter().enumerate().all(|(o, &(pa, pb))| pa == o && pb == 0);
    if stacked {
        // one b for every a matrix (a weight): one product with a's matrices stacked as rows
        let rows = pairs.len() * m;
        let l = PackedLeft::pack(kernel, a.slice(0..rows * k), rows, k);
        let owned;
        let r = match packed_b {
            Some(r) => r,
            None => {
                owned = PackedRight::pack(kernel, b.slice(0..k * n), k, n, a.signed());
                &owned
            }
        };
        let zl: Vec<i32> = (0..if za.len() == 1 { 1 } else { rows })
            .map(|i| za[i % za.len()])
            .collect();
        qgemm(&l, r, &zl, zb, sink, &mut values);
        return values;
    }
    // b batched (3-D or more): each of its matrices packed once, when first read
    let mut per_b: Vec<Option<PackedRight>> = vec![None; pairs.iter().map(|p| p.1 + 1).max().unwrap_or(0)];
    for (o, (pa, pb)) in pairs.into_iter().enumerate() {
        let l = PackedLeft::pack(kernel, a.slice(pa * m * k..(pa + 1) * m * k), m, k);
        let r = per_b[pb].get_or_insert_with(|| {
            PackedRight::pack(kernel, b.slice(pb * k * n..(pb + 1) * k * n), k, n, a.signed())
        });
        let rows = RowOffset {
            inner: sink,
            rows: o * m,
        };
        qgemm(&l, r, za, zb, &rows, &mut values[o * m * n..(o + 1) * m * n]);
    }
    values
}

/// The integer convolution of inputs `[x, w, x_zero_point, w_zero_point]` at the given indices,
/// `[n, m, out…]`, each output channel's sums through `sink`; `prep`: the filters packed at plan
/// time, when they are a constant.
fn conv_acc<S: Sink>(
    ins: &[In<'_>],
    win: &ConvWindow,
    [ix, iw, ixz, iwz]: [usize; 4],
    prep: Option<&Prepared>,
    sink: &S,
) -> Result<Vec<S::Out>> {
    let (x, sx) = arg(ins, ix)?;
    let (w, sw) = arg(ins, iw)?;
    let (_, out) = conv_shape(win, sx, sw, "integer convolution")?;
    let geom = ConvGeom::of(win, sx, sw, &out[2..]);
    let zero_points = |i: usize| optional_ints(ins, i, "zero point");
    let (xz, wz) = (zero_points(ixz)?, zero_points(iwz)?);
    let x_zp = xz.as_ref().and_then(|z| z.first().copied()).unwrap_or(0);
    if let (Some(xc), Some(wc), true) = (codes(x), codes(w), qdepthwise::applies(&geom)) {
        let values = qdepthwise::depthwise_q(xc, x_zp, wc, wz.as_deref().unwrap_or(&[0]), &geom);
        return Ok(sink.rows(values, geom.m, geom.output.iter().product()));
    }
    if let (Some(kernel), Some(xc), Some(wc)) = (QKernel::current(), codes(x), codes(w)) {
        let symmetric = wz.as_ref().is_none_or(|z| z.iter().all(|&v| v == 0));
        let owned;
        let filters = match prep {
            Some(Prepared::QConvFilters(f)) if f.fits(kernel, &geom, symmetric) => f,
            _ => {
                owned = PackedFilters::for_conv(kernel, wc, &geom, symmetric);
                &owned
            }
        };
        return conv_q(
            kernel,
            xc,
            x_zp,
            filters,
            wz.as_deref().unwrap_or(&[0]),
            &geom,
            sink,
        );
    }
    let per_filter: usize = sw[1..].iter().product();
    let x = igemm::centred(&ints(x, "x")?, |_| x_zp);
    let w = igemm::centred(&ints(w, "w")?, |i| {
        wz.as_ref()
            .map_or(0, |z| z[if z.len() == 1 { 0 } else { i / per_filter }])
    });
    let values = igemm::conv_i32(&x, &w, &geom);
    Ok(sink.rows(values, geom.m, geom.output.iter().product()))
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let Op::Quant(q) = &n.op else {
        return Err(gpu_wrong_family(&n.op, "quant"));
    };
    let name = c.out_name(n, 0);
    let out_dtype = c.g.values[Compiler::out_id(n, 0)?.0].dtype;
    let range = || int_range(out_dtype).map_err(|e| GpuError::invalid(e.to_string()));
    match q {
        QuantOp::QLinearBinary(_) => Err(gpu_wrong_family(&n.op, "quant")),
        QuantOp::QuantizeLinear { axis, block_size, .. }
        | QuantOp::DequantizeLinear { axis, block_size, .. }
        | QuantOp::QuantizeDequantize { axis, block_size, .. } => {
            let x = c.input(n, 0)?;
            let scale = c.input(n, 1)?;
            let layout = Layout::new(&x.shape, &scale.shape, *axis as usize, *block_size, "scale")
                .map_err(|e| GpuError::invalid(e.to_string()))?;
            let zero_point = match c.opt_input(n, 2)? {
                Some(z) => z,
                None => c.b.constant_i32(
                    &format!("{name}#zero_point"),
                    &[scale.numel()],
                    &vec![0; scale.numel()],
                )?,
            };
            let layout = match layout {
                Layout::PerTensor => ParamLayout::PerTensor,
                Layout::PerAxis { dim, inner } => ParamLayout::PerAxis { dim, inner },
                Layout::Blocked { dim, inner, block } => ParamLayout::Blocked { dim, inner, block },
            };
            let y = if matches!(q, QuantOp::QuantizeLinear { .. }) {
                gpu_quant::quantize(&mut c.b, &name, &x, &scale, &zero_point, layout, range()?)?
            } else if let QuantOp::QuantizeDequantize { codes, .. } = q {
                // two kernels, as the pair it replaces ran
                let range = int_range(*codes).map_err(|e| GpuError::invalid(e.to_string()))?;
                let q = gpu_quant::quantize(
                    &mut c.b,
                    &format!("{name}#codes"),
                    &x,
                    &scale,
                    &zero_point,
                    layout,
                    range,
                )?;
                let out = c.dev_type(Compiler::out_id(n, 0)?)?;
                gpu_quant::dequantize(&mut c.b, &name, &q, &scale, &zero_point, layout, out)?
            } else {
                let out = c.dev_type(Compiler::out_id(n, 0)?)?;
                gpu_quant::dequantize(&mut c.b, &name, &x, &scale, &zero_point, layout, out)?
            };
            c.set(n, 0, y)
        }
        QuantOp::DynamicQuantizeLinear => {
            let x = c.input(n, 0)?;
            let names = [c.out_name(n, 0), c.out_name(n, 1), c.out_name(n, 2)];
            let [y, scale, zero_point] =
                gpu_quant::dynamic_quantize(&mut c.b, [&names[0], &names[1], &names[2]], &x)?;
            c.set(n, 0, y)?;
            c.set(n, 1, scale)?;
            c.set(n, 2, zero_point)
        }
        QuantOp::MatMulInteger | QuantOp::QLinearMatMul => {
            let qlinear = matches!(q, QuantOp::QLinearMatMul);
            let [ia, ib, iaz, ibz] = if qlinear { [0, 3, 2, 5] } else { [0, 1, 2, 3] };
            let a = c.input(n, ia)?;
            let bm = c.input(n, ib)?;
            let shape =
                MatMulShape::new(&a.shape, &bm.shape).map_err(|e| GpuError::invalid(e.to_string()))?;
            let a = c.b.alias(&a, &shape.a)?;
            let bm = c.b.alias(&bm, &shape.b)?;
            let a_zp = zero_point_or_zero(c, n, iaz, &name)?;
            let b_zp = zero_point_or_zero(c, n, ibz, &name)?;
            let s = IgemmShape {
                m: shape.m,
                k: shape.k,
                n: shape.n,
                a_strides: batch_strides(&shape.batch, &shape.a[..shape.a.len() - 2]),
                b_strides: batch_strides(&shape.batch, &shape.b[..shape.b.len() - 2]),
                batch: shape.batch.clone(),
            };
            let codes = byte_codes(c, n, ia, ib)?;
            let mut acc = gpu_quant::igemm(&mut c.b, &name, &s, codes, &a, &bm, &a_zp, &b_zp)?;
            if qlinear {
                let a_scale = c.input(n, 1)?;
                let b_scale = c.input(n, 4)?;
                let rows = ScaleIndex {
                    dim: if a_scale.numel() > 1 { shape.m } else { 1 },
                    inner: shape.n,
                };
                let cols = ScaleIndex {
                    dim: if b_scale.numel() > 1 { shape.n } else { 1 },
                    inner: 1,
                };
                let (y_scale, y_zp) = (c.input(n, 6)?, c.input(n, 7)?);
                // the QDQ pass's bias (a Gemm's C), one per column
                let bias = c.opt_input(n, 8)?;
                let by_column = ScaleIndex {
                    dim: shape.n,
                    inner: 1,
                };
                acc = gpu_quant::requantize(
                    &mut c.b,
                    &name,
                    &acc,
                    (&a_scale, rows),
                    (&b_scale, cols),
                    &y_scale,
                    &y_zp,
                    bias.as_ref().map(|b| (b, by_column)),
                    range()?,
                )?;
            }
            let y = c.b.alias(&acc, &shape.out)?;
            c.set(n, 0, y)
        }
        QuantOp::ConvInteger(win) | QuantOp::QLinearConv(win) => {
            let qlinear = matches!(q, QuantOp::QLinearConv(_));
            let [ix, iw, ixz, iwz] = if qlinear { [0, 3, 2, 5] } else { [0, 1, 2, 3] };
            let x = c.input(n, ix)?;
            let w = c.input(n, iw)?;
            let out = c.out_shape(n, 0)?;
            let ns = x.rank().saturating_sub(2);
            if !(1..=2).contains(&ns) {
                return Err(GpuError::unsupported(format!(
                    "{} '{name}' has {ns} spatial dims; the wgpu kernel takes 1 or 2 (the CPU executor takes any)",
                    q.name()
                )));
            }
            // A 1-D convolution runs as a 2-D one of height 1.
            let two = |v: &[usize], fill: usize| if v.len() == 1 { [fill, v[0]] } else { [v[0], v[1]] };
            let (xs, ws) = (&x.shape, &w.shape);
            let g = IconvGeom {
                out: [
                    out[0],
                    out[1],
                    if ns == 1 { 1 } else { out[2] },
                    out[out.len() - 1],
                ],
                channels: xs[1],
                group: win.group,
                input: two(&xs[2..], 1),
                kernel: two(&ws[2..], 1),
                strides: two(&win.strides, 1),
                pad_begin: two(&win.pads[..ns], 0),
                dilations: two(&win.dilations, 1),
            };
            let x = c.b.alias(&x, &[xs[0], xs[1], g.input[0], g.input[1]])?;
            let w = c.b.alias(&w, &[ws[0], ws[1], g.kernel[0], g.kernel[1]])?;
            let x_zp = zero_point_or_zero(c, n, ixz, &name)?;
            let w_zp = zero_point_or_zero(c, n, iwz, &name)?;
            let codes = byte_codes(c, n, iw, ix)?;
            let mut acc = gpu_quant::iconv(&mut c.b, &name, &g, codes, &x, &w, &x_zp, &w_zp)?;
            if qlinear {
                let x_scale = c.input(n, 1)?;
                let w_scale = c.input(n, 4)?;
                let per_x = ScaleIndex { dim: 1, inner: 1 };
                let per_channel = ScaleIndex {
                    dim: if w_scale.numel() > 1 { g.out[1] } else { 1 },
                    inner: g.out[2] * g.out[3],
                };
                let (y_scale, y_zp) = (c.input(n, 6)?, c.input(n, 7)?);
                let bias = c.opt_input(n, 8)?;
                let by_channel = ScaleIndex {
                    dim: g.out[1],
                    inner: g.out[2] * g.out[3],
                };
                acc = gpu_quant::requantize(
                    &mut c.b,
                    &name,
                    &acc,
                    (&x_scale, per_x),
                    (&w_scale, per_channel),
                    &y_scale,
                    &y_zp,
                    bias.as_ref().map(|b| (b, by_channel)),
                    range()?,
                )?;
            }
            let y = c.b.alias(&acc, &out)?;
            c.set(n, 0, y)
        }
    }
}

/// The offsets that make inputs `ia`'s and `ib`'s codes signed bytes, for the packed dot-product kernels:
/// 128 for uint8, 0 for int8; `None` when either has wider codes.
fn byte_codes(c: &Compiler<'_>, n: &Node, ia: usize, ib: usize) -> GpuResult<Option<ByteCodes>> {
    let offset = |i: usize| -> GpuResult<Option<i32>> {
        let id = n
            .input(i)
            .ok_or_else(|| GpuError::invalid(format!("input {i} is missing")))?;
        Ok(match c.g.values[id.0].dtype {
            DataType::U8 => Some(128),
            DataType::I8 => Some(0),
            _ => None,
        })
    };
    Ok(offset(ia)?.zip(offset(ib)?).map(|(a, b)| ByteCodes { a, b }))
}

/// Input `i` (a zero point), or a constant 0 when the node has none.
pub(super) fn zero_point_or_zero(c: &mut Compiler<'_>, n: &Node, i: usize, name: &str) -> GpuResult<DTensor> {
    match c.opt_input(n, i)? {
        Some(z) => Ok(z),
        None => c.b.constant_i32(&format!("{name}#zero_point{i}"), &[1], &[0]),
    }
}

/// Matrix strides of an operand with batch dims `src` (right-aligned) over the output's batch dims `out`:
/// 0 where the operand has size 1 or lacks the dim.
fn batch_strides(out: &[usize], src: &[usize]) -> Vec<usize> {
    let lead = out.len() - src.len();
    let mut strides = vec![0; out.len()];
    let mut stride = 1;
    for d in (lead..out.len()).rev() {
        let size = src[d - lead];
        strides[d] = if size == 1 { 0 } else { stride };
        stride *= size;
    }
    strides
}
