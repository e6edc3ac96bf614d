//! Connections to one endpoint: a few multiplexed HTTP/2 connections, or a pool of idle HTTP/1.1 connections;
//! plain TCP or TLS. Each data worker has connections of its own (see `worker.rs`): a request is written
//! and its answer read by the connection task on the request's own thread.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use futures::future::{self, Either};
use futures::{FutureExt, TryFutureExt};
use http::{Request, Response};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::body::PoolBody;
use super::error::{FailureKind, UpstreamError};
use super::h1::{H1Body, H1Conn, IdleConns, Replay, SendError, Target};
use super::h2::{H2Body, H2Conn, H2Error, SendFailure};
use crate::proxy::Body;
use crate::upstream_protocol::{UpstreamProtocol, UpstreamTls};

/// How connections to an upstream's endpoints are made.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectSettings {
    /// HTTP/2 or HTTP/1.1.
    pub protocol: UpstreamProtocol,
    /// TLS, when the upstream wants it.
    pub tls: Option<UpstreamTls>,
    /// Time allowed for TCP connect plus TLS and HTTP/2 handshakes.
    pub connect_timeout: Duration,
    /// HTTP/2 connections kept per endpoint (requests are spread over them round-robin), divided among
    /// the data workers: each gets `h2_connections / workers`, rounded up, at least one.
    pub h2_connections: usize,
    /// Idle HTTP/1.1 connections kept per endpoint, divided among the workers the same way.
    pub h1_max_idle: usize,
    /// Data workers of the gateway: each keeps connections of its own to every endpoint.
    pub workers: usize,
}

impl Default for ConnectSettings {
    fn default() -> Self {
        ConnectSettings {
            protocol: UpstreamProtocol::Http2,
            tls: None,
            connect_timeout: Duration::from_secs(1),
            h2_connections: 2,
            h1_max_idle: 64,
            workers: 1,
        }
    }
}

/// A connection to an endpoint: TCP or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// The connections of one endpoint, one set per data worker.
pub(crate) struct Pool {
    per_worker: Box<[Conns]>,
}

/// One worker's connections to an endpoint.
enum Conns {
    /// Shared with the requests using it (a request's future holds it, not the endpoint).
    Http2(Arc<H2Pool>),
    Http1(H1Pool),
}

struct H2Pool {
    slots: Box<[H2Slot]>,
    next: AtomicUsize,
}

struct H2Slot {
    conn: ArcSwapOption<H2Conn>,
    connecting: tokio::sync::Mutex<()>,
}

struct H1Pool {
    idle: Arc<IdleConns>,
}

impl Pool {
    pub(crate) fn new(settings: &ConnectSettings) -> Pool {
        let workers = settings.workers.max(1);
        let share = |total: usize| total.div_ceil(workers).max(1);
        let conns = |_| match settings.protocol {
            UpstreamProtocol::Http2 => Conns::Http2(Arc::new(H2Pool {
                slots: (0..share(settings.h2_connections))
                    .map(|_| H2Slot {
                        conn: ArcSwapOption::empty(),
                        connecting: tokio::sync::Mutex::new(()),
                    })
                    .collect(),
                next: AtomicUsize::new(0),
            })),
            UpstreamProtocol::Http1 => Conns::Http1(H1Pool {
                idle: Arc::new(IdleConns::new(share(settings.h1_max_idle))),
            }),
        };
        Pool {
            per_worker: (0..workers).map(conns).collect(),
        }
    }

    /// Sends `req` to the endpoint at `addr` on this worker's connections, connecting when no usable
    /// connection is pooled. The request is consumed before the future is made (on a pooled connection,
    /// encoded for HTTP/1.1, its stream opened for HTTP/2), so the future holds only the exchange: it is moved
    /// on every await of the callers', and carrying the request (240 bytes) through every layer copied it
    /// over and over (callgrind of `scripts/bench-gateway.sh`'s load; docs/benchmarks-history.md, gateway, *the request handed
    /// over before its future is made*). The futures are built with combinators, not
    /// `async` blocks awaiting them: a block holds a future it captured twice (as the value captured and as
    /// the one awaited), doubling the size at every layer.
    pub(crate) fn send<'a>(
        &self,
        upstream: &'a str,
        addr: SocketAddr,
        settings: &'a ConnectSettings,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<PoolBody>, UpstreamError>> + Send + use<'a> {
        let local = &self.per_worker[crate::worker::current() % self.per_worker.len()];
        match local {
            Conns::Http2(p) => Either::Left(
                p.send(upstream, addr, settings, req)
                    .map_ok(|resp| resp.map(PoolBody::Http2)),
            ),
            Conns::Http1(p) => Either::Right(
                p.send(upstream, addr, settings, req)
                    .map_ok(|resp| resp.map(PoolBody::Http1)),
            ),
        }
    }

    /// Number of open connections, over all workers (for tests and the admin API).
    pub(crate) fn open_connections(&self) -> usize {
        self.per_worker.iter().map(Conns::open_connections).sum()
    }
}

impl Conns {
    fn open_connections(&self) -> usize {
        match self {
            Conns::Http2(p) => p
                .slots
                .iter()
                .filter(|s| s.conn.load().as_ref().is_some_and(|c| c.is_usable()))
                .count(),
            Conns::Http1(p) => p.idle.len(),
        }
    }
}

impl H2Pool {
    /// Sends `req` on the next slot's connection. Made before it is awaited: on an open connection the
    /// request's stream is opened now (see [`Pool::send`]); connecting, and reconnecting after a connection that
    /// turned out closed, are boxed.
    fn send<'a>(
        self: &Arc<Self>,
        upstream: &'a str,
        addr: SocketAddr,
        settings: &'a ConnectSettings,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<H2Body>, UpstreamError>> + Send + use<'a> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let pool = Arc::clone(self);
        let Some(conn) = self.slots[i].open_conn() else {
            return Either::Right(Box::pin(pool.send_on_slot(i, 2, upstream, addr, settings, req)));
        };
        Either::Left(conn.send(req).then(move |result| match result {
            Ok(resp) => Either::Left(future::ready(Ok(resp))),
            Err(SendFailure::Unsent(back, e)) => {
                pool.slots[i].forget_closed(&conn, upstream, addr, &e);
                Either::Right(Box::pin(pool.send_on_slot(i, 1, upstream, addr, settings, *back)))
            }
            Err(failed) => Either::Left(future::ready(Err(failed.into_error(upstream, addr)))),
        }))
    }

    /// Sends `req` on slot `i`, connecting it when its connection is gone, making at most `attempts` tries: a
    /// pooled connection may have closed (or received GOAWAY) since it was stored, and then the request comes
    /// back unsent and we connect once more.
    async fn send_on_slot(
        self: Arc<Self>,
        i: usize,
        attempts: usize,
        upstream: &str,
        addr: SocketAddr,
        settings: &ConnectSettings,
        req: Request<Body>,
    ) -> Result<Response<H2Body>, UpstreamError> {
        let slot = &self.slots[i];
        let mut req = req;
        for _ in 0..attempts {
            let conn = slot.get(upstream, addr, settings).await?;
            match conn.send(req).await {
                Ok(resp) => return Ok(resp),
                Err(SendFailure::Unsent(back, e)) => {
                    slot.forget_closed(&conn, upstream, addr, &e);
                    req = *back;
                }
                Err(failed) => return Err(failed.into_error(upstream, addr)),
            }
        }
        Err(UpstreamError::new(
            FailureKind::RefusedStream,
            upstream,
            "the HTTP/2 connection closed twice before the request could be sent",
        )
        .with_endpoint(addr))
    }
}

impl H2Slot {
    async fn get(
        &self,
        upstream: &str,
        addr: SocketAddr,
        settings: &ConnectSettings,
    ) -> Result<Arc<H2Conn>, UpstreamError> {
        if let Some(c) = self.open_conn() {
            return Ok(c);
        }
        // Boxed: connecting (TCP, TLS, HTTP/2 handshake, timeouts) is a large future, and keeping it
        // inline would make every request's future that large, to be moved around on every request.
        Box::pin(self.connect(upstream, addr, settings)).await
    }

    async fn connect(
        &self,
        upstream: &str,
        addr: SocketAddr,
        settings: &ConnectSettings,
    ) -> Result<Arc<H2Conn>, UpstreamError> {
        let _guard = self.connecting.lock().await;
        if let Some(c) = self.conn.load_full()
            && c.is_usable()
        {
            return Ok(c);
        }
        let conn = Arc::new(connect_h2(upstream, addr, settings).await?);
        self.conn.store(Some(Arc::clone(&conn)));
        Ok(conn)
    }

    /// The slot's connection, if it is open.
    fn open_conn(&self) -> Option<Arc<H2Conn>> {
        self.conn.load_full().filter(|c| c.is_usable())
    }

    /// Drops `conn`, which handed a request back unsent with `e` (it closed, or received GOAWAY), from the slot
    /// (unless another request already replaced it), so that the next request connects again.
    fn forget_closed(&self, conn: &Arc<H2Conn>, upstream: &str, addr: SocketAddr, e: &H2Error) {
        tracing::debug!(upstream, endpoint = %addr, error = %e, "pooled HTTP/2 connection is closed; reconnecting");
        let current = self.conn.load();
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            self.conn.compare_and_swap(&*current, None);
        }
    }
}

impl H1Pool {
    /// Sends `req` on an idle connection, or on a new one when none is idle. Made before it is awaited: the
    /// request is encoded now on a pooled connection (see [`Pool::send`]).
    fn send<'a>(
        &self,
        upstream: &'a str,
        addr: SocketAddr,
        settings: &'a ConnectSettings,
        req: Request<Body>,
    ) -> impl Future<Output = Result<Response<H1Body>, UpstreamError>> + Send + use<'a> {
        let target = Target {
            upstream,
            addr,
            idle: Arc::clone(&self.idle),
        };
        let first = match self.idle.take() {
            Some(conn) => Either::Left(conn.send(req, true, target.clone())),
            // Boxed for the reason given in `H2Slot::get`.
            None => Either::Right(Box::pin(send_on_new_connection(settings, req, target.clone()))),
        };
        first.then(move |result| match result {
            Ok(resp) => Either::Left(future::ready(Ok(resp))),
            Err(SendError::Stale(Some(replay), e)) => {
                tracing::debug!(upstream, endpoint = %addr, error = %e, "pooled HTTP/1.1 connection was stale; sending again");
                Either::Right(Box::pin(resend_on_new_connection(settings, replay, target)))
            }
            Err(SendError::Stale(None, e) | SendError::Failed(e)) => Either::Left(future::ready(Err(e))),
        })
    }
}

/// Sends `req` on a new HTTP/1.1 connection.
async fn send_on_new_connection(
    settings: &ConnectSettings,
    req: Request<Body>,
    target: Target<'_>,
) -> Result<Response<H1Body>, SendError> {
    let conn = connect_h1(target.upstream, target.addr, settings)
        .await
        .map_err(SendError::Failed)?;
    conn.send(req, false, target).await
}

/// Sends a request again on a new HTTP/1.1 connection, the pooled one it was written to having gone stale.
async fn resend_on_new_connection(
    settings: &ConnectSettings,
    replay: Replay,
    target: Target<'_>,
) -> Result<Response<H1Body>, UpstreamError> {
    let conn = connect_h1(target.upstream, target.addr, settings).await?;
    match conn.resend(replay, &target).await {
        Ok(resp) => Ok(resp),
        Err(SendError::Stale(_, e) | SendError::Failed(e)) => Err(e),
    }
}

async fn connect_io(
    upstream: &str,
    addr: SocketAddr,
    settings: &ConnectSettings,
) -> Result<(Box<dyn Io>, UpstreamProtocol), UpstreamError> {
    let connect = async {
        let tcp = TcpStream::connect(addr).await.map_err(|e| {
            UpstreamError::new(FailureKind::ConnectFailure, upstream, "TCP connect failed")
                .with_endpoint(addr)
                .with_source(e)
        })?;
        let _ = tcp.set_nodelay(true);
        match &settings.tls {
            None => Ok((Box::new(tcp) as Box<dyn Io>, settings.protocol)),
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.config));
                let stream = connector
                    .connect(tls.server_name.clone(), tcp)
                    .await
                    .map_err(|e| {
                        UpstreamError::new(FailureKind::ConnectFailure, upstream, "TLS handshake failed")
                            .with_endpoint(addr)
                            .with_source(e)
                    })?;
                // ALPN decides; an upstream that negotiated nothing gets what the settings say.
                let negotiated = match stream.get_ref().1.alpn_protocol() {
                    Some(b"h2") => UpstreamProtocol::Http2,
                    Some(b"http/1.1") => UpstreamProtocol::Http1,
                    _ => settings.protocol,
                };
                Ok((Box::new(stream) as Box<dyn Io>, negotiated))
            }
        }
    };
    match tokio::time::timeout(settings.connect_timeout, connect).await {
        Ok(r) => r,
        Err(_) => Err(UpstreamError::new(
            FailureKind::ConnectFailure,
            upstream,
            format!(
                "connecting took longer than the connect timeout ({:?})",
                settings.connect_timeout
            ),
        )
        .with_endpoint(addr)),
    }
}

async fn connect_h2(
    upstream: &str,
    addr: SocketAddr,
    settings: &ConnectSettings,
) -> Result<H2Conn, UpstreamError> {
    let (io, negotiated) = connect_io(upstream, addr, settings).await?;
    if negotiated != UpstreamProtocol::Http2 {
        return Err(UpstreamError::new(
            FailureKind::ConnectFailure,
            upstream,
            "the upstream did not accept HTTP/2 in ALPN; set its protocol to http1",
        )
        .with_endpoint(addr));
    }
    match tokio::time::timeout(settings.connect_timeout, H2Conn::handshake(io)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(UpstreamError::new(
            FailureKind::ConnectFailure,
            upstream,
            "HTTP/2 handshake failed (is the upstream speaking h2c?)",
        )
        .with_endpoint(addr)
        .with_source(e)),
        Err(_) => Err(UpstreamError::new(
            FailureKind::ConnectFailure,
            upstream,
            "HTTP/2 handshake took longer than the connect timeout",
        )
        .with_endpoint(addr)),
    }
}

async fn connect_h1(
    upstream: &str,
    addr: SocketAddr,
    settings: &ConnectSettings,
) -> Result<H1Conn, UpstreamError> {
    let (io, _) = connect_io(upstream, addr, settings).await?;
    Ok(H1Conn::new(io))
}
