//! Which endpoint a request is for: Triton's paths, exactly (case-sensitive, numeric versions).

use http::Method;
use infergate_protocol::{ServeError, parse_model_version};

use super::error::HttpError;

/// An endpoint of the REST API.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /v2/health/live`.
    Live,
    /// `GET /v2/health/ready`.
    Ready,
    /// `GET /v2`.
    ServerMetadata,
    /// `GET /v2/models/stats`: statistics of every model.
    AllStats,
    /// `/v2/models/{name}[/versions/{version}][/{action}]`.
    Model {
        name: String,
        version: Option<u64>,
        action: ModelAction,
    },
    /// `POST /v2/repository/index`.
    RepositoryIndex,
    /// `POST /v2/repository/models/{name}/load`.
    Load(String),
    /// `POST /v2/repository/models/{name}/unload`.
    Unload(String),
}

/// What is asked of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModelAction {
    Metadata,
    Ready,
    Config,
    Stats,
    Infer,
}

/// Finds the route for a method and path, or the error the client gets (404 for unknown paths, 405 for
/// wrong methods, 501 for Triton endpoints this server does not have).
pub(crate) fn route(method: &Method, path: &str) -> Result<Route, HttpError> {
    let parts: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let get = |r: Route| {
        if method == Method::GET {
            Ok(r)
        } else {
            Err(HttpError::MethodNotAllowed)
        }
    };
    let post = |r: Route| {
        if method == Method::POST {
            Ok(r)
        } else {
            Err(HttpError::MethodNotAllowed)
        }
    };
    match parts.as_slice() {
        ["v2"] => get(Route::ServerMetadata),
        ["v2", "health", "live"] => get(Route::Live),
        ["v2", "health", "ready"] => get(Route::Ready),
        ["v2", "models", "stats"] => get(Route::AllStats),
        ["v2", "models", name, rest @ ..] if !name.is_empty() => {
            let name = decode(name)?;
            let (version, rest) = match rest {
                ["versions", v, rest @ ..] => (parse_model_version(v)?, rest),
                _ => (None, rest),
            };
            let model = |action| Route::Model { name: name.clone(), version, action };
            match rest {
                [] => get(model(ModelAction::Metadata)),
                ["ready"] => get(model(ModelAction::Ready)),
                ["config"] => get(model(ModelAction::Config)),
                ["stats"] => get(model(ModelAction::Stats)),
                ["infer"] => post(model(ModelAction::Infer)),
                ["generate" | "generate_stream"] => Err(unsupported("the generate extension")),
                ["trace", "setting"] => Err(unsupported("the trace extension")),
                _ => Err(not_found()),
            }
        }
        ["v2", "repository", "index"] => post(Route::RepositoryIndex),
        ["v2", "repository", "models", name, "load"] if !name.is_empty() => post(Route::Load(decode(name)?)),
        ["v2", "repository", "models", name, "unload"] if !name.is_empty() => post(Route::Unload(decode(name)?)),
        ["v2", "repository", _repo, "index" | "models", ..] => Err(ServeError::unsupported(
            "'repository_name' specification is not supported; use /v2/repository/index and /v2/repository/models/{m}/...",
        )
        .into()),
        ["v2", "systemsharedmemory" | "cudasharedmemory", ..] => Err(unsupported("shared memory")),
        ["v2", "trace", "setting"] => Err(unsupported("the trace extension")),
        ["v2", "logging"] => Err(unsupported("the logging extension")),
        _ => Err(not_found()),
    }
}

fn not_found() -> HttpError {
    ServeError::not_found("Not Found").into()
}

fn unsupported(what: &str) -> HttpError {
    ServeError::unsupported(format!("{what} is not supported by this server")).into()
}

/// Percent-decodes a path segment (clients quote model names).
fn decode(segment: &str) -> Result<String, HttpError> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
                return Err(ServeError::invalid_argument(format!(
                    "bad percent-escape in path segment '{segment}'"
                ))
                .into());
            };
            out.push(v);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        ServeError::invalid_argument(format!("path segment '{segment}' is not UTF-8 once decoded")).into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(m: Method, p: &str) -> Route {
        route(&m, p).unwrap_or_else(|e| panic!("{p}: {e:?}"))
    }

    fn err_status(m: Method, p: &str) -> u16 {
        match route(&m, p) {
            Ok(r) => panic!("{p} routed to {r:?}"),
            Err(HttpError::MethodNotAllowed) => 405,
            Err(HttpError::Serve(e)) => e.http_status().as_u16(),
        }
    }

    #[test]
    fn tritons_paths() {
        assert_eq!(ok(Method::GET, "/v2"), Route::ServerMetadata);
        assert_eq!(ok(Method::GET, "/v2/health/live"), Route::Live);
        assert_eq!(ok(Method::GET, "/v2/health/ready"), Route::Ready);
        assert_eq!(ok(Method::GET, "/v2/models/stats"), Route::AllStats);
        assert_eq!(
            ok(Method::GET, "/v2/models/simple"),
            Route::Model {
                name: "simple".into(),
                version: None,
                action: ModelAction::Metadata
            }
        );
        assert_eq!(
            ok(Method::POST, "/v2/models/a%20b/versions/2/infer"),
            Route::Model {
                name: "a b".into(),
                version: Some(2),
                action: ModelAction::Infer
            }
        );
        assert_eq!(
            ok(Method::GET, "/v2/models/m/versions/1/stats"),
            Route::Model {
                name: "m".into(),
                version: Some(1),
                action: ModelAction::Stats
            }
        );
        assert_eq!(ok(Method::POST, "/v2/repository/index"), Route::RepositoryIndex);
        assert_eq!(
            ok(Method::POST, "/v2/repository/models/m/load"),
            Route::Load("m".into())
        );
        assert_eq!(
            ok(Method::POST, "/v2/repository/models/m/unload"),
            Route::Unload("m".into())
        );
    }

    #[test]
    fn wrong_paths_methods_and_versions() {
        assert_eq!(err_status(Method::POST, "/v2/health/live"), 405);
        assert_eq!(err_status(Method::GET, "/v2/models/m/infer"), 405);
        assert_eq!(err_status(Method::GET, "/v2/models/m/versions/latest"), 400);
        assert_eq!(err_status(Method::GET, "/V2/models/m"), 404);
        assert_eq!(err_status(Method::GET, "/v2/models/m/nope"), 404);
        assert_eq!(err_status(Method::GET, "/v1/models/m"), 404);
        assert_eq!(err_status(Method::GET, "/v2/systemsharedmemory/status"), 501);
        assert_eq!(err_status(Method::POST, "/v2/repository/other/index"), 501);
        assert_eq!(err_status(Method::GET, "/v2/models/%zz"), 400);
    }
}
