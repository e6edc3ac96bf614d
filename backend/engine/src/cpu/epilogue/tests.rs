use super::*;
use crate::cpu::elementwise::binary;
use crate::cpu::simd::all_available;
use crate::cpu::test_data::det_uniform;

/// Unary functions are evaluated the same way as the unfused op, up to FMA rounding.
const TOL: f32 = 1e-6;

fn det(n: usize, seed: u32) -> Vec<f32> {
    det_uniform(n, seed, 4.0)
}

/// Apply `epi` to a whole output, row by row.
fn apply_all(epi: &Epi<'_>, y: &mut [f32]) {
    let n = epi.row_len;
    for (i, row) in y.chunks_mut(n).enumerate() {
        epi.apply(i, 0, row);
    }
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= TOL * (1.0 + w.abs());
        assert!(ok, "{what} at {i}: {g} vs {w}");
    }
}

const UNARIES: [UnaryOp; 13] = [
    UnaryOp::Relu,
    UnaryOp::LeakyRelu { alpha: 0.1 },
    UnaryOp::HardSigmoid {
        alpha: 0.2,
        beta: 0.5,
    },
    UnaryOp::HardSwish,
    UnaryOp::Clip { min: -1.0, max: 2.5 },
    UnaryOp::Abs,
    UnaryOp::Neg,
    UnaryOp::Sqrt,
    UnaryOp::Reciprocal,
    UnaryOp::Sigmoid,
    UnaryOp::Silu,
    UnaryOp::Tanh,
    UnaryOp::Gelu { tanh: false },
];

#[test]
fn vectorised_unary_functions_match_the_scalar_form_on_every_instruction_set() {
    let mut x = det(1003, 1);
    x[5] = f32::NAN;
    x[6] = 0.0;
    x[7] = -0.0;
    for isa in all_available() {
        for u in UNARIES {
            let want: Vec<f32> = x.iter().map(|&v| unary_f32(u, v)).collect();
            for len in [0, 1, 15, 16, 17, 1003] {
                let mut got = x[..len].to_vec();
                unary_isa(isa, u, &mut got);
                close(&got, &want[..len], &format!("{isa:?} {u:?} len {len}"));
            }
        }
    }
}

/// A standalone QDQ rounding gives the scalar pair's values bit for bit on every instruction set
/// (the vector loops divide by multiplying with the scale's reciprocal and correcting): at the
/// codes' midpoints, where an ulp of the quotient decides the rounding, past the range, and at
/// NaN, infinities, zeros and subnormals.
#[test]
fn quantize_dequantize_matches_the_scalar_pair_bit_for_bit_on_every_instruction_set() {
    for (scale, zero_point, lo, hi) in [(0.0173_f32, 3, -128, 127), (0.1, 0, 0, 255), (3.0e-5, -7, -8, 7)] {
        let u = UnaryOp::QuantizeDequantize {
            scale,
            zero_point,
            lo,
            hi,
        };
        let mut x: Vec<f32> = det(2000, 7).iter().map(|v| v * 40.0 * scale).collect();
        // each code's midpoint and its neighbours a few ulps away
        for c in -140..140 {
            let mid = (c as f32 + 0.5) * scale;
            let bits = mid.to_bits();
            x.extend((0..5).map(|d| f32::from_bits(bits.wrapping_add(d).wrapping_sub(2))));
        }
        x.extend([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e-40,
            -1e-40,
            3e38,
            -3e38,
        ]);
        let want: Vec<u32> = x.iter().map(|&v| unary_f32(u, v).to_bits()).collect();
        for isa in all_available() {
            let mut got = x.clone();
            unary_isa(isa, u, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), *w, "{isa:?} scale {scale} at {i} (x = {})", x[i]);
            }
        }
    }
}

/// `out` rows of `split`; an operand of each broadcast class, on both sides of every function.
#[test]
fn fused_steps_match_the_unfused_ops_for_every_operand_class() {
    let out = [2usize, 3, 4, 5];
    let n: usize = out.iter().product();
    let y0 = det(n, 2);
    let shapes: [&[usize]; 7] = [
        &[2, 3, 4, 5],
        &[1, 3, 1, 1],
        &[2, 3, 1, 1],
        &[4, 5],
        &[1],
        &[3, 4, 1],
        &[2, 1, 1, 5],
    ];
    let ops = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ];
    for isa in all_available() {
        for split in [1, 2, 3] {
            for (si, sb) in shapes.iter().enumerate() {
                let t = det(sb.iter().product(), 10 + si as u32);
                let tb = Buf::F32(t);
                let ins: Vec<In<'_>> = vec![None, Some((&tb, sb))];
                for op in ops {
                    for first in [false, true] {
                        let e = Epilogue {
                            steps: vec![
                                EpilogueStep::Unary(UnaryOp::HardSwish),
                                EpilogueStep::Binary {
                                    op,
                                    input: 1,
                                    operand_first: first,
                                },
                                EpilogueStep::Unary(UnaryOp::Relu),
                            ],
                        };
                        let mut y1 = y0.clone();
                        unary_slice(UnaryOp::HardSwish, &mut y1);
                        let yb = Buf::F32(y1);
                        let r = if first {
                            binary(op, &tb, sb, &yb, &out, &out)
                        } else {
                            binary(op, &yb, &out, &tb, sb, &out)
                        }
                        .unwrap();
                        let Buf::F32(mut want) = r else { panic!("f32") };
                        want.iter_mut().for_each(|v| *v = v.max(0.0));
                        let epi = Epi::with_isa(&e, &ins, &out, split, isa).unwrap();
                        let rl: usize = out[split..].iter().product();
                        // whole rows
                        let mut got = y0.clone();
                        apply_all(&epi, &mut got);
                        close(
                            &got,
                            &want,
                            &format!("{isa:?} split {split} {sb:?} {op:?} first={first}"),
                        );
                        // pieces of rows r0 and r0 + 1 through an offset view
                        let rows = n / rl;
                        let r0 = usize::from(rows >= 3);
                        let mut got = y0.clone();
                        let view = epi.offset(r0);
                        let col0 = rl / 3;
                        let (_, rest) = got.split_at_mut(r0 * rl);
                        let (ra, rb) = rest.split_at_mut(rl);
                        view.apply_rows(0, col0, &mut [&mut ra[col0..], &mut rb[col0..rl]]);
                        let mut want2 = y0.clone();
                        for r in [r0, r0 + 1] {
                            let span = r * rl + col0..(r + 1) * rl;
                            want2[span.clone()].copy_from_slice(&want[span]);
                        }
                        close(
                            &got,
                            &want2,
                            &format!("{isa:?} offset split {split} {sb:?} {op:?}"),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn operands_that_do_not_broadcast_and_pow_are_refused() {
    let tb = Buf::F32(vec![1.0; 3]);
    let s: &[usize] = &[3];
    let ins: Vec<In<'_>> = vec![Some((&tb, s))];
    let step = |op| Epilogue {
        steps: vec![EpilogueStep::Binary {
            op,
            input: 0,
            operand_first: false,
        }],
    };
    assert!(Epi::new(&step(BinaryOp::Add), &ins, &[2, 4], 1).is_err());
    assert!(Epi::new(&step(BinaryOp::Pow), &ins, &[2, 3], 1).is_err());
    assert!(Epi::new(&step(BinaryOp::Add), &ins, &[2, 3], 1).is_ok());
    assert!(Epi::new(&step(BinaryOp::Add), &[], &[2, 3], 1).is_err());
}
