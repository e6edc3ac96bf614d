//! The quantization kernels against values worked out by hand from the ONNX definitions.

use super::igemm::{ConvGeom, Taps, conv_i32, igemm};
use super::linear::{
    Layout, dequantize, dequantize_8bit, dequantize_i8_run, dequantize_run, dequantize_u8_run,
    dynamic_quantize, int_buf, quantize, quantize_8bit, quantize_bytes_run, quantize_dequantize,
    quantize_dequantize_run, quantize_one, quantize_run, quotient, range_with_zero_run, reciprocal,
    round_saturate,
};
use crate::cpu::Buf;
use crate::cpu::elementwise::PAR_MIN;
use crate::cpu::simd::all_available;
use crate::tensor::DataType;

#[test]
fn quantize_rounds_half_to_even_and_saturates() {
    // x / 2 = 0.5, 1.5, 2.5, -0.5, -1.5, 300, -300, NaN
    let x = [1.0, 3.0, 5.0, -1.0, -3.0, 600.0, -600.0, f32::NAN];
    let y = quantize(&x, &[2.0], Some(&[10]), Layout::PerTensor, (0, 255));
    assert_eq!(y, [10, 12, 12, 10, 8, 255, 0, 0]);
    let y = quantize(&x, &[2.0], None, Layout::PerTensor, (-128, 127));
    assert_eq!(y, [0, 2, 2, 0, -2, 127, -128, 0]);
}

#[test]
fn per_axis_and_blocked_layouts_pick_the_right_parameter() {
    // x [2, 4]: per-axis on axis 1 gives each column its scale
    let layout = Layout::new(&[2, 4], &[4], 1, 0, "scale").unwrap();
    let y = quantize(&[8.0; 8], &[1.0, 2.0, 4.0, 8.0], None, layout, (0, 255));
    assert_eq!(y, [8, 4, 2, 1, 8, 4, 2, 1]);
    // blocks of 2 along axis 1: scale [2, 2]
    let layout = Layout::new(&[2, 4], &[2, 2], 1, 2, "scale").unwrap();
    let y = quantize(&[8.0; 8], &[1.0, 2.0, 4.0, 8.0], None, layout, (0, 255));
    assert_eq!(y, [8, 8, 4, 4, 2, 2, 1, 1]);
    // a ragged last block (3 columns, blocks of 2 → 2 blocks)
    let layout = Layout::new(&[1, 3], &[1, 2], 1, 2, "scale").unwrap();
    assert_eq!(
        dequantize(&[1, 1, 1], &[1.0, 3.0], Some(&[0, 1]), layout, true),
        [1.0, 1.0, 0.0]
    );
}

#[test]
fn layouts_refuse_parameters_that_do_not_fit_naming_the_expected_shape() {
    let e = Layout::new(&[2, 4], &[3], 1, 0, "y_scale")
        .unwrap_err()
        .to_string();
    assert!(e.contains("y_scale") && e.contains("[4]"), "{e}");
    let e = Layout::new(&[2, 4], &[2, 3], 1, 2, "y_scale")
        .unwrap_err()
        .to_string();
    assert!(e.contains("[2, 2]"), "{e}");
}

#[test]
fn dequantize_int32_bias_leaves_no_overflow() {
    let y = dequantize(&[i32::MAX, -5], &[0.5], Some(&[-5]), Layout::PerTensor, false);
    assert_eq!(y, [(i64::from(i32::MAX) + 5) as f32 * 0.5, 0.0]);
}

#[test]
fn dynamic_quantize_follows_the_onnx_formula() {
    // the ONNX example: x = [0, 2, -3, -2.5, 1.34, 0.5] → scale 5/255, zero point 153
    let (y, scale, zp) = dynamic_quantize(&[0.0, 2.0, -3.0, -2.5, 1.34, 0.5]);
    assert!((scale - 5.0 / 255.0).abs() < 1e-7);
    assert_eq!(zp, 153);
    assert_eq!(y, [153, 255, 0, 26, 221, 179]);
    // all zeros: scale 1, zero point 0 (no division by zero)
    assert_eq!(dynamic_quantize(&[0.0, 0.0]), (vec![0, 0], 1.0, 0));
}

#[test]
fn dynamic_quantize_of_a_large_input_split_over_threads_follows_the_formula() {
    // a tensor read in pieces on several threads: its minimum in the first piece, its maximum in the last
    // (a partial one), a NaN and all-positive pieces in between, which must neither narrow nor widen the range
    let n = 3 * PAR_MIN + 5;
    let mut x: Vec<f32> = (0..n).map(|i| 0.25 + (i % 97) as f32 / 97.0).collect();
    x[7] = -3.0;
    x[n - 1] = 6.5;
    x[PAR_MIN] = f32::NAN;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    let (y, scale, zp) = pool.install(|| dynamic_quantize(&x));
    assert_eq!(scale, 9.5 / 255.0);
    let want_zp = (3.0 / scale).round_ties_even();
    assert_eq!(zp, want_zp as u8);
    for (i, (&v, &q)) in x.iter().zip(&y).enumerate() {
        if v.is_nan() {
            continue;
        }
        let want = ((v / scale).round_ties_even() + want_zp).clamp(0.0, 255.0) as u8;
        assert_eq!(q, want, "value {i} ({v})");
    }
}

#[test]
fn eight_bit_codes_of_a_large_tensor_split_over_threads_are_the_values_of_the_general_path() {
    // per tensor, 3½ pieces on a 4-thread pool, each piece with its own values at its edges
    let n = 3 * PAR_MIN + PAR_MIN / 2;
    let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1001) as f32 * 0.5 - 250.0).collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
    for (dtype, range, zp) in [(DataType::U8, (0, 255), 3), (DataType::I8, (-128, 127), -7)] {
        let layout = Layout::PerTensor;
        let want = int_buf(dtype, quantize(&x, &[0.75], Some(&[zp]), layout, range)).unwrap();
        let got = pool.install(|| quantize_8bit(&x, &[0.75], Some(&[zp]), layout, dtype).unwrap());
        assert_eq!(got, want, "{dtype}");
        let values = super::linear::ints(&got, "x").unwrap();
        assert_eq!(
            pool.install(|| dequantize_8bit(&got, &[0.75], Some(&[zp]), layout).unwrap()),
            dequantize(&values, &[0.75], Some(&[zp]), layout, true),
            "{dtype}"
        );
    }
}

#[test]
fn igemm_matches_a_naive_product_on_both_paths() {
    for (m, k, n) in [(3, 5, 4), (64, 40, 33)] {
        let a: Vec<i16> = (0..m * k).map(|i| ((i * 37) % 511) as i16 - 255).collect();
        let b: Vec<i16> = (0..k * n).map(|i| ((i * 53) % 511) as i16 - 255).collect();
        let mut c = vec![7; m * n];
        igemm(m, k, n, &a, &b, &mut c);
        for i in 0..m {
            for j in 0..n {
                let want: i32 = (0..k)
                    .map(|p| i32::from(a[i * k + p]) * i32::from(b[p * n + j]))
                    .sum();
                assert_eq!(c[i * n + j], want, "[{i}, {j}] of {m}×{k}×{n}");
            }
        }
    }
}

#[test]
fn conv_i32_pads_with_zero_and_honours_groups_strides_dilations() {
    // x [1, 2, 3, 3] = 1..18, two groups, w [2, 1, 2, 2] = all ones, pad 1, stride 2, dilation 2
    let x: Vec<i16> = (1..=18).collect();
    let w = vec![1i16; 8];
    let g = ConvGeom {
        n: 1,
        c: 2,
        m: 2,
        group: 2,
        input: vec![3, 3],
        kernel: vec![2, 2],
        output: vec![2, 2],
        strides: vec![2, 2],
        pad_begin: vec![1, 1],
        dilations: vec![2, 2],
    };
    let y = conv_i32(&x, &w, &g);
    // output (0,0) reads padded rows/cols -1 and 1: only x[1][1]; (0,1) reads cols 1 and 3 → x[1][1];
    // (1,1) reads rows 1,3 and cols 1,3 → x[1][1]; (1,0) likewise; channel 1 adds 9 to each.
    assert_eq!(y, [5, 5, 5, 5, 14, 14, 14, 14]);
}

#[test]
fn vector_quantization_matches_the_definition_on_every_instruction_set() {
    // ties at every half step, values past both ends, infinities and NaN, with a zero point
    let mut x: Vec<f32> = (-700..700).map(|i| i as f32 * 0.25).collect();
    x.extend([
        1e30,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -0.0,
        8_388_609.0,
    ]);
    for (scale, zp, range) in [
        (0.5, 3, (0, 255)),
        (0.25, -7, (-128, 127)),
        (0.01, 100, (-32768, 32767)),
    ] {
        let want: Vec<i32> = x
            .iter()
            .map(|&v| {
                ((v / scale).round_ties_even() + zp as f32).clamp(range.0 as f32, range.1 as f32) as i32
            })
            .collect();
        for isa in all_available() {
            let mut y = vec![0; x.len()];
            quantize_run(isa, &x, &mut y, scale, zp, range);
            assert_eq!(y, want, "{isa:?}, scale {scale}, zero point {zp}");
            let mut back = vec![0.0; y.len()];
            dequantize_run(isa, &y, &mut back, scale, zp);
            let exact: Vec<f32> = y.iter().map(|&q| (q - zp) as f32 * scale).collect();
            assert_eq!(back, exact, "{isa:?}");
        }
    }
}

#[test]
fn eight_bit_codes_are_the_values_of_the_general_path() {
    // ties, both ends, NaN; per tensor, per axis (4 columns) and in blocks of 3 along the columns
    let mut x: Vec<f32> = (-30..30).map(|i| i as f32 * 2.5).collect();
    x.extend([f32::NAN, 1e9, -1e9, -0.0]);
    let shape = [8, 8];
    let layouts = [
        (Layout::PerTensor, vec![0.5], vec![3]),
        (
            Layout::new(&shape, &[8], 1, 0, "s").unwrap(),
            (1..=8).map(|i| i as f32 * 0.75).collect(),
            (0..8).collect(),
        ),
        (
            Layout::new(&shape, &[8, 3], 1, 3, "s").unwrap(),
            (1..=24).map(|i| i as f32 * 0.5).collect(),
            vec![-2; 24],
        ),
    ];
    for (layout, scale, zp) in &layouts {
        for (dtype, range) in [(DataType::U8, (0, 255)), (DataType::I8, (-128, 127))] {
            let want = int_buf(dtype, quantize(&x, scale, Some(zp), *layout, range)).unwrap();
            let got = quantize_8bit(&x, scale, Some(zp), *layout, dtype).unwrap();
            assert_eq!(got, want, "{layout:?} {dtype}");
            let values = super::linear::ints(&got, "x").unwrap();
            assert_eq!(
                dequantize_8bit(&got, scale, Some(zp), *layout).unwrap(),
                dequantize(&values, scale, Some(zp), *layout, true),
                "{layout:?} {dtype}"
            );
        }
    }
    assert!(quantize_8bit(&x, &[1.0], None, Layout::PerTensor, DataType::U16).is_none());
    assert!(dequantize_8bit(&Buf::I32(vec![1]), &[1.0], None, Layout::PerTensor).is_none());
}

#[test]
fn eight_bit_runs_match_the_i32_runs_on_every_instruction_set() {
    let x: Vec<f32> = (-700..700)
        .map(|i| i as f32 * 0.25)
        .chain([f32::NAN, f32::INFINITY])
        .collect();
    for isa in all_available() {
        let mut want = vec![0; x.len()];
        quantize_run(isa, &x, &mut want, 0.5, 3, (0, 255));
        let mut u = vec![0u8; x.len()];
        quantize_bytes_run(isa, &x, &mut u, 0.5, 3, (0, 255));
        assert!(u.iter().zip(&want).all(|(&a, &b)| i32::from(a) == b), "{isa:?}");
        let mut back = vec![0.0; u.len()];
        dequantize_u8_run(isa, &u, &mut back, 0.5, 3);
        assert!(
            back.iter().zip(&want).all(|(&f, &q)| f == (q - 3) as f32 * 0.5),
            "{isa:?}"
        );

        quantize_run(isa, &x, &mut want, 0.25, -7, (-128, 127));
        let mut i = vec![0i8; x.len()];
        quantize_bytes_run(isa, &x, bytemuck::cast_slice_mut(&mut i), 0.25, -7, (-128, 127));
        assert!(i.iter().zip(&want).all(|(&a, &b)| i32::from(a) == b), "{isa:?}");
        dequantize_i8_run(isa, &i, &mut back, 0.25, -7);
        assert!(
            back.iter().zip(&want).all(|(&f, &q)| f == (q + 7) as f32 * 0.25),
            "{isa:?}"
        );
    }
}

#[test]
fn quantize_dequantize_gives_the_values_of_the_pair_on_every_instruction_set() {
    let x: Vec<f32> = (-700..700)
        .map(|i| i as f32 * 0.25)
        .chain([f32::NAN, 1e30, -0.0])
        .collect();
    for (scale, zp, range) in [(0.5, 3, (0, 255)), (0.25, -7, (-128, 127))] {
        let codes = quantize(&x, &[scale], Some(&[zp]), Layout::PerTensor, range);
        let want = dequantize(&codes, &[scale], Some(&[zp]), Layout::PerTensor, true);
        assert_eq!(
            quantize_dequantize(&x, &[scale], Some(&[zp]), Layout::PerTensor, range),
            want
        );
        for isa in all_available() {
            let mut y = vec![0.0; x.len()];
            quantize_dequantize_run(isa, &x, &mut y, scale, zp, range);
            assert_eq!(y, want, "{isa:?}");
        }
    }
    // a tensor large enough to be split over the pool's threads
    let big: Vec<f32> = (0..100_003).map(|i| (i % 2001) as f32 * 0.37 - 370.0).collect();
    let codes = quantize(&big, &[0.7], Some(&[-4]), Layout::PerTensor, (-128, 127));
    assert_eq!(
        quantize_dequantize(&big, &[0.7], Some(&[-4]), Layout::PerTensor, (-128, 127)),
        dequantize(&codes, &[0.7], Some(&[-4]), Layout::PerTensor, true)
    );
    // per axis: each row its own scale and zero point
    let layout = Layout::new(&[4, 350], &[4], 0, 0, "s").unwrap();
    let (scales, zps) = ([0.5, 1.0, 0.125, 2.0], [0, 5, -5, 100]);
    let codes = quantize(&x[..1400], &scales, Some(&zps), layout, (-128, 127));
    assert_eq!(
        quantize_dequantize(&x[..1400], &scales, Some(&zps), layout, (-128, 127)),
        dequantize(&codes, &scales, Some(&zps), layout, true)
    );
}

#[test]
fn depthwise_integer_convolution_matches_the_grouped_reference() {
    use super::qdepthwise::{applies, depthwise_q};
    use super::qgemm::Codes;
    // strides, pads (wider than the kernel reaches too), dilations, a one-row input, batch 2
    let cases = [
        ([5, 7], [3, 3], [1, 1], [1, 1], [1, 1]),
        ([6, 9], [3, 3], [2, 1], [1, 1], [1, 1]),
        ([6, 9], [5, 5], [2, 2], [2, 2], [1, 1]),
        ([7, 8], [3, 3], [1, 2], [2, 3], [2, 2]),
        ([1, 12], [1, 3], [1, 1], [0, 1], [1, 1]),
        ([7, 11], [3, 5], [3, 3], [1, 2], [1, 1]),
        ([5, 10], [3, 3], [2, 2], [0, 0], [1, 2]),
    ];
    for (input, kernel, strides, pads, dilations) in cases {
        let (n, c) = (2, 3);
        let output: Vec<usize> = (0..2)
            .map(|d| (input[d] + 2 * pads[d] - dilations[d] * (kernel[d] - 1) - 1) / strides[d] + 1)
            .collect();
        let g = ConvGeom {
            n,
            c,
            m: c,
            group: c,
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            output,
            strides: strides.to_vec(),
            pad_begin: pads.to_vec(),
            dilations: dilations.to_vec(),
        };
        assert!(applies(&g));
        let x_len = n * c * input[0] * input[1];
        let w_len = c * kernel[0] * kernel[1];
        let xu: Vec<u8> = (0..x_len).map(|i| ((i * 37 + 11) % 256) as u8).collect();
        let wi: Vec<i8> = (0..w_len).map(|i| ((i * 53) % 256) as u8 as i8).collect();
        let (x_zp, w_zp) = (121, [-3, 0, 17]);
        let got = depthwise_q(Codes::u8(&xu), x_zp, Codes::i8(&wi), &w_zp, &g);
        let xc: Vec<i16> = xu.iter().map(|&v| (i32::from(v) - x_zp) as i16).collect();
        let wc: Vec<i16> = wi
            .iter()
            .enumerate()
            .map(|(i, &v)| (i32::from(v) - w_zp[i / (kernel[0] * kernel[1])]) as i16)
            .collect();
        assert_eq!(
            got,
            conv_i32(&xc, &wc, &g),
            "input {input:?} kernel {kernel:?} strides {strides:?}"
        );
        // INT8 input, UINT8 weights, one weight zero point
        let xi: Vec<i8> = xu.iter().map(|&v| v as i8).collect();
        let wu: Vec<u8> = wi.iter().map(|&v| v as u8).collect();
        let got = depthwise_q(Codes::i8(&xi), -5, Codes::u8(&wu), &[128], &g);
        let xc: Vec<i16> = xi.iter().map(|&v| (i32::from(v) + 5) as i16).collect();
        let wc: Vec<i16> = wu.iter().map(|&v| (i32::from(v) - 128) as i16).collect();
        assert_eq!(got, conv_i32(&xc, &wc, &g), "signed input {input:?}");
    }
}

#[test]
fn the_range_of_a_dynamic_quantization_holds_zero_and_skips_nan_on_every_instruction_set() {
    for n in [0, 5, 16, 37, 1000] {
        let x: Vec<f32> = (0..n).map(|i| ((i * 29) % 97) as f32 * 0.5 + 3.0).collect();
        let want_hi = x.iter().copied().fold(0f32, f32::max);
        let mut with_nan = x.clone();
        with_nan.push(f32::NAN);
        let neg: Vec<f32> = x.iter().map(|v| -v).collect();
        for isa in all_available() {
            assert_eq!(range_with_zero_run(isa, &x), (0.0, want_hi), "{isa:?} n {n}");
            assert_eq!(
                range_with_zero_run(isa, &with_nan),
                (0.0, want_hi),
                "{isa:?} n {n} NaN"
            );
            assert_eq!(
                range_with_zero_run(isa, &neg),
                (-want_hi, 0.0),
                "{isa:?} n {n} negative"
            );
        }
    }
}

/// The 2-D im2col rows (filled output row by output row) against the N-d table, the same window
/// with a leading axis of 1: strides, dilations, one-sided and wide padding, taps wholly outside.
#[test]
fn plane_im2col_rows_match_the_nd_table() {
    // (input, kernel, strides, pads before, dilations)
    let cases = [
        ([7, 9], [3, 3], [1, 1], [1, 1], [1, 1]),
        ([48, 192], [3, 3], [2, 2], [1, 1], [1, 1]),
        ([6, 5], [2, 3], [2, 1], [1, 0], [2, 2]),
        ([5, 4], [5, 5], [1, 3], [4, 4], [1, 1]),
        ([2, 3], [3, 3], [1, 1], [2, 2], [2, 2]),
    ];
    for (input, kernel, strides, pads, dilations) in cases {
        let output: Vec<usize> = (0..2)
            .map(|d| (input[d] + 2 * pads[d] - dilations[d] * (kernel[d] - 1) - 1) / strides[d] + 1)
            .collect();
        let with_lead = |lead: &[usize], v: &[usize]| [lead, v].concat();
        let plane = ConvGeom {
            n: 1,
            c: 1,
            m: 1,
            group: 1,
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            output: output.clone(),
            strides: strides.to_vec(),
            pad_begin: pads.to_vec(),
            dilations: dilations.to_vec(),
        };
        let nd = ConvGeom {
            input: with_lead(&[1], &input),
            kernel: with_lead(&[1], &kernel),
            output: with_lead(&[1], &output),
            strides: with_lead(&[1], &strides),
            pad_begin: with_lead(&[0], &pads),
            dilations: with_lead(&[1], &dilations),
            ..plane.clone()
        };
        let (a, b) = (Taps::new(&plane), Taps::new(&nd));
        assert!(matches!(a, Taps::Plane(_)) && matches!(b, Taps::Table { .. }));
        let xc: Vec<i32> = (0..input[0] * input[1]).map(|v| v as i32 + 1).collect();
        let out_size = output[0] * output[1];
        for kp in 0..kernel[0] * kernel[1] {
            let (mut got, mut want) = (vec![-7; out_size], vec![-9; out_size]);
            a.fill(kp, &xc, 0, 0, &mut got);
            b.fill(kp, &xc, 0, 0, &mut want);
            assert_eq!(
                got, want,
                "input {input:?} kernel {kernel:?} strides {strides:?} pads {pads:?} tap {kp}"
            );
            // the same row filled in pieces that start and end inside output rows (a strip of
            // positions per task), from either kind of taps
            for taps in [&a, &b] {
                let mut pieces = vec![-5; out_size];
                let mut first = 0;
                for len in [1, output[1] + 1, 2, 3 * output[1] - 1].iter().cycle() {
                    if first == out_size {
                        break;
                    }
                    let len = (*len).min(out_size - first);
                    taps.fill(kp, &xc, 0, first, &mut pieces[first..first + len]);
                    first += len;
                }
                assert_eq!(pieces, want, "pieces: input {input:?} kernel {kernel:?} tap {kp}");
            }
        }
    }
}

/// Values for the quotient tests: multiples of `scale` within 2 ulps of a half-integer multiple
/// (where the rounding to a code is decided), and any bit pattern (NaN, infinities, subnormals, huge).
fn values_around_ties(scale: f32, n: usize, state: &mut u64) -> Vec<f32> {
    let mut next = || {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    };
    (0..n)
        .map(|_| {
            let r = next();
            if r % 3 == 0 {
                f32::from_bits((r >> 16) as u32)
            } else {
                let tie = ((r >> 8) % 700) as f32 - 350.0 + 0.5;
                let x = tie * scale;
                f32::from_bits(x.to_bits().wrapping_add(((r >> 40) % 5) as u32).wrapping_sub(2))
            }
        })
        .collect()
}

#[test]
fn quantizing_without_a_division_gives_the_codes_of_the_division() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    // typical scales, ones with an all-ones significand (the hardest reciprocals), and random
    // normal scales from 2⁻²⁰ to 2¹⁰
    let mut scales = vec![
        1.0 / 255.0,
        0.007_812_5,
        0.02,
        0.1,
        3.0,
        f32::from_bits(0x3f7f_ffff),
        f32::from_bits(0x3c7f_ffff),
        f32::from_bits(0x3bff_ffff),
        f32::from_bits(0x3b80_0001),
    ];
    for i in 0..40u32 {
        let bits = ((107 + i % 30) << 23) | (i.wrapping_mul(0x9E37_79B9) & 0x7f_ffff);
        scales.push(f32::from_bits(bits));
    }
    for &s in &scales {
        let inv = reciprocal(s).expect("a normal scale has a usable reciprocal");
        let x = values_around_ties(s, 60_000, &mut state);
        for &v in &x {
            let (want, got) = (v / s, quotient(v, s, inv));
            // bit for bit wherever the residual is a normal number; codes equal everywhere
            if want.is_normal() && v.abs() >= 2f32.powi(-100) {
                assert_eq!(want.to_bits(), got.to_bits(), "{v:e} / {s:e}");
            }
            for (zp, range) in [(0, (-128, 127)), (128, (0, 255))] {
                assert_eq!(
                    quantize_one(v, s, zp, range),
                    round_saturate(got, zp, range),
                    "{v:e} / {s:e}"
                );
            }
        }
        // the kernels, on every instruction set, against the division one value at a time
        for isa in all_available() {
            let (zp, range) = (3, (-128, 127));
            let want: Vec<i32> = x.iter().map(|&v| quantize_one(v, s, zp, range)).collect();
            let mut codes = vec![0; x.len()];
            quantize_run(isa, &x, &mut codes, s, zp, range);
            assert_eq!(codes, want, "{isa:?}, scale {s:e}");
            let mut bytes = vec![0u8; x.len()];
            quantize_bytes_run(isa, &x, &mut bytes, s, zp, range);
            assert!(
                bytes.iter().zip(&want).all(|(&b, &w)| b == w as u8),
                "{isa:?}, scale {s:e}"
            );
            let mut back = vec![0f32; x.len()];
            quantize_dequantize_run(isa, &x, &mut back, s, zp, range);
            assert!(
                back.iter()
                    .zip(&want)
                    .all(|(&b, &w)| b.to_bits() == ((w - zp) as f32 * s).to_bits()),
                "{isa:?}, scale {s:e}"
            );
        }
    }
    // a tiny or huge scale has no usable reciprocal: those divide
    assert_eq!(reciprocal(1e-40), None);
    assert_eq!(reciprocal(1e-20), None);
    assert_eq!(reciprocal(3e38), None);
}

#[test]
fn qlinear_add_and_mul_give_the_codes_of_the_float_graph_for_every_pair_on_every_instruction_set() {
    use super::binary::{BinaryCodes, binary_run};
    // every pair of codes, as bytes
    let (a, b): (Vec<u8>, Vec<u8>) = (0..=255u8).flat_map(|x| (0..=255u8).map(move |y| (x, y))).unzip();
    // ResNet-like scales; an output scale that saturates; scales whose products overflow f32 (the
    // loop that carries infinities and NaN); an output scale without a usable reciprocal
    let scale_sets = [
        ((0.031, 3), (0.047, 120), (0.052, 7)),
        ((0.5, 0), (0.25, 200), (1e-6, 128)),
        ((3e30, 1), (2e30, 250), (1e-10, 0)),
        ((0.1, 0), (0.1, 0), (1e-30, 0)),
    ];
    for ((sa, za), (sb, zb), (sc, zc)) in scale_sets {
        for (multiply, signed) in [(false, false), (true, false), (false, true), (true, true)] {
            let range = if signed { (-128, 127) } else { (0, 255) };
            let shift = |z: i32| if signed { z - 128 } else { z };
            let p = BinaryCodes {
                multiply,
                signed,
                a: (sa, shift(za)),
                b: (sb, shift(zb)),
                c: (sc, shift(zc)),
                range,
            };
            let value = |v: u8| if signed { i32::from(v as i8) } else { i32::from(v) };
            let want: Vec<u8> = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| {
                    let (x, y) = ((value(x) - p.a.1) as f32 * sa, (value(y) - p.b.1) as f32 * sb);
                    let v = if multiply { x * y } else { x + y };
                    let q = (v / sc).round_ties_even();
                    let q = if q.is_nan() { 0.0 } else { q };
                    ((q + p.c.1 as f32).clamp(range.0 as f32, range.1 as f32) as i32) as u8
                })
                .collect();
            for isa in all_available() {
                let mut got = vec![0u8; a.len()];
                binary_run(isa, &a, &b, &mut got, &p);
                let wrong = got.iter().zip(&want).position(|(g, w)| g != w);
                assert_eq!(wrong, None, "{isa:?} {p:?}");
            }
        }
    }
}

#[test]
fn requantizing_sums_gives_the_codes_of_the_definition_on_every_instruction_set() {
    use super::linear::Code;
    // sums around ties and both ends of the range, and past the f32 mantissa
    let mut acc: Vec<i32> = (-3000..3000).map(|v| v * 7).collect();
    acc.extend([i32::MAX, i32::MIN, 1 << 24, (1 << 24) + 1, -(1 << 24) - 3]);
    // one multiplier, one per sum; multipliers past 2⁹⁰ (the loop that carries infinities), NaN
    let per_sum: Vec<f32> = (0..acc.len()).map(|i| 0.001 + (i % 13) as f32 * 0.0125).collect();
    let huge: Vec<f32> = (0..acc.len())
        .map(|i| if i % 2 == 0 { 3e30 } else { 0.5 })
        .collect();
    let cases: [(&[f32], i32); 5] = [
        (&[0.0125], 0),
        (&[0.5], -37),
        (&per_sum, 11),
        (&huge, 5),
        (&[f32::NAN], 0),
    ];
    for (mult, bias) in cases {
        for (zp, range) in [(128, (0, 255)), (-3, (-128, 127))] {
            let want: Vec<i32> = acc
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let m = if mult.len() == 1 { mult[0] } else { mult[i] };
                    let q = (v.wrapping_add(bias) as f32 * m).round_ties_even();
                    // NaN gives the code 0, as onnxruntime's conversion does
                    if q.is_nan() {
                        return 0;
                    }
                    (q + zp as f32).clamp(range.0 as f32, range.1 as f32) as i32
                })
                .collect();
            for isa in all_available() {
                if range.0 == 0 {
                    let mut y = vec![0u8; acc.len()];
                    u8::requantize(isa, &acc, &mut y, bias, mult, zp, range);
                    let wrong = y.iter().zip(&want).position(|(&c, &w)| i32::from(c) != w);
                    assert_eq!(
                        wrong, None,
                        "{isa:?} UINT8, multiplier {:?}, bias {bias}",
                        mult[0]
                    );
                } else {
                    let mut y = vec![0i8; acc.len()];
                    i8::requantize(isa, &acc, &mut y, bias, mult, zp, range);
                    let wrong = y.iter().zip(&want).position(|(&c, &w)| i32::from(c) != w);
                    assert_eq!(wrong, None, "{isa:?} INT8, multiplier {:?}, bias {bias}", mult[0]);
                }
            }
        }
    }
}
