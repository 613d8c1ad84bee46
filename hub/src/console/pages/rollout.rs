//! The rollout page: the current (or last) rollout's waves as a timeline —
//! each wave's clusters and their states, the bake countdown, the progress
//! deadline, its gates — the failure with its cause, cluster and message,
//! the standing failures, and the actions (promote, abort, resume) for a
//! browser holding the admin token. The `#rollout` section is the fragment
//! the event stream sends again when the rollout changes.

use std::collections::BTreeMap;

use maud::{Markup, html};
use meshhub_rollout::{
    Cause, ClusterState, Comparison, Failure, Members, Phase, Policy, Promotion, Rollout, Target,
};

use crate::console::layout::{Root, badge, cluster_link, countdown, encode, millis};
use crate::console::model::rollout_state;
use crate::rollout::View;
use meshhub_api::rollout::GateReading;

/// Where the page sits.
const ROOT: Root = Root::CONSOLE;

/// Clusters listed per wave before "and N more" (the counts cover all).
const LISTED: usize = 60;

/// The page's content.
pub fn content(view: &View) -> Markup {
    html! {
        h1 { "Rollout" }
        // Outside the section the event stream replaces: the buttons keep
        // their focus and an action's answer stays.
        div #actions .actions {}
        p #action-result role="status" {}
        section #rollout aria-label="Rollout" { (section(view)) }
    }
}

/// The `#rollout` section.
pub fn section(view: &View) -> Markup {
    html! {
        @if !view.enabled {
            p { "No rollout policy is configured: every change reaches every cluster at once. "
                "See docs/rollout.md to stage changes in waves." }
        }
        @if view.following {
            p.note { "This replica follows the decisions of "
                strong { (view.leader.as_deref().unwrap_or("the leader")) }
                "; actions go to it." }
        }
        @match &view.rollout {
            Some(r) => (rollout(r, view.policy.as_ref(), &view.gates)),
            None => @if view.enabled { p { "No change has been rolled out since the hub started." } },
        }
        @if !view.standing.is_empty() {
            h2 { "Standing failures" }
            p.muted { "Clusters that refused a version are left out of later rollouts until their content changes or an operator resumes them." }
            table {
                thead { tr { th scope="col" { "Cluster" } th scope="col" { "Refused version" } th scope="col" { "Rollout" } th scope="col" { "Why" } } }
                tbody {
                    @for (c, s) in &view.standing {
                        tr { th scope="row" { (cluster_link(ROOT, c)) } td { code { (s.version) } } td { @if let Some(r) = s.sent_by() { "#" (r) } @else { "none" } } td.message { (s.message) } }
                    }
                }
            }
        }
        @if !view.unavailable.is_empty() {
            h2 { "Versions this replica cannot produce" }
            ul { @for (c, v) in &view.unavailable { li { (cluster_link(ROOT, c)) ": " code { (v) } } } }
        }
        @if let Some(p) = &view.policy { (policy(p)) }
    }
}

fn rollout(r: &Rollout, policy: Option<&Policy>, readings: &[GateReading]) -> Markup {
    let failure = match &r.phase {
        Phase::Halted { failure } | Phase::RolledBack { failure } => Some(failure),
        _ => None,
    };
    html! {
        h2 {
            "Rollout #" (r.id) " "
            (badge(&format!("phase {}", r.phase.name()), &r.phase.name().replace('_', " ")))
        }
        p {
            "Started " (millis(r.started)) " · wave " (r.wave + 1) " of " (r.waves.len())
            " · on failure: " (format!("{:?}", r.on_failure).to_lowercase())
            @if let Phase::Superseded { by } = r.phase { " · superseded by #" (by) }
        }
        @if let Some(f) = failure { (failure_box(f)) }
        template #rollout-actions { (actions(r)) }
        ol.timeline aria-label="Waves" {
            @for (i, w) in r.waves.iter().enumerate() {
                @let state = wave_state(r, i, failure);
                li class=(format!("wave {state}")) aria-current=[(i == r.wave && !r.phase.is_terminal()).then_some("step")] {
                    h3 { (w.name) " " (badge(state, state)) }
                    p.muted {
                        (plural(w.clusters.len(), "cluster"))
                        @if let Some(m) = w.max_concurrent { " · " (m) " at a time" }
                        " · bake " (secs(w.bake_ms))
                        " · promotion " @match w.promotion { Promotion::Automatic => "automatic", Promotion::Manual => "manual" }
                    }
                    @if i == r.wave {
                        @match &r.phase {
                            Phase::Baking { until } => p { "Baking: " (countdown(*until)) },
                            Phase::Updating | Phase::Gating => p {
                                "Progress deadline: " (countdown(r.wave_started + r.deadline_ms))
                            },
                            Phase::AwaitingPromotion => p { strong { "Waiting for an operator to promote the next wave." } },
                            _ => {}
                        }
                    }
                    @let seen: Vec<&GateReading> = readings
                        .iter()
                        .filter(|g| g.rollout == r.id && g.wave == i)
                        .collect();
                    (gates(policy, &w.name, &seen))
                    (clusters(r, &w.clusters))
                }
            }
        }
    }
}

fn wave_state(r: &Rollout, i: usize, failure: Option<&Failure>) -> &'static str {
    if i < r.wave || matches!(r.phase, Phase::Completed) {
        "passed"
    } else if i > r.wave {
        "waiting"
    } else if failure.is_some() {
        "failed"
    } else if matches!(r.phase, Phase::Superseded { .. }) {
        "superseded"
    } else {
        r.phase.name()
    }
}

fn failure_box(f: &Failure) -> Markup {
    let cause = match &f.cause {
        Cause::Nack => "a cluster NACKed the new version".to_owned(),
        Cause::Dropped => "a cluster's istiod dropped an object of the new version".to_owned(),
        Cause::Gate { name } => format!("the gate {name} did not hold"),
        Cause::Deadline => "the wave took longer than the progress deadline".to_owned(),
        other => format!("{other:?}").to_lowercase(),
    };
    html! {
        div.failure role="alert" {
            strong { "Failed in wave " (f.wave) ": " (cause) }
            @if let Some(c) = &f.cluster { p { "Cluster: " (cluster_link(ROOT, c)) } }
            p.message { (f.message) }
        }
    }
}

fn actions(r: &Rollout) -> Markup {
    let awaiting = matches!(r.phase, Phase::AwaitingPromotion);
    let stopped = matches!(r.phase, Phase::Halted { .. } | Phase::RolledBack { .. });
    let url = |action: &str| ROOT.url(&format!("rollout/{action}"));
    html! {
        div role="group" aria-label="Rollout actions" {
            button type="button" data-action="promote" data-url=(url("promote")) disabled[!awaiting && r.phase.is_terminal()] {
                @if awaiting { "Promote the next wave" } @else { "Start the next wave now" }
            }
            button type="button" data-action="abort" data-url=(url("abort")) disabled[r.phase.is_terminal()] { "Abort" }
            button type="button" data-action="resume" data-url=(url("resume")) disabled[!stopped] { "Resume" }
        }
    }
}

/// What an operator may do to one cluster of the rollout (the admin API's
/// `?cluster=`, `Rollout::promote` and `Rollout::resume`): promote serves
/// a held, excluded or refused cluster the new version now, ahead of its
/// wave; resume returns an excluded, failed, rolled-back or refused one to
/// the rollout. Nothing once the rollout completed or was superseded
/// (refused there).
pub fn cluster_actions(r: &Rollout, state: &ClusterState) -> Vec<ClusterAction> {
    if matches!(r.phase, Phase::Completed | Phase::Superseded { .. }) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if matches!(
        state,
        ClusterState::Held | ClusterState::Excluded | ClusterState::Refused { .. }
    ) {
        out.push(ClusterAction::Promote);
    }
    if matches!(
        state,
        ClusterState::Excluded
            | ClusterState::Failed { .. }
            | ClusterState::RolledBack
            | ClusterState::Refused { .. }
    ) {
        out.push(ClusterAction::Resume);
    }
    out
}

/// An action on one cluster of the rollout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterAction {
    /// `POST rollout/promote?cluster=`.
    Promote,
    /// `POST rollout/resume?cluster=`.
    Resume,
}

impl ClusterAction {
    fn name(self) -> &'static str {
        match self {
            Self::Promote => "promote",
            Self::Resume => "resume",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Promote => "Promote",
            Self::Resume => "Resume",
        }
    }

    fn means(self, cluster: &str) -> String {
        match self {
            Self::Promote => format!("Serve {cluster} the new version now, ahead of its wave"),
            Self::Resume => format!("Return {cluster} to the rollout"),
        }
    }
}

/// A cluster's buttons, in a template the page's script shows only to a
/// browser holding an accepted token (like the rollout's own).
fn cluster_buttons(cluster: &str, actions: &[ClusterAction]) -> Markup {
    html! {
        @if !actions.is_empty() {
            template.cluster-actions {
                @for a in actions {
                    " "
                    button type="button" .small data-action=(a.name()) data-cluster=(cluster)
                        data-url=(ROOT.url(&format!("rollout/{}?cluster={}", a.name(), encode(cluster))))
                        aria-label=(format!("{} {cluster}", a.label())) title=(a.means(cluster)) {
                        (a.label())
                    }
                }
            }
        }
    }
}

fn gates(policy: Option<&Policy>, wave: &str, seen: &[&GateReading]) -> Markup {
    let Some(w) = policy.and_then(|p| p.waves.iter().find(|w| w.name == wave)) else {
        return html! {};
    };
    html! {
        @if !w.metrics.is_empty() {
            details id=(format!("gates-{wave}")) open[seen.iter().any(|s| !s.passed)] {
                summary { "Gates (" (w.metrics.len()) ")" }
                ul {
                    @for g in &w.metrics {
                        li {
                            strong { (g.name) } ": " code { (g.query) } " " (comparison(g.comparison)) " " (g.threshold)
                            @if g.during_bake { " (also while baking)" }
                            @let values: Vec<&&GateReading> = seen.iter().filter(|s| s.gate == g.name).collect();
                            @if values.is_empty() {
                                br; span.muted { "not evaluated yet" }
                            } @else {
                                ul.cells { @for v in values {
                                    li {
                                        (cluster_link(ROOT, &v.cluster)) ": "
                                        @match v.value { Some(x) => code { (x) }, None => span.muted { "no sample" } }
                                        " " @if v.passed { (badge("passed", "passes")) } @else { (badge("failed", "fails")) }
                                        " " (millis(v.at))
                                    }
                                } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn comparison(c: Comparison) -> String {
    serde_json::to_value(c)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{c:?}"))
}

fn clusters(r: &Rollout, names: &[String]) -> Markup {
    let targets = &r.targets;
    let mut by_state: BTreeMap<&str, usize> = BTreeMap::new();
    for c in names {
        if let Some(t) = targets.get(c) {
            *by_state.entry(rollout_state(&t.state)).or_default() += 1;
        }
    }
    // Trouble and work in progress first.
    let rank = |t: Option<&Target>| -> u8 {
        match t.map(|t| &t.state) {
            Some(ClusterState::Failed { .. } | ClusterState::Refused { .. }) => 0,
            Some(ClusterState::RolledBack) => 1,
            Some(ClusterState::Released { .. }) => 2,
            Some(ClusterState::Held) => 3,
            Some(ClusterState::Pinned { .. } | ClusterState::Excluded) => 4,
            _ => 5,
        }
    };
    let mut listed: Vec<(u8, &String)> = names.iter().map(|c| (rank(targets.get(c)), c)).collect();
    listed.sort_unstable();
    html! {
        p.counts {
            @for (s, n) in &by_state { (badge(&s.replace(' ', "-"), &format!("{n} {s}"))) " " }
        }
        ul.clusters {
            @for (_, c) in listed.iter().take(LISTED) {
                @let t = targets.get(*c);
                li {
                    (cluster_link(ROOT, c)) " "
                    @if let Some(t) = t {
                        @let s = rollout_state(&t.state);
                        (badge(&s.replace(' ', "-"), s))
                        @match &t.state {
                            ClusterState::Failed { message } | ClusterState::Refused { message } => {
                                " " span.message { (message) }
                            }
                            _ => {}
                        }
                        (cluster_buttons(c, &cluster_actions(r, &t.state)))
                    }
                }
            }
        }
        @if listed.len() > LISTED {
            p.muted { "and " (listed.len() - LISTED) " more (the fleet page lists every cluster)" }
        }
    }
}

fn policy(p: &Policy) -> Markup {
    html! {
        details #policy .policy {
            summary { "Policy: " (plural(p.waves.len(), "wave")) ", progress deadline " (secs(p.progress_deadline_ms)) }
            ol {
                @for w in &p.waves {
                    li {
                        strong { (w.name) } ": "
                        @match &w.members {
                            Members::Names(n) => { (n.join(", ")) },
                            Members::Labels(l) => {
                                "clusters labelled "
                                (l.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "))
                            },
                            Members::Rest => { "every other cluster" },
                        }
                        " · bake " (secs(w.bake_ms))
                        @if matches!(w.promotion, Promotion::Manual) { " · manual promotion" }
                    }
                }
            }
        }
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn secs(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests;
