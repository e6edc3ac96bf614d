//! Why a model (or one of its versions) failed to load: a kind that the metrics count by, and the message
//! that the repository index and the logs carry.

use std::fmt;

/// The step a load failed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LoadFailureKind {
    /// A file or folder of the model could not be read (missing, unmounted, no permission).
    Unreadable,
    /// The integrity manifest is missing where required, or a file disagrees with it; or a file resolves
    /// outside the model folder.
    Integrity,
    /// The model file is not a model the engine can run (not ONNX, corrupt, unsupported).
    InvalidModel,
    /// The config is invalid or disagrees with the model.
    Config,
    /// The weights do not fit under `--model-memory-limit`.
    MemoryLimit,
    /// An execution instance could not be started (device, session).
    Instance,
    /// A warmup sample failed.
    Warmup,
}

impl LoadFailureKind {
    /// Every kind, in label order.
    pub const ALL: [LoadFailureKind; 7] = [
        LoadFailureKind::Unreadable,
        LoadFailureKind::Integrity,
        LoadFailureKind::InvalidModel,
        LoadFailureKind::Config,
        LoadFailureKind::MemoryLimit,
        LoadFailureKind::Instance,
        LoadFailureKind::Warmup,
    ];

    /// The `reason` label of `infergate_model_load_failures_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadFailureKind::Unreadable => "unreadable",
            LoadFailureKind::Integrity => "integrity",
            LoadFailureKind::InvalidModel => "invalid_model",
            LoadFailureKind::Config => "config",
            LoadFailureKind::MemoryLimit => "memory_limit",
            LoadFailureKind::Instance => "instance",
            LoadFailureKind::Warmup => "warmup",
        }
    }
}

/// One failure: its kind and a message that names the problem and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailure {
    /// The step.
    pub kind: LoadFailureKind,
    /// What went wrong.
    pub message: String,
}

impl LoadFailure {
    /// A mapper for `map_err`: `parse(..).map_err(LoadFailure::of(LoadFailureKind::InvalidModel))`.
    pub fn of(kind: LoadFailureKind) -> impl Fn(String) -> LoadFailure + Copy {
        move |message| LoadFailure { kind, message }
    }
}

impl fmt::Display for LoadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What one load of a model failed on: the model as a whole (`None`: its folder, config or auto-complete)
/// or some of its versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailures(pub Vec<(Option<u64>, LoadFailure)>);

impl From<LoadFailure> for LoadFailures {
    fn from(f: LoadFailure) -> Self {
        LoadFailures(vec![(None, f)])
    }
}

impl fmt::Display for LoadFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (version, failure)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match version {
                Some(v) => write!(f, "version {v}: {failure}")?,
                None => write!(f, "{failure}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_as_one_message_per_version() {
        let whole: LoadFailures = LoadFailure::of(LoadFailureKind::Config)("bad config".into()).into();
        assert_eq!(whole.to_string(), "bad config");
        let versions = LoadFailures(vec![
            (
                Some(2),
                LoadFailure::of(LoadFailureKind::Integrity)("sha256 mismatch".into()),
            ),
            (
                Some(3),
                LoadFailure::of(LoadFailureKind::InvalidModel)("not ONNX".into()),
            ),
        ]);
        assert_eq!(
            versions.to_string(),
            "version 2: sha256 mismatch; version 3: not ONNX"
        );
        let labels: Vec<&str> = LoadFailureKind::ALL.iter().map(|k| k.as_str()).collect();
        let mut sorted = labels.clone();
        sorted.dedup();
        assert_eq!(labels.len(), sorted.len(), "labels are distinct");
    }
}
