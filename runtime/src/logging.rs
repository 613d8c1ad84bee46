//! Logging: `tracing` to stderr, text or JSON by `MESHHUB_LOG_FORMAT`,
//! levels per module by `MESHHUB_LOG` (default `info`), colour only when
//! stderr is a terminal and `NO_COLOR` is unset, and the filter reloadable
//! at runtime through a [`LogControl`] (`/debug/logging`).

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, Registry, reload};

/// The filter when `MESHHUB_LOG` is unset.
pub const DEFAULT_FILTER: &str = "info";

/// Why a filter can't be applied.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The filter does not parse.
    #[error("invalid log filter {filter:?}: {message}")]
    Invalid {
        /// The filter.
        filter: String,
        /// The parser's message.
        message: String,
    },
    /// A level of `modules` is empty or a module name is.
    #[error("invalid module level {module:?}={level:?}: module and level must not be empty")]
    Module {
        /// The module.
        module: String,
        /// The level.
        level: String,
    },
    /// The subscriber is gone.
    #[error("the log subscriber is gone")]
    Gone,
}

/// Text or JSON lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Format {
    /// `MESHHUB_LOG_FORMAT=json` is JSON, anything else text.
    pub fn from_env() -> Self {
        if std::env::var("MESHHUB_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
            Self::Json
        } else {
            Self::Text
        }
    }
}

/// Whether text logs carry ANSI colour: stderr is a terminal and
/// `NO_COLOR` is unset or empty (<https://no-color.org>).
pub fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Reads and replaces the live filter. Cheap to clone.
#[derive(Clone)]
pub struct LogControl {
    handle: reload::Handle<EnvFilter, Registry>,
    current: Arc<Mutex<String>>,
}

impl std::fmt::Debug for LogControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogControl")
            .field("filter", &self.filter())
            .finish()
    }
}

impl LogControl {
    /// The filter in force, as last set.
    pub fn filter(&self) -> String {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the whole filter (`info,meshhub::pipeline=debug`).
    pub fn set(&self, filter: &str) -> Result<(), LogError> {
        self.update(|_| Ok(filter.to_owned())).map(drop)
    }

    /// Sets the level of some modules (`meshhub::pipeline` → `debug`),
    /// keeping the rest of the filter: a module's earlier directive is
    /// replaced. Returns the new filter.
    pub fn set_modules(&self, modules: &BTreeMap<String, String>) -> Result<String, LogError> {
        self.update(|current| with_modules(current, modules))
    }

    /// Computes the new filter from the current one and applies it, as one
    /// step (two concurrent changes do not lose one another).
    fn update(
        &self,
        change: impl FnOnce(&str) -> Result<String, LogError>,
    ) -> Result<String, LogError> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let filter = change(&current)?;
        self.handle
            .reload(parse(&filter)?)
            .map_err(|_| LogError::Gone)?;
        current.clone_from(&filter);
        Ok(filter)
    }
}

/// `filter` with the directives of `modules` in place of the ones for the
/// same modules.
fn with_modules(filter: &str, modules: &BTreeMap<String, String>) -> Result<String, LogError> {
    for (module, level) in modules {
        if module.trim().is_empty() || level.trim().is_empty() {
            return Err(LogError::Module {
                module: module.clone(),
                level: level.clone(),
            });
        }
    }
    let mut directives: Vec<String> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .filter(|d| {
            let target = d.split_once('=').map_or("", |(t, _)| t);
            !modules.contains_key(target)
        })
        .map(str::to_owned)
        .collect();
    directives.extend(modules.iter().map(|(m, l)| format!("{m}={l}")));
    Ok(directives.join(","))
}

fn parse(filter: &str) -> Result<EnvFilter, LogError> {
    EnvFilter::builder()
        .parse(filter)
        .map_err(|e| LogError::Invalid {
            filter: filter.to_owned(),
            message: e.to_string(),
        })
}

/// A subscriber writing to `writer` with a reloadable `filter`, and its
/// control. [`init`] installs one on stderr; tests use this with a buffer.
pub fn subscriber<W>(
    writer: W,
    format: Format,
    ansi: bool,
    filter: &str,
) -> Result<(impl Subscriber + Send + Sync + 'static, LogControl), LogError>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let (filter_layer, handle) = reload::Layer::new(parse(filter)?);
    let fmt = match format {
        Format::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(writer)
            .boxed(),
        Format::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(writer)
            .boxed(),
    };
    let subscriber = tracing_subscriber::registry().with(filter_layer).with(fmt);
    let control = LogControl {
        handle,
        current: Arc::new(Mutex::new(filter.to_owned())),
    };
    Ok((subscriber, control))
}

static GLOBAL: OnceLock<LogControl> = OnceLock::new();

/// Installs the process's subscriber (stderr; `MESHHUB_LOG`,
/// `MESHHUB_LOG_FORMAT`, [`colour`]) unless one is installed already.
/// An invalid `MESHHUB_LOG` is reported on stderr and `info` used.
pub fn init() -> Option<LogControl> {
    if let Some(c) = GLOBAL.get() {
        return Some(c.clone());
    }
    let wanted = std::env::var("MESHHUB_LOG").unwrap_or_else(|_| DEFAULT_FILTER.to_owned());
    let built = subscriber(std::io::stderr, Format::from_env(), colour(), &wanted)
        .or_else(|e| {
            eprintln!("{e}; using {DEFAULT_FILTER:?}");
            subscriber(
                std::io::stderr,
                Format::from_env(),
                colour(),
                DEFAULT_FILTER,
            )
        })
        .ok()?;
    let (subscriber, control) = built;
    subscriber.try_init().ok()?;
    Some(GLOBAL.get_or_init(|| control).clone())
}

/// The control of the subscriber [`init`] installed, if it did.
pub fn global() -> Option<LogControl> {
    GLOBAL.get().cloned()
}

#[cfg(test)]
mod tests;
