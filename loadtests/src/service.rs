//! A Kubernetes Service for the rollout drill, as kube-proxy makes one: an L4 TCP proxy on a loopback port
//! that sends each *new* client connection to one of the current endpoints, in turn (round-robin), and leaves
//! established connections where they are. Endpoints come and go while it runs ([`Service::add`],
//! [`Service::remove`]), as the endpoints controller adds a pod once its readiness probe passes and removes it
//! once it is terminating. It knows nothing of HTTP: a pod that is leaving must tell its clients to go away
//! (HTTP/1.1 `Connection: close`, HTTP/2 `GOAWAY`), and the clients reconnect through the Service.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running Service; it stops accepting when dropped (connections already proxied run on until either end
/// closes).
pub struct Service {
    addr: SocketAddr,
    endpoints: Arc<Mutex<Endpoints>>,
    accept: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Endpoints {
    ready: Vec<SocketAddr>,
    /// The round-robin position.
    next: usize,
}

impl Service {
    /// A Service with no endpoints on a loopback port the kernel picks.
    pub async fn start() -> std::io::Result<Service> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let endpoints = Arc::new(Mutex::new(Endpoints::default()));
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&endpoints)));
        Ok(Service {
            addr,
            endpoints,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds a ready endpoint: new connections may go to it from now on.
    pub fn add(&self, endpoint: SocketAddr) {
        if let Ok(mut e) = self.endpoints.lock()
            && !e.ready.contains(&endpoint)
        {
            e.ready.push(endpoint);
        }
    }

    /// Removes an endpoint: no new connection goes to it; those open stay.
    pub fn remove(&self, endpoint: SocketAddr) {
        if let Ok(mut e) = self.endpoints.lock() {
            e.ready.retain(|a| *a != endpoint);
        }
    }

    /// The endpoints new connections go to now.
    pub fn endpoints(&self) -> Vec<SocketAddr> {
        self.endpoints.lock().map(|e| e.ready.clone()).unwrap_or_default()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The next endpoint in turn, or `None` when there is none.
fn pick(endpoints: &Mutex<Endpoints>) -> Option<SocketAddr> {
    let mut e = endpoints.lock().ok()?;
    if e.ready.is_empty() {
        return None;
    }
    let i = e.next % e.ready.len();
    e.next = e.next.wrapping_add(1);
    Some(e.ready[i])
}

async fn accept_loop(listener: TcpListener, endpoints: Arc<Mutex<Endpoints>>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // EMFILE and friends: back off instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        // Chosen at accept, as kube-proxy's rule is applied to the connection's first packet.
        let endpoint = pick(&endpoints);
        tokio::spawn(async move {
            // No endpoint, or one that refuses: the client's connection is closed, as a rejected one would be.
            let Some(endpoint) = endpoint else { return };
            let Ok(upstream) = TcpStream::connect(endpoint).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (mut client, mut upstream) = (client, upstream);
            // Each direction's end (FIN) is passed on as it comes; an error on either side ends both.
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers each connection with its own name, then closes it.
    async fn named(name: &'static str) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(name.as_bytes()).await;
            }
        });
        addr
    }

    async fn connect_and_read(addr: SocketAddr) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out).await;
        out
    }

    #[tokio::test]
    async fn new_connections_take_the_ready_endpoints_in_turn() {
        let svc = Service::start().await.unwrap();
        let (a, b) = (named("a").await, named("b").await);
        assert_eq!(
            connect_and_read(svc.addr()).await,
            "",
            "no endpoint: the connection is closed"
        );
        svc.add(a);
        svc.add(b);
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(connect_and_read(svc.addr()).await);
        }
        seen.sort();
        assert_eq!(seen, ["a", "a", "b", "b"]);
        svc.remove(a);
        for _ in 0..3 {
            assert_eq!(connect_and_read(svc.addr()).await, "b");
        }
        assert_eq!(svc.endpoints(), vec![b]);
    }

    #[tokio::test]
    async fn an_open_connection_stays_with_its_endpoint_after_removal() {
        // An echo server: the connection keeps working after the endpoint leaves the Service.
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 16];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let svc = Service::start().await.unwrap();
        svc.add(echo);
        let mut s = TcpStream::connect(svc.addr()).await.unwrap();
        s.write_all(b"one").await.unwrap();
        let mut buf = [0u8; 3];
        s.read_exact(&mut buf).await.unwrap();
        svc.remove(echo);
        s.write_all(b"two").await.unwrap();
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"two");
    }
}
