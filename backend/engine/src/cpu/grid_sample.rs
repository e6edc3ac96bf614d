//! ONNX GridSample over f32 `[N, C, H, W]` inputs, computed as onnxruntime does
//! (`grid_sample.cc`): denormalise, round (nearest), fold an out-of-range position back (border:
//! clamp, reflection: mirror), then read the neighbours through the padding rule.

use crate::ir::{GridMode, GridPadding};

/// The attributes of one GridSample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GridSampleParams {
    /// interpolation
    pub(crate) mode: GridMode,
    /// what a sample outside the input reads
    pub(crate) padding: GridPadding,
    /// −1 and 1 are the centres of the corner pixels
    pub(crate) align_corners: bool,
}

/// Cubic convolution's A (onnxruntime's and PyTorch's).
const CUBIC_A: f32 = -0.75;

/// `x` is `[n, c, h, w]`, `grid` `[n, ho, wo, 2]`; returns `[n, c, ho, wo]`.
pub(crate) fn grid_sample(
    x: &[f32],
    [n, c, h, w]: [usize; 4],
    grid: &[f32],
    [ho, wo]: [usize; 2],
    p: GridSampleParams,
) -> Vec<f32> {
    let plane = h * w;
    let mut y = vec![0.0f32; n * c * ho * wo];
    let bounds = Bounds::new(h, w, p.align_corners);
    for b in 0..n {
        for oy in 0..ho {
            for ox in 0..wo {
                let g = ((b * ho + oy) * wo + ox) * 2;
                let (gx, gy) = (grid[g], grid[g + 1]);
                for ch in 0..c {
                    let img = &x[(b * c + ch) * plane..(b * c + ch + 1) * plane];
                    y[((b * c + ch) * ho + oy) * wo + ox] = sample(img, h, w, gx, gy, &bounds, p);
                }
            }
        }
    }
    y
}

/// The range a position may take before padding applies: `[x_min, x_max] × [y_min, y_max]`.
struct Bounds {
    x_min: f32,
    x_max: f32,
    y_min: f32,
    y_max: f32,
}

impl Bounds {
    fn new(h: usize, w: usize, align_corners: bool) -> Self {
        if align_corners {
            Bounds {
                x_min: 0.0,
                x_max: w as f32 - 1.0,
                y_min: 0.0,
                y_max: h as f32 - 1.0,
            }
        } else {
            Bounds {
                x_min: -0.5,
                x_max: w as f32 - 0.5,
                y_min: -0.5,
                y_max: h as f32 - 0.5,
            }
        }
    }
}

/// One output value of one channel plane `img` (`h × w`).
fn sample(img: &[f32], h: usize, w: usize, gx: f32, gy: f32, bd: &Bounds, p: GridSampleParams) -> f32 {
    let mut x = denormalize(gx, w, p.align_corners);
    let mut y = denormalize(gy, h, p.align_corners);
    if p.mode == GridMode::Nearest {
        x = x.round_ties_even();
        y = y.round_ties_even();
    }
    if x < bd.x_min || x > bd.x_max || y < bd.y_min || y > bd.y_max {
        match p.padding {
            GridPadding::Border => {
                x = x.clamp(0.0, w as f32 - 1.0);
                y = y.clamp(0.0, h as f32 - 1.0);
            }
            GridPadding::Reflection => {
                x = reflect(x, bd.x_min, bd.x_max);
                y = reflect(y, bd.y_min, bd.y_max);
            }
            GridPadding::Zeros => {}
        }
    }
    let at = |r: i64, col: i64| pixel(img, h, w, r, col, bd, p.padding);
    match p.mode {
        GridMode::Nearest => at(y as i64, x as i64),
        GridMode::Linear => {
            let (x1, y1) = (x.floor(), y.floor());
            let (x2, y2) = (x1 + 1.0, y1 + 1.0);
            let p11 = at(y1 as i64, x1 as i64);
            let p12 = at(y1 as i64, x2 as i64);
            let p21 = at(y2 as i64, x1 as i64);
            let p22 = at(y2 as i64, x2 as i64);
            let (dx2, dx1, dy2, dy1) = (x2 - x, x - x1, y2 - y, y - y1);
            dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22)
        }
        GridMode::Cubic => {
            let (x0, y0) = (x.floor() - 1.0, y.floor() - 1.0);
            let cx = cubic_coeffs(x - x0 - 1.0);
            let cy = cubic_coeffs(y - y0 - 1.0);
            let mut v = [0.0f32; 4];
            for (i, vi) in v.iter_mut().enumerate() {
                let r = y0 as i64 + i as i64;
                let row = [0, 1, 2, 3].map(|j| at(r, x0 as i64 + j));
                *vi = cx[0] * row[0] + cx[1] * row[1] + cx[2] * row[2] + cx[3] * row[3];
            }
            cy[0] * v[0] + cy[1] * v[1] + cy[2] * v[2] + cy[3] * v[3]
        }
    }
}

/// A normalised coordinate in `[-1, 1]` → a pixel coordinate along an axis of `len` pixels.
fn denormalize(n: f32, len: usize, align_corners: bool) -> f32 {
    let len = len as f32;
    if align_corners {
        (n + 1.0) / 2.0 * (len - 1.0)
    } else {
        ((n + 1.0) * len - 1.0) / 2.0
    }
}

/// `v` mirrored into `[lo, hi]` as many times as it takes.
fn reflect(v: f32, lo: f32, hi: f32) -> f32 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    if v < lo {
        let d = lo - v;
        let k = (d / range) as i64;
        let r = d - k as f32 * range;
        if k % 2 == 0 { lo + r } else { hi - r }
    } else if v > hi {
        let d = v - hi;
        let k = (d / range) as i64;
        let r = d - k as f32 * range;
        if k % 2 == 0 { hi - r } else { lo + r }
    } else {
        v
    }
}

/// The pixel at row `r`, column `col` through the padding rule.
fn pixel(img: &[f32], h: usize, w: usize, r: i64, col: i64, bd: &Bounds, padding: GridPadding) -> f32 {
    let (hi, wi) = (h as i64, w as i64);
    let (r, col) = match padding {
        GridPadding::Zeros => {
            if r < 0 || r >= hi || col < 0 || col >= wi {
                return 0.0;
            }
            (r, col)
        }
        GridPadding::Border => (r.clamp(0, hi - 1), col.clamp(0, wi - 1)),
        GridPadding::Reflection => (
            reflect(r as f32, bd.y_min, bd.y_max) as i64,
            reflect(col as f32, bd.x_min, bd.x_max) as i64,
        ),
    };
    // reflection of an integer stays inside; clamp anyway so an empty or 1-pixel axis cannot index out
    let r = r.clamp(0, (hi - 1).max(0)) as usize;
    let col = col.clamp(0, (wi - 1).max(0)) as usize;
    img.get(r * w + col).copied().unwrap_or(0.0)
}

/// The four cubic convolution weights of a sample `t` ∈ [0, 1) past the second of four pixels.
fn cubic_coeffs(t: f32) -> [f32; 4] {
    let a = CUBIC_A;
    let x = t.abs();
    [
        ((a * (x + 1.0) - 5.0 * a) * (x + 1.0) + 8.0 * a) * (x + 1.0) - 4.0 * a,
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
        ((a + 2.0) * (1.0 - x) - (a + 3.0)) * (1.0 - x) * (1.0 - x) + 1.0,
        ((a * (2.0 - x) - 5.0 * a) * (2.0 - x) + 8.0 * a) * (2.0 - x) - 4.0 * a,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(mode: GridMode, padding: GridPadding, align_corners: bool) -> GridSampleParams {
        GridSampleParams {
            mode,
            padding,
            align_corners,
        }
    }

    /// A grid at the pixel centres reads the input back, in every mode.
    #[test]
    fn an_identity_grid_reads_the_input_back() {
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let (h, w) = (3usize, 4usize);
        let mut grid = Vec::new();
        for r in 0..h {
            for c in 0..w {
                grid.push(2.0 * c as f32 / (w - 1) as f32 - 1.0);
                grid.push(2.0 * r as f32 / (h - 1) as f32 - 1.0);
            }
        }
        for mode in [GridMode::Linear, GridMode::Nearest, GridMode::Cubic] {
            let p = params(mode, GridPadding::Zeros, true);
            let y = grid_sample(&x, [1, 1, h, w], &grid, [h, w], p);
            for (a, b) in y.iter().zip(&x) {
                assert!((a - b).abs() < 1e-5, "{mode:?}: {y:?}");
            }
        }
    }

    /// Outside the input: zeros reads 0, border the edge pixel, reflection the mirrored pixel.
    #[test]
    fn padding_modes_differ_outside_the_input() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        // 1.5 with align_corners on a 4-wide row is column 3.75, rounded to 4: one past the right edge
        let grid = [1.5f32, 0.0];
        let at = |padding| {
            grid_sample(
                &x,
                [1, 1, 1, 4],
                &grid,
                [1, 1],
                params(GridMode::Nearest, padding, true),
            )[0]
        };
        assert_eq!(at(GridPadding::Zeros), 0.0);
        assert_eq!(at(GridPadding::Border), 4.0);
        // column 4 mirrored at the last column (3) is column 2
        assert_eq!(at(GridPadding::Reflection), 3.0);
    }
}
