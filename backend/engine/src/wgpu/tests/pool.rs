//! Pooling and Resize against CPU loops.

use super::support::*;
use crate::wgpu::kernels::pool::{self, PoolGeom, PoolKind, ResizeSpec};

#[test]
fn max_pool_with_indices_and_average_pool_padding_modes() {
    let x: Vec<f32> = (0..25).map(|v| ((v * 7) % 11) as f32).collect();
    let g = PoolGeom {
        kernel: vec![3, 3],
        strides: vec![2, 2],
        pads: vec![1, 1, 1, 1],
        dilations: vec![1, 1],
    };
    let out = run(vec![f32s(&[1, 1, 5, 5], &x)], |b, t| {
        let (m, i) = pool::pool(
            b,
            ["m", "i"],
            &t[0],
            &g,
            PoolKind::Max {
                indices: true,
                col_major: false,
            },
            &[1, 1, 3, 3],
        )?;
        let (a, _) = pool::pool(
            b,
            ["a", "-"],
            &t[0],
            &g,
            PoolKind::Average {
                count_include_pad: false,
            },
            &[1, 1, 3, 3],
        )?;
        let (ap, _) = pool::pool(
            b,
            ["ap", "-"],
            &t[0],
            &g,
            PoolKind::Average {
                count_include_pad: true,
            },
            &[1, 1, 3, 3],
        )?;
        Ok(vec![m, i.expect("indices"), a, ap])
    });
    let (mut m, mut mi, mut a, mut ap) = (vec![], vec![], vec![], vec![]);
    for oh in 0..3 {
        for ow in 0..3 {
            let (mut best, mut at, mut s, mut c) = (f32::MIN, 0usize, 0.0, 0.0);
            for kh in 0..3 {
                for kw in 0..3 {
                    let (ih, iw) = ((oh * 2 + kh) as isize - 1, (ow * 2 + kw) as isize - 1);
                    if ih < 0 || iw < 0 || ih >= 5 || iw >= 5 {
                        continue;
                    }
                    let v = x[ih as usize * 5 + iw as usize];
                    if v > best {
                        best = v;
                        at = ih as usize * 5 + iw as usize;
                    }
                    s += v;
                    c += 1.0;
                }
            }
            m.push(best);
            mi.push(at as i64);
            a.push(s / c);
            ap.push(s / 9.0);
        }
    }
    assert_eq!(as_f32(&out[0]), m);
    assert_eq!(as_i64(&out[1]), mi);
    assert_close(&as_f32(&out[2]), &a, 1e-6, 1e-6);
    assert_close(&as_f32(&out[3]), &ap, 1e-6, 1e-6);
}

#[test]
fn resize_nearest_and_linear() {
    let x = [1.0, 2.0, 3.0, 4.0];
    let out = run(vec![f32s(&[1, 1, 2, 2], &x)], |b, t| {
        let nearest = ResizeSpec {
            mode: 0,
            coord: 0,
            nearest: 0,
            extrapolation: 0.0,
            cubic_a: -0.75,
            exclude_outside: false,
        };
        let linear = ResizeSpec {
            mode: 1,
            coord: 0,
            nearest: 0,
            extrapolation: 0.0,
            cubic_a: -0.75,
            exclude_outside: false,
        };
        let align = ResizeSpec {
            mode: 1,
            coord: 2,
            nearest: 0,
            extrapolation: 0.0,
            cubic_a: -0.75,
            exclude_outside: false,
        };
        Ok(vec![
            pool::resize(b, "n", &t[0], nearest, &[1.0, 1.0, 2.0, 3.0], &[], &[1, 1, 4, 6])?,
            pool::resize(b, "l", &t[0], linear, &[1.0, 1.0, 2.0, 2.0], &[], &[1, 1, 4, 4])?,
            pool::resize(b, "a", &t[0], align, &[1.0, 1.0, 1.5, 1.5], &[], &[1, 1, 3, 3])?,
        ])
    });
    // ONNX reference values (resize_upsample_scales_nearest / _linear / _linear_align_corners).
    assert_eq!(
        as_f32(&out[0]),
        vec![
            1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 4.0, 4.0, 3.0,
            3.0, 3.0, 4.0, 4.0, 4.0
        ]
    );
    assert_close(
        &as_f32(&out[1]),
        &[
            1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0,
        ],
        1e-6,
        1e-6,
    );
    assert_close(
        &as_f32(&out[2]),
        &[1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0],
        1e-6,
        1e-6,
    );
}
