//! Typed units written as text in config files: durations (`250ms`, `5s`, `1m`), rates (`100/s`,
//! `6000/min`) and byte sizes (`4MiB`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A rate of tokens over a period, written `100/s`, `6000/min`, `10/5s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Tokens granted per period (at least 1).
    pub tokens: u64,
    /// The period (more than zero).
    pub per: Duration,
}

/// A size in bytes, written `4MiB`, `512KiB`, `1GB` or as a plain number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl Rate {
    /// Tokens per second as a float (for display and for limiters that want it).
    pub fn per_second(&self) -> f64 {
        self.tokens as f64 / self.per.as_secs_f64()
    }
}

impl ByteSize {
    /// The number of bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }

    /// The number of bytes as `usize`, saturating on 32-bit targets.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

const DURATION_HELP: &str =
    "write a number with a unit: 250ms, 5s, 1m, 2h (also us, and combinations like 1m30s)";

/// Parses `250ms`, `5s`, `1.5s`, `1m30s`, `2h`, `100us`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("empty duration; {DURATION_HELP}"));
    }
    if s.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!("duration '{s}' has no unit; {DURATION_HELP}"));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!("invalid duration '{s}'; {DURATION_HELP}"));
        }
        let number: f64 = rest[..num_len]
            .parse()
            .map_err(|_| format!("invalid number in duration '{s}'"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        rest = &rest[unit_len..];
        let seconds_per_unit = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" | "sec" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            "" => {
                return Err(format!(
                    "duration '{s}' has a number without a unit; {DURATION_HELP}"
                ));
            }
            other => {
                return Err(format!(
                    "unknown unit '{other}' in duration '{s}'; {DURATION_HELP}"
                ));
            }
        };
        let secs = number * seconds_per_unit;
        if !secs.is_finite() || secs > 1e12 {
            return Err(format!("duration '{s}' is too long"));
        }
        total += Duration::from_secs_f64(secs);
    }
    Ok(total)
}

/// Formats a duration the way it is written in config files (`250ms`, `5s`, `1m`, `1m30s`).
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos.is_multiple_of(1_000_000_000) {
        let secs = d.as_secs();
        let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
        let mut out = String::new();
        if h > 0 {
            out.push_str(&format!("{h}h"));
        }
        if m > 0 {
            out.push_str(&format!("{m}m"));
        }
        if s > 0 {
            out.push_str(&format!("{s}s"));
        }
        return out;
    }
    if nanos.is_multiple_of(1_000_000) {
        return format!("{}ms", nanos / 1_000_000);
    }
    if nanos.is_multiple_of(1_000) {
        return format!("{}us", nanos / 1_000);
    }
    format!("{nanos}ns")
}

const RATE_HELP: &str = "write tokens per period: 100/s, 6000/min, 10/5s";

/// Parses `100/s`, `6000/min`, `5/h`, `10/5s`.
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let s = text.trim();
    let Some((tokens, per)) = s.split_once('/') else {
        return Err(format!("rate '{s}' has no period; {RATE_HELP}"));
    };
    let tokens: u64 = tokens
        .trim()
        .parse()
        .map_err(|_| format!("rate '{s}' must start with a whole number of tokens; {RATE_HELP}"))?;
    if tokens == 0 {
        return Err(format!(
            "rate '{s}' grants no tokens; use at least 1 (or remove the quota)"
        ));
    }
    let per = per.trim();
    let per = match per {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        "d" | "day" => Duration::from_secs(86400),
        other => parse_duration(other)
            .map_err(|_| format!("rate '{s}' has an unknown period '{other}'; {RATE_HELP}"))?,
    };
    if per.is_zero() {
        return Err(format!("rate '{s}' has a zero period; {RATE_HELP}"));
    }
    Ok(Rate { tokens, per })
}

const SIZE_HELP: &str =
    "write a number of bytes with an optional unit: 4096, 64KiB, 4MiB, 1GiB (or KB/MB/GB)";

/// Parses `4MiB`, `64 KiB`, `1GB`, `4096`, `4096B`.
pub fn parse_byte_size(text: &str) -> Result<ByteSize, String> {
    let s = text.trim();
    let num_len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if num_len == 0 {
        return Err(format!("invalid size '{s}'; {SIZE_HELP}"));
    }
    let number: u64 = s[..num_len]
        .parse()
        .map_err(|_| format!("size '{s}' is too large"))?;
    let factor: u64 = match s[num_len..].trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => return Err(format!("unknown unit '{other}' in size '{s}'; {SIZE_HELP}")),
    };
    number
        .checked_mul(factor)
        .map(ByteSize)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, factor) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if b >= factor && b.is_multiple_of(factor) {
                return write!(f, "{}{unit}", b / factor);
            }
        }
        write!(f, "{b}")
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.per.as_secs() {
            1 if self.per.subsec_nanos() == 0 => write!(f, "{}/s", self.tokens),
            60 if self.per.subsec_nanos() == 0 => write!(f, "{}/min", self.tokens),
            3600 if self.per.subsec_nanos() == 0 => write!(f, "{}/h", self.tokens),
            _ => write!(f, "{}/{}", self.tokens, format_duration(self.per)),
        }
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate such as 100/s or 6000/min")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Rate, E> {
                parse_rate(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as 4MiB or a number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_byte_size(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// `#[serde(with = "crate::units::duration")]` for `Duration` fields written as `250ms`.
pub mod duration {
    use super::*;

    /// Serializes as `250ms` / `5s`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    /// Deserializes from `250ms` / `5s` / `1m`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 250ms, 5s or 1m")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse_duration(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                if v == 0 {
                    Ok(Duration::ZERO)
                } else {
                    Err(E::custom(format!("duration {v} has no unit; {DURATION_HELP}")))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                Err(E::custom(format!("duration {v} has no unit; {DURATION_HELP}")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
                Err(E::custom(format!("duration {v} has no unit; {DURATION_HELP}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// `#[serde(with = "crate::units::opt_duration")]` for `Option<Duration>` fields.
pub mod opt_duration {
    use super::*;

    /// Serializes `None` as null, `Some` as `250ms`.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&format_duration(*d)),
            None => s.serialize_none(),
        }
    }

    /// Deserializes from a duration string or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct W(#[serde(with = "super::duration")] Duration);
        Option::<W>::deserialize(d).map(|o| o.map(|w| w.0))
    }
}

/// `#[serde(with = "crate::units::socket_addr")]` for listener addresses written `IP:port`.
pub mod socket_addr {
    use std::net::SocketAddr;

    use super::*;

    /// Serializes as `127.0.0.1:8080`.
    pub fn serialize<S: Serializer>(a: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(a)
    }

    /// Deserializes `IP:port`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        let s = String::deserialize(d)?;
        s.trim().parse().map_err(|_| {
            de::Error::custom(format!(
                "invalid listen address '{s}'; write IP:port, e.g. 127.0.0.1:8080, 0.0.0.0:8080 or [::]:8080 \
                 (host names are not accepted here)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert!(parse_duration("5").unwrap_err().contains("has no unit"));
        assert!(
            parse_duration("5 parsecs")
                .unwrap_err()
                .contains("unknown unit 'parsecs'")
        );
        assert!(parse_duration("").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
        for d in ["250ms", "5s", "1m", "1m30s", "2h", "100us", "0s"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
    }

    #[test]
    fn rates() {
        assert_eq!(
            parse_rate("100/s"),
            Ok(Rate {
                tokens: 100,
                per: Duration::from_secs(1)
            })
        );
        assert_eq!(
            parse_rate("6000/min"),
            Ok(Rate {
                tokens: 6000,
                per: Duration::from_secs(60)
            })
        );
        assert_eq!(
            parse_rate("10/5s"),
            Ok(Rate {
                tokens: 10,
                per: Duration::from_secs(5)
            })
        );
        assert!(parse_rate("100").unwrap_err().contains("no period"));
        assert!(parse_rate("0/s").unwrap_err().contains("no tokens"));
        assert!(parse_rate("5/fortnight").unwrap_err().contains("unknown period"));
        assert!(parse_rate("5/0s").unwrap_err().contains("zero period"));
        assert_eq!(parse_rate("6000/min").unwrap().to_string(), "6000/min");
        assert!((parse_rate("6000/min").unwrap().per_second() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_byte_size("4MiB"), Ok(ByteSize(4 << 20)));
        assert_eq!(parse_byte_size("64 KiB"), Ok(ByteSize(64 << 10)));
        assert_eq!(parse_byte_size("1GB"), Ok(ByteSize(1_000_000_000)));
        assert_eq!(parse_byte_size("4096"), Ok(ByteSize(4096)));
        assert!(parse_byte_size("4 MiBs").unwrap_err().contains("unknown unit"));
        assert!(
            parse_byte_size("99999999999TiB")
                .unwrap_err()
                .contains("too large")
        );
        assert_eq!(ByteSize(4 << 20).to_string(), "4MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
    }
}
