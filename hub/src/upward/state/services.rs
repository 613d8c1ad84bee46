//! A cluster's Services as its agent reported them: the names, kept for
//! analysis (IST0101 on route backends), and what `/status` shows of them
//! (how many). Input from outside: bounded (at most [`MAX_SERVICES`]
//! names, each at most [`MAX_NAME`] bytes), and only about its own
//! cluster's analysis.

use std::sync::Arc;

use meshhub_analyze::Services;
use meshhub_api::upward::ServicesView;
use meshhub_proto::upward::ClusterServices;

/// At most this many names of one cluster are kept (the agent's own cap).
pub const MAX_SERVICES: usize = 20_000;
/// A namespace or Service name longer than this is no Kubernetes name
/// (both are DNS labels: 63): left out, and counted as omitted.
const MAX_NAME: usize = 63;

/// What the hub keeps of a cluster's Services.
pub type Kept = (Option<Arc<Services>>, Option<ServicesView>);

/// What to keep of `report` (the report's `services`), given what was
/// kept of the cluster's previous report: a failed list keeps the last
/// names (with its error shown), a list of the same version keeps the
/// same names (the same `Arc`: analysis sees no change), no list at all
/// (an agent that does not list them) knows none.
pub fn take(report: Option<&ClusterServices>, previous: &Kept) -> Kept {
    let Some(r) = report else {
        return (None, None);
    };
    if !r.error.is_empty() {
        let view = ServicesView {
            error: r.error.chars().take(512).collect(),
            ..previous.1.clone().unwrap_or_default()
        };
        return (previous.0.clone(), Some(view));
    }
    if let (Some(names), Some(view)) = previous
        && view.version == r.version
        && view.error.is_empty()
        && !r.version.is_empty()
    {
        return (Some(names.clone()), Some(view.clone()));
    }
    let mut omitted = u64::from(r.omitted);
    let mut names = Vec::new();
    for ns in &r.namespaces {
        for name in &ns.names {
            if names.len() == MAX_SERVICES || ns.namespace.len() > MAX_NAME || name.len() > MAX_NAME
            {
                omitted += 1;
                continue;
            }
            names.push((ns.namespace.clone(), name.clone()));
        }
    }
    let services = Services::new(names, omitted == 0);
    let view = ServicesView {
        count: services.len(),
        omitted,
        error: String::new(),
        version: r.version.chars().take(64).collect(),
    };
    (Some(Arc::new(services)), Some(view))
}

#[cfg(test)]
mod tests {
    use meshhub_proto::upward::NamespaceServices;

    use super::*;

    fn listed(version: &str, names: &[(&str, &[&str])]) -> ClusterServices {
        ClusterServices {
            namespaces: names
                .iter()
                .map(|(ns, n)| NamespaceServices {
                    namespace: (*ns).to_owned(),
                    names: n.iter().map(|s| (*s).to_owned()).collect(),
                })
                .collect(),
            version: version.to_owned(),
            ..ClusterServices::default()
        }
    }

    #[test]
    fn the_same_version_keeps_the_same_names_and_a_failed_list_the_last() {
        let first = take(
            Some(&listed("v1", &[("shop", &["reviews"])])),
            &(None, None),
        );
        let names = first.0.clone().expect("names");
        assert_eq!(names.has("shop", "reviews"), Some(true));
        assert_eq!(names.has("shop", "ratings"), Some(false));
        assert_eq!(first.1.as_ref().map(|v| v.count), Some(1));

        let same = take(Some(&listed("v1", &[("shop", &["reviews"])])), &first);
        assert!(Arc::ptr_eq(&names, same.0.as_ref().expect("names")));
        let other = take(Some(&listed("v2", &[("shop", &["reviews"])])), &first);
        assert!(!Arc::ptr_eq(&names, other.0.as_ref().expect("names")));

        let failed = ClusterServices {
            error: "forbidden".into(),
            ..ClusterServices::default()
        };
        let kept = take(Some(&failed), &first);
        assert!(Arc::ptr_eq(&names, kept.0.as_ref().expect("names")));
        assert_eq!(kept.1.as_ref().map(|v| v.error.as_str()), Some("forbidden"));
        assert_eq!(take(None, &first), (None, None), "no list: unknown");
    }

    #[test]
    fn the_hub_bounds_what_it_keeps() {
        let long = "x".repeat(64);
        let many: Vec<String> = (0..MAX_SERVICES + 3).map(|i| format!("s{i:06}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let r = listed("v", &[("a", &[long.as_str()]), ("b", &many)]);
        let (names, view) = take(Some(&r), &(None, None));
        let (names, view) = (names.expect("names"), view.expect("view"));
        assert_eq!(view.count, MAX_SERVICES);
        assert_eq!(view.omitted, 4);
        // Cut: a name after the last one kept is unknown, not missing.
        assert_eq!(names.has("b", "s999999"), None);
        assert_eq!(names.has("b", "s000000"), Some(true));
    }
}
