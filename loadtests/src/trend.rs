//! Growth trends for the soak: a least-squares line through (minute, value) samples, and the verdict that a
//! resource grows. A single reading says little (allocators keep freed memory, pools open connections on
//! demand); a slope fitted over many minutes after the warm-up says whether something accumulates.

use serde::Serialize;

/// The least-squares slope of `points` (x, y), in y per x; `None` with fewer than three points or no spread in x.
pub fn slope(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx <= f64::EPSILON {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    Some(sxy / sxx)
}

/// One resource's trend and whether it passes.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Trend {
    /// `gateway RSS MiB`, `backend-0 fds`, ...
    pub what: String,
    /// Fitted growth per minute (`None`: too few samples after the warm-up).
    pub per_minute: Option<f64>,
    /// Largest growth per minute allowed.
    pub limit_per_minute: f64,
    /// Samples the fit used.
    pub samples: usize,
    /// Whether the slope is within the limit.
    pub pass: bool,
}

/// Fits `samples` (minutes since the start, value) after `warmup_min` minutes and judges the slope.
pub fn judge(what: &str, samples: &[(f64, f64)], warmup_min: f64, limit_per_minute: f64) -> Trend {
    let kept: Vec<(f64, f64)> = samples.iter().copied().filter(|p| p.0 >= warmup_min).collect();
    let per_minute = slope(&kept);
    Trend {
        what: what.to_owned(),
        per_minute,
        limit_per_minute,
        samples: kept.len(),
        pass: per_minute.is_some_and(|s| s <= limit_per_minute),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_leak_fails_and_noise_around_a_level_passes() {
        let leak: Vec<(f64, f64)> = (0..30).map(|m| (m as f64, 100.0 + 2.0 * m as f64)).collect();
        let s = slope(&leak).expect("enough points");
        assert!((s - 2.0).abs() < 1e-9, "{s}");
        assert!(!judge("rss", &leak, 1.0, 1.0).pass);
        // Sawtooth (a cache that fills and is trimmed) around a flat level.
        let flat: Vec<(f64, f64)> = (0..30u32)
            .map(|m| (f64::from(m), 100.0 + if m.is_multiple_of(2) { 3.0 } else { -3.0 }))
            .collect();
        assert!(judge("rss", &flat, 1.0, 1.0).pass);
        // A warm-up climb is left out of the fit.
        let warm: Vec<(f64, f64)> = (0..30)
            .map(|m| (m as f64, if m == 0 { 10.0 } else { 100.0 }))
            .collect();
        let t = judge("rss", &warm, 1.0, 0.1);
        assert!(t.pass && t.samples == 29, "{t:?}");
        // Too few samples is a failure, not a pass: a soak that measured nothing proves nothing.
        assert!(!judge("rss", &warm[..3], 1.0, 1.0).pass);
    }
}
