//! SIGINT, SIGTERM and (optionally) SIGHUP.

/// What a signal asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT or SIGTERM: shut down gracefully.
    Shutdown,
    /// SIGHUP: reload.
    Hangup,
}

/// The process's signal streams.
#[derive(Debug)]
pub struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hangup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Listens for SIGINT and SIGTERM, and for SIGHUP when `hangup` (else
    /// SIGHUP keeps its default action).
    pub fn new(hangup: bool) -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                term: signal(SignalKind::terminate())?,
                hangup: if hangup {
                    Some(signal(SignalKind::hangup())?)
                } else {
                    None
                },
            })
        }
        #[cfg(not(unix))]
        {
            let _ = hangup;
            Ok(Self {})
        }
    }

    /// The next signal.
    pub async fn next(&mut self) -> std::io::Result<Signal> {
        #[cfg(unix)]
        {
            let hangup = async {
                match &mut self.hangup {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = tokio::signal::ctrl_c() => r.map(|()| Signal::Shutdown),
                _ = self.term.recv() => Ok(Signal::Shutdown),
                _ = hangup => Ok(Signal::Hangup),
            }
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await.map(|()| Signal::Shutdown)
    }
}
