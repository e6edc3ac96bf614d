//! The 8-bit integer product on the raw codes: `C[m×n] = Σ_k (L − zl)(R − zr)` with i32 results,
//! computed as `Σ L·R − zr·ΣL − zl·ΣR + k·zl·zr`, so the kernel multiplies bytes as they are stored
//! and the zero points are applied per row and column afterwards (wrapping i32 arithmetic, equal
//! modulo 2³² to the reference's sum of centred products).
//!
//! The instructions multiply an unsigned byte by a signed one. The left operand keeps its type; the
//! right one is read in the other type, its codes offset by 128 (the bit flip `^ 0x80`) when both
//! operands have the same type, and the offset folded into its zero point.
//!
//! Both operands are packed into panels ([`PackedLeft`]: `MR` rows; [`PackedRight`]: `NR`
//! columns) stored k group by k group, each row's or column's 4 consecutive k in one 32-bit lane,
//! zero-padded to whole panels and groups (a zero byte adds nothing to a product), with the sums
//! of each row and column. x86-64 only: elsewhere, and with `INFERGATE_CPU_ISA=scalar`, the
//! callers run `igemm::igemm` on centred values.
//!
//! The sums leave through a [`Sink`]: kept as they are, or requantized row by row into the codes
//! of a QLinear node, so that no INT32 matrix is stored between the product and its output.

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests;

use rayon::prelude::*;

use crate::cpu::simd::{Isa, multiversion};

/// Work (multiply-adds) below which a product runs on one thread.
const PARALLEL_FROM: usize = 1 << 16;

/// Codes of a right operand below which it is packed on one thread.
const PARALLEL_PACK_FROM: usize = 1 << 15;

/// Column panels per task when the work is split by columns.
const PANELS_PER_TASK: usize = 4;

/// The micro-kernel a product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum QKernel {
    /// AVX-512 VNNI `vpdpbusd`, 8 × 32 tiles
    Vnni,
    /// AVX2 `vpmaddwd` on bytes widened to i16, 4 × 8 tiles
    Avx2,
}

impl QKernel {
    /// The kernel for the instruction set the CPU kernels use ([`crate::cpu::simd::isa`]).
    pub(crate) fn current() -> Option<QKernel> {
        QKernel::for_isa(crate::cpu::simd::isa())
    }

    /// The best kernel that `isa` allows on this CPU; `None` where only the scalar path runs.
    pub(crate) fn for_isa(isa: Isa) -> Option<QKernel> {
        #[cfg(target_arch = "x86_64")]
        {
            if isa == Isa::Avx512
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
            {
                return Some(QKernel::Vnni);
            }
            if isa >= Isa::Avx2 {
                return Some(QKernel::Avx2);
            }
        }
        let _ = isa;
        None
    }

    /// Rows of a left panel.
    fn mr(self) -> usize {
        match self {
            QKernel::Vnni => 8,
            QKernel::Avx2 => 4,
        }
    }

    /// Columns of a right panel.
    pub(super) fn nr(self) -> usize {
        match self {
            QKernel::Vnni => 32,
            QKernel::Avx2 => 8,
        }
    }
}

/// The largest tile any kernel computes.
const TILE: usize = 8 * 32;

// The panel geometry above is the micro-kernels'.
#[cfg(target_arch = "x86_64")]
const _: () = assert!(
    x86::MR_VNNI == 8 && x86::NR_VNNI == 32 && x86::MR_AVX2 == 4 && x86::NR_AVX2 == 8 && TILE >= 8 * 32
);

/// A matrix of 8-bit codes: their bytes and whether they are INT8 (else UINT8).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Codes<'a> {
    bits: &'a [u8],
    signed: bool,
}

impl<'a> Codes<'a> {
    /// UINT8 codes.
    pub(crate) fn u8(v: &'a [u8]) -> Codes<'a> {
        Codes {
            bits: v,
            signed: false,
        }
    }

    /// INT8 codes.
    pub(crate) fn i8(v: &'a [i8]) -> Codes<'a> {
        Codes {
            bits: bytemuck::cast_slice(v),
            signed: true,
        }
    }

    /// Codes stored as `bits`, INT8 when `signed` (their two's complement), else UINT8.
    pub(crate) fn new(bits: &'a [u8], signed: bool) -> Codes<'a> {
        Codes { bits, signed }
    }

    /// Whether the codes are INT8.
    pub(crate) fn signed(&self) -> bool {
        self.signed
    }

    /// The codes' bytes (an INT8 code's two's complement).
    pub(crate) fn bits(&self) -> &'a [u8] {
        self.bits
    }

    /// The codes in `range`.
    pub(crate) fn slice(&self, range: std::ops::Range<usize>) -> Codes<'a> {
        Codes {
            bits: &self.bits[range],
            signed: self.signed,
        }
    }
}

/// The left operand `[m × k]`, packed: panels of `MR` rows, each k group of a panel `MR` lanes of
/// 4 bytes. Its codes keep their type.
#[derive(Debug, Clone)]
pub(crate) struct PackedLeft {
    kernel: QKernel,
    m: usize,
    k: usize,
    signed: bool,
    /// 4-byte lanes (one row's 4 k)
    data: Vec<u32>,
    /// the sum of each row's codes
    sums: Vec<i32>,
}

impl PackedLeft {
    /// Packs the row-major `[m × k]` matrix `a` (`a.bits.len() ≥ m·k`).
    pub(crate) fn pack(kernel: QKernel, a: Codes<'_>, m: usize, k: usize) -> PackedLeft {
        let (mr, groups) = (kernel.mr(), k.div_ceil(4));
        let panel = groups * mr;
        let mut data = vec![0u32; m.div_ceil(mr) * panel];
        let mut sums = vec![0i32; m];
        let rows = &a.bits[..m * k];
        for (p, (lanes, sums)) in data.chunks_mut(panel.max(1)).zip(sums.chunks_mut(mr)).enumerate() {
            let first = p * mr * k;
            pack_left_panel(
                &rows[first..(first + mr * k).min(rows.len())],
                k,
                a.signed,
                mr,
                lanes,
                sums,
            );
        }
        PackedLeft {
            kernel,
            m,
            k,
            signed: a.signed,
            data,
            sums,
        }
    }

    /// Whether the codes are INT8 (the right operand is then read as UINT8).
    pub(crate) fn signed(&self) -> bool {
        self.signed
    }

    /// Whether this is an `m × k` operand packed for `kernel`.
    pub(crate) fn fits(&self, kernel: QKernel, m: usize, k: usize) -> bool {
        (self.kernel, self.m, self.k) == (kernel, m, k)
    }
}

/// One left panel: `rows` (up to `mr` rows of `k` codes, row-major) into `lanes` (each k group's
/// `mr` lanes of 4 codes, rows past the matrix and k past `k` left zero) and each row's sum of
/// codes into `sums`.
fn pack_left_panel(rows: &[u8], k: usize, signed: bool, mr: usize, lanes: &mut [u32], sums: &mut [i32]) {
    for (i, (row, sum)) in rows.chunks_exact(k.max(1)).zip(sums.iter_mut()).enumerate() {
        let (whole, tail) = row.split_at(k / 4 * 4);
        for (g, quad) in whole.chunks_exact(4).enumerate() {
            lanes[g * mr + i] = u32::from_le_bytes([quad[0], quad[1], quad[2], quad[3]]);
        }
        if !tail.is_empty() {
            let mut quad = [0u8; 4];
            quad[..tail.len()].copy_from_slice(tail);
            lanes[(k / 4) * mr + i] = u32::from_le_bytes(quad);
        }
        // the type chosen outside the loop, so that the sum vectorises
        *sum = if signed {
            row.iter().map(|&b| i32::from(b as i8)).sum()
        } else {
            row.iter().map(|&b| i32::from(b)).sum()
        };
    }
}

/// The right operand `[k × n]`, packed: panels of `NR` columns, each k group of a panel `NR` lanes
/// of 4 bytes, in the type opposite to the left operand's ([`Codes`] flipped when needed).
#[derive(Debug, Clone)]
pub(crate) struct PackedRight {
    kernel: QKernel,
    k: usize,
    n: usize,
    /// the codes as read: INT8 when the left operand is UINT8
    signed: bool,
    /// what the stored codes add to the original ones (±128 when flipped, else 0)
    shift: i32,
    /// 4-byte lanes (one column's 4 k), stored as u32 so that a lane is written at once
    data: Vec<u32>,
    /// the sum of each column's stored codes (zeros when not `column_sums`)
    sums: Vec<i32>,
    /// whether `sums` were computed: only a left operand with a nonzero zero point reads them
    column_sums: bool,
}

/// How a right operand's codes are stored for a left operand of type `left_signed`: the byte mask
/// its codes are XORed with (0x80 flips the type when both have the same), and what that adds to
/// the original codes.
fn flip(signed: bool, left_signed: bool) -> (u8, i32) {
    match (signed == left_signed, signed) {
        (false, _) => (0, 0),
        (true, true) => (0x80, 128),
        (true, false) => (0x80, -128),
    }
}

/// The mask a right operand's lanes of 4 codes of type `signed` are XORed with, for a left operand
/// of type `left_signed` (what [`PackedRight::from_lanes`] expects its lanes to hold).
pub(crate) fn lane_mask(signed: bool, left_signed: bool) -> u32 {
    u32::from(flip(signed, left_signed).0) * 0x0101_0101
}

impl PackedRight {
    /// Packs a `[k × n]` matrix of codes of type `signed`, for a left operand of type
    /// `left_signed`: `row(p, cols, dst)` writes row `p`'s codes of columns `cols` (their bytes)
    /// into `dst`. Large operands are packed on the pool's threads when `parallel`, each task
    /// whole column panels.
    pub(crate) fn pack_rows(
        kernel: QKernel,
        k: usize,
        n: usize,
        (signed, left_signed): (bool, bool),
        parallel: bool,
        row: impl Fn(usize, std::ops::Range<usize>, &mut [u8]) + Sync,
    ) -> PackedRight {
        let nr = kernel.nr();
        let panel_lanes = k.div_ceil(4) * nr;
        let (mask, shift) = flip(signed, left_signed);
        let read_signed = !left_signed;
        let col_panels = n.div_ceil(nr);
        let mut data = vec![0u32; col_panels * panel_lanes];
        let mut sums = vec![0i32; n];
        let columns = Columns {
            nr,
            k,
            mask,
            read_signed,
            row: &row,
        };
        if packs_in_parallel(parallel, k, n, nr) && panel_lanes > 0 {
            let per = col_panels.div_ceil(2 * rayon::current_num_threads());
            data.par_chunks_mut(per * panel_lanes)
                .zip(sums.par_chunks_mut(per * nr))
                .enumerate()
                .for_each(|(t, (data, sums))| columns.pack(t * per * nr, data, sums));
        } else {
            columns.pack(0, &mut data, &mut sums);
        }
        PackedRight {
            kernel,
            k,
            n,
            signed: read_signed,
            shift,
            data,
            sums,
            column_sums: true,
        }
    }

    /// A `[k × n]` operand of codes of type `signed` whose k groups are already lanes of 4 codes,
    /// XORed with [`lane_mask`]: `lanes(g, cols, dst)` writes k group `g`'s lanes of columns `cols`
    /// into `dst`. No column sums: only for a left operand whose zero points are all 0.
    pub(crate) fn from_lanes(
        kernel: QKernel,
        k: usize,
        n: usize,
        (signed, left_signed): (bool, bool),
        parallel: bool,
        lanes: impl Fn(usize, std::ops::Range<usize>, &mut [u32]) + Sync,
    ) -> PackedRight {
        let (nr, groups) = (kernel.nr(), k.div_ceil(4));
        let panel_lanes = groups * nr;
        let col_panels = n.div_ceil(nr);
        let mut data = vec![0u32; col_panels * panel_lanes];
        // panel q's k groups, each its columns' lanes (zero past n)
        let panel = |(q, data): (usize, &mut [u32])| {
            let cols = q * nr..(q * nr + nr).min(n);
            for (g, dst) in data.chunks_exact_mut(nr).enumerate() {
                lanes(g, cols.clone(), &mut dst[..cols.len()]);
            }
        };
        if packs_in_parallel(parallel, k, n, nr) && panel_lanes > 0 {
            data.par_chunks_mut(panel_lanes).enumerate().for_each(panel);
        } else if panel_lanes > 0 {
            data.chunks_mut(panel_lanes).enumerate().for_each(panel);
        }
        PackedRight {
            kernel,
            k,
            n,
            signed: !left_signed,
            shift: flip(signed, left_signed).1,
            data,
            sums: vec![0; n],
            column_sums: false,
        }
    }

    /// Whether this is a `k × n` operand packed for `kernel` and a left operand of type
    /// `left_signed`.
    pub(crate) fn fits(&self, kernel: QKernel, k: usize, n: usize, left_signed: bool) -> bool {
        (self.kernel, self.k, self.n) == (kernel, k, n) && self.signed != left_signed
    }

    /// Packs the row-major `[k × n]` matrix `b` for a left operand of type `left_signed`.
    pub(crate) fn pack(kernel: QKernel, b: Codes<'_>, k: usize, n: usize, left_signed: bool) -> PackedRight {
        PackedRight::pack_rows(kernel, k, n, (b.signed, left_signed), true, |p, cols, dst| {
            dst.copy_from_slice(&b.bits[p * n..][cols]);
        })
    }
}

/// Whether a `[k × n]` right operand in panels of `nr` columns is packed on the pool's threads:
/// asked to (`parallel`), with several threads, [`PARALLEL_PACK_FROM`] codes or more and more
/// than one panel.
fn packs_in_parallel(parallel: bool, k: usize, n: usize, nr: usize) -> bool {
    parallel && rayon::current_num_threads() > 1 && k * n >= PARALLEL_PACK_FROM && n > nr
}

/// How [`PackedRight::pack_rows`] packs a range of whole column panels.
struct Columns<'a, F> {
    nr: usize,
    k: usize,
    /// what a code's byte is XORed with (0x80 flips its type)
    mask: u8,
    read_signed: bool,
    row: &'a F,
}

impl<F: Fn(usize, std::ops::Range<usize>, &mut [u8]) + Sync> Columns<'_, F> {
    /// Columns `first…` (`sums.len()` of them, from the start of a panel) into their panels'
    /// `data` and column `sums`: one k group's rows at a time (rows past k stay zero, unflipped),
    /// interleaved into 4-byte lanes, then copied panel by panel.
    fn pack(&self, first: usize, data: &mut [u32], sums: &mut [i32]) {
        let (nr, k, w) = (self.nr, self.k, sums.len());
        let panel_lanes = k.div_ceil(4) * nr;
        let mut rows = vec![0u8; 4 * w];
        let mut lanes = vec![0u32; w];
        let isa = crate::cpu::simd::isa();
        for g in 0..k.div_ceil(4) {
            let mut masks = [0u8; 4];
            for (t, r) in rows.chunks_exact_mut(w.max(1)).enumerate() {
                let p = 4 * g + t;
                if p >= k {
                    r.fill(0);
                } else {
                    (self.row)(p, first..first + w, r);
                    masks[t] = self.mask;
                }
            }
            let (r0, rest) = rows.split_at(w);
            let (r1, rest) = rest.split_at(w);
            let (r2, r3) = rest.split_at(w);
            let quad = Quad {
                rows: [r0, r1, r2, r3],
                masks,
                read_signed: self.read_signed,
            };
            group_lanes(isa, &quad, sums, &mut lanes);
            for (q, panel_data) in data.chunks_exact_mut(panel_lanes).enumerate() {
                let j = q * nr..(q * nr + nr).min(w);
                panel_data[g * nr..][..j.len()].copy_from_slice(&lanes[j]);
            }
        }
    }
}

/// Four rows of one k group of a right operand, as their codes are stored before packing.
struct Quad<'a> {
    rows: [&'a [u8]; 4],
    /// what each row's bytes are XORed with (0x80 flips the type; 0 for a zero row past k)
    masks: [u8; 4],
    /// whether the flipped codes are read as INT8
    read_signed: bool,
}

/// Column `j`'s four codes of `quad`, flipped, as one little-endian lane in `lanes[j]`, their
/// values added to `sums[j]`.
#[inline(always)]
fn group_lanes_body<const FMA: bool>(quad: &Quad<'_>, sums: &mut [i32], lanes: &mut [u32]) {
    // the read type's widening chosen outside the loop, so that it vectorises with one widening
    if quad.read_signed {
        interleave(quad, sums, lanes, |b| i32::from(b as i8));
    } else {
        interleave(quad, sums, lanes, i32::from);
    }
}

#[inline(always)]
fn interleave(quad: &Quad<'_>, sums: &mut [i32], lanes: &mut [u32], widen: impl Fn(u8) -> i32) {
    let n = lanes.len();
    let [r0, r1, r2, r3] = quad.rows.map(|r| &r[..n]);
    let [m0, m1, m2, m3] = quad.masks;
    let sums = &mut sums[..n];
    for j in 0..n {
        let (a, b, c, d) = (r0[j] ^ m0, r1[j] ^ m1, r2[j] ^ m2, r3[j] ^ m3);
        sums[j] += widen(a) + widen(b) + widen(c) + widen(d);
        lanes[j] = u32::from_le_bytes([a, b, c, d]);
    }
}

multiversion! {
    fn group_lanes(quad: &Quad<'_>, sums: &mut [i32], lanes: &mut [u32]) = group_lanes_body;
}

/// The value of a code's byte.
#[inline]
pub(super) fn value(b: u8, signed: bool) -> i32 {
    if signed { i32::from(b as i8) } else { i32::from(b) }
}

/// What a product writes for each row of its sums: the sums as they are ([`Sums`]), or what a
/// node makes of them (requantized codes), so that no INT32 matrix is stored in between.
pub(crate) trait Sink: Sync {
    /// An output value.
    type Out: Copy + Default + Send + Sync;

    /// Row `i`'s sums for columns `j…` (zero points applied) into `dst`.
    fn put(&self, i: usize, j: usize, sums: &[i32], dst: &mut [Self::Out]);

    /// Row `i`'s sums for columns `j…` into `dst`, given as `values` that each fall `shift` short
    /// of their sum (wrapping): they may be changed.
    fn put_shifted(&self, i: usize, j: usize, values: &mut [i32], shift: i32, dst: &mut [Self::Out]) {
        for v in values.iter_mut() {
            *v = v.wrapping_add(shift);
        }
        self.put(i, j, values, dst);
    }

    /// `out` as the sums' own storage, when the sink keeps them as they are (then the product
    /// writes them there and [`Sink::put`] is not called).
    fn in_place(_out: &mut [Self::Out]) -> Option<&mut [i32]> {
        None
    }

    /// Sums computed elsewhere (`values`: rows of `width`, the k-th being the sink's row
    /// `k % period`), through the sink.
    fn rows(&self, values: Vec<i32>, period: usize, width: usize) -> Vec<Self::Out> {
        let mut out = vec![Self::Out::default(); values.len()];
        let w = width.max(1);
        for (k, (v, o)) in values.chunks(w).zip(out.chunks_mut(w)).enumerate() {
            self.put(k % period.max(1), 0, v, o);
        }
        out
    }
}

/// The sums themselves (MatMulInteger, ConvInteger).
pub(crate) struct Sums;

impl Sink for Sums {
    type Out = i32;

    fn put(&self, _: usize, _: usize, sums: &[i32], dst: &mut [i32]) {
        dst.copy_from_slice(sums);
    }

    fn rows(&self, values: Vec<i32>, _: usize, _: usize) -> Vec<i32> {
        values
    }

    fn in_place(out: &mut [i32]) -> Option<&mut [i32]> {
        Some(out)
    }
}

/// A sink whose rows are `rows` further on in `inner`'s (a convolution group's filters).
pub(crate) struct RowOffset<'a, S> {
    pub(crate) inner: &'a S,
    pub(crate) rows: usize,
}

impl<S: Sink> Sink for RowOffset<'_, S> {
    type Out = S::Out;

    fn put(&self, i: usize, j: usize, sums: &[i32], dst: &mut [S::Out]) {
        self.inner.put(self.rows + i, j, sums, dst);
    }

    fn put_shifted(&self, i: usize, j: usize, values: &mut [i32], shift: i32, dst: &mut [S::Out]) {
        self.inner.put_shifted(self.rows + i, j, values, shift, dst);
    }

    fn in_place(out: &mut [S::Out]) -> Option<&mut [i32]> {
        S::in_place(out)
    }
}

/// `c[m×n] = sink(Σ_k (l − zl)(r − zr))`: `zl` one zero point or one per row, `zr` one or one per
/// column, in the operands' own codes. `c` holds at least m·n values.
///
/// # Panics
/// When the operands were packed for different kernels, or their k or types do not fit.
pub(crate) fn qgemm<S: Sink>(
    l: &PackedLeft,
    r: &PackedRight,
    zl: &[i32],
    zr: &[i32],
    sink: &S,
    c: &mut [S::Out],
) {
    product(l, r, zl, zr, sink, c, true);
}

/// [`qgemm`] on the calling thread alone (a task that is already one of several).
pub(crate) fn qgemm_one_thread<S: Sink>(
    l: &PackedLeft,
    r: &PackedRight,
    zl: &[i32],
    zr: &[i32],
    sink: &S,
    c: &mut [S::Out],
) {
    product(l, r, zl, zr, sink, c, false);
}

/// [`qgemm`], over the pool's threads when `parallel` and the product is large enough.
fn product<S: Sink>(
    l: &PackedLeft,
    r: &PackedRight,
    zl: &[i32],
    zr: &[i32],
    sink: &S,
    c: &mut [S::Out],
    parallel: bool,
) {
    assert!(
        l.kernel == r.kernel && l.k == r.k && r.signed != l.signed,
        "qgemm: operands packed for different products"
    );
    assert!(
        r.column_sums || zl.iter().all(|&z| z == 0),
        "qgemm: a right operand without column sums needs left zero points of 0"
    );
    let (m, k, n) = (l.m, l.k, r.n);
    let c = &mut c[..m * n];
    if m == 0 || n == 0 {
        return;
    }
    let zl: Vec<i32> = (0..m).map(|i| zl[if zl.len() == 1 { 0 } else { i }]).collect();
    let zr: Vec<i32> = (0..n)
        .map(|j| zr[if zr.len() == 1 { 0 } else { j }].wrapping_add(r.shift))
        .collect();
    let u: Vec<i32> = zr
        .iter()
        .zip(&r.sums)
        .map(|(&z, &s)| (k as i32).wrapping_mul(z).wrapping_sub(s))
        .collect();
    let fix = Correction {
        zl: &zl,
        sl: &l.sums,
        zr: &zr,
        uniform_zr: zr.iter().all(|&z| z == zr[0]).then_some(zr[0]),
        u: &u,
    };
    let (mr, nr) = (l.kernel.mr(), l.kernel.nr());
    let (row_panels, col_panels) = (m.div_ceil(mr), n.div_ceil(nr));
    let threads = if parallel { rayon::current_num_threads() } else { 1 };
    if m * n * k < PARALLEL_FROM || threads == 1 {
        for (p, rows) in c.chunks_mut(mr * n).enumerate() {
            block(l, r, &fix, sink, p, 0..col_panels, rows, n, 0);
        }
    } else if row_panels >= 2 * threads {
        c.par_chunks_mut(mr * n)
            .enumerate()
            .for_each(|(p, rows)| block(l, r, &fix, sink, p, 0..col_panels, rows, n, 0));
    } else {
        // Few row panels: split the columns, each task writing its own block, copied into c after.
        let tasks: Vec<(usize, Vec<S::Out>)> = (0..col_panels.div_ceil(PANELS_PER_TASK))
            .into_par_iter()
            .map(|t| {
                let qs = t * PANELS_PER_TASK..((t + 1) * PANELS_PER_TASK).min(col_panels);
                let (j0, j1) = (qs.start * nr, (qs.end * nr).min(n));
                let mut out = vec![S::Out::default(); m * (j1 - j0)];
                for (p, rows) in out.chunks_mut(mr * (j1 - j0)).enumerate() {
                    block(l, r, &fix, sink, p, qs.clone(), rows, j1 - j0, j0);
                }
                (j0, out)
            })
            .collect();
        for (j0, out) in tasks {
            write_columns(c, n, j0, &out, m);
        }
    }
}

/// Writes `block` (`rows` rows of a task's columns, row-major) into columns `j0…` of the matrix `c`
/// whose rows are `ld` values apart.
pub(super) fn write_columns<T: Copy>(c: &mut [T], ld: usize, j0: usize, block: &[T], rows: usize) {
    let width = block.len() / rows.max(1);
    for (i, row) in block.chunks_exact(width.max(1)).enumerate() {
        c[i * ld + j0..][..width].copy_from_slice(row);
    }
}

/// The zero-point terms, `Σ (l − zl)(r − zr) = Σ l·r − zr·ΣL + zl·(k·zr − ΣR)`: per row `zl` and
/// `ΣL`, per column `zr` (shifted) and `u = k·zr − ΣR`.
struct Correction<'a> {
    zl: &'a [i32],
    sl: &'a [i32],
    zr: &'a [i32],
    /// the one `zr` of every column, when they are all the same (then `zr·ΣL` is the row's constant)
    uniform_zr: Option<i32>,
    u: &'a [i32],
}

/// The tiles of row panel `p` and column panels `qs`, through `sink` into `rows` (the panel's rows
/// of an output `ld` wide whose first column is column `j0` of C).
#[allow(clippy::too_many_arguments)]
fn block<S: Sink>(
    l: &PackedLeft,
    r: &PackedRight,
    fix: &Correction<'_>,
    sink: &S,
    p: usize,
    qs: std::ops::Range<usize>,
    rows: &mut [S::Out],
    ld: usize,
    j0: usize,
) {
    let (mr, nr) = (l.kernel.mr(), l.kernel.nr());
    let isa = crate::cpu::simd::isa();
    if let Some(out) = S::in_place(rows) {
        panel_tiles(l, r, p, qs, |ii, jq, dots| {
            let sums = &mut out[ii * ld + jq - j0..][..dots.len()];
            sums.copy_from_slice(dots);
            correct_row(isa, fix, p * mr + ii, jq, sums);
        });
        return;
    }
    // the panel's dot products of these columns first, stored by the tiles themselves, then each
    // whole row through the sink: its work per call (the requantization's) pays off over a row,
    // not over a tile's 32 columns
    let first = qs.start * nr;
    let width = (qs.end * nr).min(r.n).saturating_sub(first);
    let panel_rows = rows.len() / ld.max(1);
    let stride = (qs.len() * nr).max(nr);
    PANEL_SUMS.with_borrow_mut(|sums| {
        sums.resize(mr * stride, 0);
        panel_dots(l, r, p, qs, sums, stride);
        for ii in 0..panel_rows {
            let i = p * mr + ii;
            let dots = &mut sums[ii * stride..][..width];
            let dst = &mut rows[ii * ld + first - j0..][..width];
            match fix.row_shift(i) {
                // a symmetric row and one right zero point: a constant per row, which the sink adds
                Some(shift) => sink.put_shifted(i, first, dots, shift, dst),
                None => {
                    correct_row(isa, fix, i, first, dots);
                    sink.put(i, first, dots, dst);
                }
            }
        }
    });
}

thread_local! {
    /// A row panel's sums before they go through a sink that does not keep them as they are.
    static PANEL_SUMS: std::cell::RefCell<Vec<i32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The tiles of row panel `p` and column panels `qs`: `each(row in the panel, first column, the
/// row's dot products)` for every row of the matrix in each tile.
fn panel_tiles(
    l: &PackedLeft,
    r: &PackedRight,
    p: usize,
    qs: std::ops::Range<usize>,
    mut each: impl FnMut(usize, usize, &[i32]),
) {
    let (mr, nr, groups) = (l.kernel.mr(), l.kernel.nr(), l.k.div_ceil(4));
    let lp: &[u8] = bytemuck::cast_slice(&l.data[p * groups * mr..(p + 1) * groups * mr]);
    let panel_rows = mr.min(l.m - p * mr);
    let mut tile = [0i32; TILE];
    for q in qs {
        let rp: &[u8] = bytemuck::cast_slice(&r.data[q * groups * nr..(q + 1) * groups * nr]);
        run_tile(l.kernel, !l.signed, groups, lp, rp, &mut tile, nr);
        let (jq, cols) = (q * nr, nr.min(r.n - q * nr));
        for ii in 0..panel_rows {
            each(ii, jq, &tile[ii * nr..ii * nr + cols]);
        }
    }
}

/// The tiles of row panel `p` and column panels `qs`, stored by the tiles into `dots`: `MR` rows
/// `stride` values apart (at least the panels' columns), columns from the first panel's.
fn panel_dots(
    l: &PackedLeft,
    r: &PackedRight,
    p: usize,
    qs: std::ops::Range<usize>,
    dots: &mut [i32],
    stride: usize,
) {
    let (mr, nr, groups) = (l.kernel.mr(), l.kernel.nr(), l.k.div_ceil(4));
    let lp: &[u8] = bytemuck::cast_slice(&l.data[p * groups * mr..(p + 1) * groups * mr]);
    let first = qs.start;
    for q in qs {
        let rp: &[u8] = bytemuck::cast_slice(&r.data[q * groups * nr..(q + 1) * groups * nr]);
        run_tile(
            l.kernel,
            !l.signed,
            groups,
            lp,
            rp,
            &mut dots[(q - first) * nr..],
            stride,
        );
    }
}

impl Correction<'_> {
    /// What row `i`'s zero-point terms add to each of its dot products, when that is one
    /// constant: the row's zero point is 0 and the columns share theirs.
    fn row_shift(&self, i: usize) -> Option<i32> {
        let zr = self.uniform_zr?;
        (self.zl[i] == 0).then(|| zr.wrapping_mul(self.sl[i]).wrapping_neg())
    }
}

/// Row `i`'s dot products `values` for columns `jq…` replaced by their sums, the zero-point terms
/// applied: one addition per value where the right operand has one zero point and the row's is 0
/// (a symmetric weight's, the common case).
#[inline(always)]
fn correct_row_body<const FMA: bool>(fix: &Correction<'_>, i: usize, jq: usize, values: &mut [i32]) {
    let n = values.len();
    let (zl, sl) = (fix.zl[i], fix.sl[i]);
    let u = &fix.u[jq..jq + n];
    match fix.uniform_zr {
        Some(zr) => {
            let row = zr.wrapping_mul(sl).wrapping_neg();
            if zl == 0 {
                for v in values.iter_mut() {
                    *v = v.wrapping_add(row);
                }
            } else {
                for (v, &u) in values.iter_mut().zip(u) {
                    *v = v.wrapping_add(row).wrapping_add(zl.wrapping_mul(u));
                }
            }
        }
        None => {
            let zr = &fix.zr[jq..jq + n];
            for ((v, &z), &u) in values.iter_mut().zip(zr).zip(u) {
                *v = v
                    .wrapping_sub(z.wrapping_mul(sl))
                    .wrapping_add(zl.wrapping_mul(u));
            }
        }
    }
}

multiversion! {
    /// [`correct_row_body`] compiled for AVX2 and AVX-512 too: the baseline target has no 32-bit
    /// vector multiply, and each product took a sequence of shuffles (the hottest loop of the
    /// integer convolutions).
    fn correct_row(fix: &Correction<'_>, i: usize, jq: usize, values: &mut [i32]) = correct_row_body;
}

/// One tile of dot products, `MR` rows of `NR` in `out`, rows `ld` values apart.
fn run_tile(kernel: QKernel, left_u8: bool, groups: usize, l: &[u8], r: &[u8], out: &mut [i32], ld: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        match kernel {
            QKernel::Vnni => {
                // SAFETY: `QKernel::Vnni` is only made by `for_isa` after detecting AVX-512F (through
                // `Isa::Avx512`), AVX-512BW and AVX-512 VNNI.
                #[allow(unsafe_code)]
                unsafe {
                    if left_u8 {
                        x86::tile_vnni::<true>(groups, l, r, out, ld)
                    } else {
                        x86::tile_vnni::<false>(groups, l, r, out, ld)
                    }
                }
            }
            QKernel::Avx2 => {
                // SAFETY: `QKernel::Avx2` is only made by `for_isa` for an `Isa` that has AVX2.
                #[allow(unsafe_code)]
                unsafe {
                    if left_u8 {
                        x86::tile_avx2::<true>(groups, l, r, out, ld)
                    } else {
                        x86::tile_avx2::<false>(groups, l, r, out, ld)
                    }
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, left_u8, groups, l, r, out, ld);
        unreachable!("QKernel is only made on x86-64")
    }
}
