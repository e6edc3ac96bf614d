//! ScatterElements launcher.

use crate::ir::ScatterReduction;
use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::{KernelSource, Template};

/// The scatter kernel file.
pub(crate) const WGSL: &str = include_str!("scatter.wgsl");

fn kernel(dtype: DType, reduction: ScatterReduction) -> GpuResult<KernelSource> {
    let r = match reduction {
        ScatterReduction::None => 0,
        ScatterReduction::Add => 1,
        ScatterReduction::Mul => 2,
        ScatterReduction::Max => 3,
        ScatterReduction::Min => 4,
    };
    Template::new("scatter", WGSL)
        .alias("T", dtype.wgsl())
        .constant("REDUCTION", format!("{r}u"))
        .build()
}

/// ONNX ScatterElements: `data` with `updates` written (or combined) where `idx` points along `axis`.
pub(crate) fn scatter_elements(
    b: &mut PlanBuilder,
    name: &str,
    data: &DTensor,
    idx: &DTensor,
    updates: &DTensor,
    axis: usize,
    reduction: ScatterReduction,
) -> GpuResult<DTensor> {
    if idx.dtype != DType::I32 {
        return Err(GpuError::invalid(format!("'{name}': indices must be integers")));
    }
    if idx.rank() != data.rank() || data.rank() > 8 || updates.shape != idx.shape || axis >= data.rank() {
        return Err(GpuError::invalid(format!(
            "ScatterElements '{name}': data {:?}, indices {:?} and updates {:?} must have one rank (<= 8), \
             indices and updates one shape",
            data.shape, idx.shape, updates.shape
        )));
    }
    if reduction != ScatterReduction::None && data.dtype == DType::Bool {
        return Err(GpuError::invalid(format!(
            "ScatterElements '{name}': a reduction over BOOL data"
        )));
    }
    let y = b.temp(name, data.dtype, &data.shape)?;
    let n = y.numel();
    let dims: Vec<u32> = data.shape.iter().map(|&d| d as u32).collect();
    let idims: Vec<u32> = idx.shape.iter().map(|&d| d as u32).collect();
    let params = Params::new()
        .u4([n as u32, data.rank() as u32, axis as u32, data.shape[axis] as u32])
        .dims8(&dims)
        .dims8(&idims);
    b.dispatch(
        &kernel(data.dtype, reduction)?,
        params,
        &[Bind::R(data), Bind::R(idx), Bind::R(updates), Bind::W(&y)],
        grid_1d(n, WG),
    )?;
    Ok(y)
}

/// Representative specialisations, for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    Ok(vec![
        kernel(DType::F32, ScatterReduction::None)?,
        kernel(DType::I32, ScatterReduction::Add)?,
        kernel(DType::F16, ScatterReduction::Max)?,
    ])
}
