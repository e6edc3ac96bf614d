//! TLS for the data listener (rustls, ALPN `h2` and `http/1.1`, optional client certificates) and for
//! upstreams; and the peer identity (URI or DNS SAN of a verified client certificate) that callers are
//! identified by.

use std::fs;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use x509_parser::extensions::GeneralName;

use crate::upstream_protocol::{UpstreamProtocol, UpstreamTls};

/// A TLS setup problem; the message names the file and what to fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// Files and options of a TLS data listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles<'a> {
    /// PEM certificate chain.
    pub cert: &'a Path,
    /// PEM private key.
    pub key: &'a Path,
    /// PEM CAs whose client certificates are accepted (mTLS), if any.
    pub client_ca: Option<&'a Path>,
    /// Refuse clients without a valid certificate (otherwise a certificate is optional but verified).
    pub require_client_cert: bool,
}

/// The identity a verified client certificate carries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// URI SANs (SPIFFE ids such as `spiffe://cluster.local/ns/a/sa/b`).
    pub uris: Vec<String>,
    /// DNS SANs.
    pub dns_names: Vec<String>,
}

impl PeerIdentity {
    /// The identity that names the caller: the first URI SAN, else the first DNS SAN.
    pub fn primary(&self) -> Option<&str> {
        self.uris.first().or(self.dns_names.first()).map(String::as_str)
    }

    /// Reads the SANs of a DER certificate. `None` when it has none that name a caller.
    pub fn from_der(der: &[u8]) -> Option<PeerIdentity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let san = cert.subject_alternative_name().ok()??;
        let mut id = PeerIdentity::default();
        for name in &san.value.general_names {
            match name {
                GeneralName::URI(u) => id.uris.push((*u).to_string()),
                GeneralName::DNSName(d) => id.dns_names.push((*d).to_string()),
                _ => {}
            }
        }
        (id.primary().is_some()).then_some(id)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|e| TlsError(format!("cannot read the {what} '{}': {e}", path.display())))
}

/// Reads every certificate of a PEM file.
pub fn load_certs(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, what)?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut BufReader::new(&bytes[..])).collect();
    let certs =
        certs.map_err(|e| TlsError(format!("the {what} '{}' is not valid PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "the {what} '{}' holds no certificate (expected '-----BEGIN CERTIFICATE-----' blocks)",
            path.display()
        )));
    }
    Ok(certs)
}

/// Reads the first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path, "private key")?;
    rustls_pemfile::private_key(&mut BufReader::new(&bytes[..]))
        .map_err(|e| {
            TlsError(format!(
                "the private key '{}' is not valid PEM: {e}",
                path.display()
            ))
        })?
        .ok_or_else(|| {
            TlsError(format!(
                "the private key file '{}' holds no key (expected a PKCS#8, PKCS#1 or SEC1 PEM block)",
                path.display()
            ))
        })
}

fn load_roots(path: &Path, what: &str) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path, what)? {
        roots.add(cert).map_err(|e| {
            TlsError(format!(
                "the {what} '{}' holds an unusable CA: {e}",
                path.display()
            ))
        })?;
    }
    Ok(Arc::new(roots))
}

/// Builds the data listener's TLS configuration: ALPN `h2` then `http/1.1`, client certificates verified
/// against `client_ca` when given.
pub fn server_config(files: &ServerTlsFiles<'_>) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = load_certs(files.cert, "certificate chain")?;
    let key = load_key(files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS setup failed: {e}")))?;
    let builder = match files.client_ca {
        Some(ca) => {
            let roots = load_roots(ca, "client CA bundle")?;
            let mut verifier = WebPkiClientVerifier::builder_with_provider(roots, provider());
            if !files.require_client_cert {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| TlsError(format!("client CA bundle '{}': {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None if files.require_client_cert => {
            return Err(TlsError(
                "require_client_cert is set but no client_ca names the CAs to verify clients with".into(),
            ));
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        TlsError(format!(
            "the certificate '{}' and key '{}' do not form a usable pair: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Builds TLS towards an upstream: CAs from `ca`, an optional client certificate, ALPN for `protocol`, and
/// the name to verify.
pub fn upstream_tls(
    ca: &Path,
    client_cert: Option<(&Path, &Path)>,
    protocol: UpstreamProtocol,
    server_name: &str,
) -> Result<UpstreamTls, TlsError> {
    let roots = load_roots(ca, "upstream CA bundle")?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots);
    let mut config = match client_cert {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert, "upstream client certificate")?, load_key(key)?)
            .map_err(|e| TlsError(format!("upstream client certificate '{}': {e}", cert.display())))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = match protocol {
        UpstreamProtocol::Http2 => vec![b"h2".to_vec()],
        UpstreamProtocol::Http1 => vec![b"http/1.1".to_vec()],
    };
    let server_name = ServerName::try_from(server_name.to_string()).map_err(|_| {
        TlsError(format!(
            "'{server_name}' is not a valid TLS server name (a DNS name or an IP address)"
        ))
    })?;
    Ok(UpstreamTls {
        config: Arc::new(config),
        server_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_prefers_uri_sans() {
        let mut params = rcgen::CertificateParams::new(vec!["client.example".to_string()]).unwrap();
        params.subject_alt_names.push(rcgen::SanType::URI(
            rcgen::string::Ia5String::try_from("spiffe://cluster.local/ns/a/sa/b").unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let id = PeerIdentity::from_der(cert.der()).unwrap();
        assert_eq!(id.primary(), Some("spiffe://cluster.local/ns/a/sa/b"));
        assert_eq!(id.dns_names, vec!["client.example"]);
    }

    #[test]
    fn missing_files_name_the_file() {
        let e = server_config(&ServerTlsFiles {
            cert: Path::new("/nonexistent/cert.pem"),
            key: Path::new("/nonexistent/key.pem"),
            client_ca: None,
            require_client_cert: false,
        })
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}");
    }
}
