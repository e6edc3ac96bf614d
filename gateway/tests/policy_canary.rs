//! Automatic canary analysis on tokio's paused clock: rollback on error rate and on latency,
//! progressive promotion, and the decision kept until the config changes.

// Test helpers outside #[test] functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::type_complexity)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use infergate_gateway::canary::{CanaryPolicy, CanaryState, Phase, Promotion};
use infergate_gateway::route::CompiledRoutes;
use tokio::time::Instant;

fn state(policy: CanaryPolicy) -> CanaryState {
    CanaryState::new(
        "resnet",
        vec![Arc::from("v1"), Arc::from("v2")],
        vec![90, 10],
        policy,
        Instant::now(),
    )
}

/// One simulated second of traffic: `per_dest` requests to each side.
async fn second(s: &CanaryState, per_dest: u32, canary_errors: u32, base_ms: u64, canary_ms: u64) {
    for i in 0..per_dest {
        let now = Instant::now();
        s.record(0, false, Duration::from_millis(base_ms), now);
        s.record(1, i < canary_errors, Duration::from_millis(canary_ms), now);
    }
    tokio::time::advance(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn error_rate_regression_rolls_back_and_stays_rolled_back() {
    let s = state(CanaryPolicy {
        window: Duration::from_secs(10),
        min_requests: 50,
        max_error_rate_increase: Some(0.05),
        max_p99_ratio: None,
        ..CanaryPolicy::default()
    });
    // Healthy for 20 s.
    for _ in 0..20 {
        second(&s, 20, 0, 10, 10).await;
    }
    assert_eq!(s.phase(), Phase::Observing);
    assert_eq!(s.weights().as_slice(), &[90, 10]);
    // Then 25 % of canary requests fail.
    for _ in 0..10 {
        second(&s, 20, 5, 10, 10).await;
    }
    assert_eq!(s.phase(), Phase::RolledBack);
    assert_eq!(
        s.weights().as_slice(),
        &[10_000, 0],
        "the canary's share goes back to the baseline"
    );
    let report = s.report(Instant::now());
    let d = report.last_decision.expect("decision recorded");
    assert!(d.reason.contains("error rate"), "{}", d.reason);
    assert!(d.canary.error_rate > 0.05 && d.baseline.error_rate == 0.0);
    // Recovery does not undo the rollback: only a config change does.
    for _ in 0..30 {
        second(&s, 20, 0, 10, 10).await;
    }
    assert_eq!(s.phase(), Phase::RolledBack);
    let json = serde_json::to_value(s.report(Instant::now())).unwrap();
    assert_eq!(json["phase"], "rolled_back");
    assert_eq!(json["canary_destination"], "v2");
}

#[tokio::test(start_paused = true)]
async fn latency_regression_rolls_back() {
    let s = state(CanaryPolicy {
        window: Duration::from_secs(10),
        min_requests: 20,
        max_error_rate_increase: Some(0.05),
        max_p99_ratio: Some(1.5),
        ..CanaryPolicy::default()
    });
    for _ in 0..5 {
        second(&s, 10, 0, 20, 25).await;
    }
    assert_eq!(s.phase(), Phase::Observing, "25 ms vs 20 ms is within 1.5x");
    for _ in 0..5 {
        second(&s, 10, 0, 20, 80).await;
    }
    assert_eq!(s.phase(), Phase::RolledBack);
    let d = s.report(Instant::now()).last_decision.unwrap();
    assert!(d.reason.contains("p99"), "{}", d.reason);
}

#[tokio::test(start_paused = true)]
async fn healthy_canary_is_promoted_step_by_step() {
    let s = state(CanaryPolicy {
        window: Duration::from_secs(10),
        min_requests: 10,
        promotion: Some(Promotion {
            steps: vec![25, 50, 100],
            interval: Duration::from_secs(30),
        }),
        ..CanaryPolicy::default()
    });
    assert_eq!(s.phase(), Phase::Promoting);
    let mut shares = Vec::new();
    for _ in 0..100 {
        second(&s, 10, 0, 10, 10).await;
        let w = s.weights();
        let share = f64::from(w[1]) / f64::from(w[0] + w[1]);
        if shares.last() != Some(&share) {
            shares.push(share);
        }
    }
    assert_eq!(shares, vec![0.1, 0.25, 0.5, 1.0]);
    assert_eq!(s.phase(), Phase::Promoted);
}

#[tokio::test(start_paused = true)]
async fn decision_is_kept_across_reloads_until_the_route_config_changes() {
    let rules = |w2: u32| {
        let text = format!(
            "\
upstreams:
  - name: v1
    endpoints: [\"127.0.0.1:9\"]
  - name: v2
    endpoints: [\"127.0.0.1:9\"]
routes:
  - name: resnet
    destinations:
      - {{ name: stable, upstream: v1, weight: 90 }}
      - {{ name: canary, upstream: v2, weight: {w2} }}
    canary: {{ baseline: stable, canary: canary, window: 10s, min_requests: 20 }}
  - name: other
    destinations: [{{ upstream: v1 }}]
"
        );
        infergate_config::parse_gateway_config(&text, Path::new("routes.yaml"))
            .unwrap()
            .rules
    };
    let v1 = CompiledRoutes::compile(&rules(10), None).unwrap();
    let c = v1.get("resnet").unwrap().canary.clone().unwrap();
    for _ in 0..10 {
        second(&c, 10, 5, 10, 10).await;
    }
    assert_eq!(c.phase(), Phase::RolledBack);
    assert_eq!(&*v1.get("resnet").unwrap().weights(), &[10_000, 0]);
    // A reload with the same route settings keeps the decision.
    let v2 = CompiledRoutes::compile(&rules(10), Some(&v1)).unwrap();
    assert_eq!(
        v2.get("resnet").unwrap().canary.as_ref().unwrap().phase(),
        Phase::RolledBack
    );
    assert_eq!(
        infergate_gateway::canary::reports(
            v2.routes().iter().filter_map(|r| r.canary.as_ref()),
            Instant::now()
        )
        .len(),
        1
    );
    // Changing the route's weights starts a fresh analysis.
    let v3 = CompiledRoutes::compile(&rules(20), Some(&v2)).unwrap();
    let fresh = v3.get("resnet").unwrap();
    assert_eq!(fresh.canary.as_ref().unwrap().phase(), Phase::Observing);
    assert_eq!(&*fresh.weights(), &[90, 20]);
    // Routes without analysis use their configured weights.
    assert_eq!(&*v3.get("other").unwrap().weights(), &[1]);
}

#[tokio::test(start_paused = true)]
async fn the_configured_noise_floor_decides_whether_a_small_p99_gap_counts() {
    let compiled = |floor: &str| {
        let text = format!(
            "\
upstreams:
  - name: v1
    endpoints: [\"127.0.0.1:9\"]
routes:
  - name: resnet
    destinations:
      - {{ name: stable, upstream: v1, weight: 90 }}
      - {{ name: canary, upstream: v1, weight: 10 }}
    canary: {{ baseline: stable, canary: canary, window: 10s, min_requests: 20, max_p99_ratio: 1.5{floor} }}
"
        );
        let rules = infergate_config::parse_gateway_config(&text, Path::new("routes.yaml"))
            .unwrap()
            .rules;
        let routes = CompiledRoutes::try_from(&rules).unwrap();
        routes.get("resnet").unwrap().canary.clone().unwrap()
    };
    // 4 ms against 2 ms is twice as slow, but only 2 ms apart.
    let default_floor = compiled("");
    assert_eq!(default_floor.policy().p99_slack, Duration::from_millis(1));
    let wide_floor = compiled(", p99_noise_floor: 5ms");
    assert_eq!(wide_floor.policy().p99_slack, Duration::from_millis(5));
    for _ in 0..10 {
        second(&default_floor, 10, 0, 2, 4).await;
        second(&wide_floor, 10, 0, 2, 4).await;
    }
    assert_eq!(
        default_floor.phase(),
        Phase::RolledBack,
        "2 ms is above a 1 ms floor"
    );
    assert_eq!(
        wide_floor.phase(),
        Phase::Observing,
        "2 ms is noise under a 5 ms floor"
    );
}
