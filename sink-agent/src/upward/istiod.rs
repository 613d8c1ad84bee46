//! What the cluster's istiod actually holds, compared with what the agent
//! serves it.
//!
//! istiod never NACKs configuration it receives over MCP-over-xDS: an
//! object its validation refuses is logged and left out, and the response
//! is ACKed (docs/interop.md). The only way to see the drop is istiod's own
//! view, `/debug/configz` on its HTTP debug port: every config it holds,
//! as `{apiVersion, kind, metadata: {name, namespace, …}, spec}`. The agent
//! reads it every `istiod.checkInterval` and reports each served object
//! istiod does not hold.
//!
//! An object is reported **dropped** only after two checks in a row found
//! it missing at the same served version: istiod takes a change some
//! milliseconds after the agent publishes it, and a single check would
//! report every change in flight. istiod's `/debug/configz` gives no reason
//! for a drop (istiod writes it to its log only), so the reason says where
//! to look.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use meshhub_mcp::snapshot::Snapshot;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::translate::{TRANSLATED_WASM_PLUGIN_SUFFIX, WasmPluginTranslation};
use meshhub_proto::upward::ObjectProblem;
use serde::Deserialize;

/// Why istiod's view could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigzError {
    /// The URL is not valid.
    #[error("{url}: invalid URL")]
    Url {
        /// The URL.
        url: String,
    },
    /// No answer.
    #[error("{url}: {message}")]
    Unreachable {
        /// The URL.
        url: String,
        /// Why, in one line.
        message: String,
    },
    /// No answer in time.
    #[error("{url}: no answer within {timeout:?}")]
    Timeout {
        /// The URL.
        url: String,
        /// The limit.
        timeout: Duration,
    },
    /// An answer other than 200.
    #[error("{url}: answered {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: http::StatusCode,
    },
    /// The answer of `/version` does not start with a release.
    #[error("{url}: the answer names no Istio release")]
    NotAVersion {
        /// The URL.
        url: String,
    },
    /// The answer is not the expected JSON.
    #[error("{url}: not a list of configs: {source}")]
    Decode {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// One config as `/debug/configz` lists it (the fields compared).
#[derive(Debug, Deserialize)]
struct Item {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: ItemMeta,
}

#[derive(Debug, Default, Deserialize)]
struct ItemMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
}

/// What istiod holds: (API group, kind, `namespace/name`).
pub type Held = BTreeSet<(String, String, String)>;

/// Reads `<base>/debug/configz` (at most `timeout`).
pub async fn read_configz(base: &str, timeout: Duration) -> Result<Held, ConfigzError> {
    let url = format!("{}/debug/configz", base.trim_end_matches('/'));
    let body = get(&url, timeout).await?;
    parse_configz(&body).map_err(|source| ConfigzError::Decode { url, source })
}

/// Reads istiod's release from `<base>/version` (its monitoring port,
/// 15014: the body is `<release>-<git revision>-<build status>`).
pub async fn read_version(base: &str, timeout: Duration) -> Result<String, ConfigzError> {
    let url = format!("{}/version", base.trim_end_matches('/'));
    let body = get(&url, timeout).await?;
    parse_version(&body).ok_or(ConfigzError::NotAVersion { url })
}

/// The release of a `/version` answer (`1.28.3` of
/// `1.28.3-unknown-unknown`); `None` when it does not start with one.
pub fn parse_version(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?.trim();
    let release = text.split('-').next()?;
    let mut parts = release.split('.');
    let numeric =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    (numeric(parts.next()) && numeric(parts.next()) && parts.all(|p| numeric(Some(p))))
        .then(|| release.to_owned())
}

/// One GET of `url` (at most `timeout`): its body when it answered 200.
async fn get(url: &str, timeout: Duration) -> Result<bytes::Bytes, ConfigzError> {
    let uri: http::Uri = url.parse().map_err(|_| ConfigzError::Url {
        url: url.to_owned(),
    })?;
    let client = Client::builder(TokioExecutor::new()).build_http::<String>();
    let fetch = async {
        let response = client
            .get(uri)
            .await
            .map_err(|e| ConfigzError::Unreachable {
                url: url.to_owned(),
                message: meshhub_runtime::error_chain(&e),
            })?;
        let status = response.status();
        if status != http::StatusCode::OK {
            return Err(ConfigzError::Status {
                url: url.to_owned(),
                status,
            });
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| ConfigzError::Unreachable {
                url: url.to_owned(),
                message: meshhub_runtime::error_chain(&e),
            })?
            .to_bytes();
        Ok(body)
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| ConfigzError::Timeout {
            url: url.to_owned(),
            timeout,
        })?
}

/// The configs of a `/debug/configz` answer.
pub fn parse_configz(body: &[u8]) -> Result<Held, serde_json::Error> {
    let items: Vec<Item> = serde_json::from_slice(body)?;
    Ok(items
        .into_iter()
        .map(|i| {
            let group = i
                .api_version
                .rsplit_once('/')
                .map_or("", |(g, _)| g)
                .to_owned();
            let name = format!("{}/{}", i.metadata.namespace, i.metadata.name);
            (group, i.kind, name)
        })
        .collect())
}

/// The result of one comparison.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Served objects istiod holds.
    pub held: u32,
    /// Served objects istiod dropped (missing in two checks in a row).
    pub dropped: Vec<ObjectProblem>,
    /// The collections compared.
    pub collections: Vec<String>,
}

/// The reason given for a dropped object.
pub const DROPPED_REASON: &str = "istiod does not hold it: absent from its /debug/configz while served (istiod's validation refused it; istiod's log names the cause)";

/// Compares what the agent serves with what istiod holds, keeping the
/// objects found missing once until the next check.
#[derive(Debug, Default)]
pub struct Tracker {
    /// (collection, name) → served version, missing at the last check.
    missing: BTreeMap<(String, String), String>,
    /// Kinds newer than some Istio releases that istiod has listed an
    /// object of (so it reads them): compared from then on, also when it
    /// holds none of them any more.
    read_kinds: BTreeSet<(String, String)>,
}

impl Tracker {
    /// One check: `served` is the agent's published snapshot, `only` the
    /// collections to compare (those istiod subscribed to; `None`: every
    /// collection with a kind istiod reads — a kind newer than some Istio
    /// releases (TrafficExtension, 1.30) only once istiod lists an object of
    /// it: an older istiod does not read the kind at all, and its objects
    /// are not drops).
    pub fn check(
        &mut self,
        kinds: &KindTable,
        served: &Snapshot,
        only: Option<&BTreeSet<String>>,
        istiod: &Held,
    ) -> Comparison {
        let mut out = Comparison::default();
        let mut missing = BTreeMap::new();
        // An istiod that reads TrafficExtensions (1.30+) applies a
        // WasmPlugin only as the TrafficExtension made of it (served over
        // ADS, or made by istiod from its own API: the same name), so a
        // WasmPlugin is held only when that TrafficExtension is.
        let translation = WasmPluginTranslation::new(kinds).filter(|t| {
            let extension = t.extension();
            let id = (extension.group().to_owned(), extension.kind().to_owned());
            let reads = only.map_or_else(
                || {
                    self.read_kinds.contains(&id)
                        || istiod.iter().any(|(g, k, _)| *g == id.0 && *k == id.1)
                },
                |o| o.contains(extension.collection()),
            );
            if reads && only.is_none() {
                self.read_kinds.insert(id);
            }
            reads
        });
        for (collection, snapshot) in served.collections() {
            if only.is_some_and(|o| !o.contains(collection)) {
                continue;
            }
            // istiod reads the Gateway API from its own cluster's API,
            // never from the agent: not a drop when it lacks them here.
            let Some(kind) = kinds
                .by_collection(collection)
                .filter(|k| k.offered_over_ads())
            else {
                continue;
            };
            if only.is_none() && meshhub_analyze::since::kind_since(kind.kind()).is_some() {
                let id = (kind.group().to_owned(), kind.kind().to_owned());
                if !self.read_kinds.contains(&id) {
                    if !istiod.iter().any(|(g, k, _)| *g == id.0 && *k == id.1) {
                        continue;
                    }
                    self.read_kinds.insert(id);
                }
            }
            out.collections.push(collection.to_owned());
            for key in snapshot.keys() {
                // Cluster-scoped names are `/name`; istiod shows them with
                // an empty namespace, which gives the same string.
                let name = if key.name.contains('/') {
                    key.name.to_string()
                } else {
                    format!("/{}", key.name)
                };
                let probe = match &translation {
                    Some(t) if t.plugin().collection() == collection => (
                        t.extension().group().to_owned(),
                        t.extension().kind().to_owned(),
                        format!("{name}{TRANSLATED_WASM_PLUGIN_SUFFIX}"),
                    ),
                    _ => (kind.group().to_owned(), kind.kind().to_owned(), name),
                };
                if istiod.contains(&probe) {
                    out.held += 1;
                    continue;
                }
                let id = (collection.to_owned(), key.name.to_string());
                let version = key.version.to_string();
                if self.missing.get(&id) == Some(&version) {
                    out.dropped.push(ObjectProblem {
                        collection: collection.to_owned(),
                        name: key.name.to_string(),
                        version: version.clone(),
                        reason: DROPPED_REASON.to_owned(),
                    });
                }
                missing.insert(id, version);
            }
        }
        self.missing = missing;
        out
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use meshhub_mcp::snapshot::{CollectionSnapshot, EncodedResource};

    use super::*;

    const VS: &str = "istio/networking/v1alpha3/virtualservices";
    const EF: &str = "istio/networking/v1alpha3/envoyfilters";

    fn served(items: &[(&str, &str, &str)]) -> Snapshot {
        let mut by: BTreeMap<&str, Vec<EncodedResource>> = BTreeMap::new();
        for (c, name, version) in items {
            by.entry(c).or_default().push(EncodedResource {
                name: (*name).into(),
                version: (*version).into(),
                encoded: bytes::Bytes::new(),
            });
        }
        let mut s = Snapshot::new();
        for (c, r) in by {
            s.insert(c, Arc::new(CollectionSnapshot::new(r)));
        }
        s
    }

    fn configz() -> Held {
        parse_configz(
            br#"[{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"reviews","namespace":"bookinfo","resourceVersion":"1"},"spec":{}}]"#,
        )
        .unwrap()
    }

    #[test]
    fn the_version_endpoint_names_the_release() {
        assert_eq!(
            parse_version(b"1.28.3-unknown-unknown").as_deref(),
            Some("1.28.3")
        );
        assert_eq!(
            parse_version(b"1.23.2-da0b3f29e9f9-Clean\n").as_deref(),
            Some("1.23.2")
        );
        assert_eq!(parse_version(b"unknown-unknown-unknown"), None);
        assert_eq!(parse_version(b"1-x"), None);
        assert_eq!(parse_version(&[0xff, 0xfe]), None);
    }

    #[test]
    fn an_object_missing_twice_at_the_same_version_is_dropped() {
        let kinds = KindTable::builtin();
        let snap = served(&[
            (VS, "bookinfo/reviews", "1"),
            (EF, "bookinfo/unknown-type", "7"),
        ]);
        let mut t = Tracker::default();
        let first = t.check(&kinds, &snap, None, &configz());
        assert_eq!(first.held, 1);
        assert!(first.dropped.is_empty(), "one miss is a change in flight");
        let second = t.check(&kinds, &snap, None, &configz());
        assert_eq!(second.dropped.len(), 1, "{second:?}");
        assert_eq!(second.dropped[0].name, "bookinfo/unknown-type");
        assert_eq!(second.dropped[0].collection, EF);
        assert_eq!(second.collections, vec![EF.to_owned(), VS.to_owned()]);

        // A new version starts over; held again clears it.
        let changed = served(&[
            (VS, "bookinfo/reviews", "1"),
            (EF, "bookinfo/unknown-type", "8"),
        ]);
        assert!(
            t.check(&kinds, &changed, None, &configz())
                .dropped
                .is_empty()
        );
        let only: BTreeSet<String> = [VS.to_owned()].into();
        let c = t.check(&kinds, &changed, Some(&only), &configz());
        assert!(
            c.dropped.is_empty(),
            "not compared: istiod did not subscribe"
        );
        assert_eq!(c.collections, vec![VS.to_owned()]);
    }

    #[test]
    fn a_kind_newer_than_some_istiods_is_compared_only_once_istiod_lists_it() {
        const TE: &str = "istio/extensions/v1alpha1/trafficextensions";
        let kinds = KindTable::builtin();
        let snap = served(&[(VS, "bookinfo/reviews", "1"), (TE, "bookinfo/ext", "3")]);
        let mut t = Tracker::default();
        // istiod (no ADS consumer: it reads the cluster's API) lists no
        // TrafficExtension: an istiod older than 1.30 does not read them.
        for _ in 0..3 {
            let c = t.check(&kinds, &snap, None, &configz());
            assert!(c.dropped.is_empty(), "{c:?}");
            assert_eq!(c.collections, vec![VS.to_owned()]);
        }
        // Once it lists one, the kind is compared and a missing one is a
        // drop.
        let mut held = configz();
        held.insert((
            "extensions.istio.io".into(),
            "TrafficExtension".into(),
            "bookinfo/other".into(),
        ));
        t.check(&kinds, &snap, None, &held);
        let c = t.check(&kinds, &snap, None, &held);
        assert_eq!(c.dropped.len(), 1, "{c:?}");
        assert_eq!(c.dropped[0].collection, TE);
        // istiod reads the kind: when it holds none of them any more, the
        // drop stands (not a false "held again").
        let c = t.check(&kinds, &snap, None, &configz());
        assert_eq!(c.dropped.len(), 1, "{c:?}");
    }

    #[test]
    fn a_wasm_plugin_is_held_by_an_istiod_that_reads_traffic_extensions_only_as_one() {
        const WP: &str = "istio/extensions/v1alpha1/wasmplugins";
        const TE: &str = "istio/extensions/v1alpha1/trafficextensions";
        let kinds = KindTable::builtin();
        let snap = served(&[(WP, "bookinfo/auth", "7")]);
        let with = |items: &[(&str, &str)]| -> Held {
            items
                .iter()
                .map(|(k, n)| {
                    (
                        "extensions.istio.io".to_owned(),
                        (*k).to_owned(),
                        (*n).to_owned(),
                    )
                })
                .collect()
        };
        let plugin_only = with(&[("WasmPlugin", "bookinfo/auth")]);
        // istiod 1.28 (subscribed without TrafficExtension): the plugin
        // itself is what it applies.
        let older: BTreeSet<String> = [WP.to_owned()].into();
        let mut t = Tracker::default();
        for _ in 0..2 {
            let c = t.check(&kinds, &snap, Some(&older), &plugin_only);
            assert!(c.dropped.is_empty() && c.held == 1, "{c:?}");
        }
        // istiod 1.30+ (subscribed with it): holding the plugin is not
        // applying it; without its translation it is a drop, of the plugin.
        let newer: BTreeSet<String> = [WP.to_owned(), TE.to_owned()].into();
        let mut t = Tracker::default();
        t.check(&kinds, &snap, Some(&newer), &plugin_only);
        let c = t.check(&kinds, &snap, Some(&newer), &plugin_only);
        assert_eq!(c.dropped.len(), 1, "{c:?}");
        assert_eq!(
            (c.dropped[0].collection.as_str(), c.dropped[0].name.as_str()),
            (WP, "bookinfo/auth")
        );
        let translated = with(&[
            ("WasmPlugin", "bookinfo/auth"),
            (
                "TrafficExtension",
                "bookinfo/auth~istio-translated-wasmplugin",
            ),
        ]);
        let c = t.check(&kinds, &snap, Some(&newer), &translated);
        assert!(c.dropped.is_empty() && c.held == 1, "{c:?}");
        // Reading its cluster's API (no subscriptions known): an istiod that
        // lists a TrafficExtension reads them, and translates itself.
        let mut t = Tracker::default();
        t.check(&kinds, &snap, None, &translated);
        let c = t.check(
            &kinds,
            &snap,
            None,
            &with(&[("TrafficExtension", "bookinfo/other")]),
        );
        assert!(
            c.dropped.is_empty(),
            "missing once is not a drop yet: {c:?}"
        );
        let c = t.check(
            &kinds,
            &snap,
            None,
            &with(&[("WasmPlugin", "bookinfo/auth")]),
        );
        assert_eq!(
            c.dropped.len(),
            1,
            "it reads them: the plugin is judged by its translation: {c:?}"
        );
    }

    #[test]
    fn configz_that_is_not_a_list_is_an_error() {
        assert!(parse_configz(b"{}").is_err());
        assert!(parse_configz(b"[]").unwrap().is_empty());
    }
}
