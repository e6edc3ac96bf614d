//! Integer matrix products and convolutions: operands with their zero points subtracted (i16, so a
//! UINT8 or INT8 value minus its zero point always fits) and INT32 accumulators, as MatMulInteger,
//! ConvInteger, QLinearMatMul and QLinearConv define them. Products are exact; the sum wraps past
//! the i32 range as onnxruntime's does.

use rayon::prelude::*;

use crate::cpu::padded::strided_copy;

/// Work (multiply-adds) below which a product runs on one thread.
const PARALLEL_FROM: usize = 1 << 16;

/// `c[m×n] = a[m×k] · b[k×n]`, row-major.
pub(crate) fn igemm(m: usize, k: usize, n: usize, a: &[i16], b: &[i16], c: &mut [i32]) {
    let row = |(i, out): (usize, &mut [i32])| {
        out.fill(0);
        for (p, &av) in a[i * k..(i + 1) * k].iter().enumerate() {
            if av == 0 {
                continue;
            }
            let av = i32::from(av);
            for (o, &bv) in out.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *o = o.wrapping_add(av * i32::from(bv));
            }
        }
    };
    let c = &mut c[..m * n];
    if n == 0 {
        return;
    }
    if m * n * k >= PARALLEL_FROM && m > 1 {
        c.par_chunks_mut(n).enumerate().for_each(row);
    } else {
        c.chunks_mut(n).enumerate().for_each(row);
    }
}

/// Subtracts zero points from integer values: `zero_point_of(i)` gives the zero point of element `i`.
pub(crate) fn centred(x: &[i32], zero_point_of: impl Fn(usize) -> i32) -> Vec<i16> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| (v - zero_point_of(i)) as i16)
        .collect()
}

/// The geometry of one N-d convolution (pads resolved).
#[derive(Debug, Clone)]
pub(crate) struct ConvGeom {
    /// batch
    pub(crate) n: usize,
    /// input channels
    pub(crate) c: usize,
    /// output channels
    pub(crate) m: usize,
    /// groups
    pub(crate) group: usize,
    /// input spatial dims
    pub(crate) input: Vec<usize>,
    /// kernel spatial dims
    pub(crate) kernel: Vec<usize>,
    /// output spatial dims
    pub(crate) output: Vec<usize>,
    /// strides per spatial dim
    pub(crate) strides: Vec<usize>,
    /// padding before each spatial dim
    pub(crate) pad_begin: Vec<usize>,
    /// dilations per spatial dim
    pub(crate) dilations: Vec<usize>,
}

impl ConvGeom {
    /// The geometry of a convolution with window `win` of `x` (shape `sx`, `[n, c, in…]`) by filters
    /// of shape `sw` (`[m, c/group, kernel…]`) whose output's spatial dims are `out`.
    pub(crate) fn of(win: &crate::ir::ConvWindow, sx: &[usize], sw: &[usize], out: &[usize]) -> ConvGeom {
        let ns = sx.len().saturating_sub(2);
        ConvGeom {
            n: sx[0],
            c: sx[1],
            m: sw[0],
            group: win.group,
            input: sx[2..].to_vec(),
            kernel: sw[2..].to_vec(),
            output: out.to_vec(),
            strides: win.strides.clone(),
            pad_begin: win.pads[..ns.min(win.pads.len())].to_vec(),
            dilations: win.dilations.clone(),
        }
    }
}

/// The integer convolution `y[n, m, out…]` of centred `x [n, c, in…]` and `w [m, c/group, kernel…]`
/// (padding reads 0, i.e. the zero point before centring), by im2col and [`igemm`] per image and group.
pub(crate) fn conv_i32(x: &[i16], w: &[i16], g: &ConvGeom) -> Vec<i32> {
    let in_size: usize = g.input.iter().product();
    let out_size: usize = g.output.iter().product();
    let k_size: usize = g.kernel.iter().product();
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let rows = cg * k_size;
    let mut y = vec![0i32; g.n * g.m * out_size];
    let taps = Taps::new(g);
    let mut cols = vec![0i16; rows * out_size];
    for img in 0..g.n {
        for grp in 0..g.group {
            let x0 = (img * g.c + grp * cg) * in_size;
            for ci in 0..cg {
                let xc = &x[x0 + ci * in_size..x0 + (ci + 1) * in_size];
                for kp in 0..k_size {
                    let dst = &mut cols[(ci * k_size + kp) * out_size..(ci * k_size + kp + 1) * out_size];
                    taps.fill(kp, xc, 0, 0, dst);
                }
            }
            let w_g = &w[grp * mg * rows..(grp + 1) * mg * rows];
            let y0 = (img * g.m + grp * mg) * out_size;
            igemm(mg, rows, out_size, w_g, &cols, &mut y[y0..y0 + mg * out_size]);
        }
    }
    y
}

/// Where each kernel position's row of the im2col matrix reads, for [`Taps::fill`].
pub(super) enum Taps {
    /// 2-D: each output row reads one input row, found as the row is filled
    Plane(PlaneTaps),
    /// other ranks: for each kernel position and output position, the input offset it reads
    /// (`None` in padding)
    Table {
        /// `[kernel position][output position]`
        table: Vec<Option<usize>>,
        out_size: usize,
    },
}

/// A 2-D window: input and output sizes, kernel width, strides, dilations, padding before.
pub(super) struct PlaneTaps {
    ih: usize,
    iw: usize,
    ow: usize,
    kw: usize,
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 2],
}

impl Taps {
    pub(super) fn new(g: &ConvGeom) -> Taps {
        if g.input.len() == 2 {
            return Taps::Plane(PlaneTaps {
                ih: g.input[0],
                iw: g.input[1],
                ow: g.output[1],
                kw: g.kernel[1],
                strides: [g.strides[0], g.strides[1]],
                dilations: [g.dilations[0], g.dilations[1]],
                pads: [g.pad_begin[0], g.pad_begin[1]],
            });
        }
        let out_size: usize = g.output.iter().product();
        let k_size: usize = g.kernel.iter().product();
        let rank = g.input.len();
        let mut table = Vec::with_capacity(k_size * out_size);
        let mut kidx = vec![0usize; rank];
        for _ in 0..k_size {
            let mut oidx = vec![0usize; rank];
            for _ in 0..out_size {
                let mut off = Some(0usize);
                for (d, (&o, &k)) in oidx.iter().zip(&kidx).enumerate() {
                    let pos = (o * g.strides[d] + k * g.dilations[d]).checked_sub(g.pad_begin[d]);
                    off = match (off, pos) {
                        (Some(o), Some(p)) if p < g.input[d] => Some(o * g.input[d] + p),
                        _ => None,
                    };
                }
                table.push(off);
                step(&mut oidx, &g.output);
            }
            step(&mut kidx, &g.kernel);
        }
        Taps::Table { table, out_size }
    }

    /// Kernel position `kp`'s row of the im2col matrix (a value per output position) from one
    /// channel's input `xc` into `dst`, for the output positions `first..first + dst.len()`, `pad`
    /// where the window lies in the padding.
    pub(super) fn fill<T: Copy>(&self, kp: usize, xc: &[T], pad: T, first: usize, dst: &mut [T]) {
        match self {
            Taps::Plane(p) => {
                let ow = p.ow.max(1);
                let (ky, kx) = (kp / p.kw, kp % p.kw);
                let [sh, sw] = p.strides;
                let dy = (ky * p.dilations[0]) as isize - p.pads[0] as isize;
                let dx = (kx * p.dilations[1]) as isize - p.pads[1] as isize;
                let valid = valid_columns(p.ow, sw, dx, p.iw);
                // each output row's part of the range: columns c0..c1 of row oy into dst[at..]
                // (one division for the first row; the rows after it start at column 0)
                let (mut oy, mut c0) = (first / ow, first % ow);
                let mut at = 0;
                while at < dst.len() {
                    let c1 = ow.min(c0 + (dst.len() - at));
                    let row = &mut dst[at..at + (c1 - c0)];
                    let iy = (oy * sh) as isize + dy;
                    let cols = valid.start.clamp(c0, c1)..valid.end.clamp(c0, c1);
                    if iy < 0 || iy >= p.ih as isize || cols.is_empty() {
                        row.fill(pad);
                    } else {
                        let src = &xc[iy as usize * p.iw..(iy as usize + 1) * p.iw];
                        row[..cols.start - c0].fill(pad);
                        row[cols.end - c0..].fill(pad);
                        let from = ((cols.start * sw) as isize + dx) as usize;
                        strided_copy(&mut row[cols.start - c0..cols.end - c0], src, sw, from);
                    }
                    at += c1 - c0;
                    (oy, c0) = (oy + 1, 0);
                }
            }
            Taps::Table { table, out_size } => {
                let sources = &table[kp * out_size + first..][..dst.len()];
                for (d, src) in dst.iter_mut().zip(sources) {
                    *d = src.map_or(pad, |s| xc[s]);
                }
            }
        }
    }
}

/// The output columns `ox` whose input column `ox·stride + offset` lies in `0..width`.
pub(super) fn valid_columns(
    out: usize,
    stride: usize,
    offset: isize,
    width: usize,
) -> std::ops::Range<usize> {
    let s = stride as isize;
    let lo = if offset < 0 { (-offset + s - 1) / s } else { 0 };
    let last = width as isize - 1 - offset;
    let hi = if last < 0 {
        0
    } else {
        (last / s + 1).min(out as isize)
    };
    let lo = lo.min(hi);
    lo as usize..hi as usize
}

/// Advances a row-major multi-index within `dims`.
fn step(idx: &mut [usize], dims: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < dims[d] {
            return;
        }
        idx[d] = 0;
    }
}
