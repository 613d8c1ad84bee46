//! What the pipeline records besides publishing: source changes and their
//! origins, rejections and publications (audit log), versions (history),
//! and which groups are served a pin. Nothing here waits: history and
//! audit records are queued with `try_send`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use meshhub_mcp::cache::Group;
use meshhub_mcp::snapshot::Snapshot;
use tokio::sync::watch;

use crate::audit::{AuditEvent, AuditLog, ObjectRef, is_secret};
use crate::history::{ChangeOrigin, History, MAX_ORIGINS, Pins, Publication, version_id};
use crate::source::SourceEvent;
use crate::store::Rejected;

/// The source changes of one build: those listed, and how many more.
pub type Origins = (Arc<Vec<ChangeOrigin>>, usize);

/// The pipeline's recording state.
#[derive(Default)]
pub struct Recording {
    pub(super) history: Option<History>,
    pub(super) audit: AuditLog,
    pub(super) pins: Option<watch::Receiver<Pins>>,
    /// Pinned groups served their pin, with the pin's time and snapshot.
    served: HashMap<Group, (u64, Arc<Snapshot>)>,
    origins: Vec<ChangeOrigin>,
    more: usize,
    /// Rejections already written to the audit log.
    rejected: HashSet<String>,
}

/// The history origin and the audit record of a unit event.
pub fn describe(ev: &SourceEvent) -> (ChangeOrigin, AuditEvent) {
    let SourceEvent::Unit {
        source,
        unit,
        entries,
    } = ev
    else {
        unreachable!("only unit events are described")
    };
    let mut objects = Vec::new();
    let mut refs = Vec::new();
    let mut unreadable = 0;
    let mut resource_version = None;
    let mut changed_by = None;
    for e in entries {
        if let Some(by) = &e.changed_by {
            changed_by = Some(by.to_string());
        }
        match &e.parsed {
            Ok(o) => {
                let name = match &o.metadata.namespace {
                    Some(ns) => format!("{ns}/{}", o.metadata.name),
                    None => o.metadata.name.clone(),
                };
                objects.push(format!("{} {name}", o.kind));
                resource_version.clone_from(&o.metadata.resource_version);
                refs.push(ObjectRef {
                    kind: o.kind.clone(),
                    name,
                    resource_version: o.metadata.resource_version.clone(),
                });
            }
            Err(_) => unreadable += 1,
        }
    }
    if objects.len() != 1 {
        resource_version = None;
    }
    (
        ChangeOrigin {
            source: source.to_string(),
            unit: unit.to_string(),
            objects,
            removed: entries.is_empty(),
            unreadable,
            resource_version,
            changed_by: changed_by.clone(),
        },
        AuditEvent::SourceChange {
            source: source.to_string(),
            unit: unit.to_string(),
            objects: refs,
            unreadable,
            changed_by,
        },
    )
}

impl Recording {
    /// Whether source changes need describing.
    pub fn wanted(&self) -> bool {
        self.history.is_some() || self.audit.enabled()
    }

    /// A source change was applied to the store.
    pub fn changed(&mut self, origin: ChangeOrigin, audit: AuditEvent) {
        self.audit.record(audit);
        if self.history.is_some() {
            if self.origins.len() < MAX_ORIGINS {
                self.origins.push(origin);
            } else {
                self.more += 1;
            }
        }
    }

    /// The source changes since the last build.
    pub fn take_origins(&mut self) -> Origins {
        (
            Arc::new(std::mem::take(&mut self.origins)),
            std::mem::take(&mut self.more),
        )
    }

    /// The time of the pin `group` is served, if it is.
    pub fn served_pin(&self, group: &Group) -> Option<u64> {
        self.served.get(group).map(|(since, _)| *since)
    }

    /// The pinned snapshot `group` is served, if it is pinned.
    pub fn pin_snapshot(&self, group: &Group) -> Option<Arc<Snapshot>> {
        self.served.get(group).map(|(_, s)| s.clone())
    }

    /// The groups served a pin.
    pub fn pinned_groups(&self) -> impl Iterator<Item = &Group> {
        self.served.keys()
    }

    /// Notes that `group` is served the pin of `since`; whether that is
    /// new (the snapshot must be set).
    pub fn serve_pin(&mut self, group: &Group, since: u64, snapshot: &Arc<Snapshot>) -> bool {
        self.served
            .insert(group.clone(), (since, snapshot.clone()))
            .map(|(s, _)| s)
            != Some(since)
    }

    /// The groups served a pin that is no longer in `pins`, forgotten.
    pub fn unpinned(&mut self, pins: &Pins) -> Vec<Group> {
        let gone: Vec<Group> = self
            .served
            .keys()
            .filter(|g| !pins.contains_key(g.as_ref()))
            .cloned()
            .collect();
        for g in &gone {
            self.served.remove(g);
        }
        gone
    }

    /// A group's snapshot changed (`held_back`: why it is not served,
    /// empty when it is).
    pub fn published(
        &mut self,
        group: &Group,
        snapshot: &Arc<Snapshot>,
        origins: &Origins,
        held_back: &[String],
        staged: bool,
    ) {
        if !self.wanted() {
            return;
        }
        let pinned = self.served.contains_key(group).then(|| {
            self.pins
                .as_ref()
                .and_then(|rx| {
                    rx.borrow()
                        .get(group.as_ref())
                        .map(|p| p.record.version.clone())
                })
                .unwrap_or_default()
        });
        self.audit.record(AuditEvent::Published {
            cluster: group.to_string(),
            version: version_id(snapshot),
            resources: snapshot.collections().map(|(_, c)| c.len()).sum(),
            served_pinned: pinned,
            held_back: held_back.to_vec(),
            staged,
        });
        if let Some(h) = &self.history {
            h.record(Publication {
                cluster: group.clone(),
                snapshot: snapshot.clone(),
                at: SystemTime::now(),
                origins: origins.0.clone(),
                more_origins: origins.1,
                held_back: held_back.to_vec(),
            });
        }
    }

    /// Writes the rejections not written before (and forgets those gone).
    pub fn rejections(&mut self, rejected: &[Rejected]) {
        if !self.audit.enabled() {
            return;
        }
        let mut now = HashSet::with_capacity(rejected.len());
        for r in rejected {
            let origin = r
                .origin
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default();
            let key = format!("{origin}|{:?}|{:?}|{}", r.kind, r.name, r.reasons.join("|"));
            if !self.rejected.contains(&key) {
                let secret = r.kind.as_deref().is_some_and(is_secret);
                self.audit.record(AuditEvent::Rejected {
                    origin,
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                    reasons: if secret {
                        vec!["(withheld: Secret)".to_owned()]
                    } else {
                        r.reasons.clone()
                    },
                });
            }
            now.insert(key);
        }
        self.rejected = now;
    }
}
