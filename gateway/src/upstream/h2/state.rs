//! What a connection and its streams know, under one lock: the frames waiting to be written, the HPACK
//! contexts, flow-control windows both ways, each stream's response as it arrives, and the handling of every
//! frame the upstream sends.
//!
//! The lock is held for short, non-blocking steps only (encode a request, take a response, handle the frames
//! of one read). A connection belongs to one data worker (`worker.rs`), so it is uncontended in service.
//! Wakers are woken with the lock held: every waker here is a task's, which only schedules the task.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Waker;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, Method, StatusCode};

use super::error::{H2Error, Reason};
use super::frame::{self, Frame, flag, kind, setting};
use super::hpack::{DecodeError, Decoder, Encoder};
use super::{CONNECTION_WINDOW, HEADER_TABLE_SIZE, MAX_HEADER_LIST_SIZE, STREAM_WINDOW};

/// The largest header block assembled from HEADERS and CONTINUATION frames: a bound on what a peer can
/// make the gateway buffer (CONTINUATION floods).
const MAX_HEADER_BLOCK: usize = 4 * MAX_HEADER_LIST_SIZE as usize;

/// What a peer that does not open with SETTINGS is told (and the requests on it fail with).
pub(super) const NOT_HTTP2: &str = "the upstream did not start with an HTTP/2 SETTINGS frame (is it speaking HTTP/2? set its protocol to http1)";

/// The most answers to the upstream's control frames (PING and SETTINGS acknowledgements) queued while the
/// connection task has not written them: beyond it the upstream floods the gateway with frames it does not
/// read the answers to.
const MAX_QUEUED_REPLIES: usize = 10_000;

/// The stream limit assumed until the upstream's SETTINGS say otherwise.
const INITIAL_MAX_STREAMS: usize = 100;

/// The connection's shared state and a lock-free "no new streams" flag for the pool.
pub(super) struct Shared {
    state: Mutex<State>,
    closed: AtomicBool,
}

impl Shared {
    pub(super) fn new() -> Shared {
        Shared {
            state: Mutex::new(State::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// The state. A panic while it was held leaves nothing half-done that matters more than serving on.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the connection takes no new streams (GOAWAY, failure, shutdown).
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(super) fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// A response head as it arrived.
pub(super) struct ResponseHead {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
}

/// One stream, from the request's HEADERS until both its reader and the protocol are done with it.
pub(super) struct Stream {
    /// The response head, until the request takes it.
    pub(super) head: Option<ResponseHead>,
    /// A final (non-1xx) head arrived.
    got_head: bool,
    /// Response data not yet read.
    pub(super) data: VecDeque<Bytes>,
    pub(super) trailers: Option<HeaderMap>,
    /// END_STREAM arrived.
    pub(super) recv_end: bool,
    /// The stream failed (reset either way, or the connection failed).
    pub(super) error: Option<H2Error>,
    /// How much more the upstream may send on this stream before we give window back.
    recv_window: i64,
    /// Read by the caller, not yet given back to the upstream.
    consumed: u32,
    /// The task waiting for the response head or body.
    pub(super) reader: Option<Waker>,
    /// The response future or body was dropped or has ended: nobody reads this stream any more.
    reader_gone: bool,
    /// How much the stream may still send.
    pub(super) send_window: i64,
    /// END_STREAM was sent (or the stream was reset): nothing more goes out.
    pub(super) send_end: bool,
    /// The request body's writer, waiting for window.
    pub(super) writer: Option<Waker>,
    /// Counted against the upstream's stream limit.
    active: bool,
}

impl Stream {
    fn new(send_window: i64, send_end: bool) -> Stream {
        Stream {
            head: None,
            got_head: false,
            data: VecDeque::new(),
            trailers: None,
            recv_end: false,
            error: None,
            recv_window: i64::from(STREAM_WINDOW),
            consumed: 0,
            reader: None,
            reader_gone: false,
            send_window,
            send_end,
            writer: None,
            active: true,
        }
    }

    /// Fails the stream with `e` (nothing more is sent or received) and wakes whoever waits on it.
    fn fail(&mut self, e: H2Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        self.send_end = true;
        self.wake();
    }

    fn wake(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    /// Whether the body has been read to its end: no data left, END_STREAM seen, trailers taken.
    pub(super) fn fully_read(&self) -> bool {
        self.recv_end && self.data.is_empty() && self.trailers.is_none()
    }
}

/// The upstream's SETTINGS that bind us.
struct PeerSettings {
    max_streams: usize,
    initial_window: i64,
    max_frame: usize,
}

/// A header block being assembled from HEADERS and CONTINUATION frames.
struct PartialBlock {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

/// Stream ids hash by a multiply: they are distinct odd numbers, which the map's default SipHash would
/// spend more time on than the lookup itself.
#[derive(Default)]
pub(super) struct StreamIdHasher(u64);

impl Hasher for StreamIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A connection error: the GOAWAY reason and what went wrong.
pub(super) struct ConnError(pub(super) Reason, pub(super) &'static str);

/// Everything about the connection behind the lock.
pub(super) struct State {
    /// Frames waiting for the connection task to write them.
    pub(super) write: Vec<u8>,
    /// The connection task, woken when there is something to write or the connection should end.
    pub(super) driver: Option<Waker>,
    encoder: Encoder,
    decoder: Decoder,
    next_id: u32,
    pub(super) streams: HashMap<u32, Stream, BuildHasherDefault<StreamIdHasher>>,
    /// Streams counted against the upstream's limit.
    active: usize,
    peer: PeerSettings,
    /// The connection's send window.
    send_window: i64,
    /// How much more the upstream may send on the connection.
    recv_window: i64,
    /// Read by callers (or dropped), not yet given back on the connection.
    recv_consumed: u32,
    /// Requests waiting for the upstream's stream limit to allow another stream.
    slot_waiters: Vec<Waker>,
    /// The upstream's GOAWAY: the last stream it will process.
    goaway: Option<u32>,
    /// The connection failed; every stream fails with this.
    pub(super) failed: Option<H2Error>,
    /// The pool let go of the connection: it ends once its last stream does.
    pub(super) pool_gone: bool,
    /// The upstream's SETTINGS (its preface) arrived.
    got_settings: bool,
    /// The handshake, waiting for the upstream's preface.
    pub(super) preface_waiter: Option<Waker>,
    partial: Option<PartialBlock>,
    /// A request went out already (see `index_request_id_name` in the module root).
    pub(super) sent_any: bool,
    /// A keep-alive PING awaits its answer.
    pub(super) ping_outstanding: bool,
    /// Answers to the upstream's control frames queued since the connection task last took the write buffer.
    pub(super) queued_replies: usize,
}

impl State {
    fn new() -> State {
        let mut write = Vec::with_capacity(16 << 10);
        write.extend_from_slice(frame::PREFACE);
        frame::settings(
            &mut write,
            &[
                (setting::ENABLE_PUSH, 0),
                (setting::INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                (setting::MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST_SIZE),
            ],
        );
        frame::window_update(&mut write, 0, CONNECTION_WINDOW - 65_535);
        State {
            write,
            driver: None,
            encoder: Encoder::new(),
            decoder: Decoder::new(HEADER_TABLE_SIZE as usize),
            next_id: 1,
            streams: HashMap::default(),
            active: 0,
            peer: PeerSettings {
                max_streams: INITIAL_MAX_STREAMS,
                initial_window: 65_535,
                max_frame: frame::DEFAULT_MAX_FRAME_SIZE as usize,
            },
            send_window: 65_535,
            recv_window: i64::from(CONNECTION_WINDOW),
            recv_consumed: 0,
            slot_waiters: Vec::new(),
            goaway: None,
            failed: None,
            pool_gone: false,
            got_settings: false,
            preface_waiter: None,
            partial: None,
            sent_any: false,
            ping_outstanding: false,
            queued_replies: 0,
        }
    }

    /// Wakes the connection task (there is something to write, or it should look at its state).
    pub(super) fn wake_driver(&self) {
        if let Some(w) = &self.driver {
            w.wake_by_ref();
        }
    }

    /// Why no new stream can open: the connection failed, received GOAWAY, or ran out of stream ids.
    pub(super) fn refuses_streams(&self) -> Option<H2Error> {
        if let Some(e) = &self.failed {
            return Some(e.clone());
        }
        if self.goaway.is_some() || self.pool_gone || self.next_id > i32::MAX as u32 {
            return Some(H2Error::go_away(Reason::NO_ERROR, false));
        }
        None
    }

    /// Whether the upstream's stream limit allows another stream now; if not, `waker` is woken when it may.
    pub(super) fn has_stream_slot(&mut self, waker: Option<&Waker>) -> bool {
        if self.active < self.peer.max_streams {
            return true;
        }
        if let Some(w) = waker {
            self.slot_waiters.push(w.clone());
        }
        false
    }

    /// Opens a stream and queues its HEADERS; returns its id.
    pub(super) fn open_stream(
        &mut self,
        method: &Method,
        scheme: &str,
        authority: Option<&str>,
        path: &str,
        headers: &HeaderMap,
        end_stream: bool,
    ) -> u32 {
        let id = self.next_id;
        self.next_id += 2;
        let at = frame::begin_headers(&mut self.write);
        self.encoder
            .encode_request(method, scheme, authority, path, headers, &mut self.write);
        frame::finish_headers(&mut self.write, at, id, end_stream, self.peer.max_frame);
        self.streams
            .insert(id, Stream::new(self.peer.initial_window, end_stream));
        self.active += 1;
        self.sent_any = true;
        self.wake_driver();
        id
    }

    /// How many bytes of body the stream may send now (0: wait for window).
    pub(super) fn send_capacity(&self, stream: &Stream) -> usize {
        let window = stream.send_window.min(self.send_window);
        usize::try_from(window).unwrap_or(0)
    }

    /// Queues `data` (which fits the windows: see [`State::send_capacity`]) as DATA frames on stream `id`.
    pub(super) fn send_data(&mut self, id: u32, data: &[u8], end_stream: bool) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if stream.send_end {
            return;
        }
        let len = data.len() as i64;
        stream.send_window -= len;
        self.send_window -= len;
        let mut chunks = data.chunks(self.peer.max_frame).peekable();
        if chunks.peek().is_none() {
            frame::data(&mut self.write, id, &[], end_stream);
        }
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            frame::data(&mut self.write, id, chunk, end_stream && last);
        }
        if end_stream {
            stream.send_end = true;
            self.settle(id);
        }
        self.wake_driver();
    }

    /// Queues trailers, which end the request.
    pub(super) fn send_trailers(&mut self, id: u32, trailers: &HeaderMap) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if stream.send_end {
            return;
        }
        stream.send_end = true;
        let at = frame::begin_headers(&mut self.write);
        self.encoder.encode_trailers(trailers, &mut self.write);
        frame::finish_headers(&mut self.write, at, id, true, self.peer.max_frame);
        self.settle(id);
        self.wake_driver();
    }

    /// Resets stream `id` with `reason` (the request was abandoned, or its body failed).
    pub(super) fn reset(&mut self, id: u32, reason: Reason) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let open = !(stream.send_end && stream.recv_end) && stream.error.is_none();
        stream.fail(H2Error::reset(reason));
        if open && self.failed.is_none() {
            frame::rst_stream(&mut self.write, id, reason);
            self.wake_driver();
        }
        self.settle(id);
    }

    /// Nobody reads stream `id` any more (its response future or body was dropped, or its body ended). A
    /// stream whose response had not finished is reset, so the upstream stops working on it.
    pub(super) fn reader_done(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.reader_gone = true;
        stream.reader = None;
        let abandoned = !stream.recv_end && stream.error.is_none();
        // Data left unread still counts against the connection's window: give it back.
        let unread: usize = stream.data.drain(..).map(|d| d.len()).sum();
        self.release_connection(unread);
        if abandoned {
            self.reset(id, Reason::CANCEL);
            return;
        }
        self.settle(id);
    }

    /// Gives `n` bytes that a reader took off stream `id` back to the upstream, in WINDOW_UPDATEs once half
    /// a window has been read (fewer, larger updates; a small response never needs one).
    pub(super) fn release(&mut self, id: u32, n: usize) {
        if let Some(stream) = self.streams.get_mut(&id)
            && !stream.recv_end
        {
            stream.consumed += n as u32;
            if stream.consumed >= STREAM_WINDOW / 2 {
                frame::window_update(&mut self.write, id, stream.consumed);
                stream.recv_window += i64::from(stream.consumed);
                stream.consumed = 0;
                self.wake_driver();
            }
        }
        self.release_connection(n);
    }

    fn release_connection(&mut self, n: usize) {
        self.recv_consumed += n as u32;
        if self.recv_consumed >= CONNECTION_WINDOW / 2 {
            frame::window_update(&mut self.write, 0, self.recv_consumed);
            self.recv_window += i64::from(self.recv_consumed);
            self.recv_consumed = 0;
            self.wake_driver();
        }
    }

    /// Takes a stream out of the upstream's count once the protocol is done with it, and out of the map
    /// once its reader is too.
    fn settle(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if stream.active && stream.send_end && (stream.recv_end || stream.error.is_some()) {
            stream.active = false;
            self.active -= 1;
            for w in self.slot_waiters.drain(..) {
                w.wake();
            }
        }
        if !stream.active && stream.reader_gone {
            self.streams.remove(&id);
            if self.streams.is_empty() && (self.pool_gone || self.goaway.is_some()) {
                self.wake_driver();
            }
        }
    }

    /// Fails the connection: every stream fails with `e` (those the upstream's GOAWAY left out as unprocessed),
    /// and no new stream opens.
    pub(super) fn fail_all(&mut self, e: H2Error) {
        if self.failed.is_none() {
            self.failed = Some(e.clone());
        }
        if let Some(w) = self.preface_waiter.take() {
            w.wake();
        }
        let goaway = self.goaway;
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(stream) = self.streams.get_mut(&id) {
                let unprocessed = goaway.is_some_and(|last| id > last);
                stream.fail(if unprocessed {
                    H2Error::go_away(Reason::NO_ERROR, false)
                } else {
                    e.clone()
                });
            }
            self.settle(id);
        }
        for w in self.slot_waiters.drain(..) {
            w.wake();
        }
    }

    /// Handles one frame from the upstream. An `Err` is a connection error: the caller sends GOAWAY and
    /// fails the connection.
    pub(super) fn on_frame(&mut self, f: Frame) -> Result<(), ConnError> {
        if !self.got_settings && (f.kind != kind::SETTINGS || f.flags & flag::ACK != 0) {
            return Err(ConnError(Reason::PROTOCOL_ERROR, NOT_HTTP2));
        }
        if let Some(p) = &self.partial
            && (f.kind != kind::CONTINUATION || f.stream != p.stream)
        {
            return Err(ConnError(
                Reason::PROTOCOL_ERROR,
                "a header block was interrupted by another frame",
            ));
        }
        match f.kind {
            kind::DATA => self.on_data(f),
            kind::HEADERS => self.on_headers(f),
            kind::CONTINUATION => self.on_continuation(f),
            kind::RST_STREAM => self.on_rst_stream(&f),
            kind::SETTINGS => self.on_settings(&f),
            kind::PING => self.on_ping(&f),
            kind::GOAWAY => self.on_goaway(&f),
            kind::WINDOW_UPDATE => self.on_window_update(&f),
            kind::PUSH_PROMISE => Err(ConnError(
                Reason::PROTOCOL_ERROR,
                "PUSH_PROMISE, although push is disabled",
            )),
            kind::PRIORITY if f.stream == 0 => Err(ConnError(Reason::PROTOCOL_ERROR, "PRIORITY on stream 0")),
            // PRIORITY is advisory; unknown frame types are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    /// Refuses a stream frame on an id that cannot be one of ours (stream 0, a server-initiated id, an id
    /// not yet used); ours may be open or already done with.
    fn known_stream(&self, id: u32) -> Result<(), ConnError> {
        if id == 0 || id.is_multiple_of(2) || id >= self.next_id {
            return Err(ConnError(
                Reason::PROTOCOL_ERROR,
                "a frame on a stream the gateway never opened",
            ));
        }
        Ok(())
    }

    fn on_data(&mut self, f: Frame) -> Result<(), ConnError> {
        self.known_stream(f.stream)?;
        let len = f.payload.len();
        self.recv_window -= len as i64;
        if self.recv_window < 0 {
            return Err(ConnError(
                Reason::FLOW_CONTROL_ERROR,
                "the upstream sent more than the connection window",
            ));
        }
        let Some(data) = frame::strip_padding(f.flags, f.payload) else {
            return Err(ConnError(
                Reason::PROTOCOL_ERROR,
                "DATA padding longer than the frame",
            ));
        };
        let Some(stream) = self.streams.get_mut(&f.stream) else {
            // A stream already done with (reset, abandoned): its bytes still count on the connection.
            self.release_connection(len);
            return Ok(());
        };
        let padding = len - data.len();
        if stream.recv_end || stream.error.is_some() || stream.reader_gone {
            let state_error = stream.recv_end && stream.error.is_none();
            self.release_connection(len);
            if state_error {
                self.stream_error(
                    f.stream,
                    Reason::STREAM_CLOSED,
                    "DATA after the end of the stream",
                );
            }
            return Ok(());
        }
        stream.recv_window -= len as i64;
        if stream.recv_window < 0 {
            self.stream_error(
                f.stream,
                Reason::FLOW_CONTROL_ERROR,
                "the upstream sent more than the stream window",
            );
            self.release_connection(len);
            return Ok(());
        }
        if !stream.got_head {
            self.stream_error(f.stream, Reason::PROTOCOL_ERROR, "DATA before the response head");
            self.release_connection(len);
            return Ok(());
        }
        if !data.is_empty() {
            stream.data.push_back(data);
        }
        if f.flags & flag::END_STREAM != 0 {
            stream.recv_end = true;
        }
        stream.wake();
        if padding > 0 {
            self.release(f.stream, padding);
        }
        if f.flags & flag::END_STREAM != 0 {
            self.settle(f.stream);
        }
        Ok(())
    }

    fn on_headers(&mut self, f: Frame) -> Result<(), ConnError> {
        self.known_stream(f.stream)?;
        let Some(mut block) = frame::strip_padding(f.flags, f.payload) else {
            return Err(ConnError(
                Reason::PROTOCOL_ERROR,
                "HEADERS padding longer than the frame",
            ));
        };
        if f.flags & flag::PRIORITY != 0 {
            if block.len() < 5 {
                return Err(ConnError(
                    Reason::FRAME_SIZE_ERROR,
                    "HEADERS too short for its priority",
                ));
            }
            let _ = block.split_to(5);
        }
        let end_stream = f.flags & flag::END_STREAM != 0;
        if f.flags & flag::END_HEADERS != 0 {
            return self.on_header_block(f.stream, end_stream, &block);
        }
        self.partial = Some(PartialBlock {
            stream: f.stream,
            end_stream,
            block: BytesMut::from(&block[..]),
        });
        Ok(())
    }

    fn on_continuation(&mut self, f: Frame) -> Result<(), ConnError> {
        let Some(mut partial) = self.partial.take() else {
            return Err(ConnError(
                Reason::PROTOCOL_ERROR,
                "CONTINUATION without a header block",
            ));
        };
        if partial.block.len() + f.payload.len() > MAX_HEADER_BLOCK {
            return Err(ConnError(
                Reason::ENHANCE_YOUR_CALM,
                "a header block longer than 64 KiB (CONTINUATION flood?)",
            ));
        }
        partial.block.extend_from_slice(&f.payload);
        if f.flags & flag::END_HEADERS == 0 {
            self.partial = Some(partial);
            return Ok(());
        }
        let block = partial.block.freeze();
        self.on_header_block(partial.stream, partial.end_stream, &block)
    }

    /// A whole header block for stream `id`: the response head (1xx heads skipped), or trailers.
    fn on_header_block(&mut self, id: u32, end_stream: bool, block: &Bytes) -> Result<(), ConnError> {
        // Decoded even for a stream already done with: the HPACK table must follow the upstream's.
        let decoded = match self.decoder.decode(block, MAX_HEADER_LIST_SIZE as usize) {
            Ok(d) => Ok(d),
            Err(DecodeError::Compression(what)) => return Err(ConnError(Reason::COMPRESSION_ERROR, what)),
            Err(DecodeError::Malformed(what)) => Err(what),
            Err(DecodeError::TooLarge) => Err("a response header list larger than 16 KiB"),
        };
        let Some(stream) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if stream.error.is_some() || stream.reader_gone {
            return Ok(());
        }
        if stream.recv_end {
            self.stream_error(id, Reason::STREAM_CLOSED, "HEADERS after the end of the stream");
            return Ok(());
        }
        let decoded = match decoded {
            Ok(d) => d,
            Err(what) => {
                self.stream_error(id, Reason::PROTOCOL_ERROR, what);
                return Ok(());
            }
        };
        if !stream.got_head {
            let Some(status) = decoded.status else {
                self.stream_error(id, Reason::PROTOCOL_ERROR, "a response head without :status");
                return Ok(());
            };
            if status.is_informational() {
                if status == StatusCode::SWITCHING_PROTOCOLS || end_stream {
                    self.stream_error(id, Reason::PROTOCOL_ERROR, "an invalid informational response");
                }
                return Ok(());
            }
            stream.got_head = true;
            stream.head = Some(ResponseHead {
                status,
                headers: decoded.headers,
            });
        } else {
            if !end_stream || decoded.status.is_some() {
                self.stream_error(
                    id,
                    Reason::PROTOCOL_ERROR,
                    "trailers without END_STREAM, or with :status",
                );
                return Ok(());
            }
            stream.trailers = Some(decoded.headers);
        }
        if end_stream {
            stream.recv_end = true;
        }
        stream.wake();
        if end_stream {
            self.settle(id);
        }
        Ok(())
    }

    /// Counts one more answer to a control frame; an upstream that keeps sending them without reading the
    /// answers is cut off (as the `h2` crate does against PING and SETTINGS floods).
    fn queue_reply(&mut self) -> Result<(), ConnError> {
        self.queued_replies += 1;
        if self.queued_replies > MAX_QUEUED_REPLIES {
            return Err(ConnError(
                Reason::ENHANCE_YOUR_CALM,
                "the upstream sends control frames faster than it reads the answers (a PING or SETTINGS flood)",
            ));
        }
        Ok(())
    }

    /// A stream error found by the gateway: the stream is reset with `reason` and fails.
    fn stream_error(&mut self, id: u32, reason: Reason, what: &'static str) {
        frame::rst_stream(&mut self.write, id, reason);
        self.wake_driver();
        if let Some(stream) = self.streams.get_mut(&id) {
            stream.fail(H2Error::protocol(reason, what));
        }
        self.settle(id);
    }

    fn on_rst_stream(&mut self, f: &Frame) -> Result<(), ConnError> {
        if f.payload.len() != 4 {
            return Err(ConnError(
                Reason::FRAME_SIZE_ERROR,
                "RST_STREAM of the wrong size",
            ));
        }
        self.known_stream(f.stream)?;
        let reason = Reason(frame::be_u32(&f.payload, 0));
        if let Some(stream) = self.streams.get_mut(&f.stream) {
            // After a complete response, NO_ERROR only tells us to stop sending (RFC 9113 §8.1).
            if reason == Reason::NO_ERROR && stream.recv_end {
                stream.send_end = true;
                if let Some(w) = stream.writer.take() {
                    w.wake();
                }
            } else {
                stream.fail(H2Error::reset(reason));
            }
            self.settle(f.stream);
        }
        Ok(())
    }

    fn on_settings(&mut self, f: &Frame) -> Result<(), ConnError> {
        if f.stream != 0 {
            return Err(ConnError(Reason::PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if f.flags & flag::ACK != 0 {
            return if f.payload.is_empty() {
                Ok(())
            } else {
                Err(ConnError(
                    Reason::FRAME_SIZE_ERROR,
                    "a SETTINGS acknowledgement with a payload",
                ))
            };
        }
        if !f.payload.len().is_multiple_of(6) {
            return Err(ConnError(Reason::FRAME_SIZE_ERROR, "SETTINGS of the wrong size"));
        }
        for entry in f.payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = frame::be_u32(entry, 2);
            match id {
                setting::HEADER_TABLE_SIZE => self.encoder.set_peer_table_size(value as usize),
                setting::MAX_CONCURRENT_STREAMS => {
                    self.peer.max_streams = value as usize;
                    for w in self.slot_waiters.drain(..) {
                        w.wake();
                    }
                }
                setting::INITIAL_WINDOW_SIZE => {
                    if value > i32::MAX as u32 {
                        return Err(ConnError(
                            Reason::FLOW_CONTROL_ERROR,
                            "INITIAL_WINDOW_SIZE over 2^31-1",
                        ));
                    }
                    let delta = i64::from(value) - self.peer.initial_window;
                    self.peer.initial_window = i64::from(value);
                    for stream in self.streams.values_mut() {
                        stream.send_window += delta;
                        if delta > 0
                            && let Some(w) = stream.writer.take()
                        {
                            w.wake();
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME_SIZE..=(1 << 24) - 1).contains(&value) {
                        return Err(ConnError(Reason::PROTOCOL_ERROR, "MAX_FRAME_SIZE out of range"));
                    }
                    self.peer.max_frame = value as usize;
                }
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(ConnError(Reason::PROTOCOL_ERROR, "ENABLE_PUSH neither 0 nor 1"));
                }
                // MAX_HEADER_LIST_SIZE is advisory; unknown settings are ignored.
                _ => {}
            }
        }
        self.got_settings = true;
        if let Some(w) = self.preface_waiter.take() {
            w.wake();
        }
        self.queue_reply()?;
        frame::settings_ack(&mut self.write);
        self.wake_driver();
        Ok(())
    }

    fn on_ping(&mut self, f: &Frame) -> Result<(), ConnError> {
        if f.stream != 0 || f.payload.len() != 8 {
            return Err(ConnError(Reason::FRAME_SIZE_ERROR, "a malformed PING"));
        }
        if f.flags & flag::ACK != 0 {
            self.ping_outstanding = false;
            return Ok(());
        }
        self.queue_reply()?;
        let mut payload = [0u8; 8];
        payload.copy_from_slice(&f.payload);
        frame::ping(&mut self.write, payload, true);
        self.wake_driver();
        Ok(())
    }

    fn on_goaway(&mut self, f: &Frame) -> Result<(), ConnError> {
        if f.stream != 0 || f.payload.len() < 8 {
            return Err(ConnError(Reason::FRAME_SIZE_ERROR, "a malformed GOAWAY"));
        }
        let last = frame::be_u32(&f.payload, 0) & 0x7fff_ffff;
        let reason = Reason(frame::be_u32(&f.payload, 4));
        self.goaway = Some(self.goaway.map_or(last, |l| l.min(last)));
        let above: Vec<u32> = self.streams.keys().copied().filter(|id| *id > last).collect();
        for id in above {
            if let Some(stream) = self.streams.get_mut(&id) {
                stream.fail(H2Error::go_away(reason, false));
            }
            self.settle(id);
        }
        for w in self.slot_waiters.drain(..) {
            w.wake();
        }
        self.wake_driver();
        Ok(())
    }

    fn on_window_update(&mut self, f: &Frame) -> Result<(), ConnError> {
        if f.payload.len() != 4 {
            return Err(ConnError(
                Reason::FRAME_SIZE_ERROR,
                "WINDOW_UPDATE of the wrong size",
            ));
        }
        let increment = i64::from(frame::be_u32(&f.payload, 0) & 0x7fff_ffff);
        if f.stream == 0 {
            if increment == 0 {
                return Err(ConnError(
                    Reason::PROTOCOL_ERROR,
                    "a zero connection WINDOW_UPDATE",
                ));
            }
            self.send_window += increment;
            if self.send_window > i64::from(i32::MAX) {
                return Err(ConnError(
                    Reason::FLOW_CONTROL_ERROR,
                    "the connection window overflowed",
                ));
            }
            for stream in self.streams.values_mut() {
                if let Some(w) = stream.writer.take() {
                    w.wake();
                }
            }
            return Ok(());
        }
        self.known_stream(f.stream)?;
        let Some(stream) = self.streams.get_mut(&f.stream) else {
            return Ok(());
        };
        if increment == 0 {
            self.stream_error(f.stream, Reason::PROTOCOL_ERROR, "a zero stream WINDOW_UPDATE");
            return Ok(());
        }
        stream.send_window += increment;
        if stream.send_window > i64::from(i32::MAX) {
            self.stream_error(
                f.stream,
                Reason::FLOW_CONTROL_ERROR,
                "the stream window overflowed",
            );
            return Ok(());
        }
        if let Some(w) = stream.writer.take() {
            w.wake();
        }
        Ok(())
    }

    /// Whether the connection has nothing left to do once the pool let go of it or the upstream said GOAWAY.
    pub(super) fn finished(&self) -> bool {
        (self.pool_gone || self.goaway.is_some() || self.failed.is_some()) && self.streams.is_empty()
    }

    /// Whether the upstream's SETTINGS (its connection preface) arrived.
    pub(super) fn preface_received(&self) -> bool {
        self.got_settings
    }

    /// Whether any stream is open (keep-alive pings only then).
    pub(super) fn has_streams(&self) -> bool {
        !self.streams.is_empty()
    }
}
