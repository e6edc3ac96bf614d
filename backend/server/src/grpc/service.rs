//! `inference.GRPCInferenceService`: each call decodes, calls the [`InferenceService`], encodes.

use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use infergate_protocol::grpc::{self, pb};
use infergate_protocol::{InferenceService, ServeError, parse_model_version};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{GrpcLimits, message_limit};

/// The gRPC inference service over an [`InferenceService`].
pub struct Frontend<S> {
    service: S,
    limits: GrpcLimits,
    in_flight: Arc<Semaphore>,
}

impl<S: InferenceService> Frontend<S> {
    /// A front end for `service` under `limits`.
    pub fn new(service: S, limits: GrpcLimits) -> Self {
        let in_flight = Arc::new(Semaphore::new(limits.max_concurrent_requests));
        Frontend {
            service,
            limits,
            in_flight,
        }
    }

    fn permit(&self) -> Result<OwnedSemaphorePermit, ServeError> {
        busy_permit(&self.in_flight, self.limits.max_concurrent_requests)
    }
}

fn busy_permit(sem: &Arc<Semaphore>, limit: usize) -> Result<OwnedSemaphorePermit, ServeError> {
    sem.clone().try_acquire_owned().map_err(|_| {
        ServeError::unavailable(format!(
            "the server is busy: {limit} calls are in progress, its limit; retry shortly"
        ))
    })
}

/// The one place where results become gRPC replies.
fn reply<T>(result: Result<T, ServeError>) -> Result<Response<T>, Status> {
    match result {
        Ok(v) => Ok(Response::new(v)),
        Err(e) => {
            tracing::debug!(code = ?e.code, error = %e.message, "gRPC call failed");
            Err(e.into())
        }
    }
}

fn no_repository_name(name: &str) -> Result<(), ServeError> {
    if name.is_empty() {
        Ok(())
    } else {
        Err(ServeError::unsupported(
            "'repository_name' specification is not supported; leave it empty",
        ))
    }
}

/// Runs one request of a stream; failures become `error_message` (the stream goes on).
async fn stream_one<S: InferenceService>(
    service: S,
    request: pb::ModelInferRequest,
    permit: Result<OwnedSemaphorePermit, ServeError>,
) -> pb::ModelStreamInferResponse {
    let echo = pb::ModelInferResponse {
        model_name: request.model_name.clone(),
        model_version: request.model_version.clone(),
        id: request.id.clone(),
        ..pb::ModelInferResponse::default()
    };
    let result = async {
        let _permit = permit?;
        let request = grpc::infer_request_from_proto(request)?;
        service.infer(request).await
    }
    .await;
    match result {
        Ok(r) => pb::ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(grpc::infer_response_to_proto(r)),
        },
        Err(e) => pb::ModelStreamInferResponse {
            error_message: e.message,
            infer_response: Some(echo),
        },
    }
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<pb::ModelStreamInferResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<S: InferenceService> pb::grpc_inference_service_server::GrpcInferenceService for Frontend<S> {
    async fn server_live(
        &self,
        _r: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        reply(Ok(pb::ServerLiveResponse {
            live: self.service.live(),
        }))
    }

    async fn server_ready(
        &self,
        _r: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        reply(Ok(pb::ServerReadyResponse {
            ready: self.service.ready(),
        }))
    }

    async fn model_ready(
        &self,
        r: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let r = r.into_inner();
        reply(parse_model_version(&r.version).map(|v| pb::ModelReadyResponse {
            ready: self.service.model_ready(&r.name, v),
        }))
    }

    async fn server_metadata(
        &self,
        _r: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        reply(Ok(grpc::server_metadata_to_proto(self.service.server_metadata())))
    }

    async fn model_metadata(
        &self,
        r: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let r = r.into_inner();
        reply(
            async {
                let _permit = self.permit()?;
                let version = parse_model_version(&r.version)?;
                self.service
                    .model_metadata(&r.name, version)
                    .map(grpc::metadata_to_proto)
            }
            .await,
        )
    }

    async fn model_infer(
        &self,
        r: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        reply(
            async {
                let _permit = self.permit()?;
                let request = grpc::infer_request_from_proto(r.into_inner())?;
                self.service
                    .infer(request)
                    .await
                    .map(grpc::infer_response_to_proto)
            }
            .await,
        )
    }

    type ModelStreamInferStream = ResponseStream;

    async fn model_stream_infer(
        &self,
        r: Request<Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<Self::ModelStreamInferStream>, Status> {
        let mut inbound = r.into_inner();
        let max = self.limits.max_stream_in_flight.max(1);
        let (tx, rx) = mpsc::channel(max);
        let service = self.service.clone();
        let sem = self.in_flight.clone();
        let limit = self.limits.max_concurrent_requests;
        tokio::spawn(async move {
            let mut running = FuturesUnordered::new();
            let mut reading = true;
            // A failed client stream (a message over the size limit, a protocol error) ends the call
            // with its status once the requests already read have answered.
            let mut failed = None;
            loop {
                tokio::select! {
                    next = inbound.message(), if reading && running.len() < max => match next {
                        Ok(Some(request)) => running.push(stream_one(service.clone(), request, busy_permit(&sem, limit))),
                        Ok(None) => reading = false,
                        Err(status) => {
                            tracing::debug!(%status, "ModelStreamInfer: the client's stream failed");
                            failed = Some(message_limit::rewrite(&status).unwrap_or(status));
                            reading = false;
                        }
                    },
                    Some(response) = running.next(), if !running.is_empty() => {
                        if tx.send(Ok(response)).await.is_err() {
                            // The client went away: dropping `running` cancels what is left.
                            break;
                        }
                    },
                    else => break,
                }
            }
            if let Some(status) = failed {
                // The client may be gone already; then nobody is left to tell.
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn model_config(
        &self,
        r: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let r = r.into_inner();
        reply(
            async {
                let _permit = self.permit()?;
                let version = parse_model_version(&r.version)?;
                let json = self.service.model_config(&r.name, version)?;
                Ok(pb::ModelConfigResponse {
                    config: Some(grpc::model_config_to_proto(&json)?),
                })
            }
            .await,
        )
    }

    async fn model_statistics(
        &self,
        r: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        let r = r.into_inner();
        reply(
            async {
                let _permit = self.permit()?;
                let version = parse_model_version(&r.version)?;
                let name = (!r.name.is_empty()).then_some(r.name.as_str());
                self.service
                    .model_statistics(name, version)
                    .map(grpc::statistics_to_proto)
            }
            .await,
        )
    }

    async fn repository_index(
        &self,
        r: Request<pb::RepositoryIndexRequest>,
    ) -> Result<Response<pb::RepositoryIndexResponse>, Status> {
        let r = r.into_inner();
        reply(
            async {
                let _permit = self.permit()?;
                no_repository_name(&r.repository_name)?;
                Ok(grpc::index_to_proto(self.service.repository_index(r.ready)))
            }
            .await,
        )
    }

    async fn repository_model_load(
        &self,
        r: Request<pb::RepositoryModelLoadRequest>,
    ) -> Result<Response<pb::RepositoryModelLoadResponse>, Status> {
        let r = r.into_inner();
        reply(
            async {
                let _permit = self.permit()?;
                no_repository_name(&r.repository_name)?;
                let params = grpc::load_parameters_from_proto(r.parameters)?;
                self.service.load_model(&r.model_name, params).await?;
                Ok(pb::RepositoryModelLoadResponse {})
            }
            .await,
        )
    }

    async fn repository_model_unload(
        &self,
        r: Request<pb::RepositoryModelUnloadRequest>,
    ) -> Result<Response<pb::RepositoryModelUnloadResponse>, Status> {
        let r = r.into_inner();
        reply(
            async {
                let _permit = self.permit()?;
                no_repository_name(&r.repository_name)?;
                let dependents = grpc::unload_dependents_from_proto(&r.parameters)?;
                self.service.unload_model(&r.model_name, dependents).await?;
                Ok(pb::RepositoryModelUnloadResponse {})
            }
            .await,
        )
    }
}
