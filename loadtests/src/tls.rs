//! h2 over TLS for the load: the rustls client configuration (`--ca` or `--insecure`, ALPN `h2` only) and one
//! multiplexed HTTP/2 connection per client, opened on first use and opened again once it has closed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use thiserror::Error;
use tokio_rustls::TlsConnector;

/// How the server's certificate is checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of the CAs that sign the server's certificate.
    pub ca: Option<PathBuf>,
    /// Accept any certificate (the handshake's signatures are still checked): for self-signed test servers.
    pub insecure: bool,
    /// The name the certificate must carry and the SNI sent; default: the target's IP address.
    pub server_name: Option<String>,
}

/// Why TLS could not be set up or a connection could not be opened.
#[derive(Debug, Error)]
pub enum TlsError {
    /// Neither a CA nor `--insecure`.
    #[error("h2 over TLS needs --ca FILE (the PEM CAs that sign the server's certificate) or --insecure")]
    NoTrust,
    /// The CA file could not be read or holds no certificate.
    #[error("--ca {path}: {reason}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// `--server-name` is not a DNS name or IP address.
    #[error("--server-name '{0}' is not a DNS name or IP address")]
    ServerName(String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// Connecting, the TLS handshake or the HTTP/2 handshake failed.
    #[error("connecting to {addr} over TLS: {reason}")]
    Connect {
        /// The target.
        addr: SocketAddr,
        /// What went wrong.
        reason: String,
    },
}

/// One HTTP/2-over-TLS connection to a target, shared by every request of a client.
#[derive(Clone)]
pub struct TlsConnection {
    addr: SocketAddr,
    server_name: ServerName<'static>,
    connector: TlsConnector,
    timeout: Duration,
    /// The open connection, if any. Held only to clone or replace the sender, never across an await.
    sender: Arc<Mutex<Option<SendRequest<Full<Bytes>>>>>,
    /// Serialises reconnecting, so that a broken connection is replaced once, not once per waiting request.
    connecting: Arc<tokio::sync::Mutex<()>>,
}

impl TlsConnection {
    /// Prepares connections to `addr` checked as `options` say; connects on first use.
    pub fn new(addr: SocketAddr, options: &TlsOptions, timeout: Duration) -> Result<Self, TlsError> {
        let server_name = match &options.server_name {
            Some(name) => {
                ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName(name.clone()))?
            }
            None => ServerName::IpAddress(addr.ip().into()),
        };
        Ok(Self {
            addr,
            server_name,
            connector: TlsConnector::from(Arc::new(client_config(options)?)),
            timeout,
            sender: Arc::new(Mutex::new(None)),
            connecting: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// A sender on the open connection, opening one when there is none or it has closed.
    pub async fn sender(&self) -> Result<SendRequest<Full<Bytes>>, TlsError> {
        if let Some(s) = self.open_sender() {
            return Ok(s);
        }
        let _one_at_a_time = self.connecting.lock().await;
        if let Some(s) = self.open_sender() {
            return Ok(s);
        }
        let sender = tokio::time::timeout(self.timeout, self.connect())
            .await
            .map_err(|_| self.connect_error(format!("no answer within {:?}", self.timeout)))??;
        *self.sender.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender.clone());
        Ok(sender)
    }

    fn open_sender(&self) -> Option<SendRequest<Full<Bytes>>> {
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|s| !s.is_closed())
            .cloned()
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, TlsError> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .map_err(|e| self.connect_error(e.to_string()))?;
        // Latency is what is measured: never hold a small write back.
        let _ = tcp.set_nodelay(true);
        let tls = self
            .connector
            .connect(self.server_name.clone(), tcp)
            .await
            .map_err(|e| self.connect_error(format!("TLS handshake: {e}")))?;
        if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(self.connect_error(
                "the server did not choose h2 in ALPN (does it serve HTTP/2 over TLS?)".into(),
            ));
        }
        let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| self.connect_error(format!("HTTP/2 handshake: {e}")))?;
        tokio::spawn(connection);
        Ok(sender)
    }

    fn connect_error(&self, reason: String) -> TlsError {
        TlsError::Connect {
            addr: self.addr,
            reason,
        }
    }
}

/// The rustls client configuration: TLS 1.2 and 1.3 with ring, ALPN `h2` only, the server checked against the
/// CAs of `--ca` or not at all with `--insecure`.
fn client_config(options: &TlsOptions) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    let mut config = match (&options.ca, options.insecure) {
        (Some(path), _) => builder.with_root_certificates(roots(path)?).with_no_client_auth(),
        (None, true) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(
                provider.signature_verification_algorithms,
            )))
            .with_no_client_auth(),
        (None, false) => return Err(TlsError::NoTrust),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let fail = |reason: String| TlsError::Ca {
        path: path.to_owned(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
        let cert = cert.map_err(|e| fail(format!("not PEM: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| fail(format!("not a CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(fail("holds no PEM certificate".into()));
    }
    Ok(roots)
}

/// `--insecure`: any certificate is accepted; the handshake's signatures are still verified, so the
/// connection is encrypted to whoever holds the presented certificate's key.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
