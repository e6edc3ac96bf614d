//! Every default of the routing-rules schema, in one place (the reference doc lists the same values).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::units::{ByteSize, Rate};

/// Data listener address.
pub fn data_address() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8080)
}
/// Admin listener address (loopback: metrics and config must not be public by default).
pub fn admin_address() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9901)
}
/// Largest request header block accepted.
pub fn max_header_bytes() -> ByteSize {
    ByteSize(16 << 10)
}
/// Most request headers accepted.
pub fn max_headers() -> usize {
    100
}
/// Time allowed to receive a request's headers (slowloris guard).
pub fn header_read_timeout() -> Duration {
    Duration::from_secs(10)
}
/// Idle connection timeout.
pub fn idle_timeout() -> Duration {
    Duration::from_secs(60)
}
/// Time a response write may make no progress before the client connection is closed.
pub fn write_timeout() -> Duration {
    Duration::from_secs(30)
}
/// Time a request or response body may move no bytes before the request is ended.
pub fn stream_idle_timeout() -> Duration {
    Duration::from_secs(300)
}
/// Client connections open at once on the data listener.
pub fn max_connections() -> usize {
    10_000
}
/// HTTP/2 concurrent streams per client connection.
pub fn h2_max_concurrent_streams() -> u32 {
    200
}
/// HTTP/2 streams reset by the client before being accepted (rapid-reset guard).
pub fn h2_max_pending_accept_reset_streams() -> usize {
    20
}
/// HTTP/2 streams we may reset because of client protocol errors before closing the connection.
pub fn h2_max_local_error_reset_streams() -> usize {
    1024
}
/// Largest request body accepted.
pub fn max_request_body() -> ByteSize {
    ByteSize(64 << 20)
}
/// How long shutdown waits for in-flight requests.
pub fn drain_timeout() -> Duration {
    Duration::from_secs(30)
}
/// DNS re-resolve interval for upstream endpoints given by name.
pub fn resolve_interval() -> Duration {
    Duration::from_secs(30)
}
/// Connections per upstream endpoint.
pub fn connections_per_endpoint() -> u32 {
    2
}
/// Concurrent requests per upstream.
pub fn max_concurrent_requests() -> u32 {
    1024
}
/// Requests waiting for a connection slot per upstream.
pub fn max_pending_requests() -> u32 {
    1024
}
/// Upstream connect timeout.
pub fn connect_timeout() -> Duration {
    Duration::from_secs(1)
}
/// Outlier detection: consecutive 5xx before ejection (Istio's default).
pub fn consecutive_5xx() -> u32 {
    5
}
/// Outlier detection: sweep interval.
pub fn outlier_interval() -> Duration {
    Duration::from_secs(10)
}
/// Outlier detection: base ejection time (multiplied by the number of ejections).
pub fn base_ejection_time() -> Duration {
    Duration::from_secs(30)
}
/// Outlier detection: most endpoints ejected at once, in percent.
pub fn max_ejected_percent() -> f64 {
    10.0
}
/// Caller id used for requests that carry no identity, when they are admitted.
pub fn anonymous_caller() -> String {
    "anonymous".to_string()
}
/// Destination weight.
pub fn weight() -> u32 {
    1
}
/// Route timeout (covers every try).
pub fn route_timeout() -> Duration {
    Duration::from_secs(30)
}
/// Retries after the first try.
pub fn retry_attempts() -> u32 {
    2
}
/// Conditions retried by default.
pub fn retry_on() -> Vec<super::RetryOn> {
    use super::RetryOn;
    vec![
        RetryOn::ConnectFailure,
        RetryOn::RefusedStream,
        RetryOn::Reset,
        RetryOn::Grpc(super::GrpcCode::Unavailable),
    ]
}
/// Back-off base (Envoy's default).
pub fn backoff_base() -> Duration {
    Duration::from_millis(25)
}
/// Back-off cap (Envoy's default).
pub fn backoff_max() -> Duration {
    Duration::from_millis(250)
}
/// Retry budget: retries allowed as a fraction of recent requests.
pub fn budget_ratio() -> f64 {
    0.2
}
/// Retry budget: retries always allowed per second.
pub fn budget_min_per_second() -> u32 {
    10
}
/// Retry budget: how far back "recent requests" reaches.
pub fn budget_window() -> Duration {
    Duration::from_secs(10)
}
/// Largest request body kept for replay on retry.
pub fn max_replay_body() -> ByteSize {
    ByteSize(4 << 20)
}
/// Canary analysis window.
pub fn canary_window() -> Duration {
    Duration::from_secs(60)
}
/// Requests the canary must see in a window before it is judged.
pub fn canary_min_requests() -> u64 {
    100
}
/// Allowed error-rate increase of the canary over the baseline (fraction: 0.01 = one percentage point).
pub fn canary_max_error_rate_delta() -> f64 {
    0.01
}
/// Allowed ratio of canary p99 latency to baseline p99 latency.
pub fn canary_max_p99_ratio() -> f64 {
    1.5
}
/// Canary p99 differences at or below this are noise, whatever their ratio.
pub fn canary_p99_noise_floor() -> Duration {
    Duration::from_millis(1)
}
/// Mirrored copies of one route in flight at once.
pub fn mirror_max_concurrent() -> u32 {
    64
}
/// (route, caller) token buckets kept in memory: 262,144, about 10 MB.
pub fn quota_buckets() -> u32 {
    1 << 18
}
/// Time between promotion steps.
pub fn promotion_interval() -> Duration {
    Duration::from_secs(300)
}
/// Fault injection and mirror percent.
pub fn hundred_percent() -> f64 {
    100.0
}
/// Default quota burst: one period's worth of tokens.
pub fn burst_for(rate: &Rate) -> u64 {
    rate.tokens
}
/// `true`, for serde.
pub fn yes() -> bool {
    true
}
