//! Finding a kind by the names people type: `VirtualService`,
//! `virtualservice(s)`, Istio's short names (`vs`, `dr`, …, as in its CRDs),
//! `virtualservices.networking.istio.io`, an MCP
//! collection (`istio/networking/v1alpha3/virtualservices`) or a type URL
//! (`networking.istio.io/v1/VirtualService`). The admin port's
//! `/debug/object?kind=` accepts these names and meshhubctl resolves them
//! the same way, so a name that works in one works in the other.

use meshhub_proto::kinds::{Family, Kind, KindTable};

/// The `shortNames` of Istio's CRDs (`crd-all.gen.yaml`): kubectl's
/// abbreviations, which operators type.
const SHORT_NAMES: &[(&str, &str)] = &[
    ("ap", "AuthorizationPolicy"),
    ("dr", "DestinationRule"),
    ("gw", "Gateway"),
    ("pa", "PeerAuthentication"),
    ("ra", "RequestAuthentication"),
    ("se", "ServiceEntry"),
    ("vs", "VirtualService"),
    ("we", "WorkloadEntry"),
    ("wg", "WorkloadGroup"),
];

/// Why a name names no single kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    /// No kind has that name.
    #[error("unknown kind {text:?}; known kinds: {}", known.join(", "))]
    Unknown {
        /// The name as given.
        text: String,
        /// Every kind's name ([`kind_names`]).
        known: Vec<String>,
    },
    /// Kinds of several groups have that name.
    #[error("kind {text:?} is ambiguous; name its group: {}", candidates.join(", "))]
    Ambiguous {
        /// The name as given.
        text: String,
        /// `plural.group` of each.
        candidates: Vec<String>,
    },
}

/// The kind `text` names.
pub fn find_kind<'a>(kinds: &'a KindTable, text: &str) -> Result<&'a Kind, KindError> {
    let text = text.trim();
    if let Some(k) = kinds
        .by_collection(text)
        .or_else(|| kinds.by_type_url(text))
    {
        return Ok(k);
    }
    let lower = text.to_ascii_lowercase();
    // `name.group` (kubectl's `virtualservices.networking.istio.io`).
    let (name, group) = match lower.split_once('.') {
        Some((n, g)) => (n, Some(g)),
        None => (lower.as_str(), None),
    };
    // A short name means Istio's kind of that name.
    let short = SHORT_NAMES.iter().find(|(short, _)| *short == name);
    let name = short.map_or(name.to_owned(), |(_, kind)| kind.to_ascii_lowercase());
    let matches: Vec<&Kind> = kinds
        .iter()
        .filter(|k| group.is_none_or(|g| k.group().eq_ignore_ascii_case(g)))
        .filter(|k| short.is_none() || k.group().ends_with("istio.io"))
        .filter(|k| {
            let kind = k.kind().to_ascii_lowercase();
            let plural = k.plural().to_ascii_lowercase();
            name == kind || name == plural
        })
        .collect();
    // A name both an Istio kind and a Gateway API kind have (`Gateway`)
    // means Istio's, as it did before the Gateway API was built in;
    // `gateways.gateway.networking.k8s.io` names the other.
    let istio: Vec<&Kind> = matches
        .iter()
        .copied()
        .filter(|k| k.family() == Family::Istio)
        .collect();
    if let [one] = istio.as_slice()
        && group.is_none()
    {
        return Ok(one);
    }
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(KindError::Unknown {
            text: text.to_owned(),
            known: kind_names(kinds),
        }),
        many => Err(KindError::Ambiguous {
            text: text.to_owned(),
            candidates: many
                .iter()
                .map(|k| format!("{}.{}", k.plural(), k.group()))
                .collect(),
        }),
    }
}

/// Every kind's name, sorted and deduplicated.
pub fn kind_names(kinds: &KindTable) -> Vec<String> {
    let mut names: Vec<String> = kinds.iter().map(|k| k.kind().to_owned()).collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_kinds_by_every_name_and_lists_them_when_unknown() {
        let kinds = KindTable::builtin();
        let vs = "istio/networking/v1alpha3/virtualservices";
        for text in [
            "VirtualService",
            "virtualservice",
            "virtualservices",
            "VirtualServices.networking.istio.io",
            "vs",
            vs,
            "networking.istio.io/v1/VirtualService",
        ] {
            assert_eq!(find_kind(&kinds, text).unwrap().collection(), vs, "{text}");
        }
        // Istio's Gateway keeps its names; the Gateway API's is named
        // with its group.
        assert_eq!(
            find_kind(&kinds, "Gateway").unwrap().group(),
            "networking.istio.io"
        );
        assert_eq!(
            find_kind(&kinds, "gateways.gateway.networking.k8s.io")
                .unwrap()
                .collection(),
            "k8s/gateway.networking.k8s.io/v1/gateways"
        );
        assert_eq!(find_kind(&kinds, "httproute").unwrap().kind(), "HTTPRoute");
        let e = find_kind(&kinds, "VirtualSvc").unwrap_err().to_string();
        assert!(e.contains("unknown kind \"VirtualSvc\""), "{e}");
        assert!(e.contains("DestinationRule"), "{e}");
        assert!(e.contains("VirtualService"), "{e}");
    }
}
