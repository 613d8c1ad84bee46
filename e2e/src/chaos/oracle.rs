//! The soak's oracle: what a consumer holds, read from `meshhubctl watch
//! -o json` output (the last complete response per collection), compared
//! by content digest with the hub's snapshot for the consumer's group, and
//! by name and host with the generator's model.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use serde_json::Value;

/// A collection as one consumer holds it: resource name → its JSON line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// The version of the response it came from.
    pub version: String,
    /// `namespace/name` → the object as `meshhubctl` printed it.
    pub objects: BTreeMap<String, String>,
}

impl View {
    /// The last complete response for `collection` in `meshhubctl watch -o
    /// json` output (state-of-the-world responses), or `None` before one.
    pub fn last_of(output: &str, collection: &str) -> Option<Self> {
        let header = format!("# collection {collection} version ");
        let mut last = None;
        let mut current: Option<(Self, usize)> = None;
        for line in output.lines() {
            if let Some(rest) = line.strip_prefix(&header) {
                let (version, count) = rest.split_once(" (")?;
                let count: usize = count.split_whitespace().next()?.parse().ok()?;
                let view = Self {
                    version: version.to_owned(),
                    objects: BTreeMap::new(),
                };
                current = Some((view, count));
            } else if line.starts_with('#') {
                // Another collection's header: its lines are not ours.
                current = None;
            } else if let Some((view, _)) = current.as_mut() {
                let Ok(obj) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                let meta = &obj["metadata"];
                let name = format!(
                    "{}/{}",
                    meta["namespace"].as_str().unwrap_or(""),
                    meta["name"].as_str().unwrap_or("")
                );
                view.objects.insert(name, line.to_owned());
            }
            if let Some((view, count)) = &current
                && view.objects.len() == *count
            {
                last = Some(view.clone());
            }
        }
        last
    }

    /// The content digest: count and the wrapping sum of each object's
    /// hash (order-independent, as bench/src/digest.rs).
    pub fn digest(&self) -> String {
        let sum = self.objects.values().fold(0u64, |sum, line| {
            let mut h = DefaultHasher::new();
            line.hash(&mut h);
            sum.wrapping_add(h.finish())
        });
        format!("{}:{sum:016x}", self.objects.len())
    }

    /// `namespace/name` → first host, to compare with the model.
    pub fn hosts(&self) -> BTreeMap<String, String> {
        self.objects
            .iter()
            .map(|(name, line)| {
                let obj: Value = serde_json::from_str(line).unwrap_or_default();
                let host = obj["spec"]["hosts"][0].as_str().unwrap_or("").to_owned();
                (name.clone(), host)
            })
            .collect()
    }
}

/// A short description of how `got` differs from `want` (at most a few
/// names each way), for failure messages.
pub fn difference(want: &BTreeMap<String, String>, got: &BTreeMap<String, String>) -> String {
    let missing: Vec<_> = want
        .iter()
        .filter(|(k, v)| got.get(*k) != Some(v))
        .take(5)
        .map(|(k, v)| format!("{k}={v} (got {:?})", got.get(k)))
        .collect();
    let extra: Vec<_> = got
        .keys()
        .filter(|k| !want.contains_key(*k))
        .take(5)
        .collect();
    format!(
        "want {} got {}; wrong or missing: {missing:?}; unexpected: {extra:?}",
        want.len(),
        got.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_complete_response_is_the_view() {
        let c = "istio/networking/v1alpha3/virtualservices";
        let out = format!(
            "# collection {c} version v1 (1 resources)\n{{\"metadata\":{{\"name\":\"a\",\"namespace\":\"ns\"}},\"spec\":{{\"hosts\":[\"h1\"]}}}}\n\
             # collection {c} version v2 (2 resources)\n{{\"metadata\":{{\"name\":\"a\",\"namespace\":\"ns\"}},\"spec\":{{\"hosts\":[\"h2\"]}}}}\n\
             {{\"metadata\":{{\"name\":\"b\",\"namespace\":\"ns\"}},\"spec\":{{\"hosts\":[\"h3\"]}}}}\n\
             # collection {c} version v3 (2 resources)\n{{\"metadata\":{{\"name\":\"a\",\"namespace\":\"ns\"}}}}\n"
        );
        let v = View::last_of(&out, c).expect("a view");
        assert_eq!(v.version, "v2", "v3 is incomplete");
        assert_eq!(v.hosts()["ns/a"], "h2");
        assert_eq!(v.objects.len(), 2);
        let empty = View::last_of(&format!("# collection {c} version v0 (0 resources)\n"), c);
        assert_eq!(empty.map(|v| v.objects.len()), Some(0));
        assert_ne!(v.digest(), View::default().digest());
    }
}
