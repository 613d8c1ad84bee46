//! Waiting for a file another process holds: a pod replaced on the same
//! volume (deleted, evicted, drained) starts while the old one still
//! stops within its grace period, still holding its database or data
//! directory. The hub's history database and the agent's data directory
//! both wait this way instead of failing at once.

use std::time::{Duration, Instant};

/// How often a held file is tried again.
const RETRY: Duration = Duration::from_millis(250);

/// Runs `attempt` until it succeeds, fails otherwise than `held` says, or
/// `wait` has passed (its last error then); `waiting` is told the first
/// time it waits. Blocking: call it where blocking is allowed.
pub fn wait_while_held<T, E>(
    wait: Duration,
    mut attempt: impl FnMut() -> Result<T, E>,
    held: impl Fn(&E) -> bool,
    waiting: impl FnOnce(&E),
) -> Result<T, E> {
    let deadline = Instant::now() + wait;
    let mut waiting = Some(waiting);
    loop {
        match attempt() {
            Err(e) if held(&e) && Instant::now() < deadline => {
                if let Some(say) = waiting.take() {
                    say(&e);
                }
                std::thread::sleep(RETRY);
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_tries_again_while_held_and_stops_at_other_errors_or_the_deadline() {
        let mut tries = 0;
        let mut said = 0;
        let got: Result<u32, &str> = wait_while_held(
            Duration::from_secs(10),
            || {
                tries += 1;
                if tries < 3 { Err("held") } else { Ok(7) }
            },
            |e| *e == "held",
            |_| said += 1,
        );
        assert_eq!((got, tries, said), (Ok(7), 3, 1));
        let mut tries = 0;
        let got: Result<u32, &str> = wait_while_held(
            Duration::from_secs(10),
            || {
                tries += 1;
                Err("broken")
            },
            |e| *e == "held",
            |_| {},
        );
        assert_eq!((got, tries), (Err("broken"), 1));
        let got: Result<u32, &str> = wait_while_held(
            Duration::ZERO,
            || Err("held"),
            |e| *e == "held",
            |_| panic!("no wait"),
        );
        assert_eq!(got, Err("held"));
    }
}
