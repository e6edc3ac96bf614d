//! GridSample (opsets 16 and 20+): samples an image at the positions of a grid of normalised
//! coordinates — spatial transformer networks, optical-flow warps, deformable detectors.
//!
//! 4-D inputs only (`[N, C, H, W]` and a `[N, Ho, Wo, 2]` grid); opset 20's volumetric (5-D) form is
//! refused naming the rank. Opset 16 names the modes bilinear/nearest/bicubic and opset 20
//! linear/nearest/cubic; both spellings are accepted. The CPU kernel (`cpu/grid_sample.rs`) follows
//! onnxruntime's `grid_sample.cc`; the wgpu kernel (`wgpu/kernels/grid_sample.wgsl`) computes each
//! output element the same way.

use super::prelude::*;
use crate::cpu::grid_sample::{GridSampleParams, grid_sample};
use crate::ir::{GridMode, GridPadding};
use crate::wgpu::kernels;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("GridSample", 16, convert, &FAMILY)];

/// The IR ops of this module: GridSample.
pub(super) static FAMILY: Family = Family {
    name: "grid_sample",
    plan_time: false,
    value_dependent_shapes: false,
    param_input: no_params,
    resolve,
    cpu,
    wgpu,
};

fn convert(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    if n.op_type != "GridSample" {
        return Err(not_registered(&n.op_type));
    }
    let mode = match a.string("mode", "linear")?.as_str() {
        "linear" | "bilinear" => GridMode::Linear,
        "nearest" => GridMode::Nearest,
        "cubic" | "bicubic" => GridMode::Cubic,
        other => {
            return Err(EngineError::invalid(format!(
                "GridSample attribute mode='{other}' (supported: linear/bilinear, nearest, cubic/bicubic)"
            )));
        }
    };
    let padding = match a.string("padding_mode", "zeros")?.as_str() {
        "zeros" => GridPadding::Zeros,
        "border" => GridPadding::Border,
        "reflection" => GridPadding::Reflection,
        other => {
            return Err(EngineError::invalid(format!(
                "GridSample attribute padding_mode='{other}' (supported: zeros, border, reflection)"
            )));
        }
    };
    let op = Op::GridSample {
        mode,
        padding,
        align_corners: a.int("align_corners", 0)? != 0,
    };
    Ok(Converted::Node(op, inputs.to_vec()))
}

fn no_params(_op: &Op, _i: usize) -> bool {
    false
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    if !matches!(op, Op::GridSample { .. }) {
        return Err(wrong_family(op, "grid_sample"));
    }
    let x = req(ins, 0, "X")?;
    let grid = req(ins, 1, "grid")?;
    float_only(x.dtype, "GridSample")?;
    if x.shape.len() != 4 {
        return Err(EngineError::unsupported(format!(
            "GridSample on a {}-D input {:?}: only 4-D [N, C, H, W] inputs are supported (the volumetric \
             5-D form is not)",
            x.shape.len(),
            x.shape
        )));
    }
    let (&[n, c, _, _], &[gn, ho, wo, 2]) = (x.shape, grid.shape) else {
        return Err(EngineError::invalid(format!(
            "GridSample needs X [N, C, H, W] and grid [N, H_out, W_out, 2], got {:?} and {:?}",
            x.shape, grid.shape
        )));
    };
    if gn != n || grid.dtype != x.dtype {
        return Err(EngineError::invalid(format!(
            "GridSample grid ({} {:?}) must have X's batch ({n}) and type ({})",
            grid.dtype, grid.shape, x.dtype
        )));
    }
    Ok(concrete(op.clone(), 2, vec![(x.dtype, vec![n, c, ho, wo])]))
}

fn params(op: &Op) -> Result<GridSampleParams> {
    match op {
        Op::GridSample {
            mode,
            padding,
            align_corners,
        } => Ok(GridSampleParams {
            mode: *mode,
            padding: *padding,
            align_corners: *align_corners,
        }),
        other => Err(wrong_family(other, "grid_sample")),
    }
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let p = params(op)?;
    let (x, sx) = arg(ins, 0)?;
    let (grid, sg) = arg(ins, 1)?;
    let (&[n, c, h, w], &[_, ho, wo, _]) = (sx, sg) else {
        return Err(EngineError::internal(
            "GridSample input is not 4-D after resolution",
        ));
    };
    let y = grid_sample(&f32_of(x), [n, c, h, w], &f32_of(grid), [ho, wo], p);
    let dtype = outs.first().map_or(DataType::F32, |o| o.0);
    Ok(vec![back(dtype, y)])
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let p = match &n.op {
        Op::GridSample {
            mode,
            padding,
            align_corners,
        } => GridSampleParams {
            mode: *mode,
            padding: *padding,
            align_corners: *align_corners,
        },
        other => return Err(gpu_wrong_family(other, "grid_sample")),
    };
    let x = c.input(n, 0)?;
    let grid = c.input(n, 1)?;
    let name = c.out_name(n, 0);
    let y = kernels::grid_sample::grid_sample(&mut c.b, &name, &x, &grid, p)?;
    c.set(n, 0, y)
}
