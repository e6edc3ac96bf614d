//! gRPC passes through the gateway as HTTP/2 with a real tonic client and server: unary calls, server
//! streaming, statuses carried in trailers; and errors the gateway itself produces reach gRPC callers as
//! `grpc-status` / `grpc-message`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::net::SocketAddr;

use dataplane_support::*;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus as PbStatus;
use tonic_health::pb::health_client::HealthClient;

async fn health_upstream() -> (SocketAddr, tonic_health::server::HealthReporter) {
    let (reporter, service) = tonic_health::server::health_reporter();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    (addr, reporter)
}

async fn client(gw: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{gw}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn check(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_string(),
    }
}

#[tokio::test]
async fn unary_and_streaming_calls_pass_through_with_their_trailers() {
    let (addr, reporter) = health_upstream().await;
    reporter
        .set_service_status("model-a", ServingStatus::Serving)
        .await;
    let gw = gateway(&one_route(addr, "", "")).await;
    let mut c = client(gw.data_addr()).await;

    let ok = c.check(check("model-a")).await.unwrap();
    assert_eq!(ok.into_inner().status, PbStatus::Serving as i32);

    // tonic-health answers NOT_FOUND for an unknown service: the status comes from the upstream, intact.
    let err = c.check(check("unknown-model")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(
        err.metadata().get("x-infergate-error-origin").is_none(),
        "not a gateway error"
    );

    // Server streaming: updates arrive through the gateway as they happen.
    let mut stream = c.watch(check("model-a")).await.unwrap().into_inner();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.status, PbStatus::Serving as i32);
    reporter
        .set_service_status("model-a", ServingStatus::NotServing)
        .await;
    let second = stream.next().await.unwrap().unwrap();
    assert_eq!(second.status, PbStatus::NotServing as i32);
}

#[tokio::test]
async fn gateway_errors_reach_grpc_callers_as_grpc_statuses() {
    let (addr, _reporter) = health_upstream().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let yaml = format!(
        r#"
upstreams:
  - name: live
    endpoints: ["{addr}"]
  - name: dead
    endpoints: ["{dead}"]
routes:
  - name: watch-goes-nowhere
    match: {{ path_exact: /grpc.health.v1.Health/Watch }}
    destinations:
      - upstream: dead
  - name: check
    match: {{ path_exact: /grpc.health.v1.Health/Check, headers: [{{ name: x-tier, exact: gold }}] }}
    destinations:
      - upstream: live
"#
    );
    let gw = gateway(&yaml).await;
    let mut c = client(gw.data_addr()).await;

    let err = c.watch(check("")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("upstream 'dead'"), "{}", err.message());
    assert_eq!(err.metadata().get("x-infergate-error-origin").unwrap(), "gateway");

    // No route: UNIMPLEMENTED (gRPC's mapping of 404), naming the routes.
    let err = c.check(check("")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert!(
        err.message().contains("watch-goes-nowhere, check"),
        "{}",
        err.message()
    );

    let mut req = tonic::Request::new(check(""));
    req.metadata_mut().insert("x-tier", "gold".parse().unwrap());
    let ok = c.check(req).await.unwrap();
    assert_eq!(ok.into_inner().status, PbStatus::Serving as i32);
}
