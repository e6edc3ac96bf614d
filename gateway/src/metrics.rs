//! Metric names, their descriptions and the Prometheus recorder.
//!
//! Labels are low-cardinality only: route, destination, upstream, outcome, status class, listener, result,
//! worker (one per data thread).
//! Never a caller id or request id.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Counter, Histogram, Label};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

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
/// Mirrored copies sent, by `route` and `outcome` (status class or failure kind).
pub const MIRROR_REQUESTS: &str = "infergate_gateway_mirror_requests_total";
/// Mirrored copies not sent because the route's mirror limit was reached, by `route`.
pub const MIRROR_DROPPED: &str = "infergate_gateway_mirror_dropped_total";
/// Token buckets dropped from the quota store, by `kind` (`idle`: lossless; `active`: the store was full).
pub const QUOTA_EVICTIONS: &str = "infergate_gateway_quota_evictions_total";
/// Config reloads, by `result` (`applied`, `rejected`).
pub const CONFIG_RELOADS: &str = "infergate_gateway_config_reloads_total";
/// Unix time of the running config's load.
pub const CONFIG_LOADED_AT: &str = "infergate_gateway_config_loaded_timestamp_seconds";
/// Open client connections, by `listener` (`data`).
pub const OPEN_CONNECTIONS: &str = "infergate_gateway_open_connections";
/// Client connections accepted, by `listener` and `protocol` (`tcp`, `tls`).
pub const CONNECTIONS: &str = "infergate_gateway_connections_total";
/// Client connections accepted, by data `worker` (`0`…`workers - 1`): how the kernel spread them.
pub const WORKER_CONNECTIONS: &str = "infergate_gateway_worker_connections_total";
/// Client connections and requests refused or cut off by a listener limit, by `reason`: `connection_limit`,
/// `header_read_timeout`, `write_timeout`, `stream_idle_timeout`, `head_too_large`, `too_many_headers`,
/// `malformed_head`, `unsupported_transfer_coding`.
pub const REFUSED: &str = "infergate_gateway_refused_total";
/// TLS handshakes that failed, by `listener`.
pub const TLS_HANDSHAKE_FAILURES: &str = "infergate_gateway_tls_handshake_failures_total";
/// Canary rollbacks made by the automatic analysis, by `route`.
pub const CANARY_ROLLBACKS: &str = "infergate_gateway_canary_rollbacks_total";
/// Canary analysis phase, by `route`: 0 observing, 1 promoting, 2 promoted, 3 rolled back.
pub const CANARY_PHASE: &str = "infergate_gateway_canary_phase";
/// Weight each destination of an analysed route splits with now, by `route` and `destination`.
pub const CANARY_WEIGHT: &str = "infergate_gateway_canary_weight";

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
    describe_counter!(
        MIRROR_REQUESTS,
        "Mirrored copies sent to a shadow upstream, by outcome."
    );
    describe_counter!(
        MIRROR_DROPPED,
        "Mirrored copies not sent because the mirror limit was reached."
    );
    describe_counter!(QUOTA_EVICTIONS, "Token buckets dropped from the quota store.");
    describe_counter!(CONFIG_RELOADS, "Routing-rule reloads by result.");
    describe_gauge!(
        CONFIG_LOADED_AT,
        metrics::Unit::Seconds,
        "Unix time the running rules were loaded."
    );
    describe_gauge!(OPEN_CONNECTIONS, "Open client connections.");
    describe_counter!(CONNECTIONS, "Client connections accepted.");
    describe_counter!(
        WORKER_CONNECTIONS,
        "Client connections accepted by each data worker."
    );
    describe_counter!(
        REFUSED,
        "Client connections and requests refused or cut off by a listener limit, by reason."
    );
    describe_counter!(TLS_HANDSHAKE_FAILURES, "Client TLS handshakes that failed.");
    describe_counter!(
        CANARY_ROLLBACKS,
        "Canary rollbacks made by the automatic analysis."
    );
    describe_gauge!(
        CANARY_PHASE,
        "Canary analysis phase: 0 observing, 1 promoting, 2 promoted, 3 rolled back."
    );
    describe_gauge!(
        CANARY_WEIGHT,
        "Weight a destination of an analysed route splits with now."
    );
}

/// Drains recorded histogram samples into their buckets every `every` until `shutdown` turns true. The
/// Prometheus recorder keeps every sample of a histogram until a scrape or an upkeep folds it into the
/// buckets, so without this a gateway nobody scrapes would grow by 8 bytes per request.
pub async fn upkeep(handle: PrometheusHandle, every: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => handle.run_upkeep(),
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// The per-request metrics of one route destination: `requests_total` by status class and the duration
/// histogram, registered on first use and kept for the config version. Registering a metric builds its
/// key (label strings, a hash, a registry lookup under a lock) — thousands of instructions that a
/// request on the hot path should not pay; an increment through a handle is one atomic add.
///
/// Handles are registered lazily (not at compile time) so that rules compiled before the recorder is
/// installed still report.
#[derive(Debug)]
pub struct DestinationMetrics {
    route: Arc<str>,
    destination: Arc<str>,
    upstream: Arc<str>,
    /// `requests_total{outcome="success"|"upstream_error", status_class}`, by status class.
    by_class: [OnceLock<Counter>; 5],
    duration: OnceLock<Histogram>,
}

impl DestinationMetrics {
    /// The handles of `route` → `destination` (served by `upstream`).
    pub fn new(route: Arc<str>, destination: Arc<str>, upstream: Arc<str>) -> Self {
        DestinationMetrics {
            route,
            destination,
            upstream,
            by_class: Default::default(),
            duration: OnceLock::new(),
        }
    }

    /// Counts a request answered by the upstream with `status` (outcome `success`, or `upstream_error`
    /// for 5xx), and records its duration.
    pub fn record_response(&self, status: u16, elapsed: Duration) {
        if status >= 600 {
            // Not a standard status: no handle for it (and, like any non-5xx, not an upstream error).
            return self.record_outcome("success", status, elapsed);
        }
        let class = class_index(status);
        self.by_class[class]
            .get_or_init(|| {
                let outcome = if class == 4 { "upstream_error" } else { "success" };
                metrics::counter!(REQUESTS, self.labels(outcome, CLASSES[class]))
            })
            .increment(1);
        self.record_duration(elapsed);
    }

    /// Counts a request with an explicit `outcome` (the gateway's error kind when it answered itself),
    /// and records its duration. Not cached: errors are not the hot path.
    pub fn record_outcome(&self, outcome: &'static str, status: u16, elapsed: Duration) {
        metrics::counter!(REQUESTS, self.labels(outcome, status_class(status))).increment(1);
        self.record_duration(elapsed);
    }

    fn record_duration(&self, elapsed: Duration) {
        self.duration
            .get_or_init(|| {
                metrics::histogram!(REQUEST_DURATION,
                    "route" => Arc::clone(&self.route),
                    "destination" => Arc::clone(&self.destination))
            })
            .record(elapsed.as_secs_f64());
    }

    fn labels(&self, outcome: &'static str, class: &'static str) -> Vec<Label> {
        // The order is the one of every other `requests_total` series: the exporter tells series apart
        // by their label lists.
        vec![
            Label::new("route", Arc::clone(&self.route)),
            Label::new("destination", Arc::clone(&self.destination)),
            Label::new("upstream", Arc::clone(&self.upstream)),
            Label::new("outcome", outcome),
            Label::new("status_class", class),
        ]
    }
}

/// `upstream_tries_total{upstream, outcome=<status class>}` handles of one upstream, registered on first
/// use (failed tries, labelled by failure kind, are counted without a handle).
#[derive(Debug)]
pub struct TryCounters {
    upstream: Arc<str>,
    by_class: [OnceLock<Counter>; 5],
}

impl TryCounters {
    /// The handles of `upstream`.
    pub fn new(upstream: Arc<str>) -> Self {
        TryCounters {
            upstream,
            by_class: Default::default(),
        }
    }

    /// Counts a try answered with `status`.
    pub fn response(&self, status: u16) {
        let class = class_index(status);
        self.by_class[class]
            .get_or_init(|| {
                metrics::counter!(UPSTREAM_TRIES,
                    "upstream" => Arc::clone(&self.upstream),
                    "outcome" => CLASSES[class])
            })
            .increment(1);
    }

    /// Counts a try that failed without a response, by failure `kind`.
    pub fn failure(&self, kind: &'static str) {
        metrics::counter!(UPSTREAM_TRIES, "upstream" => Arc::clone(&self.upstream), "outcome" => kind)
            .increment(1);
    }
}

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn class_index(status: u16) -> usize {
    match status {
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 4,
    }
}

/// `2xx`, `4xx`, … for a status code.
pub fn status_class(status: u16) -> &'static str {
    CLASSES[class_index(status)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_handles_report_the_series_the_macros_do() {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
            .unwrap()
            .build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let d = DestinationMetrics::new("r".into(), "canary".into(), "up-b".into());
            d.record_response(200, Duration::from_millis(1));
            d.record_response(204, Duration::from_millis(2));
            d.record_response(503, Duration::from_millis(3));
            d.record_outcome("timeout", 504, Duration::from_millis(4));
            // The same series through the macro, as the pipeline writes it for errors.
            metrics::counter!(REQUESTS, "route" => "r", "destination" => "canary", "upstream" => "up-b",
                "outcome" => "success", "status_class" => "2xx")
            .increment(1);
            let t = TryCounters::new("up-b".into());
            t.response(200);
            t.response(201);
            t.failure("reset");
        });
        let text = handle.render();
        for line in [
            r#"infergate_gateway_requests_total{route="r",destination="canary",upstream="up-b",outcome="success",status_class="2xx"} 3"#,
            r#"infergate_gateway_requests_total{route="r",destination="canary",upstream="up-b",outcome="upstream_error",status_class="5xx"} 1"#,
            r#"infergate_gateway_requests_total{route="r",destination="canary",upstream="up-b",outcome="timeout",status_class="5xx"} 1"#,
            r#"infergate_gateway_request_duration_seconds_count{route="r",destination="canary"} 4"#,
            r#"infergate_gateway_upstream_tries_total{upstream="up-b",outcome="2xx"} 2"#,
            r#"infergate_gateway_upstream_tries_total{upstream="up-b",outcome="reset"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in:\n{text}");
        }
        assert_eq!(
            text.matches("infergate_gateway_requests_total{").count(),
            3,
            "one series per label set:\n{text}"
        );
    }
}
