//! RoiAlign launcher.

use crate::cpu::roi_align::RoiAlignParams;
use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::{KernelSource, Template};

/// The RoiAlign kernel file.
pub(crate) const WGSL: &str = include_str!("roi_align.wgsl");

fn kernel(dtype: DType, max: bool, half_pixel: bool) -> GpuResult<KernelSource> {
    Template::new("roi_align", WGSL)
        .alias("T", dtype.wgsl())
        .constant("MAX_MODE", max)
        .constant("HALF_PIXEL", half_pixel)
        .build()
}

/// ONNX RoiAlign: `x` `[N, C, H, W]`, `rois` `[R, 4]`, `batch` `[R]` → `[R, C, oh, ow]`.
pub(crate) fn roi_align(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    rois: &DTensor,
    batch: &DTensor,
    p: RoiAlignParams,
) -> GpuResult<DTensor> {
    let (&[n, c, h, w], &[r, 4]) = (x.shape.as_slice(), rois.shape.as_slice()) else {
        return Err(GpuError::invalid(format!(
            "RoiAlign '{name}': x {:?} must be [N, C, H, W] and rois {:?} [R, 4]",
            x.shape, rois.shape
        )));
    };
    if batch.dtype != DType::I32 || batch.numel() != r || rois.dtype != x.dtype {
        return Err(GpuError::invalid(format!(
            "RoiAlign '{name}': batch_indices must be integers, one per roi, and rois of x's type"
        )));
    }
    let out = [r, c, p.output_height, p.output_width];
    let y = b.temp(name, x.dtype, &out)?;
    let total = y.numel();
    let params = Params::new()
        .u4([total as u32, c as u32, h as u32, w as u32])
        .u4([
            p.output_height as u32,
            p.output_width as u32,
            p.sampling_ratio as u32,
            n as u32,
        ])
        .floats(&[p.spatial_scale]);
    b.dispatch(
        &kernel(x.dtype, p.max, p.half_pixel)?,
        params,
        &[Bind::R(x), Bind::R(rois), Bind::R(batch), Bind::W(&y)],
        grid_1d(total, WG),
    )?;
    Ok(y)
}

/// Representative specialisations, for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    Ok(vec![
        kernel(DType::F32, false, true)?,
        kernel(DType::F16, true, false)?,
    ])
}
