//! Deterministic test inputs shared by the CPU kernels' unit tests: the same seed gives the same values on every
//! machine, so a failing case can be replayed.

/// `n` values spread uniformly over `[-amplitude, amplitude)`, from a linear congruential generator seeded by
/// `seed`.
pub(crate) fn det_uniform(n: usize, seed: u32, amplitude: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            ((s >> 8) as f32 / (1u32 << 24) as f32) * 2.0 * amplitude - amplitude
        })
        .collect()
}
