//! The gateway's routing rules: a YAML file with restart-only `listeners` and hot `upstreams`, `callers`
//! and `routes`. Values are typed at parse time (durations, rates, byte sizes); every default lives in
//! [`defaults`]; [`validate`](self::validate) checks the meaning and points at the exact line.

pub mod defaults;
mod retry_on;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::diagnostic::{Diagnostic, Diagnostics, Pos};
use crate::node::{Origin, SpanIndex, from_node};
use crate::units::{self, ByteSize, Rate};
use crate::{MAX_CONFIG_BYTES, yaml};

pub use retry_on::{GrpcCode, RetryOn};

/// The whole gateway config: restart-only [`Listeners`] and hot-reloadable [`RoutingRules`].
///
/// The two halves are separate types so that the reload path can swap `rules` while `listeners`
/// stay what the process started with (see [`GatewayConfig::reloaded`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// Addresses, TLS and connection limits: read once at start-up.
    pub listeners: Listeners,
    /// Upstreams, callers and routes: swapped atomically on every valid reload.
    pub rules: RoutingRules,
}

/// The hot half of the config: what a reload may change.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct RoutingRules {
    /// Backend clusters that routes send traffic to.
    pub upstreams: Vec<Upstream>,
    /// How callers are identified and what quota they get.
    pub callers: Callers,
    /// Routes, tried in order; the first that matches a request handles it.
    pub routes: Vec<Route>,
}

/// The file as written: top-level sections.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayFile {
    /// Restart-only listener settings.
    #[serde(default)]
    listeners: Listeners,
    /// Backend clusters.
    #[serde(default)]
    upstreams: Vec<Upstream>,
    /// Caller identification and quotas.
    #[serde(default)]
    callers: Callers,
    /// Routes, first match wins.
    #[serde(default)]
    routes: Vec<Route>,
}

/// Restart-only settings: changing them in a running gateway has no effect until it restarts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Listeners {
    /// The data port that clients send requests to.
    pub data: DataListener,
    /// The admin port: `/ready`, `/live`, `/metrics`, `/config`, `/config/errors`.
    pub admin: AdminListener,
    /// Limits applied to every client connection on the data port.
    pub limits: ConnectionLimits,
    /// Runtime worker threads; absent means one per CPU core.
    pub worker_threads: Option<usize>,
    /// How long shutdown waits for in-flight requests before closing connections.
    #[serde(with = "units::duration")]
    pub drain_timeout: Duration,
}

/// The data listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataListener {
    /// `IP:port` to listen on, e.g. `0.0.0.0:8080` or `[::]:8080`.
    #[serde(with = "units::socket_addr")]
    pub address: SocketAddr,
    /// Serve TLS (h2 and HTTP/1.1 by ALPN) instead of plaintext HTTP/1.1 + h2c.
    pub tls: Option<ServerTls>,
}

/// TLS on the data listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// PEM certificate chain; a relative path is resolved against the config file's folder.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM bundle of CAs whose client certificates are accepted (mTLS); absent means no client certificates.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Refuse clients that present no certificate signed by `client_ca`.
    #[serde(default)]
    pub require_client_cert: bool,
}

/// The admin listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminListener {
    /// `IP:port` of the admin API; keep it on loopback unless a scraper needs it.
    #[serde(with = "units::socket_addr")]
    pub address: SocketAddr,
}

/// Per-connection limits on the data listener.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionLimits {
    /// Largest request header block (HTTP/1.1 head or HTTP/2 header list).
    pub max_header_bytes: ByteSize,
    /// Most headers in one request.
    pub max_headers: usize,
    /// Time a client has to send its request headers (slowloris guard).
    #[serde(with = "units::duration")]
    pub header_read_timeout: Duration,
    /// Close a connection that has been idle this long.
    #[serde(with = "units::duration")]
    pub idle_timeout: Duration,
    /// Close a connection whose response write has made no progress this long (the client does not read);
    /// its upstream stream and concurrency slot are freed. On HTTP/2 the stalled stream alone is reset (CANCEL).
    #[serde(with = "units::duration")]
    pub write_timeout: Duration,
    /// End a request whose body, or whose response body, has moved no bytes this long; on HTTP/2 an answer
    /// whose upstream stops sending is reset (CANCEL) and its upstream slot freed.
    #[serde(with = "units::duration")]
    pub stream_idle_timeout: Duration,
    /// Client connections open at once on the data listener; more are refused and closed at once.
    pub max_connections: usize,
    /// HTTP/2 streams a client may have open at once.
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 streams a client may reset before they are accepted (rapid-reset guard).
    pub h2_max_pending_accept_reset_streams: usize,
    /// HTTP/2 streams the gateway may reset for client protocol errors before closing the connection.
    pub h2_max_local_error_reset_streams: usize,
    /// Largest request body; larger requests get 413.
    pub max_request_body: ByteSize,
}

/// A backend cluster: one or more endpoints speaking the same protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// Unique name that routes refer to.
    pub name: String,
    /// `host:port` of each endpoint; `host` may be an IP or a DNS name (re-resolved every `resolve_interval`).
    pub endpoints: Vec<Endpoint>,
    /// How often DNS names in `endpoints` are resolved again.
    #[serde(default = "defaults::resolve_interval", with = "units::duration")]
    pub resolve_interval: Duration,
    /// Wire protocol to the endpoints: `h2c` (HTTP/2 prior knowledge), `http1`, or `h2-tls`.
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// TLS towards the endpoints: required by `h2-tls`; with `http1`, HTTP/1.1 over TLS.
    #[serde(default)]
    pub tls: Option<UpstreamTls>,
    /// Connections kept to each endpoint (HTTP/2 multiplexes requests over them).
    #[serde(default = "defaults::connections_per_endpoint")]
    pub connections_per_endpoint: u32,
    /// Requests in flight to this upstream at once; more wait as pending.
    #[serde(default = "defaults::max_concurrent_requests")]
    pub max_concurrent_requests: u32,
    /// Requests allowed to wait for a slot; beyond that the gateway answers 503 / UNAVAILABLE at once.
    #[serde(default = "defaults::max_pending_requests")]
    pub max_pending_requests: u32,
    /// Time allowed to open a connection to an endpoint.
    #[serde(default = "defaults::connect_timeout", with = "units::duration")]
    pub connect_timeout: Duration,
    /// Eject endpoints that keep failing; absent means never eject.
    #[serde(default)]
    pub outlier_detection: Option<OutlierDetection>,
}

/// `host:port` of an upstream endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// IP address or DNS name (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// Wire protocol to an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamProtocol {
    /// HTTP/2 over plaintext TCP with prior knowledge (the backend on loopback).
    #[default]
    H2c,
    /// HTTP/1.1 over plaintext TCP.
    Http1,
    /// HTTP/2 over TLS (ALPN `h2`).
    H2Tls,
}

/// TLS to an upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// PEM bundle of CAs that sign the upstream's certificate.
    pub ca: PathBuf,
    /// Name checked against the upstream certificate; absent means the endpoint's host.
    #[serde(default)]
    pub server_name: Option<String>,
    /// Client certificate chain for mTLS to the upstream.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// Private key for `cert`.
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// Outlier ejection of failing endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutlierDetection {
    /// Consecutive 5xx (or connect failures) that eject an endpoint.
    pub consecutive_5xx: u32,
    /// How often endpoints are checked and ejections expire.
    #[serde(with = "units::duration")]
    pub interval: Duration,
    /// Ejection time; multiplied by how many times the endpoint has been ejected.
    #[serde(with = "units::duration")]
    pub base_ejection_time: Duration,
    /// Most endpoints of the upstream ejected at once, in percent (at least one endpoint always stays).
    pub max_ejected_percent: f64,
}

/// How callers are identified, and their quotas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Callers {
    /// Where the caller id comes from: `{ header: NAME }`, `mtls_identity`, or `peer_address`.
    pub identify_by: CallerIdentity,
    /// What to do with a request that carries no identity (header missing, no client certificate).
    pub unidentified: Unidentified,
    /// Quota every caller gets on every route unless overridden; absent means unlimited.
    pub default_quota: Option<Quota>,
    /// Per-caller quotas that replace the default.
    pub overrides: Vec<CallerOverride>,
    /// Most (route, caller) token buckets kept in memory (about 40 bytes each). Idle buckets are dropped
    /// first; when every bucket is active, some are dropped and those callers restart with a full bucket.
    #[serde(default = "defaults::quota_buckets")]
    pub quota_buckets: u32,
}

/// Where a caller's identity comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallerIdentity {
    /// The value of this request header (e.g. `x-caller-id`).
    Header(String),
    /// The client certificate's first URI SAN, else its first DNS SAN (needs `listeners.data.tls.client_ca`).
    MtlsIdentity,
    /// The client's IP address.
    #[default]
    PeerAddress,
}

/// Handling of requests without a caller identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unidentified {
    /// Use the client's IP address as its id.
    #[default]
    PeerAddress,
    /// All unidentified requests share one bucket, under the caller id `anonymous`.
    Shared,
    /// Refuse with 401 / UNAUTHENTICATED.
    Reject,
}

/// A token bucket: `rate` refills, `burst` is the bucket size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Refill rate, e.g. `100/s` or `6000/min`.
    pub rate: Rate,
    /// Bucket size (requests allowed at once after an idle spell); absent means one period of `rate`.
    #[serde(default)]
    pub burst: Option<u64>,
}

/// A caller whose quota differs from the default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerOverride {
    /// The caller id, as produced by `identify_by`.
    pub caller: String,
    /// This caller's quota.
    #[serde(default)]
    pub quota: Option<Quota>,
    /// No quota at all for this caller (instead of `quota`).
    #[serde(default)]
    pub unlimited: bool,
}

/// A route: which requests it takes, where they go, and how they are treated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Unique name, used in metrics and logs.
    pub name: String,
    /// Which requests this route takes; absent or empty matches every request.
    #[serde(default, rename = "match")]
    pub criteria: RouteMatch,
    /// Weighted destinations (canary split); weights are relative integers.
    pub destinations: Vec<Destination>,
    /// Pin each caller to one destination (by a hash of its id) so it never flips between versions.
    #[serde(default)]
    pub sticky_by_caller: bool,
    /// Overall deadline for the request, covering every try and back-off.
    #[serde(default = "defaults::route_timeout", with = "units::duration")]
    pub timeout: Duration,
    /// Retry policy; absent means no retries.
    #[serde(default)]
    pub retries: Option<RetryPolicy>,
    /// Per-caller quota on this route, replacing `callers.default_quota` (caller overrides still win).
    #[serde(default)]
    pub quota: Option<Quota>,
    /// Copy a share of requests to another upstream; its responses are discarded.
    #[serde(default)]
    pub mirror: Option<Mirror>,
    /// Inject delays or errors for drills.
    #[serde(default)]
    pub fault: Option<FaultInjection>,
    /// Compare a canary destination against a baseline and promote or roll back.
    #[serde(default)]
    pub canary: Option<CanaryAnalysis>,
}

/// Conditions a request must meet (all given ones must hold).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteMatch {
    /// `Host`/`:authority` without port: exact (`api.example.com`) or a leading wildcard (`*.example.com`).
    pub host: Option<String>,
    /// Path starts with this (e.g. `/v2/models/`).
    pub path_prefix: Option<String>,
    /// Path equals this.
    pub path_exact: Option<String>,
    /// HTTP methods (upper case); empty means any.
    pub methods: Vec<String>,
    /// Header conditions.
    pub headers: Vec<HeaderMatch>,
    /// KServe model name: from `/v2/models/{name}/...` (REST) or `model_name` (gRPC).
    pub model: Option<String>,
}

/// A header condition: give exactly one of `exact`, `prefix`, `present`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatch {
    /// Header name (case-insensitive).
    pub name: String,
    /// The value equals this.
    #[serde(default)]
    pub exact: Option<String>,
    /// The value starts with this.
    #[serde(default)]
    pub prefix: Option<String>,
    /// `true`: the header is there; `false`: it is absent.
    #[serde(default)]
    pub present: Option<bool>,
}

/// One destination of a route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    /// Name used by `canary` and the `x-infergate-destination` header; absent means `upstream`, or
    /// `upstream/v{model_version}` when a version is set.
    #[serde(default)]
    pub name: Option<String>,
    /// Upstream (by name) that receives the traffic.
    pub upstream: String,
    /// Relative share of traffic (0 sends none).
    #[serde(default = "defaults::weight")]
    pub weight: u32,
    /// Rewrite the KServe model version to this (REST path `/versions/{v}` or gRPC `model_version`).
    #[serde(default)]
    pub model_version: Option<String>,
}

/// Retries of a failed try.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Retries after the first try (0 disables retries).
    #[serde(default = "defaults::retry_attempts")]
    pub attempts: u32,
    /// Deadline for each try until response headers arrive; absent means only the route timeout applies.
    #[serde(default, with = "units::opt_duration")]
    pub per_try_timeout: Option<Duration>,
    /// Which failures are retried: `5xx`, `gateway-error`, `connect-failure`, `refused-stream`, `reset`,
    /// `retriable-4xx`, HTTP status codes (`503`), gRPC codes (`unavailable`, `resource-exhausted`, ...).
    #[serde(default = "defaults::retry_on")]
    pub retry_on: Vec<RetryOn>,
    /// Fully jittered exponential back-off between tries.
    #[serde(default)]
    pub backoff: Backoff,
    /// Cap on retries relative to recent traffic, so retries cannot amplify an outage.
    #[serde(default)]
    pub budget: RetryBudget,
    /// Largest request body kept for replay; larger requests are not retried.
    #[serde(default = "defaults::max_replay_body")]
    pub max_replay_body: ByteSize,
}

/// Back-off between tries: a random wait in `[0, min(max, base * 2^n)]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Backoff {
    /// First back-off ceiling.
    #[serde(with = "units::duration")]
    pub base: Duration,
    /// Largest back-off ceiling.
    #[serde(with = "units::duration")]
    pub max: Duration,
}

/// Retry budget: retries allowed = `min_per_second * window + ratio * requests in window`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryBudget {
    /// Retries allowed as a fraction of recent requests (0.2 = 20%).
    pub ratio: f64,
    /// Retries always allowed per second, however little traffic there is.
    pub min_per_second: u32,
    /// How far back "recent requests" reaches.
    #[serde(with = "units::duration")]
    pub window: Duration,
}

/// Traffic mirroring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    /// Upstream that receives the copies.
    pub upstream: String,
    /// Share of requests copied, in percent.
    #[serde(default = "defaults::hundred_percent")]
    pub percent: f64,
    /// Copies of this route's requests in flight at once; further copies are dropped (and counted).
    #[serde(default = "defaults::mirror_max_concurrent")]
    pub max_concurrent: u32,
    /// A copy still unanswered after this is abandoned; absent means the route's `timeout`.
    #[serde(default, with = "units::opt_duration")]
    pub timeout: Option<Duration>,
}

/// Fault injection for drills.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultInjection {
    /// Delay a share of requests before forwarding them.
    pub delay: Option<FaultDelay>,
    /// Answer a share of requests with an error instead of forwarding them.
    pub abort: Option<FaultAbort>,
}

/// An injected delay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultDelay {
    /// How long to wait.
    #[serde(with = "units::duration")]
    pub duration: Duration,
    /// Share of requests delayed, in percent.
    #[serde(default = "defaults::hundred_percent")]
    pub percent: f64,
}

/// An injected error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultAbort {
    /// HTTP status returned to HTTP callers.
    pub http_status: u16,
    /// gRPC status returned to gRPC callers; absent means the standard mapping of `http_status`.
    #[serde(default)]
    pub grpc_status: Option<GrpcCode>,
    /// Share of requests aborted, in percent.
    #[serde(default = "defaults::hundred_percent")]
    pub percent: f64,
}

/// Automatic canary analysis between two destinations of the route.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanaryAnalysis {
    /// Destination name of the current version.
    pub baseline: String,
    /// Destination name of the new version.
    pub canary: String,
    /// Sliding window the two are compared over.
    #[serde(default = "defaults::canary_window", with = "units::duration")]
    pub window: Duration,
    /// Requests the canary must have served in the window before it is judged.
    #[serde(default = "defaults::canary_min_requests")]
    pub min_requests: u64,
    /// Largest allowed canary error rate minus baseline error rate (fraction: 0.01 = one point).
    #[serde(default = "defaults::canary_max_error_rate_delta")]
    pub max_error_rate_delta: f64,
    /// Largest allowed canary p99 latency divided by baseline p99 latency.
    #[serde(default = "defaults::canary_max_p99_ratio")]
    pub max_p99_ratio: f64,
    /// Latency noise floor: a canary p99 over the ratio counts only when it also exceeds the baseline's by
    /// more than this (sub-millisecond p99s jitter by large ratios).
    #[serde(default = "defaults::canary_p99_noise_floor", with = "units::duration")]
    pub p99_noise_floor: Duration,
    /// Shift weight to the canary in steps while it stays healthy; absent means judge only (no shifting).
    #[serde(default)]
    pub promotion: Option<Promotion>,
}

/// Progressive promotion of a canary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Promotion {
    /// Canary share after each step, in percent, increasing (e.g. `[10, 25, 50, 100]`).
    pub steps: Vec<u32>,
    /// Time between steps (each step also needs a healthy window).
    #[serde(default = "defaults::promotion_interval", with = "units::duration")]
    pub interval: Duration,
}

impl Default for Listeners {
    fn default() -> Self {
        Listeners {
            data: DataListener::default(),
            admin: AdminListener::default(),
            limits: ConnectionLimits::default(),
            worker_threads: None,
            drain_timeout: defaults::drain_timeout(),
        }
    }
}

impl Default for DataListener {
    fn default() -> Self {
        DataListener {
            address: defaults::data_address(),
            tls: None,
        }
    }
}

impl Default for AdminListener {
    fn default() -> Self {
        AdminListener {
            address: defaults::admin_address(),
        }
    }
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_header_bytes: defaults::max_header_bytes(),
            max_headers: defaults::max_headers(),
            header_read_timeout: defaults::header_read_timeout(),
            idle_timeout: defaults::idle_timeout(),
            write_timeout: defaults::write_timeout(),
            stream_idle_timeout: defaults::stream_idle_timeout(),
            max_connections: defaults::max_connections(),
            h2_max_concurrent_streams: defaults::h2_max_concurrent_streams(),
            h2_max_pending_accept_reset_streams: defaults::h2_max_pending_accept_reset_streams(),
            h2_max_local_error_reset_streams: defaults::h2_max_local_error_reset_streams(),
            max_request_body: defaults::max_request_body(),
        }
    }
}

impl Default for OutlierDetection {
    fn default() -> Self {
        OutlierDetection {
            consecutive_5xx: defaults::consecutive_5xx(),
            interval: defaults::outlier_interval(),
            base_ejection_time: defaults::base_ejection_time(),
            max_ejected_percent: defaults::max_ejected_percent(),
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: defaults::backoff_base(),
            max: defaults::backoff_max(),
        }
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            ratio: defaults::budget_ratio(),
            min_per_second: defaults::budget_min_per_second(),
            window: defaults::budget_window(),
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: defaults::retry_attempts(),
            per_try_timeout: None,
            retry_on: defaults::retry_on(),
            backoff: Backoff::default(),
            budget: RetryBudget::default(),
            max_replay_body: defaults::max_replay_body(),
        }
    }
}

impl Quota {
    /// The bucket size: `burst`, or one period's worth of `rate` when absent.
    pub fn burst(&self) -> u64 {
        self.burst.unwrap_or_else(|| defaults::burst_for(&self.rate))
    }
}

impl Destination {
    /// The destination's name: `name`, else `upstream`, else `upstream/v{model_version}`.
    pub fn id(&self) -> String {
        match (&self.name, &self.model_version) {
            (Some(n), _) => n.clone(),
            (None, Some(v)) => format!("{}/v{v}", self.upstream),
            (None, None) => self.upstream.clone(),
        }
    }
}

impl RouteMatch {
    /// Whether this match takes every request.
    pub fn is_catch_all(&self) -> bool {
        self == &RouteMatch::default()
    }
}

impl RoutingRules {
    /// The upstream with this name.
    pub fn upstream(&self, name: &str) -> Option<&Upstream> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    /// The route with this name.
    pub fn route(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.name == name)
    }
}

impl Default for Callers {
    fn default() -> Self {
        Callers {
            identify_by: CallerIdentity::default(),
            unidentified: Unidentified::default(),
            default_quota: None,
            overrides: Vec::new(),
            quota_buckets: defaults::quota_buckets(),
        }
    }
}

impl Callers {
    /// The quota that applies to `caller` on a route whose own quota is `route_quota`:
    /// a caller override wins, then the route's quota, then the default. `None` means unlimited.
    pub fn quota_for<'a>(&'a self, caller: &str, route_quota: Option<&'a Quota>) -> Option<&'a Quota> {
        match self.overrides.iter().find(|o| o.caller == caller) {
            Some(o) if o.unlimited => None,
            Some(o) => o.quota.as_ref(),
            None => route_quota.or(self.default_quota.as_ref()),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let help = "write host:port, e.g. 127.0.0.1:8000, backend.default.svc:8000 or [::1]:8000";
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, p) = rest
                .split_once("]:")
                .ok_or_else(|| format!("invalid endpoint '{s}'; {help}"))?;
            (h, p)
        } else {
            s.rsplit_once(':')
                .ok_or_else(|| format!("endpoint '{s}' has no port; {help}"))?
        };
        if host.is_empty() || host.contains(['/', ' ']) || (host.contains(':') && !s.starts_with('[')) {
            return Err(format!("invalid endpoint '{s}'; {help}"));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| format!("invalid port in endpoint '{s}'; {help}"))?;
        if port == 0 {
            return Err(format!("endpoint '{s}' has port 0; {help}"));
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
        })
    }
}

impl Serialize for Endpoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for GatewayConfig {
    /// Serializes in the file's shape (top-level `listeners`, `upstreams`, `callers`, `routes`).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("GatewayConfig", 4)?;
        st.serialize_field("listeners", &self.listeners)?;
        st.serialize_field("upstreams", &self.rules.upstreams)?;
        st.serialize_field("callers", &self.rules.callers)?;
        st.serialize_field("routes", &self.rules.routes)?;
        st.end()
    }
}

impl GatewayConfig {
    /// The value to run after a reload: the new rules with the listeners this process started with.
    /// When the file's listeners differ, a "needs restart" warning says so (and they are not applied).
    pub fn reloaded(
        running: &GatewayConfig,
        new: GatewayConfig,
        file: &Path,
    ) -> (GatewayConfig, Vec<Diagnostic>) {
        let mut warnings = Vec::new();
        if new.listeners != running.listeners {
            warnings.push(
                Diagnostic::warning(
                    file,
                    Pos { line: 1, column: 1 },
                    "'listeners' changed: listeners are restart-only, so the running gateway keeps the old ones \
                     (needs restart)",
                )
                .with_hint("restart the gateway to apply the new listeners; routes, upstreams and callers were reloaded"),
            );
        }
        (
            GatewayConfig {
                listeners: running.listeners.clone(),
                rules: new.rules,
            },
            warnings,
        )
    }
}

/// Parses and validates a gateway config. On success, warnings (if any) are dropped; use
/// [`load_gateway_config`] to keep them.
pub fn parse_gateway_config(text: &str, file: &Path) -> Result<GatewayConfig, Diagnostics> {
    load_gateway_config(text, file).map(|(c, _)| c)
}

/// Parses and validates a gateway config, returning it with its warnings, or every problem found.
///
/// Relative TLS file paths are resolved against `file`'s folder.
pub fn load_gateway_config(text: &str, file: &Path) -> Result<(GatewayConfig, Diagnostics), Diagnostics> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(Diagnostics::single(crate::too_large(file, text.len() as u64)));
    }
    let root = yaml::parse_yaml(text, file)?;
    if matches!(root.value, crate::node::Value::Null) {
        return Err(Diagnostics::single(
            Diagnostic::error(file, Pos::default(), "the file is empty").with_hint(
                "a gateway config needs at least 'upstreams' and 'routes'; see docs/configuration.md",
            ),
        ));
    }
    let raw: GatewayFile = from_node(&root, file, Origin::Yaml)?;
    let spans = SpanIndex::build(&root, Origin::Yaml);
    let mut config = GatewayConfig {
        listeners: raw.listeners,
        rules: RoutingRules {
            upstreams: raw.upstreams,
            callers: raw.callers,
            routes: raw.routes,
        },
    };
    resolve_paths(&mut config, file);
    let diags = validate::validate(&config, &spans, file);
    if diags.has_errors() {
        Err(diags)
    } else {
        Ok((config, diags))
    }
}

fn resolve_paths(config: &mut GatewayConfig, file: &Path) {
    let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let fix = |p: &mut PathBuf| {
        if p.is_relative() && !p.as_os_str().is_empty() {
            *p = base.join(&*p);
        }
    };
    if let Some(tls) = &mut config.listeners.data.tls {
        fix(&mut tls.cert);
        fix(&mut tls.key);
        if let Some(ca) = &mut tls.client_ca {
            fix(ca);
        }
    }
    for u in &mut config.rules.upstreams {
        if let Some(tls) = &mut u.tls {
            fix(&mut tls.ca);
            if let Some(c) = &mut tls.cert {
                fix(c);
            }
            if let Some(k) = &mut tls.key {
                fix(k);
            }
        }
    }
}

#[cfg(test)]
mod tests;
