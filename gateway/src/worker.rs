//! Data-plane workers: one OS thread per worker, each running a current-thread Tokio runtime with its own
//! data listener socket (`SO_REUSEPORT` when there are several) and its own upstream connections, so a
//! request is accepted, routed, proxied and answered on one thread, without cross-thread wake-ups.
//!
//! What stays process-wide (rules, quota buckets, retry budgets, canary windows, upstream limits and
//! outlier state, metrics) is shared through `Arc`s and atomics; what a request touches on every step (the
//! client connection, the upstream connection it is multiplexed on, their tasks) belongs to one worker.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, watch};

/// Listen backlog of each data socket (the one tokio's `TcpListener::bind` uses).
const BACKLOG: u32 = 1024;
/// Ready sockets a worker takes from the kernel at a time (tokio's default: 1024). A worker runs every
/// request whose socket was ready before its upstream HTTP/2 connection, woken by the first of them, gets to
/// write their HEADERS frames; a smaller batch reaches the upstream sooner, so it idles less while the
/// worker parses (see docs/benchmarks.md, ## gateway).
const IO_EVENTS_PER_TICK: usize = 16;

thread_local! {
    /// The index of the data worker running on this thread.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The data worker running on this thread: `0..workers` on a worker thread, 0 on any other thread (which
/// then shares worker 0's connections: correct, only not thread-local).
pub(crate) fn current() -> usize {
    INDEX.with(Cell::get)
}

/// How many data workers to run: the configured number, or one per CPU core.
pub(crate) fn count(configured: Option<usize>) -> usize {
    configured
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// Binds `n` listening sockets on `addr`, one per worker. With more than one they share the port through
/// `SO_REUSEPORT`, and the kernel spreads new connections over them by a hash of their addresses. The first
/// socket binds `addr` as given (port 0 picks a port); the others bind the port it got. Must be called
/// inside a Tokio runtime (the sockets are handed to the workers' runtimes later).
pub(crate) fn bind(addr: SocketAddr, n: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let first = listen(addr, n > 1)?;
    let bound = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..n {
        all.push(listen(bound, true)?);
    }
    Ok(all)
}

fn listen(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As tokio's `TcpListener::bind`: a restarted gateway can bind while old connections are in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(addr)?;
    // Registered with this runtime's reactor for a moment; `into_std` takes it out again (non-blocking).
    socket.listen(BACKLOG)?.into_std()
}

/// The running workers. Dropping this (or calling [`Workers::stop`]) ends them: each runtime is dropped,
/// which closes whatever connections are still open on it.
pub(crate) struct Workers {
    stop: watch::Sender<bool>,
    done: tokio::sync::Mutex<mpsc::Receiver<()>>,
}

impl Workers {
    /// Starts one thread per listener, each with a current-thread runtime serving `serve(listener)`. When
    /// `serve` returns (the listener stopped accepting), the worker keeps its runtime, and so its open
    /// connections, running until [`Workers::stop`]. Runtimes are built here, so a failure to build one is
    /// reported before any thread starts.
    pub(crate) fn start<S, F>(listeners: Vec<std::net::TcpListener>, serve: S) -> io::Result<Workers>
    where
        S: Fn(TcpListener) -> F + Clone + Send + 'static,
        F: Future<Output = ()> + 'static,
    {
        let runtimes = listeners
            .iter()
            .map(|_| {
                tokio::runtime::Builder::new_current_thread()
                    .max_io_events_per_tick(IO_EVENTS_PER_TICK)
                    .enable_all()
                    .build()
            })
            .collect::<io::Result<Vec<Runtime>>>()?;
        let (stop, _) = watch::channel(false);
        let (done_tx, done) = mpsc::channel(1);
        for (index, (rt, listener)) in runtimes.into_iter().zip(listeners).enumerate() {
            let serve = serve.clone();
            let mut stop = stop.subscribe();
            let done_tx = done_tx.clone();
            std::thread::Builder::new()
                .name(format!("infergate-data-{index}"))
                .spawn(move || {
                    INDEX.with(|i| i.set(index));
                    rt.block_on(async move {
                        match TcpListener::from_std(listener) {
                            Ok(listener) => serve(listener).await,
                            Err(e) => {
                                tracing::error!(worker = index, error = %e, "data worker cannot use its listener socket")
                            }
                        }
                        let _ = stop.wait_for(|s| *s).await;
                    });
                    // Connections still open end here, with the runtime; then the worker counts as done.
                    drop(rt);
                    drop(done_tx);
                })?;
        }
        Ok(Workers {
            stop,
            done: tokio::sync::Mutex::new(done),
        })
    }

    /// Ends every worker (their remaining connections are closed) and waits up to `limit` for their
    /// threads to finish.
    pub(crate) async fn stop(&self, limit: Duration) {
        let _ = self.stop.send(true);
        let mut done = self.done.lock().await;
        // Every worker holds a sender; `None` once all of them have dropped it.
        let _ = tokio::time::timeout(limit, done.recv()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sockets_share_one_port_and_each_worker_knows_its_index() {
        let listeners = bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let port = listeners[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        assert!(listeners.iter().all(|l| l.local_addr().unwrap().port() == port));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let workers = Workers::start(listeners, move |l: TcpListener| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((current(), l.local_addr().unwrap().port()));
            }
        })
        .unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(rx.recv().await.unwrap());
        }
        seen.sort();
        assert_eq!(seen, vec![(0, port), (1, port), (2, port)]);
        assert_eq!(current(), 0, "a thread that is no worker counts as worker 0");
        workers.stop(Duration::from_secs(5)).await;
        assert!(
            rx.recv().await.is_none(),
            "every worker's runtime (and so its task state) is gone once stopped"
        );
    }

    #[test]
    fn one_worker_per_core_unless_configured() {
        assert_eq!(count(Some(3)), 3);
        assert!(count(None) >= 1);
    }
}
