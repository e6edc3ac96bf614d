//! RoiAlign (opsets 10 and 16): the regions of interest of a detector's second stage, pooled to a
//! fixed size with bilinear samples.
//!
//! The CPU kernel (`cpu/roi_align.rs`) follows onnxruntime's loops; the wgpu kernel
//! (`wgpu/kernels/roi_align.wgsl`) computes each output element the same way, in the same order.
//! Opset 10 has no coordinate_transformation_mode and computes what opset 16 calls
//! output_half_pixel; opset 16's default is half_pixel.

use super::prelude::*;
use crate::cpu::roi_align::{RoiAlignParams, roi_align};
use crate::wgpu::kernels;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("RoiAlign", 10, convert, &FAMILY)];

/// The IR ops of this module: RoiAlign.
pub(super) static FAMILY: Family = Family {
    name: "roi_align",
    plan_time: false,
    value_dependent_shapes: false,
    param_input: no_params,
    resolve,
    cpu,
    wgpu,
};

fn convert(
    cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    if n.op_type != "RoiAlign" {
        return Err(not_registered(&n.op_type));
    }
    let default_mode = if cx.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match a.string("coordinate_transformation_mode", default_mode)?.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(EngineError::invalid(format!(
                "RoiAlign attribute coordinate_transformation_mode='{other}' (supported: half_pixel, \
                 output_half_pixel)"
            )));
        }
    };
    let max = match a.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => {
            return Err(EngineError::invalid(format!(
                "RoiAlign attribute mode='{other}' (supported: avg, max)"
            )));
        }
    };
    let positive = |name: &str, default: i64, min: i64| -> Result<usize> {
        let v = a.int(name, default)?;
        if v < min {
            return Err(EngineError::invalid(format!(
                "RoiAlign attribute {name} is {v}; it must be {min} or more"
            )));
        }
        Ok(v as usize)
    };
    let op = Op::RoiAlign {
        max,
        output_height: positive("output_height", 1, 1)?,
        output_width: positive("output_width", 1, 1)?,
        sampling_ratio: positive("sampling_ratio", 0, 0)?,
        spatial_scale: a.float("spatial_scale", 1.0)?,
        half_pixel,
    };
    Ok(Converted::Node(op, inputs.to_vec()))
}

fn no_params(_op: &Op, _i: usize) -> bool {
    false
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    let Op::RoiAlign {
        output_height,
        output_width,
        ..
    } = op
    else {
        return Err(wrong_family(op, "roi_align"));
    };
    let x = req(ins, 0, "X")?;
    let rois = req(ins, 1, "rois")?;
    let batch = req(ins, 2, "batch_indices")?;
    float_only(x.dtype, "RoiAlign")?;
    let (&[_, c, _, _], &[r, 4], &[rb]) = (x.shape, rois.shape, batch.shape) else {
        return Err(EngineError::invalid(format!(
            "RoiAlign needs X [N, C, H, W], rois [R, 4] and batch_indices [R], got {:?}, {:?} and {:?}",
            x.shape, rois.shape, batch.shape
        )));
    };
    if rb != r || rois.dtype != x.dtype || !matches!(batch.dtype, DataType::I64 | DataType::I32) {
        return Err(EngineError::invalid(format!(
            "RoiAlign rois ({} {:?}) must have X's type ({}) and batch_indices (INT64 {:?}) one index per roi",
            rois.dtype, rois.shape, x.dtype, batch.shape
        )));
    }
    Ok(concrete(
        op.clone(),
        3,
        vec![(x.dtype, vec![r, c, *output_height, *output_width])],
    ))
}

fn cpu(
    op: &Op,
    ins: &[In<'_>],
    outs: &[(DataType, Vec<usize>)],
    _prep: Option<&Prepared>,
) -> Result<Vec<Buf>> {
    let Op::RoiAlign {
        max,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale,
        half_pixel,
    } = op
    else {
        return Err(wrong_family(op, "roi_align"));
    };
    let (x, sx) = arg(ins, 0)?;
    let (rois, _) = arg(ins, 1)?;
    let (batch, _) = arg(ins, 2)?;
    let &[n, c, h, w] = sx else {
        return Err(EngineError::internal(
            "RoiAlign input is not 4-D after resolution",
        ));
    };
    let params = RoiAlignParams {
        max: *max,
        output_height: *output_height,
        output_width: *output_width,
        sampling_ratio: *sampling_ratio,
        spatial_scale: *spatial_scale,
        half_pixel: *half_pixel,
    };
    let y = roi_align(&f32_of(x), [n, c, h, w], &f32_of(rois), &batch.to_i64(), params)?;
    let dtype = outs.first().map_or(DataType::F32, |o| o.0);
    Ok(vec![back(dtype, y)])
}

fn wgpu(c: &mut Compiler<'_>, n: &Node) -> GpuResult<()> {
    let Op::RoiAlign {
        max,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale,
        half_pixel,
    } = &n.op
    else {
        return Err(gpu_wrong_family(&n.op, "roi_align"));
    };
    let x = c.input(n, 0)?;
    let rois = c.input(n, 1)?;
    let batch = c.input(n, 2)?;
    let name = c.out_name(n, 0);
    let params = RoiAlignParams {
        max: *max,
        output_height: *output_height,
        output_width: *output_width,
        sampling_ratio: *sampling_ratio,
        spatial_scale: *spatial_scale,
        half_pixel: *half_pixel,
    };
    let y = kernels::roi_align::roi_align(&mut c.b, &name, &x, &rois, &batch, params)?;
    c.set(n, 0, y)
}
