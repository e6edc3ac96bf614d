//! LSTM and GRU (f32), forward/reverse/bidirectional, with sequence lengths and initial states.

use crate::cpu::gemm::{MatRef, sgemm};
use crate::error::Result;
use crate::ir::{RnnActivation, RnnAttrs, RnnDirection};

fn act(a: RnnActivation, x: f32) -> f32 {
    match a {
        RnnActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        RnnActivation::Tanh => x.tanh(),
        RnnActivation::Relu => x.max(0.0),
        RnnActivation::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
        RnnActivation::LeakyRelu { alpha } => {
            if x >= 0.0 {
                x
            } else {
                alpha * x
            }
        }
        RnnActivation::ScaledTanh { alpha, beta } => alpha * (beta * x).tanh(),
        RnnActivation::Affine { alpha, beta } => alpha * x + beta,
        RnnActivation::Elu { alpha } => {
            if x > 0.0 {
                x
            } else {
                alpha * (x.exp() - 1.0)
            }
        }
        RnnActivation::Softsign => x / (1.0 + x.abs()),
        RnnActivation::Softplus => x.exp().ln_1p(),
        RnnActivation::ThresholdedRelu { alpha } => {
            if x > alpha {
                x
            } else {
                0.0
            }
        }
    }
}

/// Inputs of a recurrent op, already in seq-major layout and f32.
pub(crate) struct RnnInputs<'a> {
    pub(crate) x: &'a [f32],
    pub(crate) seq: usize,
    pub(crate) batch: usize,
    pub(crate) input: usize,
    pub(crate) w: &'a [f32],
    pub(crate) r: &'a [f32],
    pub(crate) b: Option<&'a [f32]>,
    pub(crate) lens: Option<Vec<usize>>,
    pub(crate) h0: Option<&'a [f32]>,
    pub(crate) c0: Option<&'a [f32]>,
    pub(crate) p: Option<&'a [f32]>,
}

/// Outputs: Y [seq, dirs, batch, H], Y_h [dirs, batch, H], Y_c (LSTM) [dirs, batch, H].
pub(crate) struct RnnOutputs {
    pub(crate) y: Vec<f32>,
    pub(crate) yh: Vec<f32>,
    pub(crate) yc: Vec<f32>,
}

/// Shared driver: `gates` = 4 (LSTM) or 3 (GRU).
pub(crate) fn run(
    a: &RnnAttrs,
    inp: &RnnInputs<'_>,
    gates: usize,
    lstm_input_forget: bool,
    gru_lbr: bool,
) -> Result<RnnOutputs> {
    let h = a.hidden_size;
    let dirs = if a.direction == RnnDirection::Bidirectional {
        2
    } else {
        1
    };
    let (seq, batch, isz) = (inp.seq, inp.batch, inp.input);
    let g = gates * h;
    let mut y = vec![0f32; seq * dirs * batch * h];
    let mut yh = vec![0f32; dirs * batch * h];
    let mut yc = vec![0f32; dirs * batch * h];
    let lens: Vec<usize> = inp.lens.clone().unwrap_or_else(|| vec![seq; batch]);
    for d in 0..dirs {
        let reverse = a.direction == RnnDirection::Reverse || d == 1;
        let acts = &a.activations[d * (a.activations.len() / dirs)..];
        let w = &inp.w[d * g * isz..(d + 1) * g * isz];
        let r = &inp.r[d * g * h..(d + 1) * g * h];
        let bias: Vec<f32> = match inp.b {
            Some(b) => b[d * 2 * g..(d + 1) * 2 * g].to_vec(),
            None => vec![0.0; 2 * g],
        };
        // xw[t, b, g] = x[t, b, :] · w[g, :]^T + wb
        let mut xw = vec![0f32; seq * batch * g];
        sgemm(
            seq * batch,
            g,
            isz,
            MatRef {
                data: inp.x,
                off: 0,
                rs: isz,
                cs: 1,
            },
            MatRef {
                data: w,
                off: 0,
                rs: 1,
                cs: isz,
            },
            &mut xw,
            g,
            1.0,
            false,
            true,
        )?;
        let mut ht: Vec<f32> = inp.h0.map_or_else(
            || vec![0.0; batch * h],
            |s| s[d * batch * h..(d + 1) * batch * h].to_vec(),
        );
        let mut ct: Vec<f32> = inp.c0.map_or_else(
            || vec![0.0; batch * h],
            |s| s[d * batch * h..(d + 1) * batch * h].to_vec(),
        );
        let peep: Option<&[f32]> = inp.p.map(|p| &p[d * 3 * h..(d + 1) * 3 * h]);
        let mut hr = vec![0f32; batch * g];
        for step in 0..seq {
            // hr[b, g] = h[b, :] · r[g, :]^T
            sgemm(
                batch,
                g,
                h,
                MatRef {
                    data: &ht,
                    off: 0,
                    rs: h,
                    cs: 1,
                },
                MatRef {
                    data: r,
                    off: 0,
                    rs: 1,
                    cs: h,
                },
                &mut hr,
                g,
                1.0,
                false,
                false,
            )?;
            for bi in 0..batch {
                let len = lens[bi].min(seq);
                if step >= len {
                    continue;
                }
                let t = if reverse { len - 1 - step } else { step };
                let xg = &xw[(t * batch + bi) * g..(t * batch + bi + 1) * g];
                let hg = &hr[bi * g..(bi + 1) * g];
                let hprev: Vec<f32> = ht[bi * h..(bi + 1) * h].to_vec();
                let clip = |v: f32| a.clip.map_or(v, |c| v.clamp(-c, c));
                let rvec: Vec<f32> = if gates == 3 && !gru_lbr {
                    (0..h)
                        .map(|k| {
                            act(
                                acts[0],
                                clip(xg[h + k] + hg[h + k] + bias[h + k] + bias[g + h + k]),
                            )
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                for j in 0..h {
                    if gates == 4 {
                        let pre =
                            |k: usize| xg[k * h + j] + hg[k * h + j] + bias[k * h + j] + bias[g + k * h + j];
                        let cprev = ct[bi * h + j];
                        let (pi, po, pf) = peep.map_or((0.0, 0.0, 0.0), |p| (p[j], p[h + j], p[2 * h + j]));
                        let i = act(acts[0], clip(pre(0) + pi * cprev));
                        let f = if lstm_input_forget {
                            1.0 - i
                        } else {
                            act(acts[0], clip(pre(2) + pf * cprev))
                        };
                        let c = act(acts[1], clip(pre(3)));
                        let cn = f * cprev + i * c;
                        let o = act(acts[0], clip(pre(1) + po * cn));
                        let hn = o * act(acts[2], cn);
                        ct[bi * h + j] = cn;
                        ht[bi * h + j] = hn;
                    } else {
                        let z = act(acts[0], clip(xg[j] + hg[j] + bias[j] + bias[g + j]));
                        let rr = act(
                            acts[0],
                            clip(xg[h + j] + hg[h + j] + bias[h + j] + bias[g + h + j]),
                        );
                        let hh = if gru_lbr {
                            xg[2 * h + j] + rr * (hg[2 * h + j] + bias[g + 2 * h + j]) + bias[2 * h + j]
                        } else {
                            // (r ⊙ h_prev) · Rh^T computed directly
                            let rh = &r[(2 * h + j) * h..(2 * h + j + 1) * h];
                            let mut s = 0f32;
                            for k in 0..h {
                                s += rvec[k] * hprev[k] * rh[k];
                            }
                            xg[2 * h + j] + s + bias[g + 2 * h + j] + bias[2 * h + j]
                        };
                        let hc = act(acts[1], clip(hh));
                        ht[bi * h + j] = (1.0 - z) * hc + z * hprev[j];
                    }
                }
                y[((t * dirs + d) * batch + bi) * h..((t * dirs + d) * batch + bi + 1) * h]
                    .copy_from_slice(&ht[bi * h..(bi + 1) * h]);
            }
        }
        yh[d * batch * h..(d + 1) * batch * h].copy_from_slice(&ht);
        yc[d * batch * h..(d + 1) * batch * h].copy_from_slice(&ct);
    }
    Ok(RnnOutputs { y, yh, yc })
}
