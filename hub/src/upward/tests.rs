use meshhub_proto::mcp::Resource;
use meshhub_proto::upward::{ClusterStatus, ServiceExport};

use prost::Message as _;

use super::*;

fn resource(name: &str, message: &str, body: Vec<u8>) -> Resource {
    meshhub_testkit::mcp::resource(name, &meshhub_proto::type_url(message), body)
}

fn change(collection: &str, resources: Vec<Resource>) -> Change {
    Change {
        collection: collection.into(),
        version: "v".into(),
        resources,
        removed: Vec::new(),
        incremental: false,
        nonce: "n".into(),
    }
}

#[tokio::test]
async fn an_agent_may_only_publish_for_its_own_cluster() {
    let (tx, mut rx) = mpsc::channel(4);
    let u = ClusterUpdater::new("east".into(), 7, tx);
    let west = ClusterStatus {
        cluster: "west".into(),
        ..Default::default()
    };
    let r = resource("west", CLUSTER_STATUS_MESSAGE, west.encode_to_vec());
    let e = u.apply(change(CLUSTER_STATUS, vec![r])).await.unwrap_err();
    assert!(
        matches!(&e, ApplyError::Invalid(m) if m.contains("only publish for cluster \"east\"")),
        "{e:?}"
    );
    assert!(rx.try_recv().is_err(), "nothing taken");

    let east = ClusterStatus {
        cluster: "east".into(),
        ..Default::default()
    };
    let r = resource("east", CLUSTER_STATUS_MESSAGE, east.encode_to_vec());
    u.apply(change(CLUSTER_STATUS, vec![r])).await.unwrap();
    assert!(
        matches!(rx.try_recv(), Ok(Update { cluster, generation: 7, what: What::Status(Some(_)) }) if cluster == "east")
    );

    // An export's name must be its namespace/name; the body its message.
    let e = ServiceExport {
        namespace: "shop".into(),
        name: "cart".into(),
        ..Default::default()
    };
    let bad = resource("shop/other", SERVICE_EXPORT_MESSAGE, e.encode_to_vec());
    assert!(u.apply(change(SERVICE_EXPORTS, vec![bad])).await.is_err());
    let wrong = resource("shop/cart", CLUSTER_STATUS_MESSAGE, e.encode_to_vec());
    assert!(u.apply(change(SERVICE_EXPORTS, vec![wrong])).await.is_err());
    let ok = resource("shop/cart", SERVICE_EXPORT_MESSAGE, e.encode_to_vec());
    u.apply(change(SERVICE_EXPORTS, vec![ok])).await.unwrap();
    assert!(matches!(
        rx.try_recv(),
        Ok(Update { what: What::Exports { version, exports }, .. }) if exports.len() == 1 && version == "v"
    ));
}

#[test]
fn only_unimplemented_marks_an_agent_unserved() {
    let unimpl = tonic::Status::unimplemented("no such service");
    assert!(unimplemented(&Err(DialError::Refused(unimpl.clone()))).is_some());
    assert!(unimplemented(&Ok((End::Failed(unimpl.clone()), false))).is_some());
    // Once the stream delivered, the peer served it: not this case.
    assert!(unimplemented(&Ok((End::Failed(unimpl), true))).is_none());
    let denied = tonic::Status::permission_denied("not you");
    assert!(unimplemented(&Err(DialError::Refused(denied))).is_none());
    assert!(unimplemented(&Err(DialError::Connect("refused".into()))).is_none());
    assert!(unimplemented(&Ok((End::PeerClosed, false))).is_none());
}

#[test]
fn an_unserved_wait_is_long_and_jittered() {
    let waits: std::collections::BTreeSet<Duration> =
        (0..50).map(|_| unserved_wait(UNSERVED_RETRY)).collect();
    assert!(waits.len() > 10, "jittered");
    for w in waits {
        assert!(w >= UNSERVED_RETRY / 2 && w <= UNSERVED_RETRY, "{w:?}");
    }
}

mod at_rest {
    //! A hub dialing many `ResourceSink`-only sinks stays at rest.

    use std::net::SocketAddr;
    use std::sync::atomic::AtomicUsize;

    use futures::StreamExt as _;
    use meshhub_mcp::dial::DialSpec;
    use meshhub_mcp::reconnect::ReconnectPolicy;
    use tokio::net::TcpListener;
    use tokio_stream::wrappers::TcpListenerStream;

    use super::*;

    /// Every subscriber's backoff: a peer retried at this pace would be
    /// asked hundreds of times while the test runs.
    const FAST: ReconnectPolicy = ReconnectPolicy {
        initial: Duration::from_millis(1),
        max: Duration::from_millis(2),
        factor: 2.0,
    };

    fn spec(cluster: &str, addr: SocketAddr) -> AgentSpec {
        AgentSpec {
            cluster: cluster.into(),
            dial: DialSpec {
                address: format!("http://{addr}"),
                tls: None,
                connect_timeout: Duration::from_secs(5),
                reconnect: FAST,
            },
            exports: Default::default(),
        }
    }

    /// A peer serving gRPC without the upward source (only health, as a
    /// `ResourceSink`-only sink would): tonic answers UNIMPLEMENTED. It
    /// counts the connections it accepts: each attempt dials anew.
    async fn sink_only(shutdown: &CancellationToken) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let incoming = TcpListenerStream::new(listener).inspect(move |_| {
            c.fetch_add(1, Ordering::Relaxed);
        });
        let (_, health) = tonic_health::server::health_reporter();
        let stop = shutdown.clone();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming_shutdown(incoming, stop.cancelled_owned()),
        );
        (addr, count)
    }

    /// A peer that hangs up on every connection: its subscriber retries at
    /// the backoff, a clock made of attempts.
    async fn hanging_up(shutdown: &CancellationToken) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let (c, stop) = (count.clone(), shutdown.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    r = listener.accept() => {
                        drop(r);
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        (addr, count)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hundred_sink_only_agents_are_asked_once_each() {
        const N: usize = 100;
        let shutdown = CancellationToken::new();
        let mut agents = Vec::new();
        let mut asked = Vec::new();
        for i in 0..N {
            let (addr, count) = sink_only(&shutdown).await;
            agents.push(spec(&format!("c{i}"), addr));
            asked.push(count);
        }
        let (addr, clock) = hanging_up(&shutdown).await;
        agents.push(spec("clock", addr));
        let (_agents_tx, agents_rx) = watch::channel(Arc::new(agents));
        let (tx, mut rx) = mpsc::channel(16);
        let tasks = TaskTracker::new();
        let ledger = Ledger::new();
        let deps = UpwardDeps {
            ledger: ledger.clone(),
            tasks: tasks.clone(),
            max_message_bytes: 4 << 20,
            connections: Arc::default(),
            unserved_retry: Duration::from_secs(3600),
        };
        tasks.spawn(run(agents_rx, deps, tx, shutdown.clone()));

        // Each sink-only cluster is marked unserved, once.
        let mut unserved = std::collections::BTreeSet::new();
        let marked = tokio::time::timeout(meshhub_testkit::wait::DEADLINE, async {
            while unserved.len() < N {
                match rx.recv().await {
                    Some(Update {
                        what: What::Started { .. },
                        ..
                    }) => {}
                    Some(Update {
                        cluster,
                        what: What::Unserved(true),
                        ..
                    }) => assert!(unserved.insert(cluster.clone()), "{cluster} marked twice"),
                    other => panic!("unexpected {other:?}"),
                }
            }
        })
        .await;
        assert!(marked.is_ok(), "only {} marked unserved", unserved.len());

        // While the clock's subscriber goes through 200 more attempts at
        // the same backoff, no sink-only agent is asked again.
        let start = clock.load(Ordering::Relaxed);
        let attempts = tokio::time::timeout(meshhub_testkit::wait::DEADLINE, async {
            while clock.load(Ordering::Relaxed) < start + 200 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        // Seen once in about 30 runs: the clock's subscriber slowed down or
        // stalled. Say what its ledger record held then.
        assert!(
            attempts.is_ok(),
            "the clock's subscriber made {} attempts in {:?}; its record: {:?}",
            clock.load(Ordering::Relaxed) - start,
            meshhub_testkit::wait::DEADLINE,
            ledger.view().into_iter().find(|p| p.peer.contains("clock"))
        );
        let counts: Vec<usize> = asked.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert!(
            counts.iter().all(|&c| c == 1),
            "attempts per agent: {counts:?}"
        );
        assert!(rx.try_recv().is_err(), "no state change");

        shutdown.cancel();
        tasks.close();
        tokio::time::timeout(meshhub_testkit::wait::DEADLINE, tasks.wait())
            .await
            .expect("the subscribers end on shutdown");
    }
}

/// Each subscriber started gets a new generation, announced before it
/// runs; a policy change keeps it; removing the cluster ends it.
#[tokio::test]
async fn subscribers_are_announced_with_their_generation() {
    use meshhub_mcp::dial::DialSpec;

    let spec = |port: u16, policy: crate::clusters::exports::ExportPolicy| AgentSpec {
        cluster: "west".into(),
        dial: DialSpec {
            address: format!("http://127.0.0.1:{port}"),
            tls: None,
            connect_timeout: Duration::from_secs(1),
            reconnect: Default::default(),
        },
        exports: policy,
    };
    let (tx, mut rx) = mpsc::channel(16);
    let shutdown = CancellationToken::new();
    let deps = UpwardDeps {
        ledger: Ledger::new(),
        tasks: TaskTracker::new(),
        max_message_bytes: 4 << 20,
        connections: Arc::default(),
        unserved_retry: UNSERVED_RETRY,
    };
    let mut running = BTreeMap::new();
    let mut generations = 0;
    let mut step = async |wanted: Vec<AgentSpec>| {
        reconcile(
            &mut running,
            &mut generations,
            &wanted,
            &deps,
            &tx,
            &shutdown,
        )
        .await;
    };
    let narrow = crate::clusters::exports::ExportPolicy {
        max_services: 1,
        ..Default::default()
    };
    step(vec![spec(1, Default::default())]).await;
    step(vec![spec(1, narrow.clone())]).await;
    step(vec![spec(2, narrow)]).await;
    step(Vec::new()).await;
    let mut seen = Vec::new();
    while let Ok(u) = rx.try_recv() {
        let what = match u.what {
            What::Started { .. } => "started",
            What::Policy(_) => "policy",
            What::Gone => "gone",
            _ => "other",
        };
        seen.push((u.generation, what));
    }
    assert_eq!(
        seen,
        [(1, "started"), (1, "policy"), (2, "started"), (2, "gone")]
    );
    shutdown.cancel();
}
