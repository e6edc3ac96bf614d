//! MatMul/Gemm against a CPU loop.

use super::support::*;
use crate::wgpu::dtype::DType;
use crate::wgpu::expr::{EwNode, UnaryOp};
use crate::wgpu::kernels::matmul::{Epilogue, gemm_prologue, matmul};

/// Reference: a [batch, m, k] (or transposed), b [batch or 1, k, n] (or transposed).
#[allow(clippy::too_many_arguments)]
fn reference(
    a: &[f32],
    b: &[f32],
    batch: usize,
    b_batched: bool,
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
) -> Vec<f32> {
    let mut out = vec![0.0; batch * m * n];
    for bt in 0..batch {
        let ao = bt * m * k;
        let bo = if b_batched { bt * k * n } else { 0 };
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for kk in 0..k {
                    let av = if ta {
                        a[ao + kk * m + i]
                    } else {
                        a[ao + i * k + kk]
                    };
                    let bv = if tb {
                        b[bo + j * k + kk]
                    } else {
                        b[bo + kk * n + j]
                    };
                    s += f64::from(av) * f64::from(bv);
                }
                out[bt * m * n + i * n + j] = s as f32;
            }
        }
    }
    out
}

#[test]
fn tiles_edges_transposes_and_broadcast_batches() {
    // Shapes that cross tile edges in every direction, each tile configuration, both transposes.
    for (batch, m, n, k, ta, tb, b_batched) in [
        (1, 1, 5, 7, false, false, false),
        (2, 20, 67, 33, false, true, true),
        (3, 70, 9, 17, true, false, false),
        (1, 33, 64, 16, true, true, true),
    ] {
        let a = rand(batch * m * k, 11);
        let bb = if b_batched { batch } else { 1 };
        let bv = rand(bb * k * n, 12);
        let a_shape = if ta { vec![batch, k, m] } else { vec![batch, m, k] };
        let b_shape = if tb { vec![bb, n, k] } else { vec![bb, k, n] };
        let b_shape = if b_batched { b_shape } else { b_shape[1..].to_vec() };
        let out = run(vec![f32s(&a_shape, &a), f32s(&b_shape, &bv)], |b, x| {
            Ok(vec![matmul(
                b,
                "y",
                &x[0],
                &x[1],
                ta,
                tb,
                DType::F32,
                &Epilogue::default(),
            )?])
        });
        assert_eq!(out[0].shape, vec![batch, m, n]);
        let want = reference(&a, &bv, batch, b_batched, m, n, k, ta, tb);
        assert_close(&as_f32(&out[0]), &want, 1e-4, 1e-5);
    }
}

#[test]
fn gemm_alpha_beta_bias_and_fused_relu() {
    let (m, n, k) = (5, 6, 4);
    let a = rand(m * k, 21);
    let bv = rand(k * n, 22);
    let c = rand(n, 23);
    let mut prog = gemm_prologue(0.5, 2.0, true);
    let last = prog.nodes.len() - 1;
    prog.nodes.push(EwNode::Unary(UnaryOp::Relu, last));
    let out = run(
        vec![f32s(&[m, k], &a), f32s(&[k, n], &bv), f32s(&[n], &c)],
        |b, x| {
            let ep = Epilogue {
                program: Some(prog.clone()),
                operands: vec![&x[2]],
                shape: None,
            };
            Ok(vec![matmul(b, "y", &x[0], &x[1], false, false, DType::F32, &ep)?])
        },
    );
    let prod = reference(&a, &bv, 1, false, m, n, k, false, false);
    let want: Vec<f32> = prod
        .iter()
        .enumerate()
        .map(|(i, p)| (0.5 * p + 2.0 * c[i % n]).max(0.0))
        .collect();
    assert_close(&as_f32(&out[0]), &want, 1e-4, 1e-5);
}
