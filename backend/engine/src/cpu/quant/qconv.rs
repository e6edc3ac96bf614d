//! The integer convolution on raw 8-bit codes: per image and group, the filters (left) times the
//! image read as its im2col matrix (right) with [`qgemm`], padding reading the input's zero point.
//! The same numbers as [`super::igemm::conv_i32`] on centred values.

use rayon::prelude::*;

use super::igemm::{ConvGeom, Taps};
use super::qgemm::{Codes, PackedLeft, PackedRight, QKernel, qgemm};

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

/// `y[n, m, out…]` of the codes `x [n, c, in…]` with zero point `x_zp` and the packed filters with
/// zero points `w_zp` (one, or one per output channel).
pub(crate) fn conv_q(
    kernel: QKernel,
    x: Codes<'_>,
    x_zp: i32,
    w: &PackedFilters,
    w_zp: &[i32],
    g: &ConvGeom,
) -> Vec<i32> {
    let in_size: usize = g.input.iter().product();
    let out_size: usize = g.output.iter().product();
    let k_size: usize = g.kernel.iter().product();
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let rows = cg * k_size;
    let mut y = vec![0i32; g.n * g.m * out_size];
    // a 1×1 convolution with unit strides and no padding reads the image as it is
    let pointwise = k_size == 1 && g.strides.iter().all(|&s| s == 1) && g.pad_begin.iter().all(|&p| p == 0);
    let taps = (!pointwise).then(|| Taps::new(g));
    // padding holds the zero point's code, so that it adds nothing once centred
    let pad = x_zp as u8;
    let x_bits = x.bits();
    let image = |(img, y_img): (usize, &mut [i32])| {
        for (grp, filters) in w.groups.iter().enumerate() {
            let x0 = (img * g.c + grp * cg) * in_size;
            let cols =
                PackedRight::pack_rows(kernel, rows, out_size, x.signed(), filters.signed(), |p, dst| {
                    let (ci, kp) = (p / k_size, p % k_size);
                    let xc = &x_bits[x0 + ci * in_size..x0 + (ci + 1) * in_size];
                    match &taps {
                        None => dst.copy_from_slice(xc),
                        Some(taps) => taps.fill(kp, xc, pad, dst),
                    }
                });
            let zp = if w_zp.len() == 1 {
                w_zp
            } else {
                &w_zp[grp * mg..(grp + 1) * mg]
            };
            qgemm(
                filters,
                &cols,
                zp,
                &[x_zp],
                &mut y_img[grp * mg * out_size..(grp + 1) * mg * out_size],
            );
        }
    };
    // the images of a batch on the pool's threads, each image's (small) products inside one task
    let image_len = (g.m * out_size).max(1);
    if g.n > 1 && rayon::current_num_threads() > 1 {
        y.par_chunks_mut(image_len).enumerate().for_each(image);
    } else {
        y.chunks_mut(image_len).enumerate().for_each(image);
    }
    y
}
