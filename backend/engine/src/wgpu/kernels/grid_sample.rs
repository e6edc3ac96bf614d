//! GridSample launcher.

use crate::cpu::grid_sample::GridSampleParams;
use crate::ir::{GridMode, GridPadding};
use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::{KernelSource, Template};

/// The GridSample kernel file.
pub(crate) const WGSL: &str = include_str!("grid_sample.wgsl");

/// The kernel for `dtype` with the mode, padding and corner alignment as pipeline constants (each
/// part of the compiled pipeline, so part of its key).
fn kernel(dtype: DType, p: GridSampleParams) -> GpuResult<KernelSource> {
    let mode = match p.mode {
        GridMode::Linear => 0u32,
        GridMode::Nearest => 1,
        GridMode::Cubic => 2,
    };
    let padding = match p.padding {
        GridPadding::Zeros => 0u32,
        GridPadding::Border => 1,
        GridPadding::Reflection => 2,
    };
    Template::new("grid_sample", WGSL)
        .alias("T", dtype.wgsl())
        .constant("MODE", format!("{mode}u"))
        .constant("PADDING", format!("{padding}u"))
        .constant("ALIGN_CORNERS", p.align_corners)
        .build()
}

/// ONNX GridSample: `x` `[N, C, H, W]`, `grid` `[N, Ho, Wo, 2]` → `[N, C, Ho, Wo]`.
pub(crate) fn grid_sample(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    grid: &DTensor,
    p: GridSampleParams,
) -> GpuResult<DTensor> {
    let (&[n, c, h, w], &[gn, ho, wo, 2]) = (x.shape.as_slice(), grid.shape.as_slice()) else {
        return Err(GpuError::invalid(format!(
            "GridSample '{name}': x {:?} must be [N, C, H, W] and grid {:?} [N, Ho, Wo, 2]",
            x.shape, grid.shape
        )));
    };
    if gn != n || grid.dtype != x.dtype {
        return Err(GpuError::invalid(format!(
            "GridSample '{name}': grid must have x's batch and type"
        )));
    }
    let y = b.temp(name, x.dtype, &[n, c, ho, wo])?;
    let total = y.numel();
    let params = Params::new()
        .u4([total as u32, c as u32, h as u32, w as u32])
        .u4([ho as u32, wo as u32, 0, 0]);
    b.dispatch(
        &kernel(x.dtype, p)?,
        params,
        &[Bind::R(x), Bind::R(grid), Bind::W(&y)],
        grid_1d(total, WG),
    )?;
    Ok(y)
}

/// Representative specialisations, for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let mut v = Vec::new();
    for (mode, padding) in [
        (GridMode::Linear, GridPadding::Zeros),
        (GridMode::Nearest, GridPadding::Border),
        (GridMode::Cubic, GridPadding::Reflection),
    ] {
        let p = GridSampleParams {
            mode,
            padding,
            align_corners: padding == GridPadding::Border,
        };
        v.push(kernel(DType::F32, p)?);
        v.push(kernel(DType::F16, p)?);
    }
    Ok(v)
}
