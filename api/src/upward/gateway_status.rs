//! What a cluster's Gateway API controllers (its istiod) wrote in the
//! status of the Gateway API objects its agent applied, and what that
//! says: [`ObjectStatusView::acceptance`] — accepted, refused, or not yet
//! told — the one judgement `/status`, `describe`, the status write-back
//! and the staged rollout read (issue 39, item 4).
//!
//! A condition speaks of the object as applied only when its
//! `observedGeneration` is the live object's `generation`: a condition
//! about an older generation is the controller's word on another spec.

use serde::{Deserialize, Serialize};

/// The statuses a cluster's agent reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayApiStatusView {
    /// One per applied object with a status to tell, by collection and
    /// name.
    #[serde(default)]
    pub objects: Vec<ObjectStatusView>,
    /// Objects the agent left out past its cap.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl GatewayApiStatusView {
    /// The status of `collection`'s object `name` (`namespace/name`).
    pub fn object(&self, collection: &str, name: &str) -> Option<&ObjectStatusView> {
        self.objects
            .binary_search_by(|o| (o.collection.as_str(), o.name.as_str()).cmp(&(collection, name)))
            .ok()
            .map(|i| &self.objects[i])
    }

    /// What the cluster's controllers said of `collection`'s object `name`
    /// at the hub's `version` of it: pending while the cluster's object is
    /// of another version (or not there yet).
    pub fn acceptance_of(&self, collection: &str, name: &str, version: &str) -> Acceptance {
        match self.object(collection, name) {
            Some(o) if o.version == version => o.acceptance(),
            Some(_) => Acceptance::Pending,
            None if self.omitted > 0 => Acceptance::Untold,
            None => Acceptance::Pending,
        }
    }
}

/// One applied object's status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectStatusView {
    /// `k8s/gateway.networking.k8s.io/v1/httproutes`.
    pub collection: String,
    /// `namespace/name`.
    pub name: String,
    /// The object's version as the hub served it (empty: not said).
    #[serde(default)]
    pub version: String,
    /// The live object's generation.
    #[serde(default)]
    pub generation: i64,
    /// The object's own conditions (a Gateway's, a ListenerSet's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionView>,
    /// Per parent, ancestor or listener.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<ParentStatusView>,
    /// A route's number of `spec.parentRefs` (0: not a route, or not
    /// said): accepted only when each has its entry.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub parent_refs: u32,
}

/// What a parent entry stands for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ParentRole {
    /// A route's `parentRef`.
    #[default]
    Parent,
    /// A policy's `ancestorRef`.
    Ancestor,
    /// A Gateway's or ListenerSet's listener.
    Listener,
}

/// One entry of an object's per-parent status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentStatusView {
    /// What it stands for.
    pub role: ParentRole,
    /// The reference's group (empty: not written).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Its kind (empty: not written; `Gateway` for a parent).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Its namespace (empty: the object's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Its name (a listener's name).
    pub name: String,
    /// Its section (empty: none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub section_name: String,
    /// Its port (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub port: u32,
    /// The controller that wrote the entry (empty for a listener).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub controller: String,
    /// Its conditions.
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
}

impl ParentStatusView {
    /// How the entry is named in messages: `Gateway infra/gw (http)`,
    /// `listener http`.
    pub fn describe(&self, object_namespace: &str) -> String {
        if self.role == ParentRole::Listener {
            return format!("listener {}", self.name);
        }
        let kind = if self.kind.is_empty() {
            "Gateway"
        } else {
            &self.kind
        };
        let ns = if self.namespace.is_empty() {
            object_namespace
        } else {
            &self.namespace
        };
        let mut out = format!("{kind} {ns}/{}", self.name);
        match (self.section_name.is_empty(), self.port) {
            (false, 0) => out.push_str(&format!(" ({})", self.section_name)),
            (false, p) => out.push_str(&format!(" ({}:{p})", self.section_name)),
            (true, 0) => {}
            (true, p) => out.push_str(&format!(" (port {p})")),
        }
        out
    }
}

/// A condition's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`, or not said.
    #[default]
    Unknown,
}

/// One condition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `Accepted`, `ResolvedRefs`, `Programmed`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Its value.
    pub status: ConditionStatus,
    /// Its reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Its message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The generation it speaks of.
    #[serde(default)]
    pub observed_generation: i64,
}

/// The condition every judgement reads.
pub const ACCEPTED: &str = "Accepted";

/// What a cluster's controllers said of one object at its live generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acceptance {
    /// Every entry (or the object itself) is `Accepted=True` at the
    /// object's generation.
    Accepted,
    /// Some entry (or the object itself) is `Accepted=False` at the
    /// object's generation.
    Refused {
        /// Where: `Gateway infra/gw (http)`, `listener http`, or empty
        /// for the object itself.
        at: String,
        /// The condition's reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// Not told yet: no controller wrote a condition about this
    /// generation (it may be working on it, or no controller in the
    /// cluster handles the object's parent).
    Pending,
    /// The agent left the object out of its report (past its cap): it
    /// can't be told. Nothing waits for it.
    Untold,
}

impl std::fmt::Display for Acceptance {
    /// `yes`, `pending`, or `no: <where>: <reason>: <message>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Accepted => f.write_str("yes"),
            Self::Pending => f.write_str("pending"),
            Self::Untold => f.write_str("not reported"),
            Self::Refused {
                at,
                reason,
                message,
            } => {
                f.write_str("no: ")?;
                if !at.is_empty() {
                    write!(f, "{at}: ")?;
                }
                write!(f, "{reason}")?;
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
        }
    }
}

impl ObjectStatusView {
    /// The object's namespace (`` for a cluster-scoped one).
    fn namespace(&self) -> &str {
        self.name.split_once('/').map_or("", |(ns, _)| ns)
    }

    /// What the controllers said of the object at its live generation:
    /// refused if any `Accepted` condition about it is `False`, accepted
    /// if the object's own `Accepted` (a Gateway, a ListenerSet) or every
    /// parent's and ancestor's is `True` and no listener is refused,
    /// pending otherwise.
    pub fn acceptance(&self) -> Acceptance {
        let current =
            |c: &&ConditionView| c.kind == ACCEPTED && c.observed_generation == self.generation;
        let own = self.conditions.iter().find(current);
        let refused = |at: String, c: &ConditionView| Acceptance::Refused {
            at,
            reason: c.reason.clone(),
            message: c.message.clone(),
        };
        if let Some(c) = own.filter(|c| c.status == ConditionStatus::False) {
            return refused(String::new(), c);
        }
        for p in &self.parents {
            if let Some(c) = p
                .conditions
                .iter()
                .find(current)
                .filter(|c| c.status == ConditionStatus::False)
            {
                return refused(p.describe(self.namespace()), c);
            }
        }
        let accepted =
            |c: Option<&ConditionView>| c.is_some_and(|c| c.status == ConditionStatus::True);
        let told = match own {
            // A Gateway or ListenerSet: its own condition says it.
            Some(_) => accepted(own),
            // A route or policy: each parent or ancestor entry.
            None => {
                let entries: Vec<_> = self
                    .parents
                    .iter()
                    .filter(|p| p.role != ParentRole::Listener)
                    .collect();
                !entries.is_empty()
                    && entries.len() >= self.parent_refs as usize
                    && entries
                        .iter()
                        .all(|p| accepted(p.conditions.iter().find(current)))
            }
        };
        if told {
            Acceptance::Accepted
        } else {
            Acceptance::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(status: ConditionStatus, generation: i64) -> ConditionView {
        ConditionView {
            kind: ACCEPTED.into(),
            status,
            reason: format!("{status:?}"),
            message: "m".into(),
            observed_generation: generation,
        }
    }

    fn parent(name: &str, conditions: Vec<ConditionView>) -> ParentStatusView {
        ParentStatusView {
            role: ParentRole::Parent,
            name: name.into(),
            section_name: "http".into(),
            controller: "istio.io/gateway-controller".into(),
            conditions,
            ..Default::default()
        }
    }

    fn route(generation: i64, parents: Vec<ParentStatusView>) -> ObjectStatusView {
        ObjectStatusView {
            collection: "gateway.networking.k8s.io/v1/HTTPRoute".into(),
            name: "shop/r".into(),
            version: "v1".into(),
            generation,
            parents,
            ..Default::default()
        }
    }

    use ConditionStatus::{False, True, Unknown};

    #[test]
    fn a_route_is_accepted_when_every_parent_accepted_its_generation() {
        let r = route(
            2,
            vec![
                parent("a", vec![condition(True, 2)]),
                parent("b", vec![condition(True, 2)]),
            ],
        );
        assert_eq!(r.acceptance(), Acceptance::Accepted);
        // One parent still speaks of the last generation.
        let r = route(
            3,
            vec![
                parent("a", vec![condition(True, 3)]),
                parent("b", vec![condition(True, 2)]),
            ],
        );
        assert_eq!(r.acceptance(), Acceptance::Pending);
        // Nothing written yet.
        assert_eq!(route(1, vec![]).acceptance(), Acceptance::Pending);
        // Two parents in its spec, one entry: the other parent's
        // controller (or Gateway) is not there.
        let mut r = route(2, vec![parent("a", vec![condition(True, 2)])]);
        r.parent_refs = 2;
        assert_eq!(r.acceptance(), Acceptance::Pending);
        r.parent_refs = 1;
        assert_eq!(r.acceptance(), Acceptance::Accepted);
        assert_eq!(
            route(1, vec![parent("a", vec![condition(Unknown, 1)])]).acceptance(),
            Acceptance::Pending
        );
    }

    #[test]
    fn one_parent_refusing_the_current_generation_refuses_the_route_and_says_where() {
        let r = route(
            4,
            vec![
                parent("a", vec![condition(True, 4)]),
                parent("b", vec![condition(False, 4)]),
            ],
        );
        let Acceptance::Refused { at, reason, .. } = r.acceptance() else {
            panic!("{:?}", r.acceptance())
        };
        assert_eq!(at, "Gateway shop/b (http)");
        assert_eq!(reason, "False");
        // A refusal of an older generation is not this one's.
        let r = route(5, vec![parent("b", vec![condition(False, 4)])]);
        assert_eq!(r.acceptance(), Acceptance::Pending);
    }

    #[test]
    fn a_gateway_is_judged_by_its_own_condition_and_its_listeners_refusals() {
        let gw = |own: ConditionStatus, listener: ConditionStatus| ObjectStatusView {
            collection: "gateway.networking.k8s.io/v1/Gateway".into(),
            name: "infra/gw".into(),
            generation: 1,
            conditions: vec![condition(own, 1)],
            parents: vec![ParentStatusView {
                role: ParentRole::Listener,
                name: "http".into(),
                conditions: vec![condition(listener, 1)],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(gw(True, True).acceptance(), Acceptance::Accepted);
        assert!(matches!(
            gw(True, False).acceptance(),
            Acceptance::Refused { at, .. } if at == "listener http"
        ));
        assert!(matches!(
            gw(False, True).acceptance(),
            Acceptance::Refused { at, .. } if at.is_empty()
        ));
        assert_eq!(gw(Unknown, True).acceptance(), Acceptance::Pending);
    }

    #[test]
    fn parents_are_named_as_written_with_the_apis_defaults() {
        let p = ParentStatusView {
            kind: "ListenerSet".into(),
            namespace: "infra".into(),
            name: "ls".into(),
            port: 443,
            ..Default::default()
        };
        assert_eq!(p.describe("shop"), "ListenerSet infra/ls (port 443)");
        let p = ParentStatusView {
            name: "gw".into(),
            section_name: "https".into(),
            port: 443,
            ..Default::default()
        };
        assert_eq!(p.describe("shop"), "Gateway shop/gw (https:443)");
    }

    #[test]
    fn objects_are_found_by_collection_and_name() {
        let mut a = route(1, vec![]);
        a.name = "a/x".into();
        let b = route(1, vec![]);
        let s = GatewayApiStatusView {
            objects: vec![a, b],
            omitted: 0,
        };
        assert!(
            s.object("gateway.networking.k8s.io/v1/HTTPRoute", "shop/r")
                .is_some()
        );
        assert!(
            s.object("gateway.networking.k8s.io/v1/HTTPRoute", "shop/q")
                .is_none()
        );
        // Another version than the hub's: not told yet.
        assert_eq!(
            s.acceptance_of("gateway.networking.k8s.io/v1/HTTPRoute", "shop/r", "v0"),
            Acceptance::Pending
        );
    }

    #[test]
    fn verdicts_read_as_text() {
        assert_eq!(Acceptance::Accepted.to_string(), "yes");
        assert_eq!(Acceptance::Pending.to_string(), "pending");
        let no = Acceptance::Refused {
            at: "Gateway shop/gw".into(),
            reason: "NoMatchingParent".into(),
            message: "gone".into(),
        };
        assert_eq!(
            no.to_string(),
            "no: Gateway shop/gw: NoMatchingParent: gone"
        );
    }
}
