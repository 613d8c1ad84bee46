//! Open consoles at N clusters (issue 41): the fleet page's weight and the
//! time the hub takes to render it, then the hub's CPU while `CONSOLES`
//! event streams follow the fleet — idle, and per change every cluster
//! receives (compared with the same rounds without consoles) — and what
//! each stream receives per change.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::{Rig, Rounds};

/// Consoles open at once.
pub(super) const CONSOLES: usize = 10;

/// What the consoles cost.
pub(super) struct Figures {
    /// The fleet page's HTML, its script and style sheet (bytes).
    pub page_bytes: f64,
    /// The script and the style sheet alone.
    pub assets_bytes: f64,
    /// Time to the whole page's HTML (ms).
    pub page_ms: f64,
    /// Hub CPU per second with the consoles open and nothing changing.
    pub idle_cpu_per_s: f64,
    /// Hub CPU per change every cluster receives, consoles open.
    pub cpu_per_change_s: f64,
    /// Events each stream received per change.
    pub events_per_change: f64,
    /// Bytes each stream received per change.
    pub bytes_per_change: f64,
}

/// `GET path` on the hub's admin port: the body's length and the time.
async fn get(admin: &str, path: &str) -> Result<(usize, Duration)> {
    let start = Instant::now();
    let mut s = TcpStream::connect(admin).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut all = Vec::new();
    s.read_to_end(&mut all).await?;
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&all);
    ensure!(
        text.starts_with("HTTP/1.1 200"),
        "GET {path}: {}",
        text.lines().next().unwrap_or("")
    );
    let body = text.split_once("\r\n\r\n").map_or(0, |(_, b)| b.len());
    Ok((body, took))
}

/// One console's event stream: counts `fleet` events and bytes.
struct Stream {
    events: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

async fn open(admin: &str) -> Result<Stream> {
    let mut s = TcpStream::connect(admin).await?;
    s.write_all(
        format!("GET /console/events/fleet HTTP/1.1\r\nHost: {admin}\r\nAccept: text/event-stream\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let events = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let (e, b) = (events.clone(), bytes.clone());
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail = String::new();
        while let Ok(n) = s.read(&mut buf).await {
            if n == 0 {
                break;
            }
            b.fetch_add(n as u64, Ordering::Relaxed);
            tail.push_str(&String::from_utf8_lossy(&buf[..n]));
            let found = tail.matches("event: fleet").count() as u64;
            e.fetch_add(found, Ordering::Relaxed);
            // Keep what could be the start of the next marker.
            let keep = tail.len().saturating_sub(16);
            let cut = (keep..=tail.len())
                .find(|&i| tail.is_char_boundary(i))
                .unwrap_or(tail.len());
            tail.drain(..cut);
        }
    });
    Ok(Stream {
        events,
        bytes,
        task,
    })
}

impl Rig {
    /// The page, then [`CONSOLES`] streams open through `rounds` changes
    /// of a shared object.
    pub(super) async fn consoles(&mut self, rounds: usize) -> Result<Figures> {
        let admin = self.hub.admin.clone();
        let (html, page_took) = get(&admin, "/console").await.context("the fleet page")?;
        let (js, _) = get(&admin, "/console/assets/console.js").await?;
        let (css, _) = get(&admin, "/console/assets/console.css").await?;

        let mut streams = Vec::new();
        for _ in 0..CONSOLES {
            streams.push(open(&admin).await.context("a console's event stream")?);
        }
        let total = |streams: &[Stream]| -> (u64, u64) {
            streams.iter().fold((0, 0), |(e, b), s| {
                (
                    e + s.events.load(Ordering::Relaxed),
                    b + s.bytes.load(Ordering::Relaxed),
                )
            })
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while streams
            .iter()
            .any(|s| s.events.load(Ordering::Relaxed) == 0)
        {
            ensure!(Instant::now() < deadline, "a console got no fleet in 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // Idle with the consoles open.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let cpu0 = self.hub.child.cpu();
        let idle = Duration::from_secs(5);
        tokio::time::sleep(idle).await;
        let idle_cpu = (self.hub.child.cpu() - cpu0) / idle.as_secs_f64();

        // Changes every cluster receives, followed by every console.
        let (e0, b0) = total(&streams);
        let mut changes = Rounds::default();
        for k in 0..rounds {
            let i = (k * 6151 + 29) % self.fleet.shared.max(1);
            let collection = self.fleet.shared_collection(i);
            self.round(&mut changes, &collection, None, |f| f.change_shared(i))
                .await
                .context("a change with consoles open")?;
        }
        // The feed settles (250 ms) and builds once more.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (e1, b1) = total(&streams);
        for s in streams {
            s.task.abort();
        }
        let per = (rounds * CONSOLES).max(1) as f64;
        Ok(Figures {
            page_bytes: (html + js + css) as f64,
            assets_bytes: (js + css) as f64,
            page_ms: page_took.as_secs_f64() * 1e3,
            idle_cpu_per_s: idle_cpu,
            cpu_per_change_s: changes.hub_cpu(),
            events_per_change: (e1 - e0) as f64 / per,
            bytes_per_change: (b1 - b0) as f64 / per,
        })
    }
}
