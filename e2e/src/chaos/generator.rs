//! The soak's change generator and its model: a seeded random stream of
//! file-source changes (add, edit, retarget between clusters, delete,
//! invalid objects, large bulk files) written to the hub's objects
//! directory, and, for every cluster, the virtual services the hub must
//! publish for it (`name → host`), which the oracle compares with what
//! every process ends up holding.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

/// One valid virtual service as the model knows it.
#[derive(Clone, Debug)]
struct Object {
    name: String,
    host: String,
    /// `meshhub.io/clusters`; `None`: every cluster.
    target: Option<Vec<String>>,
    /// Bytes of padding (a request header value) to make pushes large.
    pad: usize,
}

/// The generator: what each file holds, and the random stream.
#[derive(Debug)]
pub struct Generator {
    rng: StdRng,
    dir: PathBuf,
    clusters: Vec<String>,
    /// File name → the valid objects in it (an invalid file holds none).
    files: BTreeMap<String, Vec<Object>>,
    next: u64,
    /// Changes applied, by kind.
    pub counts: BTreeMap<&'static str, u64>,
}

impl Generator {
    /// A generator writing into `dir` for `clusters`, seeded with `seed`.
    pub fn new(seed: u64, dir: PathBuf, clusters: &[&str]) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            dir,
            clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
            files: BTreeMap::new(),
            next: 0,
            counts: BTreeMap::new(),
        }
    }

    /// The generator's random source (the soak draws its faults from it
    /// too, so one seed replays the whole run).
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    /// Writes `count` objects, one file each, to start from.
    pub fn seed_objects(&mut self, count: usize) {
        for _ in 0..count {
            self.add();
        }
    }

    /// Applies one random change; its kind.
    pub fn step(&mut self) -> &'static str {
        let singles = self.files.keys().filter(|f| f.starts_with('o')).count();
        let kind = match self.rng.random_range(0..100) {
            0..25 => "add",
            25..55 if singles > 0 => "edit",
            55..70 if singles > 0 => "retarget",
            70..85 if singles > 5 => "delete",
            85..95 => "invalid",
            95..100 => "bulk",
            _ => "add",
        };
        match kind {
            "add" => self.add(),
            "edit" => {
                let file = self.pick_file('o');
                let generation = self.fresh();
                let obj = &mut self.files.get_mut(&file).expect("file")[0];
                obj.host = format!("{}-g{generation}", obj.name);
                self.write(&file);
            }
            "retarget" => {
                let file = self.pick_file('o');
                let target = self.target();
                self.files.get_mut(&file).expect("file")[0].target = target;
                self.write(&file);
            }
            "delete" => {
                let file = self.pick_file('o');
                self.files.remove(&file);
                std::fs::remove_file(self.dir.join(&file)).expect("delete");
            }
            "invalid" => self.invalid(),
            _ => {
                let count = self.rng.random_range(50..200);
                self.bulk(count, 2048, None);
            }
        }
        *self.counts.entry(kind).or_default() += 1;
        kind
    }

    /// Replaces `bulk.yaml` with `count` objects padded to about `pad`
    /// bytes each, for `target` (or every cluster): a large push.
    pub fn bulk(&mut self, count: usize, pad: usize, target: Option<Vec<String>>) {
        let generation = self.fresh();
        let objects = (0..count)
            .map(|i| Object {
                name: format!("bulk-{i}"),
                host: format!("bulk-{i}-g{generation}"),
                target: target.clone(),
                pad,
            })
            .collect();
        self.files.insert("bulk.yaml".to_owned(), objects);
        self.write("bulk.yaml");
    }

    /// Removes `bulk.yaml` (if there is one).
    pub fn remove_bulk(&mut self) {
        if self.files.remove("bulk.yaml").is_some() {
            std::fs::remove_file(self.dir.join("bulk.yaml")).expect("delete bulk");
        }
    }

    /// What the hub must publish for `cluster`: `bookinfo/<name>` → host.
    pub fn expected(&self, cluster: &str) -> BTreeMap<String, String> {
        self.files
            .values()
            .flatten()
            .filter(|o| {
                o.target
                    .as_ref()
                    .is_none_or(|t| t.iter().any(|c| c == cluster))
            })
            .map(|o| (format!("bookinfo/{}", o.name), o.host.clone()))
            .collect()
    }

    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn add(&mut self) {
        let n = self.fresh();
        let name = format!("o{n}");
        let obj = Object {
            host: format!("{name}-g{n}"),
            name,
            target: self.target(),
            pad: 0,
        };
        let file = format!("o{n}.yaml");
        self.files.insert(file.clone(), vec![obj]);
        self.write(&file);
    }

    /// An object no snapshot may hold: an unknown field, a cluster that
    /// does not exist, or text that is no YAML.
    fn invalid(&mut self) {
        let n = self.fresh();
        let name = format!("bad{n}");
        let text = match self.rng.random_range(0..3) {
            0 => vs(&name, &format!("{name}-h"), None, 0).replace("  hosts:", "  hots:"),
            1 => vs(
                &name,
                &format!("{name}-h"),
                Some(&["nowhere".to_owned()]),
                0,
            ),
            _ => format!(
                "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: {name}\n  : [\n"
            ),
        };
        let file = format!("bad{n}.yaml");
        self.files.insert(file.clone(), Vec::new());
        meshhub_testkit::fixtures::write_atomic(&self.dir.join(&file), &text);
    }

    /// `None` (every cluster) half the time, else one or two clusters.
    fn target(&mut self) -> Option<Vec<String>> {
        if self.rng.random_bool(0.5) {
            return None;
        }
        let clusters = self.clusters.clone();
        let mut t: Vec<String> = clusters
            .into_iter()
            .filter(|_| self.rng.random_bool(0.5))
            .collect();
        if t.is_empty() {
            let i = self.rng.random_range(0..self.clusters.len());
            t.push(self.clusters[i].clone());
        }
        Some(t)
    }

    /// A random file whose name starts with `prefix`.
    fn pick_file(&mut self, prefix: char) -> String {
        let files: Vec<&String> = self
            .files
            .keys()
            .filter(|f| f.starts_with(prefix))
            .collect();
        let i = self.rng.random_range(0..files.len());
        files[i].clone()
    }

    fn write(&self, file: &str) {
        let text: Vec<String> = self.files[file]
            .iter()
            .map(|o| vs(&o.name, &o.host, o.target.as_deref(), o.pad))
            .collect();
        meshhub_testkit::fixtures::write_atomic(&self.dir.join(file), &text.join("---\n"));
    }
}

/// A VirtualService in `bookinfo` routing to `host`.
fn vs(name: &str, host: &str, target: Option<&[String]>, pad: usize) -> String {
    let annotations = target.map_or(String::new(), |t| {
        format!(
            "  annotations: {{meshhub.io/clusters: \"{}\"}}\n",
            t.join(",")
        )
    });
    let headers = if pad == 0 {
        String::new()
    } else {
        format!(
            "    headers: {{request: {{set: {{x-pad: \"{}\"}}}}}}\n",
            "p".repeat(pad)
        )
    };
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: bookinfo\n{annotations}spec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {host}\n{headers}"
    )
}
