//! Element-wise kernels against CPU loops.

use super::support::*;
use crate::cpu::num::erf_f32;
use crate::wgpu::dtype::DType;
use crate::wgpu::expr::{BinaryOp, EwNode, EwProgram, UnaryOp};
use crate::wgpu::kernels::elementwise::elementwise;

#[test]
fn broadcast_add_then_relu() {
    let a = rand(2 * 3 * 4, 1);
    let bias = rand(4, 2);
    let col = rand(3, 3);
    let prog = EwProgram {
        nodes: vec![
            EwNode::Operand(0),
            EwNode::Operand(1),
            EwNode::Binary(BinaryOp::Add, 0, 1),
            EwNode::Operand(2),
            EwNode::Binary(BinaryOp::Mul, 2, 3),
            EwNode::Unary(UnaryOp::Relu, 4),
        ],
    };
    let out = run(
        vec![f32s(&[2, 3, 4], &a), f32s(&[4], &bias), f32s(&[3, 1], &col)],
        |b, x| {
            Ok(vec![elementwise(
                b,
                "y",
                &prog,
                &[&x[0], &x[1], &x[2]],
                DType::F32,
                &[2, 3, 4],
            )?])
        },
    );
    let mut want = vec![0.0; 24];
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                let idx = (i * 3 + j) * 4 + k;
                want[idx] = ((a[idx] + bias[k]) * col[j]).max(0.0);
            }
        }
    }
    assert_close(&as_f32(&out[0]), &want, 1e-6, 1e-7);
}

#[test]
fn unary_ops_with_attributes() {
    let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.5 - 4.0).collect();
    let ops: Vec<(UnaryOp, fn(f32) -> f32)> = vec![
        (UnaryOp::LeakyRelu(0.1), |v| if v >= 0.0 { v } else { 0.1 * v }),
        (UnaryOp::HardSigmoid(0.2, 0.5), |v| {
            (0.2 * v + 0.5).clamp(0.0, 1.0)
        }),
        (UnaryOp::HardSwish, |v| v * (v / 6.0 + 0.5).clamp(0.0, 1.0)),
        // The CPU executor's erf (f64 inside) is the reference for the shader's f32 one.
        (UnaryOp::Erf, erf_f32),
        (UnaryOp::Sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
        (UnaryOp::Silu, |v| v / (1.0 + (-v).exp())),
        (UnaryOp::Tanh, f32::tanh),
        (UnaryOp::Round, |v| {
            let r = v.round();
            if (v - v.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
                r - v.signum()
            } else {
                r
            }
        }),
        (UnaryOp::Softplus, |v| (1.0 + v.exp()).ln()),
    ];
    for (op, f) in ops {
        let prog = EwProgram {
            nodes: vec![EwNode::Operand(0), EwNode::Unary(op, 0)],
        };
        let out = run(vec![f32s(&[16], &x)], |b, ins| {
            Ok(vec![elementwise(b, "y", &prog, &[&ins[0]], DType::F32, &[16])?])
        });
        let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
        assert_close(&as_f32(&out[0]), &want, 1e-5, 1e-6);
    }
}

#[test]
fn where_compare_and_int_casts() {
    let a = rand(12, 7);
    let cond = [true, false, true];
    let idx: Vec<i64> = (0..12).map(|i| i - 5).collect();
    // where(cond[col], a, -a) < 0  -> bool ; and cast(idx) * 2 -> int
    let prog_bool = EwProgram {
        nodes: vec![
            EwNode::Operand(0),
            EwNode::Operand(1),
            EwNode::Unary(UnaryOp::Neg, 1),
            EwNode::Where(0, 1, 2),
            EwNode::Const(0.0),
            EwNode::Binary(BinaryOp::Less, 3, 4),
        ],
    };
    let prog_int = EwProgram {
        nodes: vec![
            EwNode::Operand(0),
            EwNode::Operand(0),
            EwNode::Binary(BinaryOp::Mul, 0, 1),
            EwNode::Cast(DType::I32, 2),
        ],
    };
    let out = run(
        vec![bools(&[3], &cond), f32s(&[4, 3], &a), i64s(&[12], &idx)],
        |b, x| {
            Ok(vec![
                elementwise(b, "lt", &prog_bool, &[&x[0], &x[1]], DType::Bool, &[4, 3])?,
                elementwise(b, "sq", &prog_int, &[&x[2]], DType::I32, &[12])?,
            ])
        },
    );
    let want: Vec<u8> = (0..12)
        .map(|i| {
            let v = if cond[i % 3] { a[i] } else { -a[i] };
            u8::from(v < 0.0)
        })
        .collect();
    assert_eq!(out[0].data, want);
    assert_eq!(as_i64(&out[1]), idx.iter().map(|v| v * v).collect::<Vec<_>>());
}
