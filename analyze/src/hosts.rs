//! Host names as Istio's analyzers compare them (`pkg/config/host`,
//! `pkg/config/analysis/analyzers/util`).

/// The cluster-local domain Istio assumes.
const CLUSTER_LOCAL: &str = "svc.cluster.local";

/// Whether two host names overlap: equal, or a wildcard (`*.example.com`,
/// `*`) of one covers the other (Istio's `host.Name.Matches`).
pub fn matches(a: &str, b: &str) -> bool {
    match (a.strip_prefix('*'), b.strip_prefix('*')) {
        (Some(sa), Some(sb)) => {
            if sa.len() > sb.len() {
                sa.ends_with(sb)
            } else {
                sb.ends_with(sa)
            }
        }
        (Some(sa), None) => b.ends_with(sa),
        (None, Some(sb)) => a.ends_with(sb),
        (None, None) => a == b,
    }
}

/// A short host (`reviews`) as its FQDN in `namespace`
/// (`reviews.<namespace>.svc.cluster.local`); wildcards and names with a
/// dot are kept.
pub fn fqdn(namespace: &str, host: &str) -> String {
    if host.starts_with('*') || host.contains('.') {
        host.to_owned()
    } else {
        format!("{host}.{namespace}.{CLUSTER_LOCAL}")
    }
}

/// The (namespace, name) of the Kubernetes service a host names: from a
/// `name.namespace.svc.cluster.local` FQDN, otherwise the host itself in
/// `namespace` (Istio's `GetResourceNameFromHost`).
pub fn service_of(namespace: &str, host: &str) -> (String, String) {
    let (ns, name) = service_of_ref(namespace, host);
    (ns.to_owned(), name.to_owned())
}

/// [`service_of`], borrowed.
pub fn service_of_ref<'a>(namespace: &'a str, host: &'a str) -> (&'a str, &'a str) {
    if let Some(rest) = host.strip_suffix(".svc.cluster.local")
        && let Some((name, ns)) = rest.rsplit_once('.')
        && !name.is_empty()
        && !ns.is_empty()
    {
        return (ns, name);
    }
    (namespace, host)
}

/// A Gateway's server hosts (`ns/host`, `./host`, `*/host`, `host`) as seen
/// from a VirtualService in `namespace`: those its namespace part admits,
/// without it (Istio's `sanitizeServerHostNamespace` + `NamesForNamespace`).
pub fn gateway_hosts_for<'a>(
    hosts: impl IntoIterator<Item = &'a str>,
    gateway_namespace: &str,
    namespace: &str,
) -> Vec<String> {
    let mut out = Vec::new();
    for h in hosts {
        match h.split_once('/') {
            Some(("*", "*")) => return vec!["*".to_owned()],
            Some(("*", name)) => out.push(name.to_owned()),
            Some((".", name)) if gateway_namespace == namespace => out.push(name.to_owned()),
            Some((ns, name)) if ns == namespace => out.push(name.to_owned()),
            Some(_) => {}
            None => out.push(h.to_owned()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_overlap_as_istio_says() {
        assert!(matches("a.com", "a.com"));
        assert!(!matches("a.com", "b.com"));
        assert!(matches("*.a.com", "x.a.com"));
        assert!(matches("x.a.com", "*.a.com"));
        assert!(matches("*", "anything"));
        assert!(matches("*.a.com", "*.x.a.com"));
        assert!(!matches("*.a.com", "a.com.evil"));
    }

    #[test]
    fn short_hosts_become_fqdns_and_services() {
        assert_eq!(fqdn("ns", "reviews"), "reviews.ns.svc.cluster.local");
        assert_eq!(fqdn("ns", "a.b"), "a.b");
        assert_eq!(fqdn("ns", "*"), "*");
        assert_eq!(
            service_of("ns", "reviews.other.svc.cluster.local"),
            ("other".into(), "reviews".into())
        );
        assert_eq!(service_of("ns", "reviews"), ("ns".into(), "reviews".into()));
        assert_eq!(
            service_of("ns", "example.com"),
            ("ns".into(), "example.com".into())
        );
    }

    #[test]
    fn gateway_hosts_follow_their_namespace_part() {
        let hosts = ["a.com", "*/b.com", "./c.com", "ns/d.com", "other/e.com"];
        assert_eq!(
            gateway_hosts_for(hosts, "gw", "ns"),
            ["a.com", "b.com", "d.com"]
        );
        assert_eq!(
            gateway_hosts_for(hosts, "ns", "ns"),
            ["a.com", "b.com", "c.com", "d.com"]
        );
        assert_eq!(gateway_hosts_for(["x", "*/*"], "gw", "ns"), ["*"]);
    }
}
