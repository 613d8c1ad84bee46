//! The console's page frame and small shared pieces: the navigation, the
//! security headers every page carries, times and badges.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

/// Where a page sits in the navigation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The fleet.
    Fleet,
    /// The rollout.
    Rollout,
    /// An object.
    Object,
    /// A cluster (reached from the fleet).
    Cluster,
}

/// Where a page sits below the admin port's root: what every URL it
/// writes starts with. Every link, form, asset, event stream and request
/// of the console is relative, so that it works where a proxy serves the
/// admin port under a path (`kubectl proxy`'s
/// `/api/v1/namespaces/<ns>/services/<svc>:admin/proxy/console`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Root(&'static str);

impl Root {
    /// `/console` (the fleet): in the root.
    pub const TOP: Self = Self("");
    /// `/console/rollout`, `/console/object`: one step below it.
    pub const CONSOLE: Self = Self("../");
    /// `/console/clusters/{cluster}`: two steps below it.
    pub const CLUSTER: Self = Self("../../");

    /// `path` (below the root, no leading `/`) from the page.
    pub fn url(self, path: &str) -> String {
        debug_assert!(!path.starts_with('/'), "{path}");
        format!("{}{path}", self.0)
    }

    /// The page of `cluster`.
    pub fn cluster(self, cluster: &str) -> String {
        self.url(&format!("console/clusters/{}", encode(cluster)))
    }

    /// What the page's script prefixes its own requests with.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// `text` as one path segment (or query value).
pub fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// What the Content-Security-Policy allows: this origin's script, style
/// and event streams, nothing inline, no frames.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The headers of every console response.
pub fn secure(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A whole page at `root`: `title`, the navigation with `nav` current,
/// and `body`. `live` is the event stream the script follows (below the
/// root; none: static).
pub fn page(title: &str, nav: Nav, root: Root, live: Option<&str>, body: Markup) -> Response {
    let item = |n: Nav, path: &str, text: &str| {
        html! {
            li { a href=(root.url(path)) aria-current=[(n == nav).then_some("page")] { (text) } }
        }
    };
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · meshhub" }
                link rel="stylesheet" href=(root.url("console/assets/console.css"));
                script src=(root.url("console/assets/console.js")) defer {}
            }
            body data-events=[live.map(|l| root.url(l))] data-root=(root.as_str()) {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    span.brand { "meshhub" }
                    nav aria-label="Console" {
                        ul {
                            (item(Nav::Fleet, "console", "Fleet"))
                            (item(Nav::Rollout, "console/rollout", "Rollout"))
                            (item(Nav::Object, "console/object", "Object"))
                        }
                    }
                    span #live-state .live-state role="status" aria-live="polite" {
                        @if live.is_some() { "static (JavaScript off)" }
                    }
                    span #session .session {}
                }
                main #main tabindex="-1" { (body) }
                div #announce .sr-only role="status" aria-live="polite" {}
            }
        }
    };
    secure(
        (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            markup.into_string(),
        )
            .into_response(),
    )
}

/// An error page at `root` with `status`.
pub fn error(status: axum::http::StatusCode, root: Root, title: &str, message: &str) -> Response {
    let mut r = page(
        title,
        Nav::Fleet,
        root,
        None,
        html! {
            h1 { (title) }
            p.error role="alert" { (message) }
            p { a href=(root.url("console")) { "Back to the fleet" } }
        },
    );
    *r.status_mut() = status;
    r
}

/// A time as a `<time>` the script keeps as an age ("12 s ago"), with the
/// age at rendering for readers without it.
pub fn age(at: Option<SystemTime>) -> Markup {
    let Some(at) = at else {
        return html! { span.muted { "never" } };
    };
    let iso = humantime::format_rfc3339_seconds(at).to_string();
    html! { time datetime=(iso) data-age { (ago(at)) } }
}

/// "12 s ago", "3 min ago", "2 h ago", "4 d ago".
pub fn ago(at: SystemTime) -> String {
    let secs = SystemTime::now()
        .duration_since(at)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match secs {
        0..60 => format!("{secs} s ago"),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86400 => format!("{} h ago", secs / 3600),
        _ => format!("{} d ago", secs / 86400),
    }
}

/// A moment in the rollout's clock (Unix milliseconds) as a `<time>`.
pub fn millis(at: u64) -> Markup {
    let t = UNIX_EPOCH + std::time::Duration::from_millis(at);
    let iso = humantime::format_rfc3339_seconds(t).to_string();
    html! { time datetime=(iso) data-age { (ago(t)) } }
}

/// A countdown to `until` (Unix milliseconds), kept by the script.
pub fn countdown(until: u64) -> Markup {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let left = until.saturating_sub(now) / 1000;
    html! { time data-until=(until) { (format!("{} min {:02} s left", left / 60, left % 60)) } }
}

/// A badge: `class` picks its colour, `text` is what it says.
pub fn badge(class: &str, text: &str) -> Markup {
    html! { span class=(format!("badge {class}")) { (text) } }
}

/// A collection's short name (`VirtualService` of
/// `networking.istio.io/v1/VirtualService`).
pub fn short(collection: &str) -> &str {
    collection.rsplit('/').next().unwrap_or(collection)
}

/// A link from a page at `root` to a cluster's page.
pub fn cluster_link(root: Root, cluster: &str) -> Markup {
    html! { a href=(root.cluster(cluster)) { (cluster) } }
}
