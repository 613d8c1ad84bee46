//! One HTTP/2 connection for the dialers of one peer.
//!
//! The hub reaches each remote cluster's agent twice: the push stream
//! (`ResourceSink`, on the replica that dials the cluster) and the upward
//! subscription (`ResourceSource`, on every replica). Each HTTP/2 client
//! connection costs ~36 KiB at rest (h2's read and write buffers, hyper's
//! request channel, tower's buffer), so two per cluster was a sixth of an
//! idle cluster's memory. Targets made by [`Connections::share`] for the
//! same peer hold one [`Slot`]: the first to connect puts its channel
//! there, the other takes a clone, and both streams run on one
//! connection.
//!
//! A connection is not kept beyond its use. A dialer whose established
//! stream ended, or whose call could not be made, [`forgets`](Slot::forget)
//! the channel it used: its next attempt connects afresh, as an unshared
//! dialer does (a dead connection is never handed out again; the other
//! dialer keeps its clone until its own stream ends, then joins the new
//! one). A changed certificate, key or CA (read at every attempt, as
//! unshared) is a new connection too. The slot lives as long as a target
//! holding it; the registry keeps only weak references.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tonic::transport::{Channel, Uri};

use super::{ClientTlsFiles, DialTarget};

/// Where the shared connections of the peers are found, by peer name.
#[derive(Debug, Default)]
pub struct Connections {
    peers: Mutex<HashMap<String, Peer>>,
}

#[derive(Debug)]
struct Peer {
    uri: Uri,
    tls: Option<ClientTlsFiles>,
    slot: Weak<Slot>,
}

impl Connections {
    /// `target`, sharing its connection with the other targets shared for
    /// `peer` at the same address and TLS files (another address or other
    /// files: a slot of its own, which later calls share).
    pub fn share(&self, peer: &str, mut target: DialTarget) -> DialTarget {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        // Peers whose every target is gone.
        peers.retain(|_, p| p.slot.strong_count() > 0);
        let same = |p: &Peer| &p.uri == target.uri() && p.tls == target.tls;
        let slot = match peers
            .get(peer)
            .filter(|p| same(p))
            .and_then(|p| p.slot.upgrade())
        {
            Some(slot) => slot,
            None => {
                let slot = Arc::new(Slot::default());
                peers.insert(
                    peer.to_owned(),
                    Peer {
                        uri: target.uri().clone(),
                        tls: target.tls.clone(),
                        slot: Arc::downgrade(&slot),
                    },
                );
                slot
            }
        };
        target.shared = Some(slot);
        target
    }

    /// Peers with a live slot.
    pub fn len(&self) -> usize {
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.values().filter(|p| p.slot.strong_count() > 0).count()
    }

    /// Whether no peer has a live slot.
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
    channel: Channel,
    id: u64,
    material: u64,
}

impl Slot {
    /// The channel held, when it was opened with TLS material `material`.
    pub(super) fn get(&self, material: u64) -> Option<Connected> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.as_ref()
            .filter(|h| h.material == material)
            .map(|h| Connected {
                channel: h.channel.clone(),
                id: h.id,
            })
    }

    /// Offers a channel just connected: kept unless another dialer put a
    /// channel of the same material there meanwhile, whose clone is
    /// returned instead (ours is dropped, and its connection with it).
    pub(super) fn offer(&self, channel: Channel, material: u64) -> Connected {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = held.as_ref().filter(|h| h.material == material) {
            return Connected {
                channel: h.channel.clone(),
                id: h.id,
            };
        }
        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        *held = Some(Held {
            channel: channel.clone(),
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
/// unshared).
#[derive(Clone, Debug)]
pub struct Connected {
    /// The channel.
    pub channel: Channel,
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
