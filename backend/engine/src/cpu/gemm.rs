//! Matrix products on top of the `gemm` crate: one audited unsafe call, batched MatMul, Gemm.

use rayon::prelude::*;

use crate::error::{EngineError, Result};

/// A strided read-only matrix view: element (i, j) is `data[off + i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub(crate) struct MatRef<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) off: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

fn max_index(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        (rows - 1) * rs + (cols - 1) * cs
    }
}

/// `c[m×n] (row-major, row stride ldc) = alpha·a·b + (accumulate ? c : 0)`.
/// Panics never: bounds are checked before the raw call.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: MatRef<'_>,
    b: MatRef<'_>,
    c: &mut [f32],
    ldc: usize,
    alpha: f32,
    accumulate: bool,
    parallel: bool,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                c[i * ldc..i * ldc + n].fill(0.0);
            }
        }
        return Ok(());
    }
    let a_ok = a.off + max_index(m, k, a.rs, a.cs) < a.data.len();
    let b_ok = b.off + max_index(k, n, b.rs, b.cs) < b.data.len();
    let c_ok = ldc >= n && max_index(m, n, ldc, 1) < c.len();
    if !(a_ok && b_ok && c_ok) {
        return Err(EngineError::internal(format!(
            "gemm bounds: m={m} n={n} k={k} a={}+{}x{} b={}+{}x{} c={} ldc={ldc}",
            a.off,
            a.rs,
            a.cs,
            b.off,
            b.rs,
            b.cs,
            c.len()
        )));
    }
    let par = if parallel {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: every element the call reads or writes lies inside the slices: the largest offsets
    // touched are off + (rows-1)*rs + (cols-1)*cs, checked above against each slice's length; strides
    // are non-negative and fit isize because they index existing slices. `c` is borrowed mutably and
    // does not alias `a`/`b` (distinct borrows).
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.data.as_ptr().add(a.off),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr().add(b.off),
            b.cs as isize,
            b.rs as isize,
            1.0,
            alpha,
            false,
            false,
            false,
            par,
        );
    }
    Ok(())
}

/// Batched numpy MatMul of f32 data with broadcast batch dims. `sa`/`sb` are the (≥2-D, already
/// promoted) shapes; `trans_*` swap the last two dims of the operand.
pub(crate) fn matmul_f32(
    a: &[f32],
    sa: &[usize],
    trans_a: bool,
    b: &[f32],
    sb: &[usize],
    trans_b: bool,
    batch_out: &[usize],
) -> Result<Vec<f32>> {
    let (ra, rb) = (sa.len(), sb.len());
    let (ar, ac) = (sa[ra - 2], sa[ra - 1]);
    let (br, bc) = (sb[rb - 2], sb[rb - 1]);
    let (m, k) = if trans_a { (ac, ar) } else { (ar, ac) };
    let n = if trans_b { br } else { bc };
    let (a_rs, a_cs) = if trans_a { (1, ac) } else { (ac, 1) };
    let (b_rs, b_cs) = if trans_b { (1, bc) } else { (bc, 1) };
    let nb: usize = batch_out.iter().product();
    let mut out = vec![0f32; nb * m * n];
    let a_batch: usize = sa[..ra - 2].iter().product();
    let b_batch: usize = sb[..rb - 2].iter().product();
    // [batch.., M, K] x [K, N] with a plain (untransposed) A: one big GEMM.
    if b_batch == 1 && !trans_a && a_batch == nb {
        sgemm(
            nb * m,
            n,
            k,
            MatRef {
                data: a,
                off: 0,
                rs: a_rs,
                cs: a_cs,
            },
            MatRef {
                data: b,
                off: 0,
                rs: b_rs,
                cs: b_cs,
            },
            &mut out,
            n,
            1.0,
            false,
            true,
        )?;
        return Ok(out);
    }
    let bo = batch_out.len();
    let sta = crate::cpu::elementwise::bstrides(&sa[..ra - 2], batch_out);
    let stb = crate::cpu::elementwise::bstrides(&sb[..rb - 2], batch_out);
    let offsets = |bi: usize| {
        let mut rem = bi;
        let (mut oa, mut ob) = (0, 0);
        for d in (0..bo).rev() {
            let i = rem % batch_out[d];
            rem /= batch_out[d];
            oa += i * sta[d];
            ob += i * stb[d];
        }
        (oa * ar * ac, ob * br * bc)
    };
    let small = m * n * k < 64 * 64 * 64;
    if small && nb > 1 {
        out.par_chunks_mut(m * n).enumerate().try_for_each(|(bi, c)| {
            let (oa, ob) = offsets(bi);
            sgemm(
                m,
                n,
                k,
                MatRef {
                    data: a,
                    off: oa,
                    rs: a_rs,
                    cs: a_cs,
                },
                MatRef {
                    data: b,
                    off: ob,
                    rs: b_rs,
                    cs: b_cs,
                },
                c,
                n,
                1.0,
                false,
                false,
            )
        })?;
    } else {
        for (bi, c) in out.chunks_mut(m * n).enumerate() {
            let (oa, ob) = offsets(bi);
            sgemm(
                m,
                n,
                k,
                MatRef {
                    data: a,
                    off: oa,
                    rs: a_rs,
                    cs: a_cs,
                },
                MatRef {
                    data: b,
                    off: ob,
                    rs: b_rs,
                    cs: b_cs,
                },
                c,
                n,
                1.0,
                false,
                true,
            )?;
        }
    }
    Ok(out)
}
