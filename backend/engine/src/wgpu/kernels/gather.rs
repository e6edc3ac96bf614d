//! Gather, GatherElements and Pad launchers.

use crate::wgpu::dtype::DType;
use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::kernels::copy::strides;
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::{KernelSource, Template};

/// The gather kernel file.
pub(crate) const WGSL: &str = include_str!("gather.wgsl");
/// The pad kernel file.
pub(crate) const WGSL_PAD: &str = include_str!("pad.wgsl");

fn kernel(dtype: DType, elements: bool) -> GpuResult<KernelSource> {
    Template::new("gather", WGSL)
        .alias("T", dtype.wgsl())
        .constant("ELEMENTS", elements)
        .build()
}

fn check_indices(name: &str, idx: &DTensor) -> GpuResult<()> {
    if idx.dtype != DType::I32 {
        return Err(GpuError::invalid(format!("'{name}': indices must be integers")));
    }
    Ok(())
}

/// numpy `take(data, indices, axis)`.
pub(crate) fn gather(
    b: &mut PlanBuilder,
    name: &str,
    data: &DTensor,
    idx: &DTensor,
    axis: usize,
) -> GpuResult<DTensor> {
    check_indices(name, idx)?;
    let mut out = data.shape[..axis].to_vec();
    out.extend_from_slice(&idx.shape);
    out.extend_from_slice(&data.shape[axis + 1..]);
    let inner: usize = data.shape[axis + 1..].iter().product();
    let y = b.temp(name, data.dtype, &out)?;
    let n = y.numel();
    let params = Params::new()
        .u4([
            n as u32,
            inner as u32,
            idx.numel() as u32,
            data.shape[axis] as u32,
        ])
        .dims8(&[])
        .dims8(&[]);
    b.dispatch(
        &kernel(data.dtype, false)?,
        params,
        &[Bind::R(data), Bind::R(idx), Bind::W(&y)],
        grid_1d(n, WG),
    )?;
    Ok(y)
}

/// ONNX GatherElements.
pub(crate) fn gather_elements(
    b: &mut PlanBuilder,
    name: &str,
    data: &DTensor,
    idx: &DTensor,
    axis: usize,
) -> GpuResult<DTensor> {
    check_indices(name, idx)?;
    if idx.rank() != data.rank() || data.rank() > 8 {
        return Err(GpuError::invalid(format!(
            "GatherElements '{name}': data {:?} and indices {:?} must have one rank (<= 8)",
            data.shape, idx.shape
        )));
    }
    let y = b.temp(name, data.dtype, &idx.shape)?;
    let n = y.numel();
    let dims: Vec<u32> = idx.shape.iter().map(|&d| d as u32).collect();
    let st: Vec<u32> = strides(&data.shape).iter().map(|&d| d as u32).collect();
    let params = Params::new()
        .u4([n as u32, data.rank() as u32, axis as u32, data.shape[axis] as u32])
        .dims8(&dims)
        .dims8(&st);
    b.dispatch(
        &kernel(data.dtype, true)?,
        params,
        &[Bind::R(data), Bind::R(idx), Bind::W(&y)],
        grid_1d(n, WG),
    )?;
    Ok(y)
}

/// Pad modes, as the kernel numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PadKind {
    Constant = 0,
    Reflect = 1,
    Edge = 2,
    Wrap = 3,
}

/// Pad with `pads` `[begin.., end..]` over every dim (negative crops).
pub(crate) fn pad(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    pads: &[i64],
    mode: PadKind,
    value: f64,
) -> GpuResult<DTensor> {
    let r = x.rank();
    if pads.len() != 2 * r || r > 8 {
        return Err(GpuError::invalid(format!(
            "Pad '{name}': pads {pads:?} for shape {:?}",
            x.shape
        )));
    }
    let mut out = Vec::with_capacity(r);
    for d in 0..r {
        let o = x.shape[d] as i64 + pads[d] + pads[d + r];
        if o < 0 {
            return Err(GpuError::invalid(format!(
                "Pad '{name}': pads {pads:?} crop below zero"
            )));
        }
        out.push(o as usize);
    }
    if mode != PadKind::Constant && x.numel() == 0 && out.iter().product::<usize>() > 0 {
        return Err(GpuError::invalid(format!(
            "Pad '{name}': {mode:?} padding of an empty tensor"
        )));
    }
    let y = b.temp(name, x.dtype, &out)?;
    let n = y.numel();
    let bits = (value as f32).to_bits();
    let od: Vec<u32> = out.iter().map(|&d| d as u32).collect();
    let id: Vec<u32> = x.shape.iter().map(|&d| d as u32).collect();
    let mut begin = [0i32; 8];
    for d in 0..r {
        begin[d] = pads[d] as i32;
    }
    let params = Params::new()
        .u4([n as u32, r as u32, 0, 0])
        .dims8(&od)
        .dims8(&id)
        .i4([begin[0], begin[1], begin[2], begin[3]])
        .i4([begin[4], begin[5], begin[6], begin[7]])
        .u4([bits, 0, 0, 0]);
    let k = Template::new("pad", WGSL_PAD)
        .alias("T", x.dtype.wgsl())
        .constant("MODE", format!("{}u", mode as u32))
        .build()?;
    b.dispatch(&k, params, &[Bind::R(x), Bind::W(&y)], grid_1d(n, WG))?;
    Ok(y)
}

/// Representative specialisations for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    let mut v = vec![kernel(DType::F16, true)?, kernel(DType::I32, false)?];
    for m in 0..4 {
        v.push(
            Template::new("pad", WGSL_PAD)
                .alias("T", "f16")
                .constant("MODE", format!("{m}u"))
                .build()?,
        );
    }
    Ok(v)
}
