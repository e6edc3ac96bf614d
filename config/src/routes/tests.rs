use std::path::Path;
use std::time::Duration;

use super::*;

const FILE: &str = "routes.yaml";

fn parse(text: &str) -> Result<GatewayConfig, Diagnostics> {
    parse_gateway_config(text, Path::new(FILE))
}

/// Every diagnostic (errors and warnings) rendered, for a file that must fail.
fn problems(text: &str) -> Vec<String> {
    match load_gateway_config(text, Path::new(FILE)) {
        Ok((_, warnings)) => warnings.iter().map(ToString::to_string).collect(),
        Err(d) => d.iter().map(ToString::to_string).collect(),
    }
}

fn assert_problem(text: &str, expected: &str) {
    let all = problems(text);
    assert!(
        all.iter().any(|p| p == expected),
        "expected\n  {expected}\namong\n  {}",
        all.join("\n  ")
    );
}

const BASE: &str = "\
upstreams:
  - name: resnet-v1
    endpoints: [\"127.0.0.1:8000\"]
  - name: resnet-v2
    endpoints: [\"10.0.0.2:8000\", \"backend.default.svc:8000\"]
routes:
  - name: resnet
    match: { model: resnet }
    destinations:
      - upstream: resnet-v1
        weight: 90
      - upstream: resnet-v2
        weight: 10
";

#[test]
fn the_local_example_is_valid() {
    let text = include_str!("../../../deploy/local/routes.yaml");
    let (config, warnings) = load_gateway_config(text, Path::new("deploy/local/routes.yaml")).unwrap();
    assert!(warnings.is_empty(), "{warnings}");
    assert_eq!(config.listeners.data.address.to_string(), "127.0.0.1:8080");
    assert_eq!(config.listeners.admin.address.to_string(), "127.0.0.1:9901");
    let backend = config.rules.upstream("backend").unwrap();
    assert_eq!(
        backend.endpoints,
        vec![Endpoint {
            host: "127.0.0.1".into(),
            port: 8000
        }]
    );
    assert_eq!(backend.protocol, UpstreamProtocol::H2c);
    assert_eq!(
        config.rules.callers.identify_by,
        CallerIdentity::Header("x-caller-id".into())
    );
    let canary = config.rules.route("simple-canary").unwrap();
    assert_eq!(canary.criteria.model.as_deref(), Some("simple"));
    let split: Vec<(Option<&str>, u32)> = canary
        .destinations
        .iter()
        .map(|d| (d.model_version.as_deref(), d.weight))
        .collect();
    assert_eq!(split, vec![(Some("1"), 90), (Some("2"), 10)]);
    let retries = canary.retries.as_ref().unwrap();
    assert_eq!(retries.per_try_timeout, Some(Duration::from_secs(2)));
    assert_eq!(canary.timeout, Duration::from_secs(5));
    assert!(retries.retry_on.contains(&RetryOn::Grpc(GrpcCode::Unavailable)));
}

#[test]
fn values_are_typed_and_defaults_filled() {
    let text = format!(
        "{BASE}    timeout: 250ms
    quota: {{ rate: 6000/min }}
    retries:
      retry_on: [5xx, 503, resource-exhausted]
callers:
  identify_by: peer_address
  default_quota: {{ rate: 100/s, burst: 20 }}
listeners:
  limits: {{ max_request_body: 4MiB }}
"
    );
    let c = parse(&text).unwrap();
    let r = &c.rules.routes[0];
    assert_eq!(r.timeout, Duration::from_millis(250));
    let q = r.quota.as_ref().unwrap();
    assert_eq!(
        q.rate,
        Rate {
            tokens: 6000,
            per: Duration::from_secs(60)
        }
    );
    assert_eq!(q.burst(), 6000);
    let retries = r.retries.as_ref().unwrap();
    assert_eq!(
        retries.retry_on,
        vec![
            RetryOn::FiveXx,
            RetryOn::Status(503),
            RetryOn::Grpc(GrpcCode::ResourceExhausted)
        ]
    );
    assert_eq!(retries.attempts, defaults::retry_attempts());
    assert_eq!(retries.backoff, Backoff::default());
    assert_eq!(c.listeners.limits.max_request_body, ByteSize(4 << 20));
    assert_eq!(c.listeners.limits.max_headers, defaults::max_headers());
    assert_eq!(c.rules.upstreams[1].endpoints[1].host, "backend.default.svc");
    assert_eq!(c.rules.upstreams[0].connect_timeout, defaults::connect_timeout());
    assert_eq!(
        c.rules
            .callers
            .quota_for("someone", r.quota.as_ref())
            .unwrap()
            .rate
            .tokens,
        6000
    );
    assert_eq!(c.rules.callers.quota_for("someone", None).unwrap().burst(), 20);
}

#[test]
fn unknown_upstream_matches_the_contract_message() {
    let text = BASE.replace("      - upstream: resnet-v2", "      - upstream: resnet-v3");
    assert_problem(
        &text,
        "routes.yaml:12:19: route 'resnet' sends traffic to unknown upstream 'resnet-v3' (known: resnet-v1, resnet-v2) \
         (hint: did you mean 'resnet-v1'?)",
    );
}

#[test]
fn unknown_fields_are_all_reported_with_suggestions() {
    let text = BASE.replace(
        "    match: { model: resnet }",
        "    match: { modle: resnet }\n    timout: 5s",
    );
    let all = problems(&text);
    assert_eq!(
        all,
        vec![
            "routes.yaml:8:14: unknown field 'modle' in 'routes[0].match' (hint: did you mean 'model'?)",
            "routes.yaml:9:5: unknown field 'timout' in 'routes[0]' (hint: did you mean 'timeout'?)",
        ]
    );
    let all = problems("upstreams: []\nroutez: []\n");
    assert_eq!(
        all,
        vec!["routes.yaml:2:1: unknown field 'routez' at the top level (hint: did you mean 'routes'?)"]
    );
}

#[test]
fn wrong_types_name_the_field_and_position() {
    let text = format!("{BASE}    retries: {{ attempts: three }}\n");
    assert_problem(
        &text,
        "routes.yaml:14:26: routes[0].retries.attempts: expected an integer, found 'three'",
    );
    let text = format!("{BASE}    timeout: 5\n");
    assert_problem(
        &text,
        "routes.yaml:14:14: routes[0].timeout: duration 5 has no unit; write a number with a unit: 250ms, 5s, 1m, 2h \
         (also us, and combinations like 1m30s)",
    );
    let text = format!("{BASE}    quota: {{ rate: 100 }}\n");
    assert_problem(
        &text,
        "routes.yaml:14:20: routes[0].quota.rate: rate '100' has no period; write tokens per period: 100/s, 6000/min, 10/5s",
    );
    let text = BASE.replace("\"127.0.0.1:8000\"", "\"127.0.0.1\"");
    assert_problem(
        &text,
        "routes.yaml:3:17: upstreams[0].endpoints[0]: endpoint '127.0.0.1' has no port; write host:port, e.g. \
         127.0.0.1:8000, backend.default.svc:8000 or [::1]:8000",
    );
    let text = format!("{BASE}    retries: {{ retry_on: [conect-failure] }}\n");
    assert!(
        problems(&text)[0].contains("did you mean 'connect-failure'?"),
        "{:?}",
        problems(&text)
    );
    let text = format!("{BASE}listeners: {{ data: {{ address: 'localhost:80' }} }}\n");
    assert_eq!(
        problems(&text),
        vec![
            "routes.yaml:14:31: listeners.data.address: invalid listen address 'localhost:80'; write IP:port, e.g. \
             127.0.0.1:8080, 0.0.0.0:8080 or [::]:8080 (host names are not accepted here)"
        ]
    );
    let text = "upstreams:\n  - name: a\n    endpoints: [\"h:1\"]\n    protocol: h3\n";
    assert_eq!(
        problems(text),
        vec![
            "routes.yaml:4:15: upstreams[0].protocol: unknown value 'h3' (expected one of: h2c, http1, h2-tls)"
        ]
    );
    let text = "upstreams:\n  - endpoints: [\"h:1\"]\n";
    assert_eq!(
        problems(text),
        vec!["routes.yaml:2:5: upstreams[0]: missing required field 'name'"]
    );
}

#[test]
fn empty_huge_and_malformed_files_are_refused() {
    assert_eq!(
        problems(""),
        vec![
            "routes.yaml: the file is empty (hint: a gateway config needs at least 'upstreams' and 'routes'; see docs/configuration.md)"
        ]
    );
    let huge = format!("# {}\n", "x".repeat(crate::MAX_CONFIG_BYTES));
    assert!(problems(&huge)[0].contains("over the 1048576-byte limit"));
    let bad = problems("routes:\n  - name: [unclosed\n");
    assert_eq!(bad.len(), 1);
    assert!(bad[0].starts_with("routes.yaml:"), "{bad:?}");
    assert!(bad[0].contains("invalid YAML"), "{bad:?}");
    assert_eq!(
        problems("- just\n- a list\n"),
        vec![
            "routes.yaml:1:1: expected a section with fields (listeners, upstreams, callers, routes), found a list"
        ]
    );
}

#[test]
fn zero_total_weight() {
    let text = BASE
        .replace("weight: 90", "weight: 0")
        .replace("weight: 10", "weight: 0");
    assert_problem(
        &text,
        "routes.yaml:10:7: route 'resnet' has a total destination weight of 0, so it can send no traffic \
         (hint: give at least one destination a positive weight)",
    );
}

#[test]
fn per_try_timeout_longer_than_route_timeout() {
    let text = format!("{BASE}    timeout: 5s\n    retries: {{ per_try_timeout: 10s }}\n");
    assert_problem(
        &text,
        "routes.yaml:15:33: route 'resnet': per-try timeout 10s is longer than the route timeout 5s, so a retry \
         could never run (hint: lower retries.per_try_timeout or raise timeout (the route timeout covers every try))",
    );
}

#[test]
fn duplicate_names() {
    let text = format!(
        "{BASE}  - name: resnet\n    destinations: [{{ upstream: resnet-v1 }}]\n  - name: other\n    destinations: [{{ upstream: resnet-v1 }}]\n"
    );
    assert_problem(
        &text,
        "routes.yaml:14:11: route 'resnet' is defined twice (first at line 7) (hint: route names must be unique; rename one)",
    );
    let text = BASE
        .replace("name: resnet-v2", "name: resnet-v1")
        .replace("upstream: resnet-v2", "upstream: resnet-v1");
    let all = problems(&text);
    assert!(all.contains(&"routes.yaml:4:11: upstream 'resnet-v1' is defined twice (first at line 2) (hint: upstream names must be unique; rename one)".to_string()), "{all:?}");
    assert!(all.contains(&"routes.yaml:12:9: route 'resnet' has two destinations named 'resnet-v1' (first at line 10) (hint: give them distinct 'name's or model_versions)".to_string()), "{all:?}");
    let text = format!(
        "{BASE}callers:\n  overrides:\n    - {{ caller: a, unlimited: true }}\n    - {{ caller: a, unlimited: true }}\n"
    );
    assert_problem(
        &text,
        "routes.yaml:17:17: caller 'a' has two overrides (first at line 16)",
    );
}

#[test]
fn several_problems_are_reported_at_once_in_file_order() {
    let text = "\
upstreams:
  - name: a
    endpoints: []
routes:
  - name: r
    match: { path_prefix: v2, methods: [GTE] }
    destinations: [{ upstream: b }]
    mirror: { upstream: c, percent: 150 }
";
    let all = problems(text);
    assert_eq!(
        all,
        vec![
            "routes.yaml:3:16: upstream 'a' has no endpoints (hint: add at least one endpoint, e.g. endpoints: [\"127.0.0.1:8000\"])",
            "routes.yaml:6:27: route 'r': path_prefix 'v2' must start with '/'",
            "routes.yaml:6:41: route 'r': unknown HTTP method 'GTE' (hint: did you mean 'GET'?)",
            "routes.yaml:7:32: route 'r' sends traffic to unknown upstream 'b' (known: a) (hint: define it under 'upstreams' or fix the name)",
            "routes.yaml:8:25: route 'r' mirrors traffic to unknown upstream 'c' (known: a) (hint: define it under 'upstreams' or fix the name)",
            "routes.yaml:8:37: mirror percent is 150, but a percentage must be between 0 and 100",
        ]
    );
}

#[test]
fn listener_rules() {
    let text = format!(
        "{BASE}listeners:\n  data: {{ address: 127.0.0.1:9901 }}\n  limits: {{ h2_max_concurrent_streams: 0, max_header_bytes: 100 }}\n  worker_threads: 0\n"
    );
    let all = problems(&text);
    assert!(all.contains(&"routes.yaml:15:20: listeners.data.address and listeners.admin.address are both 127.0.0.1:9901 (hint: give the admin API its own port (default 127.0.0.1:9901))".to_string()), "{all:?}");
    assert!(
        all.contains(
            &"routes.yaml:16:40: h2_max_concurrent_streams is 0, so no HTTP/2 request could be served"
                .to_string()
        ),
        "{all:?}"
    );
    assert!(
        all.contains(&"routes.yaml:16:61: max_header_bytes is 100, below the 1KiB minimum".to_string()),
        "{all:?}"
    );
    assert!(
        all.contains(
            &"routes.yaml:17:19: worker_threads is 0; remove it to use one thread per core".to_string()
        ),
        "{all:?}"
    );
    let text = format!(
        "{BASE}listeners:\n  data:\n    tls: {{ cert: missing.pem, key: missing.key, require_client_cert: true }}\n"
    );
    let all = problems(&text);
    assert!(all.contains(&"routes.yaml:16:18: TLS certificate file 'missing.pem' does not exist (hint: relative paths are resolved against the config file's folder)".to_string()), "{all:?}");
    assert!(all.contains(&"routes.yaml:16:70: require_client_cert is true but no client_ca is given to check client certificates (hint: add client_ca: <PEM bundle of the CAs that sign client certificates>)".to_string()), "{all:?}");
    let text = format!("{BASE}callers: {{ identify_by: mtls_identity }}\n");
    assert_problem(
        &text,
        "routes.yaml:14:25: callers are identified by mTLS identity, but the data listener does not ask for client certificates (hint: set listeners.data.tls.client_ca (and usually require_client_cert: true))",
    );
}

#[test]
fn tls_paths_resolve_against_the_config_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cert.pem"), "x").unwrap();
    std::fs::write(dir.path().join("key.pem"), "x").unwrap();
    let text = format!("{BASE}listeners:\n  data:\n    tls: {{ cert: cert.pem, key: key.pem }}\n");
    let file = dir.path().join("routes.yaml");
    let c = parse_gateway_config(&text, &file).unwrap();
    assert_eq!(c.listeners.data.tls.unwrap().cert, dir.path().join("cert.pem"));
}

#[test]
fn upstream_rules() {
    let text = "\
upstreams:
  - name: a
    endpoints: [\"h:1\", \"h:1\"]
    protocol: h2-tls
    connections_per_endpoint: 0
    outlier_detection: { max_ejected_percent: 120, consecutive_5xx: 0 }
  - name: b
    endpoints: [\"h:2\"]
    tls: { ca: ca.pem }
    connect_timeout: 0s
routes:
  - name: r
    destinations: [{ upstream: a }, { upstream: b }]
";
    let all = problems(text);
    let expect = [
        "routes.yaml:3:24: warning: upstream 'a' lists endpoint h:1 twice",
        "routes.yaml:4:15: upstream 'a' uses protocol h2-tls but has no 'tls' section (hint: add tls: { ca: <PEM bundle that signs the upstream's certificate> })",
        "routes.yaml:5:31: upstream 'a': connections_per_endpoint is 0, so no request could be sent",
        "routes.yaml:6:47: max_ejected_percent is 120, but a percentage must be between 0 and 100",
        "routes.yaml:6:69: upstream 'a': consecutive_5xx is 0; use at least 1",
        "routes.yaml:9:10: warning: upstream 'b' has a 'tls' section but protocol h2c is clear text; it is spoken to over TLS as with h2-tls (write protocol: h2-tls to say so)",
        "routes.yaml:10:22: upstream 'b': connect_timeout is 0s; use a positive duration",
    ];
    for e in expect {
        assert!(all.contains(&e.to_string()), "missing {e}\n in {all:#?}");
    }
}

#[test]
fn caller_rules() {
    let text = format!(
        "{BASE}callers:\n  identify_by: {{ header: 'bad header' }}\n  default_quota: {{ rate: 10/s, burst: 0 }}\n  overrides:\n    - {{ caller: x }}\n    - {{ caller: y, unlimited: true, quota: {{ rate: 1/s }} }}\n"
    );
    let all = problems(&text);
    let expect = [
        "routes.yaml:15:26: 'bad header' is not a valid header name",
        "routes.yaml:16:39: quota burst is 0, so no request would ever pass (hint: use a burst of at least 1, or remove it to default to one period of the rate)",
        "routes.yaml:18:7: override for caller 'x' sets neither 'quota' nor 'unlimited: true'",
        "routes.yaml:19:7: override for caller 'y' sets both 'quota' and 'unlimited: true'; keep one",
    ];
    for e in expect {
        assert!(all.contains(&e.to_string()), "missing {e}\n in {all:#?}");
    }
}

#[test]
fn route_rules() {
    let text = "\
upstreams:
  - { name: a, endpoints: [\"h:1\"] }
routes:
  - name: r
    match:
      host: 'api.*.com'
      path_prefix: /v2
      path_exact: /v2/health
      headers: [{ name: x-debug }, { name: x-tenant, exact: a, prefix: b }]
    destinations: [{ upstream: a, model_version: \"2\" }]
    timeout: 0s
    retries: { attempts: 11, retry_on: [], backoff: { base: 1s, max: 100ms }, budget: { ratio: 2, window: 0s } }
    fault: { abort: { http_status: 700, percent: -1 } }
  - name: s
    destinations: []
";
    let all = problems(text);
    let expect = [
        "routes.yaml:6:13: route 'r': host 'api.*.com' is not a host name or a '*.suffix' wildcard",
        "routes.yaml:8:19: route 'r' sets both path_prefix and path_exact; keep one",
        "routes.yaml:9:17: route 'r': header condition on 'x-debug' must give exactly one of exact, prefix, present",
        "routes.yaml:9:36: route 'r': header condition on 'x-tenant' must give exactly one of exact, prefix, present",
        "routes.yaml:10:19: warning: route 'r' rewrites model_version but does not match on a model; the rewrite applies to every model it routes",
        "routes.yaml:11:14: route 'r': timeout is 0s; use a positive duration",
        "routes.yaml:12:26: warning: route 'r': 11 retries per request can multiply load during an outage",
        "routes.yaml:12:40: route 'r': retries are enabled but retry_on is empty (hint: list conditions such as [connect-failure, refused-stream, unavailable], or set attempts: 0)",
        "routes.yaml:12:53: route 'r': back-off base 1s is larger than back-off max 100ms",
        "routes.yaml:12:96: route 'r': retry budget ratio 2 must be between 0 and 1",
        "routes.yaml:12:107: route 'r': retry budget window is 0s",
        "routes.yaml:13:36: route 'r': injected status 700 is not between 200 and 599",
        "routes.yaml:13:50: fault abort percent is -1, but a percentage must be between 0 and 100",
        "routes.yaml:15:19: route 's' has no destinations (hint: add at least one: destinations: [{ upstream: backend }])",
    ];
    for e in expect {
        assert!(all.contains(&e.to_string()), "missing {e}\n in {all:#?}");
    }
}

#[test]
fn unreachable_after_catch_all_and_no_routes() {
    let text = "upstreams: [{ name: a, endpoints: [\"h:1\"] }]\nroutes:\n  - { name: all, destinations: [{ upstream: a }] }\n  - { name: m, match: { model: x }, destinations: [{ upstream: a }] }\n";
    assert_problem(
        text,
        "routes.yaml:4:13: warning: route 'm' is never reached: route 'all' above it matches every request (hint: routes are tried in order; move the more specific route up)",
    );
    assert_problem(
        "upstreams: []\n",
        "routes.yaml:1:1: warning: there are no routes, so every request gets 404",
    );
}

#[test]
fn canary_rules() {
    let text = format!(
        "{BASE}    canary:\n      baseline: resnet-v1\n      canary: resnet-v4\n      max_error_rate_delta: 5\n      max_p99_ratio: 0\n      promotion: {{ steps: [10, 5, 200] }}\n"
    );
    let all = problems(&text);
    let expect = [
        "routes.yaml:16:15: route 'resnet': canary canary 'resnet-v4' is not one of its destinations (known: resnet-v1, resnet-v2) (hint: did you mean 'resnet-v1'?)",
        "routes.yaml:17:29: route 'resnet': max_error_rate_delta 5 must be a fraction between 0 and 1 (0.01 = one percentage point)",
        "routes.yaml:18:22: route 'resnet': max_p99_ratio 0 must be positive (1.5 = 50% slower allowed)",
        "routes.yaml:19:32: route 'resnet': promotion steps must increase (5 after 10)",
        "routes.yaml:19:35: route 'resnet': promotion step 200 is over 100 percent",
    ];
    for e in expect {
        assert!(all.contains(&e.to_string()), "missing {e}\n in {all:#?}");
    }
    let ok = format!(
        "{BASE}    canary: {{ baseline: resnet-v1, canary: resnet-v2, promotion: {{ steps: [10, 50, 100], interval: 5m }} }}\n"
    );
    let c = parse(&ok).unwrap();
    let canary = c.rules.routes[0].canary.as_ref().unwrap();
    assert_eq!(canary.window, defaults::canary_window());
    assert_eq!(
        canary.promotion.as_ref().unwrap().interval,
        Duration::from_secs(300)
    );
    let same = format!("{BASE}    canary: {{ baseline: resnet-v1, canary: resnet-v1 }}\n");
    assert_problem(
        &same,
        "routes.yaml:14:44: route 'resnet': canary and baseline are the same destination 'resnet-v1'",
    );
}

#[test]
fn reload_keeps_restart_only_listeners() {
    let running = parse(BASE).unwrap();
    let edited = parse(&format!(
        "{BASE}listeners: {{ data: {{ address: 0.0.0.0:9000 }} }}\n"
    ))
    .unwrap();
    let edited_routes = parse(&BASE.replace("weight: 90", "weight: 50")).unwrap();
    let (applied, warnings) = GatewayConfig::reloaded(&running, edited, Path::new(FILE));
    assert_eq!(applied.listeners, running.listeners);
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].to_string().contains("needs restart"),
        "{}",
        warnings[0]
    );
    let (applied, warnings) = GatewayConfig::reloaded(&running, edited_routes, Path::new(FILE));
    assert!(warnings.is_empty());
    assert_eq!(applied.rules.routes[0].destinations[0].weight, 50);
}

#[test]
fn serializes_back_to_a_config_that_parses_the_same() {
    let text = include_str!("../../../deploy/local/routes.yaml");
    let c = parse(text).unwrap();
    let json = serde_json::to_string(&c).unwrap();
    // JSON is YAML: the admin API's `/config` output can be fed back to the parser.
    let again = parse(&json).unwrap();
    assert_eq!(again, c);
}

/// Asserts a diagnostic with exactly this message (after its `file:line:column: ` prefix) exists.
fn assert_message(text: &str, message: &str) {
    let all = problems(text);
    assert!(
        all.iter()
            .any(|p| p.split_once(": ").is_some_and(|(_, m)| m == message)),
        "expected message\n  {message}\namong\n  {}",
        all.join("\n  ")
    );
}

#[test]
fn remaining_rules_have_exact_messages() {
    let listeners = format!(
        "{BASE}listeners:\n  limits: {{ max_headers: 0, header_read_timeout: 0s, idle_timeout: 0s }}\n"
    );
    assert_message(&listeners, "max_headers is 0, so no request could be served");
    assert_message(
        &listeners,
        "header_read_timeout is 0s; use a positive duration such as 10s",
    );
    assert_message(
        &listeners,
        "idle_timeout is 0s; use a positive duration such as 60s",
    );

    let upstreams = "\
upstreams:
  - name: ''
    endpoints: [\"h:1\"]
    resolve_interval: 0s
    max_concurrent_requests: 0
    outlier_detection: { interval: 0s }
  - name: t
    endpoints: [\"h:2\"]
    protocol: h2-tls
    tls: { ca: ca.pem, cert: c.pem }
routes: [{ name: r, destinations: [{ upstream: t }] }]
";
    assert_message(upstreams, "upstream name is empty");
    assert_message(
        upstreams,
        "upstream '': resolve_interval is 0s; use a positive duration",
    );
    assert_message(
        upstreams,
        "upstream '': max_concurrent_requests is 0, so no request could be sent",
    );
    assert_message(
        upstreams,
        "upstream '': outlier detection interval and base_ejection_time must be positive",
    );
    assert_message(
        upstreams,
        "upstream 't': tls.cert and tls.key must be given together",
    );
    assert_message(
        upstreams,
        "upstream CA file 'ca.pem' does not exist (hint: relative paths are resolved against the config file's folder)",
    );

    let routes = "\
upstreams: [{ name: a, endpoints: [\"h:1\"] }]
routes:
  - name: ''
    match: { host: '', model: '' }
    destinations: [{ upstream: a, model_version: '' }]
    retries: { per_try_timeout: 0s }
    fault: {}
    canary: { baseline: a, canary: a, window: 0s, promotion: { steps: [], interval: 0s } }
  - name: d
    match: { model: m }
    destinations: [{ upstream: a }]
    timeout: 1s
    fault: { delay: { duration: 2s, percent: 101 } }
";
    assert_message(routes, "route name is empty");
    assert_message(
        routes,
        "route '': host '' is not a host name or a '*.suffix' wildcard",
    );
    assert_message(routes, "route '': model name is empty");
    assert_message(routes, "route '': model_version is empty");
    assert_message(routes, "route '': per_try_timeout is 0s");
    assert_message(
        routes,
        "warning: route '': 'fault' has neither delay nor abort; it does nothing",
    );
    assert_message(
        routes,
        "route '': canary and baseline are the same destination 'a'",
    );
    assert_message(routes, "route '': canary window is 0s");
    assert_message(routes, "route '': promotion has no steps");
    assert_message(routes, "route '': promotion interval is 0s");
    assert_message(
        routes,
        "fault delay percent is 101, but a percentage must be between 0 and 100",
    );
    assert_message(
        routes,
        "warning: route 'd': injected delay 2s is not shorter than the route timeout 1s, so delayed requests time out",
    );
}

#[test]
fn duplicate_keys_and_anchors() {
    let dup = "upstreams: []\nupstreams: []\n";
    assert_eq!(
        problems(dup),
        vec!["routes.yaml:2:1: field 'upstreams' is given more than once at the top level"]
    );
    // Anchors and aliases let operators share one retry policy between routes.
    let shared = format!(
        "{BASE}    retries: &standard {{ attempts: 3, per_try_timeout: 1s }}\n  - name: other\n    match: {{ model: other }}\n    \
         destinations: [{{ upstream: resnet-v1 }}]\n    retries: *standard\n"
    );
    let c = parse(&shared).unwrap();
    assert_eq!(c.rules.routes[0].retries, c.rules.routes[1].retries);
    assert_eq!(c.rules.routes[1].retries.as_ref().unwrap().attempts, 3);
}

#[test]
fn mirror_canary_and_quota_store_limits() {
    // Defaults when left out.
    let plain = format!(
        "{BASE}    mirror: {{ upstream: resnet-v2 }}\n    canary: {{ baseline: resnet-v1, canary: resnet-v2 }}\n"
    );
    let c = parse(&plain).unwrap();
    let route = &c.rules.routes[0];
    let mirror = route.mirror.as_ref().unwrap();
    assert_eq!(mirror.max_concurrent, defaults::mirror_max_concurrent());
    assert_eq!(mirror.timeout, None);
    assert_eq!(
        route.canary.as_ref().unwrap().p99_noise_floor,
        Duration::from_millis(1)
    );
    assert_eq!(c.rules.callers.quota_buckets, 1 << 18);
    assert_eq!(Callers::default().quota_buckets, 1 << 18);

    // Set explicitly.
    let set = format!(
        "callers: {{ quota_buckets: 1000 }}\n{BASE}    mirror: {{ upstream: resnet-v2, max_concurrent: 8, timeout: 250ms }}\n    \
         canary: {{ baseline: resnet-v1, canary: resnet-v2, p99_noise_floor: 5ms }}\n"
    );
    let c = parse(&set).unwrap();
    let route = &c.rules.routes[0];
    let mirror = route.mirror.as_ref().unwrap();
    assert_eq!(mirror.max_concurrent, 8);
    assert_eq!(mirror.timeout, Some(Duration::from_millis(250)));
    assert_eq!(
        route.canary.as_ref().unwrap().p99_noise_floor,
        Duration::from_millis(5)
    );
    assert_eq!(c.rules.callers.quota_buckets, 1000);

    // Refused values, each at its line.
    let bad = format!(
        "callers: {{ quota_buckets: 10 }}\n{BASE}    mirror: {{ upstream: resnet-v2, max_concurrent: 0, timeout: 0s }}\n"
    );
    let all = problems(&bad);
    for e in [
        "routes.yaml:1:27: quota_buckets is 10, below the smallest store of 64 buckets (hint: use at least 64, or remove it for the default of 262144)",
        "routes.yaml:15:52: route 'resnet': mirror max_concurrent is 0, so no copy would ever be sent (hint: remove the mirror section to stop mirroring, or allow at least 1)",
        "routes.yaml:15:64: route 'resnet': mirror timeout is 0s, so every copy would be abandoned at once (hint: remove it to use the route's timeout)",
    ] {
        assert!(all.contains(&e.to_string()), "missing {e}\n in {all:#?}");
    }
    assert_problem(
        &format!("callers: {{ quota_buckets: 100000000 }}\n{BASE}"),
        "routes.yaml:1:27: warning: quota_buckets is 100000000: at about 40 bytes a bucket the quota store may grow to 3814 MiB",
    );
}

#[test]
fn a_host_that_is_not_ascii_is_refused_with_the_punycode_hint_not_a_panic() {
    // Found by the routes_yaml fuzzer: a first character of several bytes used to panic the validator
    // (a byte slice inside it), taking the gateway's reload down with it.
    for host in ["ñandú.example", "*.bücher.example", "ex ample.com"] {
        let text = format!(
            "upstreams: [{{ name: a, endpoints: [\"h:1\"] }}]\nroutes:\n  - name: r\n    match: {{ host: '{host}' }}\n    destinations: [{{ upstream: a }}]\n"
        );
        let all = problems(&text);
        let wanted = format!("route 'r': host '{host}' is not a host name or a '*.suffix' wildcard");
        let found = all.iter().find(|p| p.contains(&wanted));
        let Some(found) = found else {
            panic!("expected {wanted} among\n  {}", all.join("\n  "));
        };
        assert_eq!(found.contains("punycode"), !host.is_ascii(), "{found}");
    }
    for host in [
        "api.example.com",
        "*.example.com",
        "[::1]",
        "10.0.0.1",
        "svc_name.ns",
    ] {
        let text = format!(
            "upstreams: [{{ name: a, endpoints: [\"h:1\"] }}]\nroutes:\n  - name: r\n    match: {{ host: '{host}' }}\n    destinations: [{{ upstream: a }}]\n"
        );
        assert!(
            problems(&text).iter().all(|p| !p.contains("host")),
            "{host}: {:?}",
            problems(&text)
        );
    }
}
