use std::collections::BTreeMap;

use super::plan::{cap, plan, shard_of};
use super::{member_lease, shard_lease};

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| (*s).to_owned()).collect()
}

fn counts(planned: &[Option<String>]) -> BTreeMap<String, u32> {
    let mut c = BTreeMap::new();
    for h in planned.iter().flatten() {
        *c.entry(h.clone()).or_default() += 1;
    }
    c
}

fn held(planned: &[Option<String>]) -> BTreeMap<u32, String> {
    planned
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.clone().map(|h| (u32::try_from(i).unwrap(), h)))
        .collect()
}

#[test]
fn the_shard_of_a_cluster_is_stable_and_spread() {
    // Fixed values: every replica, version and platform agrees.
    assert_eq!(super::plan::fnv1a(""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(super::plan::fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    let s = shard_of("cluster-7", 12);
    assert_eq!(shard_of("cluster-7", 12), s);
    assert!(s < 12);
    // 1,000 names over 12 shards: none empty, none over twice its share.
    let mut per = [0_u32; 12];
    for i in 0..1_000 {
        per[shard_of(&format!("cluster-{i}"), 12) as usize] += 1;
    }
    assert!(per.iter().all(|n| *n > 40 && *n < 170), "{per:?}");
    assert_eq!(shard_of("x", 0), 0, "no shards: everything in 0");
}

#[test]
fn the_cap_is_the_ceiling_of_the_share() {
    assert_eq!(cap(12, 3), 4);
    assert_eq!(cap(12, 5), 3);
    assert_eq!(cap(10, 3), 4);
    assert_eq!(cap(4, 8), 1);
    assert_eq!(cap(4, 0), 4);
}

#[test]
fn from_nothing_the_shards_are_shared_out_evenly() {
    let members = names(&["c", "a", "b"]);
    let planned = plan(12, &members, &BTreeMap::new());
    assert!(planned.iter().all(Option::is_some));
    assert_eq!(
        counts(&planned).into_values().collect::<Vec<_>>(),
        [4, 4, 4]
    );
    // Deterministic whatever the order the members were read in.
    assert_eq!(
        plan(12, &names(&["b", "c", "a"]), &BTreeMap::new()),
        planned
    );
}

#[test]
fn a_lost_replica_moves_only_its_shards() {
    let three = names(&["a", "b", "c"]);
    let before = plan(12, &three, &BTreeMap::new());
    // c is gone: its holdings are no longer valid.
    let mut holders = held(&before);
    holders.retain(|_, h| h != "c");
    let after = plan(12, &names(&["a", "b"]), &holders);
    for (i, h) in before.iter().enumerate() {
        if h.as_deref() != Some("c") {
            assert_eq!(&after[i], h, "shard {i} moved");
        }
    }
    assert_eq!(counts(&after).into_values().collect::<Vec<_>>(), [6, 6]);
}

#[test]
fn a_new_replica_takes_only_the_excess() {
    // a holds everything (it started alone); b and c join.
    let all_a: BTreeMap<u32, String> = (0..12).map(|i| (i, "a".to_owned())).collect();
    let planned = plan(12, &names(&["a", "b", "c"]), &all_a);
    let c = counts(&planned);
    assert_eq!(c["a"], 4);
    assert_eq!(c["b"], 4);
    assert_eq!(c["c"], 4);
    // a keeps its lowest-numbered shards.
    for (i, h) in planned.iter().enumerate().take(4) {
        assert_eq!(h.as_deref(), Some("a"), "shard {i}");
    }
    // With b holding 6 and a 6: c takes 2 of each.
    let half: BTreeMap<u32, String> = (0..12)
        .map(|i| (i, if i % 2 == 0 { "a" } else { "b" }.to_owned()))
        .collect();
    let planned = plan(12, &names(&["a", "b", "c"]), &half);
    let moved = (0..12)
        .filter(|i| planned[*i as usize].as_deref() != Some(half[i].as_str()))
        .count();
    assert_eq!(moved, 4, "only what c needs moves: {planned:?}");
}

#[test]
fn holders_that_are_not_members_are_ignored_and_nobody_gets_nothing() {
    let holders: BTreeMap<u32, String> = [(0, "gone".to_owned())].into();
    let planned = plan(3, &names(&["a"]), &holders);
    assert_eq!(planned, vec![Some("a".to_owned()); 3]);
    assert_eq!(plan(3, &[], &holders), vec![None; 3]);
}

#[test]
fn lease_names_are_valid_and_distinct_per_identity() {
    assert_eq!(
        shard_lease("meshhub-dial-out", 7),
        "meshhub-dial-out-shard-7"
    );
    let a = member_lease("meshhub-dial-out", "hub-0");
    let b = member_lease("meshhub-dial-out", "Hub 0/with odd chars");
    assert_ne!(a, b);
    for n in [&a, &b] {
        assert!(meshhub_validate::names::is_dns1123_subdomain(n), "{n}");
    }
}
