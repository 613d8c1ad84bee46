//! Finding a kind by the names people type: `VirtualService`,
//! `virtualservice(s)`, Istio's short names (`vs`, `dr`, …, as in its CRDs),
//! `virtualservices.networking.istio.io`, an MCP
//! collection (`istio/networking/v1alpha3/virtualservices`) or a type URL
//! (`networking.istio.io/v1/VirtualService`). Shared by the admin port's
//! `/debug/object` and by `meshhubctl`.

use meshhub_proto::kinds::{Kind, KindTable};

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

/// The kind `text` names, or a message listing the kinds there are.
pub fn find_kind<'a>(kinds: &'a KindTable, text: &str) -> Result<&'a Kind, String> {
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
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "unknown kind {text:?}; known kinds: {}",
            kind_names(kinds).join(", ")
        )),
        many => Err(format!(
            "kind {text:?} is ambiguous; name its group: {}",
            many.iter()
                .map(|k| format!("{}.{}", k.plural(), k.group()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
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
        let e = find_kind(&kinds, "VirtualSvc").unwrap_err();
        assert!(e.contains("unknown kind \"VirtualSvc\""), "{e}");
        assert!(e.contains("DestinationRule"), "{e}");
        assert!(e.contains("VirtualService"), "{e}");
    }
}
