//! The pure rules of the sharded dial-out: which shard a cluster is in,
//! how many shards a replica may hold, and who should hold each shard.
//!
//! Every replica computes the same plan from the same inputs (the live
//! members and the valid holders read from the API server), and acts only
//! on its own part of it: it takes the free shards planned for it and
//! gives up the ones it holds that are planned for another. The plan keeps
//! every valid holding it can (a replica's loss moves only its shards; a
//! new replica takes only what the others hold beyond their share).

use std::collections::BTreeMap;

/// The shard of `cluster` among `shards`: FNV-1a (64 bits) of the name,
/// modulo the count. Stable across processes, versions and platforms
/// (unlike `std`'s hasher, whose output may change between releases), so
/// every replica agrees.
pub fn shard_of(cluster: &str, shards: u32) -> u32 {
    u32::try_from(fnv1a(cluster) % u64::from(shards.max(1))).unwrap_or(0)
}

/// FNV-1a, 64 bits: a fixed, documented hash (the shard of a cluster, the
/// name of a replica's membership Lease).
pub fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The most shards one of `members` live replicas holds: ⌈shards /
/// members⌉.
pub fn cap(shards: u32, members: usize) -> u32 {
    let members = u32::try_from(members.max(1)).unwrap_or(u32::MAX);
    shards.div_ceil(members)
}

/// Each shard's planned holder (index = shard), given the live `members`
/// (any order; empty: nobody) and the valid current `holders` (shard →
/// replica). Rules, in order:
///
/// 1. A holder that is a live member keeps its shards, the lowest-numbered
///    first, up to [`cap`].
/// 2. Every other shard, lowest-numbered first, goes to the member with the
///    fewest planned shards; among equals, the one whose name hashes
///    highest with the shard's number (rendezvous hashing: the free shards
///    of a lost replica spread over the others instead of all going to the
///    first by name).
///
/// So no member is planned more than [`cap`] shards, and the counts differ
/// by at most one once holdings settled.
pub fn plan(
    shards: u32,
    members: &[String],
    holders: &BTreeMap<u32, String>,
) -> Vec<Option<String>> {
    let mut members: Vec<&str> = members.iter().map(String::as_str).collect();
    members.sort_unstable();
    members.dedup();
    if members.is_empty() {
        return vec![None; shards as usize];
    }
    let cap = cap(shards, members.len());
    let mut count: BTreeMap<&str, u32> = members.iter().map(|m| (*m, 0)).collect();
    let mut planned: Vec<Option<String>> = vec![None; shards as usize];
    for (shard, holder) in holders.range(..shards) {
        if let Some(n) = count.get_mut(holder.as_str())
            && *n < cap
        {
            *n += 1;
            planned[*shard as usize] = Some(holder.clone());
        }
    }
    for (shard, slot) in planned.iter_mut().enumerate() {
        if slot.is_some() {
            continue;
        }
        let shard = u32::try_from(shard).unwrap_or(u32::MAX);
        let Some(best) = members
            .iter()
            .min_by_key(|m| (count[**m], std::cmp::Reverse(rendezvous(m, shard))))
        else {
            continue;
        };
        *count.get_mut(best).expect("a member") += 1;
        *slot = Some((*best).to_owned());
    }
    planned
}

/// The rendezvous weight of `member` for `shard`.
fn rendezvous(member: &str, shard: u32) -> u32 {
    shard_of(&format!("{member}/{shard}"), u32::MAX)
}
