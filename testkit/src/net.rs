//! Raw bytes on a socket, for tests of what a port does with a peer that
//! does not speak its protocol.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::wait::within;

/// Writes `bytes` on a fresh TCP connection to `addr` and reads until the
/// server closes it; what it answered. Panics when the server keeps the
/// connection open past the deadline.
pub async fn raw_tcp(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    // The server may close before reading everything: write errors are
    // part of the outcome, not a failure.
    let _ = s.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = within(
        "the server to close a bad connection",
        s.read_to_end(&mut out),
    )
    .await;
    out
}

/// `n` bytes of deterministic noise from `seed` (xorshift).
pub fn garbage(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}
