//! LSTM and GRU (f32), forward/reverse/bidirectional, with sequence lengths and initial states.
//!
//! The directions of a bidirectional layer run in parallel. The usual LSTM (sigmoid/tanh/tanh, no
//! clip, no peepholes, every sequence full length) computes the input projection with its biases
//! in one product, adds h·Rᵀ into it at each step with the tiled product (Rᵀ packed once) and
//! applies the gates with the vectorised sigmoid/tanh of `cpu::fastmath`; other forms use the
//! general loop.

use rayon::prelude::*;

use crate::cpu::epilogue::NoTail;
use crate::cpu::fastmath;
use crate::cpu::gemm::{MatRef, sgemm};
use crate::cpu::mm::{self, BOp, DenseB, Init, PackedA, PackedB};
use crate::cpu::simd::multiversion;
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

/// One direction's outputs: Y [seq, batch, H], last h and c [batch, H].
struct DirOut {
    y: Vec<f32>,
    h: Vec<f32>,
    c: Vec<f32>,
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
    let (seq, batch) = (inp.seq, inp.batch);
    let outs: Vec<DirOut> = (0..dirs)
        .into_par_iter()
        .map(|d| run_dir(a, inp, gates, lstm_input_forget, gru_lbr, d, dirs))
        .collect::<Result<_>>()?;
    let mut y = vec![0f32; seq * dirs * batch * h];
    let mut yh = vec![0f32; dirs * batch * h];
    let mut yc = vec![0f32; dirs * batch * h];
    let bh = batch * h;
    for (d, o) in outs.iter().enumerate() {
        for t in 0..seq {
            y[(t * dirs + d) * bh..(t * dirs + d + 1) * bh].copy_from_slice(&o.y[t * bh..(t + 1) * bh]);
        }
        yh[d * bh..(d + 1) * bh].copy_from_slice(&o.h);
        yc[d * bh..(d + 1) * bh].copy_from_slice(&o.c);
    }
    Ok(RnnOutputs { y, yh, yc })
}

/// One direction (`d` of `dirs`).
fn run_dir(
    a: &RnnAttrs,
    inp: &RnnInputs<'_>,
    gates: usize,
    lstm_input_forget: bool,
    gru_lbr: bool,
    d: usize,
    dirs: usize,
) -> Result<DirOut> {
    let h = a.hidden_size;
    let (seq, batch, isz) = (inp.seq, inp.batch, inp.input);
    let g = gates * h;
    let mut y = vec![0f32; seq * batch * h];
    let lens: Vec<usize> = inp.lens.clone().unwrap_or_else(|| vec![seq; batch]);
    let reverse = a.direction == RnnDirection::Reverse || d == 1;
    let acts = &a.activations[d * (a.activations.len() / dirs)..];
    let w = &inp.w[d * g * isz..(d + 1) * g * isz];
    let r = &inp.r[d * g * h..(d + 1) * g * h];
    let bias: Vec<f32> = match inp.b {
        Some(b) => b[d * 2 * g..(d + 1) * 2 * g].to_vec(),
        None => vec![0.0; 2 * g],
    };
    let mut ht: Vec<f32> = inp.h0.map_or_else(
        || vec![0.0; batch * h],
        |s| s[d * batch * h..(d + 1) * batch * h].to_vec(),
    );
    let mut ct: Vec<f32> = inp.c0.map_or_else(
        || vec![0.0; batch * h],
        |s| s[d * batch * h..(d + 1) * batch * h].to_vec(),
    );
    let usual_lstm = gates == 4
        && !lstm_input_forget
        && a.clip.is_none()
        && inp.p.is_none()
        && acts.len() >= 3
        && acts[..3] == [RnnActivation::Sigmoid, RnnActivation::Tanh, RnnActivation::Tanh]
        && lens.iter().all(|&l| l >= seq);
    if usual_lstm {
        let isa = crate::cpu::simd::isa();
        // xw[t, b, :] = x[t, b, :] · Wᵀ + Wb + Rb
        let bsum: Vec<f32> = (0..g).map(|j| bias[j] + bias[g + j]).collect();
        let xa = MatRef {
            data: inp.x,
            off: 0,
            rs: isz,
            cs: 1,
        };
        let wt = MatRef {
            data: w,
            off: 0,
            rs: 1,
            cs: isz,
        };
        let mut xw = vec![0f32; seq * batch * g];
        let src = DenseB::new(wt, isz, g)?;
        let pa = PackedA::pack(xa, seq * batch, isz, 1.0, isa)?;
        let par = dirs == 1;
        mm::gemm(
            &pa,
            BOp::Src {
                src: &src,
                k: isz,
                n: g,
            },
            &mut xw,
            g,
            Init::Col(&bsum),
            &NoTail,
            par,
        )?;
        pa.recycle();
        let rt = MatRef {
            data: r,
            off: 0,
            rs: 1,
            cs: h,
        };
        let rt = PackedB::pack(rt, h, g, 1.0, isa)?;
        for step in 0..seq {
            let t = if reverse { seq - 1 - step } else { step };
            let pre = &mut xw[t * batch * g..(t + 1) * batch * g];
            let hm = MatRef {
                data: &ht,
                off: 0,
                rs: h,
                cs: 1,
            };
            let ph = PackedA::pack(hm, batch, h, 1.0, isa)?;
            mm::gemm(&ph, BOp::Packed(&rt), pre, g, Init::Acc, &NoTail, par)?;
            ph.recycle();
            lstm_cells(isa, pre, &mut ct, &mut ht, h);
            y[t * batch * h..(t + 1) * batch * h].copy_from_slice(&ht);
        }
        return Ok(DirOut { y, h: ht, c: ct });
    }
    // xw[t, b, g] = x[t, b, :] · w[g, :]^T
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
            y[(t * batch + bi) * h..(t * batch + bi + 1) * h].copy_from_slice(&ht[bi * h..(bi + 1) * h]);
        }
    }
    Ok(DirOut { y, h: ht, c: ct })
}

/// The usual LSTM cell over every batch row: `pre` holds the gate pre-activations (i, o, f, c
/// blocks of H per row); `c` and `h` are updated in place.
#[inline(always)]
fn lstm_cells_body<const FMA: bool>(pre: &[f32], c: &mut [f32], h: &mut [f32], hidden: usize) {
    for ((p, c), h) in pre
        .chunks_exact(4 * hidden)
        .zip(c.chunks_exact_mut(hidden))
        .zip(h.chunks_exact_mut(hidden))
    {
        let (pi, rest) = p.split_at(hidden);
        let (po, rest) = rest.split_at(hidden);
        let (pf, pc) = rest.split_at(hidden);
        for (((((c, h), &i), &o), &f), &g) in c.iter_mut().zip(h.iter_mut()).zip(pi).zip(po).zip(pf).zip(pc) {
            let cn =
                fastmath::sigmoid::<FMA>(f) * *c + fastmath::sigmoid::<FMA>(i) * fastmath::tanh::<FMA>(g);
            *c = cn;
            *h = fastmath::sigmoid::<FMA>(o) * fastmath::tanh::<FMA>(cn);
        }
    }
}

multiversion! {
    fn lstm_cells(pre: &[f32], c: &mut [f32], h: &mut [f32], hidden: usize) = lstm_cells_body;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::test_data::det_uniform;

    /// The fast LSTM path against the general loop (forced by a clip too large to change anything).
    const TOL: f32 = 2e-5;

    fn det(n: usize, seed: u32) -> Vec<f32> {
        det_uniform(n, seed, 1.0)
    }

    #[test]
    fn the_usual_lstm_matches_the_general_loop_in_both_directions() {
        for &(seq, batch, input, hidden) in &[(5, 3, 7, 5), (9, 1, 16, 33), (4, 8, 3, 64)] {
            let dirs = 2;
            let g = 4 * hidden;
            let x = det(seq * batch * input, 1);
            let w = det(dirs * g * input, 2);
            let r = det(dirs * g * hidden, 3);
            let b = det(dirs * 2 * g, 4);
            let h0 = det(dirs * batch * hidden, 5);
            let c0 = det(dirs * batch * hidden, 6);
            let inp = RnnInputs {
                x: &x,
                seq,
                batch,
                input,
                w: &w,
                r: &r,
                b: Some(&b),
                lens: None,
                h0: Some(&h0),
                c0: Some(&c0),
                p: None,
            };
            let mut attrs = RnnAttrs {
                hidden_size: hidden,
                direction: RnnDirection::Bidirectional,
                activations: [RnnActivation::Sigmoid, RnnActivation::Tanh, RnnActivation::Tanh].repeat(2),
                clip: None,
                batch_major: false,
            };
            let fast = run(&attrs, &inp, 4, false, false).unwrap();
            attrs.clip = Some(1e30);
            let slow = run(&attrs, &inp, 4, false, false).unwrap();
            for (name, a, b) in [
                ("y", &fast.y, &slow.y),
                ("y_h", &fast.yh, &slow.yh),
                ("y_c", &fast.yc, &slow.yc),
            ] {
                assert_eq!(a.len(), b.len());
                for (i, (p, q)) in a.iter().zip(b.iter()).enumerate() {
                    assert!(
                        (p - q).abs() <= TOL * (1.0 + q.abs()),
                        "{name}[{i}] seq={seq} batch={batch}: {p} vs {q}"
                    );
                }
            }
        }
    }
}
