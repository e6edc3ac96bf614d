//! Fault injection for drills: delay and/or abort a percentage of a route's requests.
//!
//! The pipeline asks [`FaultPolicy::decide`] once per request, before the upstream call; it sleeps
//! for the delay (if any) and then answers with the abort (if any) through its error module, marked
//! as coming from the gateway.

use std::time::Duration;

use http::StatusCode;

/// A probability in percent, stored as a threshold on a 64-bit random number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percent(u64);

impl Percent {
    /// `p` percent, clamped to 0..=100.
    pub fn new(p: f64) -> Self {
        let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 100.0) };
        if p >= 100.0 {
            return Percent(u64::MAX);
        }
        Percent((p / 100.0 * 18_446_744_073_709_551_616.0) as u64)
    }

    /// Whether a uniform random `roll` falls within the percentage.
    pub fn hit(self, roll: u64) -> bool {
        self.0 == u64::MAX || roll < self.0
    }

    /// The percentage.
    pub fn get(self) -> f64 {
        if self.0 == u64::MAX {
            100.0
        } else {
            self.0 as f64 / 18_446_744_073_709_551_616.0 * 100.0
        }
    }
}

/// How an injected abort answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultAbort {
    /// HTTP status for HTTP callers.
    pub http_status: StatusCode,
    /// gRPC code for gRPC callers (`None`: mapped from the HTTP status by the error module).
    pub grpc_code: Option<u32>,
}

/// A route's fault injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultPolicy {
    /// Delay this share of requests by this long.
    pub delay: Option<(Percent, Duration)>,
    /// Abort this share of requests like this.
    pub abort: Option<(Percent, FaultAbort)>,
}

/// What to do to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultDecision {
    /// Sleep this long first.
    pub delay: Option<Duration>,
    /// Then answer with this instead of calling the upstream.
    pub abort: Option<FaultAbort>,
}

impl FaultPolicy {
    /// Decides with fresh random numbers.
    pub fn decide(&self) -> FaultDecision {
        self.decide_with(rand::random(), rand::random())
    }

    /// Decides with the given uniform random numbers (independent rolls for delay and abort).
    pub fn decide_with(&self, delay_roll: u64, abort_roll: u64) -> FaultDecision {
        FaultDecision {
            delay: self.delay.filter(|(p, _)| p.hit(delay_roll)).map(|(_, d)| d),
            abort: self.abort.filter(|(p, _)| p.hit(abort_roll)).map(|(_, a)| a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_thresholds() {
        assert!(!Percent::new(0.0).hit(0));
        assert!(Percent::new(100.0).hit(u64::MAX));
        assert!(Percent::new(50.0).hit(u64::MAX / 2 - 1));
        assert!(!Percent::new(50.0).hit(u64::MAX / 2 + 1));
        assert!((Percent::new(12.5).get() - 12.5).abs() < 1e-9);
    }

    #[test]
    fn delay_and_abort_roll_independently() {
        let abort = FaultAbort {
            http_status: StatusCode::SERVICE_UNAVAILABLE,
            grpc_code: Some(14),
        };
        let f = FaultPolicy {
            delay: Some((Percent::new(100.0), Duration::from_millis(5))),
            abort: Some((Percent::new(10.0), abort)),
        };
        assert_eq!(
            f.decide_with(0, u64::MAX),
            FaultDecision {
                delay: Some(Duration::from_millis(5)),
                abort: None
            }
        );
        assert_eq!(f.decide_with(0, 0).abort, Some(abort));
    }
}
