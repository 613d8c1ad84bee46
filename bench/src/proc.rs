//! Child processes of the harness and the line protocol between them.
//!
//! Every role (hub server, load generator, raw TCP pair) is this same binary
//! started with a subcommand. A child prints one JSON object per line on
//! stdout (`{"event": ...}`) and reads commands the same way on stdin; its
//! stderr goes to ours. Children are killed when their handle drops, so a
//! failing run leaves no process behind.

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout, Command};

/// Nanoseconds since the Unix epoch (`CLOCK_REALTIME`): the one clock every
/// process of a run shares. Only differences within one run are used.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A [`SystemTime`] as [`now_ns`] counts it.
pub fn system_ns(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Prints one event line on stdout (the parent reads it).
pub fn emit(v: &Value) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Resident set size of a process, from `/proc/<pid>/status` (`VmRSS`).
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .context("VmRSS without a value")?
        .parse()?;
    Ok(kb * 1024)
}

/// CPU time (user + system) a process has used so far, in seconds, from
/// `/proc/<pid>/stat` (clock ticks of 1/100 s, Linux's `USER_HZ`).
pub fn cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after the command name, which may contain spaces.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).context("no utime")?.parse::<u64>()?
        + fields.get(12).context("no stime")?.parse::<u64>()?;
    Ok(ticks as f64 / 100.0)
}

/// A child process of the harness.
pub struct Child {
    name: String,
    child: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Child {
    /// Starts this binary with `args`.
    pub fn spawn(name: &str, args: &[String]) -> Result<Self> {
        Self::spawn_with_env(name, args, &[])
    }

    /// Starts this binary with `args` and these environment variables.
    pub fn spawn_with_env(name: &str, args: &[String], env: &[(&str, &str)]) -> Result<Self> {
        let exe = std::env::current_exe().context("locating the harness binary")?;
        Self::start(name, &exe, args, env)
    }

    /// Starts another program that speaks the same line protocol (a peer
    /// server of scenario P5).
    pub fn spawn_program(name: &str, program: &std::path::Path, args: &[String]) -> Result<Self> {
        Self::start(name, program, args, &[])
    }

    fn start(
        name: &str,
        program: &std::path::Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let mut command = Command::new(program);
        command.args(args).envs(env.iter().copied());
        if name == "hub" {
            command.envs(hub_env());
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the {name} process"))?;
        let stdin = child.stdin.take().context("child stdin")?;
        let stdout = child.stdout.take().context("child stdout")?;
        Ok(Self {
            name: name.to_owned(),
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> Result<u32> {
        self.child.id().context("child already exited")
    }

    /// CPU seconds the child used so far.
    pub fn cpu(&self) -> f64 {
        self.pid().and_then(cpu_secs).unwrap_or(f64::NAN)
    }

    /// Sends one command line.
    pub async fn send(&mut self, v: &Value) -> Result<()> {
        let mut line = v.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .with_context(|| format!("writing to the {} process", self.name))?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Reads lines until an event named `event` arrives (other events are
    /// skipped; an `error` event fails), at most `timeout`.
    pub async fn expect(&mut self, event: &str, timeout: Duration) -> Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .with_context(|| {
                    format!(
                        "the {} process sent no {event:?} within {timeout:?}",
                        self.name
                    )
                })??;
            let Some(line) = line else {
                bail!("the {} process exited before {event:?}", self.name);
            };
            let v: Value = serde_json::from_str(&line)
                .with_context(|| format!("{} printed a non-JSON line: {line}", self.name))?;
            match v["event"].as_str() {
                Some(e) if e == event => return Ok(v),
                Some("error") => bail!("{} failed: {}", self.name, v["message"]),
                _ => {}
            }
        }
    }

    /// Kills the child at once (`SIGKILL`: no shutdown, no goodbye to its
    /// peers) and reaps it.
    pub async fn kill(&mut self) -> Result<()> {
        self.child
            .kill()
            .await
            .with_context(|| format!("killing the {} process", self.name))
    }

    /// Asks the child to quit, waits briefly, then kills it.
    pub async fn finish(mut self) {
        self.stop().await;
    }

    /// [`Child::finish`] keeping the handle (to put another process in
    /// its place).
    pub async fn stop(&mut self) {
        let _ = self.send(&serde_json::json!({"cmd": "quit"})).await;
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Reads command lines from stdin and hands them out, in a child process.
pub struct Commands {
    lines: Lines<BufReader<tokio::io::Stdin>>,
}

impl Commands {
    /// Reads this process's stdin.
    pub fn stdin() -> Self {
        Self {
            lines: BufReader::new(tokio::io::stdin()).lines(),
        }
    }

    /// The next command; `None` when the parent closed stdin or said quit.
    pub async fn next(&mut self) -> Result<Option<Value>> {
        let Some(line) = self.lines.next_line().await? else {
            return Ok(None);
        };
        let v: Value = serde_json::from_str(&line).context("a non-JSON command")?;
        if v["cmd"] == "quit" {
            return Ok(None);
        }
        Ok(Some(v))
    }
}

/// `MESHHUB_BENCH_HUB_ENV`: `KEY=VALUE` pairs, separated by whitespace,
/// given to the hub processes only (a heap profiler's `LD_PRELOAD` and
/// output file: docs/performance.md, "Where the memory goes").
fn hub_env() -> Vec<(String, String)> {
    std::env::var("MESHHUB_BENCH_HUB_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
