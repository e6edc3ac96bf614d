//! The request body the pipeline reads when its bytes have not all arrived with the head: the connection
//! task decodes it from the socket and feeds it through a channel of one.
//!
//! A body that was cut short (the client closed, or sent broken chunks) ends with an error, never with a
//! clean end of stream: the upstream must not take half a tensor for a whole one.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use infergate_http1::Error;
use tokio::sync::mpsc;

use crate::idle_body;
use crate::proxy::BoxError;

/// What the connection sends the body the pipeline reads.
#[derive(Debug)]
pub enum Event {
    /// Body bytes.
    Data(Bytes),
    /// The body ended cleanly.
    End,
    /// The body cannot be completed.
    Failed(Error),
    /// The client sent nothing of the body for the listener's `stream_idle_timeout`, this long.
    Stalled(Duration),
}

/// The sending half: the connection feeds it from the socket.
pub type Sender = mpsc::Sender<Event>;

/// A request body that arrives after its head, fed by the connection task.
#[derive(Debug)]
pub struct Incoming {
    rx: mpsc::Receiver<Event>,
    /// Bytes still to come, when the length was declared.
    remaining: Option<u64>,
    ended: bool,
}

/// A channel for one request body; `length` is the declared `Content-Length`, if any.
pub fn channel(length: Option<u64>) -> (Sender, Incoming) {
    // One message in flight: the connection reads the next piece once the pipeline has taken this one, so
    // a slow upstream slows the client down instead of the gateway buffering the body.
    let (tx, rx) = mpsc::channel(1);
    (
        tx,
        Incoming {
            rx,
            remaining: length,
            ended: false,
        },
    )
}

impl http_body::Body for Incoming {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Event::Data(data))) => {
                if let Some(r) = &mut self.remaining {
                    *r = r.saturating_sub(data.len() as u64);
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(Some(Event::End)) => {
                self.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Event::Failed(e))) => {
                self.ended = true;
                Poll::Ready(Some(Err(client_error(e))))
            }
            Poll::Ready(Some(Event::Stalled(limit))) => {
                self.ended = true;
                Poll::Ready(Some(Err(idle_body::stalled("request body", limit).into())))
            }
            Poll::Ready(None) => {
                self.ended = true;
                Poll::Ready(Some(Err(client_error(Error::Truncated))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}

/// The body's error as the pipeline reports it to the client, naming the client's side.
fn client_error(e: Error) -> BoxError {
    match e {
        Error::Truncated => "the client closed the connection before the request body ended".into(),
        e => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_whose_sender_goes_away_early_ends_in_an_error() {
        use http_body_util::BodyExt;
        let (tx, body) = channel(Some(10));
        tx.send(Event::Data(Bytes::from_static(b"hello"))).await.unwrap();
        drop(tx);
        let err = body.collect().await.unwrap_err();
        assert!(err.to_string().contains("closed the connection"), "{err}");

        let (tx, body) = channel(None);
        tokio::spawn(async move {
            tx.send(Event::Data(Bytes::from_static(b"he"))).await.unwrap();
            tx.send(Event::Data(Bytes::from_static(b"llo"))).await.unwrap();
            tx.send(Event::End).await.unwrap();
        });
        assert_eq!(&body.collect().await.unwrap().to_bytes()[..], b"hello");
    }
}
