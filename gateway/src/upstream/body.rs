//! The response body of an upstream call: it holds the endpoint's outstanding count and the upstream's
//! concurrency slot until the body ends or is dropped, so balancing and limits see streams, not just heads.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;

use super::endpoint::Endpoint;
use super::h1::H1Body;
use super::h2::H2Body;

/// Holds an endpoint's outstanding request and the upstream's concurrency slot.
pub(crate) struct Guard {
    endpoint: Arc<Endpoint>,
    _permit: OwnedSemaphorePermit,
}

impl Guard {
    pub(crate) fn new(endpoint: Arc<Endpoint>, permit: OwnedSemaphorePermit) -> Guard {
        endpoint.begin();
        Guard {
            endpoint,
            _permit: permit,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.endpoint.end();
    }
}

/// A response body streaming from an upstream. Trailers (gRPC status) pass through.
pub struct UpstreamBody {
    inner: PoolBody,
    guard: Option<Guard>,
}

/// A response body as a connection pool hands it over.
pub(crate) enum PoolBody {
    /// From an HTTP/1.1 connection.
    Http1(H1Body),
    /// From an HTTP/2 stream.
    Http2(H2Body),
}

/// Why an upstream response body failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamBodyError {
    /// The HTTP/1.1 connection failed or the body's framing was broken.
    #[error(transparent)]
    Http1(#[from] std::io::Error),
    /// The HTTP/2 stream was reset or its connection failed.
    #[error(transparent)]
    Http2(#[from] super::h2::H2Error),
}

impl UpstreamBody {
    pub(crate) fn new(inner: PoolBody, guard: Guard) -> UpstreamBody {
        UpstreamBody {
            inner,
            guard: Some(guard),
        }
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody").finish_non_exhaustive()
    }
}

impl HttpBody for UpstreamBody {
    type Data = Bytes;
    type Error = UpstreamBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let polled = match &mut this.inner {
            PoolBody::Http1(b) => Pin::new(b).poll_frame(cx).map_err(UpstreamBodyError::from),
            PoolBody::Http2(b) => Pin::new(b).poll_frame(cx).map_err(UpstreamBodyError::from),
        };
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.guard = None,
            Poll::Ready(Some(Ok(_))) if this.is_end_stream() => this.guard = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            PoolBody::Http1(b) => b.is_end_stream(),
            PoolBody::Http2(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            PoolBody::Http1(b) => b.size_hint(),
            PoolBody::Http2(b) => b.size_hint(),
        }
    }
}

/// A request body that remembers why it failed, so a send error caused by the caller's body (too large,
/// caller gone, stalled) is classified as the caller's fault even when the HTTP/2 layer reports only a
/// reset, and the caller is told what went wrong with its body.
pub(crate) struct WatchedBody {
    inner: crate::proxy::Body,
    failure: Arc<std::sync::OnceLock<BodyFailure>>,
}

/// Why a caller's request body failed.
#[derive(Debug)]
pub(crate) struct BodyFailure {
    /// The failure's kind (a caller fault).
    pub(crate) kind: super::FailureKind,
    /// The body's own error, in words for the caller.
    pub(crate) cause: String,
}

impl WatchedBody {
    pub(crate) fn new(inner: crate::proxy::Body) -> (WatchedBody, Arc<std::sync::OnceLock<BodyFailure>>) {
        let failure = Arc::new(std::sync::OnceLock::new());
        (
            WatchedBody {
                inner,
                failure: Arc::clone(&failure),
            },
            failure,
        )
    }
}

impl HttpBody for WatchedBody {
    type Data = Bytes;
    type Error = crate::proxy::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Err(e))) = &polled {
            let kind = if e.is::<http_body_util::LengthLimitError>() {
                super::FailureKind::RequestBodyTooLarge
            } else {
                super::FailureKind::RequestBody
            };
            let _ = self.failure.set(BodyFailure {
                kind,
                cause: e.to_string(),
            });
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
