//! Resize: nearest, linear and cubic interpolation with every ONNX coordinate transformation.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::cpu::elementwise::cast;
use crate::cpu::movement;
use crate::ir::{CoordTransform, NearestMode, ResizeMode};
use crate::wgpu::kernels::pool::{self as gpu_pool, ResizeSpec};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    // Upsample (deprecated in opset 10) is Resize with its opset-10 semantics
    OnnxOp {
        until: 9,
        ..OnnxOp::new("Upsample", 7, convert, &FAMILY)
    },
    OnnxOp::new("Resize", 10, convert, &FAMILY),
];

/// The IR ops of this module: Resize.
pub(super) static FAMILY: Family = Family {
    name: "resize",
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
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let opset = cx.opset;
    let ins = inputs.to_vec();
    let op = n.op_type.as_str();
    match op {
        "Resize" => {
            let mode = match a.string("mode", "nearest")?.as_str() {
                "nearest" => ResizeMode::Nearest,
                "linear" | "bilinear" | "trilinear" => ResizeMode::Linear,
                "cubic" | "bicubic" => ResizeMode::Cubic,
                m => return Err(EngineError::invalid(format!("unknown Resize mode '{m}'"))),
            };
            if a.int("antialias", 0)? != 0 {
                return Err(EngineError::unsupported("Resize with antialias=1"));
            }
            let default_coord = if opset < 11 { "asymmetric" } else { "half_pixel" };
            let coord = match a
                .string("coordinate_transformation_mode", default_coord)?
                .as_str()
            {
                "half_pixel" => CoordTransform::HalfPixel,
                "pytorch_half_pixel" => CoordTransform::PytorchHalfPixel,
                "align_corners" => CoordTransform::AlignCorners,
                "asymmetric" => CoordTransform::Asymmetric,
                "tf_crop_and_resize" => CoordTransform::TfCropAndResize,
                "half_pixel_symmetric" => CoordTransform::HalfPixelSymmetric,
                m => {
                    return Err(EngineError::unsupported(format!(
                        "Resize coordinate_transformation_mode '{m}'"
                    )));
                }
            };
            let nearest = match a.string("nearest_mode", "round_prefer_floor")?.as_str() {
                "round_prefer_floor" => NearestMode::RoundPreferFloor,
                "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                "floor" => NearestMode::Floor,
                "ceil" => NearestMode::Ceil,
                m => return Err(EngineError::invalid(format!("unknown nearest_mode '{m}'"))),
            };
            let keep = match a.string("keep_aspect_ratio_policy", "stretch")?.as_str() {
                "stretch" => 0,
                "not_larger" => 1,
                "not_smaller" => 2,
                m => {
                    return Err(EngineError::invalid(format!(
                        "unknown keep_aspect_ratio_policy '{m}'"
                    )));
                }
            };
            let ins = if opset < 11 {
                vec![
                    ins.first().copied().flatten(),
                    None,
                    ins.get(1).copied().flatten(),
                    None,
                ]
            } else {
                ins
            };
            Ok(Converted::Node(
                Op::Resize {
                    mode,
                    coord,
                    nearest,
                    cubic_coeff_a: a.float("cubic_coeff_a", -0.75)?,
                    exclude_outside: a.int("exclude_outside", 0)? != 0,
                    extrapolation_value: a.float("extrapolation_value", 0.0)?,
                    scales: Vec::new(),
                    roi: Vec::new(),
                    keep_aspect_ratio_policy: keep,
                    axes: a.ints("axes")?.unwrap_or_default(),
                },
                ins,
            ))
        }
        "Upsample" => {
            let mode = match a.string("mode", "nearest")?.as_str() {
                "nearest" => ResizeMode::Nearest,
                "linear" | "bilinear" => ResizeMode::Linear,
                m => {
                    return Err(EngineError::unsupported(format!(
                        "Upsample attribute mode='{m}' (supported: nearest, linear)"
                    )));
                }
            };
            let x = need(&ins, 0, "X")?;
            // opset 7 gives the scales as an attribute, opset 9 as an input
            let scales = if opset < 9 {
                let s = a
                    .floats("scales")?
                    .ok_or_else(|| EngineError::invalid("Upsample (opset 7) needs the scales attribute"))?;
                cx.constant(n.name.as_str(), Tensor::from_vec(vec![s.len()], s)?)
            } else {
                need(&ins, 1, "scales")?
            };
            Ok(Converted::Node(
                Op::Resize {
                    mode,
                    // out = floor(in · scale), source = out / scale, nearest rounds down
                    coord: CoordTransform::Asymmetric,
                    nearest: NearestMode::Floor,
                    cubic_coeff_a: -0.75,
                    exclude_outside: false,
                    extrapolation_value: 0.0,
                    scales: Vec::new(),
                    roi: Vec::new(),
                    keep_aspect_ratio_policy: 0,
                    axes: Vec::new(),
                },
                vec![Some(x), None, Some(scales), None],
            ))
        }
        other => Err(not_registered(other)),
    }
}

fn param_input(_op: &Op, i: usize) -> bool {
    i >= 1
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    match op {
        Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a,
            exclude_outside,
            extrapolation_value,
            keep_aspect_ratio_policy,
            axes,
            ..
        } => {
            let x = req(ins, 0, "X")?;
            let r = x.shape.len();
            let axes: Vec<usize> = if axes.is_empty() {
                (0..r).collect()
            } else {
                axes.iter()
                    .map(|&a| norm_axis(a, r, "axis"))
                    .collect::<Result<_>>()?
            };
            let mut scales = vec![1f32; r];
            let mut out = x.shape.to_vec();
            let roi_in = match opt(ins, 1) {
                Some(v) if v.shape.iter().product::<usize>() > 0 => host_f64(v, "Resize roi")?,
                _ => Vec::new(),
            };
            let sizes = match opt(ins, 3) {
                Some(v) if v.shape.iter().product::<usize>() > 0 => Some(host_ints(v, "Resize sizes")?),
                _ => None,
            };
            let sc = match opt(ins, 2) {
                Some(v) if v.shape.iter().product::<usize>() > 0 => Some(host_f64(v, "Resize scales")?),
                _ => None,
            };
            if let Some(sizes) = sizes {
                if sizes.len() != axes.len() {
                    return Err(EngineError::invalid(format!(
                        "Resize sizes {sizes:?} need {} entries",
                        axes.len()
                    )));
                }
                if *keep_aspect_ratio_policy != 0 {
                    let ratios: Vec<f64> = axes
                        .iter()
                        .zip(&sizes)
                        .map(|(&a, &s)| s as f64 / x.shape[a] as f64)
                        .collect();
                    let s = if *keep_aspect_ratio_policy == 1 {
                        ratios.iter().copied().fold(f64::INFINITY, f64::min)
                    } else {
                        ratios.iter().copied().fold(0.0, f64::max)
                    };
                    for &a in &axes {
                        scales[a] = s as f32;
                        out[a] = (x.shape[a] as f64 * s + 0.5).floor() as usize;
                    }
                } else {
                    for (&a, &s) in axes.iter().zip(&sizes) {
                        out[a] = s.max(0) as usize;
                        scales[a] = out[a] as f32 / x.shape[a] as f32;
                    }
                }
            } else if let Some(sc) = sc {
                if sc.len() != axes.len() {
                    return Err(EngineError::invalid(format!(
                        "Resize scales {sc:?} need {} entries",
                        axes.len()
                    )));
                }
                for (&a, &s) in axes.iter().zip(&sc) {
                    if s <= 0.0 {
                        return Err(EngineError::invalid("Resize scales must be positive"));
                    }
                    scales[a] = s as f32;
                    out[a] = (x.shape[a] as f64 * s).floor() as usize;
                }
            } else {
                return Err(EngineError::invalid("Resize needs scales or sizes"));
            }
            let mut roi = Vec::new();
            if *coord == CoordTransform::TfCropAndResize {
                roi = vec![0f32; r];
                roi.extend(std::iter::repeat_n(1f32, r));
                if roi_in.len() == 2 * axes.len() {
                    for (k, &a) in axes.iter().enumerate() {
                        roi[a] = roi_in[k] as f32;
                        roi[a + r] = roi_in[k + axes.len()] as f32;
                    }
                }
            }
            Ok(Resolved::Op {
                op: Op::Resize {
                    mode: *mode,
                    coord: *coord,
                    nearest: *nearest,
                    cubic_coeff_a: *cubic_coeff_a,
                    exclude_outside: *exclude_outside,
                    extrapolation_value: *extrapolation_value,
                    scales,
                    roi,
                    keep_aspect_ratio_policy: 0,
                    axes: Vec::new(),
                },
                inputs: vec![Some(0)],
                outputs: vec![(x.dtype, out)],
            })
        }
        other => Err(wrong_family(other, "resize")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let out0 = || outs.first().map(|o| o.1.as_slice()).unwrap_or(&[]);
    let one = |b: Buf| Ok(vec![b]);
    match op {
        Op::Resize {
            mode,
            coord,
            nearest,
            cubic_coeff_a,
            exclude_outside,
            extrapolation_value,
            scales,
            roi,
            ..
        } => {
            let (x, sx) = arg(ins, 0)?;
            let p = movement::ResizeParams {
                mode: *mode,
                coord: *coord,
                nearest: *nearest,
                cubic_a: *cubic_coeff_a,
                exclude_outside: *exclude_outside,
                extrapolation: *extrapolation_value,
                scales,
                roi,
            };
            let y = movement::resize_f32(&f32_of(x), sx, out0(), &p);
            one(if x.dtype().is_float() {
                back(x.dtype(), y)
            } else {
                cast(&Buf::F32(y), x.dtype())?
            })
        }
        other => Err(wrong_family(other, "resize")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::Resize {
            mode,
            coord,
            nearest,
            extrapolation_value,
            scales,
            roi,
            cubic_coeff_a,
            exclude_outside,
            ..
        } => {
            let x = c.input(n, 0)?;
            let out_shape = c.out_shape(n, 0)?;
            let mode = match mode {
                ResizeMode::Nearest => 0,
                ResizeMode::Linear => 1,
                ResizeMode::Cubic => 2,
            };
            let spec = ResizeSpec {
                mode,
                coord: match coord {
                    CoordTransform::HalfPixel => 0,
                    CoordTransform::PytorchHalfPixel => 1,
                    CoordTransform::AlignCorners => 2,
                    CoordTransform::Asymmetric => 3,
                    CoordTransform::TfCropAndResize => 4,
                    CoordTransform::HalfPixelSymmetric => 5,
                },
                nearest: match nearest {
                    NearestMode::RoundPreferFloor => 0,
                    NearestMode::RoundPreferCeil => 1,
                    NearestMode::Floor => 2,
                    NearestMode::Ceil => 3,
                },
                extrapolation: *extrapolation_value,
                cubic_a: *cubic_coeff_a,
                exclude_outside: *exclude_outside,
            };
            let y = gpu_pool::resize(&mut c.b, &name, &x, spec, scales, roi, &out_shape)?;
            c.set(n, 0, y)
        }
        other => Err(gpu_wrong_family(other, "resize")),
    }
}
