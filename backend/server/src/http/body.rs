//! Request bodies read under a size cap and a deadline; response bodies sent as a list of buffers.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
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

/// Reads a whole request body, refusing more than `max_bytes` and giving up after `timeout`.
pub(crate) async fn read_body(
    body: Incoming,
    declared: Option<u64>,
    max_bytes: usize,
    timeout: Duration,
) -> Result<Bytes, ServeError> {
    if let Some(n) = declared
        && n > max_bytes as u64
    {
        return Err(too_large(n.to_string(), max_bytes));
    }
    let collected = tokio::time::timeout(timeout, Limited::new(body, max_bytes).collect()).await;
    match collected {
        Err(_) => Err(ServeError::invalid_argument(format!(
            "the request body did not arrive within {} s; send it faster or raise the body read timeout",
            timeout.as_secs_f64()
        ))),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(too_large(format!("more than {max_bytes}"), max_bytes))
        }
        Ok(Err(e)) => Err(ServeError::invalid_argument(format!(
            "failed to read the request body: {e}"
        ))),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

fn too_large(size: String, max_bytes: usize) -> ServeError {
    ServeError::invalid_argument(format!(
        "the request body ({size} bytes) exceeds the server's limit of {max_bytes} bytes; send less per request \
         or raise the limit (--http-max-input-size)"
    ))
}
