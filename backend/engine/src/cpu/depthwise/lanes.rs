//! Depthwise 2-D convolution with channels in vector lanes, for the small planes of the later
//! stages of MobileNet and EfficientNet (14×14 and 7×7 outputs, often 5×5 kernels).
//!
//! Vectorised over a plane's output columns ([`super::depthwise2d`]), a 7-wide row fills 7 of 16
//! lanes and every plane pays for its own padded copy. Here 16 channels share a vector instead:
//! the input is packed once per block of 16 channels as `[padded row][padded column][16]` (zero
//! pads), each output position then takes one aligned load and one multiply-add per tap whatever
//! the plane's width or stride, and the result is transposed back into channel planes, where the
//! epilogue runs. A task is one block of channels of one image (or a block of its output rows,
//! when there are few blocks for the threads) from packing to its output planes.

use rayon::prelude::*;

use super::Filters;
use crate::cpu::arena;
use crate::cpu::conv::ConvGeom;
use crate::cpu::epilogue::Epi;
use crate::cpu::padded::Window;
use crate::cpu::simd::Isa;
use crate::cpu::transpose;

/// Channels per block: one AVX-512 vector, two AVX2 vectors.
const L: usize = 16;

/// Output positions computed together: independent multiply-add chains that hide the latency.
const POSITIONS_AVX512: usize = 8;
const POSITIONS_AVX2: usize = 4;

/// Output planes up to this many positions run here: larger planes fill the column-vectorised
/// kernel's vectors, and their packed copy would no longer stay in the cache.
const MAX_PLANE: usize = 20 * 20;

/// True when the convolution `g` (depthwise) runs with channels in lanes on `isa`.
pub(super) fn applies(isa: Isa, g: &ConvGeom<'_>) -> bool {
    let plane: usize = g.out_sp.iter().product();
    matches!(isa, Isa::Avx512 | Isa::Avx2) && plane <= MAX_PLANE
}

/// The padded input's row width for window `w`: every column an output row reads.
fn padded_width(w: &Window) -> usize {
    (w.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1
}

/// `out` (N×C planes of oh×ow) = depthwise conv of `x` (N×C planes of ih×iw) with `w` (C×kh×kw),
/// plus `bias`, then `epi` (rows are planes).
pub(super) fn depthwise_lanes(
    isa: Isa,
    x: &[f32],
    filters: Filters<'_>,
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    out: &mut [f32],
) {
    let win = Window::new(g.in_sp, g.out_sp, g.kernel, g.strides, g.dilations, g.pads);
    let plane_out = win.oh * win.ow;
    if plane_out == 0 || g.c == 0 || out.len() != g.n * g.c * plane_out {
        return;
    }
    let blocks = g.c.div_ceil(L);
    let klen = win.kh * win.kw;
    let pw = padded_width(&win);
    let owned;
    let filters = match filters.lanes {
        Some(l) if l.len() == blocks * klen * L => l,
        _ => {
            owned = filter_lanes(filters.values, g.c, klen);
            &owned
        }
    };
    let mut biases = vec![0f32; blocks * L];
    if let Some(bias) = bias {
        biases[..g.c].copy_from_slice(&bias[..g.c]);
    }
    let taps: Vec<usize> = (0..klen)
        .map(|t| (t / win.kw) * win.dh * pw + (t % win.kw) * win.dw)
        .collect();
    // Blocks of output rows per task: whole planes when there are blocks enough for the threads.
    let tasks_wanted = 4 * rayon::current_num_threads();
    let parts = tasks_wanted.div_ceil(g.n * blocks).clamp(1, win.oh);
    let rows_per_task = win.oh.div_ceil(parts);
    let parts = win.oh.div_ceil(rows_per_task);
    let dst = OutPtr(out.as_mut_ptr());
    (0..g.n * blocks * parts).into_par_iter().for_each(|t| {
        let (nb, part) = (t / parts, t % parts);
        let (ni, b) = (nb / blocks, nb % blocks);
        let rows = part * rows_per_task..((part + 1) * rows_per_task).min(win.oh);
        // the padded rows these outputs read
        let first = rows.start * win.sh;
        let last = (rows.end - 1) * win.sh + (win.kh - 1) * win.dh;
        let mut packed = arena::take((last + 1 - first) * pw * L);
        pack_rows(isa, x, g, &win, (ni, b), first, pw, &mut packed);
        let block = Block {
            input: &packed,
            pw,
            taps: &taps,
            weights: &filters[b * klen * L..(b + 1) * klen * L],
            bias: &biases[b * L..(b + 1) * L],
        };
        let mut lanes = arena::take(rows.len() * win.ow * L);
        compute_rows(isa, &block, &win, rows.len(), &mut lanes);
        // back into the channel planes, through a block of planes' pieces laid end to end
        let (c0, nl, npos) = (b * L, L.min(g.c - b * L), rows.len() * win.ow);
        let mut pieces = arena::take(nl * npos);
        transpose::columns(isa, &lanes, npos, L, 0..nl, &mut pieces);
        for (l, piece) in pieces.chunks_exact(npos).enumerate() {
            let plane = ni * g.c + c0 + l;
            let at = plane * plane_out + rows.start * win.ow;
            // SAFETY: `out` is borrowed mutably for the whole parallel section and holds N×C
            // planes (checked above); this task alone writes positions `rows` of the planes of
            // block `b` of image `ni`, so the pieces of different tasks never overlap.
            #[allow(unsafe_code)]
            let dst = unsafe { std::slice::from_raw_parts_mut(dst.get().add(at), npos) };
            dst.copy_from_slice(piece);
            epi.apply(plane, rows.start * win.ow, dst);
        }
        for buf in [packed, lanes, pieces] {
            arena::give(buf);
        }
    });
}

/// The output's base pointer, shared by the tasks of one convolution.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);

impl OutPtr {
    /// The pointer (a method, so that closures capture the whole `Sync` wrapper).
    fn get(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: the pointer comes from a `&mut [f32]` borrowed for the whole parallel section, and each
// task writes only its own pieces of it (see `depthwise_lanes`).
#[allow(unsafe_code)]
unsafe impl Send for OutPtr {}
// SAFETY: see `Send`.
#[allow(unsafe_code)]
unsafe impl Sync for OutPtr {}

/// The filters `w` (C×klen) as lanes, `[block][tap][lane]`, zero past `c`: made once when a plan is
/// built ([`crate::cpu::conv::pack_filters`]).
pub(crate) fn filter_lanes(w: &[f32], c: usize, klen: usize) -> Vec<f32> {
    let blocks = c.div_ceil(L);
    let mut lanes = vec![0f32; blocks * klen * L];
    for (ch, filter) in w.chunks_exact(klen.max(1)).take(c).enumerate() {
        let (b, l) = (ch / L, ch % L);
        for (t, &v) in filter.iter().enumerate() {
            lanes[(b * klen + t) * L + l] = v;
        }
    }
    lanes
}

/// Pack padded rows `first..` (as many as `dst`, `rows × pw × 16`, holds) of block `b` of image
/// `ni` into `dst`: zero pads, and the input's value at padded row `iy + pt`, column `ix + pl`.
/// The input rows are contiguous in each channel plane: they are transposed as one run, 8
/// channels at a time, then copied row by row into place.
#[allow(clippy::too_many_arguments)]
fn pack_rows(
    isa: Isa,
    x: &[f32],
    g: &ConvGeom<'_>,
    win: &Window,
    (ni, b): (usize, usize),
    first: usize,
    pw: usize,
    dst: &mut [f32],
) {
    dst.fill(0.0);
    let rows = dst.len() / (pw * L);
    let iy0 = first.saturating_sub(win.pt);
    let iy1 = (first + rows).saturating_sub(win.pt).min(win.ih);
    let cols = win.iw.min(pw.saturating_sub(win.pl));
    if iy0 >= iy1 || cols == 0 {
        return;
    }
    let plane_in = win.ih * win.iw;
    let c0 = b * L;
    let nl = L.min(g.c - c0);
    let run = (iy1 - iy0) * win.iw;
    let from = (ni * g.c + c0) * plane_in + iy0 * win.iw;
    // the rows as positions × lanes; lanes past `nl` keep stale values, which only ever reach
    // output lanes that are not written back
    let mut t = arena::take(run * L);
    let whole = nl - nl % transpose::ROWS;
    for l0 in (0..whole).step_by(transpose::ROWS) {
        transpose::rows8(isa, x, from + l0 * plane_in, plane_in, run, 1.0, &mut t[l0..], L);
    }
    for l in whole..nl {
        for (j, &v) in x[from + l * plane_in..][..run].iter().enumerate() {
            t[j * L + l] = v;
        }
    }
    for iy in iy0..iy1 {
        let at = ((iy + win.pt - first) * pw + win.pl) * L;
        let src = &t[(iy - iy0) * win.iw * L..][..cols * L];
        dst[at..at + cols * L].copy_from_slice(src);
    }
    arena::give(t);
}

/// One block's packed input, tap offsets (in positions) and lanes of weights and biases.
struct Block<'a> {
    input: &'a [f32],
    pw: usize,
    taps: &'a [usize],
    weights: &'a [f32],
    bias: &'a [f32],
}

/// `rows` output rows of one block into `dst` (positions × lanes), row `i` reading from packed
/// row `i · sh` on.
fn compute_rows(isa: Isa, k: &Block<'_>, win: &Window, rows: usize, dst: &mut [f32]) {
    let ow = win.ow;
    // The last position of the last row reads the furthest: every read of the task lies below it.
    let last_tap = k.taps.last().copied().unwrap_or(0);
    let last_read = (rows.saturating_sub(1) * win.sh * k.pw + (ow - 1) * win.sw + last_tap) * L + L;
    assert!(
        rows > 0
            && last_read <= k.input.len()
            && dst.len() == rows * ow * L
            && k.weights.len() == k.taps.len() * L
            && k.bias.len() == L,
        "depthwise lanes: block extents"
    );
    for (i, out_row) in dst.chunks_exact_mut(ow * L).enumerate() {
        let base = i * win.sh * k.pw;
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: `applies` admits only AVX-512 and AVX2 (with FMA) CPUs; the assert above
            // bounds every read, and `out_row` holds the row's `ow × 16` values.
            #[allow(unsafe_code)]
            unsafe {
                x86::row(isa, k, base, win.sw, ow, out_row);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (isa, base, out_row);
            unreachable!("depthwise lanes: x86-64 only (see `applies`)");
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Block, L, POSITIONS_AVX2, POSITIONS_AVX512};
    use crate::cpu::simd::Isa;

    /// One output row: `ow` positions from padded position `base` on, `sw` apart.
    ///
    /// # Safety
    /// `isa` is AVX-512 or AVX2 and the CPU has it; every position's reads (`base + ox·sw + tap`,
    /// 16 lanes each) lie inside `k.input`; `out` holds `ow × 16` values.
    pub(super) unsafe fn row(isa: Isa, k: &Block<'_>, base: usize, sw: usize, ow: usize, out: &mut [f32]) {
        let step = if isa == Isa::Avx512 {
            POSITIONS_AVX512
        } else {
            POSITIONS_AVX2
        };
        let mut ox = 0;
        while ox < ow {
            let count = step.min(ow - ox);
            let job = Job {
                src: k.input.as_ptr().wrapping_add((base + ox * sw) * L),
                stride: sw * L,
                taps: k.taps,
                w: k.weights.as_ptr(),
                bias: k.bias.as_ptr(),
                dst: out.as_mut_ptr().wrapping_add(ox * L),
            };
            // SAFETY: as guaranteed by the caller, for positions ox..ox + count.
            unsafe {
                if isa == Isa::Avx512 {
                    match count {
                        8 => positions_avx512::<8>(&job),
                        7 => positions_avx512::<7>(&job),
                        6 => positions_avx512::<6>(&job),
                        5 => positions_avx512::<5>(&job),
                        4 => positions_avx512::<4>(&job),
                        3 => positions_avx512::<3>(&job),
                        2 => positions_avx512::<2>(&job),
                        _ => positions_avx512::<1>(&job),
                    }
                } else {
                    match count {
                        4 => positions_avx2::<4>(&job),
                        3 => positions_avx2::<3>(&job),
                        2 => positions_avx2::<2>(&job),
                        _ => positions_avx2::<1>(&job),
                    }
                }
            }
            ox += count;
        }
    }

    /// `P` consecutive output positions of one block.
    struct Job<'a> {
        /// the first position's first read
        src: *const f32,
        /// values between the reads of consecutive positions
        stride: usize,
        /// each tap's offset, in positions
        taps: &'a [usize],
        /// a vector of 16 weights per tap
        w: *const f32,
        bias: *const f32,
        dst: *mut f32,
    }

    /// # Safety
    /// AVX-512F is available; `src + p·stride + tap·16 .. + 16` is readable for `p < P` and every
    /// tap; `w` holds 16 values per tap and `bias` 16; `dst` takes `P × 16` values.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::needless_range_loop)]
    unsafe fn positions_avx512<const P: usize>(j: &Job<'_>) {
        // SAFETY (whole body): as guaranteed by the caller.
        unsafe {
            let mut acc = [_mm512_loadu_ps(j.bias); P];
            for (t, &off) in j.taps.iter().enumerate() {
                let w = _mm512_loadu_ps(j.w.add(t * L));
                let at = j.src.add(off * L);
                for p in 0..P {
                    acc[p] = _mm512_fmadd_ps(_mm512_loadu_ps(at.add(p * j.stride)), w, acc[p]);
                }
            }
            for p in 0..P {
                _mm512_storeu_ps(j.dst.add(p * L), acc[p]);
            }
        }
    }

    /// # Safety
    /// As [`positions_avx512`], with AVX2 and FMA instead of AVX-512F.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::needless_range_loop)]
    unsafe fn positions_avx2<const P: usize>(j: &Job<'_>) {
        // SAFETY (whole body): as guaranteed by the caller.
        unsafe {
            let b = [_mm256_loadu_ps(j.bias), _mm256_loadu_ps(j.bias.add(8))];
            let mut acc = [b; P];
            for (t, &off) in j.taps.iter().enumerate() {
                let w0 = _mm256_loadu_ps(j.w.add(t * L));
                let w1 = _mm256_loadu_ps(j.w.add(t * L + 8));
                let at = j.src.add(off * L);
                for p in 0..P {
                    let s = at.add(p * j.stride);
                    acc[p][0] = _mm256_fmadd_ps(_mm256_loadu_ps(s), w0, acc[p][0]);
                    acc[p][1] = _mm256_fmadd_ps(_mm256_loadu_ps(s.add(8)), w1, acc[p][1]);
                }
            }
            for p in 0..P {
                _mm256_storeu_ps(j.dst.add(p * L), acc[p][0]);
                _mm256_storeu_ps(j.dst.add(p * L + 8), acc[p][1]);
            }
        }
    }
}
