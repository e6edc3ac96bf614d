//! ScatterElements and ScatterND launchers.

use crate::ir::ScatterReduction;
use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::{KernelSource, Template};

/// The ScatterElements kernel file.
pub(crate) const WGSL: &str = include_str!("scatter.wgsl");
/// The ScatterND kernel file.
pub(crate) const WGSL_ND: &str = include_str!("scatter_nd.wgsl");

/// The ScatterElements kernel (`nd` false) or the ScatterND one, for `dtype` and `reduction`.
fn kernel(nd: bool, dtype: DType, reduction: ScatterReduction) -> GpuResult<KernelSource> {
    let r = match reduction {
        ScatterReduction::None => 0,
        ScatterReduction::Add => 1,
        ScatterReduction::Mul => 2,
        ScatterReduction::Max => 3,
        ScatterReduction::Min => 4,
    };
    let (name, wgsl) = if nd {
        ("scatter_nd", WGSL_ND)
    } else {
        ("scatter", WGSL)
    };
    Template::new(name, wgsl)
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
        &kernel(false, data.dtype, reduction)?,
        params,
        &[Bind::R(data), Bind::R(idx), Bind::R(updates), Bind::W(&y)],
        grid_1d(n, WG),
    )?;
    Ok(y)
}

/// ONNX ScatterND: `data` with the slices that the index tuples of `idx` (shape `[..., k]`, integers)
/// address replaced by, or combined with, the slices of `updates` (shape `idx.shape[..-1]` then data's
/// dims after the first `k`), in tuple order.
pub(crate) fn scatter_nd(
    b: &mut PlanBuilder,
    name: &str,
    data: &DTensor,
    idx: &DTensor,
    updates: &DTensor,
    reduction: ScatterReduction,
) -> GpuResult<DTensor> {
    if idx.dtype != DType::I32 {
        return Err(GpuError::invalid(format!("'{name}': indices must be integers")));
    }
    let Some((&k, lead)) = idx
        .shape
        .split_last()
        .filter(|&(&k, _)| (1..=data.rank()).contains(&k))
    else {
        return Err(GpuError::invalid(format!(
            "ScatterND '{name}': indices {:?} must end in a tuple length of 1 to data {:?}'s rank",
            idx.shape, data.shape
        )));
    };
    if k > 8 {
        return Err(GpuError::unsupported(format!(
            "ScatterND '{name}' with index tuples of {k} coordinates (the wgpu kernel takes up to 8); serve \
             this model with a KIND_CPU instance group"
        )));
    }
    if updates.shape[..] != [lead, &data.shape[k..]].concat()[..] {
        return Err(GpuError::invalid(format!(
            "ScatterND '{name}': updates {:?} must be indices {:?}'s leading dims then data {:?}'s dims after \
             the tuple",
            updates.shape, idx.shape, data.shape
        )));
    }
    let tuples: usize = lead.iter().product();
    if reduction != ScatterReduction::None && data.dtype == DType::Bool {
        return Err(GpuError::invalid(format!(
            "ScatterND '{name}': a reduction over BOOL data"
        )));
    }
    let y = b.temp(name, data.dtype, &data.shape)?;
    let n = y.numel();
    let slice: usize = data.shape[k..].iter().product();
    let dims: Vec<u32> = data.shape[..k].iter().map(|&d| d as u32).collect();
    let params = Params::new()
        .u4([n as u32, k as u32, tuples as u32, slice as u32])
        .dims8(&dims);
    b.dispatch(
        &kernel(true, data.dtype, reduction)?,
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
        kernel(false, DType::F32, ScatterReduction::None)?,
        kernel(false, DType::I32, ScatterReduction::Add)?,
        kernel(false, DType::F16, ScatterReduction::Max)?,
        kernel(true, DType::F32, ScatterReduction::Mul)?,
        kernel(true, DType::I32, ScatterReduction::Min)?,
        kernel(true, DType::F16, ScatterReduction::Add)?,
    ])
}
