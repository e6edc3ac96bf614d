//! Where load may go: a loopback address, or an address the user typed on the command line. Nothing else is
//! ever connected to (no redirects are followed, no names are resolved after start).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

use thiserror::Error;

/// One address the load is sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The socket address every connection goes to.
    pub addr: SocketAddr,
}

/// Why an address cannot be a target.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TargetError {
    /// Not `IP:PORT` / `localhost:PORT` (optionally behind `http://`).
    #[error(
        "target '{0}': expected IP:PORT or localhost:PORT (for example 127.0.0.1:8080); host names are not resolved"
    )]
    Syntax(String),
    /// A scenario file named an address that is not loopback.
    #[error(
        "target '{0}' is not a loopback address: scenario files may only target 127.0.0.1/::1; pass other addresses with --target on the command line"
    )]
    NotLoopback(String),
}

impl Target {
    /// Parses an address typed on the command line: any IP literal, or `localhost`.
    pub fn from_command_line(text: &str) -> Result<Self, TargetError> {
        parse(text)
    }

    /// Parses an address read from a file (a scenario): loopback only.
    pub fn from_file(text: &str) -> Result<Self, TargetError> {
        let t = parse(text)?;
        if t.addr.ip().is_loopback() {
            Ok(t)
        } else {
            Err(TargetError::NotLoopback(text.to_owned()))
        }
    }

    /// The loopback address with this port.
    pub fn loopback(port: u16) -> Self {
        Self {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        }
    }

    /// `http://ADDR` for request URIs.
    pub fn base_uri(&self) -> String {
        format!("http://{}", self.addr)
    }
}

fn parse(text: &str) -> Result<Target, TargetError> {
    let bare = text.trim().trim_start_matches("http://").trim_end_matches('/');
    if let Ok(addr) = SocketAddr::from_str(bare) {
        return Ok(Target { addr });
    }
    if let Some(port) = bare.strip_prefix("localhost:") {
        let port = port
            .parse::<u16>()
            .map_err(|_| TargetError::Syntax(text.to_owned()))?;
        return Ok(Target::loopback(port));
    }
    Err(TargetError::Syntax(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_accepts_any_ip_but_files_only_loopback() {
        assert!(Target::from_command_line("10.0.0.7:8080").is_ok());
        assert_eq!(
            Target::from_file("10.0.0.7:8080"),
            Err(TargetError::NotLoopback("10.0.0.7:8080".into()))
        );
        assert_eq!(
            Target::from_file("http://localhost:9000/").map(|t| t.addr.port()),
            Ok(9000)
        );
        assert!(Target::from_file("[::1]:80").is_ok());
    }

    #[test]
    fn host_names_are_refused_with_the_expected_form() {
        let err = Target::from_command_line("example.com:80").unwrap_err();
        assert!(err.to_string().contains("IP:PORT"), "{err}");
    }
}
