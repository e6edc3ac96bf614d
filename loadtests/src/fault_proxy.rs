//! A TCP proxy on loopback that plays a sick upstream for the drills: one that answers late (every chunk from
//! the upstream but the first held back by a delay before it is passed on: the first, an HTTP/2 server's
//! SETTINGS, passes at once so that the connection opens and the slowness is the answers') or one that is hung (connections accepted, then
//! nothing read and nothing written, ever). The gateway sees it as one more endpoint; neither the backend
//! nor the gateway needs a fault hook of its own for it.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How the proxy misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Pass bytes to `upstream` and back, holding each chunk of the answer but the first back by `delay`.
    Slow {
        /// Where the bytes go.
        upstream: SocketAddr,
        /// How long each chunk from the upstream waits.
        delay: Duration,
    },
    /// Accept connections and never answer.
    Hung,
}

/// A running proxy; it stops when dropped.
pub struct FaultProxy {
    /// Its loopback address.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy on a loopback port the kernel picks.
    pub async fn start(fault: Fault) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            // Connections live in this set so that they end with the proxy.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                conns.spawn(serve(client, fault));
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Self { addr, task })
    }
}

async fn serve(client: TcpStream, fault: Fault) {
    let _ = client.set_nodelay(true);
    match fault {
        Fault::Hung => {
            // Keep the socket open and unread until the peer gives up; the kernel's buffers fill, nothing else.
            let _ = client.readable().await;
            std::future::pending::<()>().await;
        }
        Fault::Slow { upstream, delay } => {
            let Ok(up) = TcpStream::connect(upstream).await else {
                return;
            };
            let _ = up.set_nodelay(true);
            let (mut client_rd, mut client_wr) = client.into_split();
            let (mut up_rd, mut up_wr) = up.into_split();
            let requests = async {
                let _ = tokio::io::copy(&mut client_rd, &mut up_wr).await;
                let _ = up_wr.shutdown().await;
            };
            let answers = async {
                let mut buf = vec![0u8; 64 * 1024];
                let mut first = true;
                loop {
                    let n = match up_rd.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if !first {
                        tokio::time::sleep(delay).await;
                    }
                    first = false;
                    if client_wr.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = client_wr.shutdown().await;
            };
            tokio::join!(requests, answers);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_slow_proxy_passes_the_answer_whole_but_late_and_a_hung_one_never_answers() {
        let upstream = echo().await;
        let delay = Duration::from_millis(200);
        let slow = FaultProxy::start(Fault::Slow { upstream, delay })
            .await
            .expect("start");
        let mut s = TcpStream::connect(slow.addr).await.expect("connect");
        let mut buf = [0u8; 4];
        // The first chunk (a handshake) passes at once, the next ones wait.
        s.write_all(b"helo").await.expect("write");
        s.read_exact(&mut buf)
            .await
            .expect("the first chunk comes through");
        assert_eq!(&buf, b"helo");
        let sent = std::time::Instant::now();
        s.write_all(b"ping").await.expect("write");
        s.read_exact(&mut buf)
            .await
            .expect("the upstream's answer comes through");
        assert_eq!(&buf, b"ping");
        // A lower bound only: a sleep never ends early, however loaded the machine.
        assert!(sent.elapsed() >= delay);

        let hung = FaultProxy::start(Fault::Hung).await.expect("start");
        let mut s = TcpStream::connect(hung.addr)
            .await
            .expect("a hung upstream still accepts");
        s.write_all(b"ping").await.expect("write");
        // It never writes, so no wait can see a byte; the wait is only how long we look.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf))
                .await
                .is_err()
        );
    }
}
