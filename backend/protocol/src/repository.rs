//! The model repository extension: index entries and load parameters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The lifecycle state of a model version as the repository index reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ModelState {
    /// Loaded and serving.
    Ready,
    /// Not serving: failed to load, or unloaded (`reason` says which).
    Unavailable,
    /// Being loaded.
    Loading,
    /// Being unloaded (draining in-flight requests).
    Unloading,
}

impl ModelState {
    /// The protocol spelling (`"READY"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Ready => "READY",
            ModelState::Unavailable => "UNAVAILABLE",
            ModelState::Loading => "LOADING",
            ModelState::Unloading => "UNLOADING",
        }
    }
}

/// One entry of `POST /v2/repository/index` / `RepositoryIndex`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepositoryIndexEntry {
    /// Model name (its folder name).
    pub name: String,
    /// Version, when the entry is about one version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// State, when the model was ever asked to load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ModelState>,
    /// Why the model is not ready (e.g. the load error); empty when ready.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// What a load request may carry (`POST /v2/repository/models/{m}/load` `parameters`,
/// `RepositoryModelLoad` parameters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadParameters {
    /// A model configuration to use instead of the one in the repository (`"config"`: Triton's config in
    /// JSON).
    pub config: Option<String>,
    /// Model files to use instead of the repository's, by path relative to the model folder
    /// (`"file:1/model.onnx"` on the wire is `"1/model.onnx"` here), already base64-decoded.
    pub files: BTreeMap<String, Vec<u8>>,
}
