//! The stable identity of a route across config versions. A leaf module: the policies that keep state per
//! route (quotas, retry budgets, canary analysis, mirroring) take it from here, not from `route`, which
//! depends on them.

use std::hash::Hasher;

use crate::stable_hash::StableHasher;

/// A stable identifier of a route across config versions: a hash of its name. Long-lived state (quota
/// buckets, retry budgets, canary windows, mirror limits) is keyed by it, so a reload keeps the state of
/// routes that still exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RouteKey(pub u64);

impl RouteKey {
    /// The key of the route named `name`.
    pub fn of(name: &str) -> Self {
        let mut h = StableHasher::default();
        h.write(name.as_bytes());
        Self(h.finish())
    }
}
