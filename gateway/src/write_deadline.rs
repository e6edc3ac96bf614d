//! The listener's write timeout: a client connection whose writes make no progress for `write_timeout` (the
//! client stopped reading, so its socket buffer stays full) fails with `TimedOut`. The connection then
//! closes, and with it the response body it was writing, which frees the upstream stream and the upstream's
//! concurrency slot; a handful of clients that request large answers and never read them cannot hold an
//! upstream's slots for longer than that.
//!
//! The deadline counts from the first write that could not go out and is lifted by any progress, so a slow
//! but reading client is not cut; it is armed only while a write waits, so a healthy connection never
//! touches the timer.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::metrics as m;

/// A client connection with the write timeout applied to it.
pub(crate) struct WriteDeadline<I> {
    io: I,
    limit: Duration,
    /// The deadline of the write now waiting; allocated on the first wait and reused.
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether a write is waiting now (the timer runs).
    armed: bool,
}

impl<I> WriteDeadline<I> {
    /// `io`, whose writes may wait at most `limit` for progress.
    pub(crate) fn new(io: I, limit: Duration) -> WriteDeadline<I> {
        WriteDeadline {
            io,
            limit,
            timer: None,
            armed: false,
        }
    }

    /// Accounts for one write attempt that returned `poll`: progress lifts the deadline, a wait starts it
    /// (or checks it).
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.armed = false;
            return poll;
        }
        let deadline = Instant::now() + self.limit;
        let timer = match &mut self.timer {
            Some(timer) => {
                if !self.armed {
                    timer.as_mut().reset(deadline);
                }
                timer
            }
            None => self.timer.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.armed = true;
        match timer.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                self.armed = false;
                metrics::counter!(m::REFUSED, "reason" => "write_timeout").increment(1);
                tracing::debug!(limit = ?self.limit, "closing a client connection that does not read its response");
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client read nothing for the listener's write_timeout",
                )))
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_shutdown(cx);
        this.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_without_progress_fails_after_the_limit() {
        // A pipe whose reader takes nothing: 64 bytes fit, then writes wait.
        let (client, _server) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(client, Duration::from_secs(30));
        let started = Instant::now();
        let err = w.write_all(&[0u8; 1024]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_keeps_its_connection() {
        // The reader takes 64 bytes every 20 s: each wait is under the limit, the whole write is not.
        let (client, mut server) = tokio::io::duplex(64);
        let mut w = WriteDeadline::new(client, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut total = 0;
            while total < 1024 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                total += server.read(&mut buf).await.unwrap();
            }
            total
        });
        let started = Instant::now();
        w.write_all(&[0u8; 1024]).await.unwrap();
        assert!(started.elapsed() > Duration::from_secs(200));
        assert_eq!(reader.await.unwrap(), 1024);
    }
}
