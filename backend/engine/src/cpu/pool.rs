//! N-d max and average pooling over [N, C, spatial…] f32 data.

use rayon::prelude::*;

use crate::cpu::depthwise::{V, tap_offsets};
use crate::cpu::padded::{PadPlane, Window};
use crate::cpu::simd::{self, multiversion};

/// Pooling geometry.
pub(crate) struct PoolGeom<'a> {
    pub(crate) in_sp: &'a [usize],
    pub(crate) out_sp: &'a [usize],
    pub(crate) kernel: &'a [usize],
    pub(crate) strides: &'a [usize],
    pub(crate) pads: &'a [usize],
    pub(crate) dilations: &'a [usize],
}

fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = i % dims[d];
        i /= dims[d];
    }
}

/// A value max pooling compares; a padded plane's borders hold its lowest value, and `PLANE`
/// pools one plane of them ([`max_plane_body`] compiled for each instruction set).
pub(crate) trait PoolValue: Copy + PartialOrd + Send + Sync + 'static {
    const LOWEST: Self;
    const PLANE: PlaneFn<Self>;

    /// A buffer of `n` values for the output (every one is written).
    fn output(n: usize) -> Vec<Self> {
        vec![Self::LOWEST; n]
    }
}

impl PoolValue for f32 {
    const LOWEST: f32 = f32::NEG_INFINITY;
    const PLANE: PlaneFn<f32> = max_plane;

    fn output(n: usize) -> Vec<f32> {
        crate::cpu::arena::take(n)
    }
}

impl PoolValue for u8 {
    const LOWEST: u8 = 0;
    const PLANE: PlaneFn<u8> = max_plane_u8;
}

impl PoolValue for i8 {
    const LOWEST: i8 = i8::MIN;
    const PLANE: PlaneFn<i8> = max_plane_i8;
}

/// One plane of a 2-D max pooling, compiled for an instruction set.
pub(crate) type PlaneFn<T> = fn(simd::Isa, &Window, &PadPlane, &[usize], &[T], bool, &mut [T], &mut [T]);

/// 2-D max pooling without indices (the common case): padded planes with borders of the lowest
/// value ([`PadPlane`]), `L` outputs at a time maxed over all taps. `L` is the padding's slack.
fn max_pool_2d<T: PoolValue, const L: usize>(x: &[T], planes: usize, g: &PoolGeom<'_>) -> Vec<T> {
    let win = Window::new(g.in_sp, g.out_sp, g.kernel, g.strides, g.dilations, g.pads);
    let (plane_in, plane_out) = (win.ih * win.iw, win.oh * win.ow);
    let mut out = T::output(planes * plane_out);
    if plane_out == 0 {
        return out;
    }
    let pp = PadPlane::new(&win, L);
    let taps = tap_offsets(&pp, &win);
    let isa = simd::isa();
    out.par_chunks_mut(plane_out)
        .enumerate()
        .for_each_init(Vec::new, |scratch, (p, dst)| {
            let fresh = scratch.len() != pp.len();
            if fresh {
                scratch.resize(pp.len(), T::LOWEST);
            }
            let src = &x[p * plane_in..(p + 1) * plane_in];
            T::PLANE(isa, &win, &pp, &taps, src, fresh, scratch, dst);
        });
    out
}

/// 2-D max pooling of 8-bit codes without indices (a quantized ResNet's after its stem): the
/// f32 kernel's loop on the codes themselves, a vector of them at a time. `None` for other ranks.
pub(crate) fn max_pool_codes<T: PoolValue>(x: &[T], planes: usize, g: &PoolGeom<'_>) -> Option<Vec<T>> {
    (g.in_sp.len() == 2).then(|| max_pool_2d::<T, CODE_LANES>(x, planes, g))
}

/// Outputs of 8-bit codes maxed at a time: one AVX-512 vector.
const CODE_LANES: usize = 64;

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn max_plane_body<T: PoolValue, const L: usize>(
    win: &Window,
    pp: &PadPlane,
    taps: &[usize],
    src: &[T],
    fresh: bool,
    scratch: &mut [T],
    dst: &mut [T],
) {
    pp.fill(src, T::LOWEST, fresh, scratch);
    let ow = win.ow;
    for oy in 0..win.oh {
        let drow = &mut dst[oy * ow..(oy + 1) * ow];
        let row0 = pp.row_offset(oy);
        for ox0 in (0..ow).step_by(L) {
            let mut best = [T::LOWEST; L];
            for &off in taps {
                let base = row0 + ox0 + off;
                let Some(s) = scratch.get(base..base + L) else {
                    continue;
                };
                // compare-and-select: `f32::max`'s NaN rule kept the loop lane by lane; a NaN
                // compares false and is passed over as `max` passes it over
                for (b, &s) in best.iter_mut().zip(s) {
                    *b = if s > *b { s } else { *b };
                }
            }
            let n = L.min(ow - ox0);
            drow[ox0..ox0 + n].copy_from_slice(&best[..n]);
        }
    }
}

/// `fn $name(isa, …)`: [`max_plane_body`] on `$t` values, `$lanes` outputs at a time, compiled for
/// each instruction set (through `$body`, the form [`multiversion!`] takes).
macro_rules! max_plane_of {
    ($name:ident, $body:ident, $t:ty, $lanes:expr) => {
        #[inline(always)]
        #[allow(clippy::too_many_arguments)]
        fn $body<const FMA: bool>(
            win: &Window,
            pp: &PadPlane,
            taps: &[usize],
            src: &[$t],
            fresh: bool,
            scratch: &mut [$t],
            dst: &mut [$t],
        ) {
            max_plane_body::<$t, { $lanes }>(win, pp, taps, src, fresh, scratch, dst);
        }

        multiversion! {
            #[allow(clippy::too_many_arguments)]
            fn $name(
                win: &Window,
                pp: &PadPlane,
                taps: &[usize],
                src: &[$t],
                fresh: bool,
                scratch: &mut [$t],
                dst: &mut [$t],
            ) = $body;
        }
    };
}

max_plane_of!(max_plane, max_plane_f32, f32, V);
max_plane_of!(max_plane_u8, max_plane_u8_body, u8, CODE_LANES);
max_plane_of!(max_plane_i8, max_plane_i8_body, i8, CODE_LANES);

/// Max pooling; also returns flat indices into x (row-major, or column-major spatial when `col`).
pub(crate) fn max_pool(
    x: &[f32],
    planes: usize,
    g: &PoolGeom<'_>,
    col: bool,
    want_indices: bool,
) -> (Vec<f32>, Vec<i64>) {
    if g.in_sp.len() == 2 && !want_indices {
        return (max_pool_2d::<f32, V>(x, planes, g), Vec::new());
    }
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    let mut out = vec![0f32; planes * out_len];
    let mut idx = vec![0i64; planes * out_len];
    out.par_chunks_mut(out_len.max(1))
        .zip(idx.par_chunks_mut(out_len.max(1)))
        .enumerate()
        .for_each(|(p, (dst, di))| {
            let src = &x[p * in_len..(p + 1) * in_len];
            let mut oc = vec![0; ns];
            let mut kc = vec![0; ns];
            let mut pos = vec![0usize; ns];
            for o in 0..out_len {
                unravel(o, g.out_sp, &mut oc);
                let mut best = f32::NEG_INFINITY;
                let mut best_i = 0usize;
                let mut found = false;
                for k in 0..klen {
                    unravel(k, g.kernel, &mut kc);
                    let mut flat = 0usize;
                    let mut inside = true;
                    for d in 0..ns {
                        let c = (oc[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                        if c < 0 || c >= g.in_sp[d] as isize {
                            inside = false;
                            break;
                        }
                        pos[d] = c as usize;
                        flat = flat * g.in_sp[d] + c as usize;
                    }
                    if inside && (!found || src[flat] > best) {
                        best = src[flat];
                        found = true;
                        best_i = if col {
                            let mut f = 0usize;
                            for d in (0..ns).rev() {
                                f = f * g.in_sp[d] + pos[d];
                            }
                            f
                        } else {
                            flat
                        };
                    }
                }
                dst[o] = best;
                di[o] = (p * in_len + best_i) as i64;
            }
        });
    (out, idx)
}

/// Average pooling.
pub(crate) fn avg_pool(x: &[f32], planes: usize, g: &PoolGeom<'_>, count_include_pad: bool) -> Vec<f32> {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    let mut out = vec![0f32; planes * out_len];
    out.par_chunks_mut(out_len.max(1))
        .enumerate()
        .for_each(|(p, dst)| {
            let src = &x[p * in_len..(p + 1) * in_len];
            let mut oc = vec![0; ns];
            let mut kc = vec![0; ns];
            for (o, v) in dst.iter_mut().enumerate() {
                unravel(o, g.out_sp, &mut oc);
                let mut sum = 0f32;
                let mut cnt = 0usize;
                let mut cnt_pad = 0usize;
                for k in 0..klen {
                    unravel(k, g.kernel, &mut kc);
                    let mut flat = 0usize;
                    let mut inside = true;
                    let mut in_padded = true;
                    for d in 0..ns {
                        let c = (oc[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                        if c < -(g.pads[d] as isize) || c >= (g.in_sp[d] + g.pads[d + ns]) as isize {
                            in_padded = false;
                        }
                        if c < 0 || c >= g.in_sp[d] as isize {
                            inside = false;
                        } else {
                            flat = flat * g.in_sp[d] + c as usize;
                        }
                    }
                    if in_padded {
                        cnt_pad += 1;
                    }
                    if inside {
                        sum += src[flat];
                        cnt += 1;
                    }
                }
                let div = if count_include_pad { cnt_pad } else { cnt };
                *v = if div == 0 { 0.0 } else { sum / div as f32 };
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The padded-plane 2-D max pooling against the general N-d loop (which also gives indices).
    #[test]
    fn max_pooling_2d_matches_the_general_loop_on_floats_and_on_codes() {
        // (h, w, kernel, strides, pads, dilations, output)
        type Case = (
            usize,
            usize,
            [usize; 2],
            [usize; 2],
            [usize; 4],
            [usize; 2],
            [usize; 2],
        );
        let cases: [Case; 4] = [
            (112, 112, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], [56, 56]),
            (7, 9, [2, 3], [1, 2], [0, 1, 1, 1], [1, 1], [7, 5]),
            (10, 10, [3, 3], [3, 3], [0, 0, 0, 0], [2, 1], [2, 3]),
            (5, 5, [3, 3], [2, 2], [0, 0, 1, 1], [1, 1], [3, 3]),
        ];
        for (h, w, kernel, strides, pads, dilations, out) in cases {
            let x: Vec<f32> = (0..3 * h * w)
                .map(|i| ((i * 7919) % 1000) as f32 - 500.0)
                .collect();
            let g = PoolGeom {
                in_sp: &[h, w],
                out_sp: &out,
                kernel: &kernel,
                strides: &strides,
                pads: &pads,
                dilations: &dilations,
            };
            let (fast, _) = max_pool(&x, 3, &g, false, false);
            let (general, _) = max_pool(&x, 3, &g, false, true);
            assert_eq!(fast, general, "{h}x{w} kernel {kernel:?} strides {strides:?}");
            // 8-bit codes pooled as they are give the codes of the f32 pool, down to the lowest
            let u: Vec<u8> = (0..3 * h * w).map(|i| ((i * 7919) % 256) as u8).collect();
            let i: Vec<i8> = u.iter().map(|&v| v as i8).collect();
            let as_f32 = |v: Vec<f32>| max_pool(&v, 3, &g, false, false).0;
            let want_u = as_f32(u.iter().map(|&v| f32::from(v)).collect());
            let want_i = as_f32(i.iter().map(|&v| f32::from(v)).collect());
            assert_eq!(
                max_pool_codes(&u, 3, &g),
                Some(want_u.iter().map(|&v| v as u8).collect()),
                "UINT8 {h}x{w} kernel {kernel:?}"
            );
            assert_eq!(
                max_pool_codes(&i, 3, &g),
                Some(want_i.iter().map(|&v| v as i8).collect()),
                "INT8 {h}x{w} kernel {kernel:?}"
            );
        }
    }
}
