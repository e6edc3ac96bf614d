//! The integer convolution on raw 8-bit codes: per image and group, the filters (left) times the
//! image read as its im2col matrix (right) with [`qgemm`], padding reading the input's zero point.
//! The same numbers as [`super::igemm::conv_i32`] on centred values.
//!
//! Filters whose zero points are all 0 (a symmetric quantizer's) run along k kernel position by
//! position, four channels at a time ([`FilterOrder::ByTap`]): then each k group of the right
//! operand is a run of lanes of four channels' codes, interleaved once per image
//! ([`LanePlanes`]) rather than once per kernel position.

use std::ops::Range;

use rayon::prelude::*;

use super::igemm::{ConvGeom, Taps};
use super::qgemm::{
    Codes, PackedLeft, PackedRight, QKernel, RowOffset, Sink, lane_mask, qgemm, qgemm_one_thread,
};
use crate::cpu::padded::strided_copy;
use crate::error::{EngineError, Result};

/// The filters of a convolution packed per group, as the left operands of its products.
#[derive(Debug, Clone)]
pub(crate) struct PackedFilters {
    groups: Vec<PackedLeft>,
    order: FilterOrder,
}

/// The order of a filter's codes along the product's k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FilterOrder {
    /// channel by channel, each channel's kernel positions (ONNX's order, the im2col rows')
    ByChannel,
    /// kernel position by position, each position's channels padded with zero codes to `channels`
    /// (a multiple of 4), so that a k group is four channels at one position
    ByTap { channels: usize },
}

impl PackedFilters {
    /// Packs `w [m, c/group, kernel…]` for `group` groups, channel by channel.
    pub(crate) fn pack(kernel: QKernel, w: Codes<'_>, m: usize, group: usize) -> PackedFilters {
        let mg = m / group.max(1);
        let rows = w.bits().len().checked_div(m).unwrap_or(0);
        let groups = (0..group)
            .map(|grp| {
                let part = w.slice(grp * mg * rows..(grp + 1) * mg * rows);
                PackedLeft::pack(kernel, part, mg, rows)
            })
            .collect();
        PackedFilters {
            groups,
            order: FilterOrder::ByChannel,
        }
    }

    /// Packs the filters `w [m, c/group, kernel…]` of convolution `g` in the order
    /// [`filter_order`] picks (`symmetric`: every filter's zero point is 0).
    pub(crate) fn for_conv(kernel: QKernel, w: Codes<'_>, g: &ConvGeom, symmetric: bool) -> PackedFilters {
        let FilterOrder::ByTap { channels } = filter_order(g, symmetric) else {
            return PackedFilters::pack(kernel, w, g.m, g.group);
        };
        let (cg, mg) = (g.c / g.group.max(1), g.m / g.group.max(1));
        let k_size: usize = g.kernel.iter().product();
        let (rows, row_len) = (cg * k_size, k_size * channels);
        let groups = (0..g.group)
            .map(|grp| {
                let mut codes = vec![0u8; mg * row_len];
                for (f, row) in codes.chunks_exact_mut(row_len.max(1)).enumerate() {
                    let filter = &w.bits()[(grp * mg + f) * rows..][..rows];
                    for (ci, taps) in filter.chunks_exact(k_size.max(1)).enumerate() {
                        for (kp, &code) in taps.iter().enumerate() {
                            row[kp * channels + ci] = code;
                        }
                    }
                }
                PackedLeft::pack(kernel, Codes::new(&codes, w.signed()), mg, row_len)
            })
            .collect();
        PackedFilters {
            groups,
            order: FilterOrder::ByTap { channels },
        }
    }

    /// Whether these are the filters of convolution `g` packed for `kernel` as
    /// [`PackedFilters::for_conv`] packs them (a plan's prepared filters, checked before use).
    pub(crate) fn fits(&self, kernel: QKernel, g: &ConvGeom, symmetric: bool) -> bool {
        let order = filter_order(g, symmetric);
        let k_size: usize = g.kernel.iter().product();
        let rows = match order {
            FilterOrder::ByChannel => g.c / g.group.max(1) * k_size,
            FilterOrder::ByTap { channels } => k_size * channels,
        };
        let mg = g.m / g.group.max(1);
        self.order == order
            && self.groups.len() == g.group
            && self.groups.iter().all(|l| l.fits(kernel, mg, rows))
    }
}

/// The order convolution `g`'s filters are packed in: by kernel position where the window has
/// several (a 1×1 convolution's k groups are four channels either way, interleaved as its strips
/// are packed), every filter's zero point is 0 (`symmetric`: the product then needs no column sums
/// of the input) and the input is read as runs of phase planes ([`PhaseLayout::for_conv`]); else
/// by channel.
pub(crate) fn filter_order(g: &ConvGeom, symmetric: bool) -> FilterOrder {
    let taps: usize = g.kernel.iter().product();
    if symmetric && taps > 1 && PhaseLayout::for_conv(g).is_some() {
        FilterOrder::ByTap {
            channels: (g.c / g.group.max(1)).next_multiple_of(4),
        }
    } else {
        FilterOrder::ByChannel
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
///
/// Fails on filters packed by kernel position for a window read without phase planes (a caller
/// that did not check [`PackedFilters::fits`]).
pub(crate) fn conv_q<S: Sink>(
    kernel: QKernel,
    x: Codes<'_>,
    x_zp: i32,
    w: &PackedFilters,
    w_zp: &[i32],
    g: &ConvGeom,
    sink: &S,
) -> Result<Vec<S::Out>> {
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let reading = match w.order {
        FilterOrder::ByChannel => Reading::new(x, x_zp, g),
        FilterOrder::ByTap { channels } => {
            let Some(layout) = PhaseLayout::for_conv(g) else {
                return Err(EngineError::internal(
                    "an integer convolution's filters are packed by kernel position for a window read without phase planes",
                ));
            };
            let mask = lane_mask(x.signed(), w.groups.first().is_some_and(PackedLeft::signed));
            let planes = PhasePlanes::new(layout, x.bits(), g, x_zp as u8);
            Reading::Lanes(LanePlanes::new(planes, g, channels, mask))
        }
    };
    let src = Im2col {
        kernel,
        x,
        x_zp,
        reading,
        in_size: g.input.iter().product(),
        k_size: g.kernel.iter().product(),
        cg,
        c: g.c,
        group: g.group,
    };
    // the positions each image's products produce: the output's, or the wider rows of a shifted
    // reading (dropped after)
    let cols = src.reading.columns(g);
    let image_len = (g.m * cols).max(1);
    let threads = rayon::current_num_threads();
    let strips = strip_count(cols, kernel.nr(), threads);
    if g.n >= threads || strips == 1 {
        let mut y = vec![S::Out::default(); g.n * g.m * cols];
        // whole images, on the pool's threads when there are several (each image's products
        // inside one task), else one image after another with products that may spread
        let images_parallel = g.n > 1 && threads > 1;
        let image = |(img, y_img): (usize, &mut [S::Out])| {
            for (grp, filters) in w.groups.iter().enumerate() {
                let zp = group_zero_points(w_zp, grp, mg);
                let dst = &mut y_img[grp * mg * cols..(grp + 1) * mg * cols];
                let sink = RowOffset {
                    inner: sink,
                    rows: grp * mg,
                };
                src.product(filters, zp, img, grp, 0..cols, dst, &sink, !images_parallel);
            }
        };
        if images_parallel {
            y.par_chunks_mut(image_len).enumerate().for_each(image);
        } else {
            y.chunks_mut(image_len).enumerate().for_each(image);
        }
        return Ok(src.reading.output(y, g));
    }
    // strips of positions: each task's products into a block of its own, whose rows are copied
    // into the output after (only its positions, where the reading's rows are wider)
    let per = cols.div_ceil(strips).next_multiple_of(kernel.nr());
    let tasks: Vec<(usize, usize, usize)> = (0..g.n)
        .flat_map(|img| (0..w.groups.len()).map(move |grp| (img, grp)))
        .flat_map(|(img, grp)| (0..cols.div_ceil(per)).map(move |s| (img, grp, s * per)))
        .collect();
    let blocks: Vec<Vec<S::Out>> = tasks
        .par_iter()
        .map(|&(img, grp, first)| {
            let part = first..(first + per).min(cols);
            let mut block = vec![S::Out::default(); mg * part.len()];
            let zp = group_zero_points(w_zp, grp, mg);
            let sink = RowOffset {
                inner: sink,
                rows: grp * mg,
            };
            src.product(&w.groups[grp], zp, img, grp, part, &mut block, &sink, false);
            block
        })
        .collect();
    // the tasks are image by image, group by group, strip by strip: one group's strips in a row
    let group_strips = cols.div_ceil(per);
    let mut y = Vec::with_capacity(g.n * g.m * g.output.iter().product::<usize>());
    for strips in blocks.chunks_exact(group_strips.max(1)) {
        for row in 0..mg {
            src.reading
                .for_each_run(g, |run| extend_from_strips(&mut y, strips, (row, mg), per, run));
        }
    }
    Ok(y)
}

/// Appends positions `run` of row `row` of a product of `rows` rows split into `strips` (blocks of
/// `per` positions each, the last narrower; each block's rows one after another) to `y`.
fn extend_from_strips<T: Copy>(
    y: &mut Vec<T>,
    strips: &[Vec<T>],
    (row, rows): (usize, usize),
    per: usize,
    run: Range<usize>,
) {
    let mut at = run.start;
    while at < run.end {
        let (block, first) = (&strips[at / per], at / per * per);
        let end = run.end.min(first + per);
        let width = block.len() / rows;
        y.extend_from_slice(&block[row * width + at - first..row * width + end - first]);
        at = end;
    }
}

/// How many strips of positions one image's products split into over `threads` threads: one
/// (no split) below two strips of [`STRIP_MIN`] positions, else one or two per thread (a count
/// the threads share evenly).
fn strip_count(out_size: usize, nr: usize, threads: usize) -> usize {
    let strips = out_size / STRIP_MIN.next_multiple_of(nr);
    if threads < 2 || strips < 2 {
        return 1;
    }
    (strips / threads * threads).clamp(threads, 2 * threads)
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
    reading: Reading,
    in_size: usize,
    k_size: usize,
    /// input channels per group, and in all
    cg: usize,
    c: usize,
    group: usize,
}

/// How the rows of the im2col matrix are read from the input.
enum Reading {
    /// a 1×1 convolution with unit strides and no padding reads the image as it is
    Image,
    /// A 2-D convolution reads each kernel position's row as one run of a plane of the image
    /// padded with the zero point's code: the padded image itself for unit strides, else one of
    /// its phases (every stride-th row and column from an offset), so that a strided window is a
    /// shifted one there. Its products produce output rows `width` positions apart, whose
    /// columns past the output's are dropped after. No copy per output row, where the taps copy
    /// pieces a row long.
    Shifted(PhasePlanes),
    /// other windows: each output row's piece through the taps
    Taps(Taps),
    /// [`Reading::Shifted`] for filters by tap: each k group one run of lanes of four channels
    Lanes(LanePlanes),
}

/// Where a convolution's kernel positions read: the phases they need, each `height × width`,
/// and each position's phase and shift there.
struct PhaseLayout {
    phases: Vec<Phase>,
    height: usize,
    width: usize,
    /// each kernel position's offset into its channel's phases (one after another)
    offsets: Vec<usize>,
}

/// The phases of every channel of every image, laid out as [`PhaseLayout`] says.
struct PhasePlanes {
    layout: PhaseLayout,
    codes: Vec<u8>,
    /// a channel's phases, one after another
    channel_len: usize,
}

impl Reading {
    /// The reading of filters by channel.
    fn new(x: Codes<'_>, x_zp: i32, g: &ConvGeom) -> Reading {
        if pointwise(g) {
            return Reading::Image;
        }
        match PhaseLayout::for_conv(g) {
            Some(layout) => Reading::Shifted(PhasePlanes::new(layout, x.bits(), g, x_zp as u8)),
            None => Reading::Taps(Taps::new(g)),
        }
    }

    /// The rows of the phase planes, for the readings that have them.
    fn layout(&self) -> Option<&PhaseLayout> {
        match self {
            Reading::Shifted(planes) => Some(&planes.layout),
            Reading::Lanes(planes) => Some(&planes.layout),
            Reading::Image | Reading::Taps(_) => None,
        }
    }

    /// The positions each image's products produce.
    fn columns(&self, g: &ConvGeom) -> usize {
        match self.layout() {
            Some(layout) => (g.output[0] - 1) * layout.width + g.output[1],
            None => g.output.iter().product(),
        }
    }

    /// The output `y [n, m, out…]` of the products' values `wide` ([`Reading::columns`] per
    /// channel): the columns of a phase plane's rows past the output's dropped.
    fn output<T: Copy>(&self, wide: Vec<T>, g: &ConvGeom) -> Vec<T> {
        if self.layout().is_none() {
            return wide;
        }
        let cols = self.columns(g);
        let mut y = Vec::with_capacity(g.n * g.m * g.output.iter().product::<usize>());
        for channel in wide.chunks_exact(cols.max(1)) {
            self.for_each_run(g, |run| y.extend_from_slice(&channel[run]));
        }
        y
    }

    /// Calls `run` with each run of an output channel's [`Reading::columns`] that are output
    /// positions, in order: the whole when the reading's rows are the output's, else each row's
    /// first positions.
    fn for_each_run(&self, g: &ConvGeom, mut run: impl FnMut(Range<usize>)) {
        match self.layout() {
            Some(layout) => {
                for oy in 0..g.output[0] {
                    run(oy * layout.width..oy * layout.width + g.output[1]);
                }
            }
            None => run(0..self.columns(g)),
        }
    }
}

/// Every image's channels as lanes of four (each group's channels padded to `channels`): lane `p`
/// of a quad holds its four channels' codes at position `p` of their phase planes, XORed with the
/// product's [`lane_mask`].
struct LanePlanes {
    layout: PhaseLayout,
    lanes: Vec<u32>,
    /// the lanes of one quad's phases
    quad_len: usize,
    /// quads per group
    quads: usize,
}

impl LanePlanes {
    /// The lanes of every image's channels' phase `planes`.
    fn new(planes: PhasePlanes, g: &ConvGeom, channels: usize, mask: u32) -> LanePlanes {
        let PhasePlanes {
            layout,
            codes,
            channel_len: quad_len,
        } = planes;
        let (cg, quads) = (g.c / g.group.max(1), channels / 4);
        // the channels past a group's own: any code, read by zero filter codes only
        let filler = vec![0u8; quad_len];
        let channel = |img: usize, grp: usize, ci: usize| -> &[u8] {
            if ci < cg {
                &codes[((img * g.c) + grp * cg + ci) * quad_len..][..quad_len]
            } else {
                &filler
            }
        };
        let mut lanes = vec![0u32; g.n * g.group * quads * quad_len];
        let quad = |(t, dst): (usize, &mut [u32])| {
            let (img, grp, q) = (t / (g.group * quads), t / quads % g.group, t % quads);
            let [c0, c1, c2, c3] = [0, 1, 2, 3].map(|i| channel(img, grp, 4 * q + i));
            for (p, lane) in dst.iter_mut().enumerate() {
                *lane = u32::from_le_bytes([c0[p], c1[p], c2[p], c3[p]]) ^ mask;
            }
        };
        if quad_len > 0 {
            if lanes.len() >= 1 << 15 {
                lanes.par_chunks_mut(quad_len).enumerate().for_each(quad);
            } else {
                lanes.chunks_mut(quad_len).enumerate().for_each(quad);
            }
        }
        LanePlanes {
            layout,
            lanes,
            quad_len,
            quads,
        }
    }
}

/// Whether convolution `g` is a 1×1 one with unit strides and no padding before: each output
/// position reads the input position it is at.
fn pointwise(g: &ConvGeom) -> bool {
    g.strides.iter().all(|&s| s == 1)
        && g.kernel.iter().all(|&k| k == 1)
        && g.pad_begin.iter().all(|&p| p == 0)
}

/// The columns of the narrowest panel of any kernel, to compare panel counts with.
const NR_ANY: usize = 8;

/// A phase: the padded image's rows `r·stride + row` and columns `c·stride + column`.
#[derive(Clone, Copy, PartialEq)]
struct Phase {
    row: usize,
    column: usize,
}

impl PhaseLayout {
    /// The layout of a 2-D convolution's phase planes, when reading them is worth it: their rows,
    /// wider than the output's, add at most a quarter of tiles.
    fn for_conv(g: &ConvGeom) -> Option<PhaseLayout> {
        if g.input.len() != 2 || g.output.contains(&0) {
            return None;
        }
        let layout = PhaseLayout::new(g);
        let (oh, ow) = (g.output[0], g.output[1]);
        let wide = ((oh - 1) * layout.width + ow).div_ceil(NR_ANY);
        (4 * wide <= 5 * (oh * ow).div_ceil(NR_ANY)).then_some(layout)
    }

    fn new(g: &ConvGeom) -> PhaseLayout {
        let (kh, kw) = (g.kernel[0], g.kernel[1]);
        let ([sh, sw], [dh, dw]) = ([g.strides[0], g.strides[1]], [g.dilations[0], g.dilations[1]]);
        // kernel position (ky, kx) reads phase (ky·dh mod sh, kx·dw mod sw) shifted by the quotients
        let taps: Vec<(Phase, usize, usize)> = (0..kh * kw)
            .map(|kp| {
                let (y, x) = ((kp / kw) * dh, (kp % kw) * dw);
                (
                    Phase {
                        row: y % sh,
                        column: x % sw,
                    },
                    y / sh,
                    x / sw,
                )
            })
            .collect();
        let height = g.output[0] + taps.iter().map(|t| t.1).max().unwrap_or(0);
        let width = g.output[1] + taps.iter().map(|t| t.2).max().unwrap_or(0);
        let mut phases: Vec<Phase> = Vec::new();
        for t in &taps {
            if !phases.contains(&t.0) {
                phases.push(t.0);
            }
        }
        let offsets = taps
            .iter()
            .map(|(phase, dy, dx)| {
                let index = phases.iter().position(|p| p == phase).unwrap_or(0);
                index * height * width + dy * width + dx
            })
            .collect();
        PhaseLayout {
            phases,
            height,
            width,
            offsets,
        }
    }
}

impl PhasePlanes {
    /// Every image's channels' phases of the codes `bits`, `pad` where a phase reads the padding.
    fn new(layout: PhaseLayout, bits: &[u8], g: &ConvGeom, pad: u8) -> PhasePlanes {
        let (ih, iw) = (g.input[0], g.input[1]);
        let ([sh, sw], [top, left]) = ([g.strides[0], g.strides[1]], [g.pad_begin[0], g.pad_begin[1]]);
        let (height, width) = (layout.height, layout.width);
        let channel_len = layout.phases.len() * height * width;
        let mut codes = vec![pad; g.n * g.c * channel_len];
        let fill = |(src, dst): (&[u8], &mut [u8])| {
            for (phase, plane) in layout
                .phases
                .iter()
                .zip(dst.chunks_exact_mut((height * width).max(1)))
            {
                // plane row r, column c reads the input at (r·sh + row − top, c·sw + column − left)
                let x0 = phase.column as isize - left as isize;
                let cols = super::igemm::valid_columns(width, sw, x0, iw);
                if cols.is_empty() {
                    continue;
                }
                let from = ((cols.start * sw) as isize + x0) as usize;
                for (r, row) in plane.chunks_exact_mut(width.max(1)).enumerate() {
                    let iy = (r * sh + phase.row) as isize - top as isize;
                    if (0..ih as isize).contains(&iy) {
                        strided_copy(&mut row[cols.clone()], &src[iy as usize * iw..][..iw], sw, from);
                    }
                }
            }
        };
        let inputs = bits[..g.n * g.c * ih * iw].chunks_exact((ih * iw).max(1));
        if codes.len() >= 1 << 16 {
            let inputs: Vec<&[u8]> = inputs.collect();
            inputs
                .into_par_iter()
                .zip(codes.par_chunks_mut(channel_len.max(1)))
                .for_each(fill);
        } else {
            inputs.zip(codes.chunks_mut(channel_len.max(1))).for_each(fill);
        }
        PhasePlanes {
            layout,
            codes,
            channel_len,
        }
    }
}

impl Im2col<'_> {
    /// The product of group `grp`'s `filters` with image `img`'s im2col columns `cols` (positions
    /// of [`Reading::columns`]) through `sink` into `dst` (`mg × cols.len()`), on the pool's
    /// threads when `parallel`.
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
        let right = match &self.reading {
            Reading::Lanes(planes) => self.lanes(planes, filters, img, grp, cols, parallel),
            _ => self.rows(filters, img, grp, cols, parallel),
        };
        if parallel {
            qgemm(filters, &right, w_zp, &[self.x_zp], sink, dst);
        } else {
            qgemm_one_thread(filters, &right, w_zp, &[self.x_zp], sink, dst);
        }
    }

    /// Image `img`'s group `grp` as the right operand of filters by channel, columns `cols`:
    /// the im2col matrix's rows, each read as the reading says.
    fn rows(
        &self,
        filters: &PackedLeft,
        img: usize,
        grp: usize,
        cols: std::ops::Range<usize>,
        parallel: bool,
    ) -> PackedRight {
        let (in_size, k_size) = (self.in_size, self.k_size);
        let rows = self.cg * k_size;
        let channel0 = img * self.c + grp * self.cg;
        // padding holds the zero point's code, so that it adds nothing once centred
        let pad = self.x_zp as u8;
        let bits = self.x.bits();
        PackedRight::pack_rows(
            self.kernel,
            rows,
            cols.len(),
            (self.x.signed(), filters.signed()),
            parallel,
            |p, part, row| {
                let (ci, kp) = (p / k_size, p % k_size);
                let first = cols.start + part.start;
                let channel = channel0 + ci;
                match &self.reading {
                    Reading::Image => row.copy_from_slice(&bits[channel * in_size + first..][..part.len()]),
                    Reading::Shifted(planes) => {
                        let at = channel * planes.channel_len + planes.layout.offsets[kp] + first;
                        row.copy_from_slice(&planes.codes[at..][..part.len()]);
                    }
                    Reading::Taps(taps) => {
                        let xc = &bits[channel * in_size..(channel + 1) * in_size];
                        taps.fill(kp, xc, pad, first, row);
                    }
                    Reading::Lanes(_) => unreachable!("lanes are read by `Im2col::lanes`"),
                }
            },
        )
    }

    /// Image `img`'s group `grp` as the right operand of filters by tap, columns `cols`: k group
    /// `g` is kernel position `g / quads`'s run of quad `g % quads`.
    fn lanes(
        &self,
        planes: &LanePlanes,
        filters: &PackedLeft,
        img: usize,
        grp: usize,
        cols: std::ops::Range<usize>,
        parallel: bool,
    ) -> PackedRight {
        let first_quad = (img * self.group + grp) * planes.quads;
        PackedRight::from_lanes(
            self.kernel,
            self.k_size * planes.quads * 4,
            cols.len(),
            (self.x.signed(), filters.signed()),
            parallel,
            |g, part, dst| {
                let (kp, q) = (g / planes.quads, g % planes.quads);
                let at =
                    (first_quad + q) * planes.quad_len + planes.layout.offsets[kp] + cols.start + part.start;
                dst.copy_from_slice(&planes.lanes[at..][..part.len()]);
            },
        )
    }
}
