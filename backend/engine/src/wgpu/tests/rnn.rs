//! LSTM and GRU against a CPU reference: bidirectional, biases, initial states, sequence lengths.

use super::support::*;
use crate::wgpu::kernels::rnn::{Act, Cell, RnnInputs, RnnSpec, rnn};

fn sig(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

struct Case {
    t: usize,
    b: usize,
    i: usize,
    h: usize,
    dirs: usize,
}

/// Reference recurrent op; returns (Y [T, D, B, H], Y_h [D, B, H]).
#[allow(clippy::too_many_arguments)]
fn reference(
    c: &Case,
    cell: Cell,
    x: &[f32],
    w: &[f32],
    r: &[f32],
    bias: &[f32],
    h0: &[f32],
    c0: &[f32],
    lens: &[usize],
) -> (Vec<f32>, Vec<f32>) {
    let (t_len, nb, ni, nh, dirs) = (c.t, c.b, c.i, c.h, c.dirs);
    let g = match cell {
        Cell::Lstm { .. } => 4,
        Cell::Gru { .. } => 3,
    };
    let mut y = vec![0.0f32; t_len * dirs * nb * nh];
    let mut yh = vec![0.0f32; dirs * nb * nh];
    for d in 0..dirs {
        for bi in 0..nb {
            let mut hs: Vec<f32> = h0[(d * nb + bi) * nh..(d * nb + bi + 1) * nh].to_vec();
            let mut cs: Vec<f32> = c0[(d * nb + bi) * nh..(d * nb + bi + 1) * nh].to_vec();
            let len = lens[bi];
            for s in 0..len {
                let t = if d == 1 { len - 1 - s } else { s };
                let xt = &x[(t * nb + bi) * ni..(t * nb + bi + 1) * ni];
                let lin = |gate: usize, j: usize, hv: &[f32], with_rb: bool| -> (f32, f32) {
                    let row = d * g * nh + gate * nh + j;
                    let xs: f32 = (0..ni).map(|k| xt[k] * w[row * ni + k]).sum::<f32>()
                        + bias[d * 2 * g * nh + gate * nh + j];
                    let hsum: f32 = (0..nh).map(|k| hv[k] * r[row * nh + k]).sum::<f32>()
                        + if with_rb {
                            bias[d * 2 * g * nh + g * nh + gate * nh + j]
                        } else {
                            0.0
                        };
                    (xs, hsum)
                };
                let mut new_h = vec![0.0; nh];
                match cell {
                    Cell::Lstm { .. } => {
                        for j in 0..nh {
                            let gate = |k| {
                                let (a, bb) = lin(k, j, &hs, true);
                                a + bb
                            };
                            let (i, o, f, cc) = (sig(gate(0)), sig(gate(1)), sig(gate(2)), gate(3).tanh());
                            cs[j] = f * cs[j] + i * cc;
                            new_h[j] = o * cs[j].tanh();
                        }
                    }
                    Cell::Gru { linear_before_reset } => {
                        let rgate: Vec<f32> = (0..nh)
                            .map(|j| {
                                let (a, bb) = lin(1, j, &hs, true);
                                sig(a + bb)
                            })
                            .collect();
                        let rh: Vec<f32> = (0..nh).map(|k| rgate[k] * hs[k]).collect();
                        for j in 0..nh {
                            let (za, zb) = lin(0, j, &hs, true);
                            let z = sig(za + zb);
                            let hh = if linear_before_reset {
                                let (a, bb) = lin(2, j, &hs, true);
                                (a + rgate[j] * bb).tanh()
                            } else {
                                let (a, bb) = lin(2, j, &rh, true);
                                (a + bb).tanh()
                            };
                            new_h[j] = (1.0 - z) * hh + z * hs[j];
                        }
                    }
                }
                hs = new_h;
                for j in 0..nh {
                    y[((t * dirs + d) * nb + bi) * nh + j] = hs[j];
                }
            }
            yh[(d * nb + bi) * nh..(d * nb + bi + 1) * nh].copy_from_slice(&hs);
        }
    }
    (y, yh)
}

fn check(cell: Cell) {
    let c = Case {
        t: 3,
        b: 2,
        i: 3,
        h: 4,
        dirs: 2,
    };
    let g = if matches!(cell, Cell::Lstm { .. }) { 4 } else { 3 };
    let x = rand(c.t * c.b * c.i, 101);
    let w = rand(c.dirs * g * c.h * c.i, 102);
    let r = rand(c.dirs * g * c.h * c.h, 103);
    let bias = rand(c.dirs * 2 * g * c.h, 104);
    let h0 = rand(c.dirs * c.b * c.h, 105);
    let c0 = rand(c.dirs * c.b * c.h, 106);
    let lens = [3usize, 2];
    let (want_y, want_h) = reference(&c, cell, &x, &w, &r, &bias, &h0, &c0, &lens);
    let acts = match cell {
        Cell::Lstm { .. } => vec![
            Act::Sigmoid,
            Act::Tanh,
            Act::Tanh,
            Act::Sigmoid,
            Act::Tanh,
            Act::Tanh,
        ],
        Cell::Gru { .. } => vec![Act::Sigmoid, Act::Tanh, Act::Sigmoid, Act::Tanh],
    };
    let spec = RnnSpec {
        cell,
        hidden: c.h,
        reverse: vec![false, true],
        activations: acts,
        clip: None,
        batch_major: false,
    };
    let out = run(
        vec![
            f32s(&[c.t, c.b, c.i], &x),
            f32s(&[c.dirs, g * c.h, c.i], &w),
            f32s(&[c.dirs, g * c.h, c.h], &r),
            f32s(&[c.dirs, 2 * g * c.h], &bias),
            i64s(&[2], &[3, 2]),
            f32s(&[c.dirs, c.b, c.h], &h0),
            f32s(&[c.dirs, c.b, c.h], &c0),
        ],
        |b, t| {
            let inputs = RnnInputs {
                bias: Some(&t[3]),
                lens: Some(&t[4]),
                init_h: Some(&t[5]),
                init_c: matches!(cell, Cell::Lstm { .. }).then_some(&t[6]),
                peepholes: None,
            };
            let o = rnn(b, "rnn", &t[0], &t[1], &t[2], inputs, &spec)?;
            Ok(vec![o.y, o.y_h])
        },
    );
    assert_eq!(out[0].shape, vec![c.t, c.dirs, c.b, c.h]);
    assert_close(&as_f32(&out[0]), &want_y, 1e-4, 1e-5);
    assert_close(&as_f32(&out[1]), &want_h, 1e-4, 1e-5);
}

#[test]
fn lstm_bidirectional_with_lengths() {
    check(Cell::Lstm { input_forget: false });
}

#[test]
fn gru_both_reset_orders() {
    check(Cell::Gru {
        linear_before_reset: false,
    });
    check(Cell::Gru {
        linear_before_reset: true,
    });
}
