use super::*;

/// Whether the walk of `root` lists `rel`.
fn listed(root: &Path, exclude: &Exclude, rel: &str) -> bool {
    let mut found = Walked::default();
    walk(root, root, exclude, &mut Vec::new(), &mut found);
    found.files.iter().any(|(p, _)| p == Path::new(rel))
}

#[test]
fn excluded_files_are_found_through_symlinks_and_namesakes_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("meshhub.yaml"), "sources: []\n").unwrap();
    std::fs::write(root.join("sub/meshhub.yaml"), "kind: Other\n").unwrap();
    std::fs::write(root.join("sub/a.yaml"), "kind: A\n").unwrap();
    std::os::unix::fs::symlink(root.join("meshhub.yaml"), root.join("sub/link.yaml")).unwrap();
    std::os::unix::fs::symlink(root.join("sub/a.yaml"), root.join("sub/b.yaml")).unwrap();
    let exclude = Exclude::new(&[root.join("meshhub.yaml"), root.join("missing.yaml")]);
    assert_eq!(exclude.paths.len(), 1, "missing files are dropped");
    assert!(!listed(&root, &exclude, "meshhub.yaml"), "the file itself");
    assert!(!listed(&root, &exclude, "sub/link.yaml"), "a symlink to it");
    assert!(listed(&root, &exclude, "sub/meshhub.yaml"), "a namesake");
    assert!(listed(&root, &exclude, "sub/a.yaml"));
    assert!(
        listed(&root, &exclude, "sub/b.yaml"),
        "a symlink to another file"
    );
    let none = Exclude::new(&[]);
    assert!(listed(&root, &none, "meshhub.yaml"));
}

/// The units a rescan after `force` emits: (unit, objects) sorted.
fn rescanned(root: &Path, known: &mut Known, force: &Force) -> Vec<(String, usize)> {
    let source: Arc<str> = Arc::from("files");
    let limits = Limits {
        file_bytes: 1 << 20,
        object_bytes: 1 << 20,
    };
    let mut units = Vec::new();
    let sent = scan(
        &source,
        root,
        &Exclude::default(),
        limits,
        known,
        force,
        &mut |ev| {
            if let SourceEvent::Unit { unit, entries, .. } = ev {
                units.push((unit.to_string(), entries.len()));
            }
            true
        },
    );
    assert!(sent, "the receiver is there");
    units.sort();
    units
}

#[test]
fn a_rescan_of_named_files_sees_what_a_walk_would() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    for i in 0..10 {
        std::fs::write(root.join(format!("f{i}.yaml")), "kind: A\n").unwrap();
    }
    std::fs::write(root.join("sub/a.yaml"), "kind: A\n---\nkind: B\n").unwrap();
    let mut known = Known::default();
    let all = Force {
        all: true,
        paths: HashSet::new(),
    };
    assert_eq!(rescanned(&root, &mut known, &all).len(), 11);
    let named = |paths: &[&str]| Force {
        all: false,
        paths: paths.iter().map(PathBuf::from).collect(),
    };

    // One file changed, one removed: exactly those two units.
    std::fs::write(root.join("f1.yaml"), "kind: A2\n").unwrap();
    std::fs::remove_file(root.join("f2.yaml")).unwrap();
    assert_eq!(
        rescanned(&root, &mut known, &named(&["f1.yaml", "f2.yaml"])),
        vec![("f1.yaml".into(), 1), ("f2.yaml".into(), 0)]
    );
    assert_eq!(known.files.len(), 10);
    // Named but unchanged content: nothing to send.
    assert!(rescanned(&root, &mut known, &named(&["f3.yaml"])).is_empty());
    // A directory renamed: the walk finds the files under their new
    // names and the old ones gone.
    std::fs::rename(root.join("sub"), root.join("moved")).unwrap();
    assert_eq!(
        rescanned(&root, &mut known, &named(&["sub", "moved"])),
        vec![("moved/a.yaml".into(), 2), ("sub/a.yaml".into(), 0)]
    );
    // A new file.
    std::fs::write(root.join("new.yaml"), "kind: N\n").unwrap();
    assert_eq!(
        rescanned(&root, &mut known, &named(&["new.yaml"])),
        vec![("new.yaml".into(), 1)]
    );
    assert_eq!(known.files.len(), 11);
}

#[test]
fn opening_a_file_is_no_change_writing_one_is() {
    use notify::event::{
        AccessKind, AccessMode, CreateKind, Event, EventKind, ModifyKind, RenameMode,
    };
    let root = Path::new("/objects");
    let forced = |kind: EventKind| {
        let mut force = Force::default();
        let change = note(
            root,
            Ok(Event::new(kind).add_path(root.join("a.yaml"))),
            &mut force,
        );
        assert_eq!(change, force.paths.contains(Path::new("a.yaml")));
        change
    };
    // The rescan's own reads.
    assert!(!forced(EventKind::Access(AccessKind::Open(
        AccessMode::Any
    ))));
    assert!(!forced(EventKind::Access(AccessKind::Close(
        AccessMode::Read
    ))));
    assert!(!forced(EventKind::Access(AccessKind::Read)));
    // Writes, renames into place, creations.
    assert!(forced(EventKind::Access(AccessKind::Close(
        AccessMode::Write
    ))));
    assert!(forced(EventKind::Modify(ModifyKind::Any)));
    assert!(forced(EventKind::Modify(ModifyKind::Name(RenameMode::To))));
    assert!(forced(EventKind::Create(CreateKind::File)));
    assert!(forced(EventKind::Any));
}
