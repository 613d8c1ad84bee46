//! One HTTP/2 connection for the dialers of one peer.
//!
//! The hub reaches each remote cluster's agent twice: the push stream
//! (`ResourceSink`, on the replica that dials the cluster) and the upward
//! subscription (`ResourceSource`, on every replica). Each HTTP/2 client
//! connection holds its own buffers at rest (h2's read and write buffers,
//! hyper's request channel, tower's buffer): measured, the second
//! connection was ~20 KiB of an idle cluster (docs/scaling.md). Targets
//! made by [`Connections::share`] for the same peer, address and TLS files
//! hold one [`Slot`]: the first to connect puts its channel there, the
//! other takes it, and both streams run on one connection.
//!
//! The slot holds the channel weakly: a connection lives while a stream
//! uses it ([`Connected`] is held for the stream's life) and closes when
//! the last one ends — a replica that does not push and waits to ask an
//! agent that does not serve the upward report again holds none. A dialer
//! whose established stream ended, or whose call could not be made,
//! [`forgets`](Slot::forget) the channel it used: its next attempt
//! connects afresh, as an unshared dialer does (the other dialer keeps it
//! until its own stream ends, then joins the new one). TLS files changed
//! since (read at every attempt, as unshared) mean a new connection too.
//! The registry keeps only weak references.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tonic::transport::Channel;

use super::{ClientTlsFiles, DialTarget};

/// Where the shared connections are found: by peer name, address and TLS
/// files (a reload that moves a peer elsewhere is another slot; the old
/// one goes with its last target).
#[derive(Debug, Default)]
pub struct Connections {
    inner: Mutex<Registry>,
}

type Key = (String, String, Option<ClientTlsFiles>);

#[derive(Debug, Default)]
struct Registry {
    slots: HashMap<Key, Weak<Slot>>,
    /// Entries after the last sweep of dead ones: the next sweep comes
    /// when the map has doubled (amortised O(1) per call, not O(peers)).
    swept: usize,
}

impl Connections {
    /// `target`, sharing its connection with the other targets shared for
    /// `peer` at the same address with the same TLS files.
    pub fn share(&self, peer: &str, mut target: DialTarget) -> DialTarget {
        let mut r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if r.slots.len() >= 2 * r.swept + 64 {
            r.slots.retain(|_, slot| slot.strong_count() > 0);
            r.swept = r.slots.len();
        }
        let key = (
            peer.to_owned(),
            target.uri().to_string(),
            target.tls.clone(),
        );
        let slot = match r.slots.get(&key).and_then(Weak::upgrade) {
            Some(slot) => slot,
            None => {
                let slot = Arc::new(Slot::default());
                r.slots.insert(key, Arc::downgrade(&slot));
                slot
            }
        };
        target.shared = Some(slot);
        target
    }

    /// Live slots.
    pub fn len(&self) -> usize {
        let r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        r.slots.values().filter(|s| s.strong_count() > 0).count()
    }

    /// Whether no slot is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The connection the targets of one peer share.
#[derive(Debug, Default)]
pub struct Slot {
    held: Mutex<Option<Held>>,
    /// The last id given (ids are never reused: a forgotten channel's id
    /// never names a newer one).
    last_id: AtomicU64,
}

#[derive(Debug)]
struct Held {
    channel: Weak<Channel>,
    id: u64,
    material: u64,
}

impl Slot {
    /// The channel held and still used, when it was opened with TLS
    /// material `material`.
    pub(super) fn get(&self, material: u64) -> Option<Connected> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let h = held.as_ref().filter(|h| h.material == material)?;
        Some(Connected {
            channel: h.channel.upgrade()?,
            id: h.id,
        })
    }

    /// Offers a channel just connected: kept unless another dialer put a
    /// live channel of the same material there meanwhile, which is
    /// returned instead (ours is dropped, and its connection with it).
    pub(super) fn offer(&self, channel: Channel, material: u64) -> Connected {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((h, channel)) = held
            .as_ref()
            .filter(|h| h.material == material)
            .and_then(|h| Some((h, h.channel.upgrade()?)))
        {
            return Connected { channel, id: h.id };
        }
        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        let channel = Arc::new(channel);
        *held = Some(Held {
            channel: Arc::downgrade(&channel),
            id,
            material,
        });
        Connected { channel, id }
    }

    /// Drops the channel `id` (the next attempt connects afresh); a newer
    /// channel another dialer put there stays.
    pub fn forget(&self, id: u64) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.as_ref().is_some_and(|h| h.id == id) {
            *held = None;
        }
    }
}

/// A channel to the peer, with the id its [`Slot`] knows it by (0:
/// unshared). Hold it for as long as the stream on it runs: the shared
/// connection closes when the last holder drops it.
#[derive(Clone, Debug)]
pub struct Connected {
    /// The channel.
    pub channel: Arc<Channel>,
    /// Its id in the slot.
    pub id: u64,
}

/// A digest of what a connection's TLS is made of: the files' bytes (the
/// same certificate re-read: the same digest; a rotated one: another).
pub(super) fn material(tls: Option<&ClientTlsFiles>) -> std::io::Result<u64> {
    let mut h = DefaultHasher::new();
    if let Some(tls) = tls {
        for path in [Some(&tls.ca), tls.cert.as_ref(), tls.key.as_ref()]
            .into_iter()
            .flatten()
        {
            std::fs::read(path)?.hash(&mut h);
        }
        tls.server_name.hash(&mut h);
    }
    Ok(h.finish())
}

#[cfg(test)]
mod tests;
