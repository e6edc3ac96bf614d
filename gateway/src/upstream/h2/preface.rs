//! Watches the first bytes an upstream sends for the frame header of its HTTP/2 SETTINGS, so a peer that
//! speaks something else (an HTTP/1.1 server answering the preface with `400`) fails the handshake with an
//! error that names the fix, not as a frame-size error on the first request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The length of an HTTP/2 frame header.
const FRAME_HEADER: usize = 9;
/// The SETTINGS frame type.
const SETTINGS: u8 = 0x4;

/// What the upstream's first frame header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Preface {
    /// Fewer than a frame header's bytes have arrived.
    Waiting,
    /// A SETTINGS frame (not an acknowledgement) on stream 0.
    Settings,
    /// Anything else: the peer is not an HTTP/2 server.
    Other,
}

/// The verdict, shared between the connection's I/O and the handshake that waits for it.
#[derive(Debug, Default, Clone)]
pub(super) struct PrefaceSeen(Arc<AtomicU8>);

impl PrefaceSeen {
    pub(super) fn get(&self) -> Preface {
        match self.0.load(Ordering::Acquire) {
            1 => Preface::Settings,
            2 => Preface::Other,
            _ => Preface::Waiting,
        }
    }

    fn set(&self, p: Preface) {
        let v = match p {
            Preface::Waiting => 0,
            Preface::Settings => 1,
            Preface::Other => 2,
        };
        self.0.store(v, Ordering::Release);
    }
}

/// An upstream connection whose first [`FRAME_HEADER`] bytes read are checked; after them, reads pass
/// straight through.
pub(super) struct PrefaceWatch<T> {
    io: T,
    head: [u8; FRAME_HEADER],
    /// Bytes of `head` filled; `FRAME_HEADER` once the verdict is in.
    seen: usize,
    verdict: PrefaceSeen,
}

impl<T> PrefaceWatch<T> {
    pub(super) fn new(io: T, verdict: PrefaceSeen) -> PrefaceWatch<T> {
        PrefaceWatch {
            io,
            head: [0; FRAME_HEADER],
            seen: 0,
            verdict,
        }
    }

    fn inspect(&mut self, read: &[u8]) {
        let n = read.len().min(FRAME_HEADER - self.seen);
        self.head[self.seen..self.seen + n].copy_from_slice(&read[..n]);
        self.seen += n;
        if self.seen == FRAME_HEADER {
            let ack = self.head[4] & 0x1 != 0;
            let stream = u32::from_be_bytes([self.head[5], self.head[6], self.head[7], self.head[8]]);
            let ok = self.head[3] == SETTINGS && !ack && stream & 0x7fff_ffff == 0;
            self.verdict
                .set(if ok { Preface::Settings } else { Preface::Other });
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for PrefaceWatch<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.seen == FRAME_HEADER {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let filled = buf.filled();
            // Copied out so that `inspect` may borrow `this` mutably (at most 9 bytes).
            let mut fresh = [0u8; FRAME_HEADER];
            let n = (filled.len() - before).min(FRAME_HEADER);
            fresh[..n].copy_from_slice(&filled[before..before + n]);
            this.inspect(&fresh[..n]);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for PrefaceWatch<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict_of(chunks: &[&[u8]]) -> Preface {
        let seen = PrefaceSeen::default();
        let mut w = PrefaceWatch::new((), seen.clone());
        for c in chunks {
            w.inspect(c);
        }
        seen.get()
    }

    #[test]
    fn a_settings_frame_header_passes_however_it_is_cut() {
        let head = [0, 0, 6, SETTINGS, 0, 0, 0, 0, 0];
        assert_eq!(verdict_of(&[&head]), Preface::Settings);
        assert_eq!(
            verdict_of(&[&head[..1], &head[1..5], &head[5..]]),
            Preface::Settings
        );
        assert_eq!(verdict_of(&[&head[..8]]), Preface::Waiting);
    }

    #[test]
    fn an_http1_answer_a_settings_ack_or_a_stream_frame_is_not_a_preface() {
        assert_eq!(verdict_of(&[b"HTTP/1.1 400 Bad Request\r\n"]), Preface::Other);
        assert_eq!(verdict_of(&[&[0, 0, 0, SETTINGS, 1, 0, 0, 0, 0]]), Preface::Other);
        assert_eq!(verdict_of(&[&[0, 0, 6, SETTINGS, 0, 0, 0, 0, 1]]), Preface::Other);
    }
}
