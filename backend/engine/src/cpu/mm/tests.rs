use super::*;
use crate::cpu::epilogue::{NoTail, RegisterAct};
use crate::cpu::simd::all_available;
use crate::cpu::test_data::det_uniform;
use crate::ir::UnaryOp;

/// Relative tolerance of an f32 product against the f64 reference, per √k accumulated terms.
const RTOL: f64 = 1e-5;

fn det(n: usize, seed: u32) -> Vec<f32> {
    det_uniform(n, seed, 1.0)
}

/// Adds `row * 0.5 - col * 0.25` so a tail applied to the wrong place shows.
struct Marker;

impl RowEpilogue for Marker {
    fn is_noop(&self) -> bool {
        false
    }
    fn apply_rows(&self, row0: usize, col0: usize, rows: &mut [&mut [f32]]) {
        for (i, v) in rows.iter_mut().enumerate() {
            for (j, x) in v.iter_mut().enumerate() {
                *x += (row0 + i) as f32 * 0.5 - (col0 + j) as f32 * 0.25;
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum BKind {
    /// row-major, row stride ldb, read block by block
    Dense,
    /// stored transposed (n × k), read block by block
    Transposed,
    /// packed once
    Packed,
}

#[allow(clippy::too_many_arguments)]
fn check(isa: Isa, m: usize, n: usize, k: usize, ldb: usize, ldc: usize, init: u8, bkind: BKind, par: bool) {
    let alpha = 0.5;
    let a = det(m * k, 1);
    let b = det(k.max(1) * ldb.max(n), 2);
    let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * ldb + i / k]).collect();
    let bias_r = det(m, 3);
    let bias_c = det(n, 4);
    let start = det(m.max(1) * ldc, 5);
    let mut c = vec![f32::NAN; m.max(1) * ldc];
    if init == 3 {
        c.copy_from_slice(&start);
    }
    let pa = PackedA::pack(
        MatRef {
            data: &a,
            off: 0,
            rs: k,
            cs: 1,
        },
        m,
        k,
        alpha,
        isa,
    )
    .unwrap();
    let init_v = match init {
        0 => Init::Zero,
        1 => Init::Row(&bias_r),
        2 => Init::Col(&bias_c),
        _ => Init::Acc,
    };
    let dense = MatRef {
        data: &b,
        off: 0,
        rs: ldb,
        cs: 1,
    };
    let trans = MatRef {
        data: &bt,
        off: 0,
        rs: 1,
        cs: k,
    };
    let res = match bkind {
        BKind::Dense => {
            let src = DenseB::new(dense, k, n).unwrap();
            gemm(
                &pa,
                BOp::Src { src: &src, k, n },
                &mut c,
                ldc,
                init_v,
                &Marker,
                par,
            )
        }
        BKind::Transposed => {
            let src = DenseB::new(trans, k, n).unwrap();
            gemm(
                &pa,
                BOp::Src { src: &src, k, n },
                &mut c,
                ldc,
                init_v,
                &Marker,
                par,
            )
        }
        BKind::Packed => {
            let pb = PackedB::pack(dense, k, n, 1.0, isa).unwrap();
            assert_eq!((pb.k(), pb.n()), (k, n));
            gemm(&pa, BOp::Packed(&pb), &mut c, ldc, init_v, &Marker, par)
        }
    };
    res.unwrap();
    for i in 0..m {
        for j in 0..n {
            let mut want = match init {
                0 => 0.0,
                1 => f64::from(bias_r[i]),
                2 => f64::from(bias_c[j]),
                _ => f64::from(start[i * ldc + j]),
            };
            for kk in 0..k {
                want += f64::from(alpha * a[i * k + kk]) * f64::from(b[kk * ldb + j]);
            }
            want += i as f64 * 0.5 - j as f64 * 0.25;
            let got = f64::from(c[i * ldc + j]);
            assert!(
                (got - want).abs() <= RTOL * (1.0 + want.abs()) * (k as f64).sqrt().max(1.0),
                "{isa:?} {bkind:?} m={m} n={n} k={k} init={init} at ({i},{j}): {got} vs {want}"
            );
        }
        for j in n..ldc {
            let v = c[i * ldc + j];
            let untouched = if init == 3 {
                v == start[i * ldc + j]
            } else {
                v.is_nan()
            };
            assert!(untouched, "{isa:?}: wrote past column {n} in row {i}");
        }
    }
}

/// Shapes around every tile edge of both kernels (MR 8/4, NR 48/24, vectors of 16/8 lanes, blocks
/// of K: one up to 192/384, else equal ones of at most 128/256), with row and column strides wider
/// than the matrix; the last one packs its B in more than one block of column tiles
/// (`B_BLOCK_BYTES`).
const SHAPES: [(usize, usize, usize); 17] = [
    (1, 1, 1),
    (2, 5, 3),
    (3, 70, 17),
    (4, 33, 9),
    (5, 16, 8),
    (8, 48, 16),
    (9, 49, 129),
    (13, 97, 300),
    (24, 100, 7),
    (7, 17, 257),
    (40, 130, 513),
    (72, 200, 27),
    (11, 50, 192),
    (11, 50, 193),
    (1, 1024, 64),
    (100, 1, 40),
    (3, 2900, 260),
];

#[test]
fn products_match_a_naive_loop_on_every_instruction_set() {
    for isa in all_available() {
        for &(m, n, k) in &SHAPES {
            for init in 0..4 {
                check(isa, m, n, k, n + 3, n + 5, init, BKind::Dense, false);
            }
            check(isa, m, n, k, n + 3, n + 5, 1, BKind::Transposed, false);
            check(isa, m, n, k, n, n + 2, 2, BKind::Packed, false);
            check(isa, m, n, k, n, n, 1, BKind::Dense, true);
            check(isa, m, n, k, n, n, 0, BKind::Packed, true);
        }
    }
}

#[test]
fn large_products_split_over_threads_match() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    pool.install(|| {
        for isa in all_available() {
            check(isa, 96, 1000, 150, 1000, 1000, 1, BKind::Dense, true);
            check(isa, 300, 50, 300, 50, 50, 2, BKind::Packed, true);
        }
    });
}

#[test]
fn empty_depth_gives_init_plus_tail_and_bad_bounds_are_errors() {
    for isa in all_available() {
        check(isa, 7, 16, 0, 16, 16, 1, BKind::Dense, false);
        check(isa, 0, 4, 3, 4, 4, 0, BKind::Dense, false);
        let a = det(6, 1);
        let pa = PackedA::pack(
            MatRef {
                data: &a,
                off: 0,
                rs: 3,
                cs: 1,
            },
            2,
            3,
            1.0,
            isa,
        )
        .unwrap();
        assert_eq!(pa.m(), 2);
        let b = det(12, 2);
        let bm = MatRef {
            data: &b,
            off: 0,
            rs: 4,
            cs: 1,
        };
        let src = DenseB::new(bm, 3, 4).unwrap();
        let mut c = vec![0.0; 7];
        let e = gemm(
            &pa,
            BOp::Src {
                src: &src,
                k: 3,
                n: 4,
            },
            &mut c,
            4,
            Init::Zero,
            &Marker,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("bounds"), "{e}");
        let e = gemm(
            &pa,
            BOp::Src {
                src: &src,
                k: 2,
                n: 4,
            },
            &mut [0.0; 8],
            4,
            Init::Zero,
            &Marker,
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains("bounds"), "{e}");
        assert!(DenseB::new(bm, 4, 4).is_err());
    }
}

/// A row-major A (rows contiguous: the in-register transpose) and a column-major one (the
/// element loop) pack to the same panels, `alpha` applied and the last panel's padding zeroed,
/// even in a reused buffer full of NaN.
#[test]
fn packed_a_panels_hold_a_by_k_steps() {
    for isa in all_available() {
        if isa == Isa::Scalar {
            continue; // the scalar path keeps A row-major
        }
        let mr = geo(isa).mr;
        for (m, k) in [(8usize, 8usize), (19, 21), (16, 3), (5, 40), (200, 384)] {
            for _ in 0..4 {
                arena::give(vec![f32::NAN; m.div_ceil(mr) * mr * k + 1024]);
            }
            let a = det(m * k, 7);
            let at: Vec<f32> = (0..m * k).map(|i| a[(i % m) * k + i / m]).collect();
            let row_major = MatRef {
                data: &a,
                off: 0,
                rs: k,
                cs: 1,
            };
            let col_major = MatRef {
                data: &at,
                off: 0,
                rs: 1,
                cs: m,
            };
            let want: Vec<f32> = (0..m.div_ceil(mr) * mr * k)
                .map(|i| {
                    let (panel, at_panel) = (i / (mr * k), i % (mr * k));
                    let (kk, row) = (at_panel / mr, panel * mr + at_panel % mr);
                    if row < m { a[row * k + kk] * 0.5 } else { 0.0 }
                })
                .collect();
            for (layout, src) in [("row-major", row_major), ("column-major", col_major)] {
                let pa = PackedA::pack(src, m, k, 0.5, isa).unwrap();
                assert_eq!(pa.data, want, "{isa:?} {layout} {m}×{k}");
                pa.recycle();
            }
        }
    }
}

/// A tail that is one activation, which the kernels apply in registers.
struct InRegisters(RegisterAct, UnaryOp);

impl RowEpilogue for InRegisters {
    fn is_noop(&self) -> bool {
        false
    }
    fn apply_rows(&self, _row0: usize, _col0: usize, rows: &mut [&mut [f32]]) {
        // the scalar path's way (the x86 kernels never call it for this tail)
        for v in rows.iter_mut() {
            crate::cpu::epilogue::unary_slice(self.1, v);
        }
    }
    fn in_registers(&self) -> Option<RegisterAct> {
        Some(self.0)
    }
}

/// Relu, Clip, HardSwish, Sigmoid and SiLU applied by the kernels before storing give what the
/// tail's own step gives after the product, bit for bit (NaN, and sums past exp's range, included),
/// only once the last block of K is summed, on partial tiles, with a bias and over threads.
#[test]
fn activations_in_registers_match_the_tail_applied_after_the_product() {
    let acts = [
        (RegisterAct::Relu, UnaryOp::Relu),
        (
            RegisterAct::Clip(-0.5, 0.75),
            UnaryOp::Clip { min: -0.5, max: 0.75 },
        ),
        (RegisterAct::HardSwish, UnaryOp::HardSwish),
        (RegisterAct::Sigmoid, UnaryOp::Sigmoid),
        (RegisterAct::Silu, UnaryOp::Silu),
    ];
    for isa in all_available() {
        for (m, n, k) in [(13, 100, 7), (9, 49, 300), (40, 130, 513), (3, 2900, 20)] {
            let mut a = det(m * k, 1);
            // row 1 sums to NaN; row 2 to ±hundreds, past the range where exp is 0 or overflows
            a[k] = f32::NAN;
            a[2 * k..3 * k].iter_mut().for_each(|v| *v *= 400.0);
            let bias = det(m, 3);
            let b = det(k * n, 2);
            let pa = PackedA::pack(
                MatRef {
                    data: &a,
                    off: 0,
                    rs: k,
                    cs: 1,
                },
                m,
                k,
                1.0,
                isa,
            )
            .unwrap();
            let src = DenseB::new(
                MatRef {
                    data: &b,
                    off: 0,
                    rs: n,
                    cs: 1,
                },
                k,
                n,
            )
            .unwrap();
            let bop = BOp::Src { src: &src, k, n };
            let mut plain = vec![0.0; m * n];
            gemm(&pa, bop, &mut plain, n, Init::Row(&bias), &NoTail, true).unwrap();
            for (act, u) in acts {
                let mut want = plain.clone();
                crate::cpu::epilogue::unary_slice(u, &mut want);
                let mut got = vec![f32::NAN; m * n];
                gemm(
                    &pa,
                    bop,
                    &mut got,
                    n,
                    Init::Row(&bias),
                    &InRegisters(act, u),
                    true,
                )
                .unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g == w || (g.is_nan() && w.is_nan()),
                        "{isa:?} {act:?} m={m} n={n} k={k} at {i}: {g:?} vs {w:?}"
                    );
                }
            }
        }
    }
}
