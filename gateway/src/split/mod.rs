//! Canary split: choose one of a route's weighted destinations for a request.
//!
//! Order of precedence: a destination forced by the `x-infergate-destination` header (by
//! destination name or upstream name), then — when the route is sticky and the caller is known — a
//! stable hash of the caller placed on the cumulative weight line, else a uniform random point on
//! that line. Weights are integers with any sum. A caller keeps its destination for as long as the
//! weights are unchanged; shifting weights moves only the callers whose point crosses a boundary.
//!
//! The weights used are the configured ones unless automatic canary analysis overrides them
//! (rollback or progressive promotion, see [`crate::canary`]); pass those with
//! [`Split::choose_with`].

pub mod rewrite;

use std::sync::Arc;

use http::{HeaderMap, HeaderName};

pub use rewrite::{RewrittenBody, rewrite_grpc_version, rewrite_rest_path};

use crate::caller::Caller;

/// The header that forces a destination (value: a destination name or upstream name).
pub const FORCE_HEADER: HeaderName = HeaderName::from_static("x-infergate-destination");

/// One weighted destination of a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// Its name in the route (metric label `destination`); defaults to the upstream's name.
    pub name: Arc<str>,
    /// The upstream cluster that serves it.
    pub upstream: Arc<str>,
    /// Integer weight (any sum; 0 = receives only forced traffic).
    pub weight: u32,
    /// Model version to rewrite requests to (REST path and gRPC `model_version`), if any.
    pub model_version: Option<Arc<str>>,
}

/// Why a destination was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceReason {
    /// The `x-infergate-destination` header named it.
    Forced,
    /// The caller's stable hash fell on it.
    Sticky,
    /// A random point fell on it.
    Weighted,
}

/// The destination chosen for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// Index into [`Split::destinations`].
    pub index: usize,
    /// Why.
    pub reason: ChoiceReason,
}

/// A route's compiled split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    destinations: Arc<[Destination]>,
    weights: Arc<[u32]>,
    sticky: bool,
}

impl Split {
    /// A split over `destinations` (at least one). `sticky` pins known callers by hash.
    pub fn new(destinations: Vec<Destination>, sticky: bool) -> Self {
        let weights: Arc<[u32]> = destinations.iter().map(|d| d.weight).collect();
        Self {
            destinations: destinations.into(),
            weights,
            sticky,
        }
    }

    /// A split that sends everything to one upstream.
    pub fn single(upstream: &str) -> Self {
        let up: Arc<str> = upstream.into();
        Self::new(
            vec![Destination {
                name: up.clone(),
                upstream: up,
                weight: 1,
                model_version: None,
            }],
            false,
        )
    }

    /// The destinations in config order.
    pub fn destinations(&self) -> &[Destination] {
        &self.destinations
    }

    /// The configured weights, in destination order.
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// Whether known callers are pinned by hash.
    pub fn sticky(&self) -> bool {
        self.sticky
    }

    /// Chooses with the configured weights and a fresh random number.
    pub fn choose(&self, headers: &HeaderMap, caller: &Caller<'_>) -> Choice {
        self.choose_with(headers, caller, &self.weights, rand::random())
    }

    /// Chooses with `weights` (the configured ones or a canary override, same length as
    /// [`Split::destinations`]) and `roll` as the random number used when neither forcing nor
    /// stickiness applies.
    pub fn choose_with(
        &self,
        headers: &HeaderMap,
        caller: &Caller<'_>,
        weights: &[u32],
        roll: u64,
    ) -> Choice {
        if let Some(index) = self.forced(headers) {
            return Choice {
                index,
                reason: ChoiceReason::Forced,
            };
        }
        let (point, reason) = if self.sticky && *caller != Caller::Anonymous {
            (caller.stable_hash(), ChoiceReason::Sticky)
        } else {
            (roll, ChoiceReason::Weighted)
        };
        Choice {
            index: pick(weights, point),
            reason,
        }
    }

    /// The destination the force header names, if it names one of ours.
    pub fn forced(&self, headers: &HeaderMap) -> Option<usize> {
        let v = headers.get(FORCE_HEADER)?.to_str().ok()?.trim();
        self.destinations
            .iter()
            .position(|d| *d.name == *v)
            .or_else(|| self.destinations.iter().position(|d| *d.upstream == *v))
    }
}

/// Places `point` on the cumulative weight line: destination `i` owns `[sum(w[..i]), sum(w[..=i]))`
/// of `point % total`. With every weight 0 the first destination is chosen.
pub fn pick(weights: &[u32], point: u64) -> usize {
    let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
    if total == 0 {
        return 0;
    }
    // Multiply-shift maps the 64-bit point onto [0, total) without modulo bias worth measuring.
    let mut x = ((u128::from(point) * u128::from(total)) >> 64) as u64;
    for (i, &w) in weights.iter().enumerate() {
        let w = u64::from(w);
        if x < w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn two(w0: u32, w1: u32) -> Split {
        let d = |n: &str, w, v: &str| Destination {
            name: n.into(),
            upstream: format!("{n}-up").into(),
            weight: w,
            model_version: Some(v.into()),
        };
        Split::new(vec![d("stable", w0, "1"), d("canary", w1, "2")], true)
    }

    #[test]
    fn pick_follows_the_cumulative_line() {
        assert_eq!(pick(&[1, 3], 0), 0);
        assert_eq!(pick(&[1, 3], u64::MAX / 4 - 1), 0);
        assert_eq!(pick(&[1, 3], u64::MAX / 4 + 1), 1);
        assert_eq!(pick(&[0, 5], 0), 1);
        assert_eq!(pick(&[0, 0], 123), 0);
    }

    #[test]
    fn forced_by_name_or_upstream() {
        let s = two(100, 0);
        let mut h = HeaderMap::new();
        h.insert(FORCE_HEADER, HeaderValue::from_static("canary"));
        let c = s.choose(&h, &Caller::Anonymous);
        assert_eq!((c.index, c.reason), (1, ChoiceReason::Forced));
        h.insert(FORCE_HEADER, HeaderValue::from_static("canary-up"));
        assert_eq!(s.choose(&h, &Caller::Anonymous).index, 1);
        h.insert(FORCE_HEADER, HeaderValue::from_static("nope"));
        assert_eq!(s.choose(&h, &Caller::Anonymous).index, 0);
    }
}
