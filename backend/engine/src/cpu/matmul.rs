//! MatMul (numpy semantics, broadcast batch dims) and Gemm of f32 data on the tiled product of
//! `cpu::mm`, with the epilogue fused; constant right-hand sides come packed from the plan.

use rayon::prelude::*;

use crate::cpu::arena;
use crate::cpu::epilogue::Epi;
use crate::cpu::gemm::MatRef;
use crate::cpu::mm::{self, BOp, DenseB, Init, PackedA, PackedB};
use crate::cpu::simd::Isa;
use crate::error::{EngineError, Result};

/// Products smaller than this (multiply-adds) run whole on one thread, several at a time.
const SMALL: usize = 64 * 64 * 64;

/// Row and column strides of a stored matrix with `cols_stored` columns, read with its last two
/// dims swapped when `trans`.
fn strides(cols_stored: usize, trans: bool) -> (usize, usize) {
    if trans { (1, cols_stored) } else { (cols_stored, 1) }
}

/// A constant right-hand side `b` (stored `[K, N]`, or `[N, K]` when `trans`) packed for `isa`.
pub(crate) fn pack_rhs(b: &[f32], sb: &[usize], trans: bool, isa: Isa) -> Result<PackedB> {
    let [r, c] = sb else {
        return Err(EngineError::internal(format!(
            "pack_rhs: a 2-D matrix expected, got {sb:?}"
        )));
    };
    let (k, n) = if trans { (*c, *r) } else { (*r, *c) };
    let (rs, cs) = strides(*c, trans);
    PackedB::pack(
        MatRef {
            data: b,
            off: 0,
            rs,
            cs,
        },
        k,
        n,
        1.0,
        isa,
    )
}

/// Rows of A per product when a product has many: packing all of A at once (12 MiB for BERT-base
/// at batch 8) writes it out of the caches before the tiles read it back, and the output rows each
/// task keeps outgrow L2. Blocks of rows keep both cache-sized, as a batch-1 request's are.
const ROW_BLOCK: usize = 192;

/// `0..m` in blocks of [`ROW_BLOCK`] rows (one block when `m` is at most twice that).
fn row_blocks(m: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let block = if m <= 2 * ROW_BLOCK { m.max(1) } else { ROW_BLOCK };
    (0..m).step_by(block).map(move |r| r..(r + block).min(m))
}

/// Batched numpy MatMul of f32 data with broadcast batch dims, then `epi` (rows of the output's
/// last dim). `sa`/`sb` are the (≥2-D, already promoted) shapes; `trans_*` swap the last two dims
/// of the operand. `packed_b`: b packed by [`pack_rhs`] (a 2-D constant), if available.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_f32(
    a: &[f32],
    sa: &[usize],
    trans_a: bool,
    b: &[f32],
    sb: &[usize],
    trans_b: bool,
    batch_out: &[usize],
    epi: &Epi<'_>,
    packed_b: Option<&PackedB>,
) -> Result<Vec<f32>> {
    let isa = crate::cpu::simd::isa();
    let (ra, rb) = (sa.len(), sb.len());
    let (ar, ac) = (sa[ra - 2], sa[ra - 1]);
    let (br, bc) = (sb[rb - 2], sb[rb - 1]);
    let (m, k) = if trans_a { (ac, ar) } else { (ar, ac) };
    let n = if trans_b { br } else { bc };
    let (a_rs, a_cs) = strides(ac, trans_a);
    let (b_rs, b_cs) = strides(bc, trans_b);
    let nb: usize = batch_out.iter().product();
    // every element is written by the products below
    let mut out = arena::take(nb * m * n);
    if out.is_empty() {
        return Ok(out);
    }
    let a_batch: usize = sa[..ra - 2].iter().product();
    let b_batch: usize = sb[..rb - 2].iter().product();
    let packed_b = packed_b.filter(|p| b_batch == 1 && p.k() == k && p.n() == n);
    let product = |oa: usize, ob: usize, rows: usize, c: &mut [f32], row0: usize, par: bool| -> Result<()> {
        let am = MatRef {
            data: a,
            off: oa,
            rs: a_rs,
            cs: a_cs,
        };
        let pa = PackedA::pack(am, rows, k, 1.0, isa)?;
        let tail = epi.offset(row0);
        match packed_b {
            Some(pb) => mm::gemm(&pa, BOp::Packed(pb), c, n, Init::Zero, &tail, par)?,
            None => {
                let bm = MatRef {
                    data: b,
                    off: ob,
                    rs: b_rs,
                    cs: b_cs,
                };
                let src = DenseB::new(bm, k, n)?;
                mm::gemm(&pa, BOp::Src { src: &src, k, n }, c, n, Init::Zero, &tail, par)?;
            }
        }
        pa.recycle();
        Ok(())
    };
    // [batch.., M, K] x [K, N] with a plain (untransposed) A: one big product, by blocks of rows.
    if b_batch == 1 && !trans_a && a_batch == nb {
        for rows in row_blocks(nb * m) {
            let c = &mut out[rows.start * n..rows.end * n];
            product(rows.start * a_rs, 0, rows.len(), c, rows.start, true)?;
        }
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
    // Many products (attention's heads × batch) run one per task: a fork-join inside each small
    // product costs more than it splits, and the heads balance over the threads by themselves.
    let per_task = m * n * k < SMALL || nb >= 2 * rayon::current_num_threads();
    if per_task && nb > 1 {
        out.par_chunks_mut(m * n).enumerate().try_for_each(|(bi, c)| {
            let (oa, ob) = offsets(bi);
            product(oa, ob, m, c, bi * m, false)
        })?;
    } else {
        for (bi, c) in out.chunks_mut(m * n).enumerate() {
            let (oa, ob) = offsets(bi);
            product(oa, ob, m, c, bi * m, true)?;
        }
    }
    Ok(out)
}

/// How Gemm's C enters: `beta · C` broadcast to `[m, n]`.
pub(crate) enum GemmC<'a> {
    /// no C (or beta = 0)
    None,
    /// C and its shape, scaled by beta
    Some(&'a [f32], &'a [usize], f32),
}

/// Gemm of f32 data: `y = alpha·op(a)·op(b) + beta·c`, then `epi`. `packed_b`: b packed by
/// [`pack_rhs`] (with `trans_b`), if available.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_f32(
    alpha: f32,
    a: &[f32],
    sa: &[usize],
    trans_a: bool,
    b: &[f32],
    sb: &[usize],
    trans_b: bool,
    c: GemmC<'_>,
    out: [usize; 2],
    epi: &Epi<'_>,
    packed_b: Option<&PackedB>,
) -> Result<Vec<f32>> {
    let isa = crate::cpu::simd::isa();
    let [m, n] = out;
    let k = if trans_a { sa[0] } else { sa[1] };
    let (a_rs, a_cs) = strides(sa[1], trans_a);
    // every element is written: by C below (Init::Acc) or by the product
    let mut y = arena::take(m * n);
    let scaled;
    let init = match c {
        GemmC::None => Init::Zero,
        GemmC::Some(cv, sc, beta) => {
            let full = crate::cpu::movement::expand(cv, sc, &[m, n]);
            let per_col = sc.len() < 2 || sc[0] == 1;
            let per_row = sc.len() == 2 && sc[1] == 1 && n > 1;
            if per_col {
                scaled = full[..n].iter().map(|v| v * beta).collect::<Vec<f32>>();
                Init::Col(&scaled)
            } else if per_row {
                scaled = full.iter().step_by(n).map(|v| v * beta).collect::<Vec<f32>>();
                Init::Row(&scaled)
            } else {
                y.iter_mut().zip(&full).for_each(|(y, v)| *y = v * beta);
                Init::Acc
            }
        }
    };
    let packed_b = packed_b.filter(|p| p.k() == k && p.n() == n);
    let (b_rs, b_cs) = strides(sb[1], trans_b);
    let bm = MatRef {
        data: b,
        off: 0,
        rs: b_rs,
        cs: b_cs,
    };
    let dense;
    let bop = match packed_b {
        Some(pb) => BOp::Packed(pb),
        None => {
            dense = DenseB::new(bm, k, n)?;
            BOp::Src { src: &dense, k, n }
        }
    };
    for rows in row_blocks(m) {
        let am = MatRef {
            data: a,
            off: rows.start * a_rs,
            rs: a_rs,
            cs: a_cs,
        };
        let pa = PackedA::pack(am, rows.len(), k, alpha, isa)?;
        let init = match init {
            Init::Row(v) => Init::Row(&v[rows.clone()]),
            other => other,
        };
        let tail = epi.offset(rows.start);
        let c = &mut y[rows.start * n..rows.end * n];
        mm::gemm(&pa, bop, c, n, init, &tail, true)?;
        pa.recycle();
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::ir::Epilogue;

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len).map(|i| ((i * seed) % 13) as f32 / 8.0 - 0.75).collect()
    }

    fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut y = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                y[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        y
    }

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "element {i}: {g} vs {w}");
        }
    }

    /// Products with more rows than one block (batch 8 of a transformer's tokens) run block by
    /// block: every row, its C value and the batch entries a block boundary cuts through match.
    #[test]
    fn products_of_many_rows_run_by_blocks_and_match() {
        let (m, k, n) = (2 * ROW_BLOCK + 37, 40, 24);
        let (a, b) = (values(m * k, 7), values(k * n, 5));
        let want = naive(&a, &b, m, k, n);
        let epi = Epi::new(&Epilogue::default(), &[], &[m, n], 1).unwrap();
        // Gemm: y = 0.5·a·b + 2·c with one c per row
        let c: Vec<f32> = (0..m).map(|i| i as f32).collect();
        let y = gemm_f32(
            0.5,
            &a,
            &[m, k],
            false,
            &b,
            &[k, n],
            false,
            GemmC::Some(&c, &[m, 1], 2.0),
            [m, n],
            &epi,
            None,
        )
        .unwrap();
        let expect: Vec<f32> = want
            .iter()
            .enumerate()
            .map(|(i, w)| 0.5 * w + 2.0 * c[i / n])
            .collect();
        close(&y, &expect);
        // MatMul [3, m/3, k] × [k, n]: blocks cross the batch entries
        let per = m / 3;
        let y = matmul_f32(
            &a[..3 * per * k],
            &[3, per, k],
            false,
            &b,
            &[k, n],
            false,
            &[3],
            &epi,
            None,
        )
        .unwrap();
        close(&y, &want[..3 * per * n]);
    }
}
