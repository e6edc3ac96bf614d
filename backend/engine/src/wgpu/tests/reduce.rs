//! Reductions, softmax, normalisation, ArgMax and TopK against CPU loops.

use super::support::*;
use crate::wgpu::kernels::reduce::{self, Reduction};

#[test]
fn reductions_over_several_axes_both_paths() {
    // [2, 3, 200]: axis 2 (R = 200 over 6 rows: cooperative), axes {0, 1} (R = 6: per invocation).
    let x = rand(1200, 81);
    let ops = [
        Reduction::Sum,
        Reduction::Mean,
        Reduction::Max,
        Reduction::Min,
        Reduction::L1,
        Reduction::L2,
        Reduction::SumSquare,
        Reduction::LogSumExp,
    ];
    let out = run(vec![f32s(&[2, 3, 200], &x)], |b, t| {
        let mut outs = Vec::new();
        for op in ops {
            outs.push(reduce::reduce(b, "r", &t[0], op, &[2], true)?);
            outs.push(reduce::reduce(b, "r01", &t[0], op, &[0, 1], false)?);
        }
        Ok(outs)
    });
    let apply = |op: Reduction, vals: &[f32]| -> f32 {
        let v: Vec<f64> = vals.iter().map(|&v| f64::from(v)).collect();
        let n = v.len() as f64;
        (match op {
            Reduction::Sum => v.iter().sum(),
            Reduction::Mean => v.iter().sum::<f64>() / n,
            Reduction::Max => v.iter().copied().fold(f64::MIN, f64::max),
            Reduction::Min => v.iter().copied().fold(f64::MAX, f64::min),
            Reduction::L1 => v.iter().map(|a| a.abs()).sum(),
            Reduction::L2 => v.iter().map(|a| a * a).sum::<f64>().sqrt(),
            Reduction::SumSquare => v.iter().map(|a| a * a).sum(),
            Reduction::LogSumExp => v.iter().map(|a| a.exp()).sum::<f64>().ln(),
            _ => unreachable!("not tested"),
        }) as f32
    };
    for (k, op) in ops.iter().enumerate() {
        let rows: Vec<f32> = (0..6).map(|r| apply(*op, &x[r * 200..r * 200 + 200])).collect();
        assert_eq!(out[2 * k].shape, vec![2, 3, 1]);
        assert_close(&as_f32(&out[2 * k]), &rows, 1e-5, 1e-5);
        let cols: Vec<f32> = (0..200)
            .map(|c| apply(*op, &(0..6).map(|r| x[r * 200 + c]).collect::<Vec<_>>()))
            .collect();
        assert_eq!(out[2 * k + 1].shape, vec![200]);
        assert_close(&as_f32(&out[2 * k + 1]), &cols, 1e-5, 1e-5);
    }
}

#[test]
fn softmax_layernorm_instancenorm() {
    let x = rand(2 * 5 * 3, 91);
    let scale = rand(15, 92);
    let bias = rand(15, 93);
    let cs = rand(5, 94);
    let cb = rand(5, 95);
    let out = run(
        vec![
            f32s(&[2, 5, 3], &x),
            f32s(&[5, 3], &scale),
            f32s(&[5, 3], &bias),
            f32s(&[5], &cs),
            f32s(&[5], &cb),
        ],
        |b, t| {
            let ln = reduce::normalise(b, "ln", &t[0], &t[1], Some(&t[2]), 1, 1e-5, false, true)?;
            let inn = reduce::normalise(b, "in", &t[0], &t[3], Some(&t[4]), 2, 1e-5, true, false)?;
            Ok(vec![
                reduce::softmax(b, "sm", &t[0], 1, false, false, false)?,
                reduce::softmax(b, "lsm", &t[0], 1, true, true, false)?,
                ln.y,
                ln.stats.expect("stats"),
                inn.y,
            ])
        },
    );
    let mut sm = vec![0.0; 30];
    for n in 0..2 {
        for i in 0..3 {
            let m = (0..5).map(|c| x[(n * 5 + c) * 3 + i]).fold(f32::MIN, f32::max);
            let s: f32 = (0..5).map(|c| (x[(n * 5 + c) * 3 + i] - m).exp()).sum();
            for c in 0..5 {
                sm[(n * 5 + c) * 3 + i] = (x[(n * 5 + c) * 3 + i] - m).exp() / s;
            }
        }
    }
    assert_close(&as_f32(&out[0]), &sm, 1e-5, 1e-6);
    let mut lsm = vec![0.0; 30];
    let mut ln = vec![0.0; 30];
    let mut stats = vec![0.0; 4];
    for n in 0..2 {
        let row = &x[n * 15..n * 15 + 15];
        let m = row.iter().copied().fold(f32::MIN, f32::max);
        let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
        let mean = row.iter().sum::<f32>() / 15.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 15.0;
        let inv = 1.0 / (var + 1e-5).sqrt();
        stats[n] = mean;
        stats[2 + n] = inv;
        for i in 0..15 {
            lsm[n * 15 + i] = row[i] - m - s.ln();
            ln[n * 15 + i] = (row[i] - mean) * inv * scale[i] + bias[i];
        }
    }
    assert_close(&as_f32(&out[1]), &lsm, 1e-5, 1e-5);
    assert_close(&as_f32(&out[2]), &ln, 1e-4, 1e-5);
    assert_close(&as_f32(&out[3]), &stats, 1e-4, 1e-5);
    let mut inorm = vec![0.0; 30];
    for r in 0..10 {
        let row = &x[r * 3..r * 3 + 3];
        let mean = row.iter().sum::<f32>() / 3.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 3.0;
        for i in 0..3 {
            inorm[r * 3 + i] = (row[i] - mean) / (var + 1e-5).sqrt() * cs[r % 5] + cb[r % 5];
        }
    }
    assert_close(&as_f32(&out[4]), &inorm, 1e-4, 1e-5);
}

#[test]
fn long_rows_take_the_cooperative_path() {
    // Two rows of 300: softmax and layer norm through workgroup memory.
    let x = rand(600, 96);
    let ones = vec![1.0; 300];
    let zeros = vec![0.0; 300];
    let out = run(
        vec![f32s(&[2, 300], &x), f32s(&[300], &ones), f32s(&[300], &zeros)],
        |b, t| {
            let ln = reduce::normalise(b, "ln", &t[0], &t[1], Some(&t[2]), 1, 1e-5, false, false)?;
            Ok(vec![
                reduce::softmax(b, "sm", &t[0], 1, false, false, false)?,
                ln.y,
            ])
        },
    );
    let (mut sm, mut ln) = (vec![0.0; 600], vec![0.0; 600]);
    for r in 0..2 {
        let row = &x[r * 300..r * 300 + 300];
        let m = row.iter().copied().fold(f32::MIN, f32::max);
        let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
        let mean = row.iter().sum::<f32>() / 300.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 300.0;
        for i in 0..300 {
            sm[r * 300 + i] = (row[i] - m).exp() / s;
            ln[r * 300 + i] = (row[i] - mean) / (var + 1e-5).sqrt();
        }
    }
    assert_close(&as_f32(&out[0]), &sm, 1e-4, 1e-7);
    assert_close(&as_f32(&out[1]), &ln, 1e-4, 1e-5);
}

#[test]
fn argmax_ties_and_topk() {
    let x = [1.0, 3.0, 3.0, 0.0, -1.0, -1.0, 2.0, 2.0];
    let out = run(vec![f32s(&[2, 4], &x)], |b, t| {
        let (v, i) = reduce::top_k(b, ["v", "i"], &t[0], 1, 3, true)?;
        let (sv, si) = reduce::top_k(b, ["sv", "si"], &t[0], 1, 2, false)?;
        Ok(vec![
            reduce::arg_reduce(b, "amax", &t[0], 1, true, false, false)?,
            reduce::arg_reduce(b, "amax_last", &t[0], 1, true, true, true)?,
            reduce::arg_reduce(b, "amin", &t[0], 0, false, false, false)?,
            v,
            i,
            sv,
            si,
        ])
    });
    assert_eq!(as_i64(&out[0]), vec![1, 2]);
    assert_eq!(out[1].shape, vec![2, 1]);
    assert_eq!(as_i64(&out[1]), vec![2, 3]);
    assert_eq!(as_i64(&out[2]), vec![1, 1, 1, 0]);
    assert_eq!(as_f32(&out[3]), vec![3.0, 3.0, 1.0, 2.0, 2.0, -1.0]);
    assert_eq!(as_i64(&out[4]), vec![1, 2, 0, 2, 3, 0]);
    assert_eq!(as_f32(&out[5]), vec![0.0, 1.0, -1.0, -1.0]);
    assert_eq!(as_i64(&out[6]), vec![3, 0, 0, 1]);
}
