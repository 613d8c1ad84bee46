//! The fleet page: the summary by health, the filters, one row per cluster
//! (trouble first) and the pager. The summary, the rows and the pager are
//! fragments the event stream sends again when the fleet changes.

use maud::{Markup, html};
use serde::Serialize;

use crate::console::layout::{Root, age, badge, cluster_link, short};
use crate::console::model::{Cell, CellState, Consumer, Fleet, Health, Query, Row, StateFilter};

/// The parts of the page that change.
#[derive(Serialize)]
pub struct Fragments {
    /// `#fleet-summary`.
    pub summary: String,
    /// `#fleet-rows` (the table's body).
    pub rows: String,
    /// `#fleet-pager`.
    pub pager: String,
    /// `#fleet-consumers`.
    pub consumers: String,
}

/// The fragments of `fleet` for `q`.
pub fn fragments(fleet: &Fleet, q: &Query) -> Fragments {
    let (rows, total) = fleet.select(q);
    Fragments {
        summary: summary(fleet, q).into_string(),
        rows: body(&rows).into_string(),
        pager: pager(q, total).into_string(),
        consumers: consumers(fleet, q).into_string(),
    }
}

/// The page's content.
pub fn content(fleet: &Fleet, q: &Query) -> Markup {
    let (rows, total) = fleet.select(q);
    let keys: Vec<&str> = fleet.label_keys.iter().map(String::as_str).collect();
    html! {
        h1 { "Fleet" }
        div #fleet-summary { (summary(fleet, q)) }
        form.filters method="get" action=(Root::TOP.url("console")) role="search" aria-label="Filter clusters" {
            label for="f-state" { "State" }
            select #f-state name="state" {
                option value="all" selected[q.state.is_none()] { "All" }
                @for f in StateFilter::all() {
                    option value=(f.as_str()) selected[q.state == Some(f)] { (f.label()) }
                }
            }
            label for="f-label" { "Label" }
            input #f-label name="label" type="text" placeholder="key=value"
                value=[q.label.as_deref()] aria-describedby="f-label-hint";
            label for="f-name" { "Name contains" }
            input #f-name name="name" type="text" value=[q.name.as_deref()];
            button type="submit" { "Filter" }
            @if !keys.is_empty() {
                small #f-label-hint .muted { "Label keys: " (keys.join(", ")) }
            }
        }
        table.fleet {
            caption.sr-only { "Clusters, trouble first" }
            thead {
                tr {
                    th scope="col" { "Cluster" }
                    th scope="col" { "Health" }
                    th scope="col" { "Istio" }
                    th scope="col" { "Dialed by" }
                    th scope="col" { "Served / newest" }
                    th scope="col" { "Collections" }
                    th scope="col" { "Last change" }
                }
            }
            tbody #fleet-rows { (body(&rows)) }
        }
        nav #fleet-pager aria-label="Pages" { (pager(q, total)) }
        section #fleet-consumers aria-label="Consumers dialing in" { (consumers(fleet, q)) }
    }
}

fn summary(fleet: &Fleet, q: &Query) -> Markup {
    let total = fleet.rows.len();
    let link = |f: Option<StateFilter>| {
        let q = Query {
            state: f,
            page: None,
            ..q.clone()
        };
        Root::TOP.url(&format!("console?{}", q.with_page(1)))
    };
    html! {
        p.summary {
            a href=(link(None)) { strong { (total) } " clusters" }
            @for h in Health::ALL {
                @let n = fleet.counts.get(&h).copied().unwrap_or(0);
                @if n > 0 {
                    " · "
                    a class=(format!("count {}", h.as_str())) href=(link(Some(StateFilter::Health(h)))) {
                        (n) " " (h.label().to_lowercase())
                    }
                }
            }
        }
    }
}

fn body(rows: &[&Row]) -> Markup {
    html! {
        @if rows.is_empty() {
            tr { td colspan="7" .muted {
                "No cluster matches. The fleet lists the clusters the hub dials (clusters[].agent); "
                "consumers that dial the hub themselves are listed below."
            } }
        }
        @for r in rows {
            tr class=(format!("row {}", r.health.as_str())) data-cluster=(r.cluster) {
                th scope="row" { (cluster_link(Root::TOP, &r.cluster)) }
                td {
                    (badge(r.health.as_str(), r.health.label()))
                    @if !r.connected {
                        @if let Some(e) = &r.last_error { br; small.error { (e) } }
                    }
                    @if let Some(h) = &r.hold { br; small { (h.text()) } }
                    @if let Some(m) = &r.refusal { br; small.message { "Refused: " (m) } }
                }
                td { @if r.istio.is_empty() { span.muted { "unknown" } } @else { (r.istio.join(", ")) } }
                td {
                    @match (&r.dialed_by, r.shard) {
                        (Some(d), Some(s)) => { (d) " " small.muted { "(shard " (s) ")" } }
                        (Some(d), None) => { (d) }
                        (None, Some(s)) => { span.muted { "nobody (shard " (s) ")" } }
                        (None, None) => { span.muted { "this hub" } }
                    }
                }
                td { (versions(r)) }
                td { (cells(r)) }
                td { (age(r.last_change)) }
            }
        }
    }
}

fn versions(r: &Row) -> Markup {
    let served = r.served.as_deref().unwrap_or("none");
    html! {
        code { (served) }
        @match &r.newest {
            Some(n) if Some(n) != r.served.as_ref() => {
                " " span.behind { "→ " code { (n) } } span.sr-only { " (not the newest)" }
            }
            _ => { " " small.muted { "newest" } }
        }
    }
}

fn cells(r: &Row) -> Markup {
    cell_list(&r.cells)
}

fn cell_list(cells: &[Cell]) -> Markup {
    let acked = cells.iter().filter(|c| c.state == CellState::Acked).count();
    html! {
        @if cells.is_empty() { span.muted { "nothing sent" } }
        @if acked > 0 { (badge("acked", &format!("{acked} ACKED"))) }
        ul.cells {
            @for c in cells.iter().filter(|c| c.state != CellState::Acked) {
                li {
                    (badge(&c.state.as_str().to_lowercase().replace(' ', "-"), c.state.as_str()))
                    " " abbr title=(c.collection) { (short(&c.collection)) }
                    @if !c.message.is_empty() { ": " span.message { (c.message) } }
                }
            }
        }
    }
}

fn pager(q: &Query, total: usize) -> Markup {
    let size = q.page_size();
    let pages = total.div_ceil(size).max(1);
    let page = (q.page() + 1).min(pages);
    let first = (page - 1) * size + 1;
    let last = (page * size).min(total);
    html! {
        @if pages > 1 {
            @if page > 1 {
                a rel="prev" href=(Root::TOP.url(&format!("console?{}", q.with_page(page - 1)))) { "← Previous" }
                " "
            }
            span { "Clusters " (first) "–" (last) " of " (total) " (page " (page) " of " (pages) ")" }
            @if page < pages {
                " "
                a rel="next" href=(Root::TOP.url(&format!("console?{}", q.with_page(page + 1)))) { "Next →" }
            }
        } @else {
            span { (total) " shown" }
        }
    }
}

/// The consumers that dial the hub (istiods with `configSources:
/// xds://…`, MCP clients), trouble first: nothing when none does.
fn consumers(fleet: &Fleet, q: &Query) -> Markup {
    if fleet.consumers.is_empty() {
        return html! {};
    }
    let (shown, total) = fleet.select_consumers(q);
    html! {
        h2 { "Consumers dialing in" }
        p.summary {
            strong { (fleet.consumers.len()) } " streams of consumers that dial the hub themselves"
            @for h in Health::ALL {
                @let n = fleet.consumer_counts.get(&h).copied().unwrap_or(0);
                @if n > 0 { " · " span class=(format!("count {}", h.as_str())) { (n) " " (h.label().to_lowercase()) } }
            }
            " (every stream: " a href=(Root::TOP.url("status")) { "status" } ")"
        }
        table.fleet.consumers {
            caption.sr-only { "Consumers dialing in, trouble first" }
            thead {
                tr {
                    th scope="col" { "Consumer" }
                    th scope="col" { "Health" }
                    th scope="col" { "Istio" }
                    th scope="col" { "Address" }
                    th scope="col" { "Group" }
                    th scope="col" { "Sent / newest" }
                    th scope="col" { "Collections" }
                    th scope="col" { "Last change" }
                }
            }
            tbody {
                @if shown.is_empty() {
                    tr { td colspan="8" .muted { "No consumer matches." } }
                }
                @for c in &shown { (consumer(c)) }
            }
        }
        @if total > shown.len() {
            p.muted { (total - shown.len()) " more match; narrow the filter." }
        }
    }
}

fn consumer(c: &Consumer) -> Markup {
    html! {
        tr class=(format!("row {}", c.health.as_str())) data-consumer=(c.id) {
            th scope="row" { code { (c.name()) } }
            td {
                (badge(c.health.as_str(), c.health.label()))
                br; small.muted { @if c.connected { "connected " } @else { "disconnected " } (age(c.since)) }
                @if !c.connected {
                    @if let Some(e) = &c.last_error { br; small.error { (e) } }
                }
            }
            td { @match &c.istio { Some(v) => { (v) }, None => span.muted { "unknown" } } }
            td { code { (c.peer) } " " small.muted { (c.protocol) } }
            td { code { (c.group) } }
            td {
                code { (c.served.as_deref().unwrap_or("none")) }
                @match &c.newest {
                    Some(n) if Some(n) != c.served.as_ref() => {
                        " " span.behind { "→ " code { (n) } } span.sr-only { " (not what its group is served now)" }
                    }
                    Some(_) => { " " small.muted { "newest" } }
                    None => { " " small.muted { "group unpublished" } }
                }
            }
            td { (cell_list(&c.cells)) }
            td { (age(c.last_change)) }
        }
    }
}
