//! The connection task: the one owner of the socket. It writes what requests queued (all the frames queued
//! since its last turn go out in one write, which is where HTTP/2 saves system calls over HTTP/1.1), reads
//! and hands each frame to the shared state, pings an upstream that has gone quiet with requests waiting, and
//! closes the connection once nobody will use it again.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::time::{Instant, Sleep};

use super::error::{H2Error, Reason};
use super::frame;
use super::state::{ConnError, NOT_HTTP2, Shared};
use super::{KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};

/// Room kept free in the read buffer before each read: a whole frame of the default size and its header.
const READ_RESERVE: usize = frame::DEFAULT_MAX_FRAME_SIZE as usize + frame::HEADER_LEN;

/// Drives one connection until it closes.
pub(super) struct Driver<T> {
    io: T,
    shared: Arc<Shared>,
    read: BytesMut,
    /// Bytes being written, taken from the shared write buffer; `written` of them are out.
    out: Vec<u8>,
    written: usize,
    /// Keep-alive: fires every interval to look for a quiet connection, or at the PING's deadline.
    timer: Pin<Box<Sleep>>,
    /// Reads since the timer last fired.
    reads: u64,
    /// When the unanswered keep-alive PING times out.
    ping_deadline: Option<Instant>,
    /// Written but perhaps not flushed (TLS keeps records in its buffer until flushed).
    unflushed: bool,
    /// The connection is over; flushing what is left (a GOAWAY) before closing.
    closing: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Driver<T> {
    pub(super) fn new(io: T, shared: Arc<Shared>) -> Driver<T> {
        Driver {
            io,
            shared,
            read: BytesMut::with_capacity(READ_RESERVE),
            out: Vec::with_capacity(16 << 10),
            written: 0,
            timer: Box::pin(tokio::time::sleep(KEEP_ALIVE_INTERVAL)),
            reads: 0,
            ping_deadline: None,
            unflushed: false,
            closing: false,
        }
    }

    /// Takes what requests queued, if the last batch is out; registers the task to be woken for more.
    /// `true` when there is something to write.
    fn take_writes(&mut self, cx: &Context<'_>) -> bool {
        if self.written < self.out.len() {
            return true;
        }
        self.out.clear();
        self.written = 0;
        let mut st = self.shared.lock();
        if !st.driver.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            st.driver = Some(cx.waker().clone());
        }
        std::mem::swap(&mut st.write, &mut self.out);
        st.queued_replies = 0;
        if !self.closing && st.finished() {
            // Nobody will send on this connection again: say so, and close once it is written.
            if st.failed.is_none() {
                frame::goaway(&mut self.out, 0, Reason::NO_ERROR);
                st.fail_all(H2Error::closed());
            }
            self.shared.mark_closed();
            self.closing = true;
        }
        !self.out.is_empty()
    }

    /// Writes as much as the socket takes. `Ready(Err)` when the connection failed.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        while self.written < self.out.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.out[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.written += n;
                    self.unflushed = true;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        if self.unflushed {
            std::task::ready!(Pin::new(&mut self.io).poll_flush(cx))?;
            self.unflushed = false;
        }
        Poll::Ready(Ok(()))
    }

    /// Reads once. `Ready(Ok(true))`: bytes arrived; `Ready(Ok(false))`: the upstream closed.
    fn poll_read_in(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, std::io::Error>> {
        self.read.reserve(READ_RESERVE);
        // A fresh `read_buf` future per poll: it holds nothing between polls but the two borrows.
        match std::pin::pin!(self.io.read_buf(&mut self.read)).poll(cx) {
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(false)),
            Poll::Ready(Ok(_)) => {
                self.reads += 1;
                Poll::Ready(Ok(true))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Hands every whole frame read so far to the state. `Err`: a connection error.
    fn handle_frames(&mut self) -> Result<(), ConnError> {
        let mut st = self.shared.lock();
        loop {
            let f = match frame::take(&mut self.read, frame::DEFAULT_MAX_FRAME_SIZE) {
                Ok(Some(f)) => f,
                Ok(None) => {
                    // A GOAWAY among them: the pool should stop handing out this connection at once.
                    if st.refuses_streams().is_some() {
                        self.shared.mark_closed();
                    }
                    return Ok(());
                }
                Err(_) if !st.preface_received() => return Err(ConnError(Reason::PROTOCOL_ERROR, NOT_HTTP2)),
                Err(reason) => return Err(ConnError(reason, "a frame larger than SETTINGS_MAX_FRAME_SIZE")),
            };
            st.on_frame(f)?;
        }
    }

    /// Ends the connection with a connection error: GOAWAY, and every stream fails with it.
    fn connection_error(&mut self, e: ConnError) {
        tracing::debug!(reason = %e.0, error = e.1, "upstream HTTP/2 connection error");
        let mut st = self.shared.lock();
        frame::goaway(&mut st.write, 0, e.0);
        st.fail_all(H2Error::protocol(e.0, e.1));
        drop(st);
        self.shared.mark_closed();
        // Nothing more is read: the GOAWAY goes out, then the connection closes.
        self.closing = true;
    }

    /// The connection failed (I/O) or the upstream closed it: every stream fails.
    fn lost(&mut self, e: H2Error) {
        tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
        self.shared.mark_closed();
        self.shared.lock().fail_all(e);
    }

    /// Keep-alive: with streams open and nothing read for a whole interval, PING; no answer in time fails
    /// the connection as timed out.
    fn poll_keep_alive(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        while self.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            if let Some(deadline) = self.ping_deadline {
                let answered = !self.shared.lock().ping_outstanding;
                if !answered && now >= deadline {
                    return Poll::Ready(());
                }
                self.ping_deadline = None;
            }
            let mut st = self.shared.lock();
            if self.reads == 0 && st.has_streams() && !st.ping_outstanding {
                frame::ping(&mut st.write, *b"infergat", false);
                st.ping_outstanding = true;
                st.wake_driver();
                self.ping_deadline = Some(now + KEEP_ALIVE_TIMEOUT);
                self.timer.as_mut().reset(now + KEEP_ALIVE_TIMEOUT);
            } else {
                self.timer.as_mut().reset(now + KEEP_ALIVE_INTERVAL);
            }
            self.reads = 0;
        }
        Poll::Pending
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Future for Driver<T> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            if this.take_writes(cx) || this.unflushed {
                match this.poll_write_out(cx) {
                    Poll::Ready(Ok(())) => continue,
                    Poll::Ready(Err(e)) => {
                        this.lost(H2Error::io(e));
                        return Poll::Ready(());
                    }
                    Poll::Pending => {}
                }
            }
            if this.closing {
                if this.written < this.out.len() || this.unflushed {
                    return Poll::Pending;
                }
                let _ = Pin::new(&mut this.io).poll_shutdown(cx);
                return Poll::Ready(());
            }
            match this.poll_read_in(cx) {
                Poll::Ready(Ok(true)) => {
                    if let Err(e) = this.handle_frames() {
                        this.connection_error(e);
                    }
                    continue;
                }
                Poll::Ready(Ok(false)) => {
                    this.lost(H2Error::closed());
                    return Poll::Ready(());
                }
                Poll::Ready(Err(e)) => {
                    this.lost(H2Error::io(e));
                    return Poll::Ready(());
                }
                Poll::Pending => {}
            }
            if this.poll_keep_alive(cx).is_ready() {
                tracing::debug!("upstream HTTP/2 connection closed: keep-alive PING unanswered");
                this.shared.mark_closed();
                this.shared.lock().fail_all(H2Error::keep_alive_timeout());
                return Poll::Ready(());
            }
            // Nothing to read; writes are out or waiting for the socket. A request queueing frames wakes us.
            return Poll::Pending;
        }
    }
}
