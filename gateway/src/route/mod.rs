//! Route matching: which route of the running rules a request belongs to.
//!
//! [`CompiledRoutes`] is built once per config version (from `infergate_config::RoutingRules`, see
//! [`CompiledRoutes::compile`]) and queried per request with [`CompiledRoutes::match_request`]. Routes are
//! tried in config order; the first whose every condition holds wins. Each condition is
//! precompiled (lower-cased hosts, parsed header names, method list), so a decision allocates
//! nothing and costs well under a microsecond (see `benches/policy_route.rs`).
//!
//! The KServe model name comes from the REST path (`/v2/models/{name}/...`, parsed here) or, for
//! gRPC, from [`grpc::peek_model`] over the first bytes of the body; the pipeline passes it in with
//! [`RequestFacts::with_model`].

mod compile;

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};

pub use crate::model_ref::{grpc, kserve};
pub use crate::route_key::RouteKey;
pub use compile::{CompileError, caller_policy};
pub use kserve::{ModelRef, RestModelPath, parse_repository_model_path, parse_rest_model_path};

use crate::caller::{Caller, CallerPolicy};
use crate::canary::CanaryState;
use crate::fault::FaultPolicy;
use crate::metrics::DestinationMetrics;
use crate::mirror::MirrorPolicy;
use crate::quota::RouteQuota;
use crate::request_target::route_host;
use crate::retry::{RetryBudget, RetryPolicy};
use crate::split::Split;
use crate::timeout::TimeoutPolicy;

/// The facts about one request that routes match on. Borrowed; build one per request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// Request method.
    pub method: &'a Method,
    /// Host from the URI authority (h2 `:authority`) or the `Host` header, without the port and trailing dot.
    pub host: Option<&'a str>,
    /// The path, without the query string.
    pub path: &'a str,
    /// Request headers.
    pub headers: &'a HeaderMap,
    /// The KServe model named by the request, if any.
    pub model: Option<ModelRef<'a>>,
}

impl<'a> RequestFacts<'a> {
    /// Facts from the request head, whose target [`crate::request_target::canonicalise`] has checked and
    /// rewritten. The host is the URI's authority (HTTP/2 `:authority`, absolute-form) or `Host`, without port
    /// and trailing dot. The model is parsed from a REST `/v2/models/{name}` or
    /// `/v2/repository/models/{name}/load|unload` path as written (set the decoded name with
    /// [`RequestFacts::with_model`] when it holds escapes, and for gRPC after peeking the body).
    pub fn new(method: &'a Method, uri: &'a Uri, headers: &'a HeaderMap) -> Self {
        let host = uri.authority().map(|a| route_host(a.as_str())).or_else(|| {
            headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(route_host)
        });
        let path = uri.path();
        let model = parse_rest_model_path(path)
            .map(|p| p.model)
            .or_else(|| parse_repository_model_path(path));
        Self {
            method,
            host,
            path,
            headers,
            model,
        }
    }

    /// Replaces the model (for gRPC, from [`grpc::peek_model`]).
    pub fn with_model(mut self, model: Option<ModelRef<'a>>) -> Self {
        self.model = model;
        self
    }
}

/// A host condition. Hosts compare case-insensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// `api.example.com`
    Exact(Box<str>),
    /// `*.example.com`: any host ending in `.example.com` (not `example.com` itself).
    Suffix(Box<str>),
}

impl HostMatch {
    /// Parses `host` or `*.suffix`.
    pub fn parse(pattern: &str) -> Self {
        let p = pattern.to_ascii_lowercase();
        match p.strip_prefix('*') {
            Some(suffix) if suffix.starts_with('.') => HostMatch::Suffix(suffix.into()),
            _ => HostMatch::Exact(p.into()),
        }
    }

    fn matches(&self, host: &str) -> bool {
        match self {
            HostMatch::Exact(h) => host.eq_ignore_ascii_case(h),
            HostMatch::Suffix(s) => {
                host.len() > s.len()
                    && host.is_char_boundary(host.len() - s.len())
                    && host[host.len() - s.len()..].eq_ignore_ascii_case(s)
            }
        }
    }
}

/// A path condition (case-sensitive, like KServe paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// The whole path equals this.
    Exact(Box<str>),
    /// The path starts with this.
    Prefix(Box<str>),
}

impl PathMatch {
    fn matches(&self, path: &str) -> bool {
        match self {
            PathMatch::Exact(p) => path == &**p,
            PathMatch::Prefix(p) => path.starts_with(&**p),
        }
    }
}

/// A header condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderMatch {
    /// Header name.
    pub name: HeaderName,
    /// What its value must be.
    pub value: HeaderValueMatch,
}

/// What a header's value must be for a [`HeaderMatch`] to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValueMatch {
    /// Some value of the header equals this exactly.
    Exact(HeaderValue),
    /// Some value of the header starts with these bytes.
    Prefix(Box<[u8]>),
    /// The header is present (any value).
    Present,
    /// The header is absent.
    Absent,
}

impl HeaderMatch {
    fn matches(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(&self.name).iter();
        match &self.value {
            HeaderValueMatch::Exact(v) => values.any(|x| x == v),
            HeaderValueMatch::Prefix(p) => values.any(|x| x.as_bytes().starts_with(p)),
            HeaderValueMatch::Present => values.next().is_some(),
            HeaderValueMatch::Absent => values.next().is_none(),
        }
    }
}

/// All conditions of one route; empty lists match anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteMatch {
    /// Any of these hosts (empty: any host).
    pub hosts: Vec<HostMatch>,
    /// The path condition.
    pub path: Option<PathMatch>,
    /// Any of these methods (empty: any method).
    pub methods: Vec<Method>,
    /// Every one of these header conditions.
    pub headers: Vec<HeaderMatch>,
    /// Any of these model names (empty: any request, with or without a model).
    pub models: Vec<Box<str>>,
}

impl RouteMatch {
    /// Whether the request satisfies every condition.
    pub fn matches(&self, req: &RequestFacts<'_>) -> bool {
        if !self.models.is_empty() {
            let Some(model) = req.model else { return false };
            if !self.models.iter().any(|m| **m == *model.name) {
                return false;
            }
        }
        if let Some(path) = &self.path
            && !path.matches(req.path)
        {
            return false;
        }
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == req.method) {
            return false;
        }
        if !self.hosts.is_empty() {
            let Some(host) = req.host else { return false };
            if !self.hosts.iter().any(|h| h.matches(host)) {
                return false;
            }
        }
        self.headers.iter().all(|h| h.matches(req.headers))
    }
}

/// One route of the running rules with every policy it applies, compiled.
#[derive(Debug, Clone)]
pub struct CompiledRoute {
    /// The route's name as configured (metric label `route`).
    pub name: Arc<str>,
    /// Stable key of the route for long-lived stores.
    pub key: RouteKey,
    /// Conditions.
    pub matcher: RouteMatch,
    /// Weighted destinations, header forcing and stickiness.
    pub split: Split,
    /// Per-caller token buckets, if the route has a quota.
    pub quota: Option<Arc<RouteQuota>>,
    /// Overall timeout covering all tries.
    pub timeout: TimeoutPolicy,
    /// Attempts, per-try timeout, conditions, back-off, budget, replay limit.
    pub retry: Arc<RetryPolicy>,
    /// The route's retry budget (carried over across versions while its settings stay).
    pub retry_budget: Arc<RetryBudget>,
    /// Shadow traffic, if configured.
    pub mirror: Option<MirrorPolicy>,
    /// Fault injection, if configured.
    pub fault: Option<FaultPolicy>,
    /// Automatic canary analysis, if configured (carried over across versions while its settings stay).
    pub canary: Option<Arc<CanaryState>>,
    /// Metric handles, one per destination (same order as [`Split::destinations`]).
    pub metrics: Arc<[Arc<DestinationMetrics>]>,
}

impl CompiledRoute {
    /// The weights to split with now: the canary analysis's (rolled back or promoted) when the
    /// route has one, else the configured ones (what [`CompiledRoute::choose`] splits with).
    pub fn weights(&self) -> Weights<'_> {
        match &self.canary {
            Some(c) => Weights::Live(c.weights()),
            None => Weights::Configured(self.split.weights()),
        }
    }

    /// The index of the destination (in [`Split::destinations`]) that serves a request with `headers` from
    /// `caller`. A route with one destination has nothing to choose: no header read, no weights, no roll.
    pub fn choose(&self, headers: &HeaderMap, caller: &Caller<'_>) -> usize {
        match self.split.destinations() {
            [_] => 0,
            _ => {
                self.split
                    .choose_with(headers, caller, &self.weights(), rand::random())
                    .index
            }
        }
    }
}

/// The weights in force for one request (see [`CompiledRoute::weights`]); derefs to `[u32]`.
pub enum Weights<'a> {
    /// As configured.
    Configured(&'a [u32]),
    /// From the canary analysis.
    Live(arc_swap::Guard<Arc<Vec<u32>>>),
}

impl std::ops::Deref for Weights<'_> {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        match self {
            Weights::Configured(w) => w,
            Weights::Live(g) => g.as_slice(),
        }
    }
}

/// The compiled routes of one config version. Cheap to query; build once per reload.
#[derive(Debug, Clone, Default)]
pub struct CompiledRoutes {
    routes: Vec<CompiledRoute>,
    by_name: HashMap<Arc<str>, usize>,
    callers: CallerPolicy,
    quota_buckets: usize,
}

impl CompiledRoutes {
    /// Routes in match order (the config's order), with the gateway-wide caller rules.
    pub fn new(routes: Vec<CompiledRoute>, callers: CallerPolicy) -> Self {
        let by_name = routes
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.clone(), i))
            .collect();
        Self {
            routes,
            by_name,
            callers,
            quota_buckets: usize::MAX,
        }
    }

    /// Sets how many quota buckets the gateway keeps (`callers.quota_buckets`).
    pub fn with_quota_buckets(mut self, buckets: usize) -> Self {
        self.quota_buckets = buckets;
        self
    }

    /// How many quota buckets the gateway keeps while these routes run (the swap applies it to the
    /// long-lived bucket store).
    pub fn quota_buckets(&self) -> usize {
        self.quota_buckets
    }

    /// How callers are identified (for quotas and sticky splits).
    pub fn callers(&self) -> &CallerPolicy {
        &self.callers
    }

    /// The first route whose conditions all hold, or `None` (the pipeline answers 404 with the
    /// list of routes in its message).
    pub fn match_request(&self, req: &RequestFacts<'_>) -> Option<&CompiledRoute> {
        self.routes.iter().find(|r| r.matcher.matches(req))
    }

    /// Whether any route matches on the model name: when none does, the pipeline need not peek
    /// into gRPC bodies before matching.
    pub fn uses_model_match(&self) -> bool {
        self.routes.iter().any(|r| !r.matcher.models.is_empty())
    }

    /// The route called `name`.
    pub fn get(&self, name: &str) -> Option<&CompiledRoute> {
        self.by_name.get(name).map(|&i| &self.routes[i])
    }

    /// All routes, in match order.
    pub fn routes(&self) -> &[CompiledRoute] {
        &self.routes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(m: &'a Method, uri: &'a Uri, h: &'a HeaderMap) -> RequestFacts<'a> {
        RequestFacts::new(m, uri, h)
    }

    #[test]
    fn host_and_port_handling() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("API.example.com:8080"));
        let uri: Uri = "/v2/models/resnet/infer".parse().unwrap();
        let f = facts(&Method::POST, &uri, &h);
        assert_eq!(f.host, Some("API.example.com"));
        assert_eq!(f.model.unwrap().name, "resnet");
        assert!(HostMatch::parse("api.example.com").matches(f.host.unwrap()));
        assert!(HostMatch::parse("*.EXAMPLE.com").matches(f.host.unwrap()));
        assert!(!HostMatch::parse("*.example.com").matches("example.com"));
        assert_eq!(route_host("[::1]:80"), "::1");
    }

    #[test]
    fn every_condition_must_hold() {
        let m = RouteMatch {
            hosts: vec![HostMatch::parse("*.svc")],
            path: Some(PathMatch::Prefix("/v2/".into())),
            methods: vec![Method::POST],
            headers: vec![HeaderMatch {
                name: HeaderName::from_static("x-tier"),
                value: HeaderValueMatch::Exact(HeaderValue::from_static("gold")),
            }],
            models: vec!["resnet".into()],
        };
        let uri: Uri = "http://m.svc/v2/models/resnet/infer".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-tier", HeaderValue::from_static("gold"));
        assert!(m.matches(&facts(&Method::POST, &uri, &h)));
        assert!(!m.matches(&facts(&Method::GET, &uri, &h)));
        let other: Uri = "http://m.svc/v2/models/bert/infer".parse().unwrap();
        assert!(!m.matches(&facts(&Method::POST, &other, &h)));
        h.insert("x-tier", HeaderValue::from_static("silver"));
        assert!(!m.matches(&facts(&Method::POST, &uri, &h)));
    }
}
