//! The process-wide Prometheus recorder and its upkeep.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// How often the Prometheus recorder drains its histograms.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Buckets of every `*_seconds` histogram: from a millisecond (a snapshot
/// build, a small fsync) to ten seconds (a slow debounce, a huge collection
/// on a slow disk).
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The process-wide Prometheus handle. The recorder is installed once per
/// process; if another recorder already is (tests, embedding), a detached
/// one is used so that `/metrics` still answers.
pub fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = || {
                PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                    .unwrap_or_else(|_| PrometheusBuilder::new())
            };
            match builder().install_recorder() {
                Ok(h) => h,
                Err(e) => {
                    warn!(error = %e, "can't install the metrics recorder; /metrics will be empty");
                    builder().build_recorder().handle()
                }
            }
        })
        .clone()
}

/// Drains the recorder's histograms every [`UPKEEP_INTERVAL`] until
/// `shutdown`.
pub async fn upkeep(handle: PrometheusHandle, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => handle.run_upkeep(),
        }
    }
}

/// A part of `/metrics` worked out when it is scraped (appended to the
/// recorder's text): values read from state the process already keeps,
/// so nothing is updated between scrapes and a series disappears with
/// what it describes (a removed cluster), which a recorder gauge can't do.
pub type Section = std::sync::Arc<dyn Fn(&mut Text) + Send + Sync>;

/// Prometheus text being written: one family at a time, each with its
/// `# HELP` and `# TYPE` lines.
#[derive(Debug, Default)]
pub struct Text {
    out: String,
}

impl Text {
    /// Starts the family `name` of `kind` (`gauge`, `counter`).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        use std::fmt::Write as _;
        let _ = write!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    /// One sample of the family just started: `labels` are `(name,
    /// value)` pairs, values escaped as the format requires.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        use std::fmt::Write as _;
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"");
                for ch in v.chars() {
                    match ch {
                        '\\' => self.out.push_str("\\\\"),
                        '"' => self.out.push_str("\\\""),
                        '\n' => self.out.push_str("\\n"),
                        c => self.out.push(c),
                    }
                }
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A family of one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The text.
    pub fn into_string(self) -> String {
        self.out
    }
}

/// The process's own families, read when scraped: readiness (`ready`:
/// what `/readyz` answers), resident memory and start time (the usual
/// `process_*` names, which dashboards and alerts expect), and the tokio
/// runtime's task count and global queue depth.
pub fn process_section(text: &mut Text, ready: bool, started_unix: u64) {
    text.single(
        "meshhub_ready",
        "gauge",
        "1 while the process is ready (/readyz answers 200), else 0",
        if ready { 1.0 } else { 0.0 },
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(rss) = crate::debug::memory::field(&status, "VmRSS") {
        text.single(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes",
            rss as f64,
        );
    }
    text.single(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch, in seconds",
        started_unix as f64,
    );
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let m = rt.metrics();
        text.single(
            "meshhub_tokio_alive_tasks",
            "gauge",
            "tasks alive in the tokio runtime",
            m.num_alive_tasks() as f64,
        );
        text.single(
            "meshhub_tokio_global_queue_depth",
            "gauge",
            "tasks waiting in the tokio runtime's global queue (a sustained depth: the workers can't keep up)",
            m.global_queue_depth() as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_escapes_label_values_and_names_each_family_once() {
        let mut t = Text::default();
        t.family("x_total", "counter", "things");
        t.sample("x_total", &[("a", "q\"b\\c\nd"), ("b", "2")], 3.0);
        t.sample("x_total", &[], 0.5);
        assert_eq!(
            t.into_string(),
            "# HELP x_total things\n# TYPE x_total counter\nx_total{a=\"q\\\"b\\\\c\\nd\",b=\"2\"} 3\nx_total 0.5\n"
        );
    }

    #[tokio::test]
    async fn the_process_section_says_ready_and_memory() {
        let mut t = Text::default();
        process_section(&mut t, false, 1_700_000_000);
        let text = t.into_string();
        assert!(text.contains("\nmeshhub_ready 0\n"), "{text}");
        assert!(
            text.contains("\nprocess_start_time_seconds 1700000000\n"),
            "{text}"
        );
        assert!(text.contains("\nmeshhub_tokio_alive_tasks "), "{text}");
        if cfg!(target_os = "linux") {
            let rss = text
                .lines()
                .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
                .and_then(|v| v.parse::<f64>().ok())
                .expect(&text);
            assert!(rss > 1e6, "{text}");
        }
    }
}
