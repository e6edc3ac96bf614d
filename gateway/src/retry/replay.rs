//! Request bodies buffered for replay. [`buffer_body`] reads a body up to a limit: a body that
//! ends within it becomes [`ReplayBody::Full`] (cloned cheaply for every try, and usable for
//! mirroring and gRPC peeking); a larger one becomes [`ReplayBody::Once`] (the bytes read so far,
//! then the rest streamed), which is sent once and never retried.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

/// A request body as the upstream sees it.
#[derive(Debug)]
pub enum ReplayBody<B> {
    /// The whole body, in memory: replayable.
    Full {
        /// The bytes (taken when polled).
        data: Option<Bytes>,
        /// Request trailers, if any.
        trailers: Option<HeaderMap>,
    },
    /// A body larger than the replay limit: the bytes already read, then the rest of the stream.
    Once {
        /// Chunks read while trying to buffer.
        prefix: VecDeque<Bytes>,
        /// The remainder.
        rest: B,
    },
}

impl<B> ReplayBody<B> {
    /// A replayable body holding `data`.
    pub fn full(data: Bytes) -> Self {
        ReplayBody::Full {
            data: Some(data),
            trailers: None,
        }
    }

    /// The whole body when it was buffered (not yet polled).
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            ReplayBody::Full { data, .. } => data.as_ref(),
            ReplayBody::Once { .. } => None,
        }
    }

    /// The first bytes available without reading further: the whole body, or the buffered prefix
    /// (its first chunk) of a large one. For gRPC model peeking.
    pub fn first_bytes(&self) -> &[u8] {
        match self {
            ReplayBody::Full { data, .. } => data.as_deref().unwrap_or_default(),
            ReplayBody::Once { prefix, .. } => prefix.front().map(|b| &b[..]).unwrap_or_default(),
        }
    }

    /// Whether the body can be sent more than once.
    pub fn is_replayable(&self) -> bool {
        matches!(self, ReplayBody::Full { .. })
    }

    /// A copy for another try (`None` for bodies that are not replayable).
    pub fn try_clone(&self) -> Option<Self> {
        match self {
            ReplayBody::Full { data, trailers } => Some(ReplayBody::Full {
                data: data.clone(),
                trailers: trailers.clone(),
            }),
            ReplayBody::Once { .. } => None,
        }
    }
}

/// Reads `body` until it ends or more than `limit` bytes have arrived. Multi-chunk bodies that fit
/// are joined into one buffer; a single chunk is kept as is (no copy).
pub async fn buffer_body<B>(mut body: B, limit: usize) -> Result<ReplayBody<B>, B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut chunks: VecDeque<Bytes> = VecDeque::new();
    let mut len = 0usize;
    let mut trailers = None;
    if body.is_end_stream() {
        return Ok(ReplayBody::Full {
            data: Some(Bytes::new()),
            trailers: None,
        });
    }
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        match frame.into_data() {
            Ok(data) => {
                len += data.len();
                if !data.is_empty() {
                    chunks.push_back(data);
                }
                if len > limit {
                    return Ok(ReplayBody::Once {
                        prefix: chunks,
                        rest: body,
                    });
                }
            }
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    trailers = Some(t);
                }
            }
        }
    }
    let data = match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop_front().unwrap_or_default(),
        _ => {
            let mut b = BytesMut::with_capacity(len);
            for c in chunks {
                b.extend_from_slice(&c);
            }
            b.freeze()
        }
    };
    Ok(ReplayBody::Full {
        data: Some(data),
        trailers,
    })
}

impl<B> Body for ReplayBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.get_mut() {
            ReplayBody::Full { data, trailers } => {
                if let Some(d) = data.take().filter(|d| !d.is_empty()) {
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
            ReplayBody::Once { prefix, rest } => {
                if let Some(d) = prefix.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Pin::new(rest).poll_frame(cx)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ReplayBody::Full { data, trailers } => {
                data.as_ref().is_none_or(Bytes::is_empty) && trailers.is_none()
            }
            ReplayBody::Once { prefix, rest } => prefix.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ReplayBody::Full { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            ReplayBody::Once { prefix, rest } => {
                let p: u64 = prefix.iter().map(|b| b.len() as u64).sum();
                let r = rest.size_hint();
                let mut h = SizeHint::new();
                h.set_lower(r.lower() + p);
                if let Some(u) = r.upper() {
                    h.set_upper(u + p);
                }
                h
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    #[tokio::test]
    async fn small_bodies_replay_large_ones_stream_once() {
        let small = buffer_body(Full::new(Bytes::from_static(b"hello")), 16)
            .await
            .unwrap();
        assert_eq!(small.bytes().map(|b| &b[..]), Some(&b"hello"[..]));
        let again = small.try_clone().unwrap();
        assert_eq!(again.collect().await.unwrap().to_bytes(), "hello");

        let chunks =
            (0..4).map(|i| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![i as u8; 10]))));
        let big = buffer_body(StreamBody::new(futures::stream::iter(chunks)), 16)
            .await
            .unwrap();
        assert!(!big.is_replayable() && big.try_clone().is_none());
        assert_eq!(big.first_bytes(), &[0u8; 10]);
        let all = big.collect().await.unwrap().to_bytes();
        assert_eq!(all.len(), 40);
        assert_eq!(all[39], 3);
    }
}
