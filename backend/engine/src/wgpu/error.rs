//! The executor's error: a kind the server maps to a status, and a message naming the thing and the fix.

use std::fmt;

/// What went wrong, as data (the session maps it onto the engine's `ErrorKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GpuErrorKind {
    /// The caller's tensors do not fit the model or the device's integer range.
    InvalidInput,
    /// The model uses something this executor cannot run.
    Unsupported,
    /// A tensor or the whole plan exceeds what the device can hold or bind.
    ResourceExhausted,
    /// The device is gone; every waiting and later request fails.
    DeviceLost,
    /// A bug on our side (a shader that does not compile, a validation error).
    Internal,
}

/// An error of the wgpu executor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuError {
    pub(crate) kind: GpuErrorKind,
    pub(crate) message: String,
}

impl GpuError {
    pub(crate) fn new(kind: GpuErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(GpuErrorKind::InvalidInput, message)
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Self {
        Self::new(GpuErrorKind::Unsupported, message)
    }

    pub(crate) fn exhausted(message: impl Into<String>) -> Self {
        Self::new(GpuErrorKind::ResourceExhausted, message)
    }

    pub(crate) fn lost(message: impl Into<String>) -> Self {
        Self::new(GpuErrorKind::DeviceLost, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(GpuErrorKind::Internal, message)
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for GpuError {}

/// Result of the wgpu executor's internals.
pub(crate) type GpuResult<T> = Result<T, GpuError>;
