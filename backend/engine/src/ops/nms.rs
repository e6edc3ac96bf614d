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

/// The kept box indices of one (batch, class), in the order they were kept.
fn suppress(
    boxes: &[[f64; 4]],
    scores: &[f64],
    max_kept: usize,
    iou_threshold: f64,
    score_threshold: Option<f64>,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len())
        .filter(|&i| score_threshold.is_none_or(|t| scores[i] > t))
        .collect();
    // descending score, ties by lower index (a stable sort keeps the index order)
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut kept: Vec<usize> = Vec::new();
    let mut kept_boxes = KeptBoxes::default();
    for i in order {
        if kept.len() >= max_kept {
            break;
        }
        if !kept_boxes.suppress(&boxes[i], iou_threshold) {
            kept.push(i);
            kept_boxes.push(&boxes[i]);
        }
    }
    kept
}

/// The boxes kept so far, one array per coordinate, so that testing a candidate against all of
/// them runs in vector lanes: a detector's NMS tests thousands of candidates against thousands of
/// kept boxes.
#[derive(Default)]
struct KeptBoxes {
    y1: Vec<f64>,
    x1: Vec<f64>,
    y2: Vec<f64>,
    x2: Vec<f64>,
    area: Vec<f64>,
}

impl KeptBoxes {
    fn push(&mut self, b: &[f64; 4]) {
        self.y1.push(b[0]);
        self.x1.push(b[1]);
        self.y2.push(b[2]);
        self.x2.push(b[3]);
        self.area.push(area(b));
    }

    /// True when a kept box overlaps `b` by more than `iou_threshold` (intersection over union, 0
    /// when either box has no area; tested a chunk at a time without branches inside a chunk).
    fn suppress(&self, b: &[f64; 4], iou_threshold: f64) -> bool {
        const CHUNK: usize = 16;
        let area_b = area(b);
        let n = self.area.len();
        let mut start = 0;
        while start < n {
            let end = (start + CHUNK).min(n);
            let mut hit = false;
            for j in start..end {
                let h = (self.y2[j].min(b[2]) - self.y1[j].max(b[0])).max(0.0);
                let w = (self.x2[j].min(b[3]) - self.x1[j].max(b[1])).max(0.0);
                let inter = h * w;
                let with_area = self.area[j] > 0.0 && area_b > 0.0;
                let iou = if with_area {
                    inter / (self.area[j] + area_b - inter)
                } else {
                    0.0
                };
                hit |= iou > iou_threshold;
            }
            if hit {
                return true;
            }
            start = end;
        }
        false
    }
}

fn area(r: &[f64; 4]) -> f64 {
    (r[2] - r[0]) * (r[3] - r[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two heavily overlapping boxes and a distant one: the weaker overlapping box is suppressed,
    /// the threshold drops low scores, and the count limit applies per class.
    #[test]
    fn suppression_keeps_the_strongest_of_overlapping_boxes() {
        let boxes = [[0.0, 0.0, 1.0, 1.0], [0.0, 0.1, 1.0, 1.1], [0.0, 10.0, 1.0, 11.0]];
        let scores = [0.9, 0.95, 0.3];
        assert_eq!(suppress(&boxes, &scores, 10, 0.5, None), vec![1, 2]);
        assert_eq!(suppress(&boxes, &scores, 10, 0.5, Some(0.4)), vec![1]);
        assert_eq!(suppress(&boxes, &scores, 1, 0.5, None), vec![1]);
        assert_eq!(suppress(&boxes, &scores, 0, 0.5, None), Vec::<usize>::new());
        // with a threshold above their IoU (about 0.82) both overlapping boxes stay
        assert_eq!(suppress(&boxes, &scores, 10, 0.9, None), vec![1, 0, 2]);
    }

    #[test]
    fn flipped_corners_and_centre_boxes_are_the_same_box() {
        assert_eq!(corners_of(&[1.0, 1.0, 0.0, 0.0], false), [0.0, 0.0, 1.0, 1.0]);
        assert_eq!(corners_of(&[0.5, 0.5, 1.0, 1.0], true), [0.0, 0.0, 1.0, 1.0]);
        // a box without area overlaps nothing, not even itself
        let mut kept = KeptBoxes::default();
        kept.push(&[0.0, 0.0, 0.0, 1.0]);
        assert!(!kept.suppress(&[0.0, 0.0, 0.0, 1.0], 0.0));
        kept.push(&[0.0, 0.0, 1.0, 1.0]);
        assert!(kept.suppress(&[0.0, 0.0, 1.0, 1.0], 0.99));
    }
}
