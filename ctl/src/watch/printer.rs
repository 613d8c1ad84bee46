//! What `watch` prints: each change as Kubernetes objects (YAML documents
//! or JSON lines), and what it holds of each collection (or type), which a
//! Delta ADS subscription declares on reconnect.

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::sync::Mutex;

use meshhub_mcp::sink::{ApplyError, Change, Updater};
use meshhub_proto::kinds::KindTable;
use meshhub_proto::transcode;
use tokio_util::sync::CancellationToken;

use super::args::Output;

/// Prints each applied change; with `--once`, cancels when every
/// collection arrived once.
pub struct Printer {
    /// The kinds known, to decode resources.
    kinds: KindTable,
    /// How objects are printed.
    output: Output,
    /// Collections (or types) not seen yet.
    pending: Mutex<BTreeSet<String>>,
    /// With `--once`: cancelled when every collection arrived.
    once: Option<CancellationToken>,
    /// Per collection (or type): name → version held.
    held: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl Printer {
    /// A printer of `output` that waits for every collection (or type) of
    /// `pending` when `once` is given, and then cancels it.
    pub fn new(
        kinds: KindTable,
        output: Output,
        pending: impl IntoIterator<Item = String>,
        once: Option<CancellationToken>,
    ) -> Self {
        Self {
            kinds,
            output,
            pending: Mutex::new(pending.into_iter().collect()),
            once,
            held: Mutex::default(),
        }
    }

    /// The change as text. `held` (Delta ADS) is what the client held
    /// before it: each resource is then marked added or updated.
    fn render(
        &self,
        change: &Change,
        held: Option<&HashMap<String, String>>,
    ) -> Result<String, String> {
        let mut out = String::new();
        // A collection (MCP) or a type URL (ADS).
        let (noun, kind) = match self.kinds.by_collection(&change.collection) {
            Some(kind) => ("collection", Some(kind)),
            None => ("type", self.kinds.by_type_url(&change.collection)),
        };
        out.push_str(&format!(
            "# {noun} {} version {} ({} resources{}{})\n",
            change.collection,
            change.version,
            change.resources.len(),
            if change.incremental {
                ", incremental"
            } else {
                ""
            },
            if change.removed.is_empty() {
                String::new()
            } else {
                format!(", removed: {}", change.removed.join(" "))
            }
        ));
        for r in &change.resources {
            let name = r.metadata.as_ref().map(|m| m.name.as_str()).unwrap_or("");
            if let Some(held) = held {
                let version = r
                    .metadata
                    .as_ref()
                    .map(|m| m.version.as_str())
                    .unwrap_or("");
                let what = if held.contains_key(name) {
                    "updated"
                } else {
                    "added"
                };
                out.push_str(&format!("# {what} {name} version {version}\n"));
            }
            let Some(kind) = kind else {
                out.push_str(&format!("# {name}: no schema known for this collection\n"));
                continue;
            };
            let obj = transcode::resource_to_object(kind, r).map_err(|e| e.to_string())?;
            let text = match self.output {
                Output::Yaml => transcode::to_yaml(&obj)
                    .map(|y| format!("---\n{y}"))
                    .map_err(|e| e.to_string()),
                // One object per line, for jq and friends.
                Output::Json => serde_json::to_string(&obj)
                    .map(|j| format!("{j}\n"))
                    .map_err(|e| e.to_string()),
            }?;
            out.push_str(&text);
            if !text.ends_with('\n') {
                out.push('\n');
            }
        }
        if held.is_some() {
            for name in &change.removed {
                out.push_str(&format!("# removed {name}\n"));
            }
        }
        Ok(out)
    }
}

impl Printer {
    /// Prints a change and records what is now held. `mark` (Delta ADS)
    /// marks each resource added or updated and lists removals. Returns
    /// whether every collection (or type) has now arrived at least once.
    pub fn show(&self, change: &Change, mark: bool) -> Result<bool, String> {
        let text = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let empty = HashMap::new();
            let before = held.get(&change.collection).unwrap_or(&empty);
            self.render(change, mark.then_some(before))?
        };
        {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes());
            let _ = stdout.flush();
        }
        {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let map = held.entry(change.collection.clone()).or_default();
            if !change.incremental {
                map.clear();
            }
            for n in &change.removed {
                map.remove(n);
            }
            for r in &change.resources {
                if let Some(m) = &r.metadata {
                    map.insert(m.name.clone(), m.version.clone());
                }
            }
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.remove(&change.collection);
        Ok(pending.is_empty())
    }

    /// What is held of a collection (or type): name → version.
    pub fn held_of(&self, collection: &str) -> HashMap<String, String> {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(collection)
            .cloned()
            .unwrap_or_default()
    }
}

impl Updater for Printer {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        let all_arrived = self.show(&change, false).map_err(ApplyError::Invalid)?;
        if let (true, Some(done)) = (all_arrived, &self.once) {
            done.cancel();
        }
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.held_of(collection)
    }
}
