//! NonMaxSuppression: per batch and class, the boxes kept by greedy suppression, as
//! `[count, 3]` INT64 rows of (batch, class, box index).
//!
//! Its output shape depends on the values, so, as NonZero, it is computed while the plan is built:
//! every input is a parameter (constant inputs fold once at load; graph inputs become host inputs).
//! In a detector, whose boxes and scores the network computes from the request, it cuts the model
//! into stages (`crate::stages`): the network is a cached plan, and NonMaxSuppression runs on the
//! host between it and what follows. The executors never see it.
//!
//! The rules are onnxruntime's: a box is a candidate when its score exceeds score_threshold (when
//! given); candidates are visited by descending score (ties by lower index); one is kept unless its
//! IoU with a kept box exceeds iou_threshold; boxes of zero or negative area overlap nothing; at most
//! max_output_boxes_per_class are kept per (batch, class), none when it is 0 or absent.

use super::prelude::*;
use crate::cpu::suppress::suppress;

/// The ONNX operators this module converts.
pub(super) static ONNX: &[OnnxOp] = &[OnnxOp::new("NonMaxSuppression", 10, convert, &FAMILY)];

/// The IR ops of this module: NonMaxSuppression.
pub(super) static FAMILY: Family = Family {
    name: "nms",
    plan_time: true,
    value_dependent_shapes: true,
    param_input,
    resolve,
    cpu: plan_time_cpu,
    wgpu: plan_time_wgpu,
};

fn convert(
    _cx: &mut Ctx<'_>,
    n: &NodeProto,
    _name: &str,
    a: &Attrs<'_>,
    inputs: &[Option<ValueId>],
) -> Result<Converted> {
    match n.op_type.as_str() {
        "NonMaxSuppression" => {
            let center_point_box = match a.int("center_point_box", 0)? {
                0 => false,
                1 => true,
                v => {
                    return Err(EngineError::invalid(format!(
                        "NonMaxSuppression attribute center_point_box is {v}; it must be 0 or 1"
                    )));
                }
            };
            Ok(Converted::Node(
                Op::NonMaxSuppression { center_point_box },
                inputs.to_vec(),
            ))
        }
        other => Err(not_registered(other)),
    }
}

/// Every input decides the output's shape.
fn param_input(_op: &Op, _i: usize) -> bool {
    true
}

fn resolve(op: &Op, ins: &[Option<InVal<'_>>], _n_out: usize) -> Result<Resolved> {
    let Op::NonMaxSuppression { center_point_box } = op else {
        return Err(wrong_family(op, "nms"));
    };
    let boxes = req(ins, 0, "boxes")?;
    let scores = req(ins, 1, "scores")?;
    let (&[batches, n_boxes, 4], &[s_batches, classes, s_boxes]) = (boxes.shape, scores.shape) else {
        return Err(EngineError::invalid(format!(
            "NonMaxSuppression boxes must be [batch, boxes, 4] and scores [batch, classes, boxes], got {:?} \
             and {:?}",
            boxes.shape, scores.shape
        )));
    };
    if (s_batches, s_boxes) != (batches, n_boxes) {
        return Err(EngineError::invalid(format!(
            "NonMaxSuppression boxes {:?} and scores {:?} disagree on the batch or the box count",
            boxes.shape, scores.shape
        )));
    }
    let data_dependent = "its output shape depends on those values, and the engine fixes every shape \
                          before a plan runs";
    let box_values = host_f64(boxes, &format!("NonMaxSuppression boxes ({data_dependent})"))?;
    let score_values = host_f64(scores, &format!("NonMaxSuppression scores ({data_dependent})"))?;
    let max_per_class = match opt(ins, 2) {
        Some(v) => single(
            host_ints(v, "NonMaxSuppression max_output_boxes_per_class")?,
            "max_output_boxes_per_class",
        )?,
        None => 0,
    };
    let iou_threshold = match opt(ins, 3) {
        Some(v) => single(host_f64(v, "NonMaxSuppression iou_threshold")?, "iou_threshold")?,
        None => 0.0,
    };
    let score_threshold = match opt(ins, 4) {
        Some(v) => Some(single(
            host_f64(v, "NonMaxSuppression score_threshold")?,
            "score_threshold",
        )?),
        None => None,
    };
    let corners: Vec<[f64; 4]> = box_values
        .chunks_exact(4)
        .map(|b| corners_of(b, *center_point_box))
        .collect();
    let max_per_class = usize::try_from(max_per_class.max(0)).unwrap_or(usize::MAX);
    let mut selected = Vec::new();
    for b in 0..batches {
        let boxes = &corners[b * n_boxes..(b + 1) * n_boxes];
        for c in 0..classes {
            let scores = &score_values[(b * classes + c) * n_boxes..(b * classes + c + 1) * n_boxes];
            for i in suppress(boxes, scores, max_per_class, iou_threshold, score_threshold) {
                selected.extend([b as i64, c as i64, i as i64]);
            }
        }
    }
    let rows = selected.len() / 3;
    Ok(Resolved::Host(vec![i64_tensor(vec![rows, 3], selected)?]))
}

/// The one value of a scalar (or one-element) input.
fn single<T: Copy>(v: Vec<T>, what: &str) -> Result<T> {
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(EngineError::invalid(format!(
            "NonMaxSuppression {what} must hold one value, got {}",
            v.len()
        ))),
    }
}

/// `[y1, x1, y2, x2]` with y1 ≤ y2 and x1 ≤ x2, from either box format.
fn corners_of(b: &[f64], center_point_box: bool) -> [f64; 4] {
    if center_point_box {
        let (xc, yc, w, h) = (b[0], b[1], b[2], b[3]);
        [yc - h / 2.0, xc - w / 2.0, yc + h / 2.0, xc + w / 2.0]
    } else {
        [b[0].min(b[2]), b[1].min(b[3]), b[0].max(b[2]), b[1].max(b[3])]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flipped_corners_and_centre_boxes_are_the_same_box() {
        assert_eq!(corners_of(&[1.0, 1.0, 0.0, 0.0], false), [0.0, 0.0, 1.0, 1.0]);
        assert_eq!(corners_of(&[0.5, 0.5, 1.0, 1.0], true), [0.0, 0.0, 1.0, 1.0]);
    }
}
