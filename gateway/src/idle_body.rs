//! The stream idle timeout for bodies the listener does not read itself (HTTP/2 clients' request bodies): a
//! body that is waited on and yields nothing for the limit fails, which resets its upstream stream.
//! The timer is armed only while the body is waited on, so a body that keeps moving never touches it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::metrics as m;
use crate::proxy::BoxError;

/// A body that fails when it is waited on for `limit` without yielding anything.
pub(crate) struct IdleBody<B> {
    inner: B,
    limit: Duration,
    /// What the error says stalled (`request body`, `response body`).
    what: &'static str,
    /// The deadline of the wait now running; allocated on the first wait and reused.
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl<B> IdleBody<B> {
    /// `inner`, failing after `limit` without progress; `what` names it in the error.
    pub(crate) fn new(inner: B, limit: Duration, what: &'static str) -> IdleBody<B> {
        IdleBody {
            inner,
            limit,
            what,
            timer: None,
            armed: false,
        }
    }
}

impl<B> HttpBody for IdleBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.armed = false;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = Instant::now() + this.limit;
        let timer = match &mut this.timer {
            Some(timer) => {
                if !this.armed {
                    timer.as_mut().reset(deadline);
                }
                timer
            }
            None => this.timer.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        this.armed = true;
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                this.armed = false;
                metrics::counter!(m::REFUSED, "reason" => "stream_idle_timeout").increment(1);
                tracing::debug!(what = this.what, "a body moved no bytes for stream_idle_timeout");
                Poll::Ready(Some(Err(stalled(this.what, this.limit).into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What the client reads when its `what` (`request body`) stopped arriving: the limit that ended it, the
/// setting that holds it, and what to do.
pub(crate) fn stalled(what: &str, limit: Duration) -> String {
    format!(
        "the {what} stopped arriving: no bytes came for {limit:?}, the listener's \
         listeners.limits.stream_idle_timeout; send the rest without a pause that long, or raise \
         listeners.limits.stream_idle_timeout"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stalls_fails_after_the_limit_and_one_that_moves_does_not() {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, BoxError>>(1);
        let stream = http_body_util::StreamBody::new(tokio_stream_from(rx));
        let mut body = IdleBody::new(stream, Duration::from_secs(10), "request body");
        let feeder = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(8)).await;
                tx.send(Ok(Frame::data(Bytes::from_static(b"x")))).await.unwrap();
            }
            // Then nothing, with the sender still open.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tx);
        });
        let started = Instant::now();
        for _ in 0..5 {
            assert!(body.frame().await.unwrap().unwrap().is_data());
        }
        let err = body.frame().await.unwrap().unwrap_err();
        assert_eq!(
            err.to_string(),
            "the request body stopped arriving: no bytes came for 10s, the listener's \
             listeners.limits.stream_idle_timeout; send the rest without a pause that long, or raise \
             listeners.limits.stream_idle_timeout"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(50));
        feeder.abort();
    }

    fn tokio_stream_from<T: Send + 'static>(
        mut rx: tokio::sync::mpsc::Receiver<T>,
    ) -> impl futures::Stream<Item = T> + Send + Unpin {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
