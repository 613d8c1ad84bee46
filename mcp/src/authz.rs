//! Which verified identities may read which snapshot group, and which may
//! push to a sink.
//!
//! An identity is a URI or DNS subject alternative name of the peer's
//! verified client certificate ([`crate::tls::identities`]), e.g. the SPIFFE
//! ID `spiffe://cluster.local/ns/istio-system/sa/istiod`. A pattern is
//! matched against each identity:
//!
//! * without `*`: the identity must be equal;
//! * `*` matches any run of characters other than `/` (one path segment, or
//!   part of one): `spiffe://east.example/ns/*/sa/istiod`,
//!   `*.east.example`;
//! * `**` matches any run of characters, `/` included:
//!   `spiffe://east.example/**` is every identity of that trust domain.
//!
//! What the node id or `SinkNode` annotations claim is never enough: with
//! authorization on, a claim that the identity does not allow is refused
//! with `PERMISSION_DENIED`.

use crate::cache::Group;
use crate::group::GroupError;

/// Counter: streams refused, by `protocol` and `reason`
/// (`permission_denied`, `no_group`).
pub const METRIC_REFUSED: &str = "meshhub_mcp_streams_refused_total";

/// Most `*` a pattern may hold (matching is backtracking; this bounds it).
const MAX_STARS: usize = 8;

/// One identity pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentityPattern(String);

impl IdentityPattern {
    /// Checks a pattern: non-empty, no whitespace, at most 8 `*`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("an identity pattern must not be empty".to_owned());
        }
        if t.chars().any(char::is_whitespace) {
            return Err(format!("{t:?}: an identity has no whitespace"));
        }
        if t.matches('*').count() > MAX_STARS {
            return Err(format!("{t:?}: at most {MAX_STARS} '*' in a pattern"));
        }
        Ok(Self(t.to_owned()))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `identity` matches.
    pub fn matches(&self, identity: &str) -> bool {
        glob(self.0.as_bytes(), identity.as_bytes())
    }
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match p {
        [] => s.is_empty(),
        [b'*', b'*', rest @ ..] => (0..=s.len()).any(|i| glob(rest, &s[i..])),
        [b'*', rest @ ..] => {
            // Any run without '/'.
            let run = s.iter().position(|&c| c == b'/').unwrap_or(s.len());
            (0..=run).any(|i| glob(rest, &s[i..]))
        }
        [c, rest @ ..] => s.first() == Some(c) && glob(rest, &s[1..]),
    }
}

/// A list of identity patterns; a peer is allowed when any of its
/// identities matches any pattern.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowList(pub Vec<IdentityPattern>);

impl AllowList {
    /// Parses every pattern; the error names the first bad one's index.
    pub fn parse<S: AsRef<str>>(patterns: &[S]) -> Result<Self, (usize, String)> {
        patterns
            .iter()
            .enumerate()
            .map(|(i, p)| IdentityPattern::parse(p.as_ref()).map_err(|e| (i, e)))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether any identity matches any pattern.
    pub fn allows(&self, identities: &[String]) -> bool {
        identities
            .iter()
            .any(|id| self.0.iter().any(|p| p.matches(id)))
    }
}

/// Per-group allow-lists: who may read which group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupAccess {
    /// Groups with their lists, in configuration order (the first that
    /// allows an identity is its group when it claims none).
    pub groups: Vec<(Group, AllowList)>,
    /// Whether the lists are enforced (the port verifies client
    /// certificates); when not, [`GroupAccess::decide`] allows every claim.
    pub enforced: bool,
}

impl GroupAccess {
    /// Whether any group has a list (authorization is configured).
    pub fn configured(&self) -> bool {
        !self.groups.is_empty()
    }

    /// The group a consumer with `identities` is served. `claimed` is the
    /// group it asked for by name (`None`: it named none); `fallback` the
    /// group of a consumer that named none while authorization is off.
    pub fn decide(
        &self,
        claimed: Option<Group>,
        fallback: Group,
        identities: &[String],
    ) -> Result<Group, GroupError> {
        if !self.enforced || !self.configured() {
            return Ok(claimed.unwrap_or(fallback));
        }
        if identities.is_empty() {
            return Err(GroupError::denied(
                "no verified client identity: the per-cluster identity lists require a client certificate".to_owned(),
            ));
        }
        let allowed: Vec<&Group> = self
            .groups
            .iter()
            .filter(|(_, list)| list.allows(identities))
            .map(|(g, _)| g)
            .collect();
        match claimed {
            Some(group) if allowed.contains(&&group) => Ok(group),
            Some(group) => Err(GroupError::denied(format!(
                "identity {} may not read group {group:?} (allowed: {})",
                identities.join(", "),
                names(&allowed)
            ))),
            None => allowed.first().map(|g| (*g).clone()).ok_or_else(|| {
                GroupError::denied(format!(
                    "identity {} is allowed no group",
                    identities.join(", ")
                ))
            }),
        }
    }
}

fn names(groups: &[&Group]) -> String {
    if groups.is_empty() {
        return "none".to_owned();
    }
    groups
        .iter()
        .map(|g| g.as_ref())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> IdentityPattern {
        IdentityPattern::parse(s).unwrap()
    }

    #[test]
    fn patterns_match_exactly_by_segment_or_by_prefix() {
        let id = "spiffe://east.example/ns/istio-system/sa/istiod";
        assert!(p(id).matches(id));
        assert!(!p(id).matches("spiffe://east.example/ns/istio-system/sa/istiod2"));
        assert!(p("spiffe://east.example/ns/*/sa/istiod").matches(id));
        assert!(
            !p("spiffe://east.example/ns/*/sa/istiod")
                .matches("spiffe://east.example/ns/a/b/sa/istiod")
        );
        assert!(p("spiffe://east.example/**").matches(id));
        assert!(!p("spiffe://east.example/**").matches("spiffe://west.example/ns/x"));
        assert!(!p("spiffe://east.example*").matches(id), "* stops at /");
        assert!(p("*.east.example").matches("istiod.east.example"));
        assert!(!p("*.east.example").matches("istiod.west.example"));
        assert!(p("**").matches(""));
        assert!(IdentityPattern::parse(" ").is_err());
        assert!(IdentityPattern::parse("a b").is_err());
        assert!(IdentityPattern::parse(&"*".repeat(9)).is_err());
    }

    fn access() -> GroupAccess {
        GroupAccess {
            groups: vec![
                (
                    "east".into(),
                    AllowList(vec![p("spiffe://east.example/**")]),
                ),
                ("west".into(), AllowList(vec![p("istiod.west.example")])),
            ],
            enforced: true,
        }
    }

    #[test]
    fn the_identity_decides_not_the_claim() {
        let a = access();
        let east = vec!["spiffe://east.example/ns/istio-system/sa/istiod".to_owned()];
        assert_eq!(
            a.decide(None, "default".into(), &east).unwrap().as_ref(),
            "east"
        );
        assert_eq!(
            a.decide(Some("east".into()), "default".into(), &east)
                .unwrap()
                .as_ref(),
            "east"
        );
        let e = a
            .decide(Some("west".into()), "default".into(), &east)
            .unwrap_err();
        assert!(e.denied, "{e}");
        assert!(
            e.message.contains("\"west\"") && e.message.contains("allowed: east"),
            "{e}"
        );
        let e = a
            .decide(Some("default".into()), "default".into(), &east)
            .unwrap_err();
        assert!(e.denied, "the default group needs a list too: {e}");
        let e = a.decide(None, "default".into(), &[]).unwrap_err();
        assert!(e.denied && e.message.contains("client certificate"), "{e}");
        let stranger = vec!["spiffe://north.example/x".to_owned()];
        assert!(
            a.decide(None, "default".into(), &stranger)
                .unwrap_err()
                .denied
        );
        // Not enforced (no client certificates verified): claims stand.
        let off = GroupAccess {
            enforced: false,
            ..access()
        };
        assert_eq!(
            off.decide(Some("west".into()), "default".into(), &east)
                .unwrap()
                .as_ref(),
            "west"
        );
    }
}
