//! Compiling `infergate_config::RoutingRules` into [`CompiledRoutes`]: config values become small
//! typed policy values once per config version. Compiling is pure: a route's long-lived state (retry
//! budget, canary analysis, mirror limit) is taken over from the same route of the running version when
//! its settings did not change, and made fresh otherwise, but nothing outside the returned value changes,
//! so a version that is refused later leaves the running one exactly as it was.

use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method, StatusCode};
use infergate_config as cfg;
use tokio::time::Instant;

use super::{
    CompiledRoute, CompiledRoutes, HeaderMatch, HeaderValueMatch, HostMatch, PathMatch, RouteKey, RouteMatch,
};
use crate::caller::{CallerPolicy, CallerSource, CallerSources};
use crate::canary::{self, CanaryPolicy, Promotion};
use crate::fault::{FaultAbort, FaultPolicy, Percent};
use crate::metrics::DestinationMetrics;
use crate::mirror::{MirrorLimit, MirrorPolicy};
use crate::quota::{QuotaSpec, RouteQuota};
use crate::retry::{Backoff, BudgetSpec, RetryBudget, RetryOn, RetryPolicy};
use crate::split::{Destination, Split};
use crate::timeout::TimeoutPolicy;

/// Rules that passed `infergate-config` validation but cannot be compiled (should not happen;
/// every message names the route and the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("routing rules cannot be compiled: {}", .0.join("; "))]
pub struct CompileError(pub Vec<String>);

impl CompiledRoutes {
    /// Compiles one config version. `running` is the version in force, if any: a route of the same name
    /// whose relevant settings did not change keeps its retry budget, canary analysis and mirror limit;
    /// routes that are gone take theirs with them when the running version is dropped.
    pub fn compile(
        rules: &cfg::RoutingRules,
        running: Option<&CompiledRoutes>,
    ) -> Result<Self, CompileError> {
        let mut errors = Vec::new();
        let callers = caller_policy(&rules.callers);
        let now = Instant::now();
        let mut routes = Vec::with_capacity(rules.routes.len());
        for r in &rules.routes {
            let previous = running.and_then(|p| p.get(&r.name));
            match compile_route(r, &rules.callers, previous, now) {
                Ok(c) => routes.push(c),
                Err(e) => errors.extend(e),
            }
        }
        if !errors.is_empty() {
            return Err(CompileError(errors));
        }
        let quota_buckets = usize::try_from(rules.callers.quota_buckets).unwrap_or(usize::MAX);
        Ok(CompiledRoutes::new(routes, callers).with_quota_buckets(quota_buckets))
    }
}

impl TryFrom<&cfg::RoutingRules> for CompiledRoutes {
    type Error = CompileError;

    /// Compiles with fresh state, as the first version of a gateway is.
    fn try_from(rules: &cfg::RoutingRules) -> Result<Self, CompileError> {
        CompiledRoutes::compile(rules, None)
    }
}

/// The gateway-wide caller rules of `callers`: the configured source, then the peer address when
/// `unidentified: peer_address`; `reject_unidentified` for `unidentified: reject`.
pub fn caller_policy(c: &cfg::Callers) -> CallerPolicy {
    let mut sources = Vec::new();
    let fallback_to_peer = c.unidentified == cfg::Unidentified::PeerAddress;
    match &c.identify_by {
        cfg::CallerIdentity::Header(name) => {
            if let Ok(h) = HeaderName::from_bytes(name.as_bytes()) {
                sources.push(CallerSource::Header(h));
            }
        }
        cfg::CallerIdentity::MtlsIdentity => sources.push(CallerSource::MtlsIdentity),
        cfg::CallerIdentity::PeerAddress => sources.push(CallerSource::PeerAddress),
    }
    if fallback_to_peer && !sources.contains(&CallerSource::PeerAddress) {
        sources.push(CallerSource::PeerAddress);
    }
    CallerPolicy {
        sources: CallerSources::new(sources),
        reject_unidentified: c.unidentified == cfg::Unidentified::Reject,
    }
}

/// The config's default destination name: `upstream`, or `upstream/v{version}`.
pub(crate) fn destination_name(d: &cfg::Destination) -> String {
    match (&d.name, &d.model_version) {
        (Some(n), _) => n.clone(),
        (None, Some(v)) => format!("{}/v{v}", d.upstream),
        (None, None) => d.upstream.clone(),
    }
}

fn quota_spec(q: &cfg::Quota) -> QuotaSpec {
    let tokens = u32::try_from(q.rate.tokens).unwrap_or(u32::MAX);
    let burst = u32::try_from(q.burst.unwrap_or(q.rate.tokens)).unwrap_or(u32::MAX);
    QuotaSpec::new(tokens, q.rate.per, burst)
}

fn compile_route(
    r: &cfg::Route,
    callers: &cfg::Callers,
    previous: Option<&CompiledRoute>,
    now: Instant,
) -> Result<CompiledRoute, Vec<String>> {
    let mut errors = Vec::new();
    let name: Arc<str> = r.name.as_str().into();
    let key = RouteKey::of(&r.name);

    // Match conditions.
    let m = &r.criteria;
    let mut matcher = RouteMatch {
        hosts: m.host.iter().map(|h| HostMatch::parse(h)).collect(),
        path: match (&m.path_exact, &m.path_prefix) {
            (Some(p), _) => Some(PathMatch::Exact(p.as_str().into())),
            (None, Some(p)) => Some(PathMatch::Prefix(p.as_str().into())),
            (None, None) => None,
        },
        methods: Vec::new(),
        headers: Vec::new(),
        models: m.model.iter().map(|s| s.as_str().into()).collect(),
    };
    for method in &m.methods {
        match Method::from_bytes(method.as_bytes()) {
            Ok(x) => matcher.methods.push(x),
            Err(_) => errors.push(format!(
                "route '{}': method '{method}' is not a valid HTTP method",
                r.name
            )),
        }
    }
    for h in &m.headers {
        let Ok(hname) = HeaderName::from_bytes(h.name.as_bytes()) else {
            errors.push(format!(
                "route '{}': '{}' is not a valid header name",
                r.name, h.name
            ));
            continue;
        };
        let value = match (&h.exact, &h.prefix, h.present) {
            (Some(v), _, _) => match HeaderValue::from_str(v) {
                Ok(v) => HeaderValueMatch::Exact(v),
                Err(_) => {
                    errors.push(format!(
                        "route '{}': header '{}' value '{v}' is not a valid header value",
                        r.name, h.name
                    ));
                    continue;
                }
            },
            (None, Some(p), _) => HeaderValueMatch::Prefix(p.as_bytes().into()),
            (None, None, Some(false)) => HeaderValueMatch::Absent,
            (None, None, _) => HeaderValueMatch::Present,
        };
        matcher.headers.push(HeaderMatch { name: hname, value });
    }

    // Split.
    let destinations: Vec<Destination> = r
        .destinations
        .iter()
        .map(|d| Destination {
            name: destination_name(d).into(),
            upstream: d.upstream.as_str().into(),
            weight: d.weight,
            model_version: d.model_version.as_deref().map(Into::into),
        })
        .collect();
    if destinations.is_empty() {
        errors.push(format!("route '{}' has no destinations", r.name));
    }
    let split = Split::new(destinations, r.sticky_by_caller);

    // Quota: the route's own replaces the default; caller overrides win over both.
    let default = r
        .quota
        .as_ref()
        .or(callers.default_quota.as_ref())
        .map(quota_spec);
    let mut quota = RouteQuota::new(key, default);
    for o in &callers.overrides {
        let spec = if o.unlimited {
            None
        } else {
            o.quota.as_ref().map(quota_spec)
        };
        quota = quota.with_override(&o.caller, spec);
    }
    let has_quota = quota.default.is_some()
        || quota
            .by_name
            .values()
            .chain(quota.by_ip.values())
            .any(Option::is_some);

    // Retries.
    let retry = match &r.retries {
        None => RetryPolicy::default(),
        Some(p) => {
            let retry_on = retry_on(&p.retry_on);
            RetryPolicy {
                attempts: p.attempts.saturating_add(1),
                per_try_timeout: p.per_try_timeout,
                retry_on,
                backoff: Backoff {
                    base: p.backoff.base,
                    max: p.backoff.max,
                },
                max_replay_bytes: p.max_replay_body.as_usize(),
                budget: BudgetSpec {
                    ratio: p.budget.ratio,
                    min_per_sec: p.budget.min_per_second,
                    ttl: p.budget.window,
                },
            }
        }
    };
    let retry_budget = match previous {
        Some(p) if p.retry_budget.spec() == retry.budget => Arc::clone(&p.retry_budget),
        _ => Arc::new(RetryBudget::new(retry.budget)),
    };

    // Mirror.
    let mirror = r.mirror.as_ref().map(|m| {
        let limit = MirrorLimit::carry_over(
            previous.and_then(|p| p.mirror.as_ref()),
            usize::try_from(m.max_concurrent).unwrap_or(usize::MAX),
        );
        MirrorPolicy::new(
            name.clone(),
            m.upstream.as_str().into(),
            Percent::new(m.percent),
            m.timeout.unwrap_or(r.timeout),
            limit,
        )
    });

    // Fault injection.
    let fault = r.fault.as_ref().map(|f| FaultPolicy {
        delay: f.delay.as_ref().map(|d| (Percent::new(d.percent), d.duration)),
        abort: f.abort.as_ref().map(|a| {
            let status = StatusCode::from_u16(a.http_status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            (
                Percent::new(a.percent),
                FaultAbort {
                    http_status: status,
                    grpc_code: a.grpc_status.map(|c| c as u32),
                },
            )
        }),
    });

    // Canary analysis.
    let canary = match &r.canary {
        None => None,
        Some(c) => {
            let find = |n: &str| split.destinations().iter().position(|d| &*d.name == n);
            match (find(&c.baseline), find(&c.canary)) {
                (Some(baseline), Some(canary)) => {
                    let policy = CanaryPolicy {
                        baseline,
                        canary,
                        window: c.window,
                        min_requests: c.min_requests,
                        max_error_rate_increase: Some(c.max_error_rate_delta),
                        max_p99_ratio: Some(c.max_p99_ratio),
                        p99_slack: c.p99_noise_floor,
                        promotion: c.promotion.as_ref().map(|p| Promotion {
                            steps: p.steps.clone(),
                            interval: p.interval,
                        }),
                    };
                    let dests: Vec<(Arc<str>, u32)> = split
                        .destinations()
                        .iter()
                        .map(|d| (d.name.clone(), d.weight))
                        .collect();
                    Some(canary::carry_over(
                        previous.and_then(|p| p.canary.as_ref()),
                        &r.name,
                        &dests,
                        &policy,
                        now,
                    ))
                }
                _ => {
                    errors.push(format!(
                        "route '{}': canary analysis names destinations '{}' and '{}', but the route has {}",
                        r.name,
                        c.baseline,
                        c.canary,
                        split
                            .destinations()
                            .iter()
                            .map(|d| format!("'{}'", d.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    None
                }
            }
        }
    };

    if !errors.is_empty() {
        return Err(errors);
    }
    let metrics = split
        .destinations()
        .iter()
        .map(|d| {
            Arc::new(DestinationMetrics::new(
                name.clone(),
                d.name.clone(),
                d.upstream.clone(),
            ))
        })
        .collect();
    Ok(CompiledRoute {
        metrics,
        name,
        key,
        matcher,
        split,
        quota: has_quota.then(|| Arc::new(quota)),
        timeout: TimeoutPolicy {
            overall: Some(r.timeout).filter(|d| !d.is_zero()),
        },
        retry: Arc::new(retry),
        retry_budget,
        mirror,
        fault,
        canary,
    })
}

fn retry_on(items: &[cfg::RetryOn]) -> RetryOn {
    let names: Vec<String> = items
        .iter()
        .map(|c| match c {
            cfg::RetryOn::FiveXx => "5xx".to_string(),
            cfg::RetryOn::GatewayError => "gateway-error".to_string(),
            cfg::RetryOn::ConnectFailure => "connect-failure".to_string(),
            cfg::RetryOn::RefusedStream => "refused-stream".to_string(),
            cfg::RetryOn::Reset => "reset".to_string(),
            cfg::RetryOn::Retriable4xx => "retriable-4xx".to_string(),
            cfg::RetryOn::Status(s) => s.to_string(),
            cfg::RetryOn::Grpc(code) => format!("grpc-{}", *code as u32),
        })
        .collect();
    // Every name above is one RetryOn::parse understands.
    RetryOn::parse(&names).unwrap_or_default()
}
