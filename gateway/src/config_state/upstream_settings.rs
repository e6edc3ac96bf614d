//! Turns the upstreams of `infergate-config`'s routing rules into [`UpstreamSettings`] (routes are compiled
//! by `route::compile`).

use std::time::Duration;

use infergate_config as cfg;

use crate::tls;
use crate::upstream::{ConnectSettings, EndpointSpec, OutlierSettings, UpstreamProtocol, UpstreamSettings};

/// The upstream settings for a configured upstream in a gateway of `workers` data workers (TLS files are
/// read here: a missing file rejects the reload with its name).
pub(crate) fn upstream_settings(u: &cfg::Upstream, workers: usize) -> Result<UpstreamSettings, String> {
    let protocol = match u.protocol {
        cfg::UpstreamProtocol::H2c | cfg::UpstreamProtocol::H2Tls => UpstreamProtocol::Http2,
        cfg::UpstreamProtocol::Http1 => UpstreamProtocol::Http1,
    };
    let tls = match (&u.tls, u.protocol) {
        (Some(t), _) => {
            let name = t
                .server_name
                .clone()
                .or_else(|| u.endpoints.first().map(|e| e.host.clone()))
                .unwrap_or_default();
            let client = match (&t.cert, &t.key) {
                (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
                _ => None,
            };
            Some(
                tls::upstream_tls(&t.ca, client, protocol, &name)
                    .map_err(|e| format!("upstream '{}': {e}", u.name))?,
            )
        }
        (None, cfg::UpstreamProtocol::H2Tls) => {
            return Err(format!(
                "upstream '{}' uses protocol h2-tls but has no 'tls' section naming its CA",
                u.name
            ));
        }
        (None, _) => None,
    };
    let outlier = match &u.outlier_detection {
        Some(o) => OutlierSettings {
            consecutive_failures: o.consecutive_5xx,
            base_ejection: o.base_ejection_time,
            max_ejection: o
                .base_ejection_time
                .saturating_mul(10)
                .max(Duration::from_secs(300)),
            max_ejected_percent: o.max_ejected_percent.clamp(0.0, 100.0) as u8,
        },
        None => OutlierSettings {
            consecutive_failures: 0,
            ..OutlierSettings::default()
        },
    };
    Ok(UpstreamSettings {
        name: u.name.clone(),
        endpoints: u
            .endpoints
            .iter()
            .map(|e| EndpointSpec {
                host: e.host.clone(),
                port: e.port,
            })
            .collect(),
        connect: ConnectSettings {
            protocol,
            tls,
            connect_timeout: u.connect_timeout,
            h2_connections: usize::try_from(u.connections_per_endpoint.max(1)).unwrap_or(1),
            // Every request in flight holds a connection; keeping as many idle as may be in flight means a
            // steady load never closes and reopens connections (a smaller cap churned them when a worker's
            // share of the load was above it).
            h1_max_idle: usize::try_from(u.max_concurrent_requests.max(1)).unwrap_or(1),
            workers,
        },
        max_concurrent: usize::try_from(u.max_concurrent_requests.max(1)).unwrap_or(1),
        max_pending: usize::try_from(u.max_pending_requests).unwrap_or(0),
        outlier,
        resolve_interval: u.resolve_interval,
    })
}
