//! What a KServe V2 server does, independent of transport: the front ends call this trait.

use std::future::Future;

use crate::error::ServeError;
use crate::infer::{InferRequest, InferResponse};
use crate::metadata::{ModelMetadata, ServerMetadata};
use crate::repository::{LoadParameters, RepositoryIndexEntry};
use crate::statistics::ModelStatistics;

/// The operations of the KServe V2 protocol with Triton's extensions, as the REST and gRPC front ends
/// call them. The backend's `ServerCore` implements it; front ends are generic over it so that they
/// stay transport code only.
///
/// Versions are `None` for "the server's choice" (the highest ready version).
pub trait InferenceService: Clone + Send + Sync + 'static {
    /// The process is up (liveness).
    fn live(&self) -> bool;

    /// The server can take inference requests (readiness).
    fn ready(&self) -> bool;

    /// Name, version and the extensions that work.
    fn server_metadata(&self) -> ServerMetadata;

    /// Whether this model (version) is ready; `false` for unknown models.
    fn model_ready(&self, name: &str, version: Option<u64>) -> bool;

    /// Metadata of a model (version); unknown model → [`ServeError::unknown_model`].
    fn model_metadata(&self, name: &str, version: Option<u64>) -> Result<ModelMetadata, ServeError>;

    /// The model configuration in Triton's JSON form (what `/v2/models/{m}/config` returns:
    /// proto field names, default fields printed, 64-bit integers as numbers).
    fn model_config(&self, name: &str, version: Option<u64>) -> Result<serde_json::Value, ServeError>;

    /// Statistics of every version of every model (`name` = `None`), of one model, or of one version.
    fn model_statistics(
        &self,
        name: Option<&str>,
        version: Option<u64>,
    ) -> Result<Vec<ModelStatistics>, ServeError>;

    /// Runs one inference request.
    fn infer(&self, request: InferRequest) -> impl Future<Output = Result<InferResponse, ServeError>> + Send;

    /// The repository's models (only ready ones when `ready_only`).
    fn repository_index(&self, ready_only: bool) -> Vec<RepositoryIndexEntry>;

    /// Loads (or reloads) a model, optionally with an overriding config and files; completes when the
    /// model is ready or failed.
    fn load_model(
        &self,
        name: &str,
        parameters: LoadParameters,
    ) -> impl Future<Output = Result<(), ServeError>> + Send;

    /// Unloads a model (and the models that depend on it when `unload_dependents`).
    fn unload_model(
        &self,
        name: &str,
        unload_dependents: bool,
    ) -> impl Future<Output = Result<(), ServeError>> + Send;
}
