//! The rollout shared by hub replicas (`leaderElection`). The leader
//! decides; its [`Decisions`] — the rollout's state and the version each
//! dialed cluster is served — go to the ConfigMap [`CONFIGMAP`] in the
//! Lease's namespace. Every other replica follows that ConfigMap and
//! serves the same versions, read from its own history (version ids are
//! content digests, equal on every replica), so a consumer dialing any
//! replica sees what the rollout allows. A replica that becomes leader
//! continues from the decisions it followed, as a restarted hub continues
//! from its state file: the same rollout, the same holds.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use meshhub_mcp::snapshot::Snapshot;
use meshhub_rollout::Rollout;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::history::History;
use crate::leader::LeaderStatus;

/// The ConfigMap holding the leader's decisions.
pub const CONFIGMAP: &str = "meshhub-rollout";
/// Its data key.
pub const KEY: &str = "decisions";

/// Counter: failed writes of the shared decisions.
pub const METRIC_WRITE_ERRORS: &str = "meshhub_rollout_shared_write_errors_total";
/// Counter: writes of decisions not made because the ConfigMap holds
/// decisions of a newer leadership term (a former leader's late write).
pub const METRIC_STALE_WRITES: &str = "meshhub_rollout_shared_stale_writes_total";
/// Gauge: clusters whose decided version this replica can't produce (not
/// in its history): nothing is pushed to them, they keep what they hold.
pub const METRIC_UNRESOLVED: &str = "meshhub_rollout_unresolved_clusters";

/// What the deciding replica (the leader, or a hub alone) decided: what
/// its state file and the shared ConfigMap hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decisions {
    /// The replica that decided (with leader election).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The current (or last) rollout.
    #[serde(default)]
    pub rollout: Option<Rollout>,
    /// Per dialed cluster, the id of the version it is served (always
    /// written: it tells decisions from a bare rollout).
    pub serving: BTreeMap<String, String>,
    /// Clusters that refused a version (NACK, or their istiod dropped an
    /// object new in it) and whose content has not changed since: later
    /// rollouts leave them out, and never offer them that version again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub standing: BTreeMap<String, Standing>,
    /// The clusters' refusals already counted (by the rollout, or as a
    /// standing failure): one told again — by the other channel, a
    /// reconnected report, a record delivered twice — is not a new one,
    /// and never undoes an operator's resume. Shared so that a restarted
    /// hub or a new leader knows them too. Added without a new
    /// [`SCHEMA`]: hubs before it ignore it.
    #[serde(default, skip_serializing_if = "CountedRefusals::is_empty")]
    pub counted_refusals: CountedRefusals,
    /// The leadership term they were made in (the Lease's
    /// `leaseTransitions` when their replica took the lead; 0 for a single
    /// hub, and in decisions of hubs before terms were shared). Writes are
    /// fenced by it: a replica never writes over decisions of a newer
    /// term, and followers ignore decisions of an older term than the
    /// Lease's.
    #[serde(default)]
    pub term: u64,
    /// The format's version ([`SCHEMA`]; 1 when absent: hubs before it
    /// was written). A replica reads its own and older versions, and
    /// refuses newer ones with a clear error.
    #[serde(default = "schema_v1")]
    pub schema: u32,
}

pub use meshhub_api::rollout::Standing;

/// Per cluster and collection, the version of the last refusal (NACK)
/// counted: by the rollout (its machine judged it), or as a standing
/// failure (see [`Decisions::counted_refusals`]). One per collection: a
/// refusal of a newer version supersedes it, a removed cluster's are
/// forgotten, so it stays as small as the clusters' collections.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CountedRefusals(BTreeMap<String, BTreeMap<String, String>>);

impl CountedRefusals {
    /// Whether `cluster`'s refusal of `collection` at `version` was
    /// counted already.
    pub fn contains(&self, cluster: &str, collection: &str, version: &str) -> bool {
        self.0
            .get(cluster)
            .and_then(|c| c.get(collection))
            .is_some_and(|v| v == version)
    }

    /// Counts `cluster`'s refusal of `collection` at `version` (replacing
    /// one of another version of the collection).
    pub fn count(&mut self, cluster: &str, collection: &str, version: &str) {
        if self.contains(cluster, collection, version) {
            return;
        }
        self.0
            .entry(cluster.to_owned())
            .or_default()
            .insert(collection.to_owned(), version.to_owned());
    }

    /// Forgets `cluster`'s (it left the configuration).
    pub fn forget(&mut self, cluster: &str) {
        self.0.remove(cluster);
    }

    /// Adds `other`'s where nothing is counted for the collection here
    /// (what is here is newer: counted since `other` was saved).
    pub fn merge(&mut self, other: Self) {
        for (cluster, collections) in other.0 {
            let here = self.0.entry(cluster).or_default();
            for (collection, version) in collections {
                here.entry(collection).or_insert(version);
            }
        }
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The version of the decisions' format this hub writes: 2 added
/// `schema`, a shared `term` and `standing`.
pub const SCHEMA: u32 = 2;

fn schema_v1() -> u32 {
    1
}

/// Why decisions can't be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON of this shape.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Written by a newer meshhub.
    #[error("written by a newer meshhub (decisions schema {found}; this one reads up to {SCHEMA})")]
    Newer {
        /// The version found.
        found: u32,
    },
}

impl Decisions {
    /// Empty decisions of the current format.
    pub fn new() -> Self {
        Self {
            schema: SCHEMA,
            ..Self::default()
        }
    }

    /// The decisions in `text`: this format (any version up to
    /// [`SCHEMA`]), or a rollout alone (the state file of hubs before the
    /// decisions were shared). Decisions always have `serving`; the error
    /// says what is wrong with the one shape the text claims to be.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        if value.get("serving").is_some() {
            let d: Self = serde_json::from_value(value)?;
            if d.schema > SCHEMA {
                return Err(ParseError::Newer { found: d.schema });
            }
            return Ok(d);
        }
        Ok(Decisions {
            rollout: Some(serde_json::from_value(value)?),
            ..Decisions::new()
        })
    }

    /// The `(cluster, version id)` pairs the decisions name.
    pub fn versions(&self) -> impl Iterator<Item = (&str, &str)> {
        let serving = self.serving.iter().map(|(c, v)| (c.as_str(), v.as_str()));
        let targets = self.rollout.iter().flat_map(|r| {
            r.targets.iter().flat_map(|(c, t)| {
                t.step
                    .from
                    .iter()
                    .chain(std::iter::once(&t.step.to))
                    .map(move |v| (c.as_str(), v.as_str()))
            })
        });
        serving.chain(targets)
    }
}

/// The snapshots behind decisions' version ids, as far as this replica's
/// history has them.
pub type Snapshots = HashMap<(String, String), Arc<Snapshot>>;

/// The leader's decisions as a follower sees them, with the snapshots
/// its history has of the versions they name.
#[derive(Clone, Debug, Default)]
pub struct Mirrored {
    /// The decisions.
    pub decisions: Decisions,
    /// Their versions' snapshots read from the history (a version this
    /// replica has just built may not be recorded yet: the controller also
    /// looks at its newest builds).
    pub snapshots: Snapshots,
}

/// The followers' view: `None` until the ConfigMap was listed once.
pub type MirrorReceiver = watch::Receiver<Option<Arc<Mirrored>>>;

/// The ConfigMap's client.
#[derive(Clone, Debug)]
pub struct SharedRollout {
    cm: crate::configmap::Shared,
}

impl SharedRollout {
    /// The decisions in `namespace` (the leader election's), over `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            cm: crate::configmap::Shared::new(client, namespace, CONFIGMAP),
        }
    }

    /// `namespace/name` of the ConfigMap.
    pub fn location(&self) -> String {
        self.cm.location()
    }

    /// Writes the newest of `decisions` while this replica leads (`leader`)
    /// — those made in the current leadership term only —, signed with its
    /// identity, until `shutdown` (then the last one once
    /// more if it still leads). A failed write is retried after a second
    /// unless newer decisions came.
    pub async fn publish(
        self,
        mut decisions: watch::Receiver<Option<Arc<Decisions>>>,
        mut leader: watch::Receiver<LeaderStatus>,
        shutdown: CancellationToken,
    ) {
        metrics::counter!(METRIC_WRITE_ERRORS).increment(0);
        let mut written: Option<Arc<Decisions>> = None;
        let mut retry = false;
        loop {
            let stop = tokio::select! {
                changed = decisions.changed() => changed.is_err(),
                changed = leader.changed() => changed.is_err(),
                () = tokio::time::sleep(Duration::from_secs(1)), if retry => false,
                () = shutdown.cancelled() => true,
            };
            let status = leader.borrow_and_update().clone();
            let newest = decisions.borrow_and_update().clone();
            retry = false;
            if !status.is_leader {
                // Written again when this replica leads again.
                written = None;
            }
            let current = newest.filter(|d| status.is_leader && d.term == status.term);
            if let Some(d) = current {
                let fresh = written.as_ref().is_none_or(|w| !Arc::ptr_eq(w, &d));
                if fresh {
                    match self.write(&d, status.identity.clone()).await {
                        Ok(()) => {
                            debug!(configmap = %self.location(), "rollout decisions shared");
                            written = Some(d);
                        }
                        Err(WriteError::Stale { found, ours }) => {
                            // A newer leader wrote: this replica's
                            // decisions are of the past; never written
                            // over its successor's.
                            metrics::counter!(METRIC_STALE_WRITES).increment(1);
                            warn!(configmap = %self.location(), term = ours, newer = found, "the shared decisions are of a newer leadership term; this replica's are not written");
                            written = Some(d);
                        }
                        Err(e) => {
                            metrics::counter!(METRIC_WRITE_ERRORS).increment(1);
                            warn!(configmap = %self.location(), error = %e, "can't share the rollout's decisions; retrying");
                            retry = true;
                        }
                    }
                }
            }
            if stop {
                break;
            }
        }
    }

    /// Writes `d` unless the ConfigMap holds decisions of a newer term,
    /// with the resourceVersion read as a precondition (a concurrent write
    /// makes it read and check again).
    async fn write(&self, d: &Decisions, by: Option<String>) -> Result<(), WriteError> {
        let signed = Decisions {
            by,
            ..Decisions::clone(d)
        };
        let text = serde_json::to_string(&signed)?;
        let ours = d.term;
        self.cm
            .write_fenced(KEY, &text, |current| fence(current, ours))
            .await
    }

    /// Follows the ConfigMap until `shutdown`, sending what it says with
    /// the snapshots `history` has of its versions (read once each). A
    /// version this replica's history lacks is read from the archive
    /// ([`crate::history::archive`]) first; one still missing is looked
    /// for again every [`MISSING_RETRY`].
    pub async fn follow(
        self,
        history: History,
        mirrored: watch::Sender<Option<Arc<Mirrored>>>,
        shutdown: CancellationToken,
    ) {
        let mut changes = self.cm.watch();
        let mut known = Snapshots::new();
        let mut last: Option<Decisions> = None;
        loop {
            let next = if missing_in(last.as_ref(), &known) {
                tokio::select! {
                    d = self.cm.next_data(&mut changes, &shutdown) => d.map_or(Next::Stop, Next::Data),
                    () = tokio::time::sleep(MISSING_RETRY) => Next::Retry,
                }
            } else {
                self.cm
                    .next_data(&mut changes, &shutdown)
                    .await
                    .map_or(Next::Stop, Next::Data)
            };
            let (decisions, retry) = match next {
                Next::Stop => break,
                Next::Retry => match last.clone() {
                    Some(d) => (d, true),
                    None => continue,
                },
                Next::Data(data) => match data.get(KEY).map(|t| Decisions::parse(t)) {
                    None => (Decisions::default(), false),
                    Some(Ok(d)) => (d, false),
                    Some(Err(e)) => {
                        // Keep following what was last readable.
                        warn!(error = %e, configmap = %self.location(), "unreadable rollout decisions in the shared ConfigMap; ignored");
                        continue;
                    }
                },
            };
            let wanted: HashSet<(String, String)> = decisions
                .versions()
                .map(|(c, v)| (c.to_owned(), v.to_owned()))
                .collect();
            // Kept from pruning before this replica's controller applied them.
            history.protect("followed", wanted.clone());
            known.retain(|k, _| wanted.contains(k));
            let missing: Vec<(String, String)> = wanted
                .into_iter()
                .filter(|k| !known.contains_key(k))
                .collect();
            let before = known.len();
            // What this replica's history has, at once; the decisions are
            // followed before anything is read from the archive (a
            // rollback never waits on it), and sent again with what the
            // archive supplied.
            let missing = read_snapshots(&history, missing, &mut known).await;
            if !(retry && known.len() == before) {
                if let Some(r) = &decisions.rollout.as_ref().filter(|_| !retry) {
                    info!(rollout = r.id, phase = r.phase.name(), by = ?decisions.by, "shared rollout decisions read");
                }
                mirrored.send_replace(Some(Arc::new(Mirrored {
                    decisions: decisions.clone(),
                    snapshots: known.clone(),
                })));
            }
            if !missing.is_empty() {
                let found = known.len();
                history.fetch_missing(missing.clone()).await;
                read_snapshots(&history, missing, &mut known).await;
                if known.len() > found {
                    mirrored.send_replace(Some(Arc::new(Mirrored {
                        decisions: decisions.clone(),
                        snapshots: known.clone(),
                    })));
                }
            }
            last = Some(decisions);
        }
    }
}

/// Reads the snapshots of `wanted` this replica's history has into
/// `known`; returns those it lacks.
async fn read_snapshots(
    history: &History,
    wanted: Vec<(String, String)>,
    known: &mut Snapshots,
) -> Vec<(String, String)> {
    if wanted.is_empty() {
        return wanted;
    }
    let h = history.clone();
    let read = tokio::task::spawn_blocking(move || {
        let mut found = Vec::new();
        let mut lacking = Vec::new();
        for (c, v) in wanted {
            match h.snapshot(&c, &v) {
                Ok(s) => found.push(((c, v), s)),
                Err(_) => lacking.push((c, v)),
            }
        }
        (found, lacking)
    })
    .await;
    match read {
        Ok((found, lacking)) => {
            known.extend(found);
            lacking
        }
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// How often a follower looks again for versions of the decisions it
/// could not produce (neither in its history nor in the archive yet).
pub const MISSING_RETRY: Duration = Duration::from_secs(5);

/// What a follower does next.
enum Next {
    /// The ConfigMap's data changed.
    Data(BTreeMap<String, String>),
    /// Look again for versions still missing.
    Retry,
    /// Shut down (or the watch ended).
    Stop,
}

/// Whether versions `decisions` refer to are not in `known`.
fn missing_in(decisions: Option<&Decisions>, known: &Snapshots) -> bool {
    decisions.is_some_and(|d| {
        d.versions()
            .any(|(c, v)| !known.contains_key(&(c.to_owned(), v.to_owned())))
    })
}

/// Keeps the versions `decisions` refer to (every rollout version and
/// what each cluster is served) from being pruned from `history`, as they
/// change, until `shutdown`. Every replica runs it: a follower's decisions
/// are the leader's.
pub async fn protect_history(
    mut decisions: watch::Receiver<Option<Arc<Decisions>>>,
    history: History,
    shutdown: CancellationToken,
) {
    loop {
        // Nothing decided yet (before the first build): what the saved or
        // followed decisions protected stays protected. Once this replica
        // decides, its decisions replace the restored ones (they carried
        // them over); the followed ones are the follow task's to update.
        if let Some(d) = decisions.borrow_and_update().clone() {
            history.protect(
                "decided",
                d.versions()
                    .map(|(c, v)| (c.to_owned(), v.to_owned()))
                    .collect(),
            );
            history.protect("restored", std::collections::HashSet::new());
        }
        tokio::select! {
            changed = decisions.changed() => if changed.is_err() { break },
            () = shutdown.cancelled() => break,
        }
    }
}

/// Whether decisions of term `ours` may replace the `current` text of the
/// ConfigMap: not over decisions of a newer term (unreadable ones —
/// damaged, or of a newer format — are replaced by readable ones).
fn fence(current: Option<&str>, ours: u64) -> Result<(), WriteError> {
    let found = current
        .and_then(|t| Decisions::parse(t).ok())
        .map_or(0, |c| c.term);
    if found > ours {
        Err(WriteError::Stale { found, ours })
    } else {
        Ok(())
    }
}

/// Why the decisions can't be shared.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API server refused or failed.
    #[error("ConfigMap {CONFIGMAP}")]
    Api(#[from] kube::Error),
    /// The decisions can't be encoded.
    #[error("rollout decisions")]
    Json(#[from] serde_json::Error),
    /// The ConfigMap holds decisions of a newer leadership term.
    #[error("the shared decisions are of term {found}, newer than this replica's {ours}")]
    Stale {
        /// The term found.
        found: u64,
        /// This replica's.
        ours: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_former_leader_never_writes_over_a_newer_terms_decisions() {
        let of = |term| {
            serde_json::to_string(&Decisions {
                term,
                ..Decisions::new()
            })
            .unwrap()
        };
        assert!(fence(None, 0).is_ok(), "nothing there yet");
        assert!(fence(Some(&of(4)), 4).is_ok(), "its own term");
        assert!(fence(Some(&of(3)), 4).is_ok(), "an older term");
        assert!(matches!(
            fence(Some(&of(5)), 4),
            Err(WriteError::Stale { found: 5, ours: 4 })
        ));
        assert!(fence(Some("not json"), 1).is_ok(), "unreadable: replaced");
    }

    #[test]
    fn a_state_file_of_an_older_hub_reads_as_its_rollout() {
        let (old, _) = Rollout::start(
            7,
            1,
            Vec::new(),
            BTreeMap::new(),
            60_000,
            meshhub_rollout::OnFailure::Rollback,
            None,
        );
        let rollout = serde_json::to_string(&old).unwrap();
        let d = Decisions::parse(&rollout).unwrap();
        assert_eq!(d.rollout.as_ref().map(|r| r.id), Some(7));
        assert!(d.serving.is_empty());
        let text = serde_json::to_string(&Decisions {
            by: Some("hub-a".into()),
            rollout: d.rollout.clone(),
            serving: [("east".to_owned(), "abc".to_owned())].into(),
            standing: BTreeMap::new(),
            counted_refusals: CountedRefusals::default(),
            term: 3,
            schema: SCHEMA,
        })
        .unwrap();
        let back = Decisions::parse(&text).unwrap();
        assert_eq!(back.by.as_deref(), Some("hub-a"));
        assert_eq!(back.rollout, d.rollout);
        assert_eq!(back.serving["east"], "abc");
        assert_eq!(back.term, 3, "the term is shared (fencing)");
        assert_eq!(back.schema, SCHEMA);
        assert!(Decisions::parse("{\"rollout\": 3}").is_err());
        // The previous version's decisions (no schema, term or standing).
        let v1 = r#"{"by":"hub-a","rollout":null,"serving":{"east":"abc"}}"#;
        let d = Decisions::parse(v1).unwrap();
        assert_eq!(
            (d.schema, d.term, d.serving["east"].as_str()),
            (1, 0, "abc")
        );
        assert!(d.standing.is_empty());
        assert!(d.counted_refusals.is_empty());
        // Counted refusals are written (no new schema: older hubs ignore
        // them) and read back.
        let mut counted = Decisions::new();
        counted.counted_refusals.count("east", "vs", "7");
        let text = serde_json::to_string(&counted).unwrap();
        assert!(
            text.contains(r#""countedRefusals":{"east":{"vs":"7"}}"#),
            "{text}"
        );
        let back = Decisions::parse(&text).unwrap();
        assert!(back.counted_refusals.contains("east", "vs", "7"));
        assert_eq!(back.schema, SCHEMA);
        // This version's, written and read back.
        let now = serde_json::to_string(&Decisions {
            term: 9,
            ..Decisions::new()
        })
        .unwrap();
        assert_eq!(Decisions::parse(&now).unwrap().schema, SCHEMA);
        // A newer meshhub's: refused, saying so.
        let newer = now.replace(&format!("\"schema\":{SCHEMA}"), "\"schema\":99");
        let e = Decisions::parse(&newer).unwrap_err();
        assert!(matches!(e, ParseError::Newer { found: 99 }), "{e}");
        assert!(e.to_string().contains("newer meshhub"), "{e}");
        assert!(
            Decisions::parse("{\"id\": 7}").is_err(),
            "neither a rollout nor decisions"
        );
    }
}
