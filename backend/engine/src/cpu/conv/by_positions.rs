//! Convolutions with few output positions (ResNet's last stage: 7×7 = 49 of them), computed as the
//! transposed product: output positions are the product's rows and output channels its columns.
//!
//! The usual product has output channels as rows and positions as columns, in tiles of 48 columns
//! (16-lane vectors on AVX-512). 49 positions fill one tile and one column of a second, whose
//! vectors do 1/16 of useful work: a quarter of the kernel's time is wasted. Transposed, the 49
//! rows make six full panels of 8 and a one-row panel, and the columns (hundreds to thousands of
//! channels, a multiple of 16) fill every vector. The filters are packed as the B operand once, at
//! plan time ([`pack_filters_by_positions`]); the product's result is transposed back into the
//! output's channel planes, and the tail applied to them.

use rayon::prelude::*;

use crate::cpu::arena;
use crate::cpu::epilogue::{Epi, NoTail, RowEpilogue};
use crate::cpu::gemm::MatRef;
use crate::cpu::mm::{self, BOp, BSource, Init, PackedA, PackedB};
use crate::cpu::padded::{PadPlane, Window};
use crate::cpu::simd::Isa;
use crate::cpu::transpose;
use crate::error::Result;

/// Output channels per task when the result is transposed back into planes.
const CHANNELS_PER_TASK: usize = 64;

use super::{ConvGeom, Im2col, fill_planes, im2col_taps};

/// Share of a vector's lanes that `n` values fill when cut into vectors of 16.
fn lane_fill(n: usize) -> f64 {
    n as f64 / n.next_multiple_of(16) as f64
}

impl ConvGeom<'_> {
    /// True when the transposed product fills the vectors better than the usual one: few output
    /// positions that leave most lanes of the last column vector empty, and an output channel
    /// count that fills its vectors. Ungrouped 2-D and pointwise convolutions only (their input is
    /// read as an im2col matrix without building it in the N-d way).
    pub(crate) fn by_positions(&self) -> bool {
        let out_len: usize = self.out_sp.iter().product();
        self.group == 1
            && (self.in_sp.len() == 2 || self.pointwise())
            && out_len > 1
            && self.m >= 32
            && lane_fill(out_len) < 0.8
            && lane_fill(self.m) >= 0.9
    }
}

/// The filters `w` ([M, C, k…], ungrouped) packed as the B operand of the transposed product:
/// `kdim × M`, column `j` holding filter `j`.
pub(crate) fn pack_filters_by_positions(w: &[f32], m: usize, isa: Isa) -> Result<PackedB> {
    let kdim = w.len() / m.max(1);
    let wt = MatRef {
        data: w,
        off: 0,
        rs: 1,
        cs: kdim,
    };
    PackedB::pack(wt, kdim, m, 1.0, isa)
}

/// The convolution `g` ([`ConvGeom::by_positions`]) of `x` into `out` (N×M×positions), each image
/// as `(positions × M) = im2colᵀ · filtersᵀ` then transposed, then `epi` on each channel plane.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_by_positions(
    isa: Isa,
    x: &[f32],
    bias: Option<&[f32]>,
    g: &ConvGeom<'_>,
    epi: &Epi<'_>,
    filters: &PackedB,
    out: &mut [f32],
) -> Result<()> {
    let in_len: usize = g.in_sp.iter().product();
    let out_len: usize = g.out_sp.iter().product();
    let kdim = filters.k();
    let pointwise = g.pointwise();
    let plane = (!pointwise).then(|| {
        PadPlane::new(
            &Window::new(g.in_sp, g.out_sp, g.kernel, g.strides, g.dilations, g.pads),
            1,
        )
    });
    let taps = plane.map(|p| im2col_taps(g, &p)).unwrap_or_default();
    let init = bias.map_or(Init::Zero, Init::Col);
    let run_image = |ni: usize, dst: &mut [f32], parallel: bool| -> Result<()> {
        let image = &x[ni * g.c * in_len..(ni + 1) * g.c * in_len];
        // Buffers from this thread's arena, each written whole before it is read (fill_planes
        // writes the pads too). The im2col matrix (kdim × positions) is the image itself when
        // pointwise.
        let (pad, cols) = match plane {
            None => (Vec::new(), Vec::new()),
            Some(p) => {
                let mut pad = arena::take(g.c * p.len());
                let mut cols = arena::take(kdim * out_len);
                fill_planes(isa, &p, image, in_len, &mut pad);
                let src = Im2col {
                    pad: &pad,
                    plane: p,
                    taps: &taps,
                    ow: g.out_sp[1],
                    isa,
                };
                src.pack_panels(0, kdim, 0, out_len, out_len, &mut cols);
                (pad, cols)
            }
        };
        let matrix: &[f32] = if plane.is_some() { &cols } else { image };
        // its transpose as the A operand: rows are positions, each `out_len` apart in `matrix`
        let positions = MatRef {
            data: matrix,
            off: 0,
            rs: 1,
            cs: out_len,
        };
        let a = PackedA::pack(positions, out_len, kdim, 1.0, isa)?;
        // the product's result: positions × channels
        let mut by_position = arena::take(out_len * g.m);
        mm::gemm(
            &a,
            BOp::Packed(filters),
            &mut by_position,
            g.m,
            init,
            &NoTail,
            parallel,
        )?;
        a.recycle();
        // back to channel planes, then the tail, a block of channels per task: on one image the
        // product alone was split, and these two ran on one thread after it
        let per = CHANNELS_PER_TASK.min(g.m).max(1);
        let finish = |(block, planes): (usize, &mut [f32])| {
            let c0 = block * per;
            let channels = c0..c0 + planes.len() / out_len;
            transpose::columns(isa, &by_position, out_len, g.m, channels, planes);
            if !epi.is_empty() {
                let mut rows: Vec<&mut [f32]> = planes.chunks_exact_mut(out_len).collect();
                epi.offset(ni * g.m + c0).apply_rows(0, 0, &mut rows);
            }
        };
        if parallel {
            dst.par_chunks_mut(per * out_len).enumerate().for_each(finish);
        } else {
            dst.chunks_mut(per * out_len).enumerate().for_each(finish);
        }
        for buf in [pad, cols, by_position] {
            arena::give(buf);
        }
        Ok(())
    };
    // As the usual product: a batch runs an image per thread, a single image splits its product.
    let per_image = g.m * out_len;
    if g.n >= rayon::current_num_threads() && g.n > 1 {
        out.par_chunks_exact_mut(per_image)
            .enumerate()
            .try_for_each(|(ni, dst)| run_image(ni, dst, false))
    } else {
        out.chunks_exact_mut(per_image)
            .enumerate()
            .try_for_each(|(ni, dst)| run_image(ni, dst, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONES: [usize; 2] = [1, 1];
    const NO_PADS: [usize; 4] = [0; 4];

    /// A pointwise convolution of 64 channels over `sp`, stride 1.
    fn pointwise<'a>(sp: &'a [usize], m: usize, group: usize) -> ConvGeom<'a> {
        ConvGeom {
            n: 1,
            c: 64,
            m,
            group,
            in_sp: sp,
            out_sp: sp,
            kernel: &ONES,
            strides: &ONES,
            pads: &NO_PADS,
            dilations: &ONES,
        }
    }

    #[test]
    fn few_positions_and_full_channel_vectors_choose_the_transposed_product() {
        // ResNet-50's last stage: 49 positions, 512 or 2048 channels
        assert!(pointwise(&[7, 7], 512, 1).by_positions());
        assert!(pointwise(&[7, 7], 2048, 1).by_positions());
        // 14×14 fills 196 of 208 lanes: the usual product
        assert!(!pointwise(&[14, 14], 512, 1).by_positions());
        // channels that would leave lanes empty in their turn, groups, and one position
        assert!(!pointwise(&[7, 7], 40, 1).by_positions());
        assert!(!pointwise(&[7, 7], 512, 2).by_positions());
        assert!(!pointwise(&[1, 1], 512, 1).by_positions());
    }
}
