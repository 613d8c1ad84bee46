//! Ports a test chooses for something that binds them later: a process it
//! starts, a server it starts after telling a client where to dial, an
//! address that must stay closed.
//!
//! Binding `127.0.0.1:0`, reading the port and closing it again is not
//! enough: between the close and the later bind, the kernel may hand the
//! same port to anyone who asks it for one (another test's `bind(0)`, or
//! the local end of any outgoing connection), and the program started on
//! it fails with "address already in use". So the ports here come from
//! below the kernel's ephemeral range (`ip_local_port_range`), which the
//! kernel never hands out by itself; from a cursor shared by the whole
//! process, so no two callers get the same port; starting at an offset
//! derived from the process id, so test binaries running at the same time
//! walk far-apart parts of the range; and each is checked free by binding
//! it. What remains (another process binding that very port on purpose)
//! is what the callers that start programs retry for.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where the kernel's ephemeral range starts when `/proc` does not say
/// (Linux's default).
const EPHEMERAL_START: u32 = 32768;
/// The lowest port handed out: below it are the well-known ports and the
/// default ports of most servers (etcd's 2379, 6443, 8080, 9090, ...).
const FLOOR: u32 = 10_000;
/// The fewest ports a range must hold to be used.
const MIN_PORTS: u32 = 1000;

/// A loopback port nobody listens on now and that the kernel never hands
/// out by itself, distinct from every other port this function returned in
/// this process. For a program that binds it (or an address that must stay
/// closed).
pub fn free_port() -> u16 {
    ports().next()
}

/// `127.0.0.1:<free_port()>`.
pub fn free_addr() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()))
}

fn ports() -> &'static Ports {
    static PORTS: OnceLock<Ports> = OnceLock::new();
    PORTS.get_or_init(|| {
        let range = choose_range(
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
                .ok()
                .as_deref(),
        );
        let offset = spread(std::process::id(), range.len() as u32);
        Ports::new(range, offset)
    })
}

/// The ports to hand out, given the text of `ip_local_port_range` (`None`
/// when it cannot be read): from [`FLOOR`] to the start of the ephemeral
/// range; above its end when too few ports are below it; everything from
/// [`FLOOR`] up when the ephemeral range leaves nothing (then only the
/// callers' retries protect them).
fn choose_range(ip_local_port_range: Option<&str>) -> Range<u32> {
    let mut bounds = ip_local_port_range
        .into_iter()
        .flat_map(str::split_whitespace)
        .map(|n| n.parse::<u32>().ok());
    let (start, end) = match (bounds.next().flatten(), bounds.next().flatten()) {
        (Some(start), Some(end)) if start <= end && end <= 65535 => (start, end),
        _ => (EPHEMERAL_START, 60999),
    };
    if start >= FLOOR + MIN_PORTS {
        FLOOR..start
    } else if 65535 - end >= MIN_PORTS {
        end + 1..65536
    } else {
        FLOOR..65536
    }
}

/// Where process `pid` starts in a range of `len` ports: the fractional
/// part of `pid` × the golden ratio, scaled to the range, so that processes
/// with neighbouring ids (started one after another) start far apart.
fn spread(pid: u32, len: u32) -> u32 {
    let fraction = u64::from(pid).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((u128::from(fraction) * u128::from(len)) >> 64) as u32
}

/// A walk through `range` from an offset, each port handed out once.
#[derive(Debug)]
struct Ports {
    range: Range<u32>,
    cursor: AtomicU32,
}

impl Ports {
    fn new(range: Range<u32>, offset: u32) -> Self {
        assert!(!range.is_empty() && range.end <= 65536, "{range:?}");
        Self {
            range,
            cursor: AtomicU32::new(offset),
        }
    }

    /// The next port of the walk that can be bound now.
    fn next(&self) -> u16 {
        let len = self.range.end - self.range.start;
        for _ in 0..len {
            let i = self.cursor.fetch_add(1, Ordering::Relaxed) % len;
            let port = u16::try_from(self.range.start + i).expect("a port");
            if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
                return port;
            }
        }
        panic!("no port of {:?} can be bound on 127.0.0.1", self.range)
    }
}

#[cfg(test)]
mod tests;
