//! Direct convolution over blocks of 16 channels (NCHW16c), AVX-512.
//!
//! Each image is copied into padded planes with 16 channels interleaved (`[C/16][H'][W'][16]`), the
//! filters are packed at plan time as `[M/16][C/16][KH][KW][16 in][16 out]`, and each kernel call
//! keeps a tile of up to 4 × 16 output channels × 6 output positions in registers while it runs
//! over one block of 16 input channels and every tap of the kernel: one broadcast input value feeds
//! 4 multiply-adds, one filter vector 6. The positions of a call are consecutive in the flattened
//! output plane and may lie on two rows (each has its own offset into the input), so a 7-wide row
//! does not leave a call with 1 to 3 positions. A task owns a span of up to 48 positions of up to
//! 64 channels, accumulates it block of input channels after block in a buffer that stays in L1,
//! then writes it into the NCHW output and applies the tail there.
//!
//! The im2col product reads each input value once per tap from a packed copy that every task makes
//! for itself; here the taps are read in place, so the two cores share far less memory traffic
//! (ResNet-50's 3×3 convolutions gained 1.3–1.4× from the second core through im2col and ran at
//! 1.5–1.8× onnxruntime's time; here 0.9–1.07×).

// Raw-pointer SIMD loads and stores need `unsafe`; every function states what the caller guarantees.
#![allow(unsafe_code)]

use rayon::prelude::*;

use crate::cpu::arena;
use crate::cpu::conv::ConvGeom;
use crate::cpu::epilogue::Epi;
use crate::cpu::simd::Isa;

/// Channels per block: one AVX-512 vector of f32.
const LANES: usize = 16;
/// Blocks of output channels per kernel call.
const MAX_BLOCKS: usize = 4;
/// Output positions per task at most: its accumulators (4 blocks × 48 positions, 12 KiB) stay in
/// L1 beside a block's filters and input rows while the task runs over the input blocks.
const MAX_SPAN: usize = 48;
/// Output positions per kernel call: 4 × 6 accumulators, 4 filter vectors and a broadcast fill 29
/// of the 32 registers.
const MAX_POSITIONS: usize = 6;

impl ConvGeom<'_> {
    /// True when the convolution runs here: 1-D or 2-D, a kernel of more than one tap, no groups
    /// or dilations, input and output channels in whole blocks, more than one output position,
    /// and AVX-512. A 1×1 convolution reads each input once anyway: as a product of the NCHW
    /// planes it saves the two copies between layouts (ResNet-50's ran 1.2–1.5× slower here).
    pub(crate) fn blocked(&self, isa: Isa) -> bool {
        let out_len: usize = self.out_sp.iter().product();
        let taps: usize = self.kernel.iter().product();
        isa == Isa::Avx512
            && taps > 1
            && cfg!(target_arch = "x86_64")
            && matches!(self.in_sp.len(), 1 | 2)
            && self.group == 1
            && self.c.is_multiple_of(LANES)
            && self.m.is_multiple_of(LANES)
            && self.c > 0
            && self.m > 0
            && out_len > 1
            && self.dilations.iter().all(|&d| d == 1)
    }
}

/// The kernel's height and width (a 1-D convolution is one row).
fn kernel_hw(kernel: &[usize]) -> (usize, usize) {
    match *kernel {
        [kw] => (1, kw),
        [kh, kw] => (kh, kw),
        _ => (0, 0),
    }
}

/// A convolution's filters as the blocked kernel reads them:
/// `[M/16][C/16][KH][KW][16 input channels][16 output channels]`.
#[derive(Debug, Clone)]
pub(crate) struct BlockedFilters {
    m: usize,
    c: usize,
    kh: usize,
    kw: usize,
    data: Vec<f32>,
}

impl BlockedFilters {
    /// Pack `w` (`[M, C, KH, KW]` or `[M, C, KW]`) for the convolution `g` ([`ConvGeom::blocked`]).
    pub(crate) fn pack(w: &[f32], g: &ConvGeom<'_>) -> BlockedFilters {
        let (m, c) = (g.m, g.c);
        let (kh, kw) = kernel_hw(g.kernel);
        let taps = kh * kw;
        let cb = c / LANES;
        let mut data = vec![0f32; m * c * taps];
        for (i, &v) in w.iter().enumerate().take(m * c * taps) {
            let (mi, rest) = (i / (c * taps), i % (c * taps));
            let (ci, t) = (rest / taps, rest % taps);
            let block = (mi / LANES) * cb + ci / LANES;
            data[((block * taps + t) * LANES + ci % LANES) * LANES + mi % LANES] = v;
        }
        BlockedFilters { m, c, kh, kw, data }
    }

    /// True when these filters were packed for `g`.
    pub(crate) fn fits(&self, g: &ConvGeom<'_>) -> bool {
        (self.m, self.c, (self.kh, self.kw)) == (g.m, g.c, kernel_hw(g.kernel))
    }
}

/// The base pointer of the output, shared by the tasks of one convolution.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

// SAFETY: the pointer comes from the `&mut [f32]` that `conv_blocked` borrows for the whole
// parallel section, and each task writes only its own output positions of its own channels.
unsafe impl Send for OutPtr {}
// SAFETY: see `Send`.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The output from value `i` on.
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// Geometry of a 2-D blocked convolution (`conv_isa` runs a 1-D one as a single row).
#[derive(Clone, Copy)]
struct Shape {
    n: usize,
    cb: usize,
    m: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    /// padding before the first row and column
    pt: usize,
    pl: usize,
    /// the padded planes' height and width
    ph: usize,
    pw: usize,
}

impl Shape {
    fn of(g: &ConvGeom<'_>) -> Shape {
        assert!(
            g.in_sp.len() == 2 && g.pads.len() == 4,
            "blocked convolution: a 2-D geometry expected"
        );
        let (kh, kw) = (g.kernel[0], g.kernel[1]);
        let (h, w) = (g.in_sp[0], g.in_sp[1]);
        let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
        let (sh, sw) = (g.strides[0], g.strides[1]);
        let (pt, pl, pb, pr) = (g.pads[0], g.pads[1], g.pads[2], g.pads[3]);
        // the rows and columns the kernel reads: at least the padded input, and every tap of the
        // last output position even where the padding at the end is shorter than the stride
        let ph = (h + pt + pb).max((oh - 1) * sh + kh);
        let pw = (w + pl + pr).max((ow - 1) * sw + kw);
        Shape {
            n: g.n,
            cb: g.c / LANES,
            m: g.m,
            h,
            w,
            oh,
            ow,
            kh,
            kw,
            sh,
            sw,
            pt,
            pl,
            ph,
            pw,
        }
    }
}

/// The 2-D convolution `g` ([`ConvGeom::blocked`]) of `x` into `out` (N×M×positions, NCHW), bias
/// included, then `epi` on each output channel plane.
pub(crate) fn conv_blocked(
    x: &[f32],
    filters: &BlockedFilters,
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    out: &mut [f32],
) {
    let s = Shape::of(g);
    let plane = s.ph * s.pw * LANES;
    let in_len = s.h * s.w;
    let groups = s.m.div_ceil(MAX_BLOCKS * LANES);
    let op = OutPtr(out.as_mut_ptr());
    let out_len = s.oh * s.ow;
    assert!(
        x.len() >= s.n * s.cb * LANES * in_len && out.len() >= s.n * s.m * out_len,
        "blocked convolution: input or output too short"
    );
    // Each task runs a span of the plane's output positions (row after row, a span may hold the
    // end of one and the start of the next) for one group of output channels: spans of at most
    // MAX_SPAN positions, and enough of them to keep every thread busy.
    let threads = rayon::current_num_threads();
    let spans = out_len
        .div_ceil(MAX_SPAN)
        .max((4 * threads).div_ceil(groups))
        .min(out_len.div_ceil(MAX_POSITIONS))
        .max(1);
    // One image at a time: its interleaved copy is still in the cache when its tasks read it (a
    // batch's copies made first outgrew L2 and were read back from memory).
    // Every value of the copy is written by `interleave`, the padding included.
    let mut xb = arena::take(s.cb * plane);
    for ni in 0..s.n {
        let image = &x[ni * s.cb * LANES * in_len..][..s.cb * LANES * in_len];
        xb.par_chunks_mut(plane)
            .zip(image.par_chunks(LANES * in_len))
            .for_each(|(dst, src)| interleave(&s, src, dst));
        (0..groups * spans).into_par_iter().for_each(|t| {
            let (grp, i) = (t / spans, t % spans);
            let positions = out_len * i / spans..out_len * (i + 1) / spans;
            // SAFETY: `out` holds N×M×out_len values (asserted), is borrowed mutably for the
            // whole call, and each task writes only its own channels and positions.
            unsafe { output_span(&s, &xb, filters, bias, epi, op, ni, grp, positions) }
        });
    }
    arena::give(xb);
}

/// Output positions `positions` (of the flattened output plane) of image `ni` for the `grp`-th
/// group of up to 64 output channels, from the image's interleaved copy `xb`, written into the
/// NCHW output at `op`.
///
/// # Safety
/// `op` is the start of an output of N×M×out_len values that nothing else reads or writes but
/// the tasks of this convolution, each with its own `(ni, grp, positions)`.
#[allow(clippy::too_many_arguments)]
unsafe fn output_span(
    s: &Shape,
    xb: &[f32],
    filters: &BlockedFilters,
    bias: Option<&[f32]>,
    epi: &Epi<'_>,
    op: OutPtr,
    ni: usize,
    grp: usize,
    positions: std::ops::Range<usize>,
) {
    let plane = s.ph * s.pw * LANES;
    let out_len = s.oh * s.ow;
    let len = positions.len();
    let m0 = grp * MAX_BLOCKS * LANES;
    let blocks = ((s.m - m0) / LANES).min(MAX_BLOCKS);
    // the span's accumulators: [block][position][16]
    let mut acc = arena::take(blocks * len * LANES);
    for b in 0..s.cb {
        let first_tap = ((m0 / LANES) * s.cb + b) * s.kh * s.kw * LANES * LANES;
        let init = if b > 0 {
            Init::Load
        } else {
            bias.map_or(Init::Zero, |v| Init::Bias(&v[m0..m0 + blocks * LANES]))
        };
        let x = &xb[b * plane..][..plane];
        span(
            s,
            blocks,
            x,
            &filters.data[first_tap..],
            init,
            positions.clone(),
            &mut acc,
        );
    }
    // rows m0..m0 + 16·blocks of image ni, columns `positions`: inside the output and this
    // task's alone (the caller's guarantee)
    let first = |j: usize| op.at((ni * s.m + m0 + j) * out_len + positions.start);
    for blk in 0..blocks {
        let src = &acc[blk * len * LANES..][..len * LANES];
        // SAFETY: the 16 rows of this block, as above.
        unsafe { deinterleave(src, len, first(blk * LANES), out_len) };
    }
    if !epi.is_empty() {
        let mut rows: Vec<&mut [f32]> = (0..blocks * LANES)
            // SAFETY: as above; each row is borrowed once.
            .map(|j| unsafe { std::slice::from_raw_parts_mut(first(j), len) })
            .collect();
        epi.apply_rows_at(ni * s.m + m0, positions.start, &mut rows);
    }
    arena::give(acc);
}

/// `src` (16 channel planes of h × w) into `dst`, one padded plane of 16 interleaved channels.
fn interleave(s: &Shape, src: &[f32], dst: &mut [f32]) {
    let in_len = s.h * s.w;
    assert!(src.len() >= LANES * in_len && dst.len() >= s.ph * s.pw * LANES);
    for (y, drow) in dst.chunks_exact_mut(s.pw * LANES).enumerate() {
        let Some(iy) = y.checked_sub(s.pt).filter(|&iy| iy < s.h) else {
            drow.fill(0.0);
            continue;
        };
        drow[..s.pl * LANES].fill(0.0);
        let end = (s.pl + s.w) * LANES;
        drow[end..].fill(0.0);
        let mut ix = 0;
        while ix < s.w {
            let cols = (s.w - ix).min(LANES);
            // SAFETY: rows c·in_len + iy·w + ix.., c < 16, hold `cols` values inside `src`, and
            // the `cols` positions from pl + ix lie inside this row of `dst` (asserted above);
            // AVX-512 is available (`blocked` checked the instruction set).
            unsafe {
                x86::transpose_in(
                    src[iy * s.w + ix..].as_ptr(),
                    in_len,
                    cols,
                    drow[(s.pl + ix) * LANES..].as_mut_ptr(),
                );
            }
            ix += cols;
        }
    }
}

/// `acc` (`[position][16]`, `rows` positions) into 16 output rows of the NCHW output, `row_len`
/// values apart, from `dst` on.
///
/// # Safety
/// `dst + j·row_len`, `j < 16`, points to `rows` writable values that no one else accesses.
unsafe fn deinterleave(acc: &[f32], rows: usize, dst: *mut f32, row_len: usize) {
    assert!(acc.len() >= rows * LANES);
    let mut p = 0;
    while p < rows {
        let cols = (rows - p).min(LANES);
        // SAFETY: `acc` holds the positions read (asserted), the caller guarantees the rows.
        unsafe { x86::transpose_out(acc[p * LANES..].as_ptr(), cols, dst.wrapping_add(p), row_len) };
        p += cols;
    }
}

/// How a kernel call's accumulators start.
#[derive(Clone, Copy)]
enum Init<'a> {
    Zero,
    /// one value per output channel
    Bias(&'a [f32]),
    /// the row's accumulators so far (a later block of input channels)
    Load,
}

/// One block of input channels (`x`, its padded plane) into output positions `positions` of
/// `blocks` blocks of output channels, in calls of at most [`MAX_POSITIONS`] positions spread
/// evenly (7 as 4 + 3, not 6 + 1); a call's positions may lie on two output rows. `w`: the filters
/// from block (first output block, this input block); `acc`: `[block][position][16]`.
fn span(
    s: &Shape,
    blocks: usize,
    x: &[f32],
    w: &[f32],
    init: Init<'_>,
    positions: std::ops::Range<usize>,
    acc: &mut [f32],
) {
    let len = positions.len();
    let calls = len.div_ceil(MAX_POSITIONS);
    let (base, extra) = (len / calls, len % calls);
    let taps = s.kh * s.kw * LANES * LANES;
    let block_stride = s.cb * taps;
    // where output position j's first tap reads
    let input_at = |j: usize| ((j / s.ow) * s.sh * s.pw + (j % s.ow) * s.sw) * LANES;
    // Every position's last tap, in x (the last position's is the furthest); the last filter
    // vector of the last block, in w; the span's accumulators, in acc: the bounds every call
    // stays inside.
    let x_need = input_at(positions.end - 1) + ((s.kh - 1) * s.pw + s.kw) * LANES;
    let w_need = (blocks - 1) * block_stride + taps;
    assert!(
        positions.end <= s.oh * s.ow
            && x.len() >= x_need
            && w.len() >= w_need
            && acc.len() >= blocks * len * LANES
    );
    if let Init::Bias(b) = init {
        assert!(b.len() >= blocks * LANES);
    }
    let mut done = 0;
    for i in 0..calls {
        let p = base + usize::from(i < extra);
        let first = positions.start + done;
        let mut offsets = [0; MAX_POSITIONS];
        for (q, o) in offsets.iter_mut().enumerate().take(p) {
            *o = input_at(first + q);
        }
        let call = Call {
            x: x.as_ptr(),
            offsets,
            w: w.as_ptr(),
            acc: acc[done * LANES..].as_mut_ptr(),
            block_stride,
            acc_stride: len * LANES,
            row_stride: s.pw * LANES,
            kh: s.kh,
            kw: s.kw,
        };
        // SAFETY: the asserts above bound every read of x and w and every access to acc for
        // these p positions and `blocks` blocks; AVX-512 is available (`blocked` checked the
        // instruction set the caller detected).
        unsafe { x86::tile(blocks, p, call, init) };
        done += p;
    }
}

/// The pointers and strides of one kernel call.
#[derive(Clone, Copy)]
struct Call {
    /// the input block's padded plane
    x: *const f32,
    /// where each position's first tap lies in it (the first `P` are used)
    offsets: [usize; MAX_POSITIONS],
    /// filters of the first output block for this input block, first tap
    w: *const f32,
    /// accumulators of the first output block at the call's first position
    acc: *mut f32,
    /// values from one output block's filters to the next's
    block_stride: usize,
    /// values from one output block's accumulators to the next's
    acc_stride: usize,
    /// values from one padded input row to the next
    row_stride: usize,
    kh: usize,
    kw: usize,
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Call, Init, LANES};

    /// The kernel instance for `blocks` output blocks and `p` positions.
    ///
    /// # Safety
    /// AVX-512F is available; `1 ≤ blocks ≤ 4`, `1 ≤ p ≤ 6`; `call`'s pointers reach every value
    /// the kernel reads or writes for those blocks and positions (see [`super::row`]).
    pub(super) unsafe fn tile(blocks: usize, p: usize, call: Call, init: Init<'_>) {
        macro_rules! pick {
            ($($b:literal => [$($p:literal),*]),*) => {
                match (blocks, p) {
                    $($(($b, $p) => unsafe { tile_avx512::<$b, $p>(call, init) },)*)*
                    _ => unreachable!("blocked convolution: {blocks} blocks × {p} positions"),
                }
            };
        }
        pick!(1 => [1, 2, 3, 4, 5, 6], 2 => [1, 2, 3, 4, 5, 6], 3 => [1, 2, 3, 4, 5, 6], 4 => [1, 2, 3, 4, 5, 6])
    }

    /// Rows 0..16 (`stride` apart) of `cols ≤ 16` values from `src` into `cols` vectors of 16 at
    /// `dst`: value (row c, column i) to `dst[16·i + c]`.
    ///
    /// # Safety
    /// AVX-512F is available; the rows hold `cols` readable values; `dst` has `16·cols` writable.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_in(src: *const f32, stride: usize, cols: usize, dst: *mut f32) {
        // SAFETY: masked loads read only the first `cols` values of each row; stores as guaranteed.
        unsafe {
            let mask = mask(cols);
            let mut r = [_mm512_setzero_ps(); LANES];
            for (c, v) in r.iter_mut().enumerate() {
                *v = _mm512_maskz_loadu_ps(mask, src.add(c * stride));
            }
            let t = transpose16(r);
            for (i, v) in t.iter().enumerate().take(cols) {
                _mm512_storeu_ps(dst.add(i * LANES), *v);
            }
        }
    }

    /// `cols ≤ 16` vectors of 16 at `src` into rows 0..16 (`stride` apart) of `cols` values at
    /// `dst`: value `src[16·i + c]` to (row c, column i).
    ///
    /// # Safety
    /// AVX-512F is available; `src` has `16·cols` readable values; each row `cols` writable.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_out(src: *const f32, cols: usize, dst: *mut f32, stride: usize) {
        // SAFETY: loads as guaranteed; masked stores write only the first `cols` values of a row.
        unsafe {
            let mask = mask(cols);
            let mut r = [_mm512_setzero_ps(); LANES];
            for (i, v) in r.iter_mut().enumerate().take(cols) {
                *v = _mm512_loadu_ps(src.add(i * LANES));
            }
            let t = transpose16(r);
            for (c, v) in t.iter().enumerate() {
                _mm512_mask_storeu_ps(dst.add(c * stride), mask, *v);
            }
        }
    }

    fn mask(cols: usize) -> __mmask16 {
        if cols >= LANES { !0 } else { (1u16 << cols) - 1 }
    }

    /// The 16 × 16 transpose of `r` (rows) into columns: 32-bit, then 64-bit interleaves, then
    /// two rounds of 128-bit lane shuffles.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::needless_range_loop)]
    fn transpose16(r: [__m512; LANES]) -> [__m512; LANES] {
        let mut t = [_mm512_setzero_ps(); LANES];
        for i in 0..8 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        // u[4g + j], lane l: column 4l + j of rows 4g..4g + 4
        let mut u = [_mm512_setzero_ps(); LANES];
        for g in 0..4 {
            let pd = |v: __m512| _mm512_castps_pd(v);
            let (a, b, c, d) = (pd(t[4 * g]), pd(t[4 * g + 1]), pd(t[4 * g + 2]), pd(t[4 * g + 3]));
            u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        let mut out = [_mm512_setzero_ps(); LANES];
        for j in 0..4 {
            let even_lo = _mm512_shuffle_f32x4::<0x88>(u[j], u[4 + j]);
            let odd_lo = _mm512_shuffle_f32x4::<0xDD>(u[j], u[4 + j]);
            let even_hi = _mm512_shuffle_f32x4::<0x88>(u[8 + j], u[12 + j]);
            let odd_hi = _mm512_shuffle_f32x4::<0xDD>(u[8 + j], u[12 + j]);
            out[j] = _mm512_shuffle_f32x4::<0x88>(even_lo, even_hi);
            out[8 + j] = _mm512_shuffle_f32x4::<0xDD>(even_lo, even_hi);
            out[4 + j] = _mm512_shuffle_f32x4::<0x88>(odd_lo, odd_hi);
            out[12 + j] = _mm512_shuffle_f32x4::<0xDD>(odd_lo, odd_hi);
        }
        out
    }

    /// `B` blocks of 16 output channels × `P` positions: accumulators += every tap × every input
    /// channel of the block.
    ///
    /// # Safety
    /// As [`tile`].
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::needless_range_loop)]
    unsafe fn tile_avx512<const B: usize, const P: usize>(c: Call, init: Init<'_>) {
        // SAFETY (the whole body): pointers and extents as guaranteed by the caller.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); P]; B];
            match init {
                Init::Zero => {}
                Init::Bias(v) => {
                    for b in 0..B {
                        let bv = _mm512_loadu_ps(v.as_ptr().add(b * LANES));
                        for q in 0..P {
                            acc[b][q] = bv;
                        }
                    }
                }
                Init::Load => {
                    for b in 0..B {
                        for q in 0..P {
                            acc[b][q] = _mm512_loadu_ps(c.acc.add(b * c.acc_stride + q * LANES));
                        }
                    }
                }
            }
            for ky in 0..c.kh {
                for kx in 0..c.kw {
                    let xt = c.x.add(ky * c.row_stride + kx * LANES);
                    let wt = c.w.add((ky * c.kw + kx) * LANES * LANES);
                    for ci in 0..LANES {
                        let mut wv = [_mm512_setzero_ps(); B];
                        for b in 0..B {
                            wv[b] = _mm512_loadu_ps(wt.add(b * c.block_stride + ci * LANES));
                        }
                        for q in 0..P {
                            let xv = _mm512_set1_ps(*xt.add(c.offsets[q] + ci));
                            for b in 0..B {
                                acc[b][q] = _mm512_fmadd_ps(wv[b], xv, acc[b][q]);
                            }
                        }
                    }
                }
            }
            for b in 0..B {
                for q in 0..P {
                    _mm512_storeu_ps(c.acc.add(b * c.acc_stride + q * LANES), acc[b][q]);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::{Call, Init};

    // Never called: [`ConvGeom::blocked`](crate::cpu::conv::ConvGeom::blocked) is false off x86-64.

    pub(super) unsafe fn tile(_blocks: usize, _p: usize, _call: Call, _init: Init<'_>) {
        unreachable!("the blocked convolution needs AVX-512")
    }

    pub(super) unsafe fn transpose_in(_src: *const f32, _stride: usize, _cols: usize, _dst: *mut f32) {
        unreachable!("the blocked convolution needs AVX-512")
    }

    pub(super) unsafe fn transpose_out(_src: *const f32, _cols: usize, _dst: *mut f32, _stride: usize) {
        unreachable!("the blocked convolution needs AVX-512")
    }
}
