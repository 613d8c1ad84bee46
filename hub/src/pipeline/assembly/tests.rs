use super::*;

const VS: &str = "istio/networking/v1alpha3/virtualservices";
const DR: &str = "istio/networking/v1alpha3/destinationrules";

fn res(name: &str, version: &str) -> EncodedResource {
    EncodedResource {
        name: name.into(),
        version: version.into(),
        encoded: bytes::Bytes::from(format!("{name}@{version}")),
    }
}

/// One object: its groups' list, collection and resource.
struct Obj {
    groups: Arc<[Group]>,
    collection: Arc<str>,
    resource: EncodedResource,
}

fn obj(groups: &Arc<[Group]>, collection: &str, name: &str, version: &str) -> Obj {
    Obj {
        groups: groups.clone(),
        collection: collection.into(),
        resource: res(name, version),
    }
}

fn list(names: &[&str]) -> Arc<[Group]> {
    names.iter().map(|n| Group::from(*n)).collect()
}

fn placed(o: &Obj) -> Placed<'_> {
    Placed {
        groups: &o.groups,
        collection: &o.collection,
        resource: &o.resource,
        facts: None,
    }
}

/// The assembly and what it was last told, as the store's resolution
/// keeps it: each build hands over only the objects that changed.
#[derive(Default)]
struct Rig {
    a: Assembly,
    last: BTreeMap<(Arc<str>, Arc<str>), Obj>,
    started: bool,
}

fn groups(n: usize) -> Vec<Group> {
    (0..n).map(|i| Group::from(format!("c{i}"))).collect()
}

fn names(s: &Snapshot, coll: &str) -> Vec<String> {
    s.collection(coll)
        .keys()
        .iter()
        .map(|k| format!("{}@{}", k.name, k.version))
        .collect()
}

/// Runs one build of `objs` (told as changes against the last build's)
/// and records each group's snapshot as the pipeline does; returns how
/// many groups changed. Every group the assembly did not name as affected
/// must have kept its snapshot.
fn build(
    rig: &mut Rig,
    objs: &mut Vec<Obj>,
    groups: &[Group],
    published: &mut HashMap<Group, Arc<Snapshot>>,
) -> usize {
    let collections: Vec<Arc<str>> = vec![VS.into(), DR.into()];
    let now: BTreeMap<(Arc<str>, Arc<str>), Obj> = objs
        .drain(..)
        .map(|o| ((o.collection.clone(), o.resource.name.clone()), o))
        .collect();
    let reset = !rig.started;
    rig.started = true;
    if reset {
        rig.a.reset(groups, &collections);
    }
    let mut deltas = Vec::new();
    for (k, o) in &now {
        match rig.last.get(k) {
            Some(b)
                if Arc::ptr_eq(&b.groups, &o.groups)
                    && b.resource.version == o.resource.version => {}
            b => deltas.push(Delta {
                before: b.map(placed),
                after: Some(placed(o)),
            }),
        }
    }
    for (k, b) in &rig.last {
        if !now.contains_key(k) {
            deltas.push(Delta {
                before: Some(placed(b)),
                after: None,
            });
        }
    }
    let affected = rig.a.update(deltas.into_iter(), false, published, reset);
    let mut changed = 0;
    for g in groups {
        let (_, s) = rig.a.of(g).expect("every group has a snapshot");
        match published.get(g) {
            Some(p) if same_snapshot(p, s) => {}
            _ => {
                assert!(affected.contains(g), "{g} changed but was not named");
                changed += 1;
                published.insert(g.clone(), s.clone());
            }
        }
    }
    objs.extend(now.values().map(|o| Obj {
        groups: o.groups.clone(),
        collection: o.collection.clone(),
        resource: o.resource.clone(),
    }));
    rig.last = now;
    changed
}

#[test]
fn groups_of_the_same_objects_share_one_snapshot_and_a_cluster_change_touches_its_group_only() {
    let gs = groups(4);
    let every = list(&["c0", "c1", "c2", "c3"]);
    let own: Vec<Arc<[Group]>> = gs.iter().map(|g| list(&[g])).collect();
    let shared_objects = |v: &str| {
        vec![
            obj(&every, VS, "ns/shared-a", v),
            obj(&every, DR, "ns/shared-b", "1"),
        ]
    };
    let mut a = Rig::default();
    let mut published = HashMap::new();

    // Only shared objects: one content, one snapshot for all.
    let mut objs = shared_objects("1");
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 4);
    let first = published[&gs[0]].clone();
    assert!(gs.iter().all(|g| Arc::ptr_eq(&published[g], &first)));
    assert_eq!(names(&first, VS), ["ns/shared-a@1"]);

    // Each cluster gets an object of its own: four contents.
    let mut objs = shared_objects("1");
    for (i, l) in own.iter().enumerate() {
        objs.push(obj(l, VS, &format!("ns/own-{i}"), "1"));
    }
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 4);
    assert_eq!(
        names(&published[&gs[2]], VS),
        ["ns/own-2@1", "ns/shared-a@1"]
    );
    // The collection nobody's own objects touched is still the one shared.
    let dr0 = published[&gs[0]].collection(DR);
    assert!(
        gs.iter()
            .all(|g| Arc::ptr_eq(&published[g].collection(DR), &dr0))
    );

    // One cluster's own object changes: only its group.
    let before: Vec<Arc<Snapshot>> = gs.iter().map(|g| published[g].clone()).collect();
    let mut objs = shared_objects("1");
    for (i, l) in own.iter().enumerate() {
        objs.push(obj(
            l,
            VS,
            &format!("ns/own-{i}"),
            if i == 1 { "2" } else { "1" },
        ));
    }
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 1);
    assert_eq!(
        names(&published[&gs[1]], VS),
        ["ns/own-1@2", "ns/shared-a@1"]
    );
    for (i, g) in gs.iter().enumerate() {
        assert_eq!(Arc::ptr_eq(&published[g], &before[i]), i != 1, "{g}");
    }
    // The unchanged collection of the changed group is kept.
    assert!(Arc::ptr_eq(&published[&gs[1]].collection(DR), &dr0));

    // Nothing changes: nothing is rebuilt.
    let mut objs = shared_objects("1");
    for (i, l) in own.iter().enumerate() {
        objs.push(obj(
            l,
            VS,
            &format!("ns/own-{i}"),
            if i == 1 { "2" } else { "1" },
        ));
    }
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 0);

    // A shared object changes: every group, each with its own object.
    let mut objs = shared_objects("2");
    for (i, l) in own.iter().enumerate() {
        objs.push(obj(l, VS, &format!("ns/own-{i}"), "1"));
    }
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 4);
    assert_eq!(
        names(&published[&gs[3]], VS),
        ["ns/own-3@1", "ns/shared-a@2"]
    );
    assert!(Arc::ptr_eq(&published[&gs[3]].collection(DR), &dr0));
}

#[test]
fn a_group_moving_to_another_content_or_losing_every_object_is_rebuilt_right() {
    let gs = groups(3);
    let first_two = list(&["c0", "c1"]);
    let last_two = list(&["c1", "c2"]);
    let mut a = Rig::default();
    let mut published = HashMap::new();
    let mut objs = vec![obj(&first_two, VS, "ns/x", "1")];
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 3);
    assert_eq!(names(&published[&gs[0]], VS), ["ns/x@1"]);
    assert!(names(&published[&gs[2]], VS).is_empty());

    // The object moves: c0 loses it, c2 gains it, c1 keeps it.
    let c1 = published[&gs[1]].clone();
    let mut objs = vec![obj(&last_two, VS, "ns/x", "1")];
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 2);
    assert!(names(&published[&gs[0]], VS).is_empty());
    assert_eq!(names(&published[&gs[2]], VS), ["ns/x@1"]);
    assert!(
        Arc::ptr_eq(&published[&gs[1]], &c1),
        "same content: same snapshot kept"
    );

    // Everything goes: every group that held something is emptied.
    let mut objs = Vec::new();
    assert_eq!(build(&mut a, &mut objs, &gs, &mut published), 2);
    assert!(gs.iter().all(|g| names(&published[g], VS).is_empty()));
    // Every collection is named, empty.
    assert!(
        gs.iter()
            .all(|g| published[g].contains(DR) && published[g].contains(VS))
    );
}

/// Placements over groups c0–c4: everywhere, one group, and overlapping
/// sets.
fn five_placements() -> Vec<Arc<[Group]>> {
    vec![
        list(&["c0", "c1", "c2", "c3", "c4"]),
        list(&["c0"]),
        list(&["c1", "c3"]),
        list(&["c2", "c3", "c4"]),
        list(&["c4"]),
    ]
}

#[test]
fn content_equals_a_build_from_scratch_across_random_changes() {
    // A small deterministic generator: each round moves, changes, adds
    // and removes objects; every group's snapshot must equal one made
    // from its objects alone, and keep its address when its content
    // did not move.
    let gs = groups(5);
    let lists = five_placements();
    let mut seed = 7u64;
    let mut next = move |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut a = Rig::default();
    let mut published: HashMap<Group, Arc<Snapshot>> = HashMap::new();
    // name → (list, collection, version)
    let mut state: BTreeMap<String, (usize, &str, u64)> = BTreeMap::new();
    for round in 0..60 {
        for _ in 0..(1 + next(3)) {
            let name = format!("ns/o{}", next(12));
            match next(4) {
                0 => {
                    state.remove(&name);
                }
                _ => {
                    let coll = if next(2) == 0 { VS } else { DR };
                    let e = state.entry(name).or_insert((0, coll, 0));
                    e.0 = next(lists.len() as u64) as usize;
                    e.2 += next(2);
                }
            }
        }
        let before = published.clone();
        let mut objs: Vec<Obj> = state
            .iter()
            .map(|(n, (l, c, v))| obj(&lists[*l], c, n, &v.to_string()))
            .collect();
        build(&mut a, &mut objs, &gs, &mut published);
        // One snapshot per distinct set of classes, none kept for a set
        // no group has any more.
        let sets: BTreeSet<Vec<usize>> = gs
            .iter()
            .map(|g| {
                (0..lists.len())
                    .filter(|&l| lists[l].contains(g) && state.values().any(|(ol, _, _)| *ol == l))
                    .collect()
            })
            .collect();
        assert_eq!(a.a.distinct(), sets.len(), "round {round}");
        for g in &gs {
            for coll in [VS, DR] {
                let want: Vec<EncodedResource> = objs
                    .iter()
                    .filter(|o| &*o.collection == coll && o.groups.contains(g))
                    .map(|o| o.resource.clone())
                    .collect();
                let want = CollectionSnapshot::new(want);
                assert_eq!(
                    *published[g].collection(coll),
                    want,
                    "round {round}, {g}, {coll}"
                );
            }
            if let Some(b) = before.get(g) {
                let unchanged = [VS, DR]
                    .iter()
                    .all(|c| b.collection(c).version() == published[g].collection(c).version());
                assert_eq!(
                    Arc::ptr_eq(b, &published[g]),
                    unchanged,
                    "round {round}, {g}: its snapshot kept exactly when its content did not move"
                );
            }
        }
    }
}

/// A signature's classes merged into one sorted list, whether merged one
/// by one (a few classes) or sorted together (many): every object once,
/// in name order.
#[test]
fn classes_merge_into_one_sorted_list() {
    for classes in [2usize, MERGED_LISTS + 1, MERGED_LISTS + 3] {
        let mut all: HashMap<Class, Content> = HashMap::new();
        let mut members = Vec::new();
        let mut want = Vec::new();
        for c in 0..classes {
            let class = Class(list(&[&format!("only-{c}")]));
            let mut content = Content::default();
            // Interleaved names: class c holds every classes-th one.
            for k in 0..5 {
                let name = format!("ns/o{:03}", k * classes + c);
                content.insert(
                    &Arc::from(VS),
                    Item {
                        resource: res(&name, "1"),
                        facts: None,
                    },
                );
                want.push(name);
            }
            all.insert(class.clone(), content);
            members.push(class);
        }
        want.sort();
        let got: Vec<String> = merged(&all, &members, VS)
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(got, want, "{classes} classes");
        assert!(merged(&all, &members, DR).is_empty());
    }
}

/// A build after a reset takes each run of one class and collection at
/// once (and a large content's collections on the rayon pool): every
/// group's snapshot equals the one built object by object, with classes
/// interleaved in each collection.
#[test]
fn a_reset_build_equals_one_made_object_by_object() {
    let gs = groups(5);
    let lists = five_placements();
    for n in [40usize, PARALLEL_OBJECTS + 100] {
        let objs = || -> Vec<Obj> {
            (0..n)
                .map(|i| {
                    // Runs of 1–3 objects of one class, classes interleaved.
                    let class = &lists[(i / (1 + i % 3)) % lists.len()];
                    let coll = if i % 5 < 2 { VS } else { DR };
                    obj(class, coll, &format!("ns/o{i:06}"), &(i % 7).to_string())
                })
                .collect()
        };
        let mut bulk = Rig::default();
        let mut bulk_published = HashMap::new();
        let changed = build(&mut bulk, &mut objs(), &gs, &mut bulk_published);
        assert_eq!(changed, gs.len());
        let mut one_by_one = Rig::default();
        let mut published = HashMap::new();
        build(&mut one_by_one, &mut Vec::new(), &gs, &mut published);
        build(&mut one_by_one, &mut objs(), &gs, &mut published);
        assert_eq!(bulk.a.distinct(), one_by_one.a.distinct(), "{n} objects");
        for g in &gs {
            for coll in [VS, DR] {
                let (b, o) = (
                    bulk_published[g].collection(coll),
                    published[g].collection(coll),
                );
                assert!(!b.is_empty(), "{n} objects, {g}, {coll}");
                assert_eq!(*b, *o, "{n} objects, {g}, {coll}");
                assert_eq!(b.version(), o.version(), "{n} objects, {g}, {coll}");
            }
        }
    }
}
