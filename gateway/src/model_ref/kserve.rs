//! The KServe V2 model reference carried by a REST path: `/v2/models/{name}[/versions/{v}][/...]`.

/// A model named by a request: REST path or gRPC `ModelInferRequest` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelRef<'a> {
    /// The model name.
    pub name: &'a str,
    /// The version, when the request names one.
    pub version: Option<&'a str>,
}

/// The parts of a REST model path, as byte offsets into the path, so that a rewrite can splice in
/// a version without re-parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestModelPath<'a> {
    /// Name and version.
    pub model: ModelRef<'a>,
    /// Offset just past the name (where `/versions/..` or the rest of the path begins).
    pub after_name: usize,
    /// Offset just past the version segment (equal to `after_name` when there is none).
    pub after_version: usize,
}

const PREFIX: &str = "/v2/models/";

/// Parses `/v2/models/{name}[/versions/{v}][/rest]` (query string allowed after it). Returns `None`
/// for other paths, for `/v2/models/stats` (the all-models statistics call) and for empty names.
pub fn parse_rest_model_path(path: &str) -> Option<RestModelPath<'_>> {
    let path = before_query(path);
    let rest = path.strip_prefix(PREFIX)?;
    let name_len = segment_len(rest);
    let name = &rest[..name_len];
    if name.is_empty() || (name == "stats" && name_len == rest.len()) {
        return None;
    }
    let after_name = PREFIX.len() + name_len;
    let tail = &path[after_name..];
    let mut version = None;
    let mut after_version = after_name;
    if let Some(v) = tail.strip_prefix("/versions/") {
        let v_len = segment_len(v);
        if v_len > 0 {
            version = Some(&v[..v_len]);
            after_version = after_name + "/versions/".len() + v_len;
        }
    }
    Some(RestModelPath {
        model: ModelRef { name, version },
        after_name,
        after_version,
    })
}

const REPOSITORY_PREFIX: &str = "/v2/repository/models/";

/// The model named by a repository call, `/v2/repository/models/{name}/load` or `.../unload` (query string
/// allowed after it), as written in the path. `None` for other paths and empty names.
pub fn parse_repository_model_path(path: &str) -> Option<ModelRef<'_>> {
    let path = before_query(path);
    let rest = path.strip_prefix(REPOSITORY_PREFIX)?;
    let (name, action) = rest.split_once('/')?;
    if name.is_empty() || !matches!(action, "load" | "unload") {
        return None;
    }
    Some(ModelRef { name, version: None })
}

/// `path` without its query string. These run on every request: byte searches (`memchr`) rather than `str`'s
/// char searches, which cost several times more on a short path.
fn before_query(path: &str) -> &str {
    memchr::memchr(b'?', path.as_bytes()).map_or(path, |q| &path[..q])
}

/// The length of the segment `rest` starts with (up to its first `/`).
fn segment_len(rest: &str) -> usize {
    memchr::memchr(b'/', rest.as_bytes()).unwrap_or(rest.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_model_paths_and_ignores_others() {
        let p = parse_rest_model_path("/v2/models/resnet/versions/3/infer?x=1").unwrap();
        assert_eq!(
            p.model,
            ModelRef {
                name: "resnet",
                version: Some("3")
            }
        );
        assert_eq!(p.after_name, "/v2/models/resnet".len());
        assert_eq!(p.after_version, "/v2/models/resnet/versions/3".len());
        let p = parse_rest_model_path("/v2/models/resnet/infer").unwrap();
        assert_eq!(
            p.model,
            ModelRef {
                name: "resnet",
                version: None
            }
        );
        assert_eq!(
            parse_rest_model_path("/v2/models/bert").unwrap().model.name,
            "bert"
        );
        assert_eq!(parse_rest_model_path("/v2/models/stats"), None);
        assert_eq!(parse_rest_model_path("/v2/models/"), None);
        assert_eq!(parse_rest_model_path("/v2/health/ready"), None);
    }

    #[test]
    fn repository_load_and_unload_name_their_model() {
        for action in ["load", "unload"] {
            let path = format!("/v2/repository/models/res%6Eet/{action}?x=1");
            assert_eq!(
                parse_repository_model_path(&path),
                Some(ModelRef {
                    name: "res%6Eet",
                    version: None
                })
            );
        }
        assert_eq!(parse_repository_model_path("/v2/repository/index"), None);
        assert_eq!(parse_repository_model_path("/v2/repository/models//load"), None);
        assert_eq!(
            parse_repository_model_path("/v2/repository/models/a/delete"),
            None
        );
        assert_eq!(parse_repository_model_path("/v2/repository/models/a"), None);
    }
}
