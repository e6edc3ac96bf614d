//! Conv and ConvTranspose against CPU loops, one case per kernel path.

use super::support::*;
use crate::wgpu::dtype::DType;
use crate::wgpu::expr::{BinaryOp, EwNode, EwProgram, UnaryOp};
use crate::wgpu::kernels::conv::{ConvGeom, conv, conv_transpose};
use crate::wgpu::kernels::matmul::Epilogue;

/// 2-D reference (1-D is H = 1): x [n, c, h, w], w [oc, c/g, kh, kw].
#[allow(clippy::too_many_arguments)]
fn conv_ref(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    s: [usize; 2],
    p: [usize; 4],
    d: [usize; 2],
    g: usize,
    bias: &[f32],
) -> (Vec<f32>, [usize; 4]) {
    let [n, c, h, wi] = xs;
    let [oc, cg, kh, kw] = ws;
    let oh = (h + p[0] + p[2] - (d[0] * (kh - 1) + 1)) / s[0] + 1;
    let ow = (wi + p[1] + p[3] - (d[1] * (kw - 1) + 1)) / s[1] + 1;
    let mg = oc / g;
    let mut y = vec![0.0; n * oc * oh * ow];
    for b in 0..n {
        for o in 0..oc {
            let gi = o / mg;
            for yh in 0..oh {
                for yw in 0..ow {
                    let mut acc = f64::from(bias.get(o).copied().unwrap_or(0.0));
                    for ci in 0..cg {
                        let ch = gi * cg + ci;
                        for a in 0..kh {
                            for bb in 0..kw {
                                let ih = (yh * s[0] + a * d[0]) as isize - p[0] as isize;
                                let iw = (yw * s[1] + bb * d[1]) as isize - p[1] as isize;
                                if ih < 0 || iw < 0 || ih as usize >= h || iw as usize >= wi {
                                    continue;
                                }
                                let xv = x[((b * c + ch) * h + ih as usize) * wi + iw as usize];
                                let wv = w[((o * cg + ci) * kh + a) * kw + bb];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y[((b * oc + o) * oh + yh) * ow + yw] = acc as f32;
                }
            }
        }
    }
    let _ = c;
    (y, [n, oc, oh, ow])
}

fn bias_relu() -> EwProgram {
    EwProgram {
        nodes: vec![
            EwNode::Acc,
            EwNode::Operand(0),
            EwNode::Binary(BinaryOp::Add, 0, 1),
            EwNode::Unary(UnaryOp::Relu, 2),
        ],
    }
}

#[test]
fn conv_paths_match_the_reference() {
    // (x shape, w shape, strides, pads [t, l, b, r], dilations, group): implicit GEMM, grouped GEMM,
    // depthwise direct, pointwise matmul.
    let cases = [
        ([2, 3, 7, 6], [5, 3, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1),
        ([1, 4, 9, 9], [6, 2, 3, 2], [2, 1], [0, 1, 2, 0], [2, 1], 2),
        ([2, 8, 5, 5], [8, 1, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 8),
        ([2, 6, 3, 4], [20, 6, 1, 1], [1, 1], [0, 0, 0, 0], [1, 1], 1),
    ];
    for (k, (xs, ws, s, p, d, g)) in cases.into_iter().enumerate() {
        let x = rand(xs.iter().product(), 30 + k as u64);
        let w = rand(ws.iter().product(), 40 + k as u64);
        let bias = rand(ws[0], 50 + k as u64);
        let (want, ys) = conv_ref(&x, xs, &w, ws, s, p, d, g, &bias);
        let want: Vec<f32> = want.iter().map(|v| v.max(0.0)).collect();
        let geom = ConvGeom {
            kernel: vec![ws[2], ws[3]],
            strides: s.to_vec(),
            pads: p.to_vec(),
            dilations: d.to_vec(),
            group: g,
        };
        let out = run(
            vec![f32s(&xs, &x), f32s(&ws, &w), f32s(&[ws[0], 1, 1], &bias)],
            |b, t| {
                let ep = Epilogue {
                    program: Some(bias_relu()),
                    operands: vec![&t[2]],
                    shape: None,
                };
                Ok(vec![conv(b, "y", &t[0], &t[1], &geom, &ys, DType::F32, &ep)?])
            },
        );
        assert_eq!(out[0].shape, ys.to_vec(), "case {k}");
        assert_close(&as_f32(&out[0]), &want, 1e-4, 1e-5);
    }
}

#[test]
fn conv_1d_without_epilogue() {
    let (xs, ws) = ([1, 2, 1, 10], [3, 2, 1, 4]);
    let x = rand(20, 61);
    let w = rand(24, 62);
    let (want, ys) = conv_ref(&x, xs, &w, ws, [1, 3], [0, 2, 0, 1], [1, 1], 1, &[]);
    let geom = ConvGeom {
        kernel: vec![4],
        strides: vec![3],
        pads: vec![2, 1],
        dilations: vec![1],
        group: 1,
    };
    let out = run(vec![f32s(&[1, 2, 10], &x), f32s(&[3, 2, 4], &w)], |b, t| {
        Ok(vec![conv(
            b,
            "y",
            &t[0],
            &t[1],
            &geom,
            &[1, 3, ys[3]],
            DType::F32,
            &Epilogue::default(),
        )?])
    });
    assert_close(&as_f32(&out[0]), &want, 1e-4, 1e-5);
}

#[test]
fn conv_transpose_with_stride_padding_and_groups() {
    // x [1, 4, 3, 3], w [4, 1, 3, 3] (groups 2 -> OC 2), stride 2, pads 1, output_padding 1 -> 6x6.
    let (n, c, h, wi) = (1, 4, 3, 3);
    let (g, mg, k, s, pad) = (2, 1, 3, 2, 1);
    let oc = g * mg;
    let (oh, ow) = ((h - 1) * s - 2 * pad + k + 1, (wi - 1) * s - 2 * pad + k + 1);
    let x = rand(n * c * h * wi, 71);
    let w = rand(c * mg * k * k, 72);
    let mut want = vec![0.0f32; n * oc * oh * ow];
    let cg = c / g;
    for ci in 0..c {
        let gi = ci / cg;
        for m in 0..mg {
            let o = gi * mg + m;
            for ih in 0..h {
                for iw in 0..wi {
                    for a in 0..k {
                        for bb in 0..k {
                            let yh = (ih * s + a) as isize - pad as isize;
                            let yw = (iw * s + bb) as isize - pad as isize;
                            if yh < 0 || yw < 0 || yh as usize >= oh || yw as usize >= ow {
                                continue;
                            }
                            want[(o * oh + yh as usize) * ow + yw as usize] +=
                                x[(ci * h + ih) * wi + iw] * w[((ci * mg + m) * k + a) * k + bb];
                        }
                    }
                }
            }
        }
    }
    let geom = ConvGeom {
        kernel: vec![k, k],
        strides: vec![s, s],
        pads: vec![pad, pad, pad, pad],
        dilations: vec![1, 1],
        group: g,
    };
    let out = run(
        vec![f32s(&[n, c, h, wi], &x), f32s(&[c, mg, k, k], &w)],
        |b, t| {
            Ok(vec![conv_transpose(
                b,
                "y",
                &t[0],
                &t[1],
                &geom,
                &[n, oc, oh, ow],
                DType::F32,
                &Epilogue::default(),
            )?])
        },
    );
    assert_close(&as_f32(&out[0]), &want, 1e-4, 1e-5);
}
