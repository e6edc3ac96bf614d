//! `grpc.health.v1.Health`: `SERVING` while the server is ready, for Kubernetes gRPC probes and load
//! balancers.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use infergate_protocol::InferenceService;
use infergate_protocol::grpc::SERVICE_NAME;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_server::Health;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// How often `Watch` re-reads readiness.
const WATCH_PERIOD: Duration = Duration::from_secs(1);

/// The health service: the overall server (`""`) and `inference.GRPCInferenceService` are `SERVING`
/// when the server is ready, `NOT_SERVING` otherwise; other names are unknown.
pub struct HealthService<S> {
    service: Arc<S>,
}

impl<S> HealthService<S> {
    /// Health of `service`.
    pub fn new(service: Arc<S>) -> Self {
        HealthService { service }
    }
}

impl<S: InferenceService> HealthService<S> {
    fn status(&self, name: &str) -> Option<ServingStatus> {
        (name.is_empty() || name == SERVICE_NAME).then(|| {
            if self.service.ready() {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            }
        })
    }
}

#[tonic::async_trait]
impl<S: InferenceService> Health for HealthService<S> {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let name = request.into_inner().service;
        match self.status(&name) {
            Some(s) => Ok(Response::new(HealthCheckResponse { status: s as i32 })),
            None => Err(Status::not_found(format!(
                "unknown service '{name}' (known: '' and '{SERVICE_NAME}')"
            ))),
        }
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let name = request.into_inner().service;
        let this = HealthService {
            service: self.service.clone(),
        };
        let stream = futures::stream::unfold((this, None::<i32>), move |(this, last)| {
            let name = name.clone();
            async move {
                loop {
                    let now = this.status(&name).unwrap_or(ServingStatus::ServiceUnknown) as i32;
                    if last != Some(now) {
                        return Some((Ok(HealthCheckResponse { status: now }), (this, Some(now))));
                    }
                    tokio::time::sleep(WATCH_PERIOD).await;
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}
