//! Which host a request is for, read once: exactly one `Host` on HTTP/1.1 (RFC 9112 §3.2), at most one
//! anywhere, and when the target carries an authority as well (HTTP/2 `:authority`, an HTTP/1.1 absolute-form
//! target) the two must name the same host and port.
//!
//! Hosts compare case-insensitively, without one trailing dot (`api.example.com.` is `api.example.com`), and a
//! missing port is the scheme's default (80 for `http`, 443 for `https`), so `API.example.com:80` and
//! `api.example.com` are the same authority while `api.example.com:8080` is not.

use http::header::HOST;
use http::request::Parts;
use http::uri::{Authority, Scheme};
use http::{HeaderValue, Version};

use super::TargetError;

/// Checks the request's `Host` header(s) against its version and its target's authority.
pub fn check(parts: &Parts, tls: bool) -> Result<(), TargetError> {
    let mut hosts = parts.headers.get_all(HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(TargetError::DuplicateHost);
    }
    let authority = parts.uri.authority();
    if let Some(a) = authority
        && a.as_str().contains('@')
    {
        return Err(TargetError::UserInfo(a.as_str().to_string()));
    }
    let Some(host) = host else {
        if parts.version == Version::HTTP_11 {
            return Err(TargetError::MissingHost);
        }
        return Ok(());
    };
    check_host_value(host)?;
    if let Some(a) = authority {
        let scheme = parts
            .uri
            .scheme()
            .cloned()
            .unwrap_or(if tls { Scheme::HTTPS } else { Scheme::HTTP });
        let same = parse_host(host).is_some_and(|h| same_authority(&h, a, &scheme));
        if !same {
            return Err(TargetError::HostMismatch {
                host: String::from_utf8_lossy(host.as_bytes()).into_owned(),
                target: a.as_str().to_string(),
            });
        }
    }
    Ok(())
}

/// The host of an authority as routes match it: without the port and without one trailing dot (IPv6 literals
/// lose their brackets).
pub fn route_host(authority: &str) -> &str {
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split_once(']').map_or(authority, |(h, _)| h)
    } else {
        match authority.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => authority,
        }
    };
    host.strip_suffix('.').unwrap_or(host)
}

/// Refuses a `Host` value that is not `host[:port]` (RFC 3986 `reg-name`, IP literal or address, port), checking
/// its bytes only: the common origin-form request carries no second authority to compare it with, so it is not
/// parsed. The empty value is allowed (RFC 9112 §3.2: a target without authority).
fn check_host_value(value: &HeaderValue) -> Result<(), TargetError> {
    let ok = value.as_bytes().iter().all(|&b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
                    | b':'
                    | b'['
                    | b']'
            )
    });
    if ok {
        Ok(())
    } else {
        Err(TargetError::InvalidHost(
            String::from_utf8_lossy(value.as_bytes()).into_owned(),
        ))
    }
}

/// A `Host` value as an authority, to compare with the target's; `None` when empty or not an authority.
fn parse_host(value: &HeaderValue) -> Option<Authority> {
    if value.is_empty() {
        return None;
    }
    value.to_str().ok()?.parse::<Authority>().ok()
}

fn same_authority(a: &Authority, b: &Authority, scheme: &Scheme) -> bool {
    let default = if *scheme == Scheme::HTTPS { 443 } else { 80 };
    let host = |x: &Authority| {
        let h = x.host();
        h.strip_suffix('.').unwrap_or(h).to_ascii_lowercase()
    };
    host(a) == host(b) && a.port_u16().unwrap_or(default) == b.port_u16().unwrap_or(default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(version: Version, uri: &str, hosts: &[&str]) -> Parts {
        let mut b = Request::builder().version(version).uri(uri);
        for h in hosts {
            b = b.header(HOST, *h);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn http11_needs_exactly_one_host() {
        let ok = parts(Version::HTTP_11, "/v2", &["a.example"]);
        assert_eq!(check(&ok, false), Ok(()));
        let none = parts(Version::HTTP_11, "/v2", &[]);
        assert_eq!(check(&none, false), Err(TargetError::MissingHost));
        let two = parts(Version::HTTP_11, "/v2", &["a.example", "b.example"]);
        assert_eq!(check(&two, false), Err(TargetError::DuplicateHost));
        let same_twice = parts(Version::HTTP_11, "/v2", &["a.example", "a.example"]);
        assert_eq!(check(&same_twice, false), Err(TargetError::DuplicateHost));
        // HTTP/1.0 and HTTP/2 may omit it, never repeat it.
        assert_eq!(check(&parts(Version::HTTP_10, "/v2", &[]), false), Ok(()));
        assert_eq!(check(&parts(Version::HTTP_2, "http://a/v2", &[]), false), Ok(()));
        let h2_two = parts(Version::HTTP_2, "http://a/v2", &["a", "a"]);
        assert_eq!(check(&h2_two, false), Err(TargetError::DuplicateHost));
        assert!(matches!(
            check(&parts(Version::HTTP_11, "/v2", &["a@b"]), false),
            Err(TargetError::InvalidHost(_))
        ));
        assert!(matches!(
            check(&parts(Version::HTTP_11, "/v2", &["a b"]), false),
            Err(TargetError::InvalidHost(_))
        ));
    }

    #[test]
    fn target_authority_and_host_agree_after_normalising() {
        for (uri, host) in [
            ("http://api.example.com/v2", "API.Example.com"),
            ("http://api.example.com/v2", "api.example.com.:80"),
            ("http://api.example.com:80/v2", "api.example.com"),
            ("https://api.example.com/v2", "api.example.com:443"),
            ("http://[::1]:8080/v2", "[::1]:8080"),
        ] {
            let p = parts(Version::HTTP_11, uri, &[host]);
            assert_eq!(check(&p, false), Ok(()), "{uri} with Host {host}");
        }
        for (uri, host) in [
            ("http://admin.example.com/v2", "api.example.com"),
            ("http://api.example.com/v2", "api.example.com:8080"),
            ("http://api.example.com/v2", "api.example.com:443"),
            ("http://api.example.com/v2", ""),
        ] {
            let p = parts(Version::HTTP_11, uri, &[host]);
            assert!(
                matches!(check(&p, false), Err(TargetError::HostMismatch { .. })),
                "{uri} with Host {host}"
            );
        }
        // The target's scheme decides the default port.
        let p = parts(
            Version::HTTP_2,
            "https://api.example.com/v2",
            &["api.example.com:443"],
        );
        assert_eq!(check(&p, true), Ok(()));
        let userinfo = parts(
            Version::HTTP_11,
            "http://u@api.example.com/v2",
            &["api.example.com"],
        );
        assert!(matches!(check(&userinfo, false), Err(TargetError::UserInfo(_))));
    }

    #[test]
    fn route_hosts_lose_port_and_trailing_dot() {
        assert_eq!(route_host("API.example.com:8080"), "API.example.com");
        assert_eq!(route_host("api.example.com."), "api.example.com");
        assert_eq!(route_host("api.example.com.:80"), "api.example.com");
        assert_eq!(route_host("[::1]:80"), "::1");
        assert_eq!(route_host("[::1]"), "::1");
    }
}
