//! Conversion of one ONNX node into IR ops (opset-dependent attributes and inputs normalised).

use crate::error::{EngineError, Result};
use crate::ir::{
    AutoPad, BinaryOp, CoordTransform, NearestMode, Node, Op, PadMode, ReduceOp, ResizeMode, RnnActivation,
    RnnAttrs, RnnDirection, UnaryOp, ValueId,
};
use crate::onnx::attrs::Attrs;
use crate::onnx::load::Loader;
use crate::onnx::proto::{GraphProto, NodeProto};
use crate::onnx::tensor::decode_tensor;
use crate::tensor::{DataType, Tensor};

/// What a node became.
pub(crate) enum Converted {
    /// One op with these inputs, writing the node's outputs.
    Node(Op, Vec<Option<ValueId>>),
    /// Helper nodes first, then the op writing the node's outputs.
    Chain(Vec<Node>, Op, Vec<Option<ValueId>>),
    /// A constant value for the single output.
    Constant(Tensor),
    /// An `If` with its two branches.
    If(GraphProto, GraphProto),
    /// Inference-mode Dropout whose mask output is used: identity plus an all-true mask.
    DropoutWithMask(ValueId),
}

fn auto_pad(s: &str) -> Result<AutoPad> {
    Ok(match s {
        "" | "NOTSET" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => return Err(EngineError::invalid(format!("unknown auto_pad '{other}'"))),
    })
}

fn i64_tensor(v: &[i64]) -> Tensor {
    Tensor {
        dtype: DataType::I64,
        shape: vec![v.len()],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into(),
    }
}

fn need(inputs: &[Option<ValueId>], i: usize, what: &str) -> Result<ValueId> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| EngineError::invalid(format!("required input {i} ({what}) is missing")))
}

fn rnn_activation(name: &str, alpha: Option<f32>, beta: Option<f32>) -> Result<RnnActivation> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "sigmoid" => RnnActivation::Sigmoid,
        "tanh" => RnnActivation::Tanh,
        "relu" => RnnActivation::Relu,
        "hardsigmoid" => RnnActivation::HardSigmoid {
            alpha: alpha.unwrap_or(0.2),
            beta: beta.unwrap_or(0.5),
        },
        "leakyrelu" => RnnActivation::LeakyRelu {
            alpha: alpha.unwrap_or(0.01),
        },
        "scaledtanh" => RnnActivation::ScaledTanh {
            alpha: alpha.unwrap_or(1.0),
            beta: beta.unwrap_or(1.0),
        },
        "affine" => RnnActivation::Affine {
            alpha: alpha.unwrap_or(1.0),
            beta: beta.unwrap_or(0.0),
        },
        "elu" => RnnActivation::Elu {
            alpha: alpha.unwrap_or(1.0),
        },
        "softsign" => RnnActivation::Softsign,
        "softplus" => RnnActivation::Softplus,
        "thresholdedrelu" => RnnActivation::ThresholdedRelu {
            alpha: alpha.unwrap_or(1.0),
        },
        other => {
            return Err(EngineError::unsupported(format!(
                "RNN activation '{other}' is not supported"
            )));
        }
    })
}

fn rnn_attrs(a: &Attrs<'_>, defaults: &[&str]) -> Result<RnnAttrs> {
    let direction = match a.string("direction", "forward")?.as_str() {
        "forward" => RnnDirection::Forward,
        "reverse" => RnnDirection::Reverse,
        "bidirectional" => RnnDirection::Bidirectional,
        d => return Err(EngineError::invalid(format!("unknown direction '{d}'"))),
    };
    let dirs = if direction == RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let names: Vec<String> = match a.strings("activations")? {
        Some(v) => v,
        None => (0..dirs)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    if names.len() != defaults.len() * dirs {
        return Err(EngineError::invalid(format!(
            "expected {} activations, found {}",
            defaults.len() * dirs,
            names.len()
        )));
    }
    let alphas = a.floats("activation_alpha")?.unwrap_or_default();
    let betas = a.floats("activation_beta")?.unwrap_or_default();
    let (mut ai, mut bi) = (0, 0);
    let mut activations = Vec::new();
    for nm in &names {
        let lower = nm.to_ascii_lowercase();
        let takes_alpha = matches!(
            lower.as_str(),
            "hardsigmoid" | "leakyrelu" | "scaledtanh" | "affine" | "elu" | "thresholdedrelu"
        );
        let takes_beta = matches!(lower.as_str(), "hardsigmoid" | "scaledtanh" | "affine");
        let alpha = if takes_alpha {
            alphas.get(ai).copied()
        } else {
            None
        };
        if takes_alpha {
            ai += 1;
        }
        let beta = if takes_beta { betas.get(bi).copied() } else { None };
        if takes_beta {
            bi += 1;
        }
        activations.push(rnn_activation(nm, alpha, beta)?);
    }
    let hidden_size = a.int("hidden_size", 0)?;
    Ok(RnnAttrs {
        hidden_size: usize::try_from(hidden_size)
            .map_err(|_| EngineError::invalid("hidden_size is negative"))?,
        direction,
        activations,
        clip: a.opt_float("clip")?,
        batch_major: a.int("layout", 0)? == 1,
    })
}

/// Convert one node. Inputs are already resolved; outputs are defined by the caller.
pub(crate) fn convert(
    cx: &mut Loader<'_>,
    n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let opset = cx.opset;
    let ins = inputs.to_vec();
    let unary = |u: UnaryOp| Ok(Converted::Node(Op::Unary(u), ins.clone()));
    let binary = |b: BinaryOp| Ok(Converted::Node(Op::Binary(b), ins.clone()));
    let op = n.op_type.as_str();
    match op {
        "Abs" => unary(UnaryOp::Abs),
        "Neg" => unary(UnaryOp::Neg),
        "Sqrt" => unary(UnaryOp::Sqrt),
        "Exp" => unary(UnaryOp::Exp),
        "Log" => unary(UnaryOp::Log),
        "Reciprocal" => unary(UnaryOp::Reciprocal),
        "Floor" => unary(UnaryOp::Floor),
        "Ceil" => unary(UnaryOp::Ceil),
        "Round" => unary(UnaryOp::Round),
        "Erf" => unary(UnaryOp::Erf),
        "Tanh" => unary(UnaryOp::Tanh),
        "Sigmoid" => unary(UnaryOp::Sigmoid),
        "Sin" => unary(UnaryOp::Sin),
        "Cos" => unary(UnaryOp::Cos),
        "Not" => unary(UnaryOp::Not),
        "Relu" => unary(UnaryOp::Relu),
        "Softplus" => unary(UnaryOp::Softplus),
        "HardSwish" => unary(UnaryOp::HardSwish),
        "LeakyRelu" => unary(UnaryOp::LeakyRelu {
            alpha: a.float("alpha", 0.01)?,
        }),
        "Elu" => unary(UnaryOp::Elu {
            alpha: a.float("alpha", 1.0)?,
        }),
        "Selu" => unary(UnaryOp::Selu {
            alpha: a.float("alpha", 1.673_263_2)?,
            gamma: a.float("gamma", 1.050_701)?,
        }),
        "HardSigmoid" => unary(UnaryOp::HardSigmoid {
            alpha: a.float("alpha", 0.2)?,
            beta: a.float("beta", 0.5)?,
        }),
        "Gelu" => unary(UnaryOp::Gelu {
            tanh: a.string("approximate", "none")? == "tanh",
        }),
        "Clip" => {
            if opset < 11 {
                Ok(Converted::Node(
                    Op::Unary(UnaryOp::Clip {
                        min: f64::from(a.float("min", f32::MIN)?),
                        max: f64::from(a.float("max", f32::MAX)?),
                    }),
                    vec![ins.first().copied().flatten()],
                ))
            } else {
                Ok(Converted::Node(
                    Op::Unary(UnaryOp::Clip {
                        min: f64::NEG_INFINITY,
                        max: f64::INFINITY,
                    }),
                    ins,
                ))
            }
        }
        "Add" => binary(BinaryOp::Add),
        "Sub" => binary(BinaryOp::Sub),
        "Mul" => binary(BinaryOp::Mul),
        "Div" => binary(BinaryOp::Div),
        "Pow" => binary(BinaryOp::Pow),
        "Equal" => binary(BinaryOp::Equal),
        "Less" => binary(BinaryOp::Less),
        "Greater" => binary(BinaryOp::Greater),
        "LessOrEqual" => binary(BinaryOp::LessOrEqual),
        "GreaterOrEqual" => binary(BinaryOp::GreaterOrEqual),
        "And" => binary(BinaryOp::And),
        "Or" => binary(BinaryOp::Or),
        "PRelu" => binary(BinaryOp::PRelu),
        "Sum" | "Min" | "Max" | "Mean" => {
            let b = match op {
                "Min" => BinaryOp::Min,
                "Max" => BinaryOp::Max,
                _ => BinaryOp::Add,
            };
            let present: Vec<ValueId> = ins.iter().flatten().copied().collect();
            if present.is_empty() {
                return Err(EngineError::invalid(format!("{op} needs at least one input")));
            }
            let mut pre = Vec::new();
            let mut acc = present[0];
            let last_is_final = op != "Mean";
            if present.len() == 1 {
                if op == "Mean" {
                    return Ok(Converted::Node(Op::Identity, vec![Some(acc)]));
                }
                return Ok(Converted::Node(Op::Identity, vec![Some(acc)]));
            }
            let steps = present.len() - 1;
            for (k, &v) in present[1..].iter().enumerate() {
                if k + 1 == steps && last_is_final {
                    return Ok(Converted::Chain(pre, Op::Binary(b), vec![Some(acc), Some(v)]));
                }
                let t = cx.temp(name);
                pre.push(Node {
                    name: format!("{name}/acc{k}"),
                    op: Op::Binary(b),
                    inputs: vec![Some(acc), Some(v)],
                    outputs: vec![Some(t)],
                });
                acc = t;
            }
            // Mean: divide by the count (the constant is cast to x's dtype at specialisation).
            let count = cx.constant(name, Tensor::scalar_f32(present.len() as f32));
            Ok(Converted::Chain(
                pre,
                Op::Binary(BinaryOp::Div),
                vec![Some(acc), Some(count)],
            ))
        }
        "Where" => Ok(Converted::Node(Op::Where, ins)),
        "Cast" => {
            let to = a.int("to", 0)?;
            let to = DataType::from_onnx(to as i32).ok_or_else(|| {
                EngineError::unsupported(format!(
                    "Cast to {} is not supported",
                    crate::onnx::tensor::onnx_type_name(to as i32)
                ))
            })?;
            Ok(Converted::Node(Op::Cast { to }, ins))
        }
        "Identity" => Ok(Converted::Node(Op::Identity, ins)),
        "Dropout" => {
            let x = need(&ins, 0, "data")?;
            let training = a.int("training_mode", 0)? != 0
                || ins.get(2).copied().flatten().is_some_and(|t| {
                    cx.graph
                        .constants
                        .get(&t)
                        .is_none_or(|c| c.to_f64_vec().map_or(true, |v| v.iter().any(|&b| b != 0.0)))
                });
            if training {
                return Err(EngineError::unsupported(
                    "Dropout in training mode (random masks); export the model in inference mode",
                ));
            }
            if n.output.get(1).is_some_and(|o| !o.is_empty()) {
                return Ok(Converted::DropoutWithMask(x));
            }
            Ok(Converted::Node(Op::Identity, vec![Some(x)]))
        }
        "MatMul" => Ok(Converted::Node(
            Op::MatMul {
                trans_a: false,
                trans_b: false,
                epilogue: Default::default(),
            },
            ins,
        )),
        "Gemm" => Ok(Converted::Node(
            Op::Gemm {
                alpha: a.float("alpha", 1.0)?,
                beta: a.float("beta", 1.0)?,
                trans_a: a.int("transA", 0)? != 0,
                trans_b: a.int("transB", 0)? != 0,
                epilogue: Default::default(),
            },
            ins,
        )),
        "Conv" => Ok(Converted::Node(
            Op::Conv {
                kernel_shape: a.usizes("kernel_shape")?,
                strides: a.usizes("strides")?,
                pads: a.usizes("pads")?,
                dilations: a.usizes("dilations")?,
                group: a.int("group", 1)?.max(1) as usize,
                auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
                activation: Default::default(),
            },
            ins,
        )),
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
        "BatchNormalization" => {
            if a.int("training_mode", 0)? != 0 || n.output.iter().skip(1).any(|o| !o.is_empty()) {
                return Err(EngineError::unsupported(
                    "BatchNormalization in training mode (running mean/var outputs)",
                ));
            }
            Ok(Converted::Node(
                Op::BatchNormalization {
                    epsilon: a.float("epsilon", 1e-5)?,
                },
                ins,
            ))
        }
        "InstanceNormalization" => Ok(Converted::Node(
            Op::InstanceNormalization {
                epsilon: a.float("epsilon", 1e-5)?,
            },
            ins,
        )),
        "LayerNormalization" => Ok(Converted::Node(
            Op::LayerNormalization {
                axis: a.int("axis", -1)?,
                epsilon: a.float("epsilon", 1e-5)?,
            },
            ins,
        )),
        "MaxPool" => Ok(Converted::Node(
            Op::MaxPool {
                kernel_shape: a.usizes("kernel_shape")?,
                strides: a.usizes("strides")?,
                pads: a.usizes("pads")?,
                dilations: a.usizes("dilations")?,
                ceil_mode: a.int("ceil_mode", 0)? != 0,
                auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
                storage_order_col: a.int("storage_order", 0)? != 0,
            },
            ins,
        )),
        "AveragePool" => Ok(Converted::Node(
            Op::AveragePool {
                kernel_shape: a.usizes("kernel_shape")?,
                strides: a.usizes("strides")?,
                pads: a.usizes("pads")?,
                dilations: a.usizes("dilations")?,
                ceil_mode: a.int("ceil_mode", 0)? != 0,
                count_include_pad: a.int("count_include_pad", 0)? != 0,
                auto_pad: auto_pad(&a.string("auto_pad", "NOTSET")?)?,
            },
            ins,
        )),
        "GlobalAveragePool" => Ok(Converted::Node(Op::GlobalAveragePool, ins)),
        "GlobalMaxPool" => Ok(Converted::Node(Op::GlobalMaxPool, ins)),
        "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL2" | "ReduceL1"
        | "ReduceSumSquare" | "ReduceLogSum" | "ReduceLogSumExp" => {
            let rop = match op {
                "ReduceMean" => ReduceOp::Mean,
                "ReduceSum" => ReduceOp::Sum,
                "ReduceMax" => ReduceOp::Max,
                "ReduceMin" => ReduceOp::Min,
                "ReduceProd" => ReduceOp::Prod,
                "ReduceL2" => ReduceOp::L2,
                "ReduceL1" => ReduceOp::L1,
                "ReduceSumSquare" => ReduceOp::SumSquare,
                "ReduceLogSum" => ReduceOp::LogSum,
                _ => ReduceOp::LogSumExp,
            };
            let mut ins = ins;
            let attr_axes = a.ints("axes")?;
            if let Some(axes) = attr_axes {
                ins.truncate(1);
                ins.push(Some(cx.constant(name, i64_tensor(&axes))));
            }
            Ok(Converted::Node(
                Op::Reduce {
                    op: rop,
                    axes: Vec::new(),
                    keepdims: a.int("keepdims", 1)? != 0,
                    noop_with_empty_axes: a.int("noop_with_empty_axes", 0)? != 0,
                },
                ins,
            ))
        }
        "ArgMax" | "ArgMin" => Ok(Converted::Node(
            Op::ArgReduce {
                max: op == "ArgMax",
                axis: a.int("axis", 0)?,
                keepdims: a.int("keepdims", 1)? != 0,
                select_last_index: a.int("select_last_index", 0)? != 0,
            },
            ins,
        )),
        "Softmax" | "LogSoftmax" => Ok(Converted::Node(
            Op::Softmax {
                axis: a.int("axis", if opset < 13 { 1 } else { -1 })?,
                log: op == "LogSoftmax",
                coerce_2d: opset < 13,
            },
            ins,
        )),
        "TopK" => {
            let mut ins = ins;
            if opset < 10 {
                let k = a.int("k", 0)?;
                ins.truncate(1);
                ins.push(Some(cx.constant(name, i64_tensor(&[k]))));
            }
            Ok(Converted::Node(
                Op::TopK {
                    axis: a.int("axis", -1)?,
                    k: 0,
                    largest: a.int("largest", 1)? != 0,
                    sorted: a.int("sorted", 1)? != 0,
                },
                ins,
            ))
        }
        "Reshape" => Ok(Converted::Node(
            Op::Reshape {
                allowzero: a.int("allowzero", 0)? != 0,
            },
            ins,
        )),
        "Flatten" => Ok(Converted::Node(
            Op::Flatten {
                axis: a.int("axis", 1)?,
            },
            ins,
        )),
        "Squeeze" => Ok(Converted::Node(
            Op::Squeeze {
                axes: a.ints("axes")?,
            },
            ins,
        )),
        "Unsqueeze" => Ok(Converted::Node(
            Op::Unsqueeze {
                axes: a.ints("axes")?,
            },
            ins,
        )),
        "Transpose" => Ok(Converted::Node(
            Op::Transpose {
                perm: a.usizes("perm")?,
            },
            ins,
        )),
        "Concat" => Ok(Converted::Node(
            Op::Concat {
                axis: a.int("axis", 0)?,
            },
            ins,
        )),
        "Split" => {
            let sizes = a.usizes("split")?;
            let n_out = n.output.len();
            if a.has("num_outputs") && a.int("num_outputs", 0)? as usize != n_out {
                return Err(EngineError::invalid(
                    "num_outputs differs from the number of outputs",
                ));
            }
            Ok(Converted::Node(
                Op::Split {
                    axis: a.int("axis", 0)?,
                    sizes,
                },
                ins,
            ))
        }
        "Slice" => {
            let mut ins = ins;
            if opset < 10 {
                let starts = a.ints("starts")?.unwrap_or_default();
                let ends = a.ints("ends")?.unwrap_or_default();
                let s = cx.constant(name, i64_tensor(&starts));
                let e = cx.constant(name, i64_tensor(&ends));
                ins.truncate(1);
                ins.push(Some(s));
                ins.push(Some(e));
                if let Some(axes) = a.ints("axes")? {
                    ins.push(Some(cx.constant(name, i64_tensor(&axes))));
                }
            }
            Ok(Converted::Node(
                Op::Slice {
                    starts: Vec::new(),
                    steps: Vec::new(),
                },
                ins,
            ))
        }
        "Gather" => Ok(Converted::Node(
            Op::Gather {
                axis: a.int("axis", 0)?,
            },
            ins,
        )),
        "GatherElements" => Ok(Converted::Node(
            Op::GatherElements {
                axis: a.int("axis", 0)?,
            },
            ins,
        )),
        "Expand" => Ok(Converted::Node(Op::Expand, ins)),
        "Tile" => Ok(Converted::Node(Op::Tile { repeats: Vec::new() }, ins)),
        "Pad" => {
            let mode = match a.string("mode", "constant")?.as_str() {
                "constant" => PadMode::Constant,
                "reflect" => PadMode::Reflect,
                "edge" => PadMode::Edge,
                "wrap" => PadMode::Wrap,
                m => return Err(EngineError::invalid(format!("unknown Pad mode '{m}'"))),
            };
            let mut ins = ins;
            let mut value = 0.0;
            if opset < 11 {
                let pads = a.ints("pads")?.unwrap_or_default();
                value = f64::from(a.float("value", 0.0)?);
                ins.truncate(1);
                ins.push(Some(cx.constant(name, i64_tensor(&pads))));
            }
            Ok(Converted::Node(
                Op::Pad {
                    mode,
                    pads: Vec::new(),
                    value,
                },
                ins,
            ))
        }
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
        "DepthToSpace" => Ok(Converted::Node(
            Op::DepthToSpace {
                blocksize: a.int("blocksize", 0)?.max(1) as usize,
                crd: a.string("mode", "DCR")? == "CRD",
            },
            ins,
        )),
        "LSTM" => Ok(Converted::Node(
            Op::Lstm {
                attrs: rnn_attrs(a, &["Sigmoid", "Tanh", "Tanh"])?,
                input_forget: a.int("input_forget", 0)? != 0,
            },
            ins,
        )),
        "GRU" => Ok(Converted::Node(
            Op::Gru {
                attrs: rnn_attrs(a, &["Sigmoid", "Tanh"])?,
                linear_before_reset: a.int("linear_before_reset", 0)? != 0,
            },
            ins,
        )),
        "If" => {
            let t = a
                .graph("then_branch")?
                .ok_or_else(|| EngineError::invalid("If without then_branch"))?;
            let e = a
                .graph("else_branch")?
                .ok_or_else(|| EngineError::invalid("If without else_branch"))?;
            Ok(Converted::If(t.clone(), e.clone()))
        }
        other => Err(EngineError::unsupported(format!(
            "operator {other} is not supported"
        ))),
    }
}
