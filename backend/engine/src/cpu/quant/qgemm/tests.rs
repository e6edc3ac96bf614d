//! The integer product on raw codes against the reference on centred values (`igemm`), exactly,
//! for every kernel this CPU has.

use super::{Codes, PackedLeft, PackedRight, QKernel, Sink, Sums, qgemm};
use crate::cpu::quant::igemm::{ConvGeom, centred, conv_i32, igemm};
use crate::cpu::quant::qconv::{FilterOrder, PackedFilters, conv_q, filter_order};
use crate::cpu::simd::all_available;

/// Every kernel this CPU runs (none on a CPU without AVX2).
fn kernels() -> Vec<QKernel> {
    let mut ks: Vec<QKernel> = all_available().into_iter().filter_map(QKernel::for_isa).collect();
    ks.dedup();
    ks
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Zero points of a type: one, or `per` of them.
    fn zero_points(&mut self, signed: bool, per: usize) -> Vec<i32> {
        let n = if self.next().is_multiple_of(2) { 1 } else { per };
        (0..n).map(|_| code(self.next() as u8, signed)).collect()
    }
}

/// The sums row by row through [`Sink::put`], as a sink that does not keep them in place sees them.
struct Rows;

impl Sink for Rows {
    type Out = i32;

    fn put(&self, _: usize, _: usize, sums: &[i32], dst: &mut [i32]) {
        dst.copy_from_slice(sums);
    }
}

fn code(b: u8, signed: bool) -> i32 {
    if signed { i32::from(b as i8) } else { i32::from(b) }
}

fn codes(bits: &[u8], signed: bool) -> Codes<'_> {
    if signed {
        Codes::i8(bytemuck::cast_slice(bits))
    } else {
        Codes::u8(bits)
    }
}

const SIGNS: [(bool, bool); 4] = [(false, true), (false, false), (true, true), (true, false)];

/// The reference: codes minus zero points, then the i16 product.
fn reference(a: (&[u8], bool, &[i32]), b: (&[u8], bool, &[i32]), m: usize, k: usize, n: usize) -> Vec<i32> {
    let pick = |z: &[i32], i: usize| z[if z.len() == 1 { 0 } else { i }];
    let av: Vec<i32> = a.0.iter().map(|&x| code(x, a.1)).collect();
    let bv: Vec<i32> = b.0.iter().map(|&x| code(x, b.1)).collect();
    let ac = centred(&av, |i| pick(a.2, i / k.max(1)));
    let bc = centred(&bv, |i| pick(b.2, i % n));
    let mut c = vec![0; m * n];
    igemm(m, k, n, &ac, &bc, &mut c);
    c
}

/// Checks a product for every type pair, with zero points per row and column, and as a symmetric
/// weight times an activation has them (every row's 0, one for all columns).
fn check_product(kernel: QKernel, rng: &mut Rng, (m, k, n): (usize, usize, usize)) {
    for ((sa, sb), symmetric) in SIGNS.into_iter().flat_map(|s| [(s, false), (s, true)]) {
        let (a, b) = (rng.bytes(m * k), rng.bytes(k * n));
        let (za, zb) = if symmetric {
            (vec![0; m], rng.zero_points(sb, 1))
        } else {
            (rng.zero_points(sa, m), rng.zero_points(sb, n))
        };
        let l = PackedLeft::pack(kernel, codes(&a, sa), m, k);
        let r = PackedRight::pack(kernel, codes(&b, sb), k, n, sa);
        let want = reference((&a, sa, &za), (&b, sb, &zb), m, k, n);
        let mut c = vec![i32::MIN; m * n];
        qgemm(&l, &r, &za, &zb, &Sums, &mut c);
        assert_eq!(
            c, want,
            "{kernel:?} {m}×{k}×{n}, a signed {sa}, b signed {sb}, zero points {za:?} {zb:?}"
        );
        // through a sink that takes whole rows, as the requantizing one does
        let mut c = vec![i32::MIN; m * n];
        qgemm(&l, &r, &za, &zb, &Rows, &mut c);
        assert_eq!(
            c, want,
            "{kernel:?} {m}×{k}×{n} by rows, zero points {za:?} {zb:?}"
        );
    }
}

#[test]
fn qgemm_matches_the_reference_for_every_type_pair_and_ragged_shape() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for kernel in kernels() {
        for shape in [
            (1, 1, 1),
            (3, 5, 4),
            (9, 7, 33),
            (17, 13, 65),
            (8, 4, 32),
            (5, 0, 3),
            (1, 259, 70),
        ] {
            check_product(kernel, &mut rng, shape);
        }
    }
}

#[test]
fn qgemm_splits_work_by_rows_and_by_columns_with_the_same_numbers() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    let mut rng = Rng(77);
    pool.install(|| {
        for kernel in kernels() {
            // many row panels (split by rows); few rows and many columns (split by columns)
            for shape in [(75, 41, 37), (3, 50, 701)] {
                check_product(kernel, &mut rng, shape);
            }
        }
    });
}

#[test]
fn qgemm_wraps_past_the_i32_range_as_the_reference_does() {
    // 255 · (−128) · 70 000 < −2³¹: the exact sum leaves the i32 range
    let k = 70_000;
    for kernel in kernels() {
        let a = vec![255u8; k];
        let b = vec![0x80u8; k];
        let l = PackedLeft::pack(kernel, codes(&a, false), 1, k);
        let r = PackedRight::pack(kernel, codes(&b, true), k, 1, false);
        let mut c = [0];
        qgemm(&l, &r, &[0], &[0], &Sums, &mut c);
        let want = (255i64 * -128 * k as i64) as i32;
        assert_eq!(c[0], want, "{kernel:?}");
        assert_eq!(reference((&a, false, &[0]), (&b, true, &[0]), 1, k, 1), [want]);
    }
}

/// A convolution's geometry for [`conv_q_matches`]: images, channels, filters, groups, input,
/// kernel, strides, pads, dilations.
type Geom = (
    usize,
    usize,
    usize,
    usize,
    [usize; 2],
    [usize; 2],
    [usize; 2],
    [usize; 2],
    [usize; 2],
);

#[test]
fn conv_q_matches_the_reference_convolution() {
    conv_q_matches(&[
        // 3×3, pad 1, stride 1: the common layer
        (1, 3, 8, 1, [7, 9], [3, 3], [1, 1], [1, 1], [1, 1]),
        // two groups, stride 2, dilation 2, two images, one padded side
        (2, 4, 6, 2, [6, 5], [2, 2], [2, 1], [1, 0], [2, 2]),
        // 1×1 with more channels than a k group
        (1, 10, 5, 1, [3, 4], [1, 1], [1, 1], [0, 0], [1, 1]),
        // unit strides, dilated, padded on one axis, two images: each kernel position's row one
        // run of the padded planes
        (2, 5, 9, 1, [11, 30], [3, 2], [1, 1], [2, 0], [2, 3]),
        // a 1×1 with padding reads padded planes too
        (1, 3, 4, 1, [5, 6], [1, 1], [1, 1], [1, 2], [1, 1]),
    ]);
}

/// Fewer images than threads and hundreds of positions: each image's positions split into strips
/// that start and end inside output rows (875 positions, rows of 35), one task each.
#[test]
fn conv_q_split_into_strips_of_positions_matches_the_reference() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    pool.install(|| {
        conv_q_matches(&[
            // a network's first layer: 3 channels, 3×3, stride 2
            (1, 3, 8, 1, [50, 70], [3, 3], [2, 2], [1, 1], [1, 1]),
            // two images of two groups, and a 1×1 that reads the image as it is
            (2, 4, 6, 2, [50, 70], [3, 3], [2, 2], [1, 1], [1, 1]),
            (1, 5, 7, 1, [25, 35], [1, 1], [1, 1], [0, 0], [1, 1]),
            // unit strides: strips of the padded planes' wider rows
            (1, 6, 10, 2, [27, 33], [3, 3], [1, 1], [1, 1], [1, 1]),
        ]);
    });
}

fn conv_q_matches(geoms: &[Geom]) {
    let mut rng = Rng(4242);
    let mut by_tap = 0;
    for kernel in kernels() {
        for &(n, c, m, group, input, kernel_dims, strides, pads, dil) in geoms {
            let output: Vec<usize> = (0..2)
                .map(|d| (input[d] + 2 * pads[d] - dil[d] * (kernel_dims[d] - 1) - 1) / strides[d] + 1)
                .collect();
            let g = ConvGeom {
                n,
                c,
                m,
                group,
                input: input.to_vec(),
                kernel: kernel_dims.to_vec(),
                output,
                strides: strides.to_vec(),
                pad_begin: pads.to_vec(),
                dilations: dil.to_vec(),
            };
            let per_filter = c / group * kernel_dims.iter().product::<usize>();
            for (sx, sw) in SIGNS {
                let x = rng.bytes(n * c * input.iter().product::<usize>());
                let w = rng.bytes(m * per_filter);
                let x_zp = rng.zero_points(sx, 1)[0];
                // symmetric filters (every zero point 0) for the unsigned input, else one per filter
                let w_zp = if sx { rng.zero_points(sw, m) } else { vec![0; m] };
                let xv: Vec<i32> = x.iter().map(|&v| code(v, sx)).collect();
                let wv: Vec<i32> = w.iter().map(|&v| code(v, sw)).collect();
                let xc = centred(&xv, |_| x_zp);
                let wc = centred(&wv, |i| w_zp[if w_zp.len() == 1 { 0 } else { i / per_filter }]);
                let want = conv_i32(&xc, &wc, &g);
                // the filters by channel, and as a plan packs them (by tap when symmetric)
                let symmetric = w_zp.iter().all(|&z| z == 0);
                by_tap += usize::from(filter_order(&g, symmetric) != FilterOrder::ByChannel);
                for filters in [
                    PackedFilters::pack(kernel, codes(&w, sw), m, group),
                    PackedFilters::for_conv(kernel, codes(&w, sw), &g, symmetric),
                ] {
                    let y = conv_q(kernel, codes(&x, sx), x_zp, &filters, &w_zp, &g, &Sums).unwrap();
                    assert_eq!(y, want, "{kernel:?} {g:?}, x signed {sx}, w signed {sw}");
                    let y = conv_q(kernel, codes(&x, sx), x_zp, &filters, &w_zp, &g, &Rows).unwrap();
                    assert_eq!(y, want, "{kernel:?} {g:?} by rows, x signed {sx}, w signed {sw}");
                }
            }
        }
    }
    assert!(by_tap > 0, "no geometry packed its filters by kernel position");
}
