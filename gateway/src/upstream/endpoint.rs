//! One endpoint of an upstream: its address, outstanding requests, outlier state and connections.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::outlier::{OutlierSettings, OutlierState, Verdict};
use super::pool::{ConnectSettings, Pool};

/// An endpoint as configured: a host (IP address or DNS name) and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointSpec {
    /// IP address or DNS name.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl EndpointSpec {
    /// The socket address when the host is an IP address.
    pub fn ip_addr(&self) -> Option<SocketAddr> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        host.parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, self.port))
    }
}

impl fmt::Display for EndpointSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') && !self.host.starts_with('[') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for EndpointSpec {
    type Err = String;

    /// Parses `host:port` or `[v6]:port`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (host, port) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("endpoint '{s}' has no port; write it as host:port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("endpoint '{s}': '{port}' is not a port number (1-65535)"))?;
        if host.is_empty() {
            return Err(format!("endpoint '{s}' has no host; write it as host:port"));
        }
        Ok(EndpointSpec {
            host: host.trim_start_matches('[').trim_end_matches(']').to_string(),
            port,
        })
    }
}

/// What the admin API and tests see of an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSnapshot {
    /// The endpoint's address.
    pub addr: SocketAddr,
    /// Requests sent and not yet finished.
    pub outstanding: usize,
    /// Remaining ejection time, when ejected.
    pub ejected_for: Option<Duration>,
    /// Open (HTTP/2) or idle (HTTP/1.1) connections.
    pub connections: usize,
}

pub(crate) struct Endpoint {
    addr: SocketAddr,
    outstanding: AtomicUsize,
    outlier: Mutex<OutlierState>,
    /// Set while the outlier state may hold an ejection (cleared once it is seen to have ended), so the
    /// per-request check takes the lock only then.
    maybe_ejected: AtomicBool,
    /// Set while the outlier state may count consecutive failures, so a success takes the lock only then.
    maybe_failing: AtomicBool,
    pool: Pool,
}

impl Endpoint {
    pub(crate) fn new(addr: SocketAddr, connect: &ConnectSettings) -> Endpoint {
        Endpoint {
            addr,
            outstanding: AtomicUsize::new(0),
            outlier: Mutex::new(OutlierState::default()),
            maybe_ejected: AtomicBool::new(false),
            maybe_failing: AtomicBool::new(false),
            pool: Pool::new(connect),
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    pub(crate) fn begin(&self) {
        self.outstanding.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn end(&self) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn is_ejected(&self, now: Instant) -> bool {
        if !self.maybe_ejected.load(Ordering::Acquire) {
            return false;
        }
        let Ok(s) = self.outlier.lock() else { return false };
        let ejected = s.is_ejected(now);
        if !ejected {
            // Cleared under the lock, so it cannot race with a new ejection (set under it too).
            self.maybe_ejected.store(false, Ordering::Release);
        }
        ejected
    }

    pub(crate) fn record_success(&self) {
        if !self.maybe_failing.load(Ordering::Acquire) {
            return;
        }
        if let Ok(mut s) = self.outlier.lock() {
            s.record_success();
            self.maybe_failing.store(false, Ordering::Release);
        }
    }

    /// Records a failure; returns the ejection length when this failure ejected the endpoint.
    pub(crate) fn record_failure(
        &self,
        settings: &OutlierSettings,
        now: Instant,
        may_eject: bool,
    ) -> Option<Duration> {
        let mut s = self.outlier.lock().ok()?;
        self.maybe_failing.store(true, Ordering::Release);
        match s.record_failure(settings, now, may_eject) {
            Verdict::Ejected(d) => {
                self.maybe_ejected.store(true, Ordering::Release);
                Some(d)
            }
            Verdict::Unchanged | Verdict::CapReached => None,
        }
    }

    pub(crate) fn snapshot(&self, now: Instant) -> EndpointSnapshot {
        EndpointSnapshot {
            addr: self.addr,
            outstanding: self.outstanding(),
            ejected_for: self.outlier.lock().ok().and_then(|s| s.remaining(now)),
            connections: self.pool.open_connections(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_specs_parse_and_name_their_problem() {
        let e: EndpointSpec = "backend.ns.svc:8001".parse().unwrap();
        assert_eq!(e.host, "backend.ns.svc");
        assert!(e.ip_addr().is_none());
        let e: EndpointSpec = "[::1]:80".parse().unwrap();
        assert_eq!(e.ip_addr().unwrap(), "[::1]:80".parse().unwrap());
        assert_eq!(e.to_string(), "[::1]:80");
        assert!(
            "localhost"
                .parse::<EndpointSpec>()
                .unwrap_err()
                .contains("no port")
        );
        assert!(
            "a:99999"
                .parse::<EndpointSpec>()
                .unwrap_err()
                .contains("not a port")
        );
    }
}
