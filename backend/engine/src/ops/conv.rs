//! Convolutions: Conv (with its fused epilogue) and ConvTranspose.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::cpu::conv::{ConvGeom, conv_f32, conv_transpose_f32};
use crate::cpu::epilogue::Epi;
use crate::ir::{self, AutoPad};
use crate::wgpu::expr::{self, EwNode, EwProgram};
use crate::wgpu::kernels::conv::{self as gpu_conv, ConvGeom as GpuConvGeom};
use crate::wgpu::kernels::matmul::Epilogue;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("Conv", 1, convert, &FAMILY),
    OnnxOp::new("ConvTranspose", 1, convert, &FAMILY),
];

/// The IR ops of this module: Conv, ConvTranspose.
pub(super) static FAMILY: Family = Family {
    name: "conv",
    plan_time: false,
    value_dependent_shapes: false,
    param_input,
    resolve,
    cpu,
    wgpu,
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
        "Conv" => Ok(Converted::Node(conv_op(a)?, ins)),
        "ConvTranspose" => Ok(Converted::Node(
            Op::ConvTranspose {
                kernel_shape: a.usizes("kernel_shape")?,
                strides: a.usizes("strides")?,
                pads: a.usizes("pads")?,
                dilations: a.usizes("dilations")?,
                output_padding: a.usizes("output_padding")?,
                output_shape: a.usizes("output_shape")?,
                group: a.int("group", 1)?.max(1) as usize,
                auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
            },
            ins,
        )),
        other => Err(not_registered(other)),
    }
}

/// The IR Conv of an ONNX Conv's attributes (also com.microsoft FusedConv's, which has the same ones).
pub(super) fn conv_op(a: &Attrs<'_>) -> Result<Op> {
    Ok(Op::Conv {
        kernel_shape: a.usizes("kernel_shape")?,
        strides: a.usizes("strides")?,
        pads: a.usizes("pads")?,
        dilations: a.usizes("dilations")?,
        group: a.int("group", 1)?.max(1) as usize,
        auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
        activation: Default::default(),
    })
}

fn param_input(_op: &Op, _i: usize) -> bool {
    false
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    let n_in = ins.len();
    match op {
        Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
            activation,
        } => {
            let x = req(ins, 0, "X")?;
            let w = req(ins, 1, "W")?;
            if x.shape.len() < 3 || w.shape.len() != x.shape.len() {
                return Err(EngineError::invalid(format!(
                    "Conv needs X [N, C, spatial…] and W of the same rank, got {:?} and {:?}",
                    x.shape, w.shape
                )));
            }
            let ns = x.shape.len() - 2;
            let kernel = if kernel_shape.is_empty() {
                w.shape[2..].to_vec()
            } else {
                kernel_shape.clone()
            };
            let c = x.shape[1];
            if *group == 0 || c % group != 0 || w.shape[0] % group != 0 || w.shape[1] * group != c {
                return Err(EngineError::invalid(format!(
                    "Conv: X has {c} channels, W {:?} with group {group} expects {}",
                    w.shape,
                    w.shape[1] * group
                )));
            }
            if let Some(b) = opt(ins, 2)
                && b.shape != [w.shape[0]]
            {
                return Err(EngineError::invalid(format!(
                    "Conv: bias shape {:?}, expected [{}]",
                    b.shape, w.shape[0]
                )));
            }
            let strides = defaults(strides, ns, 1);
            let dilations = defaults(dilations, ns, 1);
            let (spatial, pads) = window(
                &x.shape[2..],
                &kernel,
                &strides,
                pads,
                &dilations,
                *auto_pad,
                false,
            )?;
            let mut out = vec![x.shape[0], w.shape[0]];
            out.extend(spatial);
            check_epilogue(activation, ins, &out)?;
            Ok(concrete(
                Op::Conv {
                    kernel_shape: kernel,
                    strides,
                    pads,
                    dilations,
                    group: *group,
                    auto_pad: AutoPad::NotSet,
                    activation: activation.clone(),
                },
                n_in,
                vec![(x.dtype, out)],
            ))
        }
        Op::ConvTranspose {
            kernel_shape,
            strides,
            pads,
            dilations,
            output_padding,
            output_shape,
            group,
            auto_pad,
        } => {
            let x = req(ins, 0, "X")?;
            let w = req(ins, 1, "W")?;
            if x.shape.len() < 3 || w.shape.len() != x.shape.len() || w.shape[0] != x.shape[1] {
                return Err(EngineError::invalid(format!(
                    "ConvTranspose needs X [N, C, …] and W [C, M/group, …], got {:?} and {:?}",
                    x.shape, w.shape
                )));
            }
            let ns = x.shape.len() - 2;
            let kernel = if kernel_shape.is_empty() {
                w.shape[2..].to_vec()
            } else {
                kernel_shape.clone()
            };
            let strides = defaults(strides, ns, 1);
            let dilations = defaults(dilations, ns, 1);
            let opad = defaults(output_padding, ns, 0);
            let mut pads = if pads.is_empty() {
                vec![0; 2 * ns]
            } else {
                pads.clone()
            };
            if kernel.len() != ns
                || strides.len() != ns
                || dilations.len() != ns
                || opad.len() != ns
                || pads.len() != 2 * ns
            {
                return Err(EngineError::invalid(
                    "ConvTranspose attributes do not match the spatial rank",
                ));
            }
            let mut spatial = vec![0; ns];
            for i in 0..ns {
                let full = strides[i] * (x.shape[i + 2] - 1) + opad[i] + (kernel[i] - 1) * dilations[i] + 1;
                let target = if !output_shape.is_empty() {
                    let os = if output_shape.len() == ns {
                        output_shape[i]
                    } else {
                        output_shape[output_shape.len() - ns + i]
                    };
                    Some(os)
                } else if matches!(auto_pad, AutoPad::SameUpper | AutoPad::SameLower) {
                    Some(x.shape[i + 2] * strides[i])
                } else {
                    None
                };
                if let Some(t) = target {
                    // A target beyond the full output extends it at the end (as the ONNX reference).
                    let total = full.saturating_sub(t);
                    if *auto_pad == AutoPad::SameUpper {
                        pads[i] = total / 2;
                        pads[i + ns] = total - total / 2;
                    } else {
                        pads[i] = total - total / 2;
                        pads[i + ns] = total / 2;
                    }
                    spatial[i] = t;
                } else {
                    if *auto_pad == AutoPad::Valid {
                        pads[i] = 0;
                        pads[i + ns] = 0;
                    }
                    spatial[i] = full.checked_sub(pads[i] + pads[i + ns]).ok_or_else(|| {
                        EngineError::invalid("ConvTranspose pads are larger than the output")
                    })?;
                }
            }
            let mut out = vec![x.shape[0], w.shape[1] * group];
            out.extend(spatial);
            Ok(concrete(
                Op::ConvTranspose {
                    kernel_shape: kernel,
                    strides,
                    pads,
                    dilations,
                    output_padding: opad,
                    output_shape: Vec::new(),
                    group: *group,
                    auto_pad: AutoPad::NotSet,
                },
                n_in.min(3),
                vec![(x.dtype, out)],
            ))
        }
        other => Err(wrong_family(other, "conv")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let out0 = || outs.first().map(|o| o.1.as_slice()).unwrap_or(&[]);
    let one = |b: Buf| Ok(vec![b]);
    match op {
        Op::Conv { activation, .. } => {
            let (x, sx) = arg(ins, 0)?;
            let (w, sw) = arg(ins, 1)?;
            float_only(x.dtype(), "Conv")?;
            let bias = ins.get(2).copied().flatten().map(|(b, _)| f32_of(b));
            let o = out0();
            let g = ConvGeom::of_conv(op, sx, sw, o)
                .ok_or_else(|| EngineError::internal("Conv geometry of a non-Conv op"))?;
            let epi = Epi::new(activation, ins, o, 2)?;
            let packed = match prep {
                Some(Prepared::ConvWeights(p)) => Some(p),
                _ => None,
            };
            let y = conv_f32(&f32_of(x), &f32_of(w), bias.as_deref(), &g, &epi, packed)?;
            one(back(x.dtype(), y))
        }
        Op::ConvTranspose {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            ..
        } => {
            let (x, sx) = arg(ins, 0)?;
            let (w, sw) = arg(ins, 1)?;
            float_only(x.dtype(), "ConvTranspose")?;
            let bias = ins.get(2).copied().flatten().map(|(b, _)| f32_of(b));
            let o = out0();
            let g = ConvGeom {
                n: sx[0],
                c: sx[1],
                m: sw[1] * group,
                group: *group,
                in_sp: &sx[2..],
                out_sp: &o[2..],
                kernel: kernel_shape,
                strides,
                pads,
                dilations,
            };
            one(back(
                x.dtype(),
                conv_transpose_f32(&f32_of(x), &f32_of(w), bias.as_deref(), &g)?,
            ))
        }
        other => Err(wrong_family(other, "conv")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            activation,
            ..
        } => {
            let x = c.input(n, 0)?;
            let w = c.input(n, 1)?;
            let out_shape = c.out_shape(n, 0)?;
            let kernel = if kernel_shape.is_empty() {
                w.shape[2..].to_vec()
            } else {
                kernel_shape.clone()
            };
            let geom = GpuConvGeom {
                kernel,
                strides: strides.clone(),
                pads: pads.clone(),
                dilations: dilations.clone(),
                group: *group,
            };
            conv_like(c, n, &name, x, w, geom, out_shape, activation, false)
        }
        Op::ConvTranspose {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            ..
        } => {
            let x = c.input(n, 0)?;
            let w = c.input(n, 1)?;
            let out_shape = c.out_shape(n, 0)?;
            let kernel = if kernel_shape.is_empty() {
                w.shape[2..].to_vec()
            } else {
                kernel_shape.clone()
            };
            let geom = GpuConvGeom {
                kernel,
                strides: strides.clone(),
                pads: pads.clone(),
                dilations: dilations.clone(),
                group: *group,
            };
            conv_like(c, n, &name, x, w, geom, out_shape, &ir::Epilogue::default(), true)
        }
        other => Err(gpu_wrong_family(other, "conv")),
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_like(
    c: &mut Compiler<'_>,
    n: &Node,
    name: &str,
    x: DTensor,
    w: DTensor,
    geom: GpuConvGeom,
    out_shape: Vec<usize>,
    activation: &ir::Epilogue,
    transpose: bool,
) -> GpuResult<()> {
    let bias = c.opt_input(n, 2)?;
    let (prefix, operands) = match bias {
        Some(bt) => {
            let mut shape = vec![bt.numel()];
            shape.extend(std::iter::repeat_n(1, out_shape.len().saturating_sub(2)));
            let bt = c.b.alias(&bt, &shape)?;
            (
                EwProgram {
                    nodes: vec![
                        EwNode::Acc,
                        EwNode::Operand(0),
                        EwNode::Binary(expr::BinaryOp::Add, 0, 1),
                    ],
                },
                vec![bt],
            )
        }
        None => (
            EwProgram {
                nodes: vec![EwNode::Acc],
            },
            Vec::new(),
        ),
    };
    let trivial = prefix.nodes.len() == 1 && activation.is_empty();
    let (prog, ops) = c.epilogue(n, prefix, operands, activation)?;
    let refs: Vec<&DTensor> = ops.iter().collect();
    let ep = Epilogue {
        program: (!trivial).then_some(prog),
        operands: refs,
        shape: None,
    };
    let out_dt = c.dev_type(Compiler::out_id(n, 0)?)?;
    let y = if transpose {
        gpu_conv::conv_transpose(&mut c.b, name, &x, &w, &geom, &out_shape, out_dt, &ep)?
    } else {
        gpu_conv::conv(&mut c.b, name, &x, &w, &geom, &out_shape, out_dt, &ep)?
    };
    c.set(n, 0, y)
}
