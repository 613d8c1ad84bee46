//! A TCP fault proxy for the soak: one [`Link`] per connection path
//! (hub → agent push, consumer → hub, consumer → agent), each listening on
//! a kernel-chosen loopback port and forwarding to an upstream address that
//! may change (a restarted hub binds a new port).
//!
//! On command a link **drops** every open connection (TCP RST), **stalls**
//! (stops forwarding and holds the sockets open: the peers see silence, as
//! behind a dead router), **slows** (a delay before each forwarded chunk),
//! **cuts** (drops everything and resets new connections: a partition) and
//! **heals** (forwards normally again).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// How a link forwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward as it comes.
    Open,
    /// Forward nothing; hold the sockets.
    Stall,
    /// Wait this long before forwarding each chunk (at most 16 KiB).
    Slow(Duration),
    /// Refuse (reset) new connections.
    Cut,
}

#[derive(Clone, Copy, Debug)]
struct State {
    mode: Mode,
    /// Bumped to drop every connection opened before.
    epoch: u64,
    upstream: SocketAddr,
}

struct Shared {
    state: watch::Sender<State>,
    accepted: AtomicU64,
    refused: AtomicU64,
}

/// The proxy: its own tokio runtime (one worker), on which every link runs.
pub struct FaultProxy {
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultProxy")
    }
}

impl Default for FaultProxy {
    fn default() -> Self {
        Self::new()
    }
}

impl FaultProxy {
    /// A proxy with no links yet.
    pub fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .expect("proxy runtime");
        Self { rt }
    }

    /// A new link to `upstream`, listening on a kernel-chosen loopback port.
    pub fn link(&self, name: &str, upstream: SocketAddr) -> Link {
        let listener = self
            .rt
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the proxy port");
        let addr = listener.local_addr().expect("proxy address");
        let (state, _) = watch::channel(State {
            mode: Mode::Open,
            epoch: 0,
            upstream,
        });
        let shared = Arc::new(Shared {
            state,
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        self.rt.spawn(serve(listener, shared.clone()));
        Link {
            name: name.to_owned(),
            addr,
            shared,
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Links' tasks end with the runtime; their sockets close.
        let rt = std::mem::replace(
            &mut self.rt,
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("empty runtime"),
        );
        rt.shutdown_background();
    }
}

/// A handle on one link.
#[derive(Clone)]
pub struct Link {
    name: String,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Link({} {})", self.name, self.addr)
    }
}

impl Link {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where peers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// New connections go to `upstream` (open ones are kept).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        self.shared.state.send_modify(|s| s.upstream = upstream);
    }

    /// Resets every open connection; new ones are forwarded as before.
    pub fn drop_all(&self) {
        self.shared.state.send_modify(|s| s.epoch += 1);
    }

    /// Stops forwarding, holding the sockets.
    pub fn stall(&self) {
        self.set_mode(Mode::Stall);
    }

    /// Delays every forwarded chunk by `delay`.
    pub fn slow(&self, delay: Duration) {
        self.set_mode(Mode::Slow(delay));
    }

    /// A partition: resets every open connection and every new one.
    pub fn cut(&self) {
        self.shared.state.send_modify(|s| {
            s.mode = Mode::Cut;
            s.epoch += 1;
        });
    }

    /// Forwards normally again.
    pub fn heal(&self) {
        self.set_mode(Mode::Open);
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.shared.state.borrow().mode
    }

    /// Connections forwarded and refused so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.accepted.load(Ordering::Relaxed),
            self.shared.refused.load(Ordering::Relaxed),
        )
    }

    fn set_mode(&self, mode: Mode) {
        self.shared.state.send_modify(|s| s.mode = mode);
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((down, _)) = listener.accept().await else {
            continue;
        };
        let state = *shared.state.borrow();
        if state.mode == Mode::Cut {
            shared.refused.fetch_add(1, Ordering::Relaxed);
            reset(&down);
            continue;
        }
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(connection(down, shared.clone(), state));
    }
}

/// Closing with SO_LINGER 0 sends RST instead of FIN. (tokio deprecates
/// `set_linger` because a *positive* linger blocks the thread on drop; a
/// zero linger discards the send buffer and returns at once.)
#[allow(deprecated)]
fn reset(s: &TcpStream) {
    let _ = s.set_linger(Some(Duration::ZERO));
}

async fn connection(mut down: TcpStream, shared: Arc<Shared>, at: State) {
    let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(at.upstream));
    let Ok(Ok(mut up)) = connect.await else {
        reset(&down);
        return;
    };
    let _ = down.set_nodelay(true);
    let _ = up.set_nodelay(true);
    {
        let (dr, dw) = down.split();
        let (ur, uw) = up.split();
        let both = async {
            tokio::try_join!(
                pump(dr, uw, shared.state.subscribe(), at.epoch),
                pump(ur, dw, shared.state.subscribe(), at.epoch),
            )
        };
        let mut state = shared.state.subscribe();
        let dropped = state.wait_for(|s| s.epoch != at.epoch);
        tokio::select! {
            r = both => if r.is_ok() { return },
            _ = dropped => {}
        }
    }
    reset(&down);
    reset(&up);
}

/// Copies `from` → `to` under the link's mode; `Err` when the connection
/// is dropped or a side fails. EOF is passed on as a half close.
async fn pump(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    mut state: watch::Receiver<State>,
    epoch: u64,
) -> Result<(), ()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.map_err(drop)?;
        // A stall holds the end of the stream too (a dead router passes no FIN).
        loop {
            let s = *state.borrow_and_update();
            if s.epoch != epoch {
                return Err(());
            }
            match s.mode {
                Mode::Stall => state.changed().await.map_err(drop)?,
                Mode::Slow(delay) => {
                    tokio::time::sleep(delay).await;
                    break;
                }
                Mode::Open | Mode::Cut => break,
            }
        }
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        to.write_all(&buf[..n]).await.map_err(drop)?;
    }
}

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// An echo server on loopback (one thread per connection).
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut s = s;
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn client(link: &Link) -> TcpStream {
        let s = TcpStream::connect(link.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        s
    }

    fn roundtrip(s: &mut TcpStream, text: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(text)?;
        let mut got = vec![0u8; text.len()];
        s.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn forwards_stalls_drops_cuts_slows_and_heals() {
        let proxy = FaultProxy::new();
        let link = proxy.link("echo", echo());
        let mut s = client(&link);
        assert_eq!(roundtrip(&mut s, b"one").unwrap(), b"one");

        // Stalled: nothing comes back, the socket stays open; healed: the
        // held bytes arrive.
        link.stall();
        s.write_all(b"two").unwrap();
        let mut buf = [0u8; 3];
        let e = s.read_exact(&mut buf).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{e}"
        );
        link.heal();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"two");

        // Dropped: the open connection is reset; a new one works.
        link.drop_all();
        assert!(roundtrip(&mut s, b"three").is_err());
        let mut s = client(&link);
        assert_eq!(roundtrip(&mut s, b"four").unwrap(), b"four");

        // Cut: open and new connections fail until healed.
        link.cut();
        assert!(roundtrip(&mut s, b"five").is_err());
        let mut refused = client(&link);
        assert!(roundtrip(&mut refused, b"six").is_err());
        link.heal();
        let mut s = client(&link);
        assert_eq!(roundtrip(&mut s, b"seven").unwrap(), b"seven");

        // Slowed: each forwarded chunk waits (one each way here).
        link.slow(Duration::from_millis(150));
        let started = std::time::Instant::now();
        assert_eq!(roundtrip(&mut s, b"eight").unwrap(), b"eight");
        assert!(started.elapsed() >= Duration::from_millis(300));
        link.heal();
        let (accepted, refused) = link.counts();
        assert_eq!((accepted, refused), (3, 1));
    }
}
