//! Outlier detection: an endpoint that fails `consecutive_failures` times in a row is ejected from balancing
//! for `base_ejection × n` (n = times it has been ejected, capped at `max_ejection`), unless that would eject
//! more than `max_ejected_percent` of the upstream's endpoints (at least one may always be ejected).

use std::time::Duration;

use tokio::time::Instant;

/// Outlier-detection settings of one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutlierSettings {
    /// Consecutive failures (5xx answers, connect failures, resets) that eject an endpoint; 0 disables ejection.
    pub consecutive_failures: u32,
    /// Ejection time for the first ejection; the n-th lasts n times as long.
    pub base_ejection: Duration,
    /// Cap on one ejection's length.
    pub max_ejection: Duration,
    /// At most this percentage of the endpoints are ejected at once (one always may be).
    pub max_ejected_percent: u8,
}

impl Default for OutlierSettings {
    /// Istio's defaults: 5 consecutive errors, 30 s base ejection, at most 10% of hosts (here: at least one).
    fn default() -> Self {
        OutlierSettings {
            consecutive_failures: 5,
            base_ejection: Duration::from_secs(30),
            max_ejection: Duration::from_secs(300),
            max_ejected_percent: 10,
        }
    }
}

/// The outlier state of one endpoint.
#[derive(Debug, Default)]
pub(crate) struct OutlierState {
    consecutive: u32,
    times_ejected: u32,
    ejected_until: Option<Instant>,
}

/// What recording an outcome did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing changed in the ejection state.
    Unchanged,
    /// The endpoint reached the failure threshold and is now ejected for this long.
    Ejected(Duration),
    /// The endpoint reached the threshold but the ejection cap forbids ejecting it.
    CapReached,
}

impl OutlierState {
    /// True while the endpoint is ejected at `now`.
    pub(crate) fn is_ejected(&self, now: Instant) -> bool {
        self.ejected_until.is_some_and(|until| now < until)
    }

    /// Remaining ejection time at `now`, when ejected.
    pub(crate) fn remaining(&self, now: Instant) -> Option<Duration> {
        self.ejected_until.filter(|u| now < *u).map(|u| u - now)
    }

    /// Records a success: the consecutive-failure count starts over.
    pub(crate) fn record_success(&mut self) {
        self.consecutive = 0;
    }

    /// Records a failure; `may_eject` says whether the cap on ejected endpoints leaves room for one more.
    pub(crate) fn record_failure(
        &mut self,
        settings: &OutlierSettings,
        now: Instant,
        may_eject: bool,
    ) -> Verdict {
        if settings.consecutive_failures == 0 || self.is_ejected(now) {
            return Verdict::Unchanged;
        }
        self.consecutive += 1;
        if self.consecutive < settings.consecutive_failures {
            return Verdict::Unchanged;
        }
        if !may_eject {
            return Verdict::CapReached;
        }
        self.consecutive = 0;
        self.times_ejected = self.times_ejected.saturating_add(1);
        let length = settings
            .base_ejection
            .saturating_mul(self.times_ejected)
            .min(settings.max_ejection);
        self.ejected_until = Some(now + length);
        Verdict::Ejected(length)
    }
}

/// How many of `total` endpoints may be ejected at once.
pub(crate) fn max_ejected(settings: &OutlierSettings, total: usize) -> usize {
    let by_percent = total * usize::from(settings.max_ejected_percent.min(100)) / 100;
    by_percent.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ejection_grows_with_each_ejection_and_ends_on_time() {
        let s = OutlierSettings {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(25),
            max_ejected_percent: 50,
        };
        let mut st = OutlierState::default();
        let now = Instant::now();
        assert_eq!(st.record_failure(&s, now, true), Verdict::Unchanged);
        st.record_success();
        assert_eq!(st.record_failure(&s, now, true), Verdict::Unchanged);
        assert_eq!(st.record_failure(&s, now, true), Verdict::Unchanged);
        assert_eq!(
            st.record_failure(&s, now, true),
            Verdict::Ejected(Duration::from_secs(10))
        );
        assert!(st.is_ejected(now + Duration::from_secs(9)));
        assert!(!st.is_ejected(now + Duration::from_secs(10)));
        let later = now + Duration::from_secs(11);
        for _ in 0..2 {
            st.record_failure(&s, later, true);
        }
        assert_eq!(
            st.record_failure(&s, later, true),
            Verdict::Ejected(Duration::from_secs(20))
        );
        let later = later + Duration::from_secs(21);
        for _ in 0..2 {
            st.record_failure(&s, later, true);
        }
        // Third ejection: 30 s capped at 25 s.
        assert_eq!(
            st.record_failure(&s, later, true),
            Verdict::Ejected(Duration::from_secs(25))
        );
    }

    #[test]
    fn the_cap_allows_at_least_one_ejection() {
        let s = OutlierSettings::default();
        assert_eq!(max_ejected(&s, 1), 1);
        assert_eq!(max_ejected(&s, 30), 3);
        let mut st = OutlierState::default();
        let now = Instant::now();
        for _ in 0..4 {
            st.record_failure(&s, now, false);
        }
        assert_eq!(st.record_failure(&s, now, false), Verdict::CapReached);
    }
}
