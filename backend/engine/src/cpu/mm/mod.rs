//! Matrix products with fused epilogues: `C = init + A·B`, then an element-wise tail applied to each
//! register tile while it is still in L1.
//!
//! A is packed into panels of `MR` rows ([`PackedA`]; at plan time for Conv weights), B into panels
//! of `NR` columns, either once ([`PackedB`]; at plan time for MatMul/Gemm weights) or one
//! `KC × NR` block at a time from a [`BSource`] (a strided matrix, or an image read as its im2col
//! matrix without building it). x86-64 uses the AVX-512/AVX2 micro-kernels of `x86.rs`; other CPUs
//! (and `INFERGATE_CPU_ISA=scalar`) the `gemm` crate followed by a pass over the rows.
//!
//! Work is split over tiles of C on the caller's rayon pool when `par` is set.

#[cfg(target_arch = "x86_64")]
mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_act;

#[cfg(test)]
mod tests;

use rayon::prelude::*;

use crate::cpu::arena;
use crate::cpu::epilogue::RowEpilogue;
use crate::cpu::gemm::{MatRef, sgemm};
use crate::cpu::padded::copy_row;
use crate::cpu::simd::Isa;
use crate::cpu::transpose;
use crate::error::{EngineError, Result};

/// How C starts before `A·B` is added.
#[derive(Clone, Copy)]
pub(crate) enum Init<'a> {
    /// zeros
    Zero,
    /// `C[i, j] = v[i]` (a convolution bias: one value per output channel)
    Row(&'a [f32]),
    /// `C[i, j] = v[j]` (a Gemm bias: one value per output column)
    Col(&'a [f32]),
    /// C already holds the initial values
    Acc,
}

/// Blocking of the product for an instruction set.
#[derive(Clone, Copy)]
struct Geo {
    /// rows of a packed A panel
    mr: usize,
    /// columns of a packed B panel
    nr: usize,
    /// depth of one block of K (a `KC × NR` B block stays in L1)
    kc: usize,
}

/// Panels of A per block of rows (a `MC × KC` block of A stays in L2).
const MC_PANELS: usize = 64;

/// Bytes of packed B made in one pass over B's rows: small enough that the block is still in L2
/// (and its writes spread over few pages) when its tiles run, large enough that each row is read
/// as a run of whole cache lines.
const B_BLOCK_BYTES: usize = 1 << 17;

/// Values of A from which packing is spread over the pool's threads.
const PACK_PARALLEL: usize = 1 << 16;

fn geo(isa: Isa) -> Geo {
    match isa {
        Isa::Avx512 => Geo {
            mr: 8,
            nr: 48,
            kc: 128,
        },
        Isa::Avx2 => Geo {
            mr: 6,
            nr: 16,
            kc: 256,
        },
        Isa::Scalar => Geo {
            mr: 1,
            nr: 1,
            kc: usize::MAX,
        },
    }
}

/// The depth of the blocks of K a product of depth `k` runs in, for blocks of about `kc`: one block
/// up to 1.5·`kc` (ResNet's 7×7 stem has k = 147, MobileNet's and EfficientNet's 1×1 convolutions
/// 144–184), else equal blocks of at most `kc`. A short last block (19 of 147) costs a whole pass
/// storing and reloading every tile of C for a few steps of work.
fn k_block(kc: usize, k: usize) -> usize {
    if k <= kc.saturating_add(kc / 2) {
        return k.max(1);
    }
    k.div_ceil(k.div_ceil(kc))
}

fn fits(v: MatRef<'_>, rows: usize, cols: usize) -> bool {
    rows == 0 || cols == 0 || v.off + (rows - 1) * v.rs + (cols - 1) * v.cs < v.data.len()
}

/// A (m × k, scaled by alpha) packed for an instruction set: panels of `MR` rows, each stored
/// k-major (`k` steps of `MR` values), the last panel padded with zeros. The scalar path keeps A
/// row-major.
#[derive(Debug, Clone)]
pub(crate) struct PackedA {
    m: usize,
    k: usize,
    isa: Isa,
    data: Vec<f32>,
}

impl PackedA {
    /// Pack `alpha · a` (m × k) for `isa`.
    pub(crate) fn pack(a: MatRef<'_>, m: usize, k: usize, alpha: f32, isa: Isa) -> Result<PackedA> {
        if !fits(a, m, k) {
            return Err(EngineError::internal(format!(
                "pack: a {m}×{k} matrix does not fit {} values",
                a.data.len()
            )));
        }
        let MatRef {
            data: src,
            off,
            rs,
            cs,
        } = a;
        let mr = geo(isa).mr;
        let panels = m.div_ceil(mr);
        // a reused buffer (an activation packed per call would otherwise be faulted in on every
        // run): every value is written below, the last panel's padding rows included
        let mut data = arena::take(panels * mr * k);
        let pack_panel = |p: usize, panel: &mut [f32]| {
            let rows = mr.min(m - p * mr);
            let first = off + p * mr * rs;
            if rows < mr {
                for step in panel.chunks_exact_mut(mr) {
                    step[rows..].fill(0.0);
                }
            }
            if rs == 1 {
                // column-major A: the panel's values of one k are contiguous
                for (kk, step) in panel.chunks_exact_mut(mr).enumerate() {
                    let col = &src[first + kk * cs..first + kk * cs + rows];
                    step[..rows]
                        .iter_mut()
                        .zip(col)
                        .for_each(|(d, &v)| *d = v * alpha);
                }
            } else if cs == 1 && rows == mr && mr == transpose::ROWS && isa != Isa::Scalar {
                // a row-major activation: 8 × 8 blocks transposed in registers
                transpose::rows8(isa, src, first, rs, k, alpha, panel, mr);
            } else {
                for i in 0..rows {
                    let row = first + i * rs;
                    if cs == 1 {
                        let row = &src[row..row + k];
                        for (d, &v) in panel[i..].iter_mut().step_by(mr).zip(row) {
                            *d = v * alpha;
                        }
                    } else {
                        for kk in 0..k {
                            panel[kk * mr + i] = src[row + kk * cs] * alpha;
                        }
                    }
                }
            }
        };
        if k > 0 {
            // An activation packed per call (a MatMul's left operand at batch 8) is megabytes:
            // packing it on one thread would leave the others idle before the product.
            if m * k >= PACK_PARALLEL {
                data.par_chunks_exact_mut(mr * k)
                    .enumerate()
                    .for_each(|(p, panel)| pack_panel(p, panel));
            } else {
                data.chunks_exact_mut(mr * k)
                    .enumerate()
                    .for_each(|(p, panel)| pack_panel(p, panel));
            }
        }
        Ok(PackedA { m, k, isa, data })
    }

    /// Rows of A.
    pub(crate) fn m(&self) -> usize {
        self.m
    }

    /// Hands the packed values back for reuse by later packs and kernels on this thread (for an
    /// operand packed per call, once its product has run).
    pub(crate) fn recycle(self) {
        arena::give(self.data);
    }

    /// The instruction set A is packed for.
    pub(crate) fn isa(&self) -> Isa {
        self.isa
    }
}

/// B (k × n, scaled by alpha) packed for an instruction set: panels of `NR` columns, each stored
/// k-major, the last panel padded with zeros. The scalar path keeps B row-major.
#[derive(Debug, Clone)]
pub(crate) struct PackedB {
    k: usize,
    n: usize,
    isa: Isa,
    data: Vec<f32>,
}

impl PackedB {
    /// Pack `alpha · b` (k × n) for `isa`.
    pub(crate) fn pack(b: MatRef<'_>, k: usize, n: usize, alpha: f32, isa: Isa) -> Result<PackedB> {
        if !fits(b, k, n) {
            return Err(EngineError::internal(format!(
                "pack: a {k}×{n} matrix does not fit {} values",
                b.data.len()
            )));
        }
        let src = DenseB { m: b, alpha };
        let data = if isa == Isa::Scalar {
            let mut d = vec![0f32; k * n];
            src.pack(0, k, 0, n, n, &mut d);
            d
        } else {
            let nr = geo(isa).nr;
            let mut d = vec![0f32; n.div_ceil(nr) * nr * k];
            if k > 0 {
                for (t, panel) in d.chunks_exact_mut(nr * k).enumerate() {
                    src.pack(0, k, t * nr, nr.min(n - t * nr), nr, panel);
                }
            }
            d
        };
        Ok(PackedB { k, n, isa, data })
    }

    /// Rows of B.
    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// Columns of B.
    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// The instruction set B is packed for.
    pub(crate) fn isa(&self) -> Isa {
        self.isa
    }
}

/// A B operand read one block at a time.
pub(crate) trait BSource: Sync {
    /// Write rows `k0..k0 + kl`, columns `n0..n0 + nr` of B into `dst` as `kl` rows of `w` values
    /// (`nr ≤ w`). Columns `nr..w` may hold any values: they only reach accumulator lanes that are
    /// never stored.
    fn pack(&self, k0: usize, kl: usize, n0: usize, nr: usize, w: usize, dst: &mut [f32]);

    /// Write rows `k0..k0 + kl`, columns `n0..n0 + cols` of B into `dst` as consecutive panels of
    /// `w` columns, each as [`BSource::pack`] writes one: panel `t` holds columns
    /// `n0 + t·w ..`. Sources whose rows are contiguous override this to read each row once,
    /// front to back, which the hardware prefetchers follow; one panel at a time reads `kl` rows
    /// a short piece each, every piece on its own page.
    fn pack_panels(&self, k0: usize, kl: usize, n0: usize, cols: usize, w: usize, dst: &mut [f32]) {
        pack_panel_by_panel(self, k0, kl, n0, cols, w, dst);
    }
}

/// [`BSource::pack_panels`] as a [`BSource::pack`] per panel.
fn pack_panel_by_panel<S: BSource + ?Sized>(
    src: &S,
    k0: usize,
    kl: usize,
    n0: usize,
    cols: usize,
    w: usize,
    dst: &mut [f32],
) {
    for (t, panel) in dst.chunks_exact_mut(kl * w).take(cols.div_ceil(w)).enumerate() {
        let c0 = t * w;
        src.pack(k0, kl, n0 + c0, w.min(cols - c0), w, panel);
    }
}

/// Zero the columns past `cols` in the last of the panels of `w` columns (`kl` rows each) that
/// hold `cols` columns, so that no stray value (a NaN, a subnormal) is multiplied.
pub(crate) fn zero_past_columns(dst: &mut [f32], kl: usize, w: usize, cols: usize) {
    let rest = cols.next_multiple_of(w) - cols;
    if rest > 0 {
        for row in dst[(cols / w) * kl * w..][..kl * w].chunks_exact_mut(w) {
            row[w - rest..].fill(0.0);
        }
    }
}

/// A piece of a row of B that lies in one panel: `(offset in the row's source, offset in the
/// panels of the piece's first value in row 0, length)`.
pub(crate) type Piece = (usize, usize, usize);

/// The pieces of runs `(offset in the source, first column, length)` of a row of B laid out in
/// panels of `w` columns with `kl` rows each, as [`BSource::pack_panels`] writes them; the same
/// for every row (row `kk` adds `kk·w` to each destination), so the divisions happen once.
pub(crate) fn panel_pieces(runs: &[(usize, usize, usize)], kl: usize, w: usize) -> Vec<Piece> {
    let mut pieces = Vec::with_capacity(runs.len() * 2);
    for &(from, col, len) in runs {
        let mut done = 0;
        while done < len {
            let c = col + done;
            let (t, j) = (c / w, c % w);
            let piece = (w - j).min(len - done);
            pieces.push((from + done, t * kl * w + j, piece));
            done += piece;
        }
    }
    pieces
}

/// Copy row `kk`'s pieces from `src` (the row's source, offsets as in the pieces) into `dst`.
#[inline(always)]
pub(crate) fn copy_pieces(dst: &mut [f32], kk: usize, w: usize, src: &[f32], pieces: &[Piece]) {
    for &(from, to, len) in pieces {
        let at = to + kk * w;
        copy_row(&mut dst[at..at + len], &src[from..from + len]);
    }
}

/// A strided matrix as a [`BSource`], scaled by `alpha`.
pub(crate) struct DenseB<'a> {
    m: MatRef<'a>,
    alpha: f32,
}

impl<'a> DenseB<'a> {
    /// `b` read as a k × n matrix.
    pub(crate) fn new(b: MatRef<'a>, k: usize, n: usize) -> Result<DenseB<'a>> {
        if !fits(b, k, n) {
            return Err(EngineError::internal(format!(
                "matrix product: a {k}×{n} B does not fit {} values",
                b.data.len()
            )));
        }
        Ok(DenseB { m: b, alpha: 1.0 })
    }
}

impl BSource for DenseB<'_> {
    fn pack(&self, k0: usize, kl: usize, n0: usize, nr: usize, w: usize, dst: &mut [f32]) {
        let MatRef { data, off, rs, cs } = self.m;
        let alpha = self.alpha;
        if cs == 1 {
            for (kk, d) in dst.chunks_exact_mut(w).take(kl).enumerate() {
                let s = off + (k0 + kk) * rs + n0;
                let (head, tail) = d.split_at_mut(nr);
                if alpha == 1.0 {
                    copy_row(head, &data[s..s + nr]);
                } else {
                    head.iter_mut()
                        .zip(&data[s..s + nr])
                        .for_each(|(d, &v)| *d = v * alpha);
                }
                tail.fill(0.0);
            }
        } else {
            for d in dst.chunks_exact_mut(w).take(kl) {
                d[nr..].fill(0.0);
            }
            // Column by column: each column of B is contiguous when B is a transposed matrix.
            for j in 0..nr {
                let s = off + k0 * rs + (n0 + j) * cs;
                for kk in 0..kl {
                    dst[kk * w + j] = data[s + kk * rs] * alpha;
                }
            }
        }
    }

    fn pack_panels(&self, k0: usize, kl: usize, n0: usize, cols: usize, w: usize, dst: &mut [f32]) {
        let MatRef { data, off, rs, cs } = self.m;
        if cs != 1 || self.alpha != 1.0 {
            pack_panel_by_panel(self, k0, kl, n0, cols, w, dst);
            return;
        }
        let pieces = panel_pieces(&[(0, 0, cols)], kl, w);
        for kk in 0..kl {
            let s = off + (k0 + kk) * rs + n0;
            copy_pieces(dst, kk, w, &data[s..s + cols], &pieces);
        }
        zero_past_columns(dst, kl, w, cols);
    }
}

/// The B operand of a product.
#[derive(Clone, Copy)]
pub(crate) enum BOp<'a> {
    /// packed once
    Packed(&'a PackedB),
    /// a `k × n` matrix packed block by block
    Src {
        /// the matrix
        src: &'a dyn BSource,
        /// rows
        k: usize,
        /// columns
        n: usize,
    },
}

impl BOp<'_> {
    fn dims(&self) -> (usize, usize) {
        match self {
            BOp::Packed(p) => (p.k, p.n),
            BOp::Src { k, n, .. } => (*k, *n),
        }
    }
}

/// C (m × n, row stride ldc) = init + A·B, then `epi` on every row.
pub(crate) fn gemm(
    a: &PackedA,
    b: BOp<'_>,
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
    epi: &dyn RowEpilogue,
    par: bool,
) -> Result<()> {
    let (m, k) = (a.m, a.k);
    let (kb, n) = b.dims();
    if m == 0 || n == 0 {
        return Ok(());
    }
    let c_ok = ldc >= n && (m - 1) * ldc + n <= c.len();
    let init_ok = match init {
        Init::Zero | Init::Acc => true,
        Init::Row(v) => v.len() >= m,
        Init::Col(v) => v.len() >= n,
    };
    let isa_ok = match b {
        BOp::Packed(p) => p.isa == a.isa,
        BOp::Src { .. } => true,
    };
    if !(kb == k && c_ok && init_ok && isa_ok) {
        return Err(EngineError::internal(format!(
            "matrix product bounds: a {m}×{k}, b {kb}×{n}, c {} values with row stride {ldc}",
            c.len()
        )));
    }
    if k == 0 {
        fill_init(c, ldc, m, n, init);
        apply_rows(c, ldc, m, n, epi);
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if a.isa != Isa::Scalar {
        run_tiled(a, b, c, ldc, init, epi, par);
        return Ok(());
    }
    gemm_portable(a, b, c, ldc, init, epi, par)
}

fn fill_init(c: &mut [f32], ldc: usize, m: usize, n: usize, init: Init<'_>) {
    for i in 0..m {
        let row = &mut c[i * ldc..i * ldc + n];
        match init {
            Init::Zero => row.fill(0.0),
            Init::Row(v) => row.fill(v[i]),
            Init::Col(v) => row.copy_from_slice(&v[..n]),
            Init::Acc => {}
        }
    }
}

fn apply_rows(c: &mut [f32], ldc: usize, m: usize, n: usize, epi: &dyn RowEpilogue) {
    if epi.is_noop() {
        return;
    }
    for i in 0..m {
        epi.apply_rows(i, 0, &mut [&mut c[i * ldc..i * ldc + n]]);
    }
}

/// The `gemm` crate on row-major A and B, then the tail over whole rows.
fn gemm_portable(
    a: &PackedA,
    b: BOp<'_>,
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
    epi: &dyn RowEpilogue,
    par: bool,
) -> Result<()> {
    let (m, k) = (a.m, a.k);
    let (_, n) = b.dims();
    let owned;
    let bd: &[f32] = match b {
        BOp::Packed(p) => &p.data,
        BOp::Src { src, .. } => {
            let mut v = vec![0f32; k * n];
            src.pack(0, k, 0, n, n, &mut v);
            owned = v;
            &owned
        }
    };
    let accumulate = !matches!(init, Init::Zero);
    fill_init(c, ldc, m, n, init);
    let am = MatRef {
        data: &a.data,
        off: 0,
        rs: k,
        cs: 1,
    };
    let bm = MatRef {
        data: bd,
        off: 0,
        rs: n,
        cs: 1,
    };
    sgemm(m, n, k, am, bm, c, ldc, 1.0, accumulate, par)?;
    apply_rows(c, ldc, m, n, epi);
    Ok(())
}

/// C's base pointer, shared by the tile tasks of one product.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct CPtr(*mut f32);

// SAFETY: the pointer comes from a `&mut [f32]` that `run_tiled` borrows for the whole parallel
// section; each task writes only its own tiles of C (disjoint row/column ranges), so sharing the
// base pointer between threads cannot create a data race.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
unsafe impl Send for CPtr {}
// SAFETY: see `Send`.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
unsafe impl Sync for CPtr {}

/// The tiled product with the micro-kernels, split into tasks over panels × column tiles.
#[cfg(target_arch = "x86_64")]
fn run_tiled(
    a: &PackedA,
    b: BOp<'_>,
    c: &mut [f32],
    ldc: usize,
    init: Init<'_>,
    epi: &dyn RowEpilogue,
    par: bool,
) {
    let (m, k) = (a.m, a.k);
    let (_, n) = b.dims();
    let g = geo(a.isa);
    let panels = m.div_ceil(g.mr);
    let tiles = n.div_ceil(g.nr);
    let threads = if par { rayon::current_num_threads() } else { 1 };
    let flops = 2 * m * n * k;
    let want = if threads > 1 {
        (flops >> 20).clamp(1, threads * 4)
    } else {
        1
    };
    let col_parts = tiles.min(want).max(1);
    let row_parts = panels.min(want.div_ceil(col_parts)).max(1);
    let cp = CPtr(c.as_mut_ptr());
    let run = |t: usize| {
        let (rp, cpart) = (t / col_parts, t % col_parts);
        let rows = panels * rp / row_parts..panels * (rp + 1) / row_parts;
        let cols = tiles * cpart / col_parts..tiles * (cpart + 1) / col_parts;
        run_task(a, b, cp, ldc, init, epi, g, rows, cols);
    };
    let tasks = row_parts * col_parts;
    if tasks == 1 {
        run(0);
    } else {
        (0..tasks).into_par_iter().for_each(run);
    }
}

/// One task: blocks of K outermost, then blocks of panels, then column tiles (the B block of a
/// column tile is reused by every panel of the block); the tail runs on each finished tile.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn run_task(
    a: &PackedA,
    b: BOp<'_>,
    c: CPtr,
    ldc: usize,
    init: Init<'_>,
    epi: &dyn RowEpilogue,
    g: Geo,
    panels: std::ops::Range<usize>,
    tiles: std::ops::Range<usize>,
) {
    let (m, k) = (a.m, a.k);
    let (_, n) = b.dims();
    // Column tiles whose packed B blocks are made together (one pass over each row of B), as many
    // as fit in B_BLOCK_BYTES.
    let kc = k_block(g.kc, k);
    let block_tiles = (B_BLOCK_BYTES / (kc * g.nr * 4)).max(1);
    let mut scratch = match b {
        BOp::Src { .. } => arena::take(kc * g.nr * block_tiles.min(tiles.len())),
        BOp::Packed(_) => Vec::new(),
    };
    // an activation the kernel applies before storing, the whole tail then
    let act = epi.in_registers();
    let noop = epi.is_noop() || act.is_some();
    let mut k0 = 0;
    while k0 < k {
        let kl = kc.min(k - k0);
        let last = k0 + kl == k;
        let mut tb = tiles.start;
        while tb < tiles.end {
            let te = (tb + block_tiles).min(tiles.end);
            if let BOp::Src { src, .. } = b {
                let cols = (te * g.nr).min(n) - tb * g.nr;
                let len = (te - tb) * kl * g.nr;
                src.pack_panels(k0, kl, tb * g.nr, cols, g.nr, &mut scratch[..len]);
            }
            let mut mb = panels.start;
            while mb < panels.end {
                let me = (mb + MC_PANELS).min(panels.end);
                // tile t's packed B rows k0..k0 + kl, and panel p's packed A rows
                let b_block = |t: usize| match b {
                    BOp::Packed(pb) => &pb.data[t * k * g.nr + k0 * g.nr..][..kl * g.nr],
                    BOp::Src { .. } => &scratch[(t - tb) * kl * g.nr..][..kl * g.nr],
                };
                let a_chunk = |p: usize| &a.data[p * g.mr * k + k0 * g.mr..][..kl * g.mr];
                for t in tb..te {
                    let n0 = t * g.nr;
                    let nr = g.nr.min(n - n0);
                    let bp = b_block(t);
                    // The next tile's B block, fetched a share per panel while they run.
                    let b_next = (t + 1 < te).then(|| b_block(t + 1));
                    let b_share = (kl * g.nr / 16).div_ceil(me - mb);
                    for p in mb..me {
                        let m0 = p * g.mr;
                        let mr = g.mr.min(m - m0);
                        let ap = a_chunk(p);
                        // What the next panel reads (this same tile's, or the next tile's first
                        // panel), fetched while this one runs: weights packed as A come from memory
                        // on the first tile of each block.
                        let a_next = if p + 1 < me { a_chunk(p + 1) } else { a_chunk(mb) };
                        let ahead = match b_next {
                            Some(bn) => {
                                let first = ((p - mb) * b_share * 16).min(bn.len());
                                x86::Ahead {
                                    a: a_next.as_ptr(),
                                    b: bn[first..].as_ptr(),
                                    b_lines: b_share.min((bn.len() - first).div_ceil(16)),
                                }
                            }
                            None => x86::Ahead {
                                a: a_next.as_ptr(),
                                b: bp.as_ptr(),
                                b_lines: 0,
                            },
                        };
                        let tinit = if k0 > 0 {
                            x86::TileInit::LoadC
                        } else {
                            match init {
                                Init::Zero => x86::TileInit::Zero,
                                Init::Row(v) => x86::TileInit::Row(v[m0..m0 + mr].as_ptr()),
                                Init::Col(v) => x86::TileInit::Col(v[n0..n0 + nr].as_ptr()),
                                Init::Acc => x86::TileInit::LoadC,
                            }
                        };
                        if last && !noop {
                            epi.prefetch(m0, n0, mr, nr);
                        }
                        // SAFETY: `gemm` checked that C holds m rows of n values `ldc` apart, so rows
                        // m0..m0+mr, columns n0..n0+nr lie inside it; `ap` holds kl·MR packed values
                        // and `bp` kl·NR; the init vector has mr (Row) or nr (Col) readable values.
                        // Tiles of different tasks are disjoint. `a.isa` was detected on this CPU.
                        #[allow(unsafe_code)]
                        unsafe {
                            x86::tile(
                                a.isa,
                                kl,
                                ap.as_ptr(),
                                bp.as_ptr(),
                                c.0.add(m0 * ldc + n0),
                                ldc,
                                mr,
                                nr,
                                tinit,
                                ahead,
                                if last { act } else { None },
                            );
                        }
                        if last && !noop {
                            let mut rows: [&mut [f32]; 8] = Default::default();
                            for (i, r) in rows.iter_mut().enumerate().take(mr) {
                                // SAFETY: row m0+i, columns n0..n0+nr of C belong to this tile alone
                                // (bounds as above), and no other reference to them is alive.
                                #[allow(unsafe_code)]
                                unsafe {
                                    *r = std::slice::from_raw_parts_mut(c.0.add((m0 + i) * ldc + n0), nr);
                                }
                            }
                            epi.apply_rows(m0, n0, &mut rows[..mr]);
                        }
                    }
                }
                mb = me;
            }
            tb = te;
        }
        k0 += kl;
    }
    arena::give(scratch);
}
