//! onnxruntime's FusedConv (`com.microsoft`): `activation(Conv(X, W, B) + Z)`, the form its graph
//! optimiser gives a Conv that absorbed the activation after it (and, for residual blocks, the Add
//! before that activation).
//!
//! Decomposes at load into the IR's Conv, an Add of `Z` when given, and the activation as a Unary op,
//! so both executors run it and the fusion pass folds the Add and the activation back into the Conv's
//! epilogue where the executor can. The activation is one of those onnxruntime's kernel accepts, with
//! its `activation_params` in onnxruntime's order: LeakyRelu `[alpha]`, Clip `[min, max]`,
//! HardSigmoid `[alpha, beta]`; Relu, Tanh and Sigmoid take none.

use super::chain::{Chain, decomposed};
use super::prelude::*;
use crate::ir::{BinaryOp, UnaryOp};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::microsoft("FusedConv", convert, &FAMILY)];

/// No IR ops of its own: everything here decomposes.
pub(super) static FAMILY: Family = decomposed("fused_conv");

fn convert(
    cx: &mut Ctx<'_>,
    _n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let activation = activation(a)?;
    let conv = super::conv::conv_op(a)?;
    let x = need(inputs, 0, "X")?;
    let w = need(inputs, 1, "W")?;
    let mut conv_inputs = vec![x, w];
    if let Some(b) = inputs.get(2).copied().flatten() {
        conv_inputs.push(b);
    }
    let z = inputs.get(3).copied().flatten();
    let mut chain = Chain::new(cx, name);
    match (z, activation) {
        (None, None) => Ok(chain.finish(conv, &conv_inputs)),
        (Some(z), None) => {
            let y = chain.push("conv", conv, &conv_inputs);
            Ok(chain.finish(Op::Binary(BinaryOp::Add), &[y, z]))
        }
        (None, Some(act)) => {
            let y = chain.push("conv", conv, &conv_inputs);
            Ok(chain.finish(Op::Unary(act), &[y]))
        }
        (Some(z), Some(act)) => {
            let y = chain.push("conv", conv, &conv_inputs);
            let sum = chain.binary("sum", BinaryOp::Add, y, z);
            Ok(chain.finish(Op::Unary(act), &[sum]))
        }
    }
}

/// The node's `activation` as a Unary op (`None`: no activation attribute, a plain Conv).
fn activation(a: &Attrs<'_>) -> Result<Option<UnaryOp>> {
    if !a.has("activation") {
        return Ok(None);
    }
    let name = a.string("activation", "")?;
    let params = a.floats("activation_params")?.unwrap_or_default();
    let want = |n: usize| -> Result<()> {
        if params.len() == n {
            Ok(())
        } else {
            Err(EngineError::invalid(format!(
                "FusedConv activation {name} takes {n} activation_params, the node has {}: give them as \
                 onnxruntime's optimiser writes them (LeakyRelu [alpha], Clip [min, max], HardSigmoid \
                 [alpha, beta])",
                params.len()
            )))
        }
    };
    let op = match name.as_str() {
        "Relu" => UnaryOp::Relu,
        "Tanh" => UnaryOp::Tanh,
        "Sigmoid" => UnaryOp::Sigmoid,
        "LeakyRelu" => {
            want(1)?;
            UnaryOp::LeakyRelu { alpha: params[0] }
        }
        "Clip" => {
            want(2)?;
            UnaryOp::Clip {
                min: f64::from(params[0]),
                max: f64::from(params[1]),
            }
        }
        "HardSigmoid" => {
            want(2)?;
            UnaryOp::HardSigmoid {
                alpha: params[0],
                beta: params[1],
            }
        }
        other => {
            return Err(EngineError::unsupported(format!(
                "FusedConv activation {other:?} is not supported (Relu, Tanh, Sigmoid, LeakyRelu, Clip, \
                 HardSigmoid are): export the model without onnxruntime's Conv fusion, or unfuse it"
            )));
        }
    };
    Ok(Some(op))
}
