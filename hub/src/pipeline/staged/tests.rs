//! The pipeline's choice between leading and following the rollout
//! ([`Staged::role`]), driven through its inputs: the lease and the
//! leader's shared decisions.

use std::collections::HashMap;
use std::sync::Arc;

use meshhub_mcp::cache::Group;
use meshhub_mcp::ledger::{Ledger, Outcome, Role};
use meshhub_mcp::snapshot::Snapshot;
use meshhub_rollout::Phase;
use tokio::sync::watch;

use super::{Replicas, Staged};
use crate::leader::LeaderStatus;
use crate::rollout::tests::{VS, controller, controller_and_view, delivery, latest, mirrored};

fn lease(is_leader: bool, transitions: u64) -> LeaderStatus {
    LeaderStatus {
        enabled: true,
        identity: Some("hub-b".into()),
        is_leader,
        holder: Some(if is_leader { "hub-b" } else { "hub-a" }.into()),
        transitions,
        term: transitions,
        ..LeaderStatus::default()
    }
}

fn canary(l: &HashMap<Group, Arc<Snapshot>>) -> Arc<Snapshot> {
    l[&Group::from("a")].clone()
}

#[test]
fn a_replica_leads_once_it_holds_the_lease_and_has_read_the_decisions_and_continues_them() {
    let (v1, v2) = (latest("1"), latest("2"));
    // The other replica (hub-a) leads: v2 awaits the canary's ACK.
    let mut other = controller();
    other.built(0, &v1);
    other.built(10, &v2);

    let Rig {
        mut staged,
        view,
        lease: lease_tx,
        mirror: mirror_tx,
    } = rig(&[&v1, &v2]);
    let ledger = staged.ledger.clone();

    // The lease is won before the decisions were read: still following
    // (leading now would start over and overwrite the shared decisions).
    lease_tx.send_replace(lease(true, 1));
    assert!(staged.role(20).is_empty());
    assert!(!staged.controller.leading());
    assert!(view.borrow().following);

    // This replica's dialer got the canary's ACK of v2 before the switch.
    let dialer = ledger.register(Role::Source, "a", "a");
    dialer.identify("a", "a");
    dialer.connected();
    let version = delivery("a", &canary(&v2), Outcome::Ack).version;
    dialer.sent(VS, &version, "1");
    dialer.acked(VS, &version, "1");

    // The decisions arrive: it leads the same rollout, and the ACK read
    // from the ledger moves the canary into its bake.
    mirror_tx.send_replace(mirrored(&other, &[&v1]));
    staged.role(30);
    assert!(staged.controller.leading());
    assert_eq!(staged.controller.term(), 1);
    let shown = view.borrow().clone();
    assert!(!shown.following);
    let rollout = shown
        .rollout
        .as_ref()
        .expect("the leader's rollout goes on");
    assert_eq!(rollout.id, 1, "the same rollout, not a new one");
    assert!(
        matches!(rollout.phase, Phase::Baking { .. }),
        "the ACK its dialer got before counts: {:?}",
        rollout.phase
    );

    // Nothing new: nothing changes.
    assert!(staged.role(40).is_empty());
    assert!(staged.controller.leading());

    // The lease lost and won back between two looks while hub-a decided
    // more (the canary baked, the rest served v2): it leads again from
    // those decisions, in its new term.
    other.delivery(20, &delivery("a", &canary(&v2), Outcome::Ack));
    let served = other.tick(1_020);
    assert_eq!(served.len(), 2, "hub-a serves b and c v2");
    mirror_tx.send_replace(mirrored(&other, &[&v1]));
    lease_tx.send_replace(lease(true, 3));
    let serve = staged.role(1_100);
    let mut groups: Vec<&str> = serve.iter().map(|(g, _)| g.as_ref()).collect();
    groups.sort_unstable();
    assert_eq!(groups, ["b", "c"], "it serves what hub-a decided since");
    assert!(staged.controller.leading());
    assert_eq!(staged.controller.term(), 3);

    // The lease lost: it follows again.
    lease_tx.send_replace(lease(false, 4));
    staged.role(1_200);
    assert!(!staged.controller.leading());
    assert!(view.borrow().following);
}

/// The decisions `leader` made, as shared in leadership term `term`.
fn mirrored_in_term(
    leader: &crate::rollout::Controller,
    known: &[&HashMap<Group, Arc<Snapshot>>],
    term: u64,
) -> Option<Arc<crate::rollout::shared::Mirrored>> {
    let mut m = Arc::unwrap_or_clone(mirrored(leader, known).expect("decisions"));
    m.decisions.term = term;
    Some(Arc::new(m))
}

/// A following replica's pipeline side and its inputs.
struct Rig {
    staged: Staged,
    view: watch::Receiver<Arc<crate::rollout::View>>,
    lease: watch::Sender<LeaderStatus>,
    mirror: watch::Sender<Option<Arc<crate::rollout::shared::Mirrored>>>,
}

/// A replica that follows (no lease, nothing read yet) and built `v`.
fn rig(v: &[&HashMap<Group, Arc<Snapshot>>]) -> Rig {
    let (follower, view) = controller_and_view();
    let mut follower = follower.following();
    for (i, l) in v.iter().enumerate() {
        follower.built(10 * i as u64, l);
    }
    let ledger = Ledger::new();
    let (lease_tx, lease_rx) = watch::channel(lease(false, 0));
    let (mirror_tx, mirror_rx) = watch::channel(None);
    let staged = Staged {
        controller: follower,
        deliveries: ledger.deliveries(),
        ledger,
        requests: None,
        gate_answers: None,
        reports: None,
        replicas: Some(Replicas {
            leader: lease_rx,
            mirrored: mirror_rx,
            accepted: None,
        }),
        reloads: None,
    };
    Rig {
        staged,
        view,
        lease: lease_tx,
        mirror: mirror_tx,
    }
}

#[test]
fn a_restarted_replica_that_wins_the_lease_continues_the_previous_terms_decisions() {
    let (v1, v2) = (latest("1"), latest("2"));
    // hub-a led in term 1 and rolled the canary back: it stays on v1.
    let mut other = controller();
    other.built(0, &v1);
    other.built(10, &v2);
    other.delivery(20, &delivery("a", &canary(&v2), Outcome::Nack));
    let decided = mirrored_in_term(&other, &[&v1, &v2], 1);
    assert!(
        matches!(
            decided
                .as_ref()
                .and_then(|m| m.decisions.rollout.as_ref())
                .map(|r| &r.phase),
            Some(Phase::RolledBack { .. })
        ),
        "the setting: a rolled-back rollout"
    );

    // A replica started afresh wins the lease (term 2) before it read the
    // ConfigMap, which still holds term 1's decisions (nobody has led in
    // term 2 yet).
    let Rig {
        mut staged,
        lease: lease_tx,
        mirror: mirror_tx,
        ..
    } = rig(&[&v1, &v2]);
    lease_tx.send_replace(lease(true, 2));
    assert!(staged.role(30).is_empty(), "not before it read them");
    mirror_tx.send_replace(decided);
    staged.role(40);
    assert!(
        staged.controller.leading(),
        "it leads from the previous term's decisions instead of waiting forever"
    );
    assert_eq!(staged.controller.term(), 2);

    // A late write of term 1 after it accepted term 2's is ignored.
    let later = mirrored_in_term(&other, &[&v1, &v2], 2);
    mirror_tx.send_replace(later);
    staged.role(50);
    let accepted = |s: &Staged| {
        s.replicas
            .as_ref()
            .and_then(|r| r.accepted.as_ref())
            .map(|m| m.decisions.term)
    };
    assert_eq!(accepted(&staged), Some(2));
    mirror_tx.send_replace(mirrored_in_term(&other, &[&v1, &v2], 1));
    staged.role(60);
    assert_eq!(
        accepted(&staged),
        Some(2),
        "term 1 after term 2 is a late write"
    );
}
