//! Which vector instruction set the hand-written kernels use, detected once at run time.
//!
//! The crate is compiled for the baseline target (x86-64 without AVX), so the kernels that matter
//! are compiled several times with `#[target_feature]` and picked here. `INFERGATE_CPU_ISA=scalar`
//! or `avx2` forces a lesser set (to compare, or to work around a broken CPU feature report).

use std::sync::OnceLock;

/// A vector instruction set, in increasing order of capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Isa {
    /// No hand-written vector code: portable Rust (auto-vectorised for the baseline target) and
    /// the `gemm` crate for matrix products.
    Scalar,
    /// x86-64 AVX2 + FMA (256-bit vectors).
    Avx2,
    /// x86-64 AVX-512F (512-bit vectors, masked loads and stores) with AVX2 + FMA.
    Avx512,
}

/// The best instruction set this CPU has (ignoring the override).
pub(crate) fn best_available() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
        if avx2 && std::arch::is_x86_feature_detected!("avx512f") {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// The instruction set kernels use: the best available, lowered by `INFERGATE_CPU_ISA`.
pub(crate) fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let wanted = match std::env::var("INFERGATE_CPU_ISA").ok().as_deref() {
            Some("scalar") => Isa::Scalar,
            Some("avx2") => Isa::Avx2,
            _ => Isa::Avx512,
        };
        best_available().min(wanted)
    })
}

/// Every instruction set this CPU can run, for tests that compare them.
#[cfg(test)]
pub(crate) fn all_available() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|&i| i <= best_available())
        .collect()
}

/// Define `fn $name(isa: Isa, args…)` that runs the `#[inline(always)]` generic function
/// `$body::<FMA>(args…)` compiled for `isa`: on x86-64 it is called from `#[target_feature]`
/// wrappers, so it is inlined and auto-vectorised with AVX2 or AVX-512 vectors; `FMA` tells the
/// body whether `mul_add` is one instruction ([`fmadd`]).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $body:ident;) => {
        $(#[$meta])*
        $vis fn $name(isa: $crate::cpu::simd::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx2,fma")]
            $(#[$meta])*
            fn avx512($($arg: $ty),*) $(-> $ret)? {
                $body::<true>($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            $(#[$meta])*
            fn avx2($($arg: $ty),*) $(-> $ret)? {
                $body::<true>($($arg),*)
            }
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx512` comes from `simd::isa`/`all_available`, which return it only
                // when the CPU reports AVX-512F, AVX2 and FMA.
                $crate::cpu::simd::Isa::Avx512 => {
                    #[allow(unsafe_code)]
                    unsafe {
                        avx512($($arg),*)
                    }
                }
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `Isa::Avx2` is only returned when the CPU reports AVX2 and FMA.
                $crate::cpu::simd::Isa::Avx2 => {
                    #[allow(unsafe_code)]
                    unsafe {
                        avx2($($arg),*)
                    }
                }
                _ => $body::<false>($($arg),*),
            }
        }
    };
}

pub(crate) use multiversion;

/// `a * b + c`, fused when the caller was compiled with FMA (see [`multiversion`]).
#[inline(always)]
pub(crate) fn fmadd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// Ask for the cache line holding `p` to be brought into L1. A hint only: nothing is read, and no
/// address can fault.
#[inline(always)]
pub(crate) fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing, whatever the address.
    #[allow(unsafe_code)]
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for the cache lines of `rows` rows of `cols` values starting at `p`, rows `ld` values
/// apart, to be brought into L1 ([`prefetch`]). A kernel's tile of rows lies a whole output row
/// apart, each on its own page, which the hardware prefetchers do not follow; a kernel calls this
/// a few hundred cycles before it touches the tile.
#[inline(always)]
pub(crate) fn prefetch_rows(p: *const f32, ld: usize, rows: usize, cols: usize) {
    if cols == 0 {
        return;
    }
    for i in 0..rows {
        let row = p.wrapping_add(i * ld);
        let mut j = 0;
        while j < cols {
            prefetch(row.wrapping_add(j));
            j += 16;
        }
        // the row's last line, when the row starts mid-line
        prefetch(row.wrapping_add(cols - 1));
    }
}
