//! The indexed kernels against the worked examples of the ONNX operator specs.

use super::*;

#[test]
fn cumsum_covers_exclusive_and_reverse() {
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    assert_eq!(cumsum(&x, &[5], 0, false, false), [1.0, 3.0, 6.0, 10.0, 15.0]);
    assert_eq!(cumsum(&x, &[5], 0, true, false), [0.0, 1.0, 3.0, 6.0, 10.0]);
    assert_eq!(cumsum(&x, &[5], 0, false, true), [15.0, 14.0, 12.0, 9.0, 5.0]);
    assert_eq!(cumsum(&x, &[5], 0, true, true), [14.0, 12.0, 9.0, 5.0, 0.0]);
}

#[test]
fn cumsum_runs_along_the_chosen_axis_of_integers() {
    let x = [1i64, 2, 3, 4, 5, 6];
    assert_eq!(cumsum(&x, &[2, 3], 0, false, false), [1, 2, 3, 5, 7, 9]);
    assert_eq!(cumsum(&x, &[2, 3], 1, false, false), [1, 3, 6, 4, 9, 15]);
    let b = cumsum_buf(&Buf::Bool(vec![true]), &[1], 0, false, false).unwrap_err();
    assert!(b.to_string().contains("CumSum on BOOL"), "{b}");
}

#[test]
fn trilu_keeps_the_triangle_above_or_below_the_shifted_diagonal() {
    let x: Vec<i32> = (1..=9).collect();
    assert_eq!(trilu(&x, &[3, 3], true, 0), [1, 2, 3, 0, 5, 6, 0, 0, 9]);
    assert_eq!(trilu(&x, &[3, 3], true, 1), [0, 2, 3, 0, 0, 6, 0, 0, 0]);
    assert_eq!(trilu(&x, &[3, 3], false, 0), [1, 0, 0, 4, 5, 0, 7, 8, 9]);
    assert_eq!(trilu(&x, &[3, 3], false, -1), [0, 0, 0, 4, 0, 0, 7, 8, 0]);
    // every matrix of a batch, non-square
    let y: Vec<i32> = (1..=12).collect();
    assert_eq!(
        trilu(&y, &[2, 2, 3], true, 0),
        [1, 2, 3, 0, 5, 6, 7, 8, 9, 0, 11, 12]
    );
}

#[test]
fn one_hot_places_on_values_and_ignores_out_of_range_indices() {
    // indices [0, -1, 5] with depth 3 along a new last axis
    let y = one_hot(&[0, -1, 5], &[3], 1, 3, &0.0f32, &1.0);
    assert_eq!(y, [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]);
    // the new axis first: y[k][i] = on where idx[i] == k
    let y = one_hot(&[2, 0], &[2], 0, 3, &-1i64, &7);
    assert_eq!(y, [-1, 7, -1, -1, 7, -1]);
    let bad = one_hot_buf(&[0], &[1], 1, 2, &Buf::F32(vec![0.0])).unwrap_err();
    assert!(bad.to_string().contains("two elements"), "{bad}");
}

#[test]
fn gather_nd_matches_the_spec_examples() {
    let data = Buf::I32(vec![0, 1, 2, 3]);
    let y = gather_nd_buf(&data, &[2, 2], &[0, 0, 1, 1], &[2, 2], 0).unwrap();
    assert_eq!(y, Buf::I32(vec![0, 3]));
    let y = gather_nd_buf(&data, &[2, 2], &[1, 0], &[2, 1], 0).unwrap();
    assert_eq!(y, Buf::I32(vec![2, 3, 0, 1]));
    // batch_dims = 1: each batch indexes its own block
    let data = Buf::I32((0..8).collect());
    let y = gather_nd_buf(&data, &[2, 2, 2], &[1, 0], &[2, 1], 1).unwrap();
    assert_eq!(y, Buf::I32(vec![2, 3, 4, 5]));
    // negative indices count from the end; out of range is an error naming the index
    let y = gather_nd_buf(&Buf::F32(vec![5.0, 6.0]), &[2], &[-1], &[1, 1], 0).unwrap();
    assert_eq!(y, Buf::F32(vec![6.0]));
    let e = gather_nd_buf(&Buf::F32(vec![5.0, 6.0]), &[2], &[2], &[1, 1], 0).unwrap_err();
    assert!(
        e.to_string()
            .contains("GatherND index 2 is out of range for data dim 0 of size 2"),
        "{e}"
    );
}

#[test]
fn scatter_nd_replaces_or_combines_in_index_order() {
    let data = Buf::F32((1..=8).map(|v| v as f32).collect());
    let upd = Buf::F32(vec![9.0, 10.0, 11.0, 12.0]);
    let idx = [4, 3, 1, 7];
    let y = scatter_nd_buf(&data, &[8], &idx, &[4, 1], &upd, ScatterReduction::None).unwrap();
    assert_eq!(y, Buf::F32(vec![1.0, 11.0, 3.0, 10.0, 9.0, 6.0, 7.0, 12.0]));
    // duplicates accumulate
    let data = Buf::I64(vec![1, 1]);
    let upd = Buf::I64(vec![2, 3]);
    let add = scatter_nd_buf(&data, &[2], &[0, 0], &[2, 1], &upd, ScatterReduction::Add).unwrap();
    assert_eq!(add, Buf::I64(vec![6, 1]));
    let mul = scatter_nd_buf(&data, &[2], &[0, 0], &[2, 1], &upd, ScatterReduction::Mul).unwrap();
    assert_eq!(mul, Buf::I64(vec![6, 1]));
    let max = scatter_nd_buf(&data, &[2], &[1, 1], &[2, 1], &upd, ScatterReduction::Max).unwrap();
    assert_eq!(max, Buf::I64(vec![1, 3]));
    // whole rows of a 2-D tensor
    let data = Buf::I32(vec![0; 6]);
    let upd = Buf::I32(vec![1, 2, 3]);
    let y = scatter_nd_buf(&data, &[2, 3], &[1], &[1, 1], &upd, ScatterReduction::None).unwrap();
    assert_eq!(y, Buf::I32(vec![0, 0, 0, 1, 2, 3]));
}

#[test]
fn scatter_elements_replaces_along_the_axis_and_combines_duplicates() {
    // the spec's example 1: axis 0, indices [[1, 0, 2], [0, 2, 1]] into zeros [3, 3]
    let data = Buf::F32(vec![0.0; 9]);
    let upd = Buf::F32(vec![1.0, 1.1, 1.2, 2.0, 2.1, 2.2]);
    let idx = [1, 0, 2, 0, 2, 1];
    let y = scatter_elements_buf(&data, &[3, 3], &idx, &[2, 3], &upd, 0, ScatterReduction::None).unwrap();
    assert_eq!(y, Buf::F32(vec![2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]));
    // axis 1 with a negative index and a duplicate that adds
    let data = Buf::I64(vec![1, 2, 3, 4, 5]);
    let upd = Buf::I64(vec![10, 20, 30]);
    let add = scatter_elements_buf(
        &data,
        &[1, 5],
        &[1, -2, 1],
        &[1, 3],
        &upd,
        1,
        ScatterReduction::Add,
    )
    .unwrap();
    assert_eq!(add, Buf::I64(vec![1, 42, 3, 24, 5]));
    let bad = scatter_elements_buf(
        &data,
        &[1, 5],
        &[5],
        &[1, 1],
        &Buf::I64(vec![1]),
        1,
        ScatterReduction::None,
    );
    assert!(bad.unwrap_err().to_string().contains("out of range"));
}

#[test]
fn non_zero_lists_coordinates_per_dim() {
    let (shape, v) = non_zero(&Buf::I32(vec![1, 0, 1, 1]), &[2, 2]).unwrap();
    assert_eq!(shape, [2, 3]);
    assert_eq!(v, [0, 1, 1, 0, 0, 1]);
    let (shape, v) = non_zero(&Buf::Bool(vec![false, false]), &[2]).unwrap();
    assert_eq!(shape, [1, 0]);
    assert!(v.is_empty());
}
