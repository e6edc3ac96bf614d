//! h2 over TLS against the gateway's own TLS listener (in process, certificates made by rcgen), in front of a
//! plaintext h2c KServe V2 server written here: with `--ca` the load runs and sees the versions that answered;
//! with `--insecure` too; a server signed by another CA, or no trust given at all, is refused with a message
//! that says what to pass.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use infergate_gateway::server::{Gateway, Overrides};
use infergate_loadtests::load::{self, CallerSpec, LoadPlan, Pace};
use infergate_loadtests::{Client, Payload, PayloadKind, Target, TlsError, TlsOptions};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use tokio::net::TcpListener;

const METADATA: &str = r#"{"name":"m","versions":["3"],"platform":"onnxruntime_onnx",
  "inputs":[{"name":"x","datatype":"FP32","shape":[-1,4]}],"outputs":[{"name":"y","datatype":"FP32","shape":[-1,4]}]}"#;

/// A KServe V2 server over h2c: metadata, and version 3 answering every inference.
async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (sock, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let infer = req.uri().path().ends_with("/infer");
                    req.into_body().collect().await.unwrap();
                    let body = if infer {
                        r#"{"model_name":"m","model_version":"3","outputs":[]}"#
                    } else {
                        METADATA
                    };
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                });
                let _ = Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(sock), svc)
                    .await;
            });
        }
    });
    addr
}

/// Writes a CA (`{name}-ca.pem`) and, when `server` is set, a server certificate for 127.0.0.1 and localhost
/// signed by it (`server.pem`, `server.key`) into `dir`.
fn pki(dir: &Path, name: &str, server: bool) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join(format!("{name}-ca.pem")), ca_cert.pem()).unwrap();
    if server {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        let key = KeyPair::generate().unwrap();
        let cert = params
            .signed_by(&key, &Issuer::from_params(&ca, &ca_key))
            .unwrap();
        std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    }
}

async fn tls_gateway(dir: &Path, upstream: SocketAddr) -> std::sync::Arc<Gateway> {
    let yaml = format!(
        r#"
listeners:
  data:
    tls: {{ cert: server.pem, key: server.key }}
upstreams:
  - name: up
    endpoints: ["{upstream}"]
    protocol: h2c
routes:
  - name: all
    destinations: [{{ upstream: up }}]
"#
    );
    Gateway::start(
        &yaml,
        &dir.join("routes.yaml"),
        Overrides {
            data: Some("127.0.0.1:0".parse().unwrap()),
            admin: Some("127.0.0.1:0".parse().unwrap()),
            workers: None,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("test config invalid:\n{e}"))
}

fn plan(requests: u64) -> LoadPlan {
    LoadPlan {
        callers: vec![CallerSpec {
            name: "c".into(),
            pace: Pace::Closed { concurrency: 4 },
            models: Vec::new(),
        }],
        warmup: Duration::ZERO,
        duration: None,
        requests: Some(requests),
        interval: Duration::from_millis(100),
        max_in_flight: 64,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_load_speaks_h2_over_tls_to_the_gateways_tls_listener() {
    let dir = tempfile::tempdir().unwrap();
    pki(dir.path(), "right", true);
    pki(dir.path(), "other", false);
    let gw = tls_gateway(dir.path(), upstream().await).await;
    let target = Target { addr: gw.data_addr() };
    let timeout = Duration::from_secs(5);

    for tls in [
        TlsOptions {
            ca: Some(dir.path().join("right-ca.pem")),
            ..Default::default()
        },
        TlsOptions {
            ca: Some(dir.path().join("right-ca.pem")),
            server_name: Some("localhost".into()),
            ..Default::default()
        },
        TlsOptions {
            insecure: true,
            ..Default::default()
        },
    ] {
        let client = Client::with_tls(target, timeout, &tls).unwrap();
        let meta = client.metadata("m").await.unwrap();
        let payload = Payload::from_metadata(&meta, 1, PayloadKind::Json).unwrap();
        let r = load::run(client, payload, &plan(40), tokio::time::Instant::now(), false).await;
        let s = r.callers["c"].summary(r.elapsed);
        assert_eq!((s.requests, s.ok), (40, 40), "{tls:?}: {:?}", s.errors);
        assert_eq!(s.version_share("3"), 1.0, "{tls:?}");
    }

    // A CA that did not sign the gateway's certificate: the handshake is refused, and said to be.
    let stranger = TlsOptions {
        ca: Some(dir.path().join("other-ca.pem")),
        ..Default::default()
    };
    let client = Client::with_tls(target, timeout, &stranger).unwrap();
    let err = client.metadata("m").await.err().unwrap().to_string();
    assert!(
        err.contains("TLS handshake") && err.contains("certificate"),
        "{err}"
    );
    let payload =
        Payload::from_metadata(&serde_json::from_str(METADATA).unwrap(), 1, PayloadKind::Json).unwrap();
    let r = load::run(client, payload, &plan(8), tokio::time::Instant::now(), false).await;
    let s = r.callers["c"].summary(r.elapsed);
    assert_eq!(s.errors.get("connect").copied(), Some(8), "{:?}", s.errors);

    // A name the certificate does not carry.
    let wrong_name = TlsOptions {
        ca: Some(dir.path().join("right-ca.pem")),
        server_name: Some("elsewhere.example".into()),
        ..Default::default()
    };
    let err = Client::with_tls(target, timeout, &wrong_name)
        .unwrap()
        .metadata("m")
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("certificate"), "{err}");

    // No way to check the server: refused before any connection, naming the flags.
    let none = Client::with_tls(target, timeout, &TlsOptions::default());
    assert!(matches!(none, Err(TlsError::NoTrust)));
    assert!(
        TlsError::NoTrust.to_string().contains("--ca FILE")
            && TlsError::NoTrust.to_string().contains("--insecure")
    );
    let missing = TlsOptions {
        ca: Some(dir.path().join("absent.pem")),
        ..Default::default()
    };
    let err = Client::with_tls(target, timeout, &missing)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("absent.pem"), "{err}");
}
