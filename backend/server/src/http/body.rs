//! Request bodies read under a size cap and a deadline; response bodies sent as a list of buffers.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use infergate_protocol::ServeError;

/// A response body made of buffers sent one after another, so a JSON header and the outputs' own
/// buffers go out without being copied into one.
#[derive(Debug, Default)]
pub struct ChunksBody {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl ChunksBody {
    /// A body of these buffers, in order.
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        let chunks: VecDeque<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        let remaining = chunks.iter().map(|c| c.len() as u64).sum();
        ChunksBody { chunks, remaining }
    }

    /// A body of one buffer.
    pub fn one(b: impl Into<Bytes>) -> Self {
        Self::new([b.into()])
    }

    /// An empty body.
    pub fn empty() -> Self {
        Self::default()
    }
}

impl Body for ChunksBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.chunks.pop_front() {
            Some(c) => {
                self.remaining -= c.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(c))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// The request body until a handler takes it; whatever is left unread when the request fails is
/// drained before the error goes out, so the connection stays usable and the client sees the answer.
pub(crate) struct BodySlot(Option<Incoming>);

impl BodySlot {
    pub(crate) fn new(body: Incoming) -> Self {
        BodySlot(Some(body))
    }

    /// The body, once.
    pub(crate) fn take(&mut self) -> Option<Incoming> {
        self.0.take()
    }

    /// Reads and discards what is left of the body (bounded by `max_bytes` and `timeout`).
    pub(crate) async fn drain(&mut self, max_bytes: usize, timeout: Duration) {
        if let Some(body) = self.0.take()
            && !body.is_end_stream()
        {
            let _ = tokio::time::timeout(timeout, drain(body, drain_cap(max_bytes))).await;
        }
    }
}

/// Reads a whole request body, refusing more than `max_bytes` and giving up after `timeout`.
///
/// A body over the limit is read on and thrown away (up to [`drain_cap`]) before the error is sent, so
/// that a client still writing its body receives the 400 and its message instead of a broken pipe.
pub(crate) async fn read_body(
    body: Incoming,
    declared: Option<u64>,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Bytes, ServeError> {
    let deadline = tokio::time::Instant::now() + timeout;
    if let Some(n) = declared
        && n > max_bytes as u64
    {
        let _ = tokio::time::timeout_at(deadline, drain(body, drain_cap(max_bytes))).await;
        return Err(too_large(n.to_string(), max_bytes));
    }
    let mut body = body;
    // Frames are kept as they arrive; a body of one frame is used without a copy.
    let mut frames: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    let read = tokio::time::timeout_at(deadline, async {
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| ServeError::invalid_argument(format!("failed to read the request body: {e}")))?;
            if let Ok(data) = frame.into_data() {
                total += data.len();
                if total > max_bytes {
                    drain(body, drain_cap(max_bytes)).await;
                    return Err(too_large(format!("more than {max_bytes}"), max_bytes));
                }
                frames.push(data);
            }
        }
        Ok(())
    })
    .await;
    match read {
        Err(_) => Err(ServeError::invalid_argument(format!(
            "the request body did not arrive within {} s; send it faster or raise the body read timeout",
            timeout.as_secs_f64()
        ))),
        Ok(Err(e)) => Err(e),
        Ok(Ok(())) if frames.len() == 1 => Ok(frames.swap_remove(0)),
        Ok(Ok(())) => {
            let mut out = BytesMut::with_capacity(total);
            frames.iter().for_each(|f| out.extend_from_slice(f));
            Ok(out.freeze())
        }
    }
}

/// How much of an oversized body is read and discarded before answering: enough for ordinary clients
/// to finish writing, bounded so a huge upload cannot keep the connection busy for long.
fn drain_cap(max_bytes: usize) -> usize {
    max_bytes.saturating_mul(2).max(16 << 20)
}

/// Reads and drops up to `cap` bytes of a body; memory use does not grow with it.
async fn drain(mut body: Incoming, cap: usize) {
    let mut seen = 0usize;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            seen += data.len();
            if seen > cap {
                return;
            }
        }
    }
}

fn too_large(size: String, max_bytes: usize) -> ServeError {
    ServeError::invalid_argument(format!(
        "the request body ({size} bytes) exceeds the server's limit of {max_bytes} bytes; send less per request \
         or raise the limit (--http-max-input-size)"
    ))
}
