//! `GET /debug/memory`: resident memory now and at its peak (from
//! `/proc/self/status`) and the tokio runtime's task counts.

use axum::Json;
use serde::Serialize;

/// The `/debug/memory` document.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct MemoryView {
    /// Resident set size (`VmRSS`), bytes; absent off Linux.
    pub rss_bytes: Option<u64>,
    /// Peak resident set size (`VmHWM`), bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Virtual memory size (`VmSize`), bytes.
    pub virtual_bytes: Option<u64>,
    /// Tokio: worker threads.
    pub tokio_workers: usize,
    /// Tokio: tasks alive.
    pub tokio_alive_tasks: usize,
    /// Tokio: tasks waiting in the global queue.
    pub tokio_global_queue_depth: usize,
}

/// The value of `field` (`VmRSS:   1234 kB`) in bytes.
pub(crate) fn field(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    let rest = line[name.len()..].trim_start_matches(':').trim();
    let kb: u64 = rest.strip_suffix("kB")?.trim().parse().ok()?;
    Some(kb * 1024)
}

pub(super) async fn get() -> Json<MemoryView> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let metrics = tokio::runtime::Handle::current().metrics();
    Json(MemoryView {
        rss_bytes: field(&status, "VmRSS"),
        peak_rss_bytes: field(&status, "VmHWM"),
        virtual_bytes: field(&status, "VmSize"),
        tokio_workers: metrics.num_workers(),
        tokio_alive_tasks: metrics.num_alive_tasks(),
        tokio_global_queue_depth: metrics.global_queue_depth(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_kilobytes_as_bytes() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(super::field(status, "VmRSS"), Some(1024 * 1024));
        assert_eq!(super::field(status, "VmHWM"), Some(2048 * 1024));
        assert_eq!(super::field(status, "VmSize"), None);
    }
}
