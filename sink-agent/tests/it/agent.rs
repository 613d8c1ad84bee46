//! The agent over real gRPC on loopback: a hub pushes (or the agent pulls)
//! Bookinfo; the agent validates, ACKs, persists and re-serves it; bad
//! resources are NACKed by name with the last good state kept; a restarted
//! agent serves its persisted state with no hub; a corrupt file is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use meshhub_e2e::inproc::{agent_config, push};
use meshhub_e2e::upstream::{Upstream, encoded};
use meshhub_mcp::ledger::{Role, SyncState};
use meshhub_mcp::snapshot::EncodedResource;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use meshhub_proto::object::Object;
use meshhub_proto::transcode::parse_yaml;
use meshhub_sink_agent::app::Agent;
use meshhub_sink_agent::config::Mode;
use meshhub_sink_agent::store::{self, Origin};
use meshhub_testkit::objects::{DR, GW, VS, any, mcp_resource};
use meshhub_testkit::{DEADLINE, eventually, fixtures, http};
use prost::Message as _;
use tonic::transport::Endpoint;

use crate::support::{Consumer, PushHub, encode, names_of, peer, snapshot};

// ---------------------------------------------------------------- fixtures

/// Bookinfo objects of one fixture file, placed in namespace `bookinfo`.
fn bookinfo(file: &str) -> Vec<Object> {
    let path = fixtures::istio().join("bookinfo").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    parse_yaml(&text)
        .into_iter()
        .map(|o| {
            let mut o = o.unwrap();
            o.metadata.namespace = Some("bookinfo".into());
            o
        })
        .collect()
}

/// Virtual services, destination rules and the gateway of Bookinfo.
fn bookinfo_state() -> BTreeMap<String, Vec<EncodedResource>> {
    let mut objects = bookinfo("virtual-service-all-v1.yaml");
    objects.extend(bookinfo("destination-rule-all.yaml"));
    objects.extend(bookinfo("bookinfo-gateway.yaml"));
    encode(&objects)
}

/// A virtual service whose body is something else.
fn bad_resource(name: &str, garbage: bool) -> EncodedResource {
    let body = if garbage {
        any(
            "type.googleapis.com/istio.networking.v1alpha3.VirtualService",
            vec![0xff, 0xff, 0xff, 0xff, 0x0f],
        )
    } else {
        any(
            "type.googleapis.com/istio.networking.v1alpha3.DestinationRule",
            vec![],
        )
    };
    encoded(&mcp_resource(name, "bad-1", Some(body)))
}

// ---------------------------------------------------------------- harness

// ---------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_is_acked_persisted_and_reserved() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    let want_dr = names_of(&state[DR]);
    assert!(want_vs.contains("bookinfo/reviews"), "{want_vs:?}");
    let snap = snapshot(state);
    let vs_version = snap.collection(VS).version().to_owned();
    let hub = PushHub::dial(agent.sink_addr().unwrap(), snap);

    eventually("the VirtualService push is ACKed", async || {
        hub.acked(VS, &vs_version)
    })
    .await;
    // The agent announced its cluster name as the SinkNode id.
    let sink = peer(agent.ledger(), Role::Sink).unwrap();
    assert_eq!(sink.node_id, "east");

    // Persisted: the file holds exactly what was ACKed, with the version.
    let file = data
        .path()
        .join("v1/collections/istio%2Fnetworking%2Fv1alpha3%2Fvirtualservices.pb");
    assert!(file.is_file(), "{} missing", file.display());
    let (collection, version, resources) =
        store::load_one(&file, VS, &KindTable::builtin()).unwrap();
    assert_eq!(collection, VS);
    assert_eq!(version, vs_version);
    assert_eq!(names_of(&resources), want_vs);

    // Re-served to local consumers.
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS, DR]);
    consumer.wait_for(VS, &want_vs).await;
    consumer.wait_for(DR, &want_dr).await;
    // The bytes served are the hub's bytes, decoded intact.
    let reviews = &consumer.updater.collection(VS)["bookinfo/reviews"];
    let kinds = KindTable::builtin();
    let obj =
        meshhub_proto::transcode::resource_to_object(kinds.by_collection(VS).unwrap(), reviews)
            .unwrap();
    assert_eq!(obj.metadata.namespace.as_deref(), Some("bookinfo"));

    // Status on the admin port.
    let (code, _) = http::get(agent.admin_addr(), "/readyz").await;
    assert_eq!(code, 200);
    let (code, body) = http::get(agent.admin_addr(), "/status").await;
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["cluster"], "east");
    assert_eq!(status["store"]["collections"][VS]["version"], vs_version);
    assert_eq!(status["store"]["collections"][VS]["origin"], "hub");
    assert_eq!(
        status["store"]["collections"][VS]["resources"],
        want_vs.len()
    );
    let (code, metrics) = http::get(agent.admin_addr(), "/metrics").await;
    assert_eq!(code, 200);
    assert!(metrics.contains("meshhub_agent_changes_total"), "{metrics}");

    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await, "every task ended within the grace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_resources_are_nacked_by_name_and_the_last_good_state_kept() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let good = bookinfo_state();
    let want_vs = names_of(&good[VS]);
    let snap = snapshot(good.clone());
    let good_version = snap.collection(VS).version().to_owned();
    let hub = PushHub::dial(agent.sink_addr().unwrap(), snap);
    eventually("the good push is ACKed", async || {
        hub.acked(VS, &good_version)
    })
    .await;
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    consumer.wait_for(VS, &want_vs).await;
    let file = agent.cache().snapshot("east").unwrap();
    let served_before = file.collection(VS).version().to_owned();

    for (name, garbage, expect) in [
        ("bookinfo/wrong-type", false, "body type"),
        ("bookinfo/garbage", true, "undecodable body"),
    ] {
        let mut bad = good.clone();
        bad.get_mut(VS).unwrap().push(bad_resource(name, garbage));
        let snap = snapshot(bad);
        let bad_version = snap.collection(VS).version().to_owned();
        hub.publish(snap);
        eventually(&format!("the NACK of {name}"), async || {
            hub.collection(VS).is_some_and(|c| {
                c.state == SyncState::Nacked
                    && c.nacked.as_ref().is_some_and(|n| n.version == bad_version)
            })
        })
        .await;
        let nack = hub.collection(VS).unwrap().nacked.unwrap();
        assert!(
            nack.message.contains(&format!("VirtualService {name}"))
                && nack.message.contains(expect),
            "NACK names the resource and the cause: {}",
            nack.message
        );
        assert_eq!(nack.code, 3, "INVALID_ARGUMENT");

        // The last good state is kept: served, persisted, in the status.
        let served = agent.cache().snapshot("east").unwrap();
        assert_eq!(served.collection(VS).version(), served_before);
        assert_eq!(consumer.names(VS), want_vs);
        let path = data
            .path()
            .join("v1/collections")
            .join(store::file_name(VS));
        let (_, version, resources) = store::load_one(&path, VS, &KindTable::builtin()).unwrap();
        assert_eq!(version, good_version);
        assert_eq!(names_of(&resources), want_vs);
        let status = agent.status().borrow().clone();
        let info = &status.collections[VS];
        assert_eq!(info.version, good_version);
        assert_eq!(info.resources, want_vs.len());
        let refused = info.refused.as_ref().unwrap();
        assert_eq!(refused.version, bad_version);
        assert!(refused.message.contains(name));
    }

    // A corrected version is delivered and ACKed.
    let mut fixed = good.clone();
    fixed
        .get_mut(VS)
        .unwrap()
        .retain(|r| r.name.as_ref() != "bookinfo/ratings");
    let want_fixed = names_of(&fixed[VS]);
    let snap = snapshot(fixed);
    let fixed_version = snap.collection(VS).version().to_owned();
    hub.publish(snap);
    eventually("the corrected version is ACKed", async || {
        hub.acked(VS, &fixed_version)
    })
    .await;
    consumer.wait_for(VS, &want_fixed).await;
    assert!(agent.status().borrow().collections[VS].origin == Origin::Hub);

    drop(consumer);
    drop(hub);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_serves_its_persisted_state_without_a_hub() {
    let data = tempfile::tempdir().unwrap();
    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    let want_gw = names_of(&state[GW]);
    {
        let agent = Agent::start(agent_config("east", data.path(), push()))
            .await
            .unwrap();
        let snap = snapshot(state);
        let (vs, gw) = (
            snap.collection(VS).version().to_owned(),
            snap.collection(GW).version().to_owned(),
        );
        let hub = PushHub::dial(agent.sink_addr().unwrap(), snap);
        eventually("both collections ACKed", async || {
            hub.acked(VS, &vs) && hub.acked(GW, &gw)
        })
        .await;
        drop(hub);
        assert!(agent.shutdown().await);
    }

    // No hub at all this time (pull mode at an address nobody serves).
    let started = Instant::now();
    let url = format!("http://{}", meshhub_testkit::ports::free_addr());
    let agent = Agent::start(agent_config(
        "east",
        data.path(),
        Mode::Pull {
            hub_url: url,
            tls: None,
        },
    ))
    .await
    .unwrap();
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS, GW]);
    consumer.wait_for(VS, &want_vs).await;
    consumer.wait_for(GW, &want_gw).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(1),
        "persisted state served after {elapsed:?}"
    );
    let status = agent.status().borrow().clone();
    assert!(status.loaded && status.load_errors.is_empty());
    assert_eq!(status.collections[VS].origin, Origin::Disk);

    drop(consumer);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_file_is_skipped_and_the_others_load() {
    let data = tempfile::tempdir().unwrap();
    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    {
        let agent = Agent::start(agent_config("east", data.path(), push()))
            .await
            .unwrap();
        let snap = snapshot(state);
        let (vs, dr) = (
            snap.collection(VS).version().to_owned(),
            snap.collection(DR).version().to_owned(),
        );
        let hub = PushHub::dial(agent.sink_addr().unwrap(), snap);
        eventually("both collections ACKed", async || {
            hub.acked(VS, &vs) && hub.acked(DR, &dr)
        })
        .await;
        drop(hub);
        assert!(agent.shutdown().await);
    }
    let dir = data.path().join("v1/collections");
    let dr_file = dir.join(store::file_name(DR));
    std::fs::write(&dr_file, b"\xff\xff\xff not protobuf").unwrap();
    // A crash in the middle of a write leaves a temp file behind.
    let leftover = dir.join(format!("{}.tmp", store::file_name(GW)));
    std::fs::write(&leftover, b"half").unwrap();

    let agent = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let status = agent.status().borrow().clone();
    assert_eq!(status.load_errors.len(), 1, "{:?}", status.load_errors);
    assert!(
        status.load_errors[0].contains(&dr_file.display().to_string()),
        "the error names the file: {}",
        status.load_errors[0]
    );
    assert!(!status.collections.contains_key(DR));
    assert!(!leftover.exists(), "unfinished writes are cleaned up");
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS, DR]);
    consumer.wait_for(VS, &want_vs).await;
    assert!(consumer.names(DR).is_empty());
    let (code, body) = http::get(agent.admin_addr(), "/status").await;
    assert_eq!(code, 200);
    assert!(body.contains("torn"), "{body}");

    drop(consumer);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_mode_subscribes_as_the_cluster_and_applies_deltas() {
    let data = tempfile::tempdir().unwrap();
    let state = bookinfo_state();
    let hub = Upstream::start("hub", snapshot(state.clone())).await;
    let mut cfg = agent_config(
        "east",
        data.path(),
        Mode::Pull {
            hub_url: format!("http://{}", hub.addr),
            tls: None,
        },
    );
    cfg.incremental = true;
    let agent = Agent::start(cfg).await.unwrap();
    let consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    consumer.wait_for(VS, &names_of(&state[VS])).await;
    // The hub saw the cluster name as the SinkNode id.
    eventually("the hub sees node east", async || {
        peer(&hub.ledger, Role::Source).is_some_and(|p| p.node_id == "east")
    })
    .await;

    // One removal and one addition: a delta on the wire, the full result
    // served and persisted.
    let mut next = state.clone();
    let vs = next.get_mut(VS).unwrap();
    vs.retain(|r| r.name.as_ref() != "bookinfo/details");
    vs.extend(
        encode(&bookinfo("virtual-service-ratings-db.yaml"))
            .remove(VS)
            .unwrap(),
    );
    let want = names_of(&next[VS]);
    let snap = snapshot(next);
    let version = snap.collection(VS).version().to_owned();
    hub.writer.set("hub", snap);
    consumer.wait_for(VS, &want).await;
    let (_, persisted_version, resources) = store::load_one(
        &data
            .path()
            .join("v1/collections")
            .join(store::file_name(VS)),
        VS,
        &KindTable::builtin(),
    )
    .unwrap();
    assert_eq!(persisted_version, version);
    assert_eq!(names_of(&resources), want);

    drop(consumer);
    hub.shutdown.cancel();
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_the_same_data_dir_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let err = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap_err();
    assert!(
        store::error_chain(&err).contains("in use"),
        "{}",
        store::error_chain(&err)
    );
    assert!(agent.shutdown().await);
    // Released on shutdown.
    let again = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    assert!(again.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_replacing_one_on_its_data_dir_waits_for_it_to_stop() {
    // A pod deleted by `kubectl`: its replacement starts on the same volume
    // while it still stops.
    let data = tempfile::tempdir().unwrap();
    let old = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let new = tokio::spawn({
        let config = meshhub_sink_agent::config::Config {
            data_dir_wait: Duration::from_secs(30),
            ..agent_config("east", data.path(), push())
        };
        async move { Agent::start(config).await }
    });
    // Refused at once, it would be done by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!new.is_finished(), "the new agent waits for the lock");
    assert!(old.shutdown().await);
    let new = tokio::time::timeout(DEADLINE, new)
        .await
        .expect("started within the deadline")
        .unwrap()
        .expect("started once the old agent let go");
    assert!(new.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_open_streams_within_the_grace() {
    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let hub = PushHub::dial(agent.sink_addr().unwrap(), snapshot(bookinfo_state()));
    let mut consumer = Consumer::connect(agent.grpc_addr(), &[VS]);
    eventually("both streams open", async || {
        peer(agent.ledger(), Role::Sink).is_some() && peer(agent.ledger(), Role::Source).is_some()
    })
    .await;
    let started = Instant::now();
    assert!(agent.shutdown().await, "every stream ended");
    assert!(started.elapsed() < Duration::from_secs(5));
    // The consumer's stream was ended by the agent.
    let ended = tokio::time::timeout(DEADLINE, &mut consumer.task).await;
    assert!(ended.is_ok(), "consumer stream still open");
    drop(hub);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_ads_and_grpc_health_serve_what_was_received() {
    use meshhub_proto::ads::{DiscoveryRequest, Node, client::AggregatedDiscoveryServiceClient};
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let data = tempfile::tempdir().unwrap();
    let agent = Agent::start(agent_config("east", data.path(), push()))
        .await
        .unwrap();
    let channel = Endpoint::from_shared(format!("http://{}", agent.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    let snap = snapshot(state);
    let version = snap.collection(VS).version().to_owned();
    let hub = PushHub::dial(agent.sink_addr().unwrap(), snap);
    eventually("the push is ACKed", async || hub.acked(VS, &version)).await;

    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(DiscoveryRequest {
        node: Some(Node {
            id: "sidecar~10.0.0.1~istiod-0.istio-system~istio-system.svc.cluster.local".into(),
            ..Default::default()
        }),
        type_url: "networking.istio.io/v1/VirtualService".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut stream = AggregatedDiscoveryServiceClient::new(channel)
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let response = tokio::time::timeout(DEADLINE, stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.type_url, "networking.istio.io/v1/VirtualService");
    let names: BTreeSet<String> = response
        .resources
        .iter()
        .map(|a| {
            Resource::decode(a.value.as_slice())
                .unwrap()
                .metadata
                .unwrap()
                .name
        })
        .collect();
    assert_eq!(names, want_vs);

    // Delta ADS is served beside it: the same resources, each named with its
    // version.
    let (delta_tx, delta_rx) = tokio::sync::mpsc::channel(4);
    delta_tx
        .send(meshhub_proto::ads::DeltaDiscoveryRequest {
            node: Some(Node {
                id: "sidecar~10.0.0.2~client.default~default.svc.cluster.local".into(),
                ..Default::default()
            }),
            type_url: "networking.istio.io/v1/VirtualService".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut delta = AggregatedDiscoveryServiceClient::new(
        Endpoint::from_shared(format!("http://{}", agent.grpc_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    )
    .delta_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(delta_rx))
    .await
    .unwrap()
    .into_inner();
    let response = tokio::time::timeout(DEADLINE, delta.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.type_url, "networking.istio.io/v1/VirtualService");
    let mut delta_names = BTreeSet::new();
    for r in &response.resources {
        let mcp = Resource::decode(r.resource.as_ref().unwrap().value.as_slice()).unwrap();
        let meta = mcp.metadata.unwrap();
        assert_eq!((&r.name, &r.version), (&meta.name, &meta.version));
        delta_names.insert(r.name.clone());
    }
    assert_eq!(delta_names, want_vs);

    drop(delta);
    drop(delta_tx);
    drop(stream);
    drop(tx);
    drop(hub);
    assert!(agent.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_hub_stream_is_told_what_the_restarted_agent_holds() {
    use meshhub_proto::mcp::resource_sink_client::ResourceSinkClient;

    let data = tempfile::tempdir().unwrap();
    let state = bookinfo_state();
    let want_vs = names_of(&state[VS]);
    let snap = snapshot(state);
    let held_vs: BTreeMap<String, String> = snap
        .collection(VS)
        .keys()
        .iter()
        .map(|k| (k.name.to_string(), k.version.to_string()))
        .collect();
    {
        // The binary's default: incremental.
        let mut config = agent_config("east", data.path(), push());
        config.incremental =
            meshhub_sink_agent::config::Config::from_args(meshhub_sink_agent::config::Args {
                cluster: Some("east".into()),
                data_dir: Some(data.path().to_owned()),
                ..Default::default()
            })
            .unwrap()
            .incremental;
        assert!(config.incremental, "agents ask for deltas by default");
        let agent = Agent::start(config).await.unwrap();
        let vs = snap.collection(VS).version().to_owned();
        let hub = PushHub::dial(agent.sink_addr().unwrap(), snap);
        eventually("the push ACKed", async || hub.acked(VS, &vs)).await;
        drop(hub);
        assert!(agent.shutdown().await);
    }

    // Restarted on its data (as after a crash, or with a new hub replica
    // dialing): the requests that open the next stream declare every name
    // and version held, so the hub sends only what changed since.
    let mut config = agent_config("east", data.path(), push());
    config.incremental = true;
    let agent = Agent::start(config).await.unwrap();
    let channel = Endpoint::from_shared(format!("http://{}", agent.sink_addr().unwrap()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (_tx, rx) = tokio::sync::mpsc::channel::<meshhub_proto::mcp::Resources>(1);
    let mut requests = ResourceSinkClient::new(channel)
        .establish_resource_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let opening = tokio::time::timeout(DEADLINE, async {
        loop {
            let r = requests.message().await.unwrap().expect("a request");
            if r.collection == VS {
                return r;
            }
        }
    })
    .await
    .expect("the agent asks for virtual services");
    assert!(opening.incremental && opening.response_nonce.is_empty());
    let declared: BTreeMap<String, String> =
        opening.initial_resource_versions.into_iter().collect();
    assert_eq!(declared, held_vs);
    assert_eq!(declared.keys().cloned().collect::<BTreeSet<_>>(), want_vs);
    drop(requests);
    assert!(agent.shutdown().await);
}
