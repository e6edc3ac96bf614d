//! The body type every stage of the gateway passes along, and small constructors for it.
//!
//! Requests and responses stream through the gateway as [`Body`]: a boxed, `Send` body of [`Bytes`] frames
//! whose error is a boxed error. Stages that must replay a body (retries, mirroring) buffer it into [`Bytes`] and
//! build fresh bodies with [`full`].

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::UnsyncBoxBody};

/// The error type carried by bodies and by layers that do not need a typed error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The body of every request and response inside the gateway.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A body holding `bytes` (one frame).
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Boxes any body whose error converts into [`BoxError`].
pub fn boxed<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}
