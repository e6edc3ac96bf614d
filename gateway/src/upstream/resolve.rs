//! Periodic DNS resolution of an upstream's endpoint names (a Kubernetes headless Service resolves to one
//! address per ready pod).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Weak;

use super::Upstream;

/// Resolves at once, then every `resolve_interval`, until the upstream is dropped. A name whose lookup fails
/// keeps the addresses it resolved to last time (see [`merge_round`]).
pub(crate) fn spawn(upstream: Weak<Upstream>) {
    tokio::spawn(async move {
        let mut last_good: Vec<Option<Vec<SocketAddr>>> = Vec::new();
        loop {
            let (specs, interval, name) = match upstream.upgrade() {
                Some(u) => (
                    u.settings.endpoints.clone(),
                    u.settings.resolve_interval,
                    u.settings.name.clone(),
                ),
                None => return,
            };
            let mut fresh = Vec::with_capacity(specs.len());
            for spec in &specs {
                if let Some(a) = spec.ip_addr() {
                    fresh.push(Some(vec![a]));
                    continue;
                }
                match tokio::net::lookup_host((spec.host.as_str(), spec.port)).await {
                    Ok(found) => fresh.push(Some(found.collect())),
                    Err(e) => {
                        tracing::warn!(upstream = %name, endpoint = %spec, error = %e, "DNS resolution failed; keeping the previous addresses");
                        fresh.push(None);
                    }
                }
            }
            let any_failed = fresh.iter().any(Option::is_none);
            let addrs = merge_round(&mut last_good, fresh);
            match upstream.upgrade() {
                Some(u) => {
                    // Nothing known and a lookup failing: keep whatever the upstream has.
                    if !(any_failed && addrs.is_empty()) {
                        let list: Vec<SocketAddr> = addrs.into_iter().collect();
                        let changed = {
                            let cur = u.endpoints.load();
                            cur.len() != list.len() || cur.iter().zip(&list).any(|(e, a)| e.addr() != *a)
                        };
                        if changed {
                            tracing::info!(upstream = %name, addresses = ?list, "endpoints resolved");
                        }
                        u.set_addresses(&list);
                    }
                }
                None => return,
            }
            tokio::time::sleep(interval).await;
        }
    });
}

/// The addresses after one round of lookups, one entry per configured endpoint in `fresh` (`None`: its lookup
/// failed): each endpoint's fresh answer, or, where the lookup failed, what it resolved to last time. `last_good`
/// carries those answers from round to round.
fn merge_round(
    last_good: &mut Vec<Option<Vec<SocketAddr>>>,
    fresh: Vec<Option<Vec<SocketAddr>>>,
) -> BTreeSet<SocketAddr> {
    last_good.resize(fresh.len(), None);
    let mut addrs = BTreeSet::new();
    for (known, answer) in last_good.iter_mut().zip(fresh) {
        if answer.is_some() {
            *known = answer;
        }
        addrs.extend(known.iter().flatten().copied());
    }
    addrs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], 8000))
    }

    #[test]
    fn a_name_that_fails_to_resolve_keeps_its_last_addresses_while_the_others_move_on() {
        let mut last = Vec::new();
        let round1 = merge_round(&mut last, vec![Some(vec![addr(1), addr(2)]), Some(vec![addr(3)])]);
        assert_eq!(round1, BTreeSet::from([addr(1), addr(2), addr(3)]));
        // The first name's lookup fails; the second name's pod was replaced.
        let round2 = merge_round(&mut last, vec![None, Some(vec![addr(4)])]);
        assert_eq!(round2, BTreeSet::from([addr(1), addr(2), addr(4)]));
        // The first name answers again, now with one pod.
        let round3 = merge_round(&mut last, vec![Some(vec![addr(2)]), Some(vec![addr(4)])]);
        assert_eq!(round3, BTreeSet::from([addr(2), addr(4)]));
        // A name that never resolved contributes nothing.
        let mut never = Vec::new();
        assert!(merge_round(&mut never, vec![None]).is_empty());
    }
}
