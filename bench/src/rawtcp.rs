//! The machine's limit for P3: a plain tokio writer/reader pair over
//! loopback TCP, in two processes like the hub and its consumers, with the
//! same number of connections. The writer sends `bytes_per_conn` on each
//! connection in 64 KiB writes from a prepared buffer; the reader reads and
//! discards, and reports the aggregate throughput from its first byte to the
//! last connection's end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::proc::{emit, now_ns};

const CHUNK: usize = 64 * 1024;

/// Accepts `conns` connections, reads each to its end, reports.
pub async fn reader(conns: usize) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    emit(&json!({"event": "listening", "addr": listener.local_addr()?.to_string()}));
    let first = Arc::new(AtomicU64::new(u64::MAX));
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (mut s, _) = listener.accept().await?;
        let first = first.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; CHUNK];
            let mut total = 0u64;
            loop {
                let n = s.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                if total == 0 {
                    first.fetch_min(now_ns(), Ordering::Relaxed);
                }
                total += n as u64;
            }
            anyhow::Ok(total)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let last = now_ns();
    emit(&json!({
        "event": "done",
        "bytes": total,
        "first_ns": first.load(Ordering::Relaxed),
        "last_ns": last,
    }));
    Ok(())
}

/// Connects `conns` times and writes `bytes_per_conn` on each.
pub async fn writer(addr: SocketAddr, conns: usize, bytes_per_conn: u64) -> Result<()> {
    let chunk: Arc<[u8]> = (0..CHUNK).map(|i| i as u8).collect();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let mut s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let chunk = chunk.clone();
        tasks.push(tokio::spawn(async move {
            let mut left = bytes_per_conn;
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                s.write_all(&chunk[..n]).await?;
                left -= n as u64;
            }
            s.shutdown().await?;
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    emit(&json!({"event": "done"}));
    Ok(())
}
