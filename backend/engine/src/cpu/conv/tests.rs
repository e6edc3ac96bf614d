use super::*;
use crate::cpu::buf::Buf;
use crate::cpu::buf::In;
use crate::cpu::simd::all_available;
use crate::cpu::test_data::det_uniform;
use crate::ir::{BinaryOp, Epilogue, EpilogueStep, UnaryOp};

/// Relative tolerance of an f32 convolution against the f64 reference, per √(terms).
const RTOL: f64 = 2e-6;

fn det(n: usize, seed: u32) -> Vec<f32> {
    det_uniform(n, seed, 1.0)
}

/// One 2-D case: batch, channels, input size, output channels, kernel, strides, pads
/// (top, left, bottom, right), dilations, groups.
#[derive(Debug, Clone, Copy)]
struct Case {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 4],
    d: [usize; 2],
    group: usize,
}

impl Case {
    fn out(&self) -> [usize; 2] {
        let o = |i: usize, n: usize| {
            (n + self.p[i] + self.p[i + 2] - self.d[i] * (self.k[i] - 1) - 1) / self.s[i] + 1
        };
        [o(0, self.h), o(1, self.w)]
    }
}

/// Direct convolution in f64, plus bias, Relu, plus `res`.
fn reference(cs: &Case, x: &[f32], w: &[f32], bias: &[f32], res: &[f32]) -> Vec<f64> {
    let [oh, ow] = cs.out();
    let (cg, mg) = (cs.c / cs.group, cs.m / cs.group);
    let mut y = vec![0f64; cs.n * cs.m * oh * ow];
    for n in 0..cs.n {
        for m in 0..cs.m {
            let gi = m / mg;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = f64::from(bias[m]);
                    for ci in 0..cg {
                        let c = gi * cg + ci;
                        for ky in 0..cs.k[0] {
                            for kx in 0..cs.k[1] {
                                let iy = (oy * cs.s[0] + ky * cs.d[0]) as isize - cs.p[0] as isize;
                                let ix = (ox * cs.s[1] + kx * cs.d[1]) as isize - cs.p[1] as isize;
                                if iy < 0 || ix < 0 || iy >= cs.h as isize || ix >= cs.w as isize {
                                    continue;
                                }
                                let xv = x[((n * cs.c + c) * cs.h + iy as usize) * cs.w + ix as usize];
                                let wv = w[((m * cg + ci) * cs.k[0] + ky) * cs.k[1] + kx];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    let i = ((n * cs.m + m) * oh + oy) * ow + ox;
                    y[i] = acc.max(0.0) + f64::from(res[i]);
                }
            }
        }
    }
    y
}

fn run(isa: Isa, cs: &Case, one_d: bool, prepacked: bool) {
    let [oh, ow] = cs.out();
    let x = det(cs.n * cs.c * cs.h * cs.w, 1);
    let w = det(cs.m * (cs.c / cs.group) * cs.k[0] * cs.k[1], 2);
    let bias = det(cs.m, 3);
    let out_shape = [cs.n, cs.m, oh, ow];
    let res = det(out_shape.iter().product(), 4);
    let rb = Buf::F32(res.clone());
    let ins: Vec<In<'_>> = vec![None, None, None, Some((&rb, &out_shape))];
    let e = Epilogue {
        steps: vec![
            EpilogueStep::Unary(UnaryOp::Relu),
            EpilogueStep::Binary {
                op: BinaryOp::Add,
                input: 3,
                operand_first: false,
            },
        ],
    };
    let epi = Epi::with_isa(&e, &ins, &out_shape, 2, isa).unwrap();
    // [in_sp, out_sp, kernel, strides, pads, dilations]
    let dims: [Vec<usize>; 6] = if one_d {
        assert!(cs.h == 1 && cs.k[0] == 1 && cs.p[0] == 0 && cs.p[2] == 0);
        [
            vec![cs.w],
            vec![ow],
            vec![cs.k[1]],
            vec![cs.s[1]],
            vec![cs.p[1], cs.p[3]],
            vec![cs.d[1]],
        ]
    } else {
        [
            vec![cs.h, cs.w],
            vec![oh, ow],
            cs.k.to_vec(),
            cs.s.to_vec(),
            cs.p.to_vec(),
            cs.d.to_vec(),
        ]
    };
    let [in_sp, out_sp, kernel, strides, pads, dil] = &dims;
    let g = ConvGeom {
        n: cs.n,
        c: cs.c,
        m: cs.m,
        group: cs.group,
        in_sp,
        out_sp,
        kernel,
        strides,
        pads,
        dilations: dil,
    };
    let packed = pack_filters(&w, &g, isa).unwrap();
    let got = conv_isa(isa, &x, &w, Some(&bias), &g, &epi, prepacked.then_some(&packed)).unwrap();
    let want = reference(cs, &x, &w, &bias, &res);
    let terms = ((cs.c / cs.group) * cs.k[0] * cs.k[1]) as f64;
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= RTOL * (1.0 + w.abs()) * terms.sqrt(),
            "{isa:?} {cs:?} 1-D={one_d} at {i}: {g} vs {w}"
        );
    }
}

/// A square case: kernel k×k, stride s, padding p on every side, dilation d.
#[allow(clippy::too_many_arguments)]
fn case(
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
    group: usize,
) -> Case {
    Case {
        n,
        c,
        h,
        w,
        m,
        k: [k, k],
        s: [s, s],
        p: [p; 4],
        d: [d, d],
        group,
    }
}

#[test]
fn convolutions_match_a_direct_loop_on_every_instruction_set() {
    let cases = [
        case(1, 3, 17, 19, 16, 3, 2, 1, 1, 1),
        case(3, 4, 6, 6, 12, 1, 1, 0, 1, 1),
        case(1, 4, 7, 6, 8, 1, 2, 0, 1, 1),
        // strided 1×1 (downsampling shortcuts): decimated, then pointwise; with groups, with one
        // filter per channel, and with a stride on one axis only
        case(2, 6, 9, 11, 10, 1, 2, 0, 1, 2),
        case(1, 8, 6, 7, 8, 1, 3, 0, 1, 8),
        Case {
            s: [3, 1],
            ..case(1, 5, 10, 7, 7, 1, 1, 0, 1, 1)
        },
        case(1, 6, 8, 8, 9, 3, 1, 1, 1, 3),
        case(2, 3, 13, 13, 10, 7, 2, 3, 1, 1),
        case(1, 16, 5, 5, 20, 3, 1, 0, 1, 1),
        case(1, 2, 4, 50, 3, 3, 3, 1, 1, 1),
        case(1, 3, 9, 9, 5, 3, 1, 2, 2, 1),
        case(2, 40, 12, 12, 24, 3, 1, 1, 1, 1),
        // 1×1 images (squeeze-and-excitation): one dot product per output channel, rows split in
        // tasks, channel counts off the vector width; with groups, the general path
        case(1, 960, 1, 1, 240, 1, 1, 0, 1, 1),
        case(3, 37, 1, 1, 70, 1, 1, 0, 1, 1),
        case(2, 8, 1, 1, 6, 1, 1, 0, 1, 2),
        Case {
            p: [0, 1, 2, 0],
            s: [1, 2],
            k: [3, 2],
            ..case(1, 3, 8, 9, 4, 3, 1, 0, 1, 1)
        },
        // few output positions (7×7, 5×5): the transposed product, positions as its rows; 3×3
        // with padding, pointwise, strided pointwise, a stride-2 3×3, two images
        case(1, 16, 7, 7, 32, 3, 1, 1, 1, 1),
        case(2, 20, 7, 7, 48, 1, 1, 0, 1, 1),
        case(1, 24, 13, 13, 64, 1, 2, 0, 1, 1),
        case(2, 9, 10, 10, 112, 3, 2, 1, 1, 1),
        // one image, channels over several blocks of the parallel transpose back into planes
        case(1, 16, 7, 7, 208, 1, 1, 0, 1, 1),
        case(1, 8, 9, 9, 144, 3, 2, 1, 1, 1),
    ];
    for isa in all_available() {
        for cs in &cases {
            run(isa, cs, false, false);
            run(isa, cs, false, true);
        }
        // 1-D convolutions, run as 2-D ones of a single row: grouped, strided (an audio front
        // end), dilated, depthwise
        let one_d = [
            Case {
                p: [0, 1, 0, 2],
                ..case(2, 4, 1, 20, 6, 3, 2, 1, 1, 2)
            },
            Case {
                p: [0, 1, 0, 1],
                ..case(1, 16, 1, 40, 24, 3, 2, 1, 1, 1)
            },
            Case {
                p: [0, 2, 0, 2],
                ..case(1, 5, 1, 33, 7, 3, 1, 2, 2, 1)
            },
            Case {
                p: [0, 2, 0, 2],
                ..case(2, 8, 1, 30, 8, 5, 1, 2, 1, 8)
            },
        ];
        for cs in &one_d {
            run(
                isa,
                &Case {
                    h: 1,
                    k: [1, cs.k[1]],
                    s: [1, cs.s[1]],
                    d: [1, cs.d[1]],
                    ..*cs
                },
                true,
                false,
            );
        }
    }
}

/// True when the 2-D case `cs` runs the blocked kernel with `isa`.
fn runs_blocked(isa: Isa, cs: &Case) -> bool {
    let [oh, ow] = cs.out();
    let (in_sp, out_sp) = ([cs.h, cs.w], [oh, ow]);
    let g = ConvGeom {
        n: cs.n,
        c: cs.c,
        m: cs.m,
        group: cs.group,
        in_sp: &in_sp,
        out_sp: &out_sp,
        kernel: &cs.k,
        strides: &cs.s,
        pads: &cs.p,
        dilations: &cs.d,
    };
    g.blocked(isa)
}

#[test]
fn blocked_convolutions_match_a_direct_loop() {
    let cases = [
        // rows of 21 positions (calls spanning two rows; 16 + 5 columns per copy between layouts)
        case(1, 16, 9, 21, 16, 3, 1, 1, 1, 1),
        // stride 2, three output blocks, two images
        case(2, 32, 12, 12, 48, 3, 2, 1, 1, 1),
        // five output blocks: a call of 4, then one of 1; 7-wide rows
        case(1, 48, 7, 7, 80, 3, 1, 1, 1, 1),
        // a 5×5 kernel over rows of 17
        case(1, 16, 17, 17, 64, 5, 1, 2, 1, 1),
        // uneven padding, a 3×2 kernel, a stride on one axis
        Case {
            p: [0, 1, 2, 0],
            s: [1, 2],
            k: [3, 2],
            ..case(1, 16, 8, 9, 32, 3, 1, 0, 1, 1)
        },
        // one output column; the padding at the end shorter than the stride
        Case {
            k: [3, 1],
            p: [1, 0, 1, 0],
            ..case(1, 16, 9, 1, 16, 3, 1, 1, 1, 1)
        },
        Case {
            p: [1, 1, 0, 0],
            ..case(1, 32, 8, 8, 32, 3, 2, 0, 1, 1)
        },
    ];
    if !all_available().contains(&Isa::Avx512) {
        return;
    }
    for cs in &cases {
        assert!(
            runs_blocked(Isa::Avx512, cs),
            "{cs:?} should run the blocked kernel"
        );
        run(Isa::Avx512, cs, false, false);
        run(Isa::Avx512, cs, false, true);
    }
    // a 1-D convolution (an audio front end), as a single row
    let one_d = Case {
        p: [0, 1, 0, 1],
        ..case(2, 32, 1, 40, 48, 3, 2, 1, 1, 1)
    };
    let row = Case {
        k: [1, 3],
        s: [1, 2],
        d: [1, 1],
        ..one_d
    };
    assert!(runs_blocked(Isa::Avx512, &row));
    run(Isa::Avx512, &row, true, false);
    // a 1×1 convolution keeps the product over NCHW planes; groups and dilations are not blocked
    assert!(!runs_blocked(
        Isa::Avx512,
        &case(1, 64, 14, 14, 64, 1, 1, 0, 1, 1)
    ));
    assert!(!runs_blocked(
        Isa::Avx512,
        &case(1, 32, 14, 14, 32, 3, 1, 1, 1, 2)
    ));
    assert!(!runs_blocked(
        Isa::Avx512,
        &case(1, 32, 14, 14, 32, 3, 1, 2, 2, 1)
    ));
    assert!(!runs_blocked(Isa::Avx2, &case(1, 32, 14, 14, 32, 3, 1, 1, 1, 1)));
}

/// `f(three)`, `three` being the 2-D geometry `two` with a leading spatial axis of 1: the same
/// convolution, computed by the N-d paths.
fn with_leading_axis<R>(two: &ConvGeom<'_>, f: impl FnOnce(&ConvGeom<'_>) -> R) -> R {
    let (i, o, k) = (two.in_sp, two.out_sp, two.kernel);
    let (s, p, d) = (two.strides, two.pads, two.dilations);
    let three = ConvGeom {
        in_sp: &[1, i[0], i[1]],
        out_sp: &[1, o[0], o[1]],
        kernel: &[1, k[0], k[1]],
        strides: &[1, s[0], s[1]],
        pads: &[0, p[0], p[1], 0, p[2], p[3]],
        dilations: &[1, d[0], d[1]],
        ..*two
    };
    f(&three)
}

/// The N-d path (im2col built) against the 2-D one: the same convolution with a leading axis of 1.
#[test]
fn convolutions_3d_match_the_2d_path() {
    // (c, m, h, w, k, s, p [top, left, bottom, right], d, group)
    let cases = [
        (4, 6, 9, 7, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1),
        (6, 4, 8, 8, [3, 2], [2, 1], [1, 0, 1, 2], [1, 2], 2),
    ];
    for isa in all_available() {
        for (c, m, h, w, k, s, p, d, group) in cases {
            let o = |i: usize, n: usize| (n + p[i] + p[i + 2] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
            let (oh, ow) = (o(0, h), o(1, w));
            let x = det(2 * c * h * w, 7);
            let wt = det(m * (c / group) * k[0] * k[1], 8);
            let bias = det(m, 9);
            let two = ConvGeom {
                n: 2,
                c,
                m,
                group,
                in_sp: &[h, w],
                out_sp: &[oh, ow],
                kernel: &k,
                strides: &s,
                pads: &p,
                dilations: &d,
            };
            let e = Epilogue { steps: vec![] };
            let epi = Epi::with_isa(&e, &[], &[2, m, oh, ow], 2, isa).unwrap();
            let a = conv_isa(isa, &x, &wt, Some(&bias), &two, &epi, None).unwrap();
            let b = with_leading_axis(&two, |three| {
                conv_isa(isa, &x, &wt, Some(&bias), three, &epi, None).unwrap()
            });
            assert_eq!(a.len(), 2 * m * oh * ow);
            for (i, (p, q)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                    "{isa:?} c={c} m={m} at {i}: {p} vs {q}"
                );
            }
        }
    }
}

#[test]
fn depthwise_convolutions_match_a_direct_loop_on_every_instruction_set() {
    let cases = [
        case(2, 8, 9, 9, 8, 3, 1, 1, 1, 8),
        case(1, 6, 10, 7, 6, 5, 2, 2, 1, 6),
        case(1, 5, 9, 11, 5, 3, 1, 2, 2, 5),
        case(1, 3, 40, 37, 3, 3, 2, 1, 1, 3),
        case(3, 4, 7, 7, 4, 5, 1, 2, 1, 4),
        case(1, 2, 1, 1, 2, 3, 1, 1, 1, 2),
        // small planes run with channels in lanes on x86-64: channel counts past a vector, not a
        // multiple of it, dilated, strided
        case(1, 37, 14, 14, 37, 5, 2, 2, 1, 37),
        case(2, 20, 9, 12, 20, 3, 1, 2, 2, 20),
        case(1, 4, 30, 33, 4, 3, 2, 1, 1, 4),
        case(2, 40, 7, 7, 40, 5, 1, 2, 1, 40),
        // large planes (over 20 × 20 outputs) run plane by plane, with AVX-512 read straight from
        // the input: 3×3 and 5×5, strides 1 and 2, widths off the 32 columns of a block, row
        // counts off the 4 of a band, pads on one side only, pads wider than the kernel, a 1×7
        case(1, 3, 36, 35, 3, 3, 1, 1, 1, 3),
        case(1, 18, 66, 66, 18, 3, 2, 1, 1, 18),
        case(1, 4, 30, 45, 4, 5, 1, 2, 1, 4),
        case(2, 3, 57, 63, 3, 5, 2, 2, 1, 3),
        Case {
            p: [0, 0, 1, 1],
            ..case(1, 2, 48, 50, 2, 3, 2, 0, 1, 2)
        },
        case(1, 2, 25, 22, 2, 3, 1, 3, 1, 2),
        Case {
            k: [1, 7],
            p: [0, 3, 0, 3],
            ..case(1, 2, 30, 40, 2, 3, 1, 0, 1, 2)
        },
        Case {
            p: [0, 2, 1, 0],
            s: [3, 2],
            k: [2, 3],
            ..case(1, 3, 11, 16, 3, 3, 1, 0, 1, 3)
        },
    ];
    for isa in all_available() {
        for cs in &cases {
            run(isa, cs, false, false);
        }
    }
}

/// The 2-D col2im against the N-d one (the same transposed convolution with a leading axis of 1).
#[test]
fn transposed_convolutions_2d_match_the_nd_path() {
    // (c, m, h, w, k, s, p, d, group)
    let cases = [
        (4, 6, 5, 7, [2, 2], [2, 2], [0, 0, 0, 0], [1, 1], 1),
        (6, 4, 4, 4, [3, 3], [2, 1], [1, 0, 1, 2], [1, 2], 2),
        (3, 5, 6, 3, [4, 1], [3, 2], [2, 0, 0, 0], [2, 1], 1),
    ];
    for (c, m, h, w, k, s, p, d, group) in cases {
        let o = |i: usize, n: usize| (n - 1) * s[i] + d[i] * (k[i] - 1) + 1 - p[i] - p[i + 2];
        let (oh, ow) = (o(0, h), o(1, w));
        let x = det(2 * c * h * w, 7);
        let wt = det(c * (m / group) * k[0] * k[1], 8);
        let bias = det(m, 9);
        let two = ConvGeom {
            n: 2,
            c,
            m,
            group,
            in_sp: &[h, w],
            out_sp: &[oh, ow],
            kernel: &k,
            strides: &s,
            pads: &p,
            dilations: &d,
        };
        let a = conv_transpose_f32(&x, &wt, Some(&bias), &two).unwrap();
        let b = with_leading_axis(&two, |three| {
            conv_transpose_f32(&x, &wt, Some(&bias), three).unwrap()
        });
        assert_eq!(a.len(), 2 * m * oh * ow);
        for (i, (p, q)) in a.iter().zip(&b).enumerate() {
            assert!(
                (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                "case c={c} m={m} at {i}: {p} vs {q}"
            );
        }
    }
}
