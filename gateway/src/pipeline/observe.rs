//! A response body that reports, once, how the response ended: the `grpc-status` of its trailers (if any),
//! a failed stream, or a body dropped before its end. Canary analysis and `requests_total` record gRPC
//! outcomes this way, since a gRPC status usually arrives in trailers, after the body.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// How an observed body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// It ended normally, with this `grpc-status` in its trailers (if any).
    Trailers(Option<u32>),
    /// The upstream stream failed mid-body.
    Failed,
    /// It was dropped before its end (the caller went away).
    Dropped,
}

/// Wraps `B`; calls `on_end` once, when the body ends, fails or is dropped.
pub(crate) struct Observed<B, F: FnOnce(BodyEnd)> {
    inner: B,
    on_end: Option<F>,
    trailer_status: Option<u32>,
}

impl<B, F: FnOnce(BodyEnd)> Observed<B, F> {
    pub(crate) fn new(inner: B, on_end: F) -> Self
    where
        B: HttpBody,
    {
        let mut o = Observed {
            inner,
            on_end: Some(on_end),
            trailer_status: None,
        };
        // An empty body is never polled: report at once.
        if o.inner.is_end_stream() {
            o.finish(false);
        }
        o
    }

    fn finish(&mut self, failed: bool) {
        if let Some(f) = self.on_end.take() {
            f(if failed {
                BodyEnd::Failed
            } else {
                BodyEnd::Trailers(self.trailer_status)
            });
        }
    }
}

impl<B, F: FnOnce(BodyEnd)> Drop for Observed<B, F> {
    fn drop(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(BodyEnd::Dropped);
        }
    }
}

impl<B, F> HttpBody for Observed<B, F>
where
    B: HttpBody<Data = Bytes> + Unpin,
    F: FnOnce(BodyEnd) + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(t) = frame.trailers_ref() {
                    this.trailer_status = crate::retry::grpc_status(t);
                }
                if this.inner.is_end_stream() {
                    this.finish(false);
                }
            }
            Poll::Ready(Some(Err(_))) => this.finish(true),
            Poll::Ready(None) => this.finish(false),
            Poll::Pending => {}
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
