//! Which files a rescan looks at: the whole tree, or only the files a
//! burst of events named.
//!
//! A change to one file of a large tree used to walk the whole tree (a
//! `statx` per file: at 10,000 files, about a third of the hub's CPU per
//! one-cluster change, issue 40). When every event of a burst names a
//! plain object file, or a path the last walk knew as one, only those
//! paths are looked at. Anything the events alone can't tell safely
//! falls back to the walk: a lost event, a directory, no complete walk
//! yet, a tree holding symlinks (a ConfigMap mount swaps its `..data`
//! link: the visible files, symlinks, change through it) (one file may be seen
//! under several names, and a write to the target names only the
//! target), or more paths than a walk costs.

use std::path::{Component, Path, PathBuf};

use super::{Exclude, Force, Known};

/// Past this share of the known files named by one burst, a walk is as
/// cheap as looking at each.
const WALK_SHARE: usize = 4;

/// What a rescan looks at.
#[derive(Debug)]
pub(super) enum Look {
    /// Every file, as walked.
    Tree,
    /// These object files, present now (with their metadata), and these
    /// known files, gone.
    Files {
        present: Vec<(PathBuf, std::fs::Metadata)>,
        missing: Vec<PathBuf>,
    },
}

/// What a rescan after `force` must look at.
pub(super) fn look(root: &Path, exclude: &Exclude, known: &Known, force: &Force) -> Look {
    if force.all
        || !known.walked
        || known.symlinks
        || force.paths.is_empty()
        || force.paths.len() * WALK_SHARE > known.files.len().max(WALK_SHARE)
    {
        return Look::Tree;
    }
    let mut present = Vec::new();
    let mut missing = Vec::new();
    for rel in &force.paths {
        match name_kind(rel) {
            // The walk skips them too (an editor's swap or backup file).
            Name::Skipped => continue,
            Name::Odd => return Look::Tree,
            Name::Plain => {}
        }
        let path = root.join(rel);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() => {
                if object_file(rel) && !exclude.excludes_file(&path, false) {
                    present.push((rel.clone(), meta));
                }
            }
            // A directory, a symlink, a device: the walk decides.
            Ok(_) => return Look::Tree,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if known.files.contains_key(rel) {
                    missing.push(rel.clone());
                } else if known.dirs.contains(rel) {
                    // A directory of known files went away.
                    return Look::Tree;
                }
                // Never an object file we held: nothing to do.
            }
            Err(_) => return Look::Tree,
        }
    }
    Look::Files { present, missing }
}

/// What a named path is to the walk.
enum Name {
    /// Normal components, none of them skipped.
    Plain,
    /// A component the walk skips (hidden, a backup `~`): nothing under
    /// it is read.
    Skipped,
    /// Empty, or not a plain relative path: the walk decides.
    Odd,
}

fn name_kind(rel: &Path) -> Name {
    if rel.components().next().is_none() {
        return Name::Odd;
    }
    let mut kind = Name::Plain;
    for c in rel.components() {
        match c {
            Component::Normal(name) => {
                let name = name.to_string_lossy();
                if name.starts_with('.') || name.ends_with('~') {
                    kind = Name::Skipped;
                }
            }
            _ => return Name::Odd,
        }
    }
    kind
}

/// Whether the walk reads a file of this name as objects.
pub(super) fn object_file(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;
    use crate::source::file::FileState;

    fn known(files: &[&str], symlinks: bool) -> Known {
        let mut k = Known {
            files: files
                .iter()
                .map(|f| {
                    (
                        PathBuf::from(f),
                        FileState {
                            len: 0,
                            modified: None,
                            hash: [0; 32],
                        },
                    )
                })
                .collect::<HashMap<_, _>>(),
            symlinks,
            walked: true,
            dirs: HashSet::new(),
        };
        for f in files {
            k.add_dirs(Path::new(f));
        }
        k
    }

    fn force(paths: &[&str]) -> Force {
        Force {
            all: false,
            paths: paths.iter().map(PathBuf::from).collect::<HashSet<_>>(),
        }
    }

    fn names(look: &Look) -> Option<(Vec<String>, Vec<String>)> {
        match look {
            Look::Tree => None,
            Look::Files { present, missing } => {
                let mut p: Vec<String> = present
                    .iter()
                    .map(|(r, _)| r.display().to_string())
                    .collect();
                let mut m: Vec<String> = missing.iter().map(|r| r.display().to_string()).collect();
                p.sort();
                m.sort();
                Some((p, m))
            }
        }
    }

    #[test]
    fn named_files_are_looked_at_alone_and_doubt_walks_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        for i in 0..20 {
            std::fs::write(root.join(format!("f{i}.yaml")), "kind: A\n").unwrap();
        }
        std::fs::write(root.join("sub/a.yaml"), "kind: A\n").unwrap();
        std::fs::write(root.join("notes.txt"), "x").unwrap();
        let mut files: Vec<String> = (0..20).map(|i| format!("f{i}.yaml")).collect();
        files.push("sub/a.yaml".into());
        files.push("gone.yaml".into());
        files.push("olddir/x.yaml".into());
        let refs: Vec<&str> = files.iter().map(String::as_str).collect();
        let k = known(&refs, false);
        let none = Exclude::default();

        // A changed file, a removed one, a non-object file, an unknown
        // missing one.
        let look = look(
            &root,
            &none,
            &k,
            &force(&["f1.yaml", "gone.yaml", "notes.txt", "never.yaml"]),
        );
        assert_eq!(
            names(&look),
            Some((vec!["f1.yaml".into()], vec!["gone.yaml".into()]))
        );
        // A file in a subdirectory.
        assert_eq!(
            names(&super::look(&root, &none, &k, &force(&["sub/a.yaml"]))),
            Some((vec!["sub/a.yaml".into()], vec![]))
        );

        let walks = |f: Force, k: &Known| matches!(super::look(&root, &none, k, &f), Look::Tree);
        assert!(walks(force(&["sub"]), &k), "a directory");
        assert!(
            walks(force(&["olddir"]), &k),
            "a directory of known files, gone"
        );
        // Names the walk skips are skipped (a ConfigMap's `..data` swap
        // comes with symlinks: that tree always walks).
        assert_eq!(
            names(&super::look(
                &root,
                &none,
                &k,
                &force(&["sub/.a.yaml.swp", "f1.yaml~", "..data", "f1.yaml"])
            )),
            Some((vec!["f1.yaml".into()], vec![]))
        );
        assert!(walks(force(&[]), &k), "an event naming nothing");
        let mut unwalked = known(&refs, false);
        unwalked.walked = false;
        assert!(
            walks(force(&["f1.yaml"]), &unwalked),
            "no walk yet (or a failed rescan)"
        );
        assert!(
            walks(force(&["f1.yaml"]), &known(&refs, true)),
            "a tree with symlinks"
        );
        let mut all = force(&["f1.yaml"]);
        all.all = true;
        assert!(walks(all, &k), "lost events");
        let many: Vec<&str> = refs[..10].to_vec();
        assert!(walks(force(&many), &k), "a large share of the tree");
        std::os::unix::fs::symlink(root.join("f2.yaml"), root.join("link.yaml")).unwrap();
        assert!(walks(force(&["link.yaml"]), &k), "a new symlink");
    }

    #[test]
    fn excluded_files_stay_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("meshhub.yaml"), "sources: []\n").unwrap();
        for i in 0..8 {
            std::fs::write(root.join(format!("f{i}.yaml")), "kind: A\n").unwrap();
        }
        let exclude = Exclude::new(&[root.join("meshhub.yaml")]);
        let k = known(&["f0.yaml", "f1.yaml", "f2.yaml", "f3.yaml"], false);
        assert_eq!(
            names(&look(&root, &exclude, &k, &force(&["meshhub.yaml"]))),
            Some((vec![], vec![]))
        );
    }
}
