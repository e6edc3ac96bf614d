//! Recurrent layers: LSTM and GRU.
//!
//! ONNX conversion, shape inference, CPU execution and wgpu lowering of these operators.

use super::prelude::*;
use crate::cpu::{movement, rnn as kernel};
use crate::ir::{self, RnnActivation, RnnAttrs, RnnDirection};
use crate::wgpu::kernels::rnn::{self as gpu_rnn, Act, Cell, RnnInputs, RnnSpec};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[
    OnnxOp::new("LSTM", 7, convert, &FAMILY),
    OnnxOp::new("GRU", 7, convert, &FAMILY),
];

/// The IR ops of this module: Lstm, Gru.
pub(super) static FAMILY: Family = Family {
    name: "rnn",
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
        other => Err(not_registered(other)),
    }
}

fn param_input(_op: &Op, _i: usize) -> bool {
    false
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], n_out: usize) -> Result<Resolved> {
    let n_in = ins.len();
    match op {
        Op::Lstm { attrs, input_forget } => {
            let (a, outs) = rnn_shapes(attrs, ins, 4, n_out)?;
            Ok(concrete(
                Op::Lstm {
                    attrs: a,
                    input_forget: *input_forget,
                },
                n_in,
                outs,
            ))
        }
        Op::Gru {
            attrs,
            linear_before_reset,
        } => {
            let (a, outs) = rnn_shapes(attrs, ins, 3, n_out)?;
            Ok(concrete(
                Op::Gru {
                    attrs: a,
                    linear_before_reset: *linear_before_reset,
                },
                n_in,
                outs,
            ))
        }
        other => Err(wrong_family(other, "rnn")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    match op {
        Op::Lstm { attrs, input_forget } => rnn_exec(attrs, ins, outs, 4, *input_forget, false),
        Op::Gru {
            attrs,
            linear_before_reset,
        } => rnn_exec(attrs, ins, outs, 3, false, *linear_before_reset),
        other => Err(wrong_family(other, "rnn")),
    }
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let name = c.out_name(n, 0);
    match &n.op {
        Op::Lstm { attrs, input_forget } => rnn(
            c,
            n,
            &name,
            attrs,
            Cell::Lstm {
                input_forget: *input_forget,
            },
        ),
        Op::Gru {
            attrs,
            linear_before_reset,
        } => rnn(
            c,
            n,
            &name,
            attrs,
            Cell::Gru {
                linear_before_reset: *linear_before_reset,
            },
        ),
        other => Err(gpu_wrong_family(other, "rnn")),
    }
}

type Outs = Vec<(DataType, Vec<usize>)>;

fn rnn_shapes(
    attrs: &crate::ir::RnnAttrs,
    ins: &[Option<InVal<'_>>],
    gates: usize,
    n_out: usize,
) -> Result<(crate::ir::RnnAttrs, Outs)> {
    let x = req(ins, 0, "X")?;
    let w = req(ins, 1, "W")?;
    let r = req(ins, 2, "R")?;
    if x.shape.len() != 3 || w.shape.len() != 3 || r.shape.len() != 3 {
        return Err(EngineError::invalid("RNN inputs X, W, R must be 3-D"));
    }
    let dirs = if attrs.direction == crate::ir::RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let h = if attrs.hidden_size > 0 {
        attrs.hidden_size
    } else {
        r.shape[2]
    };
    let (seq, batch) = if attrs.batch_major {
        (x.shape[1], x.shape[0])
    } else {
        (x.shape[0], x.shape[1])
    };
    if w.shape != [dirs, gates * h, x.shape[2]] || r.shape != [dirs, gates * h, h] {
        return Err(EngineError::invalid(format!(
            "RNN weights W {:?} / R {:?} do not match {dirs} direction(s), hidden {h}, input {}",
            w.shape, r.shape, x.shape[2]
        )));
    }
    let mut a = attrs.clone();
    a.hidden_size = h;
    let y = if attrs.batch_major {
        vec![batch, seq, dirs, h]
    } else {
        vec![seq, dirs, batch, h]
    };
    let yh = if attrs.batch_major {
        vec![batch, dirs, h]
    } else {
        vec![dirs, batch, h]
    };
    let mut outs = vec![(x.dtype, y)];
    for _ in 1..n_out {
        outs.push((x.dtype, yh.clone()));
    }
    Ok((a, outs))
}

fn rnn_exec(
    attrs: &crate::ir::RnnAttrs,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    gates: usize,
    input_forget: bool,
    lbr: bool,
) -> Result<Vec<Buf>> {
    let (x, sx) = arg(ins, 0)?;
    float_only(x.dtype(), "RNN")?;
    let mut xv = x.to_f32();
    let (seq, batch) = if attrs.batch_major {
        (sx[1], sx[0])
    } else {
        (sx[0], sx[1])
    };
    if attrs.batch_major {
        xv = movement::transpose(&xv, sx, &[1, 0, 2]);
    }
    let get = |i: usize| ins.get(i).copied().flatten().map(|(b, _)| b.to_f32());
    let w = arg(ins, 1)?.0.to_f32();
    let r = arg(ins, 2)?.0.to_f32();
    let b = get(3);
    let lens = ins
        .get(4)
        .copied()
        .flatten()
        .map(|(b, _)| b.to_i64().into_iter().map(|v| v.max(0) as usize).collect());
    let mut h0 = get(5);
    let mut c0 = if gates == 4 { get(6) } else { None };
    let p = if gates == 4 { get(7) } else { None };
    let dirs = if attrs.direction == crate::ir::RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let h = attrs.hidden_size;
    if attrs.batch_major {
        h0 = h0.map(|v| movement::transpose(&v, &[batch, dirs, h], &[1, 0, 2]));
        c0 = c0.map(|v| movement::transpose(&v, &[batch, dirs, h], &[1, 0, 2]));
    }
    let inp = kernel::RnnInputs {
        x: &xv,
        seq,
        batch,
        input: sx[2],
        w: &w,
        r: &r,
        b: b.as_deref(),
        lens,
        h0: h0.as_deref(),
        c0: c0.as_deref(),
        p: p.as_deref(),
    };
    let o = kernel::run(attrs, &inp, gates, input_forget, lbr)?;
    let (mut y, mut yh, mut yc) = (o.y, o.yh, o.yc);
    if attrs.batch_major {
        y = movement::transpose(&y, &[seq, dirs, batch, h], &[2, 0, 1, 3]);
        yh = movement::transpose(&yh, &[dirs, batch, h], &[1, 0, 2]);
        yc = movement::transpose(&yc, &[dirs, batch, h], &[1, 0, 2]);
    }
    let dt = x.dtype();
    let mut res = vec![back(dt, y), back(dt, yh)];
    if gates == 4 {
        res.push(back(dt, yc));
    }
    res.truncate(outs.len().max(1));
    Ok(res)
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

pub(super) fn rnn_attrs(a: &Attrs<'_>, defaults: &[&str]) -> Result<RnnAttrs> {
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

fn act(a: RnnActivation) -> Act {
    match a {
        RnnActivation::Sigmoid => Act::Sigmoid,
        RnnActivation::Tanh => Act::Tanh,
        RnnActivation::Relu => Act::Relu,
        RnnActivation::HardSigmoid { alpha, beta } => Act::HardSigmoid(alpha, beta),
        RnnActivation::LeakyRelu { alpha } => Act::LeakyRelu(alpha),
        RnnActivation::ScaledTanh { alpha, beta } => Act::ScaledTanh(alpha, beta),
        RnnActivation::Affine { alpha, beta } => Act::Affine(alpha, beta),
        RnnActivation::Elu { alpha } => Act::Elu(alpha),
        RnnActivation::Softsign => Act::Softsign,
        RnnActivation::Softplus => Act::Softplus,
        RnnActivation::ThresholdedRelu { alpha } => Act::ThresholdedRelu(alpha),
    }
}

fn rnn(c: &mut Compiler<'_>, n: &Node, name: &str, attrs: &ir::RnnAttrs, cell: Cell) -> GpuResult<()> {
    let x = c.input(n, 0)?;
    let w = c.input(n, 1)?;
    let r = c.input(n, 2)?;
    let bias = c.opt_input(n, 3)?;
    let lens = c.opt_input(n, 4)?;
    let init_h = c.opt_input(n, 5)?;
    let (init_c, peep) = match cell {
        Cell::Lstm { .. } => (c.opt_input(n, 6)?, c.opt_input(n, 7)?),
        Cell::Gru { .. } => (None, None),
    };
    let reverse = match attrs.direction {
        RnnDirection::Forward => vec![false],
        RnnDirection::Reverse => vec![true],
        RnnDirection::Bidirectional => vec![false, true],
    };
    let per_dir = if matches!(cell, Cell::Lstm { .. }) { 3 } else { 2 };
    let mut acts: Vec<Act> = attrs.activations.iter().map(|a| act(*a)).collect();
    if acts.is_empty() {
        let one: &[Act] = if per_dir == 3 {
            &[Act::Sigmoid, Act::Tanh, Act::Tanh]
        } else {
            &[Act::Sigmoid, Act::Tanh]
        };
        for _ in 0..reverse.len() {
            acts.extend_from_slice(one);
        }
    } else if acts.len() == per_dir && reverse.len() == 2 {
        let again = acts.clone();
        acts.extend(again);
    }
    let spec = RnnSpec {
        cell,
        hidden: attrs.hidden_size,
        reverse,
        activations: acts,
        clip: attrs.clip,
        batch_major: attrs.batch_major,
    };
    // Sequence lengths equal to the full length everywhere need no masking.
    let lens = match (&lens, n.input(4)) {
        (Some(_), Some(id)) => match c.g.constants.get(&id) {
            Some(t) => {
                let full = if attrs.batch_major { x.shape[1] } else { x.shape[0] };
                let all_full = t
                    .to_i64_vec()
                    .map(|v| v.iter().all(|&l| l == full as i64))
                    .unwrap_or(false);
                if all_full { None } else { lens }
            }
            None => lens,
        },
        _ => lens,
    };
    let inputs = RnnInputs {
        bias: bias.as_ref(),
        lens: lens.as_ref(),
        init_h: init_h.as_ref(),
        init_c: init_c.as_ref(),
        peepholes: peep.as_ref(),
    };
    let out = gpu_rnn::rnn(&mut c.b, name, &x, &w, &r, inputs, &spec)?;
    c.set(n, 0, out.y)?;
    c.set(n, 1, out.y_h)?;
    if let Some(yc) = out.y_c {
        c.set(n, 2, yc)?;
    }
    Ok(())
}
