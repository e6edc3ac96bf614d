//! The engine's error type: one enum for every boundary of the crate, classified by [`ErrorKind`].

/// What class of failure an [`EngineError`] is, so callers map it to a status without string matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller's input (model file or request tensors) is wrong; retrying the same input fails again.
    InvalidInput,
    /// The model uses something this engine does not implement (an op, a dtype, an opset, a domain).
    Unsupported,
    /// A device or host limit was exceeded (tensor larger than a binding, out of memory).
    ResourceExhausted,
    /// The GPU device was lost; the session must be recreated.
    DeviceLost,
    /// A bug or an unexpected state inside the engine.
    Internal,
}

/// An error from loading or running a model. The message names the node/input and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Bad model file or request input.
    #[error("{0}")]
    InvalidInput(String),
    /// Unsupported feature; the message lists every offending item.
    #[error("{0}")]
    Unsupported(String),
    /// A size limit was exceeded.
    #[error("{0}")]
    ResourceExhausted(String),
    /// The device was lost.
    #[error("{0}")]
    DeviceLost(String),
    /// Internal failure.
    #[error("internal engine error: {0}")]
    Internal(String),
    /// Reading a model or external-data file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being read.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl EngineError {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::InvalidInput(_) => ErrorKind::InvalidInput,
            EngineError::Unsupported(_) => ErrorKind::Unsupported,
            EngineError::ResourceExhausted(_) => ErrorKind::ResourceExhausted,
            EngineError::DeviceLost(_) => ErrorKind::DeviceLost,
            EngineError::Internal(_) => ErrorKind::Internal,
            EngineError::Io { source, .. } => match source.kind() {
                std::io::ErrorKind::OutOfMemory => ErrorKind::ResourceExhausted,
                _ => ErrorKind::InvalidInput,
            },
        }
    }

    /// Shorthand for [`EngineError::InvalidInput`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        EngineError::InvalidInput(msg.into())
    }

    /// Shorthand for [`EngineError::Unsupported`].
    pub fn unsupported(msg: impl Into<String>) -> Self {
        EngineError::Unsupported(msg.into())
    }

    /// Shorthand for [`EngineError::Internal`].
    pub fn internal(msg: impl Into<String>) -> Self {
        EngineError::Internal(msg.into())
    }

    /// Prefix the message with context (e.g. the node that failed), keeping the kind.
    pub fn context(self, ctx: impl std::fmt::Display) -> Self {
        match self {
            EngineError::InvalidInput(m) => EngineError::InvalidInput(format!("{ctx}: {m}")),
            EngineError::Unsupported(m) => EngineError::Unsupported(format!("{ctx}: {m}")),
            EngineError::ResourceExhausted(m) => EngineError::ResourceExhausted(format!("{ctx}: {m}")),
            EngineError::DeviceLost(m) => EngineError::DeviceLost(format!("{ctx}: {m}")),
            EngineError::Internal(m) => EngineError::Internal(format!("{ctx}: {m}")),
            EngineError::Io { context, source } => EngineError::Io {
                context: format!("{ctx}: {context}"),
                source,
            },
        }
    }
}

/// Result alias used across the crate.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;
