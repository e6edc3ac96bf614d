//! A request's side of its stream: the writer of a request body under flow control, and the response body.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use h2::{Reason, RecvStream, SendStream};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::oneshot;

use super::conn::OpenStream;
use super::error::H2Error;
use crate::proxy::Body;

/// Writes `body` to `stream`. Returns `None` when it was all written (or failed) at once; otherwise the
/// rest is written by a task, and the returned guard resets the stream when dropped armed.
pub(super) async fn pipe(body: Body, stream: SendStream<Bytes>) -> Option<CancelOnDrop> {
    let mut pipe = Pipe {
        body,
        stream,
        cancel: None,
    };
    // Most bodies fit the stream's window and go in this one poll, without a task.
    if poll_fn(|cx| Poll::Ready(Pin::new(&mut pipe).poll(cx).is_ready())).await {
        return None;
    }
    let (tx, rx) = oneshot::channel();
    pipe.cancel = Some(rx);
    tokio::spawn(pipe);
    Some(CancelOnDrop(Some(tx)))
}

/// Tells a spawned body pipe to reset its stream (CANCEL) when dropped before [`CancelOnDrop::disarm`].
pub(super) struct CancelOnDrop(Option<oneshot::Sender<()>>);

impl CancelOnDrop {
    pub(super) fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// A request body being written to its stream under HTTP/2 flow control.
struct Pipe {
    body: Body,
    stream: SendStream<Bytes>,
    cancel: Option<oneshot::Receiver<()>>,
}

impl Future for Pipe {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if let Some(rx) = &mut this.cancel {
            match Pin::new(rx).poll(cx) {
                Poll::Ready(Ok(())) => {
                    tracing::debug!("request abandoned before its response: resetting the upstream stream");
                    this.stream.send_reset(Reason::CANCEL);
                    return Poll::Ready(());
                }
                // Disarmed: the response arrived; the body goes on.
                Poll::Ready(Err(_)) => this.cancel = None,
                Poll::Pending => {}
            }
        }
        match this.write(cx) {
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, "writing the request body upstream failed");
                Poll::Ready(())
            }
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Pipe {
    fn write(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), crate::proxy::BoxError>> {
        loop {
            // Ask for some window before reading the next chunk; h2 buffers the chunk beyond it (up to the
            // connection's send buffer limit), so at most one chunk waits in memory while the upstream
            // reads slowly.
            self.stream.reserve_capacity(1);
            if self.stream.capacity() == 0 {
                loop {
                    match ready!(self.stream.poll_capacity(cx)) {
                        Some(Ok(0)) => {}
                        Some(Ok(_)) => break,
                        Some(Err(e)) => return Poll::Ready(Err(e.into())),
                        None => {
                            return Poll::Ready(Err(
                                "the upstream stream closed while the request body was being sent".into(),
                            ));
                        }
                    }
                }
            } else if let Poll::Ready(reason) = self.stream.poll_reset(cx) {
                let reason = reason?;
                return Poll::Ready(Err(h2::Error::from(reason).into()));
            }
            match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let eos = self.body.is_end_stream();
                        self.stream.send_data(data, eos)?;
                        if eos {
                            return Poll::Ready(Ok(()));
                        }
                    }
                    Err(frame) => {
                        if let Ok(trailers) = frame.into_trailers() {
                            self.stream.reserve_capacity(0);
                            self.stream.send_trailers(trailers)?;
                            return Poll::Ready(Ok(()));
                        }
                    }
                },
                Some(Err(e)) => {
                    // The caller's body failed (too large, caller gone): the upstream must not take a
                    // truncated request for a whole one.
                    self.stream.send_reset(Reason::INTERNAL_ERROR);
                    return Poll::Ready(Err(e));
                }
                None => {
                    self.stream.send_data(Bytes::new(), true)?;
                    return Poll::Ready(Ok(()));
                }
            }
        }
    }
}

/// The body of an HTTP/2 response: data (its window given back as it is read), then trailers. Dropped
/// before its end, h2 resets the stream (CANCEL) and counts its unread data as read for the connection.
pub(crate) struct H2Body {
    recv: RecvStream,
    data_done: bool,
    /// Bytes still to come, from `content-length`.
    remaining: Option<u64>,
    /// Released when the body ends or is dropped.
    open: Option<OpenStream>,
}

impl H2Body {
    pub(super) fn new(recv: RecvStream, remaining: Option<u64>, open: OpenStream) -> H2Body {
        H2Body {
            recv,
            data_done: false,
            remaining,
            open: Some(open),
        }
    }

    fn finish(&mut self) {
        self.open = None;
    }
}

impl HttpBody for H2Body {
    type Data = Bytes;
    type Error = H2Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, H2Error>>> {
        let this = &mut *self;
        if !this.data_done {
            match ready!(this.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    // Reads keep pings away while a body streams in. The frame that ends the body needs no
                    // clock read: the stream is over, and the response head touched the connection already.
                    if let Some(open) = &this.open
                        && !this.recv.is_end_stream()
                    {
                        open.touch();
                    }
                    if let Some(r) = &mut this.remaining {
                        *r = r.saturating_sub(data.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    this.finish();
                    return Poll::Ready(Some(Err(e.into())));
                }
                None => this.data_done = true,
            }
        }
        let trailers = ready!(this.recv.poll_trailers(cx));
        this.finish();
        match trailers {
            Ok(Some(t)) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Ok(None) => Poll::Ready(None),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match self.remaining {
            Some(n) => SizeHint::with_exact(n),
            None => SizeHint::default(),
        }
    }
}
