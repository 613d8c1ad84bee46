//! A minimal HTTP/1.1 client for loopback admin ports: enough to read a
//! status code and a body without pulling an HTTP stack into every test.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::wait::within;

/// `(status code, body)` of a raw HTTP/1.x answer.
fn parse(raw: &str) -> Option<(u16, String)> {
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// `GET path` on `addr` (connection closed after the answer): `(status
/// code, body)`; panics when the port does not answer within the deadline.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let what = format!("GET http://{addr}{path}");
    let raw = within(&what, async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut raw = String::new();
        s.read_to_string(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    })
    .await
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    parse(&raw).unwrap_or_else(|| panic!("{what}: not an HTTP answer: {raw:?}"))
}

/// A blocking `GET path` on `addr`: `(status code, body)`, or `None` when
/// the port does not answer (yet), for polling a process that is starting.
pub fn get_blocking(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    parse(&raw)
}

/// A blocking HTTP/1.0 `GET` for large bodies (an HTTP/1.0 request is
/// answered without chunked encoding): `(status code, body bytes)`, or
/// `None` when the port does not answer or `timeout` passes between reads.
pub fn get_large_blocking(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Option<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, raw[split + 4..].to_vec()))
}

/// The value of the unlabelled Prometheus sample `name` in `text`.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
