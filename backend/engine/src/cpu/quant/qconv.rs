//! The integer convolution on raw 8-bit codes: per image and group, the filters (left) times the
//! image read as its im2col matrix (right) with [`qgemm`], padding reading the input's zero point.
//! The same numbers as [`super::igemm::conv_i32`] on centred values.

use rayon::prelude::*;

use super::igemm::{ConvGeom, Taps};
use super::qgemm::{
    Codes, PackedLeft, PackedRight, QKernel, RowOffset, Sink, qgemm, qgemm_one_thread, write_columns,
};

/// The filters of a convolution packed per group, as the left operands of its products.
#[derive(Debug, Clone)]
pub(crate) struct PackedFilters {
    groups: Vec<PackedLeft>,
}

impl PackedFilters {
    /// Packs `w [m, c/group, kernel…]` for `group` groups.
    pub(crate) fn pack(kernel: QKernel, w: Codes<'_>, m: usize, group: usize) -> PackedFilters {
        let mg = m / group.max(1);
        let rows = w.bits().len().checked_div(m).unwrap_or(0);
        let groups = (0..group)
            .map(|grp| {
                let part = w.slice(grp * mg * rows..(grp + 1) * mg * rows);
                PackedLeft::pack(kernel, part, mg, rows)
            })
            .collect();
        PackedFilters { groups }
    }

    /// Whether these are the filters of an `m`-channel convolution of `group` groups with `rows`
    /// codes per filter, packed for `kernel` (a plan's prepared filters, checked before use).
    pub(crate) fn fits(&self, kernel: QKernel, m: usize, group: usize, rows: usize) -> bool {
        self.groups.len() == group && self.groups.iter().all(|l| l.fits(kernel, m / group.max(1), rows))
    }
}

/// Output positions per task, at least, when one image's convolution is split over the pool by
/// positions: a few hundred keep each task's packing and tiles long enough to pay for the split.
const STRIP_MIN: usize = 256;

/// `y[n, m, out…]` of the codes `x [n, c, in…]` with zero point `x_zp` and the packed filters with
/// zero points `w_zp` (one, or one per output channel), each output channel's sums through `sink`
/// (its rows are the output channels).
///
/// A batch runs its images on the pool's threads. Fewer images than threads split each image's
/// output positions into strips, each packed and multiplied by one task: packing the im2col matrix
/// is most of the work of a convolution with few filters (a network's first, K = 27).
pub(crate) fn conv_q<S: Sink>(
    kernel: QKernel,
    x: Codes<'_>,
    x_zp: i32,
    w: &PackedFilters,
    w_zp: &[i32],
    g: &ConvGeom,
    sink: &S,
) -> Vec<S::Out> {
    let in_size: usize = g.input.iter().product();
    let out_size: usize = g.output.iter().product();
    let k_size: usize = g.kernel.iter().product();
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    // a 1×1 convolution with unit strides and no padding reads the image as it is
    let pointwise = k_size == 1 && g.strides.iter().all(|&s| s == 1) && g.pad_begin.iter().all(|&p| p == 0);
    let src = Im2col {
        kernel,
        x,
        x_zp,
        taps: (!pointwise).then(|| Taps::new(g)),
        in_size,
        k_size,
        cg,
        c: g.c,
    };
    let mut y = vec![S::Out::default(); g.n * g.m * out_size];
    let image_len = (g.m * out_size).max(1);
    let threads = rayon::current_num_threads();
    let strips = strip_count(out_size, kernel.nr(), threads);
    if g.n >= threads || strips == 1 {
        // whole images, on the pool's threads when there are several (each image's products
        // inside one task), else one image after another with products that may spread
        let images_parallel = g.n > 1 && threads > 1;
        let image = |(img, y_img): (usize, &mut [S::Out])| {
            for (grp, filters) in w.groups.iter().enumerate() {
                let zp = group_zero_points(w_zp, grp, mg);
                let dst = &mut y_img[grp * mg * out_size..(grp + 1) * mg * out_size];
                let sink = RowOffset {
                    inner: sink,
                    rows: grp * mg,
                };
                src.product(filters, zp, img, grp, 0..out_size, dst, &sink, !images_parallel);
            }
        };
        if images_parallel {
            y.par_chunks_mut(image_len).enumerate().for_each(image);
        } else {
            y.chunks_mut(image_len).enumerate().for_each(image);
        }
        return y;
    }
    // strips of positions: each task's products into a block of its own, copied into y after
    let per = out_size.div_ceil(strips).next_multiple_of(kernel.nr());
    let tasks: Vec<(usize, usize, usize)> = (0..g.n)
        .flat_map(|img| (0..w.groups.len()).map(move |grp| (img, grp)))
        .flat_map(|(img, grp)| (0..out_size.div_ceil(per)).map(move |s| (img, grp, s * per)))
        .collect();
    let blocks: Vec<Vec<S::Out>> = tasks
        .par_iter()
        .map(|&(img, grp, first)| {
            let cols = first..(first + per).min(out_size);
            let mut block = vec![S::Out::default(); mg * cols.len()];
            let zp = group_zero_points(w_zp, grp, mg);
            let sink = RowOffset {
                inner: sink,
                rows: grp * mg,
            };
            src.product(&w.groups[grp], zp, img, grp, cols, &mut block, &sink, false);
            block
        })
        .collect();
    for (&(img, grp, first), block) in tasks.iter().zip(&blocks) {
        let group_out = &mut y[img * image_len + grp * mg * out_size..][..mg * out_size];
        write_columns(group_out, out_size, first, block, mg);
    }
    y
}

/// How many strips of positions one image's products split into over `threads` threads: one
/// (no split) below two strips of [`STRIP_MIN`] positions, else up to two per thread.
fn strip_count(out_size: usize, nr: usize, threads: usize) -> usize {
    if threads < 2 {
        return 1;
    }
    (out_size / STRIP_MIN.next_multiple_of(nr)).clamp(1, 2 * threads)
}

/// The filters' zero points of group `grp` (`mg` filters): the one of them all, or the group's.
fn group_zero_points(w_zp: &[i32], grp: usize, mg: usize) -> &[i32] {
    if w_zp.len() == 1 {
        w_zp
    } else {
        &w_zp[grp * mg..(grp + 1) * mg]
    }
}

/// The input of a convolution read as each image's and group's im2col matrix of codes.
struct Im2col<'a> {
    kernel: QKernel,
    x: Codes<'a>,
    x_zp: i32,
    /// `None` for a 1×1 convolution that reads the image as it is
    taps: Option<Taps>,
    in_size: usize,
    k_size: usize,
    /// input channels per group, and in all
    cg: usize,
    c: usize,
}

impl Im2col<'_> {
    /// The product of group `grp`'s `filters` with image `img`'s im2col columns `cols` (output
    /// positions) through `sink` into `dst` (`mg × cols.len()`), on the pool's threads when
    /// `parallel`.
    #[allow(clippy::too_many_arguments)]
    fn product<S: Sink>(
        &self,
        filters: &PackedLeft,
        w_zp: &[i32],
        img: usize,
        grp: usize,
        cols: std::ops::Range<usize>,
        dst: &mut [S::Out],
        sink: &S,
        parallel: bool,
    ) {
        let (in_size, k_size) = (self.in_size, self.k_size);
        let rows = self.cg * k_size;
        let x0 = (img * self.c + grp * self.cg) * in_size;
        // padding holds the zero point's code, so that it adds nothing once centred
        let pad = self.x_zp as u8;
        let bits = self.x.bits();
        let right = PackedRight::pack_rows(
            self.kernel,
            rows,
            cols.len(),
            self.x.signed(),
            filters.signed(),
            |p, row| {
                let (ci, kp) = (p / k_size, p % k_size);
                let xc = &bits[x0 + ci * in_size..x0 + (ci + 1) * in_size];
                match &self.taps {
                    None => row.copy_from_slice(&xc[cols.clone()]),
                    Some(taps) => taps.fill(kp, xc, pad, cols.start, row),
                }
            },
        );
        if parallel {
            qgemm(filters, &right, w_zp, &[self.x_zp], sink, dst);
        } else {
            qgemm_one_thread(filters, &right, w_zp, &[self.x_zp], sink, dst);
        }
    }
}
