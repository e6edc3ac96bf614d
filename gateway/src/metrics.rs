//! Metric names, their descriptions and the Prometheus recorder.
//!
//! Labels are low-cardinality only: route, destination, upstream, outcome, status class, listener, result,
//! worker (one per data thread).
//! Never a caller id or request id.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{Counter, Histogram, Label, SharedString};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;

/// Requests finished, by `route`, `destination`, `upstream`, `outcome` (`success`, `client_error`,
/// `upstream_error`, or the gateway's error kind when it answered itself), `status_class` (`2xx`…`5xx`),
/// `response_code` (the exact HTTP status) and, for gRPC, `grpc_status` (from the response headers or
/// trailers).
pub const REQUESTS: &str = "infergate_gateway_requests_total";
/// Time from request arrival to response headers of served requests, seconds, by `route` and
/// `destination`. Requests the gateway refused (quota, overload) are counted in [`REQUESTS`] only, so
/// their fast answers do not flatter the latency of served ones.
pub const REQUEST_DURATION: &str = "infergate_gateway_request_duration_seconds";
/// Tries sent upstream, by `upstream` and `outcome` (status class or failure kind).
pub const UPSTREAM_TRIES: &str = "infergate_gateway_upstream_tries_total";
/// Time of one try, from sending to the upstream's response headers (or failure), seconds, by `upstream`.
pub const UPSTREAM_TRY_DURATION: &str = "infergate_gateway_upstream_try_duration_seconds";
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
/// What retrying did, by `route` and `outcome`: see [`RetryOutcome`].
pub const RETRY_OUTCOMES: &str = "infergate_gateway_retry_outcomes_total";
/// Request body bytes received from callers, by `route` and `destination` (`none` when the gateway
/// answered before choosing one). Counted when the request body ends.
pub const REQUEST_BYTES: &str = "infergate_gateway_request_bytes_total";
/// Response body bytes sent to callers, by `route` and `destination` (`none` when the gateway answered
/// itself before choosing one). Counted as the body is sent.
pub const RESPONSE_BYTES: &str = "infergate_gateway_response_bytes_total";
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
/// Weight each destination of every route has in the running rules, by `route` and `destination`
/// (compare with the actual share of `requests_total`, and with [`CANARY_WEIGHT`]).
pub const CONFIGURED_WEIGHT: &str = "infergate_gateway_configured_weight";

/// How retrying went, the `outcome` label of [`RETRY_OUTCOMES`]. `attempted` counts retries; the other
/// four count requests, each at most once, so `succeeded / (succeeded + failed)` is how often retrying
/// saved a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryOutcome {
    /// One retry was sent (what `retries_total` counts, without its reason).
    Attempted,
    /// A retried request ended with an answer that no retry condition matched.
    Succeeded,
    /// A retried request ended in a failure: every attempt was used, or its last try failed in a way no
    /// retry condition names.
    Failed,
    /// A wanted retry was not sent because the retry budget was spent.
    BudgetExhausted,
    /// A wanted retry was not sent, or a retried request gave up, because the request's deadline came.
    DeadlineExceeded,
}

impl RetryOutcome {
    /// Every outcome, registered at zero for each route.
    pub const ALL: [RetryOutcome; 5] = [
        RetryOutcome::Attempted,
        RetryOutcome::Succeeded,
        RetryOutcome::Failed,
        RetryOutcome::BudgetExhausted,
        RetryOutcome::DeadlineExceeded,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryOutcome::Attempted => "attempted",
            RetryOutcome::Succeeded => "succeeded",
            RetryOutcome::Failed => "failed",
            RetryOutcome::BudgetExhausted => "budget_exhausted",
            RetryOutcome::DeadlineExceeded => "deadline_exceeded",
        }
    }

    /// Counts one `outcome` on `route`. Not cached: only requests that retried, or wanted to, come here.
    pub fn count(self, route: &str) {
        metrics::counter!(RETRY_OUTCOMES, "route" => route.to_string(), "outcome" => self.as_str())
            .increment(1);
    }
}

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
            // The reload counters exist at zero from start, so the first rejected edit is an increase.
            for result in ["applied", "rejected"] {
                metrics::counter!(CONFIG_RELOADS, "result" => result).increment(0);
            }
            Ok(handle)
        })
        .clone()
}

fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS,
        "Requests finished by route, destination, upstream, outcome, status class, response code and gRPC status."
    );
    describe_histogram!(
        REQUEST_DURATION,
        metrics::Unit::Seconds,
        "Time from request arrival to response headers, of requests the gateway did not refuse."
    );
    describe_counter!(UPSTREAM_TRIES, "Tries sent to an upstream, by outcome.");
    describe_histogram!(
        UPSTREAM_TRY_DURATION,
        metrics::Unit::Seconds,
        "Time of one upstream try, to response headers or failure."
    );
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
    describe_counter!(
        RETRY_OUTCOMES,
        "Retries made, and how retried requests ended: succeeded, exhausted, budget_exhausted, deadline_exceeded."
    );
    describe_counter!(REQUEST_BYTES, "Request body bytes received from callers.");
    describe_counter!(RESPONSE_BYTES, "Response body bytes sent to callers.");
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
    describe_gauge!(
        CONFIGURED_WEIGHT,
        "Weight a destination has in the running rules."
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

/// The per-request metrics of one route destination: `requests_total` and the duration histogram.
/// Registering a metric builds its key (label strings, a hash, a registry lookup under a lock) —
/// thousands of instructions that a request on the hot path should not pay; an increment through a
/// handle is one atomic add. So the common answers (HTTP 200, and HTTP 200 with each gRPC status) keep a
/// handle; rarer answers register on each use.
///
/// Handles are made by [`DestinationMetrics::register`] when the rules are applied (so the series exist
/// at zero before the first request, and `increase()` sees the first one), or lazily on first use by rules
/// compiled before the recorder was installed.
#[derive(Debug)]
pub struct DestinationMetrics {
    route: Arc<str>,
    destination: Arc<str>,
    upstream: Arc<str>,
    /// `requests_total{outcome="success", status_class="2xx", response_code="200"}` (no gRPC status).
    ok: OnceLock<Counter>,
    /// `requests_total{response_code="200", grpc_status=<index>}`.
    grpc: [OnceLock<Counter>; GRPC_CODES],
    duration: OnceLock<Histogram>,
    request_bytes: OnceLock<Counter>,
    response_bytes: OnceLock<Counter>,
}

/// gRPC status codes 0 (OK) … 16 (UNAUTHENTICATED).
const GRPC_CODES: usize = 17;

/// The server-side failures each destination's `requests_total` holds from zero, as (outcome, HTTP status, gRPC
/// status): what the gateway answers itself (overloaded, unavailable, bad gateway, timeout, internal), over
/// HTTP and gRPC, and the upstream's commonest 5xx and gRPC failures. Rarer codes still appear at their first
/// use; every series here would otherwise be missed by `rate()` at its first failure.
pub const ERROR_SERIES: &[(&str, u16, Option<u32>)] = &[
    ("overloaded", 503, None),
    ("unavailable", 503, None),
    ("bad_gateway", 502, None),
    ("timeout", 504, None),
    ("internal", 500, None),
    ("upstream_error", 500, None),
    ("upstream_error", 502, None),
    ("upstream_error", 503, None),
    ("upstream_error", 504, None),
    ("overloaded", 200, Some(14)),
    ("unavailable", 200, Some(14)),
    ("bad_gateway", 200, Some(14)),
    ("timeout", 200, Some(4)),
    ("internal", 200, Some(13)),
    ("upstream_error", 200, Some(13)),
    ("upstream_error", 200, Some(14)),
];

/// How a request ended, for `requests_total`'s `outcome` label, when the upstream answered.
fn upstream_outcome(status: u16, grpc_status: Option<u32>) -> &'static str {
    match grpc_status {
        Some(0) => "success",
        // The caller's own mistakes: CANCELLED, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
        // PERMISSION_DENIED, FAILED_PRECONDITION, OUT_OF_RANGE, UNAUTHENTICATED.
        Some(1 | 3 | 5 | 6 | 7 | 9 | 11 | 16) => "client_error",
        Some(_) => "upstream_error",
        None => match status {
            400..=499 => "client_error",
            500..=599 => "upstream_error",
            _ => "success",
        },
    }
}

impl DestinationMetrics {
    /// The handles of `route` → `destination` (served by `upstream`).
    pub fn new(route: Arc<str>, destination: Arc<str>, upstream: Arc<str>) -> Self {
        DestinationMetrics {
            route,
            destination,
            upstream,
            ok: OnceLock::new(),
            grpc: Default::default(),
            duration: OnceLock::new(),
            request_bytes: OnceLock::new(),
            response_bytes: OnceLock::new(),
        }
    }

    /// Registers the destination's served-request series (HTTP 200, the duration histogram, body bytes)
    /// at zero, and the error series the error-budget alerts count ([`ERROR_SERIES`]), so that the first
    /// failure after a start or a reload is an increase `rate()` sees, not a new series.
    pub fn register(&self) {
        self.ok_counter();
        self.histogram();
        self.request_bytes();
        self.response_bytes();
        for &(outcome, status, grpc_status) in ERROR_SERIES {
            metrics::counter!(REQUESTS, self.labels(outcome, status, grpc_status)).increment(0);
        }
    }

    /// `request_bytes_total{route, destination}`.
    pub fn request_bytes(&self) -> &Counter {
        self.request_bytes
            .get_or_init(|| metrics::counter!(REQUEST_BYTES, self.route_destination()))
    }

    /// `response_bytes_total{route, destination}`.
    pub fn response_bytes(&self) -> &Counter {
        self.response_bytes
            .get_or_init(|| metrics::counter!(RESPONSE_BYTES, self.route_destination()))
    }

    fn route_destination(&self) -> Vec<Label> {
        vec![
            Label::new("route", SharedString::from(Arc::clone(&self.route))),
            Label::new("destination", SharedString::from(Arc::clone(&self.destination))),
        ]
    }

    /// Counts a request the upstream answered with `status` (and, for gRPC, `grpc_status` from the
    /// response headers or trailers). The outcome is `success`, `client_error` (4xx; gRPC statuses that
    /// blame the request) or `upstream_error` (5xx; every other non-OK gRPC status).
    pub fn record_response(&self, status: u16, grpc_status: Option<u32>) {
        let counter = match (status, grpc_status) {
            (200, None) => self.ok_counter(),
            (200, Some(code)) if (code as usize) < GRPC_CODES => self.grpc[code as usize].get_or_init(|| {
                metrics::counter!(
                    REQUESTS,
                    self.labels(upstream_outcome(200, Some(code)), 200, Some(code))
                )
            }),
            _ => {
                let outcome = upstream_outcome(status, grpc_status);
                return metrics::counter!(REQUESTS, self.labels(outcome, status, grpc_status)).increment(1);
            }
        };
        counter.increment(1);
    }

    /// Counts a request the gateway answered itself with `outcome` (its error kind). Not cached: errors
    /// are not the hot path.
    pub fn record_outcome(&self, outcome: &'static str, status: u16, grpc_status: Option<u32>) {
        metrics::counter!(REQUESTS, self.labels(outcome, status, grpc_status)).increment(1);
    }

    /// Records the time to response headers of a served request (refused ones are not recorded).
    pub fn record_duration(&self, elapsed: Duration) {
        self.histogram().record(elapsed.as_secs_f64());
    }

    fn ok_counter(&self) -> &Counter {
        self.ok
            .get_or_init(|| metrics::counter!(REQUESTS, self.labels("success", 200, None)))
    }

    fn histogram(&self) -> &Histogram {
        self.duration.get_or_init(|| {
            metrics::histogram!(REQUEST_DURATION,
                "route" => Arc::clone(&self.route),
                "destination" => Arc::clone(&self.destination))
        })
    }

    fn labels(&self, outcome: &'static str, status: u16, grpc_status: Option<u32>) -> Vec<Label> {
        request_labels(
            [&self.route, &self.destination, &self.upstream].map(|s| SharedString::from(Arc::clone(s))),
            outcome,
            status,
            grpc_status,
        )
    }
}

/// The labels of a `requests_total` series, in the one order every such series uses (the exporter tells
/// series apart by their label lists): route, destination, upstream, outcome, status_class,
/// response_code, and grpc_status for gRPC requests.
pub fn request_labels(
    [route, destination, upstream]: [SharedString; 3],
    outcome: &'static str,
    status: u16,
    grpc_status: Option<u32>,
) -> Vec<Label> {
    let mut labels = vec![
        Label::new("route", route),
        Label::new("destination", destination),
        Label::new("upstream", upstream),
        Label::new("outcome", outcome),
        Label::new("status_class", status_class(status)),
        Label::new("response_code", status_code_label(status)),
    ];
    if let Some(code) = grpc_status {
        labels.push(Label::new("grpc_status", grpc_status_label(code)));
    }
    labels
}

/// `"200"`, `"429"`, … without allocating for the codes the gateway sees.
fn status_code_label(status: u16) -> SharedString {
    match status {
        200 => SharedString::const_str("200"),
        204 => SharedString::const_str("204"),
        400 => SharedString::const_str("400"),
        404 => SharedString::const_str("404"),
        429 => SharedString::const_str("429"),
        500 => SharedString::const_str("500"),
        502 => SharedString::const_str("502"),
        503 => SharedString::const_str("503"),
        504 => SharedString::const_str("504"),
        other => SharedString::from(other.to_string()),
    }
}

fn grpc_status_label(code: u32) -> SharedString {
    const NAMES: [&str; GRPC_CODES] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    ];
    match NAMES.get(code as usize) {
        Some(n) => SharedString::const_str(n),
        None => SharedString::from(code.to_string()),
    }
}

/// Registers, at zero, the per-route series that alerts take `increase()` of, so the first event after a
/// start or a reload is seen: quota rejections, retries skipped for the budget, retry outcomes, canary
/// rollbacks; and the configured weight of each destination.
pub fn register_route(route: &Arc<str>, destinations: &[(Arc<str>, u32)]) {
    let r = || SharedString::from(Arc::clone(route));
    metrics::counter!(QUOTA_REJECTIONS, "route" => r()).increment(0);
    metrics::counter!(RETRY_BUDGET_EXHAUSTED, "route" => r()).increment(0);
    for outcome in RetryOutcome::ALL {
        metrics::counter!(RETRY_OUTCOMES, "route" => r(), "outcome" => outcome.as_str()).increment(0);
    }
    metrics::counter!(CANARY_ROLLBACKS, "route" => r()).increment(0);
    for (d, weight) in destinations {
        metrics::gauge!(CONFIGURED_WEIGHT, "route" => r(), "destination" => Arc::clone(d))
            .set(f64::from(*weight));
    }
}

/// Registers, at zero, the per-upstream series: refusals at the limits and outlier ejections.
pub fn register_upstream(upstream: &Arc<str>) {
    let u = || SharedString::from(Arc::clone(upstream));
    metrics::counter!(UPSTREAM_OVERLOADED, "upstream" => u()).increment(0);
    metrics::counter!(UPSTREAM_EJECTIONS, "upstream" => u()).increment(0);
}

/// `upstream_tries_total{upstream, outcome=<status class>}` handles of one upstream, registered on first
/// use (failed tries, labelled by failure kind, are counted without a handle).
#[derive(Debug)]
pub struct TryCounters {
    upstream: Arc<str>,
    by_class: [OnceLock<Counter>; 5],
    duration: OnceLock<Histogram>,
}

impl TryCounters {
    /// The handles of `upstream`.
    pub fn new(upstream: Arc<str>) -> Self {
        TryCounters {
            upstream,
            by_class: Default::default(),
            duration: OnceLock::new(),
        }
    }

    /// Registers the upstream's `2xx` tries and per-try duration at zero.
    pub fn register(&self) {
        self.class_counter(1);
        self.histogram();
        register_upstream(&self.upstream);
    }

    /// Records how long one try took to its response headers (or its failure).
    pub fn record_duration(&self, elapsed: Duration) {
        self.histogram().record(elapsed.as_secs_f64());
    }

    fn histogram(&self) -> &Histogram {
        self.duration.get_or_init(
            || metrics::histogram!(UPSTREAM_TRY_DURATION, "upstream" => Arc::clone(&self.upstream)),
        )
    }

    fn class_counter(&self, class: usize) -> &Counter {
        self.by_class[class].get_or_init(|| {
            metrics::counter!(UPSTREAM_TRIES,
                "upstream" => Arc::clone(&self.upstream),
                "outcome" => CLASSES[class])
        })
    }

    /// Counts a try answered with `status`.
    pub fn response(&self, status: u16) {
        self.class_counter(class_index(status)).increment(1);
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
            d.register();
            d.record_response(200, None);
            d.record_response(404, None);
            d.record_response(503, None);
            d.record_response(200, Some(0));
            d.record_response(200, Some(3));
            d.record_response(200, Some(3));
            d.record_response(200, Some(14));
            d.record_outcome("timeout", 504, None);
            d.record_outcome("quota_exceeded", 200, Some(8));
            d.record_duration(Duration::from_millis(1));
            // The same series through the macro, as the pipeline writes it when no destination was chosen.
            let labels = request_labels(
                ["r", "canary", "up-b"].map(SharedString::const_str),
                "success",
                200,
                None,
            );
            metrics::counter!(REQUESTS, labels).increment(1);
            let t = TryCounters::new("up-b".into());
            t.register();
            t.response(200);
            t.response(201);
            t.failure("reset");
            register_route(
                &Arc::from("fresh"),
                &[(Arc::from("stable"), 90), (Arc::from("canary"), 10)],
            );
        });
        let text = handle.render();
        let series = |labels: &str| {
            format!(
                r#"infergate_gateway_requests_total{{route="r",destination="canary",upstream="up-b",{labels}"#
            )
        };
        for line in [
            series(r#"outcome="success",status_class="2xx",response_code="200"} 2"#),
            series(r#"outcome="client_error",status_class="4xx",response_code="404"} 1"#),
            series(r#"outcome="upstream_error",status_class="5xx",response_code="503"} 1"#),
            series(r#"outcome="success",status_class="2xx",response_code="200",grpc_status="0"} 1"#),
            series(r#"outcome="client_error",status_class="2xx",response_code="200",grpc_status="3"} 2"#),
            series(r#"outcome="upstream_error",status_class="2xx",response_code="200",grpc_status="14"} 1"#),
            series(r#"outcome="timeout",status_class="5xx",response_code="504"} 1"#),
            series(r#"outcome="quota_exceeded",status_class="2xx",response_code="200",grpc_status="8"} 1"#),
            r#"infergate_gateway_request_duration_seconds_count{route="r",destination="canary"} 1"#.into(),
            r#"infergate_gateway_upstream_tries_total{upstream="up-b",outcome="2xx"} 2"#.into(),
            r#"infergate_gateway_upstream_tries_total{upstream="up-b",outcome="reset"} 1"#.into(),
            r#"infergate_gateway_upstream_try_duration_seconds_count{upstream="up-b"} 0"#.into(),
            r#"infergate_gateway_upstream_overloaded_total{upstream="up-b"} 0"#.into(),
            r#"infergate_gateway_quota_rejections_total{route="fresh"} 0"#.into(),
            r#"infergate_gateway_retry_budget_exhausted_total{route="fresh"} 0"#.into(),
            r#"infergate_gateway_canary_rollbacks_total{route="fresh"} 0"#.into(),
            r#"infergate_gateway_configured_weight{route="fresh",destination="canary"} 10"#.into(),
            r#"infergate_gateway_request_bytes_total{route="r",destination="canary"} 0"#.into(),
            r#"infergate_gateway_response_bytes_total{route="r",destination="canary"} 0"#.into(),
            r#"infergate_gateway_retry_outcomes_total{route="fresh",outcome="attempted"} 0"#.into(),
            r#"infergate_gateway_retry_outcomes_total{route="fresh",outcome="deadline_exceeded"} 0"#.into(),
        ] {
            assert!(text.contains(&line), "missing {line} in:\n{text}");
        }
        // The eight label sets counted above, and the error series registered at zero, three of which
        // (upstream_error 503, upstream_error gRPC 14, timeout 504) are among the eight: each exactly once.
        assert!(text.contains(&series(
            r#"outcome="bad_gateway",status_class="5xx",response_code="502"} 0"#
        )));
        assert_eq!(
            text.matches("infergate_gateway_requests_total{").count(),
            8 + ERROR_SERIES.len() - 3,
            "one series per label set:\n{text}"
        );
    }
}
