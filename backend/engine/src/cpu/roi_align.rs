//! ONNX RoiAlign over f32 `[N, C, H, W]` feature maps, computed as onnxruntime does.
//!
//! Each output bin averages (or takes the maximum of) `grid_h × grid_w` samples; a sample is the
//! bilinear interpolation of its four neighbours, clamped to the map, and 0 when it lies more than
//! one pixel outside. In max mode the maximum is over the four *weighted* neighbours of each sample,
//! which is what onnxruntime and the ONNX reference compute.

use crate::error::{EngineError, Result};

/// The attributes of one RoiAlign.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoiAlignParams {
    /// maximum of the weighted samples (else their average)
    pub(crate) max: bool,
    /// output rows per region
    pub(crate) output_height: usize,
    /// output columns per region
    pub(crate) output_width: usize,
    /// samples per bin along each axis (0: adaptive)
    pub(crate) sampling_ratio: usize,
    /// roi coordinates × this = input coordinates
    pub(crate) spatial_scale: f32,
    /// half_pixel coordinates (else output_half_pixel)
    pub(crate) half_pixel: bool,
}

/// One bilinear sample: the four neighbour offsets in a channel plane and their weights.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    pos: [usize; 4],
    w: [f32; 4],
}

/// `x` is `[n, c, h, w]`, `rois` `[r, 4]`, `batch` `[r]`; returns `[r, c, oh, ow]`.
pub(crate) fn roi_align(
    x: &[f32],
    xshape: [usize; 4],
    rois: &[f32],
    batch: &[i64],
    p: RoiAlignParams,
) -> Result<Vec<f32>> {
    let [n, c, h, w] = xshape;
    let (oh, ow) = (p.output_height, p.output_width);
    let plane = h * w;
    let mut y = Vec::with_capacity(batch.len() * c * oh * ow);
    let offset = if p.half_pixel { 0.5 } else { 0.0 };
    for (r, &b) in batch.iter().enumerate() {
        let b = usize::try_from(b).ok().filter(|&b| b < n).ok_or_else(|| {
            EngineError::invalid(format!(
                "RoiAlign batch_indices[{r}] is {b}; the input holds {n} images"
            ))
        })?;
        let roi = &rois[r * 4..r * 4 + 4];
        let start_w = roi[0] * p.spatial_scale - offset;
        let start_h = roi[1] * p.spatial_scale - offset;
        let mut roi_w = roi[2] * p.spatial_scale - offset - start_w;
        let mut roi_h = roi[3] * p.spatial_scale - offset - start_h;
        if !p.half_pixel {
            // output_half_pixel regions are at least one pixel
            roi_w = roi_w.max(1.0);
            roi_h = roi_h.max(1.0);
        }
        let bin_h = roi_h / oh as f32;
        let bin_w = roi_w / ow as f32;
        let grid_h = grid(p.sampling_ratio, roi_h, oh);
        let grid_w = grid(p.sampling_ratio, roi_w, ow);
        let count = (grid_h * grid_w).max(1) as f32;
        // the samples of every bin, shared by the channels
        let mut samples = Vec::with_capacity(oh * ow * grid_h * grid_w);
        for ph in 0..oh {
            for pw in 0..ow {
                for iy in 0..grid_h {
                    let yy = start_h + ph as f32 * bin_h + (iy as f32 + 0.5) * bin_h / grid_h as f32;
                    for ix in 0..grid_w {
                        let xx = start_w + pw as f32 * bin_w + (ix as f32 + 0.5) * bin_w / grid_w as f32;
                        samples.push(bilinear(yy, xx, h, w));
                    }
                }
            }
        }
        let per_bin = grid_h * grid_w;
        for ch in 0..c {
            let data = &x[(b * c + ch) * plane..(b * c + ch + 1) * plane];
            for bin in samples.chunks(per_bin.max(1)).take(oh * ow) {
                let v = if p.max {
                    bin.iter()
                        .map(|s| {
                            (0..4)
                                .map(|k| s.w[k] * data[s.pos[k]])
                                .fold(f32::NEG_INFINITY, f32::max)
                        })
                        .fold(None, |acc: Option<f32>, v| Some(acc.map_or(v, |a| a.max(v))))
                        .unwrap_or(0.0)
                } else {
                    let sum: f32 = bin
                        .iter()
                        .map(|s| (0..4).map(|k| s.w[k] * data[s.pos[k]]).sum::<f32>())
                        .sum();
                    sum / count
                };
                y.push(v);
            }
        }
    }
    Ok(y)
}

/// Samples per bin along one axis: the given ratio, or `ceil(roi_size / bins)`.
fn grid(sampling_ratio: usize, roi_size: f32, bins: usize) -> usize {
    if sampling_ratio > 0 {
        sampling_ratio
    } else {
        (roi_size / bins as f32).ceil().max(0.0) as usize
    }
}

/// The bilinear sample at (`y`, `x`) of an `h × w` plane (all weights 0 when it lies more than a
/// pixel outside).
fn bilinear(y: f32, x: f32, h: usize, w: usize) -> Sample {
    if y < -1.0 || y > h as f32 || x < -1.0 || x > w as f32 || h == 0 || w == 0 {
        return Sample::default();
    }
    let (y, x) = (y.max(0.0), x.max(0.0));
    let (mut y_low, mut x_low) = (y as usize, x as usize);
    let (y_high, x_high);
    let (mut y, mut x) = (y, x);
    if y_low >= h - 1 {
        y_low = h - 1;
        y_high = h - 1;
        y = y_low as f32;
    } else {
        y_high = y_low + 1;
    }
    if x_low >= w - 1 {
        x_low = w - 1;
        x_high = w - 1;
        x = x_low as f32;
    } else {
        x_high = x_low + 1;
    }
    let (ly, lx) = (y - y_low as f32, x - x_low as f32);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Sample {
        pos: [
            y_low * w + x_low,
            y_low * w + x_high,
            y_high * w + x_low,
            y_high * w + x_high,
        ],
        w: [hy * hx, hy * lx, ly * hx, ly * lx],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1 × 1 bin over a whole 2 × 2 map averages the interpolated grid; max mode keeps the
    /// largest weighted neighbour.
    #[test]
    fn a_single_bin_averages_or_maximises_its_samples() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let p = RoiAlignParams {
            max: false,
            output_height: 1,
            output_width: 1,
            sampling_ratio: 1,
            spatial_scale: 1.0,
            half_pixel: false,
        };
        // one sample at the centre (1, 1) of the roi [0, 0, 2, 2]: the bottom-right pixel
        let y = roi_align(&x, [1, 1, 2, 2], &[0.0, 0.0, 2.0, 2.0], &[0], p).unwrap();
        assert_eq!(y, [4.0]);
        // with half_pixel the centre is (0.5, 0.5): the mean of the four
        let y = roi_align(
            &x,
            [1, 1, 2, 2],
            &[0.0, 0.0, 2.0, 2.0],
            &[0],
            RoiAlignParams {
                half_pixel: true,
                ..p
            },
        )
        .unwrap();
        assert_eq!(y, [2.5]);
        let y = roi_align(
            &x,
            [1, 1, 2, 2],
            &[0.0, 0.0, 2.0, 2.0],
            &[0],
            RoiAlignParams {
                half_pixel: true,
                max: true,
                ..p
            },
        )
        .unwrap();
        assert_eq!(y, [1.0]); // 0.25 · 4
        let bad = roi_align(&x, [1, 1, 2, 2], &[0.0; 4], &[1], p).unwrap_err();
        assert!(bad.to_string().contains("batch_indices[0] is 1"), "{bad}");
    }
}
