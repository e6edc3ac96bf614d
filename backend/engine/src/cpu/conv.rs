//! Convolution: with AVX-512, the direct kernel over blocks of 16 channels where the channel counts
//! allow ([`blocked`]); else GEMM over the im2col matrix (for 2-D read block by block from padded
//! input planes, never built), direct GEMM for 1×1 convolutions; the direct depthwise kernel;
//! ConvTranspose via col2im.

use rayon::prelude::*;

use crate::cpu::arena;
use crate::cpu::depthwise::{Filters, depthwise2d, filter_lanes};
use crate::cpu::epilogue::Epi;
use crate::cpu::gemm::{MatRef, sgemm};
use crate::cpu::mm::{
    self, BOp, BSource, DenseB, Init, PackedA, PackedB, copy_pieces, panel_pieces, zero_past_columns,
};
use crate::cpu::padded::{PadPlane, Window, valid_range};
use crate::cpu::simd::{Isa, multiversion};
use crate::error::Result;
use crate::ir::Op;

mod blocked;
mod by_positions;

use blocked::{BlockedFilters, conv_blocked};
use by_positions::{conv_by_positions, pack_filters_by_positions};

/// Geometry of an N-d convolution.
pub(crate) struct ConvGeom<'a> {
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) m: usize,
    pub(crate) group: usize,
    pub(crate) in_sp: &'a [usize],
    pub(crate) out_sp: &'a [usize],
    pub(crate) kernel: &'a [usize],
    pub(crate) strides: &'a [usize],
    pub(crate) pads: &'a [usize],
    pub(crate) dilations: &'a [usize],
}

/// Unravel a flat spatial index into coordinates.
fn unravel(mut i: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = i % dims[d];
        i /= dims[d];
    }
}

/// im2col for one image and one group of an N-d convolution: rows (c, k…) × columns (output
/// positions). 2-D convolutions read the matrix block by block instead ([`Im2col`]).
fn im2col(x: &[f32], g: &ConvGeom<'_>, c0: usize, col: &mut [f32]) {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    col.par_chunks_mut(out_len).enumerate().for_each(|(row, dst)| {
        let ci = row / klen;
        let mut kc = vec![0; ns];
        unravel(row % klen, g.kernel, &mut kc);
        let mut oc = vec![0; ns];
        let src = &x[(c0 + ci) * in_len..(c0 + ci + 1) * in_len];
        for (o, v) in dst.iter_mut().enumerate() {
            unravel(o, g.out_sp, &mut oc);
            let mut idx = 0usize;
            let mut inside = true;
            for d in 0..ns {
                let p = (oc[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                if p < 0 || p >= g.in_sp[d] as isize {
                    inside = false;
                    break;
                }
                idx = idx * g.in_sp[d] + p as usize;
            }
            *v = if inside { src[idx] } else { 0.0 };
        }
    });
}

impl<'a> ConvGeom<'a> {
    /// The geometry of `op` (an `Op::Conv`; `None` for any other op) with input shape `sx`,
    /// filters of shape `sw` and output shape `so`, each of rank 3 or more.
    pub(crate) fn of_conv(op: &'a Op, sx: &'a [usize], sw: &[usize], so: &'a [usize]) -> Option<Self> {
        let Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            ..
        } = op
        else {
            return None;
        };
        Some(ConvGeom {
            n: sx[0],
            c: sx[1],
            m: sw[0],
            group: *group,
            in_sp: &sx[2..],
            out_sp: &so[2..],
            kernel: kernel_shape,
            strides,
            pads,
            dilations,
        })
    }

    /// True for a depthwise 2-D convolution (one filter per channel), run by `depthwise2d`.
    pub(crate) fn is_depthwise(&self) -> bool {
        self.group > 1 && self.group == self.c && self.group == self.m && self.in_sp.len() == 2
    }

    /// True for a 1×1 convolution of 1×1 images without groups: the squeeze-and-excitation blocks of
    /// MobileNetV3 and EfficientNet, run by [`conv_single_positions`].
    fn of_single_positions(&self) -> bool {
        self.group == 1 && self.pointwise() && self.in_sp.iter().all(|&d| d == 1)
    }

    /// True for a 2-D 1×1 convolution with strides and no padding (ResNet's downsampling
    /// shortcuts), run as a pointwise one on the input decimated to the output grid.
    fn strided_pointwise(&self) -> bool {
        self.in_sp.len() == 2
            && self.in_sp.iter().all(|&d| d > 0)
            && self.kernel.iter().all(|&k| k == 1)
            && self.pads.iter().all(|&p| p == 0)
            && self.strides.iter().any(|&s| s > 1)
            && (0..2).all(|d| self.out_sp[d] == (self.in_sp[d] - 1) / self.strides[d] + 1)
    }

    fn pointwise(&self) -> bool {
        let in_len: usize = self.in_sp.iter().product();
        let out_len: usize = self.out_sp.iter().product();
        self.kernel.iter().all(|&k| k == 1)
            && self.strides.iter().all(|&s| s == 1)
            && self.pads.iter().all(|&p| p == 0)
            && in_len == out_len
    }
}

/// `x` ([N, C, H, W]) at the output positions of a 1×1 convolution with strides and no padding:
/// `[N, C, OH, OW]`, value (oy, ox) read from (oy·sh, ox·sw).
fn decimate(x: &[f32], g: &ConvGeom<'_>) -> Vec<f32> {
    let (ih, iw) = (g.in_sp[0], g.in_sp[1]);
    let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    // a reused buffer: a fresh one would be faulted in page by page on every run
    let mut out = arena::take(g.n * g.c * oh * ow);
    let planes = x.chunks_exact(ih * iw).take(g.n * g.c);
    for (plane, dst) in planes.zip(out.chunks_exact_mut(oh * ow)) {
        for (oy, dst) in dst.chunks_exact_mut(ow).enumerate() {
            let row = &plane[oy * sh * iw..][..iw];
            dst.iter_mut()
                .zip(row.iter().step_by(sw))
                .for_each(|(d, &v)| *d = v);
        }
    }
    out
}

/// The weights `w` ([M, C/group, k…]) of each group packed as the A operand of the product.
pub(crate) fn pack_weights(w: &[f32], m: usize, group: usize, isa: Isa) -> Result<Vec<PackedA>> {
    let mg = m / group.max(1);
    let kdim = w.len() / m.max(1);
    (0..group)
        .map(|gi| {
            let wm = MatRef {
                data: w,
                off: gi * mg * kdim,
                rs: kdim,
                cs: 1,
            };
            PackedA::pack(wm, mg, kdim, 1.0, isa)
        })
        .collect()
}

/// For each row (c, ky, kx) of a group's im2col matrix of the 2-D convolution `g`, the offset in
/// its padded planes (`plane`, one per input channel of the group) of the value that output
/// (0, 0) reads.
fn im2col_taps(g: &ConvGeom<'_>, plane: &PadPlane) -> Vec<usize> {
    let klen = g.kernel[0] * g.kernel[1];
    (0..(g.c / g.group.max(1)) * klen)
        .map(|row| {
            let (ci, r) = (row / klen, row % klen);
            ci * plane.len() + plane.tap_offset(r / g.kernel[1], r % g.kernel[1])
        })
        .collect()
}

/// One image's im2col matrix of a 2-D convolution (rows (c, ky, kx), columns output positions),
/// read block by block from padded copies of its input planes ([`PadPlane`]): each run of a
/// block's columns within one output row is one contiguous copy.
struct Im2col<'a> {
    /// the padded planes, `plane.len()` values each
    pad: &'a [f32],
    plane: PadPlane,
    /// offset in `pad` of the value output (0, 0) reads for each row of the matrix
    taps: &'a [usize],
    ow: usize,
    isa: Isa,
}

impl BSource for Im2col<'_> {
    fn pack(&self, k0: usize, kl: usize, n0: usize, nr: usize, w: usize, dst: &mut [f32]) {
        // one panel of `nr ≤ w` columns
        im2col_panels(self.isa, self, k0, kl, n0, nr, w, dst);
    }

    fn pack_panels(&self, k0: usize, kl: usize, n0: usize, cols: usize, w: usize, dst: &mut [f32]) {
        im2col_panels(self.isa, self, k0, kl, n0, cols, w, dst);
    }
}

/// [`BSource::pack_panels`] of an [`Im2col`]: for each matrix row, the runs of its columns within
/// one output row, each a contiguous piece of a padded plane, read front to back.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn im2col_panels_body<const FMA: bool>(
    src: &Im2col<'_>,
    k0: usize,
    kl: usize,
    n0: usize,
    cols: usize,
    w: usize,
    dst: &mut [f32],
) {
    // (offset in a padded plane from the tap's value for output (0, 0), column, length) of each run
    let mut runs = Vec::with_capacity(cols / src.ow + 2);
    let mut p = n0;
    while p < n0 + cols {
        let (oy, ox) = (p / src.ow, p % src.ow);
        let len = (src.ow - ox).min(n0 + cols - p);
        runs.push((src.plane.row_offset(oy) + ox, p - n0, len));
        p += len;
    }
    let pieces = panel_pieces(&runs, kl, w);
    for (kk, &base) in src.taps[k0..k0 + kl].iter().enumerate() {
        copy_pieces(dst, kk, w, &src.pad[base..], &pieces);
    }
    zero_past_columns(dst, kl, w, cols);
}

multiversion! {
    #[allow(clippy::too_many_arguments)]
    fn im2col_panels(src: &Im2col<'_>, k0: usize, kl: usize, n0: usize, cols: usize, w: usize, dst: &mut [f32]) = im2col_panels_body;
}

#[inline(always)]
fn fill_planes_body<const FMA: bool>(plane: &PadPlane, x: &[f32], in_len: usize, pad: &mut [f32]) {
    for (src, dst) in x
        .chunks_exact(in_len.max(1))
        .zip(pad.chunks_exact_mut(plane.len()))
    {
        plane.fill(src, 0.0, true, dst);
    }
}

multiversion! {
    fn fill_planes(plane: &PadPlane, x: &[f32], in_len: usize, pad: &mut [f32]) = fill_planes_body;
}

/// Output channels of one task of [`conv_single_positions`].
const SINGLE_POSITION_ROWS: usize = 32;

/// A 1×1 convolution of 1×1 images: per image a matrix-vector product, each output channel one dot
/// product of its row of the (row-major, as given) weights with the image's channels. The tiled
/// product would pad the single output position to a whole column tile and do 16 times the work.
fn conv_single_positions(
    isa: Isa,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    out: &mut [f32],
) {
    let (c, m) = (g.c, g.m);
    let parallel = m * c >= 1 << 14 && rayon::current_num_threads() > 1;
    for (ni, (dst, xi)) in out.chunks_exact_mut(m).zip(x.chunks_exact(c)).enumerate() {
        let task = |(t, d): (usize, &mut [f32])| {
            let m0 = t * SINGLE_POSITION_ROWS;
            let rows = &w[m0 * c..(m0 + d.len()) * c];
            dot_rows(isa, rows, xi, bias.map(|b| &b[m0..m0 + d.len()]), d);
        };
        if parallel {
            dst.par_chunks_mut(SINGLE_POSITION_ROWS)
                .enumerate()
                .for_each(task);
        } else {
            dst.chunks_mut(SINGLE_POSITION_ROWS).enumerate().for_each(task);
        }
        // Each output channel is a row of one value for the tail.
        let mut rows: Vec<&mut [f32]> = dst.chunks_mut(1).collect();
        epi.apply_rows_at(ni * m, 0, &mut rows);
    }
}

/// `dst[i] = bias[i] + w[i, :]·x` for the rows of `w` (each `x.len()` long).
#[inline(always)]
fn dot_rows_body<const FMA: bool>(w: &[f32], x: &[f32], bias: Option<&[f32]>, dst: &mut [f32]) {
    const LANES: usize = 16;
    for (i, (d, row)) in dst.iter_mut().zip(w.chunks_exact(x.len().max(1))).enumerate() {
        let mut acc = [0f32; LANES];
        let (rw, xw) = (row.chunks_exact(LANES), x.chunks_exact(LANES));
        let (rt, xt) = (rw.remainder(), xw.remainder());
        for (a, b) in rw.zip(xw) {
            for j in 0..LANES {
                acc[j] = if FMA {
                    a[j].mul_add(b[j], acc[j])
                } else {
                    acc[j] + a[j] * b[j]
                };
            }
        }
        let tail: f32 = rt.iter().zip(xt).map(|(a, b)| a * b).sum();
        *d = bias.map_or(0.0, |b| b[i]) + acc.iter().sum::<f32>() + tail;
    }
}

multiversion! {
    fn dot_rows(w: &[f32], x: &[f32], bias: Option<&[f32]>, dst: &mut [f32]) = dot_rows_body;
}

/// How a Conv's filters are laid out for the kernel that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FilterLayout {
    /// per group, as the A operand of the im2col product
    Channels,
    /// as the B operand of the transposed product
    Positions,
    /// a depthwise convolution's, channels in lanes
    Lanes,
    /// blocks of 16 input × 16 output channels per tap
    Blocked,
}

impl ConvGeom<'_> {
    /// The layout of the filters of this convolution run with `isa`'s kernels.
    pub(crate) fn filter_layout(&self, isa: Isa) -> FilterLayout {
        if self.is_depthwise() {
            FilterLayout::Lanes
        } else if self.blocked(isa) {
            FilterLayout::Blocked
        } else if self.by_positions() {
            FilterLayout::Positions
        } else {
            FilterLayout::Channels
        }
    }
}

/// A Conv's filters packed for its product once, when its plan is built.
pub(crate) enum PackedFilters {
    /// per group, as the A operand: output channels are the product's rows ([`pack_weights`])
    Channels(Vec<PackedA>),
    /// as the B operand of the transposed product ([`ConvGeom::by_positions`])
    Positions(PackedB),
    /// a depthwise convolution's filters with channels in lanes ([`filter_lanes`])
    Lanes(Vec<f32>),
    /// for the direct kernel over blocks of channels ([`ConvGeom::blocked`])
    Blocked(BlockedFilters),
}

/// The filters `w` ([M, C/group, k…]) of the convolution `g` packed for the kernel it runs.
pub(crate) fn pack_filters(w: &[f32], g: &ConvGeom<'_>, isa: Isa) -> Result<PackedFilters> {
    Ok(match g.filter_layout(isa) {
        FilterLayout::Lanes => {
            let klen: usize = g.kernel.iter().product();
            PackedFilters::Lanes(filter_lanes(w, g.c, klen))
        }
        FilterLayout::Blocked => PackedFilters::Blocked(BlockedFilters::pack(w, g)),
        FilterLayout::Positions => PackedFilters::Positions(pack_filters_by_positions(w, g.m, isa)?),
        FilterLayout::Channels => PackedFilters::Channels(pack_weights(w, g.m, g.group, isa)?),
    })
}

/// Conv of f32 data, then `epi` (rows are output channel planes); `out` has N×M×out_len elements.
/// `packed`: the filters as [`pack_filters`] made them (at plan time), if available.
pub(crate) fn conv_f32(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    packed: Option<&PackedFilters>,
) -> Result<Vec<f32>> {
    conv_isa(crate::cpu::simd::isa(), x, w, bias, g, epi, packed)
}

/// [`conv_f32`] with the kernels of `isa` (tests compare them).
fn conv_isa(
    isa: Isa,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    packed: Option<&PackedFilters>,
) -> Result<Vec<f32>> {
    if g.in_sp.len() == 1 {
        // A 1-D convolution (audio encoders' front ends) is the 2-D one of a single row: it then
        // takes the padded-plane im2col and the depthwise kernel instead of the generic N-d path.
        let in_sp = [1, g.in_sp[0]];
        let out_sp = [1, g.out_sp[0]];
        let kernel = [1, g.kernel[0]];
        let strides = [1, g.strides[0]];
        let pads = [0, g.pads[0], 0, g.pads[1]];
        let dilations = [1, g.dilations[0]];
        let row = ConvGeom {
            in_sp: &in_sp,
            out_sp: &out_sp,
            kernel: &kernel,
            strides: &strides,
            pads: &pads,
            dilations: &dilations,
            ..*g
        };
        return conv_isa(isa, x, w, bias, &row, epi, packed);
    }
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    if g.blocked(isa) {
        let owned;
        let filters = match packed {
            Some(PackedFilters::Blocked(f)) if f.fits(g) => f,
            _ => {
                owned = BlockedFilters::pack(w, g);
                &owned
            }
        };
        // every element is written by the kernel's tasks
        let mut out = arena::take(g.n * g.m * out_len);
        conv_blocked(x, filters, bias, g, epi, &mut out);
        return Ok(out);
    }
    if g.strided_pointwise() {
        // One input position per output: the input on the output grid, then a pointwise product.
        // Through im2col, every phase of every input plane would be copied first.
        let on_grid = decimate(x, g);
        let one = [1, 1];
        let pointwise = ConvGeom {
            in_sp: g.out_sp,
            strides: &one,
            ..*g
        };
        let out = conv_isa(isa, &on_grid, w, bias, &pointwise, epi, packed);
        arena::give(on_grid);
        return out;
    }
    // every element is written below (by the depthwise kernel or the products)
    let mut out = arena::take(g.n * g.m * out_len);
    if out.is_empty() {
        return Ok(out);
    }
    if g.is_depthwise() {
        let lanes = match packed {
            Some(PackedFilters::Lanes(l)) => Some(l.as_slice()),
            _ => None,
        };
        depthwise2d(isa, x, Filters { values: w, lanes }, bias, g, epi, &mut out);
        return Ok(out);
    }
    if g.of_single_positions() {
        conv_single_positions(isa, x, w, bias, g, epi, &mut out);
        return Ok(out);
    }
    let cg = g.c / g.group;
    let mg = g.m / g.group;
    let kdim = cg * klen;
    if g.by_positions() {
        let owned;
        let filters = match packed {
            Some(PackedFilters::Positions(b)) if (b.k(), b.n(), b.isa()) == (kdim, g.m, isa) => b,
            _ => {
                owned = pack_filters_by_positions(w, g.m, isa)?;
                &owned
            }
        };
        conv_by_positions(isa, x, bias, g, epi, filters, &mut out)?;
        return Ok(out);
    }
    let owned;
    let pw = match packed {
        Some(PackedFilters::Channels(p))
            if p.len() == g.group && p.iter().all(|a| a.m() == mg && a.isa() == isa) =>
        {
            p
        }
        _ => {
            owned = pack_weights(w, g.m, g.group, isa)?;
            owned.as_slice()
        }
    };
    let pointwise = g.pointwise();
    let parallel_images = g.n >= rayon::current_num_threads() && g.n > 1;
    let two_d = g.in_sp.len() == 2 && !pointwise;
    // 2-D: the im2col rows read padded planes
    let window = two_d.then(|| Window::new(g.in_sp, g.out_sp, g.kernel, g.strides, g.dilations, g.pads));
    let plane = window.map(|w| PadPlane::new(&w, 1));
    let taps = plane.map(|p| im2col_taps(g, &p)).unwrap_or_default();
    let run_image = |ni: usize, dst: &mut [f32], parallel: bool| -> Result<()> {
        let ximg = &x[ni * g.c * in_len..(ni + 1) * g.c * in_len];
        let mut col = if pointwise || two_d {
            Vec::new()
        } else {
            vec![0f32; kdim * out_len]
        };
        // reused, not zeroed: fill_planes writes every value, pads included
        let mut pad = match plane {
            Some(p) => arena::take(cg * p.len()),
            None => Vec::new(),
        };
        for gi in 0..g.group {
            let dst_g = &mut dst[gi * mg * out_len..(gi + 1) * mg * out_len];
            let init = bias.map_or(Init::Zero, |b| Init::Row(&b[gi * mg..(gi + 1) * mg]));
            let tail = epi.offset(ni * g.m + gi * mg);
            let product = |src: &dyn BSource, dst_g: &mut [f32]| {
                let b = BOp::Src {
                    src,
                    k: kdim,
                    n: out_len,
                };
                mm::gemm(&pw[gi], b, dst_g, out_len, init, &tail, parallel)
            };
            let xg = &ximg[gi * cg * in_len..(gi + 1) * cg * in_len];
            if pointwise {
                let xm = MatRef {
                    data: xg,
                    off: 0,
                    rs: in_len,
                    cs: 1,
                };
                product(&DenseB::new(xm, kdim, out_len)?, dst_g)?;
            } else if let Some(p) = plane {
                let planes = &mut pad[..cg * p.len()];
                if parallel {
                    let per = (cg / (4 * rayon::current_num_threads())).max(1);
                    planes
                        .par_chunks_mut(per * p.len())
                        .zip(xg.par_chunks(per * in_len))
                        .for_each(|(d, s)| fill_planes(isa, &p, s, in_len, d));
                } else {
                    fill_planes(isa, &p, xg, in_len, planes);
                }
                let src = Im2col {
                    pad: &pad,
                    plane: p,
                    taps: &taps,
                    ow: g.out_sp[1],
                    isa,
                };
                product(&src, dst_g)?;
            } else {
                im2col(ximg, g, gi * cg, &mut col);
                let cm = MatRef {
                    data: &col,
                    off: 0,
                    rs: out_len,
                    cs: 1,
                };
                product(&DenseB::new(cm, kdim, out_len)?, dst_g)?;
            }
        }
        arena::give(pad);
        Ok(())
    };
    if parallel_images {
        out.par_chunks_mut(g.m * out_len)
            .enumerate()
            .try_for_each(|(ni, dst)| run_image(ni, dst, false))?;
    } else {
        for (ni, dst) in out.chunks_mut(g.m * out_len).enumerate() {
            run_image(ni, dst, true)?;
        }
    }
    Ok(out)
}

/// ConvTranspose of f32 data. `g.c` is input channels, `g.m` output channels; w is [C, M/group, k…].
pub(crate) fn conv_transpose_f32(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
) -> Result<Vec<f32>> {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let klen: usize = g.kernel.iter().product();
    let ns = g.in_sp.len();
    let cg = g.c / g.group;
    let mg = g.m / g.group;
    let mut out = vec![0f32; g.n * g.m * out_len];
    let rows = mg * klen;
    let mut cols = vec![0f32; rows * in_len];
    let mut ic = vec![0; ns];
    let mut kc = vec![0; ns];
    for ni in 0..g.n {
        for gi in 0..g.group {
            // cols[(m, k…), in_pos] = Σ_c w[c, m, k…] · x[c, in_pos]
            let wmat = MatRef {
                data: w,
                off: gi * cg * rows,
                rs: 1,
                cs: rows,
            };
            let xmat = MatRef {
                data: x,
                off: (ni * g.c + gi * cg) * in_len,
                rs: in_len,
                cs: 1,
            };
            sgemm(rows, in_len, cg, wmat, xmat, &mut cols, in_len, 1.0, false, true)?;
            let dst = &mut out[(ni * g.m + gi * mg) * out_len..(ni * g.m + (gi + 1) * mg) * out_len];
            if ns == 2 {
                col2im_2d(&cols, g, dst);
                continue;
            }
            for r in 0..rows {
                let mi = r / klen;
                unravel(r % klen, g.kernel, &mut kc);
                let plane = &mut dst[mi * out_len..(mi + 1) * out_len];
                for p in 0..in_len {
                    unravel(p, g.in_sp, &mut ic);
                    let mut idx = 0usize;
                    let mut inside = true;
                    for d in 0..ns {
                        let o = (ic[d] * g.strides[d] + kc[d] * g.dilations[d]) as isize - g.pads[d] as isize;
                        if o < 0 || o >= g.out_sp[d] as isize {
                            inside = false;
                            break;
                        }
                        idx = idx * g.out_sp[d] + o as usize;
                    }
                    if inside {
                        plane[idx] += cols[r * in_len + p];
                    }
                }
            }
        }
        if let Some(b) = bias {
            let img = &mut out[ni * g.m * out_len..(ni + 1) * g.m * out_len];
            for (mi, row) in img.chunks_mut(out_len).enumerate() {
                let bv = b[mi];
                row.iter_mut().for_each(|v| *v += bv);
            }
        }
    }
    Ok(out)
}

/// col2im of a 2-D ConvTranspose: `dst` (planes of the group's output channels) += each row
/// (m, ky, kx) of `cols` scattered to output positions (iy·sh + ky·dh − pt, ix·sw + kx·dw − pl).
fn col2im_2d(cols: &[f32], g: &ConvGeom<'_>, dst: &mut [f32]) {
    let (ih, iw) = (g.in_sp[0], g.in_sp[1]);
    let (oh, ow) = (g.out_sp[0], g.out_sp[1]);
    let (kh, kw) = (g.kernel[0], g.kernel[1]);
    let (sh, sw) = (g.strides[0], g.strides[1]);
    let (dh, dw) = (g.dilations[0], g.dilations[1]);
    let (pt, pl) = (g.pads[0], g.pads[1]);
    let (in_len, klen) = (ih * iw, kh * kw);
    dst.par_chunks_mut((oh * ow).max(1))
        .enumerate()
        .for_each(|(mi, plane)| {
            for t in 0..klen {
                let (ky, kx) = (t / kw, t % kw);
                let row = &cols[(mi * klen + t) * in_len..(mi * klen + t + 1) * in_len];
                // input columns whose output column ix·sw + kx·dw − pl is inside the row
                let (lo, hi) = valid_range(sw, kx * dw, pl, ow, iw);
                for iy in 0..ih {
                    let Some(oy) = (iy * sh + ky * dh).checked_sub(pt).filter(|&oy| oy < oh) else {
                        continue;
                    };
                    let src = &row[iy * iw..(iy + 1) * iw];
                    let orow = &mut plane[oy * ow..(oy + 1) * ow];
                    for (ix, &v) in src.iter().enumerate().take(hi).skip(lo) {
                        orow[ix * sw + kx * dw - pl] += v;
                    }
                }
            }
        });
}

#[cfg(test)]
mod tests;
