//! Periodic DNS resolution of an upstream's endpoint names (a Kubernetes headless Service resolves to one
//! address per ready pod).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Weak;

use super::Upstream;

/// Resolves at once, then every `resolve_interval`, until the upstream is dropped. A failed resolution keeps
/// the previous addresses.
pub(crate) fn spawn(upstream: Weak<Upstream>) {
    tokio::spawn(async move {
        loop {
            let (specs, interval, name) = match upstream.upgrade() {
                Some(u) => (
                    u.settings.endpoints.clone(),
                    u.settings.resolve_interval,
                    u.settings.name.clone(),
                ),
                None => return,
            };
            let mut addrs = BTreeSet::<SocketAddr>::new();
            let mut failed = false;
            for spec in &specs {
                if let Some(a) = spec.ip_addr() {
                    addrs.insert(a);
                    continue;
                }
                match tokio::net::lookup_host((spec.host.as_str(), spec.port)).await {
                    Ok(found) => addrs.extend(found),
                    Err(e) => {
                        failed = true;
                        tracing::warn!(upstream = %name, endpoint = %spec, error = %e, "DNS resolution failed; keeping the previous addresses");
                    }
                }
            }
            match upstream.upgrade() {
                Some(u) => {
                    if !(failed && addrs.is_empty()) {
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
