//! The `gemm-f32` crate behind one audited unsafe call: the portable matrix product (`cpu::mm` uses it
//! where it has no micro-kernels), LSTM/GRU steps and ConvTranspose.

use crate::error::{EngineError, Result};

/// A strided read-only matrix view: element (i, j) is `data[off + i*rs + j*cs]`.
#[derive(Clone, Copy)]
pub(crate) struct MatRef<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) off: usize,
    pub(crate) rs: usize,
    pub(crate) cs: usize,
}

impl MatRef<'_> {
    /// The same elements read as the transposed matrix.
    fn transposed(self) -> Self {
        MatRef {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
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
        gemm_common::Parallelism::Rayon(0)
    } else {
        gemm_common::Parallelism::None
    };
    // The kernels prefer a column-major destination, so a row-major one is computed as its transpose,
    // cᵀ = bᵀ·aᵀ (the swap the `gemm` facade crate makes before it dispatches).
    let (m, n, lhs, rhs, dst_cs, dst_rs) = if ldc > 1 {
        (n, m, b.transposed(), a.transposed(), ldc, 1)
    } else {
        (m, n, a, b, 1, ldc)
    };
    // SAFETY: every element the call reads or writes lies inside the slices: the largest offsets
    // touched are off + (rows-1)*rs + (cols-1)*cs, checked above against each slice's length; strides
    // are non-negative and fit isize because they index existing slices. `c` is borrowed mutably and
    // does not alias `a`/`b` (distinct borrows).
    #[allow(unsafe_code)]
    unsafe {
        gemm_f32::gemm::f32::get_gemm_fn()(
            m,
            n,
            k,
            c.as_mut_ptr(),
            dst_cs as isize,
            dst_rs as isize,
            accumulate,
            lhs.data.as_ptr().add(lhs.off),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr().add(rhs.off),
            rhs.cs as isize,
            rhs.rs as isize,
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
