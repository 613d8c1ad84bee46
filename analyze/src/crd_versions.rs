//! IST0176 GatewayAPICRDVersionBelowMinimum, per cluster: a Gateway API
//! CRD whose `gateway.networking.k8s.io/bundle-version` is below what the
//! cluster's Istio release requires of that CRD. istiod's CRD watcher
//! ignores such a CRD (`minimumVersionFilter`): every object of its kind
//! is silently left unprocessed — no route, no status. Istio's own
//! analyzer (`pkg/config/analysis/analyzers/k8sgateway/crdversion.go`,
//! from Istio 1.30.1) compares each CRD with its minimum the same way:
//! the bundle version without its pre-release part, semver order; a CRD
//! without the annotation, or with one that is no version, is not
//! reported (istiod logs it).
//!
//! What Istio compares is not the Gateway API release it was built
//! against (`sigs.k8s.io/gateway-api` in its go.mod: v1.4.0 for 1.28 and
//! 1.29, v1.5.1 for 1.30, v1.6.0 for 1.31) but a per-CRD minimum, the
//! first bundle version whose CRD serves what istiod watches.

use std::fmt;

use crate::message::GATEWAY_API_CRD_VERSION_BELOW_MINIMUM;
use crate::report::Report;
use crate::since::IstioVersion;

/// One Gateway API CRD of a cluster, as its agent reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrdBundle {
    /// `tlsroutes.gateway.networking.k8s.io`.
    pub name: String,
    /// Its `gateway.networking.k8s.io/bundle-version` (`v1.4.0`; empty:
    /// none).
    pub bundle_version: String,
}

/// Each CRD's minimum bundle version, and the first Istio minor that
/// requires it (a release requires every row up to its minor). Read from
/// Istio's tags: `minimumCRDVersions` in `pkg/kube/kclient/crdwatcher.go`
/// (to 1.30.0), `MinimumCRDVersions` in
/// `pkg/config/schema/gatewayapi/minimumversions.go` (from 1.30.1).
const MINIMUMS: &[(&str, (u64, u64, u64), u32)] = &[
    // 1.22.0 crdwatcher.go (GRPCRoute v1, "Gateway v1.1: support gRPC
    // route v1", istio#50429); unchanged to master (1.32 in development).
    ("grpcroutes.gateway.networking.k8s.io", (1, 1, 0), 22),
    // 1.28.0 crdwatcher.go ("do not fail to startup when alpha
    // BackendTLSPolicy is installed", istio#57834); 1.27.x has no row.
    (
        "backendtlspolicies.gateway.networking.k8s.io",
        (1, 4, 0),
        28,
    ),
    // 1.30.0 crdwatcher.go (TLSRoute v1 of Gateway API 1.5, "bump
    // gateway-api to 1.5.0", istio#59299); 1.29.6 has no row.
    ("tlsroutes.gateway.networking.k8s.io", (1, 5, 0), 30),
    // 1.31.0-rc.0 minimumversions.go ("TCPRoute v1 upgrade",
    // istio#60766); 1.30.3 has no row.
    ("tcproutes.gateway.networking.k8s.io", (1, 6, 0), 31),
];

/// The minimum bundle version `release` requires of the CRD `name`.
pub fn minimum(release: IstioVersion, name: &str) -> Option<(u64, u64, u64)> {
    MINIMUMS
        .iter()
        .find(|(crd, _, since)| *crd == name && release.major == 1 && release.minor >= *since)
        .map(|(_, min, _)| *min)
}

/// A bundle version as Istio reads it (Masterminds semver: `v` optional,
/// minor and patch default to 0).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bundle {
    release: (u64, u64, u64),
    /// `-rc.1`, `+build`: shown, not compared.
    suffix: String,
}

impl Bundle {
    fn parse(s: &str) -> Option<Self> {
        let t = s.strip_prefix('v').unwrap_or(s);
        let end = t.find(['-', '+']).unwrap_or(t.len());
        let mut parts = t[..end].split('.');
        let num = |p: Option<&str>| -> Option<u64> {
            match p {
                None => Some(0),
                Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok(),
                Some(_) => None,
            }
        };
        let major = parts.next().and_then(|p| num(Some(p)))?;
        let minor = num(parts.next())?;
        let patch = num(parts.next())?;
        if parts.next().is_some() || t.len() - end == 1 {
            return None;
        }
        Some(Self {
            release: (major, minor, patch),
            suffix: t[end..].to_owned(),
        })
    }
}

impl fmt::Display for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = self.release;
        write!(f, "{a}.{b}.{c}{}", self.suffix)
    }
}

/// IST0176 for each CRD of `crds` below what `release` requires.
pub fn check(crds: &[CrdBundle], release: IstioVersion, out: &mut Report) {
    for crd in crds {
        let Some(min) = minimum(release, &crd.name) else {
            continue;
        };
        let Some(installed) = Bundle::parse(&crd.bundle_version) else {
            continue;
        };
        if installed.release < min {
            let (a, b, c) = min;
            out.push_about(
                "CustomResourceDefinition",
                "",
                &crd.name,
                GATEWAY_API_CRD_VERSION_BELOW_MINIMUM,
                format!(
                    "Gateway API CRD {:?} is at version \"{installed}\" but Istio requires at least \"{a}.{b}.{c}\"; resources of this kind will not be processed. Upgrade the Gateway API CRDs to satisfy the minimum version.",
                    crd.name
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> IstioVersion {
        IstioVersion::parse(s).expect("a version")
    }

    fn crd(name: &str, bundle: &str) -> CrdBundle {
        CrdBundle {
            name: format!("{name}.gateway.networking.k8s.io"),
            bundle_version: bundle.to_owned(),
        }
    }

    fn flagged(crds: &[CrdBundle], release: &str) -> Vec<String> {
        let mut out = Report::default();
        check(crds, v(release), &mut out);
        out.into_messages()
            .iter()
            .map(|m| format!("{} {}: {}", m.code.code, m.object(), m.text))
            .collect()
    }

    #[test]
    fn bundle_versions_read_as_istio_reads_them() {
        let b = |s: &str| Bundle::parse(s).map(|b| (b.release, b.to_string()));
        assert_eq!(b("v1.4.0"), Some(((1, 4, 0), "1.4.0".into())));
        assert_eq!(b("1.5"), Some(((1, 5, 0), "1.5.0".into())));
        assert_eq!(b("v1.5.0-rc.1"), Some(((1, 5, 0), "1.5.0-rc.1".into())));
        assert_eq!(b(""), None);
        assert_eq!(b("main"), None);
        assert_eq!(b("v1.x.0"), None);
        assert_eq!(b("1.2.3.4"), None);
    }

    #[test]
    fn each_release_requires_the_rows_up_to_its_minor() {
        let tls = "tlsroutes.gateway.networking.k8s.io";
        let tcp = "tcproutes.gateway.networking.k8s.io";
        let btls = "backendtlspolicies.gateway.networking.k8s.io";
        assert_eq!(minimum(v("1.29.6"), tls), None);
        assert_eq!(minimum(v("1.30.0"), tls), Some((1, 5, 0)));
        assert_eq!(minimum(v("1.30.3"), tcp), None);
        assert_eq!(minimum(v("1.31.0"), tcp), Some((1, 6, 0)));
        assert_eq!(minimum(v("1.32.0"), tcp), Some((1, 6, 0)));
        assert_eq!(minimum(v("1.27.3"), btls), None);
        assert_eq!(minimum(v("1.28.3"), btls), Some((1, 4, 0)));
        assert_eq!(
            minimum(v("1.28.3"), "httproutes.gateway.networking.k8s.io"),
            None
        );
    }

    #[test]
    fn ist0176_for_a_crd_below_the_release_minimum_in_istio_words() {
        let crds = [
            crd("tlsroutes", "v1.2.0"),
            crd("tcproutes", "v1.5.1"),
            crd("httproutes", "v1.0.0"),
            crd("grpcroutes", "v1.4.0"),
        ];
        assert_eq!(
            flagged(&crds, "1.30.1"),
            [
                "IST0176 CustomResourceDefinition tlsroutes.gateway.networking.k8s.io: Gateway API CRD \"tlsroutes.gateway.networking.k8s.io\" is at version \"1.2.0\" but Istio requires at least \"1.5.0\"; resources of this kind will not be processed. Upgrade the Gateway API CRDs to satisfy the minimum version."
            ]
        );
        let on_131 = flagged(&crds, "1.31.0");
        assert_eq!(on_131.len(), 2, "{on_131:?}");
        assert!(on_131[0].starts_with("IST0176 CustomResourceDefinition tcproutes"));
        assert!(flagged(&crds, "1.28.3").is_empty());
    }

    #[test]
    fn a_pre_release_of_the_minimum_passes_and_no_annotation_is_not_judged() {
        let crds = [crd("tlsroutes", "v1.5.0-rc.1"), crd("tcproutes", "")];
        assert!(flagged(&crds, "1.31.0").is_empty());
        assert_eq!(flagged(&[crd("tlsroutes", "v1.4.1")], "1.31.0").len(), 1);
    }
}
