//! Greedy non-maximum suppression of one (batch, class) of boxes: NonMaxSuppression's kernel.

use super::simd;

/// The kept box indices of one (batch, class), in the order they were kept.
pub(crate) fn suppress(
    boxes: &[[f64; 4]],
    scores: &[f64],
    max_kept: usize,
    iou_threshold: f64,
    score_threshold: Option<f64>,
) -> Vec<usize> {
    suppress_with(
        simd::isa(),
        boxes,
        scores,
        max_kept,
        iou_threshold,
        score_threshold,
    )
}

/// [`suppress`] with the overlap test compiled for `isa`.
fn suppress_with(
    isa: simd::Isa,
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
        if !any_overlap(isa, &kept_boxes, &boxes[i], iou_threshold) {
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
}

simd::multiversion! {
    /// True when a kept box overlaps `b` by more than `iou_threshold` (intersection over union, 0
    /// when either box has no area), compiled for the CPU's vector width.
    fn any_overlap(kept: &KeptBoxes, b: &[f64; 4], iou_threshold: f64) -> bool = any_overlap_lanes;
}

/// Tests the kept boxes a chunk at a time, without branches inside a chunk so that it runs in
/// vector lanes, and stops at the first chunk with an overlap.
#[inline(always)]
fn any_overlap_lanes<const FMA: bool>(kept: &KeptBoxes, b: &[f64; 4], iou_threshold: f64) -> bool {
    const CHUNK: usize = 32;
    let area_b = area(b);
    let n = kept.area.len();
    let mut start = 0;
    while start < n {
        let end = (start + CHUNK).min(n);
        let mut hit = false;
        let (y1, x1, y2, x2) = (
            &kept.y1[start..end],
            &kept.x1[start..end],
            &kept.y2[start..end],
            &kept.x2[start..end],
        );
        for ((((&y1, &x1), &y2), &x2), &area_k) in
            y1.iter().zip(x1).zip(y2).zip(x2).zip(&kept.area[start..end])
        {
            let h = (y2.min(b[2]) - y1.max(b[0])).max(0.0);
            let w = (x2.min(b[3]) - x1.max(b[1])).max(0.0);
            let inter = h * w;
            let with_area = area_k > 0.0 && area_b > 0.0;
            let iou = if with_area {
                inter / (area_k + area_b - inter)
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
    fn a_box_without_area_overlaps_nothing() {
        let mut kept = KeptBoxes::default();
        kept.push(&[0.0, 0.0, 0.0, 1.0]);
        let isa = simd::isa();
        assert!(
            !any_overlap(isa, &kept, &[0.0, 0.0, 0.0, 1.0], 0.0),
            "not even itself"
        );
        kept.push(&[0.0, 0.0, 1.0, 1.0]);
        assert!(any_overlap(isa, &kept, &[0.0, 0.0, 1.0, 1.0], 0.99));
    }

    /// Every instruction set keeps the same boxes, past one chunk of kept boxes.
    #[test]
    fn every_instruction_set_keeps_the_same_boxes() {
        let boxes: Vec<[f64; 4]> = (0..200)
            .map(|i| {
                let (y, x) = ((i * 37 % 101) as f64, (i * 53 % 97) as f64);
                [y, x, y + 10.0 + (i % 7) as f64, x + 12.0 - (i % 5) as f64]
            })
            .collect();
        let scores: Vec<f64> = (0..200).map(|i| ((i * 7919) % 1000) as f64 / 1000.0).collect();
        let mut want: Option<Vec<usize>> = None;
        for isa in simd::all_available() {
            let got = suppress_with(isa, &boxes, &scores, usize::MAX, 0.3, None);
            assert!(got.len() > 40, "{isa:?}: {}", got.len());
            match &want {
                None => want = Some(got),
                Some(w) => assert_eq!(&got, w, "{isa:?}"),
            }
        }
        assert_eq!(want.unwrap(), suppress(&boxes, &scores, usize::MAX, 0.3, None));
    }
}
