//! Incremental analysis against analysis from scratch: random sets from a
//! small vocabulary (hosts, gateways, namespaces, certificates, addresses,
//! parents and grants collide a lot), changed by random sequences of
//! additions, removals and replacements of every kind the analyzers read;
//! after every step the incremental messages equal `analyze_set`'s, texts
//! and order included. And locality itself, the lemma the incremental
//! analysis rests on: an object's messages in its ball are its messages
//! in the whole set.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;

use crate::facts::{
    BackendRef, Body, Destination, Facts, GATEWAY_API_GROUP, Gateway, Kind, Listeners, ParentRef,
    ReferenceGrant, Route, Server, ServiceEntry, Tls, VirtualService,
};
use crate::incremental::{ball_of, reanalyze};
use crate::{Message, analyze_set};

/// A small deterministic generator (splitmix64), with the kind its set
/// crowds (half its objects, so that more than ten claim one thing).
struct Rng {
    state: u64,
    crowd: Option<Kind>,
}

#[allow(non_snake_case)]
fn Rng(seed: u64) -> Rng {
    let mut r = Rng {
        state: seed,
        crowd: None,
    };
    if r.chance(50) {
        r.crowd = Some(kind(&mut r));
    }
    r
}

impl Rng {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'v>(&mut self, of: &[&'v str]) -> &'v str {
        of[self.below(of.len())]
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// Up to `max` picks (repeats allowed: objects repeat values too).
    fn some(&mut self, of: &[&str], max: usize) -> Vec<String> {
        let n = self.below(max + 1);
        (0..n).map(|_| self.pick(of).to_owned()).collect()
    }
}

const NAMESPACES: &[&str] = &["a", "b", "c"];
/// Enough names that more than ten objects can claim one thing (the
/// messages then name ten and count the rest).
const NAMES: &[&str] = &[
    "n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "n12", "n13", "n14",
    "n15",
];
const HOSTS: &[&str] = &[
    "h",
    "h.a.svc.cluster.local",
    "e.com",
    "w.e.com",
    "*.e.com",
    "*.com",
    "*",
];
const GATEWAYS: &[&str] = &["g", "a/g", "b/g", "c/n1", "mesh"];
const SERVER_HOSTS: &[&str] = &["e.com", "*/e.com", "./w.e.com", "a/h", "*", "*/*"];
const SUBSETS: &[&str] = &["v1", "v2"];
const CERTS: &[&str] = &["c1", "c2"];
const ADDRESSES: &[&str] = &["10.0.0.1", "10.0.0.2"];
const LISTENERS: &[&str] = &["l1", "l2"];
const ROUTE_KINDS: &[&str] = &["HTTPRoute", "GRPCRoute"];

fn kind(r: &mut Rng) -> Kind {
    if let Some(k) = r.crowd
        && r.chance(50)
    {
        return k;
    }
    match r.below(14) {
        0 | 1 => Kind::VirtualService,
        2 => Kind::DestinationRule,
        3 | 4 => Kind::Gateway,
        5 => Kind::ServiceEntry,
        6 => Kind::Sidecar,
        7 => Kind::Telemetry,
        8 => Kind::Other("AuthorizationPolicy"),
        9 | 10 => Kind::Route(if r.chance(70) {
            "HTTPRoute"
        } else {
            "GRPCRoute"
        }),
        11 => Kind::GatewayApiGateway,
        12 => Kind::ListenerSet,
        _ => Kind::ReferenceGrant,
    }
}

fn body(r: &mut Rng, kind: Kind, ns: &str) -> Body {
    match kind {
        Kind::VirtualService => {
            let destinations = (0..r.below(3))
                .map(|i| Destination {
                    path: format!("spec.http[{i}].route[0].destination"),
                    mirror: r.chance(20),
                    host: r.pick(HOSTS).to_owned(),
                    subset: if r.chance(60) {
                        r.pick(SUBSETS).to_owned()
                    } else {
                        String::new()
                    },
                })
                .collect();
            let delegates = (0..r.below(2))
                .map(|i| {
                    (
                        format!("spec.http[{i}].delegate"),
                        r.pick(NAMESPACES).to_owned(),
                        r.pick(&NAMES[..4]).to_owned(),
                    )
                })
                .collect();
            Body::VirtualService(VirtualService {
                hosts: r.some(HOSTS, 2),
                gateways: r.some(GATEWAYS, 2),
                export_to: r.some(&["*", ".", "a", "b"], 2),
                destinations,
                delegates,
            })
        }
        Kind::DestinationRule => Body::DestinationRule {
            host: r.pick(HOSTS).to_owned(),
            subsets: r.some(SUBSETS, 2),
        },
        Kind::Gateway => {
            let mut selector = BTreeMap::new();
            if r.chance(80) {
                selector.insert("app".to_owned(), "gw".to_owned());
            }
            if r.chance(30) {
                selector.insert("v".to_owned(), "1".to_owned());
            }
            let servers = (0..1 + r.below(2))
                .map(|_| Server {
                    port: if r.chance(50) { 80 } else { 443 },
                    hosts: r.some(SERVER_HOSTS, 2),
                    bind: if r.chance(80) {
                        String::new()
                    } else {
                        "1.1.1.1".to_owned()
                    },
                    tls: r.chance(60).then(|| match r.below(3) {
                        0 => Tls {
                            credential_name: r.pick(CERTS).to_owned(),
                            ..Tls::default()
                        },
                        1 => Tls {
                            server_certificate: r.pick(CERTS).to_owned(),
                            private_key: "k".to_owned(),
                            ..Tls::default()
                        },
                        _ => Tls::default(),
                    }),
                })
                .collect();
            Body::Gateway(Gateway { selector, servers })
        }
        Kind::ServiceEntry => Body::ServiceEntry(ServiceEntry {
            hosts: r.some(&["e.com", "f.com"], 2),
            addresses: r.some(ADDRESSES, 2),
            ports: (0..r.below(3))
                .map(|_| if r.chance(50) { 80 } else { 443 })
                .collect(),
        }),
        Kind::Sidecar => Body::Sidecar {
            selects: r.chance(30),
        },
        Kind::Telemetry => Body::Telemetry {
            selects: r.chance(30),
        },
        Kind::Other(_) => Body::Other,
        Kind::Route(_) => {
            let parents = (0..r.below(3))
                .map(|i| ParentRef {
                    path: format!("spec.parentRefs[{i}]"),
                    group: if r.chance(85) {
                        GATEWAY_API_GROUP.to_owned()
                    } else {
                        String::new()
                    },
                    kind: r
                        .pick(&["Gateway", "Gateway", "ListenerSet", "Service"])
                        .to_owned(),
                    namespace: r.pick(NAMESPACES).to_owned(),
                    name: r.pick(&NAMES[..3]).to_owned(),
                    section: r.pick(&["", "l1", "l2", "l3"]).to_owned(),
                })
                .collect();
            let backends = (0..r.below(3))
                .map(|i| BackendRef {
                    path: format!("spec.rules[0].backendRefs[{i}]"),
                    group: if r.chance(85) {
                        String::new()
                    } else {
                        "example.com".to_owned()
                    },
                    kind: "Service".to_owned(),
                    namespace: if r.chance(50) {
                        ns.to_owned()
                    } else {
                        r.pick(NAMESPACES).to_owned()
                    },
                    name: r.pick(&["s", "t"]).to_owned(),
                })
                .collect();
            Body::Route(Route { parents, backends })
        }
        Kind::GatewayApiGateway | Kind::ListenerSet => {
            let certificates = (0..r.below(3))
                .map(|i| BackendRef {
                    path: format!("spec.listeners[{i}].tls.certificateRefs[0]"),
                    group: if r.chance(90) {
                        String::new()
                    } else {
                        "x".to_owned()
                    },
                    kind: if r.chance(90) { "Secret" } else { "ConfigMap" }.to_owned(),
                    namespace: r.pick(NAMESPACES).to_owned(),
                    name: r.pick(CERTS).to_owned(),
                })
                .collect();
            Body::Listeners(Listeners {
                names: r.some(LISTENERS, 2),
                certificates,
            })
        }
        Kind::ReferenceGrant => Body::ReferenceGrant(ReferenceGrant {
            from: (0..1 + r.below(2))
                .map(|_| {
                    (
                        GATEWAY_API_GROUP.to_owned(),
                        r.pick(&[ROUTE_KINDS[0], ROUTE_KINDS[1], "Gateway", "ListenerSet"])
                            .to_owned(),
                        r.pick(NAMESPACES).to_owned(),
                    )
                })
                .collect(),
            to: (0..1 + r.below(2))
                .map(|_| {
                    (
                        String::new(),
                        r.pick(&["Service", "Secret"]).to_owned(),
                        r.pick(&["", "s", "c1"]).to_owned(),
                    )
                })
                .collect(),
        }),
    }
}

fn object(r: &mut Rng, kind: Kind, namespace: &str, name: &str) -> Arc<Facts> {
    Arc::new(Facts {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        body: body(r, kind, namespace),
        needs: Vec::new(),
    })
}

fn any_object(r: &mut Rng) -> Arc<Facts> {
    let k = kind(r);
    let ns = r.pick(NAMESPACES);
    let name = r.pick(NAMES);
    object(r, k, ns, name)
}

/// A set: one object per (kind, namespace, name), as a cluster's group.
type Set = BTreeMap<(Kind, String, String), Arc<Facts>>;

fn add(set: &mut Set, f: Arc<Facts>) {
    set.insert((f.kind, f.namespace.clone(), f.name.clone()), f);
}

fn refs(set: &Set) -> Vec<&Facts> {
    set.values().map(|f| &**f).collect()
}

/// One random change: an addition, a removal, a replacement (sometimes by
/// an equal object at another address).
fn change(r: &mut Rng, set: &mut Set) {
    let keys: Vec<_> = set.keys().cloned().collect();
    match r.below(10) {
        0..=3 => add(set, any_object(r)),
        4..=5 if !keys.is_empty() => {
            set.remove(&keys[r.below(keys.len())]);
        }
        6 if !keys.is_empty() => {
            let k = &keys[r.below(keys.len())];
            let same = Arc::new((*set[k]).clone());
            set.insert(k.clone(), same);
        }
        _ if !keys.is_empty() => {
            let (kind, ns, name) = keys[r.below(keys.len())].clone();
            add(set, object(r, kind, &ns, &name));
        }
        _ => add(set, any_object(r)),
    }
}

fn check_sequence(seed: u64, size: usize, steps: usize) {
    let mut r = Rng(seed);
    let mut set = Set::new();
    for _ in 0..size {
        add(&mut set, any_object(&mut r));
    }
    let mut messages = analyze_set(refs(&set));
    for step in 0..steps {
        let before = set.clone();
        for _ in 0..1 + r.below(3) {
            change(&mut r, &mut set);
        }
        let expected = analyze_set(refs(&set));
        for shortcut in [false, true] {
            let (got, rerun) = reanalyze(
                &refs(&before),
                &messages,
                &refs(&set),
                |m: Message| m,
                shortcut,
            );
            assert_eq!(
                got, expected,
                "seed {seed} step {step} shortcut {shortcut} ({rerun:?})"
            );
        }
        // Carry the incremental result: errors would compound.
        messages = reanalyze(&refs(&before), &messages, &refs(&set), |m| m, false).0;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn incremental_analysis_equals_analysis_from_scratch(
        seed in any::<u64>(),
        size in 0usize..160,
    ) {
        check_sequence(seed, size, 12);
    }

    #[test]
    fn an_objects_messages_in_its_ball_are_its_messages_in_the_set(
        seed in any::<u64>(),
        size in 1usize..120,
    ) {
        let mut r = Rng(seed);
        let mut set = Set::new();
        for _ in 0..size {
            add(&mut set, any_object(&mut r));
        }
        let all = refs(&set);
        let whole = analyze_set(all.iter().copied());
        for (at, f) in all.iter().enumerate() {
            let about = |m: &&Message| {
                (m.kind.as_str(), m.namespace.as_str(), m.name.as_str())
                    == (f.kind.as_str(), f.namespace.as_str(), f.name.as_str())
            };
            let ball: Vec<&Facts> = ball_of(&all, at).into_iter().map(|i| all[i]).collect();
            // Objects sharing `f`'s name are analysed with it (their
            // messages cannot be told apart): their balls too.
            let mut with: Vec<&Facts> = ball;
            for (j, g) in all.iter().enumerate() {
                if j != at && (g.kind.as_str(), &g.namespace, &g.name) == (f.kind.as_str(), &f.namespace, &f.name) {
                    with.extend(ball_of(&all, j).into_iter().map(|i| all[i]));
                }
            }
            with.sort_by_key(|g| *g as *const Facts);
            with.dedup_by_key(|g| *g as *const Facts);
            let local = analyze_set(with.iter().copied());
            let a: Vec<&Message> = whole.iter().filter(about).collect();
            let b: Vec<&Message> = local.iter().filter(about).collect();
            prop_assert_eq!(a, b, "seed {} object {}", seed, at);
        }
    }
}

/// Long sequences on larger sets, a few seeds (the property test's sets
/// are smaller, its sequences shorter).
#[test]
fn long_sequences_on_larger_sets() {
    for seed in 0..6 {
        check_sequence(seed, 150, 60);
    }
}

/// No change: the messages as they were, nothing analysed.
#[test]
fn no_change_reruns_nothing() {
    let mut r = Rng(7);
    let mut set = Set::new();
    for _ in 0..40 {
        add(&mut set, any_object(&mut r));
    }
    let messages = analyze_set(refs(&set));
    let (got, rerun) = reanalyze(&refs(&set), &messages, &refs(&set), |m| m, true);
    assert_eq!(got, messages);
    assert_eq!(rerun.analysed, 0);
}

/// A cluster's set as the `clusters` bench builds it: 200 objects every
/// cluster receives (Bookinfo-like, in ten namespaces: mesh routes to
/// subsets, their DestinationRules, routes bound to a gateway, gateways
/// on one selector) and `own` of the cluster's own, in its namespace;
/// `generation` changes what the own objects route to.
fn bench_set(own: usize, generation: usize) -> Vec<Arc<Facts>> {
    let services = ["reviews", "ratings", "details", "productpage"];
    let mut out = Vec::new();
    let mut one = |i: usize, ns: String, name: String, g: usize| {
        let host = services[(i / 4) % 4].to_owned();
        let (kind, body) = match i % 4 {
            0 => (
                Kind::VirtualService,
                Body::VirtualService(VirtualService {
                    hosts: vec![host.clone()],
                    destinations: vec![Destination {
                        path: "spec.http[0].route[0].destination".into(),
                        mirror: false,
                        host,
                        subset: format!("v{}", 1 + g % 3),
                    }],
                    ..VirtualService::default()
                }),
            ),
            1 => (
                Kind::DestinationRule,
                Body::DestinationRule {
                    host,
                    subsets: vec!["v1".into(), "v2".into(), format!("v{}", 3 + g)],
                },
            ),
            2 => (
                Kind::VirtualService,
                Body::VirtualService(VirtualService {
                    hosts: vec!["*".into()],
                    gateways: vec!["bookinfo-gateway".into()],
                    ..VirtualService::default()
                }),
            ),
            _ => (
                Kind::Gateway,
                Body::Gateway(Gateway {
                    selector: [("istio".to_owned(), "ingressgateway".to_owned())].into(),
                    servers: vec![Server {
                        port: 80,
                        hosts: vec!["*".into()],
                        ..Server::default()
                    }],
                }),
            ),
        };
        out.push(Arc::new(Facts {
            kind,
            namespace: ns,
            name,
            body,
            needs: Vec::new(),
        }));
    };
    for i in 0..200 {
        one(i, format!("shared-{}", i % 10), format!("o-s{i}"), 0);
    }
    for j in 0..own {
        one(j, "bench-0".into(), format!("o-c0-{j}"), generation);
    }
    out
}

/// The figures the hub's analysis of one cluster's change rests on: a
/// 202-object set with its 2 own objects replaced, from scratch and
/// incrementally (run with `--release --ignored --nocapture`).
#[test]
#[ignore = "a measurement, not a check"]
fn timing_two_of_202_replaced() {
    use std::time::Instant;
    let before = bench_set(2, 0);
    let after = bench_set(2, 1);
    // The shared objects are shared (one pointer), as in the hub.
    let after: Vec<Arc<Facts>> = before[..200]
        .iter()
        .cloned()
        .chain(after[200..].iter().cloned())
        .collect();
    let (b, a): (Vec<&Facts>, Vec<&Facts>) = (
        before.iter().map(|f| &**f).collect(),
        after.iter().map(|f| &**f).collect(),
    );
    let messages: Vec<Arc<Message>> = analyze_set(b.iter().copied())
        .into_iter()
        .map(Arc::new)
        .collect();
    let rounds = 300u32;
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(analyze_set(a.iter().copied()));
    }
    let scratch = t.elapsed() / rounds;
    let t = Instant::now();
    let mut rerun = None;
    for _ in 0..rounds {
        let (m, r) = crate::reanalyze_set(&b, &messages, &a, Arc::new);
        rerun = Some(r);
        std::hint::black_box(m);
    }
    let incremental = t.elapsed() / rounds;
    let got: Vec<Message> = crate::reanalyze_set(&b, &messages, &a, Arc::new)
        .0
        .iter()
        .map(|m| (**m).clone())
        .collect();
    assert_eq!(got, analyze_set(a.iter().copied()));
    println!(
        "202 objects, 2 replaced: from scratch {scratch:?}, incremental {incremental:?} ({rerun:?}); {} messages",
        messages.len()
    );
    // Every object changed in what analysis does not read (the bench's
    // changes: an annotation): new facts, equal to the old.
    let equal: Vec<Arc<Facts>> = before.iter().map(|f| Arc::new((**f).clone())).collect();
    let e: Vec<&Facts> = equal.iter().map(|f| &**f).collect();
    let t = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(crate::reanalyze_set(&b, &messages, &e, Arc::new));
    }
    println!(
        "202 objects, none changed (new facts, equal): incremental {:?}",
        t.elapsed() / rounds
    );
}
