//! Semantic checks of the routing rules: every problem is reported, each at its line and column.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::{
    CallerIdentity, Callers, CanaryAnalysis, FaultInjection, GatewayConfig, Listeners, Quota, Route,
    UpstreamProtocol,
};
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::node::SpanIndex;
use crate::units::format_duration;

/// The quota store has 64 shards; fewer buckets than that cannot be spread over them.
const MIN_QUOTA_BUCKETS: u32 = 64;
/// Above this many buckets (about 640 MiB) the store's worst case is reported.
const MAX_QUOTA_BUCKETS_WITHOUT_WARNING: u32 = 1 << 24;

const METHODS: [&str; 9] = [
    "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE",
];

struct Checker<'a> {
    spans: &'a SpanIndex,
    file: &'a Path,
    out: Diagnostics,
}

impl Checker<'_> {
    fn error(&mut self, path: &str, message: String) -> &mut Diagnostic {
        self.out
            .push(Diagnostic::error(self.file, self.spans.at(path), message));
        let last = self.out.len() - 1;
        &mut self.out.0[last]
    }

    fn warn(&mut self, path: &str, message: String) -> &mut Diagnostic {
        self.out
            .push(Diagnostic::warning(self.file, self.spans.at(path), message));
        let last = self.out.len() - 1;
        &mut self.out.0[last]
    }

    fn percent(&mut self, path: &str, what: &str, v: f64) {
        if !(0.0..=100.0).contains(&v) {
            self.error(
                path,
                format!("{what} is {v}, but a percentage must be between 0 and 100"),
            );
        }
    }

    fn file_exists(&mut self, path: &str, what: &str, p: &Path) {
        if !p.exists() {
            self.error(path, format!("{what} '{}' does not exist", p.display()))
                .hint = Some("relative paths are resolved against the config file's folder".into());
        }
    }

    fn quota(&mut self, path: &str, q: &Quota) {
        if q.burst == Some(0) {
            self.error(
                &format!("{path}.burst"),
                "quota burst is 0, so no request would ever pass".into(),
            )
            .hint =
                Some("use a burst of at least 1, or remove it to default to one period of the rate".into());
        }
    }
}

/// A host to match: a name or address as a Host header carries it (ASCII letters, digits, `-`, `.`, `_`, and
/// `[`, `]`, `:` for an IPv6 literal), optionally behind a leading `*.` wildcard.
fn host_pattern_ok(host: &str) -> bool {
    let name = host.strip_prefix("*.").unwrap_or(host);
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b))
}

fn header_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Checks the meaning of a parsed gateway config.
pub(super) fn validate(config: &GatewayConfig, spans: &SpanIndex, file: &Path) -> Diagnostics {
    let mut c = Checker {
        spans,
        file,
        out: Diagnostics::new(),
    };
    listeners(&mut c, &config.listeners);
    let upstream_names = upstreams(&mut c, config);
    callers(&mut c, &config.rules.callers, &config.listeners);
    let mut route_names: HashMap<&str, usize> = HashMap::new();
    for (i, route) in config.rules.routes.iter().enumerate() {
        let p = format!("routes[{i}]");
        if let Some(first) = route_names.insert(&route.name, i) {
            let line = spans.at(&format!("routes[{first}].name")).line;
            c.error(
                &format!("{p}.name"),
                format!("route '{}' is defined twice (first at line {line})", route.name),
            )
            .hint = Some("route names must be unique; rename one".into());
        }
        check_route(&mut c, &p, route, &upstream_names);
    }
    unreachable_routes(&mut c, &config.rules.routes);
    if config.rules.routes.is_empty() {
        c.warn("routes", "there are no routes, so every request gets 404".into());
    }
    c.out.sort();
    c.out
}

fn listeners(c: &mut Checker<'_>, l: &Listeners) {
    if l.data.address == l.admin.address {
        let at = if c.spans.contains("listeners.admin.address") {
            "listeners.admin.address"
        } else {
            "listeners.data.address"
        };
        c.error(
            at,
            format!(
                "listeners.data.address and listeners.admin.address are both {}",
                l.data.address
            ),
        )
        .hint = Some("give the admin API its own port (default 127.0.0.1:9901)".into());
    }
    if let Some(tls) = &l.data.tls {
        c.file_exists("listeners.data.tls.cert", "TLS certificate file", &tls.cert);
        c.file_exists("listeners.data.tls.key", "TLS key file", &tls.key);
        match &tls.client_ca {
            Some(ca) => c.file_exists("listeners.data.tls.client_ca", "client CA file", ca),
            None if tls.require_client_cert => {
                c.error(
                    "listeners.data.tls.require_client_cert",
                    "require_client_cert is true but no client_ca is given to check client certificates"
                        .into(),
                )
                .hint = Some("add client_ca: <PEM bundle of the CAs that sign client certificates>".into());
            }
            None => {}
        }
    }
    let lim = &l.limits;
    if lim.h2_max_concurrent_streams == 0 {
        c.error(
            "listeners.limits.h2_max_concurrent_streams",
            "h2_max_concurrent_streams is 0, so no HTTP/2 request could be served".into(),
        );
    }
    if lim.max_headers == 0 {
        c.error(
            "listeners.limits.max_headers",
            "max_headers is 0, so no request could be served".into(),
        );
    }
    if lim.max_header_bytes.0 < 1024 {
        c.error(
            "listeners.limits.max_header_bytes",
            format!(
                "max_header_bytes is {}, below the 1KiB minimum",
                lim.max_header_bytes
            ),
        );
    }
    if lim.header_read_timeout.is_zero() {
        c.error(
            "listeners.limits.header_read_timeout",
            "header_read_timeout is 0s; use a positive duration such as 10s".into(),
        );
    }
    if lim.idle_timeout.is_zero() {
        c.error(
            "listeners.limits.idle_timeout",
            "idle_timeout is 0s; use a positive duration such as 60s".into(),
        );
    }
    if lim.write_timeout.is_zero() {
        c.error(
            "listeners.limits.write_timeout",
            "write_timeout is 0s; use a positive duration such as 30s".into(),
        );
    }
    if lim.stream_idle_timeout.is_zero() {
        c.error(
            "listeners.limits.stream_idle_timeout",
            "stream_idle_timeout is 0s; use a positive duration such as 300s".into(),
        );
    }
    if lim.max_connections == 0 {
        c.error(
            "listeners.limits.max_connections",
            "max_connections is 0, so no client could connect; use a positive count such as 10000".into(),
        );
    }
    if l.worker_threads == Some(0) {
        c.error(
            "listeners.worker_threads",
            "worker_threads is 0; remove it to use one thread per core".into(),
        );
    }
}

fn upstreams<'a>(c: &mut Checker<'_>, config: &'a GatewayConfig) -> Vec<&'a str> {
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (i, u) in config.rules.upstreams.iter().enumerate() {
        let p = format!("upstreams[{i}]");
        if u.name.is_empty() {
            c.error(&format!("{p}.name"), "upstream name is empty".into());
        } else if let Some(first) = names.insert(&u.name, i) {
            let line = c.spans.at(&format!("upstreams[{first}].name")).line;
            c.error(
                &format!("{p}.name"),
                format!("upstream '{}' is defined twice (first at line {line})", u.name),
            )
            .hint = Some("upstream names must be unique; rename one".into());
        }
        if u.endpoints.is_empty() {
            c.error(
                &format!("{p}.endpoints"),
                format!("upstream '{}' has no endpoints", u.name),
            )
            .hint = Some("add at least one endpoint, e.g. endpoints: [\"127.0.0.1:8000\"]".into());
        }
        let mut seen = HashSet::new();
        for (j, e) in u.endpoints.iter().enumerate() {
            if !seen.insert(e) {
                c.warn(
                    &format!("{p}.endpoints[{j}]"),
                    format!("upstream '{}' lists endpoint {e} twice", u.name),
                );
            }
        }
        match (&u.tls, u.protocol) {
            (None, UpstreamProtocol::H2Tls) => {
                c.error(
                    &format!("{p}.protocol"),
                    format!(
                        "upstream '{}' uses protocol h2-tls but has no 'tls' section",
                        u.name
                    ),
                )
                .hint = Some("add tls: { ca: <PEM bundle that signs the upstream's certificate> }".into());
            }
            (Some(tls), protocol) => {
                if protocol == UpstreamProtocol::H2c {
                    c.warn(
                        &format!("{p}.tls"),
                        format!(
                            "upstream '{}' has a 'tls' section but protocol h2c is clear text; it is spoken to over TLS as with h2-tls (write protocol: h2-tls to say so)",
                            u.name
                        ),
                    );
                }
                c.file_exists(&format!("{p}.tls.ca"), "upstream CA file", &tls.ca);
                match (&tls.cert, &tls.key) {
                    (Some(cert), Some(key)) => {
                        c.file_exists(&format!("{p}.tls.cert"), "upstream client certificate", cert);
                        c.file_exists(&format!("{p}.tls.key"), "upstream client key", key);
                    }
                    (Some(_), None) | (None, Some(_)) => {
                        c.error(
                            &format!("{p}.tls"),
                            format!(
                                "upstream '{}': tls.cert and tls.key must be given together",
                                u.name
                            ),
                        );
                    }
                    (None, None) => {}
                }
            }
            (None, _) => {}
        }
        for (field, v) in [
            ("connections_per_endpoint", u.connections_per_endpoint),
            ("max_concurrent_requests", u.max_concurrent_requests),
        ] {
            if v == 0 {
                c.error(
                    &format!("{p}.{field}"),
                    format!("upstream '{}': {field} is 0, so no request could be sent", u.name),
                );
            }
        }
        for (field, v) in [
            ("connect_timeout", u.connect_timeout),
            ("resolve_interval", u.resolve_interval),
        ] {
            if v.is_zero() {
                c.error(
                    &format!("{p}.{field}"),
                    format!("upstream '{}': {field} is 0s; use a positive duration", u.name),
                );
            }
        }
        if let Some(o) = &u.outlier_detection {
            let op = format!("{p}.outlier_detection");
            c.percent(
                &format!("{op}.max_ejected_percent"),
                "max_ejected_percent",
                o.max_ejected_percent,
            );
            if o.consecutive_5xx == 0 {
                c.error(
                    &format!("{op}.consecutive_5xx"),
                    format!("upstream '{}': consecutive_5xx is 0; use at least 1", u.name),
                );
            }
            if o.interval.is_zero() || o.base_ejection_time.is_zero() {
                c.error(
                    &op,
                    format!(
                        "upstream '{}': outlier detection interval and base_ejection_time must be positive",
                        u.name
                    ),
                );
            }
        }
    }
    config.rules.upstreams.iter().map(|u| u.name.as_str()).collect()
}

fn callers(c: &mut Checker<'_>, callers: &Callers, listeners: &Listeners) {
    match &callers.identify_by {
        CallerIdentity::Header(name) if !header_name_ok(name) => {
            c.error(
                "callers.identify_by.header",
                format!("'{name}' is not a valid header name"),
            );
        }
        CallerIdentity::MtlsIdentity if listeners.data.tls.as_ref().is_none_or(|t| t.client_ca.is_none()) => {
            c.error("callers.identify_by", "callers are identified by mTLS identity, but the data listener does not ask for client certificates".into())
                .hint = Some("set listeners.data.tls.client_ca (and usually require_client_cert: true)".into());
        }
        _ => {}
    }
    if let Some(q) = &callers.default_quota {
        c.quota("callers.default_quota", q);
    }
    if callers.quota_buckets < MIN_QUOTA_BUCKETS {
        c.error(
            "callers.quota_buckets",
            format!(
                "quota_buckets is {}, below the smallest store of {MIN_QUOTA_BUCKETS} buckets",
                callers.quota_buckets
            ),
        )
        .hint = Some(format!(
            "use at least {MIN_QUOTA_BUCKETS}, or remove it for the default of {}",
            super::defaults::quota_buckets()
        ));
    } else if callers.quota_buckets > MAX_QUOTA_BUCKETS_WITHOUT_WARNING {
        c.warn(
            "callers.quota_buckets",
            format!(
                "quota_buckets is {}: at about 40 bytes a bucket the quota store may grow to {} MiB",
                callers.quota_buckets,
                (u64::from(callers.quota_buckets) * 40) >> 20
            ),
        );
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, o) in callers.overrides.iter().enumerate() {
        let p = format!("callers.overrides[{i}]");
        if let Some(first) = seen.insert(&o.caller, i) {
            let line = c.spans.at(&format!("callers.overrides[{first}].caller")).line;
            c.error(
                &format!("{p}.caller"),
                format!("caller '{}' has two overrides (first at line {line})", o.caller),
            );
        }
        match (&o.quota, o.unlimited) {
            (None, false) => {
                c.error(
                    &p,
                    format!(
                        "override for caller '{}' sets neither 'quota' nor 'unlimited: true'",
                        o.caller
                    ),
                );
            }
            (Some(_), true) => {
                c.error(
                    &p,
                    format!(
                        "override for caller '{}' sets both 'quota' and 'unlimited: true'; keep one",
                        o.caller
                    ),
                );
            }
            (Some(q), false) => c.quota(&format!("{p}.quota"), q),
            (None, true) => {}
        }
    }
}

fn check_route(c: &mut Checker<'_>, p: &str, route: &Route, upstreams: &[&str]) {
    let name = &route.name;
    if name.is_empty() {
        c.error(&format!("{p}.name"), "route name is empty".into());
    }
    let m = &route.criteria;
    let mp = format!("{p}.match");
    for (field, v) in [("path_prefix", &m.path_prefix), ("path_exact", &m.path_exact)] {
        if let Some(v) = v
            && !v.starts_with('/')
        {
            c.error(
                &format!("{mp}.{field}"),
                format!("route '{name}': {field} '{v}' must start with '/'"),
            );
        }
    }
    if m.path_prefix.is_some() && m.path_exact.is_some() {
        c.error(
            &format!("{mp}.path_exact"),
            format!("route '{name}' sets both path_prefix and path_exact; keep one"),
        );
    }
    if let Some(h) = &m.host
        && !host_pattern_ok(h)
    {
        let d = c.error(
            &format!("{mp}.host"),
            format!("route '{name}': host '{h}' is not a host name or a '*.suffix' wildcard"),
        );
        if !h.is_ascii() {
            d.hint = Some(
                "a Host header is ASCII: write an internationalised name in its punycode form (xn--…)".into(),
            );
        }
    }
    for (i, method) in m.methods.iter().enumerate() {
        if !METHODS.contains(&method.as_str()) {
            let d = c.error(
                &format!("{mp}.methods[{i}]"),
                format!("route '{name}': unknown HTTP method '{method}'"),
            );
            d.hint = Some(match did_you_mean(method, METHODS) {
                Some(s) => format!("did you mean '{s}'?"),
                None => format!("methods are upper case: {}", METHODS.join(", ")),
            });
        }
    }
    for (i, h) in m.headers.iter().enumerate() {
        let hp = format!("{mp}.headers[{i}]");
        if !header_name_ok(&h.name) {
            c.error(
                &format!("{hp}.name"),
                format!("route '{name}': '{}' is not a valid header name", h.name),
            );
        }
        let given = [h.exact.is_some(), h.prefix.is_some(), h.present.is_some()]
            .iter()
            .filter(|b| **b)
            .count();
        if given != 1 {
            c.error(&hp, format!("route '{name}': header condition on '{}' must give exactly one of exact, prefix, present", h.name));
        }
    }
    if let Some(model) = &m.model
        && model.is_empty()
    {
        c.error(
            &format!("{mp}.model"),
            format!("route '{name}': model name is empty"),
        );
    }

    destinations(c, p, route, upstreams);

    if route.timeout.is_zero() {
        c.error(
            &format!("{p}.timeout"),
            format!("route '{name}': timeout is 0s; use a positive duration"),
        );
    }
    if let Some(r) = &route.retries {
        let rp = format!("{p}.retries");
        if let Some(per_try) = r.per_try_timeout {
            if per_try > route.timeout {
                c.error(
                    &format!("{rp}.per_try_timeout"),
                    format!(
                        "route '{name}': per-try timeout {} is longer than the route timeout {}, so a retry could never run",
                        format_duration(per_try),
                        format_duration(route.timeout)
                    ),
                )
                .hint = Some("lower retries.per_try_timeout or raise timeout (the route timeout covers every try)".into());
            } else if per_try.is_zero() {
                c.error(
                    &format!("{rp}.per_try_timeout"),
                    format!("route '{name}': per_try_timeout is 0s"),
                );
            }
        }
        if r.attempts > 0 && r.retry_on.is_empty() {
            c.error(
                &format!("{rp}.retry_on"),
                format!("route '{name}': retries are enabled but retry_on is empty"),
            )
            .hint = Some(
                "list conditions such as [connect-failure, refused-stream, unavailable], or set attempts: 0"
                    .into(),
            );
        }
        if r.attempts > 10 {
            c.warn(
                &format!("{rp}.attempts"),
                format!(
                    "route '{name}': {} retries per request can multiply load during an outage",
                    r.attempts
                ),
            );
        }
        if r.backoff.base > r.backoff.max {
            c.error(
                &format!("{rp}.backoff"),
                format!(
                    "route '{name}': back-off base {} is larger than back-off max {}",
                    format_duration(r.backoff.base),
                    format_duration(r.backoff.max)
                ),
            );
        }
        if !(0.0..=1.0).contains(&r.budget.ratio) {
            c.error(
                &format!("{rp}.budget.ratio"),
                format!(
                    "route '{name}': retry budget ratio {} must be between 0 and 1",
                    r.budget.ratio
                ),
            );
        }
        if r.budget.window.is_zero() {
            c.error(
                &format!("{rp}.budget.window"),
                format!("route '{name}': retry budget window is 0s"),
            );
        }
    }
    if let Some(q) = &route.quota {
        c.quota(&format!("{p}.quota"), q);
    }
    if let Some(mirror) = &route.mirror {
        let mp = format!("{p}.mirror");
        unknown_upstream(
            c,
            &format!("{mp}.upstream"),
            name,
            &mirror.upstream,
            upstreams,
            "mirrors traffic to",
        );
        c.percent(&format!("{mp}.percent"), "mirror percent", mirror.percent);
        if mirror.max_concurrent == 0 {
            c.error(
                &format!("{mp}.max_concurrent"),
                format!("route '{name}': mirror max_concurrent is 0, so no copy would ever be sent"),
            )
            .hint = Some("remove the mirror section to stop mirroring, or allow at least 1".into());
        }
        if mirror.timeout.is_some_and(|t| t.is_zero()) {
            c.error(
                &format!("{mp}.timeout"),
                format!("route '{name}': mirror timeout is 0s, so every copy would be abandoned at once"),
            )
            .hint = Some("remove it to use the route's timeout".into());
        }
    }
    if let Some(fault) = &route.fault {
        check_fault(c, &format!("{p}.fault"), route, fault);
    }
    if let Some(canary) = &route.canary {
        check_canary(c, &format!("{p}.canary"), route, canary);
    }
}

fn unknown_upstream(
    c: &mut Checker<'_>,
    path: &str,
    route: &str,
    upstream: &str,
    known: &[&str],
    verb: &str,
) {
    if known.contains(&upstream) {
        return;
    }
    let list = if known.is_empty() {
        "none are defined".to_string()
    } else {
        format!("known: {}", known.join(", "))
    };
    let d = c.error(
        path,
        format!("route '{route}' {verb} unknown upstream '{upstream}' ({list})"),
    );
    d.hint = Some(match did_you_mean(upstream, known.iter().copied()) {
        Some(s) => format!("did you mean '{s}'?"),
        None => "define it under 'upstreams' or fix the name".into(),
    });
}

fn destinations(c: &mut Checker<'_>, p: &str, route: &Route, upstreams: &[&str]) {
    let name = &route.name;
    if route.destinations.is_empty() {
        c.error(
            &format!("{p}.destinations"),
            format!("route '{name}' has no destinations"),
        )
        .hint = Some("add at least one: destinations: [{ upstream: backend }]".into());
        return;
    }
    let mut ids: HashMap<String, usize> = HashMap::new();
    for (i, d) in route.destinations.iter().enumerate() {
        let dp = format!("{p}.destinations[{i}]");
        unknown_upstream(
            c,
            &format!("{dp}.upstream"),
            name,
            &d.upstream,
            upstreams,
            "sends traffic to",
        );
        if let Some(first) = ids.insert(d.id(), i) {
            let line = c.spans.at(&format!("{p}.destinations[{first}]")).line;
            c.error(
                &dp,
                format!(
                    "route '{name}' has two destinations named '{}' (first at line {line})",
                    d.id()
                ),
            )
            .hint = Some("give them distinct 'name's or model_versions".into());
        }
        if let Some(v) = &d.model_version
            && v.is_empty()
        {
            c.error(
                &format!("{dp}.model_version"),
                format!("route '{name}': model_version is empty"),
            );
        }
    }
    let total: u64 = route.destinations.iter().map(|d| u64::from(d.weight)).sum();
    if total == 0 {
        c.error(
            &format!("{p}.destinations"),
            format!("route '{name}' has a total destination weight of 0, so it can send no traffic"),
        )
        .hint = Some("give at least one destination a positive weight".into());
    }
    if route.destinations.iter().any(|d| d.model_version.is_some()) && route.criteria.model.is_none() {
        c.warn(
            &format!("{p}.destinations"),
            format!("route '{name}' rewrites model_version but does not match on a model; the rewrite applies to every model it routes"),
        );
    }
}

fn check_fault(c: &mut Checker<'_>, p: &str, route: &Route, fault: &FaultInjection) {
    if let Some(delay) = &fault.delay {
        c.percent(
            &format!("{p}.delay.percent"),
            "fault delay percent",
            delay.percent,
        );
        if delay.duration >= route.timeout {
            c.warn(
                &format!("{p}.delay.duration"),
                format!(
                    "route '{}': injected delay {} is not shorter than the route timeout {}, so delayed requests time out",
                    route.name,
                    format_duration(delay.duration),
                    format_duration(route.timeout)
                ),
            );
        }
    }
    if let Some(abort) = &fault.abort {
        c.percent(
            &format!("{p}.abort.percent"),
            "fault abort percent",
            abort.percent,
        );
        if !(200..=599).contains(&abort.http_status) {
            c.error(
                &format!("{p}.abort.http_status"),
                format!(
                    "route '{}': injected status {} is not between 200 and 599",
                    route.name, abort.http_status
                ),
            );
        }
    }
    if fault.delay.is_none() && fault.abort.is_none() {
        c.warn(
            p,
            format!(
                "route '{}': 'fault' has neither delay nor abort; it does nothing",
                route.name
            ),
        );
    }
}

fn check_canary(c: &mut Checker<'_>, p: &str, route: &Route, canary: &CanaryAnalysis) {
    let name = &route.name;
    let ids: Vec<String> = route.destinations.iter().map(|d| d.id()).collect();
    for (field, v) in [("baseline", &canary.baseline), ("canary", &canary.canary)] {
        if !ids.contains(v) {
            let d = c.error(
                &format!("{p}.{field}"),
                format!(
                    "route '{name}': canary {field} '{v}' is not one of its destinations (known: {})",
                    ids.join(", ")
                ),
            );
            d.hint = Some(match did_you_mean(v, ids.iter().map(String::as_str)) {
                Some(s) => format!("did you mean '{s}'?"),
                None => "destinations are named by 'name', else 'upstream', else 'upstream/v{model_version}'"
                    .into(),
            });
        }
    }
    if canary.baseline == canary.canary {
        c.error(
            &format!("{p}.canary"),
            format!(
                "route '{name}': canary and baseline are the same destination '{}'",
                canary.canary
            ),
        );
    }
    if canary.window.is_zero() {
        c.error(
            &format!("{p}.window"),
            format!("route '{name}': canary window is 0s"),
        );
    }
    if !(0.0..=1.0).contains(&canary.max_error_rate_delta) {
        c.error(
            &format!("{p}.max_error_rate_delta"),
            format!("route '{name}': max_error_rate_delta {} must be a fraction between 0 and 1 (0.01 = one percentage point)", canary.max_error_rate_delta),
        );
    }
    if canary.max_p99_ratio.is_nan() || canary.max_p99_ratio <= 0.0 {
        c.error(
            &format!("{p}.max_p99_ratio"),
            format!(
                "route '{name}': max_p99_ratio {} must be positive (1.5 = 50% slower allowed)",
                canary.max_p99_ratio
            ),
        );
    }
    if let Some(promo) = &canary.promotion {
        let pp = format!("{p}.promotion");
        if promo.steps.is_empty() {
            c.error(
                &format!("{pp}.steps"),
                format!("route '{name}': promotion has no steps"),
            );
        }
        for (i, w) in promo.steps.windows(2).enumerate() {
            if w[1] <= w[0] {
                c.error(
                    &format!("{pp}.steps[{}]", i + 1),
                    format!(
                        "route '{name}': promotion steps must increase ({} after {})",
                        w[1], w[0]
                    ),
                );
            }
        }
        for (i, s) in promo.steps.iter().enumerate() {
            if *s > 100 {
                c.error(
                    &format!("{pp}.steps[{i}]"),
                    format!("route '{name}': promotion step {s} is over 100 percent"),
                );
            }
        }
        if promo.interval.is_zero() {
            c.error(
                &format!("{pp}.interval"),
                format!("route '{name}': promotion interval is 0s"),
            );
        }
    }
}

fn unreachable_routes(c: &mut Checker<'_>, routes: &[Route]) {
    for (i, later) in routes.iter().enumerate() {
        if let Some(earlier) = routes[..i]
            .iter()
            .find(|r| r.criteria.is_catch_all() || r.criteria == later.criteria)
        {
            let why = if earlier.criteria.is_catch_all() {
                "matches every request"
            } else {
                "has the same match"
            };
            c.warn(
                &format!("routes[{i}].name"),
                format!(
                    "route '{}' is never reached: route '{}' above it {why}",
                    later.name, earlier.name
                ),
            )
            .hint = Some("routes are tried in order; move the more specific route up".into());
        }
    }
}
