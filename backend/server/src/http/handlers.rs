//! What each REST endpoint does: decode, call the service, encode.

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use infergate_protocol::rest::{self, ContentEncoding, DecodedInfer, INFER_HEADER_CONTENT_LENGTH};
use infergate_protocol::{InferenceService, ModelStatisticsResponse, ServeError};

use super::State;
use super::body::{BodySlot, ChunksBody, read_body};
use super::error::HttpError;
use super::router::{ModelAction, Route};

/// Serves one routed request.
pub(crate) async fn dispatch<S: InferenceService>(
    state: &State<S>,
    route: Route,
    parts: &Parts,
    body: &mut BodySlot,
) -> Result<Response<ChunksBody>, HttpError> {
    let svc = &state.service;
    match route {
        Route::Live => {
            let live = svc.live();
            Ok(json(
                if live {
                    StatusCode::OK
                } else {
                    StatusCode::BAD_REQUEST
                },
                rest::live_body(live),
            ))
        }
        Route::Ready => {
            let ready = svc.ready();
            Ok(json(
                if ready {
                    StatusCode::OK
                } else {
                    StatusCode::BAD_REQUEST
                },
                rest::ready_body(ready),
            ))
        }
        Route::ServerMetadata => Ok(json(StatusCode::OK, to_json(&svc.server_metadata())?)),
        Route::AllStats => {
            let model_stats = svc.model_statistics(None, None)?;
            Ok(json(
                StatusCode::OK,
                to_json(&ModelStatisticsResponse { model_stats })?,
            ))
        }
        Route::Model {
            name,
            version,
            action,
        } => match action {
            ModelAction::Metadata => Ok(json(
                StatusCode::OK,
                to_json(&svc.model_metadata(&name, version)?)?,
            )),
            ModelAction::Ready => {
                if svc.model_ready(&name, version) {
                    Ok(json(StatusCode::OK, rest::ready_body(true)))
                } else {
                    // 503 (not Triton's 400) so the kserve SDK's is_model_ready returns False instead of
                    // raising; tritonclient only checks for 200. The body names the model for humans.
                    let what = match version {
                        Some(v) => format!("model '{name}' version {v}"),
                        None => format!("model '{name}'"),
                    };
                    let body = serde_json::json!({ "ready": false, "error": format!("{what} is not ready") });
                    Ok(json(StatusCode::SERVICE_UNAVAILABLE, to_json(&body)?))
                }
            }
            ModelAction::Config => Ok(json(StatusCode::OK, to_json(&svc.model_config(&name, version)?)?)),
            ModelAction::Stats => {
                let model_stats = svc.model_statistics(Some(&name), version)?;
                Ok(json(
                    StatusCode::OK,
                    to_json(&ModelStatisticsResponse { model_stats })?,
                ))
            }
            ModelAction::Infer => infer(state, &name, version, parts, body).await,
        },
        Route::RepositoryIndex => {
            let body = request_body(state, parts, body).await?;
            let ready_only = rest::decode_index_request(&body)?;
            Ok(json(StatusCode::OK, to_json(&svc.repository_index(ready_only))?))
        }
        Route::Load(name) => {
            let body = request_body(state, parts, body).await?;
            let params = rest::decode_load_request(&body)?;
            svc.load_model(&name, params).await?;
            Ok(json(StatusCode::OK, Vec::new()))
        }
        Route::Unload(name) => {
            let body = request_body(state, parts, body).await?;
            let dependents = rest::decode_unload_request(&body)?;
            svc.unload_model(&name, dependents).await?;
            Ok(json(StatusCode::OK, Vec::new()))
        }
    }
}

async fn infer<S: InferenceService>(
    state: &State<S>,
    name: &str,
    version: Option<u64>,
    parts: &Parts,
    body: &mut BodySlot,
) -> Result<Response<ChunksBody>, HttpError> {
    let answer_encoding = rest::response_encoding(header_str(&parts.headers, header::ACCEPT_ENCODING));
    let header_value = parts
        .headers
        .get(INFER_HEADER_CONTENT_LENGTH)
        .map(|v| v.as_bytes());
    let body = request_body(state, parts, body).await?;
    let header_length = rest::parse_header_length(header_value, body.len())?;
    let (request, format) = match rest::decode_infer_request(name, version, body, header_length)? {
        DecodedInfer::Request(r, f) => (r, f),
        DecodedInfer::Raw(raw) => {
            let metadata = state.service.model_metadata(name, version)?;
            rest::raw_infer_request(version, &metadata, raw)?
        }
    };
    let response = state.service.infer(request).await?;
    let encoded = rest::encode_infer_response(&response, &format)?;
    let content_type = if encoded.has_binary {
        "application/octet-stream"
    } else {
        "application/json"
    };
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type);
    if encoded.has_binary {
        builder = builder.header(INFER_HEADER_CONTENT_LENGTH, encoded.json_length);
    }
    let body = if answer_encoding == ContentEncoding::Identity {
        ChunksBody::new(encoded.chunks)
    } else {
        builder = builder.header(header::CONTENT_ENCODING, answer_encoding.as_str());
        ChunksBody::one(rest::compress(answer_encoding, &encoded.chunks)?)
    };
    builder
        .body(body)
        .map_err(|e| ServeError::internal(format!("failed to build the response: {e}")).into())
}

/// Reads and (if compressed) decompresses a request body under the configured limits.
async fn request_body<S: InferenceService>(
    state: &State<S>,
    parts: &Parts,
    slot: &mut BodySlot,
) -> Result<Bytes, ServeError> {
    let encoding = rest::request_encoding(header_str(&parts.headers, header::CONTENT_ENCODING))?;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let limits = &state.limits;
    let Some(body) = slot.take() else {
        return Err(ServeError::internal("the request body was already read"));
    };
    let raw = read_body(body, declared, limits.max_body_bytes, limits.body_read_timeout).await?;
    if encoding == ContentEncoding::Identity {
        return Ok(raw);
    }
    // Decompression is CPU work proportional to the (capped) output: keep it off the async workers.
    let max = limits.max_body_bytes;
    tokio::task::spawn_blocking(move || rest::decompress(encoding, raw, max))
        .await
        .map_err(|e| ServeError::internal(format!("decompression task failed: {e}")))?
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, ServeError> {
    serde_json::to_vec(value).map_err(|e| ServeError::internal(format!("failed to write JSON: {e}")))
}

fn json(status: StatusCode, body: Vec<u8>) -> Response<ChunksBody> {
    let mut r = Response::new(ChunksBody::one(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
