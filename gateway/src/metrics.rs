//! Metric names, their descriptions and the Prometheus recorder.
//!
//! Labels are low-cardinality only: route, destination, upstream, outcome, status class, listener, result.
//! Never a caller id or request id.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Requests finished, by `route`, `destination`, `upstream`, `outcome` (`success`, `upstream_error`, or the
/// gateway error kind) and `status_class` (`2xx`…`5xx`).
pub const REQUESTS: &str = "infergate_gateway_requests_total";
/// Time from request arrival to response headers, seconds, by `route` and `destination`.
pub const REQUEST_DURATION: &str = "infergate_gateway_request_duration_seconds";
/// Tries sent upstream, by `upstream` and `outcome` (status class or failure kind).
pub const UPSTREAM_TRIES: &str = "infergate_gateway_upstream_tries_total";
/// Upstream try failures without a response, by `upstream` and `kind` (connect_failure, reset, …).
pub const UPSTREAM_FAILURES: &str = "infergate_gateway_upstream_failures_total";
/// Requests refused at once because an upstream's concurrency and queue limits were full, by `upstream`.
pub const UPSTREAM_OVERLOADED: &str = "infergate_gateway_upstream_overloaded_total";
/// Endpoint ejections by outlier detection, by `upstream`.
pub const UPSTREAM_EJECTIONS: &str = "infergate_gateway_upstream_ejections_total";
/// Retries (tries after the first), by `route` and `reason` (counted by the retry loop).
pub const RETRIES: &str = "infergate_gateway_retries_total";
/// Retries not made because the retry budget was spent, by `route`.
pub const RETRY_BUDGET_EXHAUSTED: &str = "infergate_gateway_retry_budget_exhausted_total";
/// Requests refused by a quota, by `route` (never by caller).
pub const QUOTA_REJECTIONS: &str = "infergate_gateway_quota_rejections_total";
/// Faults injected, by `route` and `kind` (`delay`, `abort`).
pub const FAULTS_INJECTED: &str = "infergate_gateway_faults_injected_total";
/// Mirrored requests, by `route`, `upstream` and `outcome`.
pub const MIRRORED: &str = "infergate_gateway_mirrored_requests_total";
/// Config reloads, by `result` (`applied`, `rejected`).
pub const CONFIG_RELOADS: &str = "infergate_gateway_config_reloads_total";
/// Unix time of the running config's load.
pub const CONFIG_LOADED_AT: &str = "infergate_gateway_config_loaded_timestamp_seconds";
/// Open client connections, by `listener` (`data`).
pub const OPEN_CONNECTIONS: &str = "infergate_gateway_open_connections";
/// Client connections accepted, by `listener` and `protocol` (`tcp`, `tls`).
pub const CONNECTIONS: &str = "infergate_gateway_connections_total";
/// TLS handshakes that failed, by `listener`.
pub const TLS_HANDSHAKE_FAILURES: &str = "infergate_gateway_tls_handshake_failures_total";
/// Canary analysis decisions (rollbacks, promotions), by `route` and `decision`.
pub const CANARY_DECISIONS: &str = "infergate_gateway_canary_decisions_total";

/// Latency buckets in seconds: 100 µs to 30 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0,
];

static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once and returns its handle (the same handle on every call,
/// so several gateways in one test process share it).
pub fn install() -> Result<PrometheusHandle, String> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .map_err(|e| e.to_string())?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder)
                .map_err(|e| format!("another metrics recorder is already installed in this process: {e}"))?;
            describe();
            Ok(handle)
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS,
        "Requests finished by route, destination, upstream, outcome and status class."
    );
    describe_histogram!(
        REQUEST_DURATION,
        metrics::Unit::Seconds,
        "Time from request arrival to response headers."
    );
    describe_counter!(UPSTREAM_TRIES, "Tries sent to an upstream, by outcome.");
    describe_counter!(
        UPSTREAM_FAILURES,
        "Upstream tries that failed without a response, by kind."
    );
    describe_counter!(
        UPSTREAM_OVERLOADED,
        "Requests refused because an upstream's limits were full."
    );
    describe_counter!(UPSTREAM_EJECTIONS, "Endpoints ejected by outlier detection.");
    describe_counter!(RETRIES, "Retries (tries after the first).");
    describe_counter!(
        RETRY_BUDGET_EXHAUSTED,
        "Retries not made because the retry budget was spent."
    );
    describe_counter!(QUOTA_REJECTIONS, "Requests refused by a per-caller quota.");
    describe_counter!(FAULTS_INJECTED, "Faults injected by fault-injection rules.");
    describe_counter!(MIRRORED, "Requests mirrored to a shadow upstream.");
    describe_counter!(CONFIG_RELOADS, "Routing-rule reloads by result.");
    describe_gauge!(
        CONFIG_LOADED_AT,
        metrics::Unit::Seconds,
        "Unix time the running rules were loaded."
    );
    describe_gauge!(OPEN_CONNECTIONS, "Open client connections.");
    describe_counter!(CONNECTIONS, "Client connections accepted.");
    describe_counter!(TLS_HANDSHAKE_FAILURES, "Client TLS handshakes that failed.");
    describe_counter!(CANARY_DECISIONS, "Automatic canary analysis decisions.");
}

/// `2xx`, `4xx`, … for a status code.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
