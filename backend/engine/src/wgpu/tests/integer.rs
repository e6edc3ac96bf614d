//! The integer products (MatMulInteger, ConvInteger) against CPU loops: the packed dot-product kernels of
//! `idot.rs` and the direct ones of `quant.rs`, bit for bit, across tile edges, code types, zero-point
//! layouts, batches, groups, padding, strides and dilations.

use super::support::*;
use crate::wgpu::error::GpuResult;
use crate::wgpu::kernels::idot::ByteCodes;
use crate::wgpu::kernels::quant::{IconvGeom, IgemmShape, iconv, igemm};
use crate::wgpu::plan::{DTensor, HostTensor, PlanBuilder};

/// Deterministic codes in `lo..=hi`.
fn codes(n: usize, lo: i64, hi: i64, seed: u64) -> Vec<i64> {
    rand(n, seed)
        .iter()
        .map(|v| lo + ((f64::from(*v) + 1.0) / 2.0 * (hi - lo + 1) as f64) as i64 % (hi - lo + 1))
        .collect()
}

/// The value range of uint8 (offset 128) or int8 (offset 0) codes.
fn range(offset: i32) -> (i64, i64) {
    if offset == 128 { (0, 255) } else { (-128, 127) }
}

/// The kernels a launcher dispatched, and its outputs (as i64).
fn run_ints(
    inputs: Vec<HostTensor>,
    build: impl FnOnce(&mut PlanBuilder, &[DTensor]) -> GpuResult<Vec<DTensor>>,
) -> (Vec<&'static str>, Vec<Vec<i64>>) {
    let mut names = Vec::new();
    let outs = run(inputs, |b, x| {
        let outs = build(b, x)?;
        names = b.kernel_names();
        Ok(outs)
    });
    (names, outs.iter().map(as_i64).collect())
}

#[test]
fn integer_matmul_packed_and_direct_match_a_wrapping_cpu_loop() {
    // (batch of a, batch of b, m, k, n, offsets of a and b, zero point per row / per column)
    for (a_batch, b_batch, m, k, n, (oa, ob), (zp_rows, zp_cols)) in [
        (vec![], vec![], 1, 1, 1, (128, 0), (false, false)),
        (vec![], vec![], 70, 37, 67, (128, 0), (true, true)),
        (vec![], vec![], 17, 16, 64, (0, 0), (false, true)),
        (vec![2, 3], vec![3], 33, 21, 5, (128, 128), (true, false)),
        (vec![2, 1], vec![1, 2], 5, 3, 130, (0, 128), (false, false)),
        // sums past i32: 255 · 255 · 40,000 wraps, in both kernels as in the loop
        (vec![], vec![], 2, 40_000, 3, (128, 128), (false, false)),
    ] {
        let (alo, ahi) = range(oa);
        let (blo, bhi) = range(ob);
        let extreme = k == 40_000;
        let an = a_batch.iter().product::<usize>() * m * k;
        let bn = b_batch.iter().product::<usize>() * k * n;
        let av = if extreme {
            vec![ahi; an]
        } else {
            codes(an, alo, ahi, 1)
        };
        let bv = if extreme {
            vec![bhi; bn]
        } else {
            codes(bn, blo, bhi, 2)
        };
        let za = if extreme {
            vec![alo]
        } else {
            codes(if zp_rows { m } else { 1 }, alo, ahi, 3)
        };
        let zb = if extreme {
            vec![blo]
        } else {
            codes(if zp_cols { n } else { 1 }, blo, bhi, 4)
        };
        let rank = a_batch.len().max(b_batch.len());
        let pad = |v: &[usize]| [vec![1; rank - v.len()], v.to_vec()].concat();
        let (pa, pb) = (pad(&a_batch), pad(&b_batch));
        let batch: Vec<usize> = pa.iter().zip(&pb).map(|(x, y)| *x.max(y)).collect();
        let strides = |dims: &[usize], mat: usize| {
            let mut out = vec![0; rank];
            let mut s = mat;
            for d in (0..rank).rev() {
                out[d] = if dims[d] == 1 { 0 } else { s };
                s *= dims[d];
            }
            out
        };
        let shape = IgemmShape {
            m,
            k,
            n,
            batch: batch.clone(),
            a_strides: strides(&pa, 1),
            b_strides: strides(&pb, 1),
        };
        let mut want = Vec::new();
        let total: usize = batch.iter().product();
        for t in 0..total {
            let (mut ao, mut bo, mut rest) = (0, 0, t);
            for d in (0..rank).rev() {
                let c = rest % batch[d];
                rest /= batch[d];
                ao += c * shape.a_strides[d];
                bo += c * shape.b_strides[d];
            }
            for i in 0..m {
                for j in 0..n {
                    let zi = za[if zp_rows { i } else { 0 }];
                    let zj = zb[if zp_cols { j } else { 0 }];
                    let mut s = 0i32;
                    for q in 0..k {
                        let x = av[(ao * m + i) * k + q] - zi;
                        let y = bv[(bo * k + q) * n + j] - zj;
                        s = s.wrapping_add((x * y) as i32);
                    }
                    want.push(i64::from(s));
                }
            }
        }
        let a_shape = [pa.clone(), vec![m, k]].concat();
        let b_shape = [pb.clone(), vec![k, n]].concat();
        let inputs = vec![
            i64s(&a_shape, &av),
            i64s(&b_shape, &bv),
            i64s(&[za.len()], &za),
            i64s(&[zb.len()], &zb),
        ];
        let (names, outs) = run_ints(inputs, |b, x| {
            let packed = Some(ByteCodes { a: oa, b: ob });
            Ok(vec![
                igemm(b, "packed", &shape, packed, &x[0], &x[1], &x[2], &x[3])?,
                igemm(b, "direct", &shape, None, &x[0], &x[1], &x[2], &x[3])?,
            ])
        });
        assert_eq!(names, ["igemm_dp4", "igemm"], "the kernels picked");
        let case = format!("a {a_shape:?} b {b_shape:?}, offsets {oa}/{ob}");
        assert!(outs[0] == want, "packed kernel, {case}");
        assert!(outs[1] == want, "direct kernel, {case}");
    }
}

/// A direct loop over ConvInteger's definition, wrapping as i32.
fn conv_reference(g: &IconvGeom, x: &[i64], w: &[i64], zx: i64, zw: &[i64]) -> Vec<i64> {
    let [n, mm, oh, ow] = g.out;
    let (cg, mg) = (g.channels / g.group, mm / g.group);
    let [ih, iw] = g.input;
    let [kh, kw] = g.kernel;
    let mut out = Vec::with_capacity(n * mm * oh * ow);
    for img in 0..n {
        for m in 0..mm {
            let grp = m / mg;
            let z = zw[if zw.len() > 1 { m } else { 0 }];
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut s = 0i32;
                    for c in 0..cg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let yy =
                                    (oy * g.strides[0] + ky * g.dilations[0]) as i64 - g.pad_begin[0] as i64;
                                let xx =
                                    (ox * g.strides[1] + kx * g.dilations[1]) as i64 - g.pad_begin[1] as i64;
                                if yy < 0 || xx < 0 || yy >= ih as i64 || xx >= iw as i64 {
                                    continue;
                                }
                                let xi =
                                    ((img * g.channels + grp * cg + c) * ih + yy as usize) * iw + xx as usize;
                                let wi = ((m * cg + c) * kh + ky) * kw + kx;
                                s = s.wrapping_add(((x[xi] - zx) * (w[wi] - z)) as i32);
                            }
                        }
                    }
                    out.push(i64::from(s));
                }
            }
        }
    }
    out
}

#[test]
fn integer_convolution_packed_and_direct_match_a_cpu_loop() {
    // (images, channels, output channels, groups, input, kernel, strides, pads, dilations, offsets of w and
    // x, zero point per output channel)
    for (n, c, m, group, input, kernel, strides, pads, dil, (ow_, ox_), per_channel) in [
        (
            1,
            3,
            8,
            1,
            [24, 40],
            [3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            (0, 128),
            false,
        ),
        (
            2,
            5,
            70,
            1,
            [9, 11],
            [3, 2],
            [1, 1],
            [0, 2],
            [1, 1],
            (0, 128),
            true,
        ),
        (1, 8, 32, 2, [7, 7], [3, 3], [1, 2], [2, 1], [2, 1], (0, 0), true),
        (
            3,
            6,
            24,
            3,
            [1, 30],
            [1, 5],
            [1, 3],
            [0, 2],
            [1, 2],
            (128, 128),
            false,
        ),
        (1, 4, 8, 4, [6, 6], [3, 3], [1, 1], [1, 1], [1, 1], (0, 128), true),
    ] {
        let out_dim = |d: usize| (input[d] + 2 * pads[d] - dil[d] * (kernel[d] - 1) - 1) / strides[d] + 1;
        let g = IconvGeom {
            out: [n, m, out_dim(0), out_dim(1)],
            channels: c,
            group,
            input,
            kernel,
            strides,
            pad_begin: pads,
            dilations: dil,
        };
        let (xlo, xhi) = range(ox_);
        let (wlo, whi) = range(ow_);
        let xv = codes(n * c * input[0] * input[1], xlo, xhi, 5);
        let wv = codes(m * (c / group) * kernel[0] * kernel[1], wlo, whi, 6);
        let zx = codes(1, xlo, xhi, 7);
        let zw = codes(if per_channel { m } else { 1 }, wlo, whi, 8);
        let want = conv_reference(&g, &xv, &wv, zx[0], &zw);
        let inputs = vec![
            i64s(&[n, c, input[0], input[1]], &xv),
            i64s(&[m, c / group, kernel[0], kernel[1]], &wv),
            i64s(&[1], &zx),
            i64s(&[zw.len()], &zw),
        ];
        let (names, outs) = run_ints(inputs, |b, x| {
            let packed = Some(ByteCodes { a: ow_, b: ox_ });
            Ok(vec![
                iconv(b, "packed", &g, packed, &x[0], &x[1], &x[2], &x[3])?,
                iconv(b, "direct", &g, None, &x[0], &x[1], &x[2], &x[3])?,
            ])
        });
        // groups of fewer than 8 channels keep the direct kernel
        let first = if m / group >= 8 { "iconv_dp4" } else { "iconv" };
        assert_eq!(names, [first, "iconv"], "the kernels picked");
        let case = format!("{g:?}, offsets {ow_}/{ox_}");
        assert!(outs[0] == want, "packed kernel, {case}");
        assert!(outs[1] == want, "direct kernel, {case}");
    }
}
