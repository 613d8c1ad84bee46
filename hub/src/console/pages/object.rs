//! The object page: a lookup form, then what `meshhubctl describe` shows —
//! the object's definitions and sources, its validation, and per cluster
//! whether its group holds it, what each peer ACKed or NACKed of it, and
//! what the cluster's agent, API and istiod report.

use maud::{Markup, html};
use meshhub_api::object::{ObjectQuery, ObjectView, ValidationResult};

use crate::console::layout::{Root, badge, cluster_link};

/// Where the page sits.
const ROOT: Root = Root::CONSOLE;

/// The page's content: the form, then `found` (or why nothing is shown).
pub fn content(q: Option<&ObjectQuery>, found: Option<Result<ObjectView, String>>) -> Markup {
    html! {
        h1 { "Object" }
        form.filters method="get" action=(ROOT.url("console/object")) role="search" aria-label="Find an object" {
            label for="o-kind" { "Kind" }
            input #o-kind name="kind" type="text" required placeholder="VirtualService"
                value=[q.map(|q| q.kind.as_str())];
            label for="o-ns" { "Namespace" }
            input #o-ns name="namespace" type="text" placeholder="default"
                value=[q.and_then(|q| q.namespace.as_deref())];
            label for="o-name" { "Name" }
            input #o-name name="name" type="text" required value=[q.map(|q| q.name.as_str())];
            button type="submit" { "Describe" }
        }
        @match found {
            None => p.muted { "Give a kind and a name (for example VirtualService, bookinfo, reviews)." },
            Some(Err(e)) => p.error role="alert" { (e) },
            Some(Ok(v)) => (view(&v)),
        }
    }
}

fn view(v: &ObjectView) -> Markup {
    let served = v.validation.result == ValidationResult::Accepted;
    html! {
        h2 { (v.kind) " " code { (v.name) } }
        p {
            code { (v.api_version) } " · collection " code { (v.collection) }
            @if !v.version.is_empty() { " · version " code { (v.version) } }
        }
        p { @if served { (badge("acked", "served")) } @else { (badge("nacked", "rejected")) " served to no cluster" } }
        @if !v.validation.messages.is_empty() {
            ul.error role="alert" { @for m in &v.validation.messages { li { (m) } } }
        }
        @if !v.validation.warnings.is_empty() {
            ul { @for w in &v.validation.warnings { li { (badge("pending", "warning")) " " (w) } } }
        }
        h3 { "Definitions" }
        table {
            thead { tr { th scope="col" { "State" } th scope="col" { "Where" } th scope="col" { "Why" } } }
            tbody { @for d in &v.definitions {
                tr {
                    td { (badge(d.state.as_str(), d.state.as_str())) }
                    td { @match &d.origin { Some(o) => code { (o.to_string()) }, None => span.muted { "unknown" } }
                        @if let Some(rv) = &d.resource_version { " (resourceVersion " (rv) ")" } }
                    td.message { (d.reasons.join("; ")) }
                }
            } }
        }
        h3 { "Clusters (" (v.clusters.len()) ")" }
        table {
            thead { tr { th scope="col" { "Cluster" } th scope="col" { "In its snapshot" } th scope="col" { "Peers" }
                th scope="col" { "Agent holds" } th scope="col" { "Applied" } th scope="col" { "Its istiod" }
                th scope="col" { "Accepted by its controller" } } }
            tbody { @for c in &v.clusters {
                tr {
                    th scope="row" { (cluster_link(ROOT, &c.cluster)) }
                    td { @if c.in_snapshot { "yes" } @else { span.behind { "no (held on an older version)" } } }
                    td { ul.cells { @for p in &c.peers {
                        li { code { (p.peer) } " " (p.role.as_str()) " "
                            (badge(p.delivery.as_str(), p.delivery.as_str()))
                            @if let Some(m) = &p.message { ": " span.message { (m) } } }
                    } } }
                    @match &c.reported {
                        Some(r) => {
                            td { @if r.delivered { "yes" } @else { "no" } }
                            td { (r.applied) }
                            td.message { (r.held_by_istiod) }
                            td.message { (accepted(r.accepted.as_deref())) }
                        },
                        None => { td colspan="4" .muted { "no report" } },
                    }
                }
            } }
        }
        @if !v.analysis.is_empty() {
            h3 { "Analysis" }
            ul { @for (cluster, msgs) in &v.analysis { @for m in msgs {
                li { (cluster_link(ROOT, cluster)) ": " code { (m.code) } " " (m.message) }
            } } }
        }
    }
}

/// What a cluster's Gateway API controller said of the object: a badge,
/// and where and why it refused (`-`: not a kind it judges, or its agent
/// does not tell).
fn accepted(word: Option<&str>) -> Markup {
    match word {
        None => html! { span.muted { "-" } },
        Some("yes") => badge("acked", "accepted"),
        Some("pending") => badge("pending", "pending"),
        Some(no) => html! { (badge("refused", "refused")) " " (no.trim_start_matches("no: ")) },
    }
}

#[cfg(test)]
mod accepted_tests {
    use super::*;

    #[test]
    fn a_controllers_word_reads_as_a_badge_and_a_refusal_says_why() {
        assert!(accepted(Some("yes")).into_string().contains("badge acked"));
        assert!(
            accepted(Some("pending"))
                .into_string()
                .contains("badge pending")
        );
        let no = accepted(Some("no: Gateway shop/gw (https): NoMatchingParent")).into_string();
        assert!(
            no.contains("badge refused")
                && no.contains("Gateway shop/gw (https): NoMatchingParent"),
            "{no}"
        );
        assert!(accepted(None).into_string().contains('-'));
    }
}
