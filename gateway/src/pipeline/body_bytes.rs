//! Body byte counting for `request_bytes_total` and `response_bytes_total`: a body wrapper that adds the
//! length of every data frame to a sink as the frame passes.
//!
//! A response's destination is known when its body starts, so its bytes go straight to the destination's
//! counter. A request's destination is chosen after its first bytes are read (gRPC routing peeks into the
//! body), so its bytes go to a [`RequestTally`]: it holds them until the destination is named, then passes
//! them and every later byte straight on, so a long stream's bytes show while it runs. Whatever a race
//! leaves pending is added when the tally is dropped.

use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use metrics::Counter;

/// Where [`Counted`] adds the bytes it sees.
pub(crate) trait ByteSink {
    fn add(&self, bytes: u64);
}

impl ByteSink for Counter {
    fn add(&self, bytes: u64) {
        self.increment(bytes);
    }
}

/// The bytes of one request body, held until its destination's counter is named.
#[derive(Debug, Default)]
pub(crate) struct RequestTally {
    pending: AtomicU64,
    counter: OnceLock<Counter>,
}

impl RequestTally {
    /// Names the counter the tally's bytes go to (the first call wins) and passes on what is pending.
    pub(crate) fn count_into(&self, counter: Counter) {
        let _ = self.counter.set(counter);
        self.flush();
    }

    /// Moves the pending bytes to the counter, once it is named. The swap hands each byte to one caller.
    fn flush(&self) {
        if let Some(counter) = self.counter.get() {
            let bytes = self.pending.swap(0, Ordering::AcqRel);
            if bytes > 0 {
                counter.increment(bytes);
            }
        }
    }
}

impl ByteSink for std::sync::Arc<RequestTally> {
    fn add(&self, bytes: u64) {
        // Once the counter is named, bytes go straight to it: one atomic add per frame.
        if let Some(counter) = self.counter.get() {
            counter.increment(bytes);
            return;
        }
        self.pending.fetch_add(bytes, Ordering::AcqRel);
        self.flush();
    }
}

impl Drop for RequestTally {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Wraps `B`; adds the length of each data frame to `sink`.
pub(crate) struct Counted<B, S> {
    inner: B,
    sink: S,
}

impl<B, S> Counted<B, S> {
    pub(crate) fn new(inner: B, sink: S) -> Self {
        Counted { inner, sink }
    }
}

impl<B, S> HttpBody for Counted<B, S>
where
    B: HttpBody<Data = Bytes> + Unpin,
    S: ByteSink + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            this.sink.add(data.len() as u64);
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
