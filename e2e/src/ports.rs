//! Child processes on chosen ports: whether a process itself listens on
//! a port, and the bounded restarts of a child that lost its port to
//! another process (`PortAttempts`).

/// Whether process `pid` itself holds a listening TCP socket on `port`
/// (any local address), from `/proc`: a readiness check that no other
/// process holding the port can answer in its place.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let sockets: Vec<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let wanted = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/{pid}/net/{t}")).ok())
        .any(|table| {
            // sl local_address rem_address st ... inode; listening is 0A.
            table.lines().skip(1).any(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                f.len() > 9
                    && f[1].ends_with(&wanted)
                    && f[3] == "0A"
                    && sockets.iter().any(|s| s == f[9])
            })
        })
}

/// How many times a program is started on ports chosen for it
/// ([`meshhub_testkit::ports::free_port`]) before a failure to bind them
/// fails the test.
pub const PORT_ATTEMPTS: u32 = 5;

/// The starts of one program on ports chosen for it. Those ports are safe
/// from the kernel, but another process may still bind one of them between
/// the choice and the program's own bind; then the program exits saying so,
/// and is started again on new ports, a bounded number of times.
#[derive(Debug)]
pub struct PortAttempts {
    what: String,
    tried: u32,
    limit: u32,
    why_fixed: Option<String>,
}

impl PortAttempts {
    /// For a program whose ports may change from one start to the next.
    pub fn new(what: &str) -> Self {
        Self {
            what: what.to_owned(),
            tried: 0,
            limit: PORT_ATTEMPTS,
            why_fixed: None,
        }
    }

    /// For a program that must keep its ports (`why`: who holds its
    /// address): a lost port fails at once.
    pub fn fixed(what: &str, why: &str) -> Self {
        Self {
            limit: 1,
            why_fixed: Some(why.to_owned()),
            ..Self::new(what)
        }
    }

    /// The program exited (`status`) before it was ready, having written
    /// `output`: returns when it exited because a port chosen for it was
    /// taken and another start on new ports is allowed (the caller starts
    /// it again); panics with the tail of `output` otherwise.
    pub fn exited(&mut self, status: &dyn std::fmt::Display, output: &str) {
        if let Err(why) = self.again(status, output) {
            panic!("{why}");
        }
    }

    /// [`PortAttempts::exited`] for callers that return errors: `Ok` when
    /// the program is to be started again on new ports, else why not (with
    /// the tail of `output`).
    pub fn again(&mut self, status: &dyn std::fmt::Display, output: &str) -> Result<(), String> {
        self.tried += 1;
        let what = &self.what;
        let log = crate::istio::tail(output, 40);
        if !port_taken(output) {
            return Err(format!(
                "{what} exited ({status}) before it was ready:\n{log}"
            ));
        }
        if let Some(why) = &self.why_fixed {
            return Err(format!(
                "{what} exited ({status}): its port was taken, and it cannot move ({why}):\n{log}"
            ));
        }
        if self.tried >= self.limit {
            return Err(format!(
                "{what} exited ({status}): a port chosen for it was taken, {} times in a row:\n{log}",
                self.tried
            ));
        }
        eprintln!(
            "e2e: {what} found a port chosen for it taken ({status}); starting it again on new ports"
        );
        Ok(())
    }
}

/// Whether a program's output says it could not listen because the address
/// was in use: Go's `bind: address already in use`, Rust's `Address already
/// in use (os error 98)`. The only place that reads this from a program's
/// text.
pub(crate) fn port_taken(output: &str) -> bool {
    output
        .to_ascii_lowercase()
        .contains("address already in use")
}
