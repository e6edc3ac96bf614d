//! Data movement through one strided-copy kernel: Transpose, Slice, Expand, Tile, Concat, Split,
//! DepthToSpace. Reshape-like ops are aliases (no dispatch) and never reach this file.

use crate::wgpu::error::{GpuError, GpuResult};
use crate::wgpu::plan::{Bind, DTensor, Params, PlanBuilder, WG, grid_1d};
use crate::wgpu::template::{KernelSource, Template};

/// The kernel file.
pub(crate) const WGSL: &str = include_str!("copy.wgsl");

fn kernel(t: &DTensor) -> GpuResult<KernelSource> {
    Template::new("copy", WGSL).alias("T", t.dtype.wgsl()).build()
}

/// Row-major element strides of `shape`.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// One strided copy from `x` into `y` (which this dispatch writes, maybe partly).
#[allow(clippy::too_many_arguments)]
fn copy(
    b: &mut PlanBuilder,
    x: &DTensor,
    y: &DTensor,
    dims: &[usize],
    in_base: i64,
    in_strides: &[i64],
    in_mods: Option<&[usize]>,
    out_base: usize,
    out_strides: &[usize],
) -> GpuResult<()> {
    if dims.len() > 8 {
        return Err(GpuError::unsupported(format!(
            "'{}': rank {} data movement (the wgpu executor handles up to 8 dims)",
            b.name_of(y),
            dims.len()
        )));
    }
    let n: usize = dims.iter().product();
    let d32: Vec<u32> = dims.iter().map(|&d| d as u32).collect();
    let mut ins = [0i32; 8];
    for (k, &s) in in_strides.iter().enumerate() {
        ins[k] = s as i32;
    }
    let mods: Vec<u32> = match in_mods {
        Some(m) => m.iter().map(|&v| v as u32).collect(),
        None => d32.clone(),
    };
    let outs: Vec<u32> = out_strides.iter().map(|&s| s as u32).collect();
    let params = Params::new()
        .u4([
            n as u32,
            dims.len() as u32,
            in_base as i32 as u32,
            out_base as u32,
        ])
        .dims8(&d32)
        .i4([ins[0], ins[1], ins[2], ins[3]])
        .i4([ins[4], ins[5], ins[6], ins[7]])
        .dims8(&mods)
        .dims8(&outs);
    let k = kernel(x)?;
    b.dispatch(&k, params, &[Bind::R(x), Bind::W(y)], grid_1d(n, WG))
}

/// `y = transpose(x, perm)` (y.shape[i] = x.shape[perm[i]]).
pub(crate) fn transpose(b: &mut PlanBuilder, name: &str, x: &DTensor, perm: &[usize]) -> GpuResult<DTensor> {
    if perm.len() != x.rank() {
        return Err(GpuError::invalid(format!(
            "transpose '{name}': perm {perm:?} for shape {:?}",
            x.shape
        )));
    }
    let xs = strides(&x.shape);
    let out: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let in_strides: Vec<i64> = perm.iter().map(|&p| xs[p] as i64).collect();
    let y = b.temp(name, x.dtype, &out)?;
    copy(b, x, &y, &out, 0, &in_strides, None, 0, &strides(&out))?;
    Ok(y)
}

/// `y = x[starts[d] :: steps[d]]` with `out` elements per dim (concrete Slice).
pub(crate) fn slice(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    starts: &[i64],
    steps: &[i64],
    out: &[usize],
) -> GpuResult<DTensor> {
    let xs = strides(&x.shape);
    let base: i64 = starts.iter().zip(&xs).map(|(s, st)| s * *st as i64).sum();
    let in_strides: Vec<i64> = steps.iter().zip(&xs).map(|(s, st)| s * *st as i64).collect();
    let y = b.temp(name, x.dtype, out)?;
    copy(b, x, &y, out, base, &in_strides, None, 0, &strides(out))?;
    Ok(y)
}

/// Broadcast strides of `x` against `out` (0 where broadcast), right-aligned.
fn broadcast_strides(x: &[usize], out: &[usize]) -> GpuResult<Vec<i64>> {
    if x.len() > out.len() {
        return Err(GpuError::invalid(format!("cannot expand {x:?} to {out:?}")));
    }
    let xs = strides(x);
    let off = out.len() - x.len();
    let mut s = vec![0i64; out.len()];
    for d in 0..x.len() {
        if x[d] == out[d + off] {
            s[d + off] = xs[d] as i64;
        } else if x[d] != 1 {
            return Err(GpuError::invalid(format!("cannot expand {x:?} to {out:?}")));
        }
    }
    Ok(s)
}

/// `y = expand(x)` to `out`.
pub(crate) fn expand(b: &mut PlanBuilder, name: &str, x: &DTensor, out: &[usize]) -> GpuResult<DTensor> {
    let s = broadcast_strides(&x.shape, out)?;
    let y = b.temp(name, x.dtype, out)?;
    copy(b, x, &y, out, 0, &s, None, 0, &strides(out))?;
    Ok(y)
}

/// `y = tile(x, repeats)`.
pub(crate) fn tile(b: &mut PlanBuilder, name: &str, x: &DTensor, repeats: &[usize]) -> GpuResult<DTensor> {
    let out: Vec<usize> = x.shape.iter().zip(repeats).map(|(d, r)| d * r).collect();
    let s: Vec<i64> = strides(&x.shape).iter().map(|&v| v as i64).collect();
    let y = b.temp(name, x.dtype, &out)?;
    copy(b, x, &y, &out, 0, &s, Some(&x.shape), 0, &strides(&out))?;
    Ok(y)
}

/// `y = concat(xs, axis)`: one dispatch per non-empty input, each writing its slab of y.
pub(crate) fn concat(
    b: &mut PlanBuilder,
    name: &str,
    xs: &[&DTensor],
    axis: usize,
    out: &[usize],
) -> GpuResult<DTensor> {
    let dtype = xs
        .first()
        .map(|x| x.dtype)
        .ok_or_else(|| GpuError::invalid(format!("concat '{name}' has no inputs")))?;
    let y = b.temp(name, dtype, out)?;
    let os = strides(out);
    let mut offset = 0usize;
    for x in xs {
        if x.numel() > 0 {
            let s: Vec<i64> = strides(&x.shape).iter().map(|&v| v as i64).collect();
            copy(b, x, &y, &x.shape, 0, &s, None, offset * os[axis], &os)?;
        }
        offset += x.shape[axis];
    }
    Ok(y)
}

/// `ys = split(x, axis, sizes)`.
pub(crate) fn split(
    b: &mut PlanBuilder,
    names: &[String],
    x: &DTensor,
    axis: usize,
    sizes: &[usize],
) -> GpuResult<Vec<DTensor>> {
    let mut start = 0i64;
    let mut outs = Vec::with_capacity(sizes.len());
    for (name, &size) in names.iter().zip(sizes) {
        let mut starts = vec![0i64; x.rank()];
        starts[axis] = start;
        let steps = vec![1i64; x.rank()];
        let mut shape = x.shape.clone();
        shape[axis] = size;
        outs.push(slice(b, name, x, &starts, &steps, &shape)?);
        start += size as i64;
    }
    Ok(outs)
}

/// `y = depth_to_space(x, blocksize)` in DCR or CRD mode (a 6-D transpose between two reshapes).
pub(crate) fn depth_to_space(
    b: &mut PlanBuilder,
    name: &str,
    x: &DTensor,
    bs: usize,
    crd: bool,
) -> GpuResult<DTensor> {
    let [n, c, h, w] = <[usize; 4]>::try_from(x.shape.as_slice()).map_err(|_| {
        GpuError::invalid(format!(
            "DepthToSpace '{name}' needs a 4-D input, got {:?}",
            x.shape
        ))
    })?;
    let oc = c / (bs * bs);
    let (view, perm) = if crd {
        ([n, oc, bs, bs, h, w], [0, 1, 4, 2, 5, 3])
    } else {
        ([n, bs, bs, oc, h, w], [0, 3, 4, 1, 5, 2])
    };
    let v = b.alias(x, &view)?;
    let t = transpose(b, name, &v, &perm)?;
    b.alias(&t, &[n, oc, h * bs, w * bs])
}

/// Representative specialisations for the naga test.
#[cfg(test)]
pub(crate) fn variants() -> GpuResult<Vec<KernelSource>> {
    ["f16", "i32"]
        .iter()
        .map(|t| Template::new("copy", WGSL).alias("T", t).build())
        .collect()
}
