//! Hostile upstreams, written here frame by frame over real sockets: HTTP/2 peers that flood CONTINUATION,
//! PING or SETTINGS frames, send header-list bombs, abuse flow control (zero-increment WINDOW_UPDATEs, data
//! beyond every window), or never end their response; HTTP/1.1 peers whose head never ends. Each test checks
//! what the caller gets (status), that it comes in bounded time, and that the gateway's CPU and memory
//! settle once the attack is over.
//!
//! The tests take turns (one lock): CPU and memory are read for the whole test process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dataplane_support;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dataplane_support::*;
use http::Request;
use http_body_util::Full;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, mpsc};

/// One hostile test at a time: CPU and memory are measured for the process.
static SERIAL: Mutex<()> = Mutex::const_new(());

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const CANCEL: u32 = 0x8;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// A frame as the hostile upstream read it: type, flags, stream, payload.
type Frame = (u8, u8, u32, Vec<u8>);

/// The CPU time and resident memory of this process.
struct Usage {
    cpu: Duration,
    rss: u64,
}

fn usage() -> Usage {
    // /proc/self/stat: fields 14 and 15 (utime, stime) in clock ticks, after the parenthesised name.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    Usage {
        // USER_HZ is 100 on Linux.
        cpu: Duration::from_millis(ticks * 10),
        rss: pages * 4096,
    }
}

/// Asserts that the process is quiet (under a fifth of a core over half a second, the attacker gone or
/// stalled) and that its memory grew by less than `max_growth` since `before`.
async fn assert_settled(what: &str, before: &Usage, max_growth: u64) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = usage();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let end = usage();
    let busy = end.cpu.saturating_sub(start.cpu);
    assert!(
        busy < Duration::from_millis(100),
        "{what}: the process kept busy for {busy:?} of 500 ms after the attack"
    );
    let growth = end.rss.saturating_sub(before.rss);
    assert!(
        growth < max_growth,
        "{what}: resident memory grew by {} KiB",
        growth >> 10
    );
}

/// The upstream's end of one HTTP/2 connection: it has read the gateway's preface and sent its SETTINGS.
struct H2Peer {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
}

impl H2Peer {
    async fn frame(&mut self) -> Option<Frame> {
        read_frame(&mut self.rd).await
    }

    /// Reads until the gateway opens a stream; its id.
    async fn request(&mut self) -> u32 {
        loop {
            match self.frame().await {
                Some((HEADERS, _, stream, _)) => return stream,
                Some(_) => {}
                None => panic!("the gateway closed before sending a request"),
            }
        }
    }

    /// Reads every frame from now until the gateway closes the connection (or `limit` passes), in a task.
    fn collect(self, limit: Duration) -> (tokio::task::JoinHandle<Vec<Frame>>, OwnedWriteHalf) {
        let mut rd = self.rd;
        let reader = tokio::spawn(async move {
            let mut frames = Vec::new();
            let _ = tokio::time::timeout(limit, async {
                while let Some(f) = read_frame(&mut rd).await {
                    frames.push(f);
                }
            })
            .await;
            frames
        });
        (reader, self.wr)
    }
}

async fn read_frame(rd: &mut OwnedReadHalf) -> Option<Frame> {
    let mut head = [0u8; 9];
    rd.read_exact(&mut head).await.ok()?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    rd.read_exact(&mut payload).await.ok()?;
    Some((head[3], head[4], stream, payload))
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK integer with a `prefix`-bit prefix and the first byte's high bits `flags` (RFC 7541 §5.1).
fn hpack_int(out: &mut Vec<u8>, flags: u8, prefix: u32, mut value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A literal header field with a spelled-out name, added to the table (`index`) or not (RFC 7541 §6.2).
fn literal(name: &str, value: &[u8], index: bool) -> Vec<u8> {
    let mut out = vec![if index { 0x40 } else { 0x00 }];
    hpack_int(&mut out, 0, 7, name.len());
    out.extend_from_slice(name.as_bytes());
    hpack_int(&mut out, 0, 7, value.len());
    out.extend_from_slice(value);
    out
}

/// A hostile HTTP/2 upstream: each connection is handed to `attack` once the preface and SETTINGS are
/// exchanged; what `attack` returns (the frames it saw) comes out of the channel.
async fn h2_upstream<F, Fut>(attack: F) -> (SocketAddr, mpsc::UnboundedReceiver<Vec<Frame>>)
where
    F: Fn(H2Peer) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<Frame>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let attack = Arc::new(attack);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (attack, tx) = (Arc::clone(&attack), tx.clone());
            tokio::spawn(async move {
                let (mut rd, mut wr) = tcp.into_split();
                let mut preface = [0u8; 24];
                if rd.read_exact(&mut preface).await.is_err() {
                    return;
                }
                if wr.write_all(&frame(SETTINGS, 0, 0, &[])).await.is_err() {
                    return;
                }
                let _ = tx.send(attack(H2Peer { rd, wr }).await);
            });
        }
    });
    (addr, rx)
}

/// One route to `up` over h2c, answered within `timeout`, on one data worker.
fn h2_route(up: SocketAddr, timeout: &str) -> String {
    format!(
        r#"
listeners:
  worker_threads: 1
upstreams:
  - name: up
    endpoints: ["{up}"]
    protocol: h2c
    connections_per_endpoint: 1
routes:
  - name: all
    timeout: {timeout}
    destinations: [{{ upstream: up }}]
"#
    )
}

/// GETs `/` through the gateway: the status, the body, and how long the answer took.
async fn get(gw: &infergate_gateway::server::Gateway) -> (u16, String, Duration) {
    let req = Request::get(format!("http://{}/", gw.data_addr()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let start = Instant::now();
    let (parts, body) = tokio::time::timeout(Duration::from_secs(10), send(&http1_client(), req))
        .await
        .expect("the gateway answered within 10 s");
    (
        parts.status.as_u16(),
        String::from_utf8_lossy(&body).into_owned(),
        start.elapsed(),
    )
}

/// The GOAWAY among `frames`: its error code.
fn goaway(frames: &[Frame]) -> Option<u32> {
    frames
        .iter()
        .find(|f| f.0 == GOAWAY)
        .map(|f| u32::from_be_bytes([f.3[4], f.3[5], f.3[6], f.3[7]]))
}

/// The RST_STREAMs among `frames`: stream and error code.
fn resets(frames: &[Frame]) -> Vec<(u32, u32)> {
    frames
        .iter()
        .filter(|f| f.0 == RST_STREAM)
        .map(|f| (f.2, u32::from_be_bytes([f.3[0], f.3[1], f.3[2], f.3[3]])))
        .collect()
}

#[tokio::test]
async fn a_continuation_flood_is_cut_off_with_goaway() {
    let _turn = SERIAL.lock().await;
    let before = usage();
    let (up, mut seen) = h2_upstream(|mut peer| async move {
        let stream = peer.request().await;
        // A head that never ends: `:status: 200`, then empty CONTINUATION frames for as long as the
        // gateway reads them.
        let (reader, mut wr) = peer.collect(Duration::from_secs(5));
        let mut out = frame(HEADERS, 0, stream, &[0x88]);
        let empty = frame(CONTINUATION, 0, stream, &[]);
        for _ in 0..4096 {
            out.extend_from_slice(&empty);
        }
        for _ in 0..1000 {
            if wr.write_all(&out).await.is_err() {
                break;
            }
        }
        drop(wr);
        reader.await.unwrap()
    })
    .await;
    let gw = gateway(&h2_route(up, "5s")).await;
    let (status, body, took) = get(&gw).await;
    assert_eq!(status, 502, "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let frames = seen.recv().await.unwrap();
    let code = goaway(&frames).expect("the gateway sent GOAWAY");
    assert!(
        code == ENHANCE_YOUR_CALM || code == PROTOCOL_ERROR,
        "GOAWAY code {code:#x}"
    );
    assert_settled("CONTINUATION flood", &before, 64 << 20).await;
}

#[tokio::test]
async fn header_bombs_reset_the_stream_without_growing_memory() {
    let _turn = SERIAL.lock().await;
    let before = usage();
    let (up, mut seen) = h2_upstream(|mut peer| async move {
        let stream = peer.request().await;
        // HPACK bomb: one 4 KiB header enters the table, then 4,000 one-byte references to it would
        // decode to 16 MiB of headers.
        let mut block = vec![0x88];
        block.extend(literal("x-bomb", &[b'a'; 4000], true));
        block.extend(std::iter::repeat_n(0xbe, 4000));
        let (reader, mut wr) = peer.collect(Duration::from_secs(1));
        let _ = wr
            .write_all(&frame(HEADERS, END_HEADERS | END_STREAM, stream, &block))
            .await;
        let frames = reader.await.unwrap();
        drop(wr);
        frames
    })
    .await;
    let gw = gateway(&h2_route(up, "5s")).await;
    let (status, body, took) = get(&gw).await;
    assert_eq!(status, 502, "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let frames = seen.recv().await.unwrap();
    assert!(
        resets(&frames).iter().any(|&(_, code)| code == PROTOCOL_ERROR)
            || goaway(&frames).is_some_and(|c| c != 0),
        "the gateway refused the header list: {:?}",
        frames.iter().map(|f| f.0).collect::<Vec<_>>()
    );

    // A plain header list over the 16 KiB limit, spread over CONTINUATION frames, is refused the same way.
    let (up, _seen) = h2_upstream(|mut peer| async move {
        let stream = peer.request().await;
        let mut block = vec![0x88];
        for i in 0..40 {
            block.extend(literal(&format!("x-big-{i}"), &[b'b'; 1000], false));
        }
        let chunks: Vec<&[u8]> = block.chunks(8 << 10).collect();
        let mut out = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let (kind, mut flags) = if i == 0 {
                (HEADERS, END_STREAM)
            } else {
                (CONTINUATION, 0)
            };
            if i + 1 == chunks.len() {
                flags |= END_HEADERS;
            }
            out.extend(frame(kind, flags, stream, c));
        }
        let (reader, mut wr) = peer.collect(Duration::from_secs(1));
        let _ = wr.write_all(&out).await;
        reader.await.unwrap()
    })
    .await;
    let gw2 = gateway(&h2_route(up, "5s")).await;
    let (status, body, took) = get(&gw2).await;
    assert_eq!(status, 502, "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert_settled("header bombs", &before, 64 << 20).await;
}

#[tokio::test]
async fn zero_increment_window_updates_end_the_connection_once_not_a_reset_each() {
    let _turn = SERIAL.lock().await;
    let before = usage();
    let (up, mut seen) = h2_upstream(|mut peer| async move {
        let stream = peer.request().await;
        let (reader, mut wr) = peer.collect(Duration::from_secs(1));
        let mut out = Vec::new();
        for _ in 0..10_000 {
            out.extend(frame(WINDOW_UPDATE, 0, stream, &0u32.to_be_bytes()));
        }
        let _ = wr.write_all(&out).await;
        let frames = reader.await.unwrap();
        drop(wr);
        frames
    })
    .await;
    let gw = gateway(&h2_route(up, "5s")).await;
    let (status, body, took) = get(&gw).await;
    assert_eq!(status, 502, "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let frames = seen.recv().await.unwrap();
    // h2 is stricter than RFC 9113 §6.9 asks (a stream error): any zero increment ends the connection with
    // one GOAWAY, and nothing is answered frame by frame.
    assert!(resets(&frames).len() <= 1, "{:?}", resets(&frames));
    assert_eq!(goaway(&frames), Some(PROTOCOL_ERROR));

    // On the connection (stream 0), a zero increment is a connection error: GOAWAY.
    let (up, mut seen) = h2_upstream(|mut peer| async move {
        peer.request().await;
        let (reader, mut wr) = peer.collect(Duration::from_secs(2));
        let _ = wr
            .write_all(&frame(WINDOW_UPDATE, 0, 0, &0u32.to_be_bytes()))
            .await;
        let frames = reader.await.unwrap();
        drop(wr);
        frames
    })
    .await;
    let gw2 = gateway(&h2_route(up, "5s")).await;
    let (status, body, _) = get(&gw2).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(goaway(&seen.recv().await.unwrap()), Some(PROTOCOL_ERROR));
    assert_settled("zero-increment WINDOW_UPDATEs", &before, 64 << 20).await;
}

#[tokio::test]
async fn ping_and_settings_floods_stall_only_their_connection() {
    let _turn = SERIAL.lock().await;
    for kind in [PING, SETTINGS] {
        let before = usage();
        let (up, _seen) = h2_upstream(move |mut peer| async move {
            peer.request().await;
            // Floods without reading a single answer. The gateway stops reading while its answers back up,
            // so this write blocks; it ends when the gateway closes the connection.
            let one = if kind == PING {
                frame(PING, 0, 0, b"flooding")
            } else {
                frame(SETTINGS, 0, 0, &[0, 0x3, 0, 0, 0, 100])
            };
            let mut out = Vec::new();
            for _ in 0..8192 {
                out.extend_from_slice(&one);
            }
            let (mut rd, mut wr) = (peer.rd, peer.wr);
            for _ in 0..1000 {
                if wr.write_all(&out).await.is_err() {
                    break;
                }
            }
            // Keep the socket open, unread, until the test is over.
            let _ = rd.read_u8().await;
            Vec::new()
        })
        .await;
        let gw = gateway(&h2_route(up, "1s")).await;
        let (status, body, took) = get(&gw).await;
        assert_eq!(status, 504, "{body}");
        assert!(took < Duration::from_secs(3), "answered after {took:?}");
        // The flood is stalled, not served: the process is quiet while the attacker still holds on.
        assert_settled(
            if kind == PING {
                "PING flood"
            } else {
                "SETTINGS flood"
            },
            &before,
            64 << 20,
        )
        .await;
    }
}

#[tokio::test]
async fn a_response_that_never_starts_times_out_and_its_stream_is_cancelled() {
    let _turn = SERIAL.lock().await;
    let before = usage();
    let (up, mut seen) = h2_upstream(|mut peer| async move {
        peer.request().await;
        let (reader, wr) = peer.collect(Duration::from_millis(1500));
        let frames = reader.await.unwrap();
        drop(wr);
        frames
    })
    .await;
    let gw = gateway(&h2_route(up, "300ms")).await;
    let (status, body, took) = get(&gw).await;
    assert_eq!(status, 504, "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    let frames = seen.recv().await.unwrap();
    assert!(
        resets(&frames).iter().any(|&(_, code)| code == CANCEL),
        "{:?}",
        resets(&frames)
    );
    assert_settled("a response that never starts", &before, 64 << 20).await;
}

#[tokio::test]
async fn an_endless_response_is_held_to_the_window_and_freed_when_cut() {
    let _turn = SERIAL.lock().await;
    let before = usage();
    let (up, mut seen) = h2_upstream(|mut peer| async move {
        let stream = peer.request().await;
        // A response that never ends and ignores flow control: DATA for as long as the socket takes it.
        let (reader, mut wr) = peer.collect(Duration::from_secs(3));
        let _ = wr.write_all(&frame(HEADERS, END_HEADERS, stream, &[0x88])).await;
        let chunk = frame(DATA, 0, stream, &[b'x'; 16 << 10]);
        let mut out = Vec::new();
        for _ in 0..16 {
            out.extend_from_slice(&chunk);
        }
        // At most 64 MiB.
        for _ in 0..256 {
            if wr.write_all(&out).await.is_err() {
                break;
            }
        }
        drop(wr);
        reader.await.unwrap()
    })
    .await;
    let gw = gateway(&h2_route(up, "5s")).await;
    // A caller that reads the head and then nothing for a while.
    let mut client = TcpStream::connect(gw.data_addr()).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: gw\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 12];
    client.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The gateway took in no more than its window: past it the stream is reset and the caller's response
    // cut (no final chunk), in bounded time.
    let start = Instant::now();
    let rest = read_until_closed(&mut client).await;
    assert!(
        !rest.ends_with("0\r\n\r\n"),
        "the cut response must not look whole"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    let frames = seen.recv().await.unwrap();
    assert!(
        resets(&frames)
            .iter()
            .any(|&(_, code)| code == FLOW_CONTROL_ERROR || code == CANCEL)
            || goaway(&frames) == Some(FLOW_CONTROL_ERROR),
        "{:?}",
        resets(&frames)
    );
    eventually_json_zero(&gw).await;
    assert_settled("an endless response", &before, 64 << 20).await;
}

/// Waits until the upstream's endpoint has no outstanding request (its slot was freed).
async fn eventually_json_zero(gw: &infergate_gateway::server::Gateway) {
    for _ in 0..100 {
        let (_, body) = admin_get(gw, "/upstreams").await;
        if body.contains(r#""outstanding":0"#) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the endpoint kept an outstanding request");
}

/// A hostile HTTP/1.1 upstream: it reads the request head and writes what `answer` produces, a piece at a
/// time, `pause` apart.
async fn h1_upstream(pieces: fn(usize) -> Option<Vec<u8>>, pause: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut chunk).await {
                        Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                        _ => return,
                    }
                }
                let mut i = 0;
                while let Some(piece) = pieces(i) {
                    if tcp.write_all(&piece).await.is_err() {
                        return;
                    }
                    i += 1;
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
                let _ = tcp.read(&mut chunk).await;
            });
        }
    });
    addr
}

fn h1_route(up: SocketAddr, timeout: &str) -> String {
    h2_route(up, timeout).replace("protocol: h2c", "protocol: http1")
}

#[tokio::test]
async fn http1_heads_that_never_end_are_refused_or_timed_out() {
    let _turn = SERIAL.lock().await;
    let before = usage();
    // Header lines without end, as fast as the gateway reads them: refused at the head size limit.
    let up = h1_upstream(
        |i| {
            Some(if i == 0 {
                b"HTTP/1.1 200 OK\r\n".to_vec()
            } else if i < 100_000 {
                b"x-flood: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n".repeat(64)
            } else {
                return None;
            })
        },
        Duration::ZERO,
    )
    .await;
    let gw = gateway(&h1_route(up, "5s")).await;
    let (status, body, took) = get(&gw).await;
    assert_eq!(status, 502, "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");

    // A head dribbled a byte every 50 ms: the route's timeout ends the wait.
    let up = h1_upstream(
        |i| (i < 10_000).then(|| vec![b"HTTP/1.1 200 OK\r\nx-slow: "[i.min(24)]]),
        Duration::from_millis(50),
    )
    .await;
    let gw2 = gateway(&h1_route(up, "500ms")).await;
    let (status, body, took) = get(&gw2).await;
    assert_eq!(status, 504, "{body}");
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert_settled("HTTP/1.1 heads that never end", &before, 64 << 20).await;
}
