//! Bodies of the repository extension: `POST /v2/repository/index`, `.../models/{m}/load|unload`.

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::error::ServeError;
use crate::repository::LoadParameters;

/// Reads the `ready` flag of an index request (an empty body means `false`).
pub fn decode_index_request(body: &[u8]) -> Result<bool, ServeError> {
    let Some(obj) = json_object(body, "repository index")? else {
        return Ok(false);
    };
    match obj.get("ready") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ServeError::invalid_argument(
            "Invalid value for 'ready': expected a boolean",
        )),
    }
}

/// Reads a load request: `{"parameters": {"config": "<JSON config>", "file:<path>": "<base64>"}}`.
pub fn decode_load_request(body: &[u8]) -> Result<LoadParameters, ServeError> {
    let mut out = LoadParameters::default();
    let Some(mut obj) = json_object(body, "load model")? else {
        return Ok(out);
    };
    let params = match obj.remove("parameters") {
        None | Some(Value::Null) => return Ok(out),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return Err(ServeError::invalid_argument(
                "'parameters' of a load request must be an object",
            ));
        }
    };
    for (key, value) in params {
        let Value::String(s) = value else {
            return Err(ServeError::invalid_argument(format!(
                "load parameter '{key}' must be a string (the config as JSON text, or a file as base64)"
            )));
        };
        if key == "config" {
            out.config = Some(s);
        } else if let Some(path) = key.strip_prefix("file:") {
            out.files
                .insert(path.to_owned(), decode_file(&key, s.as_bytes())?);
        } else {
            return Err(ServeError::invalid_argument(format!(
                "unknown load parameter '{key}' (expected 'config' or 'file:<path in the model folder>')"
            )));
        }
    }
    check_files(&out)?;
    Ok(out)
}

/// Reads an unload request's `unload_dependents` flag (an empty body means `false`).
pub fn decode_unload_request(body: &[u8]) -> Result<bool, ServeError> {
    let Some(obj) = json_object(body, "unload model")? else {
        return Ok(false);
    };
    let Some(params) = obj.get("parameters") else {
        return Ok(false);
    };
    match params.get("unload_dependents") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ServeError::invalid_argument(
            "Unable to parse 'unload_dependents': expected a boolean",
        )),
    }
}

/// Decodes a base64 model file given in a load request.
pub(crate) fn decode_file(key: &str, b64: &[u8]) -> Result<Vec<u8>, ServeError> {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| ServeError::invalid_argument(format!("load parameter '{key}' is not valid base64: {e}")))
}

/// Files must stay inside the model folder: relative paths without `..`.
pub(crate) fn check_files(p: &LoadParameters) -> Result<(), ServeError> {
    for path in p.files.keys() {
        let bad = path.is_empty()
            || path.starts_with('/')
            || path.contains('\\')
            || path.split('/').any(|part| part == ".." || part.is_empty());
        if bad {
            return Err(ServeError::invalid_argument(format!(
                "load parameter 'file:{path}': file paths are relative to the model folder (e.g. \
                 'file:1/model.onnx') and may not contain '..' or empty parts"
            )));
        }
    }
    if !p.files.is_empty() && p.config.is_none() {
        return Err(ServeError::invalid_argument(
            "a load request with 'file:' parameters must also give 'config' (as Triton requires)",
        ));
    }
    Ok(())
}

fn json_object(body: &[u8], what: &str) -> Result<Option<Map<String, Value>>, ServeError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(Some(o)),
        Ok(_) => Err(ServeError::invalid_argument(format!(
            "the {what} request body must be a JSON object"
        ))),
        Err(e) => Err(ServeError::invalid_argument(format!(
            "malformed {what} request JSON: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_ready_flag() {
        assert!(!decode_index_request(b"").unwrap());
        assert!(decode_index_request(br#"{"ready":true}"#).unwrap());
        assert!(decode_index_request(br#"{"ready":"yes"}"#).is_err());
        assert!(decode_index_request(b"{").is_err());
    }

    #[test]
    fn load_with_config_and_files() {
        let p = decode_load_request(
            br#"{"parameters":{"config":"{\"max_batch_size\":4}","file:1/model.onnx":"AAEC"}}"#,
        )
        .unwrap();
        assert_eq!(p.config.as_deref(), Some(r#"{"max_batch_size":4}"#));
        assert_eq!(p.files["1/model.onnx"], vec![0, 1, 2]);
        assert_eq!(decode_load_request(b"").unwrap(), LoadParameters::default());
    }

    #[test]
    fn load_refuses_bad_parameters() {
        let e = decode_load_request(br#"{"parameters":{"config":"{}","file:../x":"AA=="}}"#).unwrap_err();
        assert!(e.message.contains("'..'"), "{}", e.message);
        let e = decode_load_request(br#"{"parameters":{"config":"{}","file:1/m":"%%%"}}"#).unwrap_err();
        assert!(e.message.contains("base64"), "{}", e.message);
        let e = decode_load_request(br#"{"parameters":{"colour":"red"}}"#).unwrap_err();
        assert!(
            e.message.contains("unknown load parameter 'colour'"),
            "{}",
            e.message
        );
        let e = decode_load_request(br#"{"parameters":{"file:1/m":"AA=="}}"#).unwrap_err();
        assert!(e.message.contains("must also give 'config'"), "{}", e.message);
    }

    #[test]
    fn unload_dependents_flag() {
        assert!(!decode_unload_request(b"").unwrap());
        assert!(decode_unload_request(br#"{"parameters":{"unload_dependents":true}}"#).unwrap());
        assert!(decode_unload_request(br#"{"parameters":{"unload_dependents":1}}"#).is_err());
    }
}
