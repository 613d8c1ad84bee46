//! What a meshhub binary's `main` does after parsing its flags.

use std::future::Future;
use std::process::ExitCode;

use crate::error_chain;

/// Installs logging ([`crate::logging::init`]) and the `ring` crypto
/// provider, builds the configuration (an error exits with 2), then runs
/// `run` on a multi-threaded tokio runtime (an error exits with 1). Errors
/// go to stderr as `name: error: cause: ...`.
pub fn main<C, CE, F, RE>(
    name: &str,
    config: impl FnOnce() -> Result<C, CE>,
    run: impl FnOnce(C) -> F,
) -> ExitCode
where
    CE: std::error::Error,
    F: Future<Output = Result<(), RE>>,
    RE: std::error::Error,
{
    let _ = crate::logging::init();
    // One crypto provider for every TLS user in the process (tonic, kube).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: {}", error_chain(&e));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: can't start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
