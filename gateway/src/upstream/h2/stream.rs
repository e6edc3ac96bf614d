//! A request's side of its stream: the future of the response head, the response body, and the writer of a
//! request body that did not go out with the head.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::{Response, Version};
use http_body::{Body as HttpBody, Frame, SizeHint};
use infergate_http1::head::parse_length;

use super::error::{H2Error, Reason};
use super::state::Shared;
use super::{SendFailure, classify};
use crate::proxy::Body;

/// Waits for the response head of stream `id`. Dropped before it arrives, the stream is reset (CANCEL).
pub(super) struct ResponseFuture {
    shared: Arc<Shared>,
    id: u32,
    done: bool,
}

impl ResponseFuture {
    pub(super) fn new(shared: Arc<Shared>, id: u32) -> ResponseFuture {
        ResponseFuture {
            shared,
            id,
            done: false,
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<Response<H2Body>, SendFailure>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let mut st = this.shared.lock();
        let Some(stream) = st.streams.get_mut(&this.id) else {
            this.done = true;
            return Poll::Ready(Err(SendFailure::Failed(
                classify(&H2Error::closed()),
                H2Error::closed(),
            )));
        };
        if let Some(head) = stream.head.take() {
            let ended = stream.fully_read();
            if ended {
                st.reader_done(this.id);
            }
            drop(st);
            this.done = true;
            let remaining = head
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| parse_length(v.as_bytes()));
            let mut resp = Response::new(H2Body {
                shared: Arc::clone(&this.shared),
                id: this.id,
                ended,
                remaining,
            });
            *resp.status_mut() = head.status;
            *resp.version_mut() = Version::HTTP_2;
            *resp.headers_mut() = head.headers;
            return Poll::Ready(Ok(resp));
        }
        if let Some(e) = stream.error.clone() {
            st.reader_done(this.id);
            this.done = true;
            return Poll::Ready(Err(SendFailure::Failed(classify(&e), e)));
        }
        if !stream.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            stream.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for ResponseFuture {
    fn drop(&mut self) {
        if !self.done {
            self.shared.lock().reader_done(self.id);
        }
    }
}

/// The body of an HTTP/2 response: data (its window given back as it is read), then trailers. Dropped
/// before its end, the stream is reset (CANCEL).
pub(crate) struct H2Body {
    shared: Arc<Shared>,
    id: u32,
    /// The end was returned (or there was no body): the stream is no longer ours.
    ended: bool,
    /// Bytes still to come, from `content-length`.
    remaining: Option<u64>,
}

impl HttpBody for H2Body {
    type Data = Bytes;
    type Error = H2Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, H2Error>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let mut st = this.shared.lock();
        let Some(stream) = st.streams.get_mut(&this.id) else {
            this.ended = true;
            return Poll::Ready(Some(Err(H2Error::closed())));
        };
        if let Some(data) = stream.data.pop_front() {
            let done = stream.fully_read();
            st.release(this.id, data.len());
            if done {
                st.reader_done(this.id);
                this.ended = true;
            }
            if let Some(r) = &mut this.remaining {
                *r = r.saturating_sub(data.len() as u64);
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(e) = stream.error.clone() {
            st.reader_done(this.id);
            this.ended = true;
            return Poll::Ready(Some(Err(e)));
        }
        if let Some(trailers) = stream.trailers.take() {
            st.reader_done(this.id);
            this.ended = true;
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        if stream.recv_end {
            st.reader_done(this.id);
            this.ended = true;
            return Poll::Ready(None);
        }
        if !stream.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            stream.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        if self.ended {
            return SizeHint::with_exact(0);
        }
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

impl Drop for H2Body {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.lock().reader_done(self.id);
        }
    }
}

/// Writes a request body to its stream under flow control: a chunk at a time, as the stream's and the
/// connection's windows allow. Only a body that did not go out with the head gets one (a task of its own).
pub(super) struct BodyWriter {
    shared: Arc<Shared>,
    id: u32,
    body: Body,
    /// Read from the body, not yet sent for want of window.
    pending: Bytes,
}

impl BodyWriter {
    pub(super) fn new(shared: Arc<Shared>, id: u32, body: Body, pending: Bytes) -> BodyWriter {
        BodyWriter {
            shared,
            id,
            body,
            pending,
        }
    }

    /// Sends what window allows of the pending chunk. `Ready(true)`: the stream is finished or gone.
    fn poll_send_pending(&mut self, cx: &Context<'_>) -> Poll<bool> {
        let mut st = self.shared.lock();
        loop {
            let Some(stream) = st.streams.get_mut(&self.id) else {
                return Poll::Ready(true);
            };
            if stream.send_end {
                return Poll::Ready(true);
            }
            if self.pending.is_empty() {
                return Poll::Ready(false);
            }
            let capacity = st.send_capacity(&st.streams[&self.id]);
            if capacity == 0 {
                if let Some(stream) = st.streams.get_mut(&self.id) {
                    stream.writer = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
            let n = capacity.min(self.pending.len());
            let end = n == self.pending.len() && self.body.is_end_stream();
            st.send_data(self.id, &self.pending[..n], end);
            self.pending.advance(n);
            if end {
                return Poll::Ready(true);
            }
        }
    }
}

impl Future for BodyWriter {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            match this.poll_send_pending(cx) {
                Poll::Ready(true) => return Poll::Ready(()),
                Poll::Ready(false) => {}
                Poll::Pending => return Poll::Pending,
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if data.is_empty() && this.body.is_end_stream() {
                            this.shared.lock().send_data(this.id, &[], true);
                            return Poll::Ready(());
                        }
                        this.pending = data;
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            this.shared.lock().send_trailers(this.id, &trailers);
                            return Poll::Ready(());
                        }
                    }
                },
                Poll::Ready(None) => {
                    this.shared.lock().send_data(this.id, &[], true);
                    return Poll::Ready(());
                }
                Poll::Ready(Some(Err(e))) => {
                    // The caller's body failed (too large, caller gone): the upstream must not take a
                    // truncated request for a whole one.
                    tracing::debug!(error = %e, "the request body failed while it was sent upstream");
                    this.shared.lock().reset(this.id, Reason::INTERNAL_ERROR);
                    return Poll::Ready(());
                }
            }
        }
    }
}
