//! Operators whose values are known when the plan is built: Constant, Shape, Size, ConstantOfShape, Range.
//! They never reach an executor.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::onnx::decode_tensor;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("Constant", 1, convert, &FAMILY),
    OnnxOp::new("Shape", 1, convert, &FAMILY),
    OnnxOp::new("Size", 1, convert, &FAMILY),
    OnnxOp::new("ConstantOfShape", 9, convert, &FAMILY),
    OnnxOp::new("Range", 11, convert, &FAMILY),
];

/// The most elements a ConstantOfShape or Range makes: they are built on the host while a plan is
/// made, so a hostile shape must not be able to ask for all of memory (2^27: 1 GiB of i64).
const MAX_HOST_ELEMENTS: usize = 1 << 27;

/// The IR ops of this module: Shape, Size, ConstantOfShape, Range.
pub(super) static FAMILY: Family = Family {
    name: "constant",
    plan_time: true,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu: plan_time_cpu,
    wgpu: plan_time_wgpu,
};

fn convert(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let ins = inputs.to_vec();
    let op = n.op_type.as_str();
    match op {
        "Shape" => Ok(Converted::Node(
            Op::Shape {
                start: a.int("start", 0)?,
                end: if a.has("end") {
                    Some(a.int("end", 0)?)
                } else {
                    None
                },
            },
            ins,
        )),
        "Size" => Ok(Converted::Node(Op::Size, ins)),
        "ConstantOfShape" => {
            let value = match a.tensor("value")? {
                Some(t) => decode_tensor(t, None, "ConstantOfShape value")?,
                None => Tensor::scalar_f32(0.0),
            };
            if value.len() != 1 {
                return Err(EngineError::invalid(
                    "ConstantOfShape value must have one element",
                ));
            }
            Ok(Converted::Node(Op::ConstantOfShape { value }, ins))
        }
        "Range" => Ok(Converted::Node(Op::Range, ins)),
        "Constant" => {
            let t = if let Some(t) = a.tensor("value")? {
                decode_tensor(t, None, "Constant value")?
            } else if let Some(v) = a.opt_float("value_float")? {
                Tensor::scalar_f32(v)
            } else if let Some(v) = a.floats("value_floats")? {
                Tensor::from_vec(vec![v.len()], v)?
            } else if a.has("value_int") {
                Tensor::from_vec(vec![], vec![a.int("value_int", 0)?])?
            } else if let Some(v) = a.ints("value_ints")? {
                Tensor::from_vec(vec![v.len()], v)?
            } else if a.has("value_string") {
                Tensor::from_strings(vec![], &[a.string("value_string", "")?.into_bytes()])?
            } else if let Some(v) = a.strings("value_strings")? {
                let bytes: Vec<Vec<u8>> = v.into_iter().map(String::into_bytes).collect();
                Tensor::from_strings(vec![bytes.len()], &bytes)?
            } else if a.has("sparse_value") {
                return Err(EngineError::unsupported("Constant with a sparse_value"));
            } else {
                return Err(EngineError::invalid("Constant has no value attribute"));
            };
            Ok(Converted::Constant(t))
        }
        other => Err(not_registered(other)),
    }
}

fn param_input(op: &Op, _i: usize) -> bool {
    matches!(op, Op::ConstantOfShape { .. } | Op::Range)
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    match op {
        Op::Shape { start, end } => {
            let x = req(ins, 0, "data")?;
            let r = x.shape.len() as i64;
            let clamp = |v: i64| if v < 0 { (v + r).clamp(0, r) } else { v.clamp(0, r) };
            let s = clamp(*start) as usize;
            let e = clamp(end.unwrap_or(r)) as usize;
            let dims: Vec<i64> = if s < e {
                x.shape[s..e].iter().map(|&d| d as i64).collect()
            } else {
                Vec::new()
            };
            Ok(Resolved::Host(vec![i64_tensor(vec![dims.len()], dims)?]))
        }
        Op::Size => {
            let x = req(ins, 0, "data")?;
            Ok(Resolved::Host(vec![i64_tensor(
                vec![],
                vec![x.shape.iter().product::<usize>() as i64],
            )?]))
        }
        Op::ConstantOfShape { value } => {
            let s = host_ints(req(ins, 0, "shape")?, "ConstantOfShape shape")?;
            if s.iter().any(|&d| d < 0) {
                return Err(EngineError::invalid(format!(
                    "ConstantOfShape shape {s:?} has a negative dim"
                )));
            }
            let shape: Vec<usize> = s.iter().map(|&d| d as usize).collect();
            let n = checked_elements(&shape)?;
            if n > MAX_HOST_ELEMENTS {
                return Err(EngineError::invalid(format!(
                    "ConstantOfShape {shape:?} makes {n} elements, more than the {MAX_HOST_ELEMENTS} the engine \
                     builds while planning; check the shape it is given"
                )));
            }
            let mut data = Vec::with_capacity(n * value.data.len());
            for _ in 0..n {
                data.extend_from_slice(&value.data);
            }
            Ok(Resolved::Host(vec![Tensor {
                dtype: value.dtype,
                shape,
                data: data.into(),
            }]))
        }
        Op::Range => {
            let s = req(ins, 0, "start")?;
            let l = req(ins, 1, "limit")?;
            let d = req(ins, 2, "delta")?;
            let (sv, lv, dv) = (
                host_f64(s, "Range start")?,
                host_f64(l, "Range limit")?,
                host_f64(d, "Range delta")?,
            );
            let (sv, lv, dv) = (sv[0], lv[0], dv[0]);
            if dv == 0.0 {
                return Err(EngineError::invalid("Range delta is 0"));
            }
            let n = ((lv - sv) / dv).ceil().max(0.0) as usize;
            if n > MAX_HOST_ELEMENTS {
                return Err(EngineError::invalid(format!(
                    "Range produces {n} elements, more than {MAX_HOST_ELEMENTS}"
                )));
            }
            let t = match s.dtype {
                DataType::F32 => {
                    let (s0, d0) = (sv as f32, dv as f32);
                    Tensor::from_vec(vec![n], (0..n).map(|i| s0 + i as f32 * d0).collect())?
                }
                DataType::F64 => Tensor::from_vec(vec![n], (0..n).map(|i| sv + i as f64 * dv).collect())?,
                DataType::I64 => {
                    let (s0, d0) = (
                        s.host.map(|t| t.to_i64_vec()).transpose()?.unwrap_or_default()[0],
                        d.host.map(|t| t.to_i64_vec()).transpose()?.unwrap_or_default()[0],
                    );
                    Tensor::from_vec(vec![n], (0..n as i64).map(|i| s0 + i * d0).collect())?
                }
                DataType::I32 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| sv as i32 + i as i32 * dv as i32).collect(),
                )?,
                DataType::I16 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| sv as i16 + i as i16 * dv as i16).collect(),
                )?,
                DataType::F16 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| half::f16::from_f64(sv + i as f64 * dv)).collect(),
                )?,
                DataType::BF16 => Tensor::from_vec(
                    vec![n],
                    (0..n).map(|i| half::bf16::from_f64(sv + i as f64 * dv)).collect(),
                )?,
                other => return Err(EngineError::unsupported(format!("Range of {other}"))),
            };
            Ok(Resolved::Host(vec![t]))
        }
        other => Err(wrong_family(other, "constant")),
    }
}
