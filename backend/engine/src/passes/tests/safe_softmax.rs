//! torch's safe softmax, `Where(IsNaN(Softmax(x)), 0, Softmax(x))`, is one Softmax whose NaN rows (every value
//! −∞, or a NaN or +∞ among them) are zeros, on both executors; a Softmax read elsewhere too stays as written.

use super::{model, op_names, run_on, value};
use crate::onnx::proto::TensorProto;
use crate::onnx::test_graph::{init, node};
use crate::{AdapterChoice, ExecutorKind};

const ROWS: usize = 4;
const D: usize = 5;

/// Row 0 finite, row 1 all −∞ (a fully masked attention row), row 2 with a NaN, row 3 with +∞.
fn input() -> Vec<f32> {
    let mut x: Vec<f32> = (0..ROWS * D).map(|i| (i % 7) as f32 * 0.5 - 1.0).collect();
    x[D..2 * D].fill(f32::NEG_INFINITY);
    x[2 * D + 1] = f32::NAN;
    x[3 * D + 3] = f32::INFINITY;
    x
}

fn zero() -> Vec<TensorProto> {
    vec![init("zero", &[], &[0.0])]
}

#[test]
fn the_safe_softmax_is_one_softmax_with_zeros_for_nan_rows_on_both_executors() {
    let m = model(
        vec![
            node("Softmax", &["x"], "s", vec![super::int("axis", -1)]),
            node("IsNaN", &["s"], "nan", vec![]),
            node("Where", &["nan", "zero", "s"], "y", vec![]),
        ],
        zero(),
        value("x", &[ROWS as i64, D as i64], &[]),
        value("y", &[ROWS as i64, D as i64], &[]),
    );
    assert_eq!(op_names(&m), ["Softmax"], "IsNaN and Where are folded");
    let x = input();
    let row0: Vec<f32> = {
        let r = &x[..D];
        let mx = r.iter().copied().fold(f32::MIN, f32::max);
        let s: f32 = r.iter().map(|v| (v - mx).exp()).sum();
        r.iter().map(|v| (v - mx).exp() / s).collect()
    };
    for executor in [ExecutorKind::Cpu, ExecutorKind::Wgpu(AdapterChoice::Auto)] {
        let y = run_on(executor.clone(), &m, vec![ROWS, D], x.clone())
            .to_vec::<f32>()
            .unwrap();
        for (g, w) in y[..D].iter().zip(&row0) {
            assert!(
                (g - w).abs() < 1e-6,
                "{executor:?}: row 0 {:?} against {row0:?}",
                &y[..D]
            );
        }
        assert_eq!(y[D..], [0.0; (ROWS - 1) * D], "{executor:?}: NaN rows are zeros");
    }
}

#[test]
fn a_softmax_read_elsewhere_too_stays_as_written() {
    // y = Where(IsNaN(s), 0, s) + s: the Softmax's output has a third reader, which wants the NaN rows
    let m = model(
        vec![
            node("Softmax", &["x"], "s", vec![super::int("axis", -1)]),
            node("IsNaN", &["s"], "nan", vec![]),
            node("Where", &["nan", "zero", "s"], "w", vec![]),
            node("Add", &["w", "s"], "y", vec![]),
        ],
        zero(),
        value("x", &[ROWS as i64, D as i64], &[]),
        value("y", &[ROWS as i64, D as i64], &[]),
    );
    assert!(op_names(&m).contains(&"Where"), "{:?}", op_names(&m));
    let y = run_on(ExecutorKind::Cpu, &m, vec![ROWS, D], input())
        .to_vec::<f32>()
        .unwrap();
    assert!(
        y[D..].iter().all(|v| v.is_nan()),
        "the NaN rows reach the Add: {y:?}"
    );
}
