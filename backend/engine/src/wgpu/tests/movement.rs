//! Data movement kernels against index arithmetic done on the host.

use super::support::*;
use crate::wgpu::kernels::{copy, gather};

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

fn at(shape: &[usize], idx: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (i, d)| acc * d + i)
}

#[test]
fn transpose_slice_expand_tile() {
    let x = iota(24);
    let out = run(
        vec![f32s(&[2, 3, 4], &x), f32s(&[3, 1], &[1.0, 2.0, 3.0])],
        |b, t| {
            Ok(vec![
                copy::transpose(b, "t", &t[0], &[2, 0, 1])?,
                // x[1:, ::-2, 1:4:2] -> starts [1, 2, 1], steps [1, -2, 2], shape [1, 2, 2]
                copy::slice(b, "s", &t[0], &[1, 2, 1], &[1, -2, 2], &[1, 2, 2])?,
                copy::expand(b, "e", &t[1], &[2, 3, 2])?,
                copy::tile(b, "r", &t[1], &[2, 2])?,
            ])
        },
    );
    let mut want_t = vec![0.0; 24];
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                want_t[at(&[4, 2, 3], &[k, i, j])] = x[at(&[2, 3, 4], &[i, j, k])];
            }
        }
    }
    assert_eq!(as_f32(&out[0]), want_t);
    assert_eq!(
        as_f32(&out[1]),
        vec![
            x[at(&[2, 3, 4], &[1, 2, 1])],
            x[at(&[2, 3, 4], &[1, 2, 3])],
            x[at(&[2, 3, 4], &[1, 0, 1])],
            x[at(&[2, 3, 4], &[1, 0, 3])]
        ]
    );
    assert_eq!(
        as_f32(&out[2]),
        vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    );
    assert_eq!(out[3].shape, vec![6, 2]);
    assert_eq!(
        as_f32(&out[3]),
        vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    );
}

#[test]
fn concat_split_and_depth_to_space() {
    let a = iota(6);
    let b2: Vec<f32> = iota(4).iter().map(|v| v + 100.0).collect();
    let d = iota(16);
    let out = run(
        vec![f32s(&[2, 3], &a), f32s(&[2, 2], &b2), f32s(&[1, 4, 2, 2], &d)],
        |b, t| {
            let c = copy::concat(b, "c", &[&t[0], &t[1]], 1, &[2, 5])?;
            let mut parts = copy::split(b, &["p0".to_owned(), "p1".to_owned()], &c, 1, &[1, 4])?;
            let dcr = copy::depth_to_space(b, "dcr", &t[2], 2, false)?;
            let crd = copy::depth_to_space(b, "crd", &t[2], 2, true)?;
            let p1 = parts.pop().expect("two parts");
            Ok(vec![c, p1, dcr, crd])
        },
    );
    assert_eq!(
        as_f32(&out[0]),
        vec![0.0, 1.0, 2.0, 100.0, 101.0, 3.0, 4.0, 5.0, 102.0, 103.0]
    );
    assert_eq!(
        as_f32(&out[1]),
        vec![1.0, 2.0, 100.0, 101.0, 4.0, 5.0, 102.0, 103.0]
    );
    // ONNX DepthToSpace example semantics (blocksize 2, C=4 -> 1 channel of 4x4).
    let mut want_dcr = vec![0.0; 16];
    let mut want_crd = vec![0.0; 16];
    for h in 0..4 {
        for w in 0..4 {
            let (bh, bw, ih, iw) = (h % 2, w % 2, h / 2, w / 2);
            want_dcr[h * 4 + w] = d[((bh * 2 + bw) * 2 + ih) * 2 + iw];
            want_crd[h * 4 + w] = d[((bh * 2 + bw) * 2 + ih) * 2 + iw];
        }
    }
    assert_eq!(as_f32(&out[2]), want_dcr);
    assert_eq!(as_f32(&out[3]), want_crd);
}

#[test]
fn gather_gather_elements_and_pad_modes() {
    let data = iota(12);
    let out = run(
        vec![
            f32s(&[3, 4], &data),
            i64s(&[2, 2], &[2, -3, 0, 2]),
            i64s(&[3, 2], &[3, 0, -1, 1, 2, 2]),
        ],
        |b, t| {
            Ok(vec![
                gather::gather(b, "g0", &t[0], &t[1], 0)?,
                gather::gather(b, "g1", &t[0], &t[1], 1)?,
                gather::gather_elements(b, "ge", &t[0], &t[2], 1)?,
                gather::pad(b, "pc", &t[0], &[1, 0, 0, 1], gather::PadKind::Constant, -1.0)?,
                gather::pad(b, "pr", &t[0], &[0, 2, 0, 1], gather::PadKind::Reflect, 0.0)?,
                gather::pad(b, "pe", &t[0], &[0, 1, 0, -2], gather::PadKind::Edge, 0.0)?,
                gather::pad(b, "pw", &t[0], &[0, 1, 0, 1], gather::PadKind::Wrap, 0.0)?,
            ])
        },
    );
    assert_eq!(out[0].shape, vec![2, 2, 4]);
    let rows = [2usize, 0, 0, 2];
    let want: Vec<f32> = rows
        .iter()
        .flat_map(|&r| data[r * 4..r * 4 + 4].to_vec())
        .collect();
    assert_eq!(as_f32(&out[0]), want);
    assert_eq!(out[1].shape, vec![3, 2, 2]);
    let cols = [2usize, 1, 0, 2];
    let want: Vec<f32> = (0..3)
        .flat_map(|r| cols.iter().map(move |&c| (r * 4 + c) as f32))
        .collect();
    assert_eq!(as_f32(&out[1]), want);
    assert_eq!(as_f32(&out[2]), vec![3.0, 0.0, 7.0, 5.0, 10.0, 10.0]);
    let pc = as_f32(&out[3]);
    assert_eq!(out[3].shape, vec![4, 5]);
    assert_eq!(&pc[..5], &[-1.0; 5]);
    assert_eq!(&pc[5..10], &[0.0, 1.0, 2.0, 3.0, -1.0]);
    assert_eq!(&as_f32(&out[4])[..7], &[2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0]);
    assert_eq!(&as_f32(&out[5])[..3], &[0.0, 0.0, 1.0]);
    assert_eq!(&as_f32(&out[6])[..6], &[3.0, 0.0, 1.0, 2.0, 3.0, 0.0]);
}
