use super::*;

const LEASE: Duration = Duration::from_secs(15);

fn held_by(holder: Option<&str>, version: &str) -> LeaseRecord {
    LeaseRecord {
        holder: holder.map(str::to_owned),
        duration: LEASE,
        version: version.to_owned(),
        term: 0,
    }
}

#[test]
fn no_lease_is_created() {
    let now = Instant::now();
    assert_eq!(decide(None, "a", now, now), Decision::Create);
}

#[test]
fn a_free_lease_is_taken_at_once() {
    let now = Instant::now();
    assert_eq!(
        decide(Some(&held_by(None, "1")), "a", now, now),
        Decision::Acquire
    );
}

#[test]
fn our_own_lease_is_renewed_even_when_it_looks_expired() {
    let seen = Instant::now();
    let later = seen + LEASE * 2;
    assert_eq!(
        decide(Some(&held_by(Some("a"), "1")), "a", seen, later),
        Decision::Renew
    );
}

#[test]
fn another_holders_lease_is_respected_until_it_expires() {
    let seen = Instant::now();
    let lease = held_by(Some("b"), "1");
    assert_eq!(
        decide(
            Some(&lease),
            "a",
            seen,
            seen + LEASE - Duration::from_millis(1)
        ),
        Decision::Wait {
            holder: "b".to_owned(),
            until: seen + LEASE
        }
    );
    assert_eq!(
        decide(Some(&lease), "a", seen, seen + LEASE),
        Decision::Acquire
    );
}

#[test]
fn the_lease_record_reads_holder_duration_and_version() {
    let lease = Lease {
        metadata: ObjectMeta {
            resource_version: Some("42".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(3),
            ..LeaseSpec::default()
        }),
    };
    // An empty holder is a released lease: free.
    assert_eq!(
        LeaseRecord::of(&lease),
        LeaseRecord {
            holder: None,
            duration: Duration::from_secs(3),
            version: "42".to_owned(),
            term: 0,
        }
    );
}

#[test]
fn taking_over_counts_a_transition_renewing_by_the_same_holder_does_not() {
    let previous = LeaseSpec {
        holder_identity: Some("b".to_owned()),
        lease_transitions: Some(4),
        ..LeaseSpec::default()
    };
    let taken = acquired_spec(Some(&previous), "a", Duration::from_secs(3));
    assert_eq!(taken.holder_identity.as_deref(), Some("a"));
    assert_eq!(taken.lease_duration_seconds, Some(3));
    assert_eq!(taken.lease_transitions, Some(5));
    assert!(taken.renew_time.is_some() && taken.acquire_time.is_some());
    let again = acquired_spec(Some(&taken), "a", Duration::from_secs(3));
    assert_eq!(again.lease_transitions, Some(5));
    let created = acquired_spec(None, "a", Duration::from_secs(3));
    assert_eq!(created.lease_transitions, Some(0));
}

/// Expiry runs on this replica's clock from when it first saw the record's
/// version: a holder that keeps renewing (new versions) is never taken
/// over; one that stops is, exactly one lease duration after the last
/// version was seen.
#[tokio::test(start_paused = true)]
async fn expiry_counts_from_the_last_change_seen() {
    let mut observer = Observer::default();
    let retry = Duration::from_secs(2);
    let mut version = 0;
    // The holder renews every retry period for a minute.
    for _ in 0..30 {
        version += 1;
        let now = Instant::now();
        let seen = observer.observe(&version.to_string(), now);
        assert_eq!(seen, now, "a new version restarts the lease");
        assert!(matches!(
            decide(
                Some(&held_by(Some("b"), &version.to_string())),
                "a",
                seen,
                now
            ),
            Decision::Wait { .. }
        ));
        tokio::time::advance(retry).await;
    }
    // It stops (crashed): the same version is read on every round.
    let last_change = Instant::now();
    let stale = held_by(Some("b"), "stale");
    let mut took_over = None;
    for _ in 0..40 {
        let now = Instant::now();
        let seen = observer.observe("stale", now);
        assert_eq!(seen, last_change);
        if decide(Some(&stale), "a", seen, now) == Decision::Acquire {
            took_over = Some(now);
            break;
        }
        tokio::time::advance(Duration::from_millis(500)).await;
    }
    assert_eq!(took_over, Some(last_change + LEASE));
}

#[tokio::test(start_paused = true)]
async fn a_leader_steps_down_at_the_renew_deadline_not_before() {
    let deadline = Duration::from_secs(10);
    let renewed = Instant::now();
    tokio::time::advance(deadline - Duration::from_millis(1)).await;
    assert!(!must_step_down(renewed, deadline, Instant::now()));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(must_step_down(renewed, deadline, Instant::now()));
}

#[test]
fn only_a_leader_or_a_replica_without_election_dials() {
    assert!(LeaderStatus::disabled().dials());
    let follower = LeaderStatus {
        enabled: true,
        ..LeaderStatus::default()
    };
    assert!(!follower.dials());
    let leader = LeaderStatus {
        is_leader: true,
        ..follower
    };
    assert!(leader.dials());
}
