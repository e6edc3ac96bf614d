//! Padded, stride-phase-split copies of 2-D planes, so that the window taps of consecutive outputs
//! read consecutive values (used by depthwise convolution, max pooling and the im2col blocks).
//!
//! Phase `q` of padded row `r` holds padded columns `j·stride + q` for `j` in `0..pw`, where padded
//! column `c` is input column `c − pad_left` and padded row `r` is input row `r − pad_top`; values
//! outside the input are the pad value. Output `(oy, ox)` and tap `(ky, kx)` then read
//! `row_offset(oy) + ox + tap_offset(ky, kx)`.

/// The layout of one padded plane.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PadPlane {
    ih: usize,
    iw: usize,
    pt: usize,
    pl: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    /// padded rows kept
    rows: usize,
    /// values per phase row
    pw: usize,
}

/// A 2-D window geometry: input, output, kernel, strides, dilations, pads (top, left).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub(crate) ih: usize,
    pub(crate) iw: usize,
    pub(crate) oh: usize,
    pub(crate) ow: usize,
    pub(crate) kh: usize,
    pub(crate) kw: usize,
    pub(crate) sh: usize,
    pub(crate) sw: usize,
    pub(crate) dh: usize,
    pub(crate) dw: usize,
    pub(crate) pt: usize,
    pub(crate) pl: usize,
}

impl Window {
    /// From ONNX-style per-axis slices (2 spatial axes; pads `[top, left, …]`).
    pub(crate) fn new(
        in_sp: &[usize],
        out_sp: &[usize],
        kernel: &[usize],
        strides: &[usize],
        dilations: &[usize],
        pads: &[usize],
    ) -> Window {
        Window {
            ih: in_sp[0],
            iw: in_sp[1],
            oh: out_sp[0],
            ow: out_sp[1],
            kh: kernel[0],
            kw: kernel[1],
            sh: strides[0],
            sw: strides[1],
            dh: dilations[0],
            dw: dilations[1],
            pt: pads[0],
            pl: pads[1],
        }
    }
}

impl PadPlane {
    /// The layout for window `w` (at least one output) where every output row may read `slack`
    /// values past its last output column.
    pub(crate) fn new(w: &Window, slack: usize) -> PadPlane {
        PadPlane {
            ih: w.ih,
            iw: w.iw,
            pt: w.pt,
            pl: w.pl,
            sh: w.sh,
            sw: w.sw,
            dh: w.dh,
            dw: w.dw,
            rows: (w.oh.max(1) - 1) * w.sh + (w.kh.max(1) - 1) * w.dh + 1,
            pw: w.ow + (w.kw.max(1) - 1) * w.dw / w.sw + slack,
        }
    }

    /// Values of one padded plane.
    pub(crate) fn len(&self) -> usize {
        self.rows * self.sw * self.pw
    }

    /// Offset of output row `oy`'s first value.
    #[inline(always)]
    pub(crate) fn row_offset(&self, oy: usize) -> usize {
        oy * self.sh * self.sw * self.pw
    }

    /// Offset of tap `(ky, kx)` from the value its output reads first.
    #[inline(always)]
    pub(crate) fn tap_offset(&self, ky: usize, kx: usize) -> usize {
        let off = kx * self.dw;
        (ky * self.dh * self.sw + off % self.sw) * self.pw + off / self.sw
    }

    /// Write the padded copy of `src` (an ih × iw plane) into `dst` (`len()` values). With
    /// `fresh == false`, `dst` already holds a copy made with the same layout and pad value, so
    /// only the values taken from the input are written.
    #[inline(always)]
    pub(crate) fn fill<T: Copy>(&self, src: &[T], pad: T, fresh: bool, dst: &mut [T]) {
        if fresh {
            dst.fill(pad);
        }
        let (sw, pw) = (self.sw, self.pw);
        // each phase's columns taken from the input, and the input column of the first: the same
        // for every row (computed once: they take divisions, and a plane has a hundred rows)
        let phases: Vec<(usize, usize, usize)> = (0..sw)
            .map(|q| {
                let (lo, hi) = valid_range(sw, q, self.pl, self.iw, pw);
                (lo, hi, (lo * sw + q).saturating_sub(self.pl))
            })
            .collect();
        for r in 0..self.rows {
            let Some(iy) = r.checked_sub(self.pt).filter(|&iy| iy < self.ih) else {
                continue;
            };
            let srow = &src[iy * self.iw..(iy + 1) * self.iw];
            for (q, &(lo, hi, first)) in phases.iter().enumerate() {
                let drow = &mut dst[(r * sw + q) * pw..(r * sw + q + 1) * pw];
                strided_copy(&mut drow[lo..hi], srow, sw, first);
            }
        }
    }
}

/// `dst[j] = src[first + j·step]` for every `j` of `dst`.
#[inline(always)]
pub(crate) fn strided_copy<T: Copy>(dst: &mut [T], src: &[T], step: usize, first: usize) {
    if dst.is_empty() {
        return;
    }
    if step == 1 {
        dst.copy_from_slice(&src[first..first + dst.len()]);
    } else if step == 2 {
        // pairs, so that the loop vectorises with shuffles; at most one value has no pair
        let pairs = ((src.len() - first) / 2).min(dst.len());
        for (d, p) in dst[..pairs].iter_mut().zip(src[first..].chunks_exact(2)) {
            *d = p[0];
        }
        if let Some(d) = dst.get_mut(pairs) {
            *d = src[first + 2 * pairs];
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src[first..].iter().step_by(step)) {
            *d = *s;
        }
    }
}

/// Columns `lo..hi` of a phase row whose column `j` is input column `j·step + q − pad` inside
/// `0..len`, clipped to `0..width`.
pub(crate) fn valid_range(step: usize, q: usize, pad: usize, len: usize, width: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(q).div_ceil(step).min(width);
    let hi = (pad + len).saturating_sub(q).div_ceil(step).clamp(lo, width);
    (lo, hi)
}

/// `dst = src`, 16 values at a time (short copies without a call to memcpy).
#[inline(always)]
pub(crate) fn copy_row(dst: &mut [f32], src: &[f32]) {
    let mut d = dst.chunks_exact_mut(16);
    let mut s = src.chunks_exact(16);
    for (d, s) in (&mut d).zip(&mut s) {
        let v: [f32; 16] = std::array::from_fn(|i| s[i]);
        d.copy_from_slice(&v);
    }
    let (d, s) = (d.into_remainder(), s.remainder());
    let mut at = 0;
    if d.len() >= 8 && s.len() >= 8 {
        let v: [f32; 8] = std::array::from_fn(|i| s[i]);
        d[..8].copy_from_slice(&v);
        at = 8;
    }
    for (d, s) in d[at..].iter_mut().zip(&s[at..]) {
        *d = *s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value of the padded copy is the one the layout defines (module docs): the input's value
    /// at (r − pt, j·stride + q − pl), or the pad; strides 1–3, even and odd pads, pads wider than
    /// the kernel, and rows and columns the windows never read.
    #[test]
    fn padded_planes_hold_the_defined_values() {
        // (input, output, kernel, strides, pads (top, left))
        let cases = [
            ([9, 12], [5, 6], [3, 3], [2, 2], [1, 1]),
            ([9, 13], [5, 7], [3, 3], [2, 2], [1, 1]),
            ([8, 11], [4, 4], [5, 5], [2, 2], [2, 2]),
            ([7, 7], [3, 3], [1, 1], [2, 2], [0, 0]),
            ([6, 10], [7, 9], [3, 3], [2, 2], [5, 6]),
            ([7, 9], [7, 9], [3, 3], [1, 1], [1, 1]),
            ([10, 14], [4, 5], [3, 3], [3, 3], [1, 2]),
        ];
        for (input, output, kernel, strides, pads) in cases {
            let w = Window::new(&input, &output, &kernel, &strides, &[1, 1], &pads);
            let pp = PadPlane::new(&w, 3);
            let src: Vec<f32> = (0..input[0] * input[1]).map(|v| v as f32 + 1.0).collect();
            for fresh in [true, false] {
                let mut dst = vec![-1.0; pp.len()];
                pp.fill(&src, 0.0, true, &mut dst);
                if !fresh {
                    // a second plane into the same scratch writes the input's values only
                    let twice: Vec<f32> = src.iter().map(|v| v * 2.0).collect();
                    pp.fill(&twice, 0.0, false, &mut dst);
                }
                let scale = if fresh { 1.0 } else { 2.0 };
                for r in 0..pp.rows {
                    for q in 0..pp.sw {
                        for j in 0..pp.pw {
                            let (iy, ix) = (
                                r as isize - pp.pt as isize,
                                (j * pp.sw + q) as isize - pp.pl as isize,
                            );
                            let inside =
                                (0..input[0] as isize).contains(&iy) && (0..input[1] as isize).contains(&ix);
                            let want = if inside {
                                src[iy as usize * input[1] + ix as usize] * scale
                            } else {
                                0.0
                            };
                            let got = dst[(r * pp.sw + q) * pp.pw + j];
                            assert_eq!(
                                got, want,
                                "{input:?} {kernel:?} {strides:?} {pads:?} row {r} phase {q} column {j}"
                            );
                        }
                    }
                }
            }
        }
    }
}
