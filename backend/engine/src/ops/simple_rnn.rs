//! ONNX RNN (opsets 7 and 14): the simple recurrent layer `H_t = f(X_t·Wᵀ + H_{t-1}·Rᵀ + Wb + Rb)`.
//!
//! Decomposes at load into the IR's GRU, which both executors run (`rnn.rs`), with gates that are
//! exactly constant: the update gate z is 0 and the reset gate r is 1, so the GRU's
//! `H_t = (1 − z)·h̃ + z·H_{t−1}` with `h̃ = g(X_t·W_hᵀ + (r·H_{t−1})·R_hᵀ + Wb_h + Rb_h)` is the RNN's
//! step term for term. The z and r rows of W and R are zeros (W·0), their biases −1 and +1, and
//! their activation a HardSigmoid steep enough to map the (clipped) ±1 to exactly 0 and 1. The GRU
//! computes three gates where the RNN needs one; a kernel of its own would be three times less work.
//! (An infinite hidden state, possible with an unbounded activation, would read 0·∞ there; an RNN
//! whose state overflows f32 has no meaningful output either.)

use super::chain::{Chain, decomposed};
use super::prelude::*;
use super::rnn::rnn_attrs;
use crate::ir::{BinaryOp, RnnActivation, RnnAttrs, RnnDirection};

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("RNN", 7, convert, &FAMILY)];

/// No IR ops of its own: RNN decomposes into GRU.
pub(super) static FAMILY: Family = decomposed("simple_rnn");

fn convert(
    cx: &mut Ctx<'_>,
    _n: &NodeProto,
    name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    let rnn = rnn_attrs(a, &["Tanh"])?;
    let h = rnn.hidden_size;
    if h == 0 {
        return Err(EngineError::unsupported(
            "RNN without a hidden_size attribute: give hidden_size (the engine builds the layer's \
             constant gates from it at load)",
        ));
    }
    // the clipped gate pre-activations are ±m; the HardSigmoid maps them to 0 and 1 exactly
    let m = match rnn.clip {
        None => 1.0f32,
        Some(c) if c.is_normal() && c > 0.0 => c.min(1.0),
        Some(c) => {
            return Err(EngineError::invalid(format!(
                "RNN attribute clip={c}: the clip threshold must be a positive number"
            )));
        }
    };
    let gate = RnnActivation::HardSigmoid {
        alpha: 2.0 / m,
        beta: 0.5,
    };
    let dirs = if rnn.direction == RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let mut activations = Vec::with_capacity(2 * dirs);
    for &g in &rnn.activations {
        activations.push(gate);
        activations.push(g);
    }
    let gru = Op::Gru {
        attrs: RnnAttrs { activations, ..rnn },
        linear_before_reset: false,
    };

    let x = need(inputs, 0, "X")?;
    let w = need(inputs, 1, "W")?;
    let r = need(inputs, 2, "R")?;
    let mut chain = Chain::new(cx, name);
    let w3 = gated(&mut chain, "w", w);
    let r3 = gated(&mut chain, "r", r);
    // B [dirs, 2H] = [Wb, Rb] → [dirs, 6H] = [−1, +1, Wb, 0, 0, Rb]
    let fill = |v: f32, width: usize| -> Result<Tensor> {
        Tensor::from_vec(vec![dirs, width], vec![v; dirs * width])
    };
    let b6 = match inputs.get(3).copied().flatten() {
        Some(b) => {
            let halves = chain.push_multi(
                "b_halves",
                Op::Split {
                    axis: 1,
                    sizes: vec![h, h],
                },
                &[b],
                2,
            );
            let z = chain.cast_like("b_update", fill(-1.0, h)?, b);
            let rr = chain.cast_like("b_reset", fill(1.0, h)?, b);
            let zeros = chain.cast_like("b_zeros", fill(0.0, 2 * h)?, b);
            chain.push(
                "b_gates",
                Op::Concat { axis: 1 },
                &[z, rr, halves[0], zeros, halves[1]],
            )
        }
        None => {
            let mut v = Vec::with_capacity(dirs * 6 * h);
            for _ in 0..dirs {
                v.extend(std::iter::repeat_n(-1.0f32, h));
                v.extend(std::iter::repeat_n(1.0f32, h));
                v.extend(std::iter::repeat_n(0.0f32, 4 * h));
            }
            chain.cast_like("b_gates", Tensor::from_vec(vec![dirs, 6 * h], v)?, w)
        }
    };
    let mut gru_inputs = vec![Some(x), Some(w3), Some(r3), Some(b6)];
    gru_inputs.extend(inputs.iter().skip(4).take(2).copied());
    Ok(chain.finish_optional(gru, gru_inputs))
}

/// W `[dirs, H, I]` → `[dirs, 3H, I]` (or R `[dirs, H, H]` → `[dirs, 3H, H]`): zero rows for the
/// update and reset gates, then the RNN's own rows for the GRU's candidate.
fn gated(chain: &mut Chain<'_, '_>, what: &str, t: ValueId) -> ValueId {
    let zero = chain.scalar_like(&format!("{what}_zero"), 0.0, t);
    let zeros = chain.binary(&format!("{what}_zeros"), BinaryOp::Mul, t, zero);
    chain.push(
        &format!("{what}_gates"),
        Op::Concat { axis: 1 },
        &[zeros, zeros, t],
    )
}
