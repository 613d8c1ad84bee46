//! Ports, protocols and addresses.

use std::net::IpAddr;

use serde_json::Value;

use crate::json::int_field;
use crate::names::is_hostname_label;
use crate::report::{Report, at};

/// A port number in 1..=65535.
pub(crate) fn validate_port(n: i64) -> Result<(), String> {
    if (1..=65535).contains(&n) {
        Ok(())
    } else {
        Err(format!("port number {n} must be in the range 1..65535"))
    }
}

/// Checks an optional port field (absent passes, `0` does not).
pub(crate) fn check_port_field(r: &mut Report, path: &str, v: &Value, name: &str) {
    if let Some(n) = int_field(v, name) {
        r.check(at(path, name), validate_port(n));
    }
}

/// Port names are host name labels.
pub(crate) fn validate_port_name(name: &str) -> Result<(), String> {
    if is_hostname_label(name) {
        Ok(())
    } else {
        Err(format!("invalid port name {name:?}"))
    }
}

/// The protocols Istio knows for a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Http,
    Http2,
    HttpProxy,
    Grpc,
    GrpcWeb,
    Https,
    Tls,
    Tcp,
    Udp,
    Mongo,
    Redis,
    Mysql,
}

impl Protocol {
    /// Parses a protocol name, ignoring case.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "http" => Self::Http,
            "http2" => Self::Http2,
            "http_proxy" => Self::HttpProxy,
            "grpc" => Self::Grpc,
            "grpc-web" => Self::GrpcWeb,
            "https" => Self::Https,
            "tls" => Self::Tls,
            "tcp" => Self::Tcp,
            "udp" => Self::Udp,
            "mongo" => Self::Mongo,
            "redis" => Self::Redis,
            "mysql" => Self::Mysql,
            _ => return None,
        })
    }

    /// Carried over HTTP (plain or HTTP/2).
    pub(crate) fn is_http(self) -> bool {
        matches!(
            self,
            Self::Http | Self::Http2 | Self::HttpProxy | Self::Grpc | Self::GrpcWeb
        )
    }

    /// Carried over TLS.
    pub(crate) fn is_tls(self) -> bool {
        matches!(self, Self::Https | Self::Tls)
    }
}

/// An empty protocol means "detect"; anything else must be known.
pub(crate) fn validate_protocol(p: &str) -> Result<(), String> {
    if p.is_empty() || Protocol::parse(p).is_some() {
        Ok(())
    } else {
        Err(format!("unsupported protocol {p:?}"))
    }
}

/// An IPv4 or IPv6 address.
pub(crate) fn is_ip(s: &str) -> bool {
    s.parse::<IpAddr>().is_ok()
}

/// An IP address.
pub(crate) fn validate_ip(s: &str) -> Result<(), String> {
    if is_ip(s) {
        Ok(())
    } else {
        Err(format!("{s:?} is not a valid IP address"))
    }
}

/// An address or a CIDR block (`10.0.0.0/8`, `2001:db8::/32`).
pub(crate) fn validate_ip_subnet(s: &str) -> Result<(), String> {
    if s.matches('/').count() == 1 {
        let ok = s.split_once('/').is_some_and(|(ip, bits)| {
            let max = match ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(_)) => 32,
                Ok(IpAddr::V6(_)) => 128,
                Err(_) => return false,
            };
            !bits.is_empty()
                && bits.len() <= 3
                && bits.bytes().all(|c| c.is_ascii_digit())
                && bits.parse::<u32>().is_ok_and(|b| b <= max)
        });
        if ok {
            Ok(())
        } else {
            Err(format!("{s:?} is not a valid CIDR block"))
        }
    } else {
        validate_ip(s)
    }
}

/// Prefix marking a Unix domain socket address.
pub(crate) const UNIX_PREFIX: &str = "unix://";

/// The path of a Unix domain socket: absolute and not a directory, or an
/// abstract socket (`@name`).
pub(crate) fn validate_unix_address(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("unix address must not be empty".into());
    }
    if path.starts_with('@') {
        return Ok(());
    }
    if !path.starts_with('/') || path.ends_with('/') {
        return Err(format!("{path:?} is not an absolute path to a file"));
    }
    Ok(())
}
