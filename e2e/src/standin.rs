//! A stand-in sink agent for in-process tests: the engine's
//! `ResourceSink` on loopback for one cluster's virtual services, whose
//! updater refuses what a test names, as an agent refuses what it can't
//! validate or apply.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use meshhub_mcp::ledger::Ledger;
use meshhub_mcp::sink::server::SinkServer;
use meshhub_mcp::sink::{ApplyError, Change, SinkCollection, SinkConfig, Updater};
use meshhub_testkit::mcp::node;
use meshhub_testkit::objects::VS;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// An updater that refuses any change holding a virtual service whose name
/// contains "bad", holds what it accepted, and counts what it was offered
/// per version.
#[derive(Default)]
pub struct Picky {
    /// Times each version was offered.
    pub offered: Mutex<HashMap<String, usize>>,
    /// Collection → name → version accepted.
    pub held: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl Updater for Picky {
    async fn apply(&self, change: Change) -> Result<(), ApplyError> {
        *self
            .offered
            .lock()
            .unwrap()
            .entry(change.version.clone())
            .or_default() += 1;
        for r in &change.resources {
            let name = r.metadata.as_ref().map_or("", |m| m.name.as_str());
            if name.contains("bad") {
                return Err(ApplyError::Invalid(format!(
                    "VirtualService {name}: rejected by the test sink"
                )));
            }
        }
        let map = change
            .resources
            .iter()
            .filter_map(|r| r.metadata.as_ref())
            .map(|m| (m.name.clone(), m.version.clone()))
            .collect();
        self.held
            .lock()
            .unwrap()
            .insert(change.collection.clone(), map);
        Ok(())
    }

    fn held(&self, collection: &str) -> HashMap<String, String> {
        self.held
            .lock()
            .unwrap()
            .get(collection)
            .cloned()
            .unwrap_or_default()
    }
}

impl Picky {
    /// The names of the virtual services it holds, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.held(VS).into_keys().collect();
        n.sort();
        n
    }
}

/// A `ResourceSink` for one cluster's virtual services on loopback,
/// applying with `updater`: the agent a hub dials.
pub struct StandIn {
    /// Where the hub dials.
    pub addr: SocketAddr,
    /// Its streams: who pushed (`replica`), from when to when.
    pub ledger: Ledger,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl StandIn {
    /// Starts serving as cluster east's agent.
    pub async fn start(updater: Arc<Picky>) -> Self {
        Self::start_for("east", updater).await
    }

    /// Starts serving as `cluster`'s agent.
    pub async fn start_for(cluster: &str, updater: Arc<Picky>) -> Self {
        let shutdown = CancellationToken::new();
        let ledger = Ledger::new();
        let sink = SinkServer::new(
            updater,
            Arc::new(SinkConfig {
                node: node(cluster),
                collections: vec![SinkCollection {
                    name: VS.into(),
                    incremental: false,
                }],
            }),
            ledger.clone(),
            shutdown.clone(),
            TaskTracker::new(),
        )
        // As the agent serves its hub.
        .one_source_at_a_time();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(sink.into_service(16 * 1024 * 1024))
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    shutdown.clone().cancelled_owned(),
                ),
        );
        Self {
            addr,
            ledger,
            shutdown,
            server,
        }
    }

    /// Stops serving; the server ends cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.server.await.unwrap().unwrap();
    }
}

/// A hub (in-process, its file source in a temporary tree) dialing a
/// stand-in agent per cluster, for the rollout's tests.
pub struct Mesh {
    /// The hub.
    pub hub: meshhub::app::Hub,
    /// Its configuration file.
    pub config: std::path::PathBuf,
    /// The file source's directory.
    pub objects: std::path::PathBuf,
    sinks: Vec<(String, Arc<Picky>, StandIn)>,
    _dir: tempfile::TempDir,
}

impl Mesh {
    /// Stand-in agents for `clusters`, a hub dialing them with `extra`
    /// top-level configuration lines, its source holding
    /// `bookinfo/one`; returns once every cluster holds it.
    pub async fn start(clusters: &[&str], extra: &str) -> Self {
        let mut sinks = Vec::new();
        let mut entries = String::new();
        for name in clusters {
            let picky = Arc::new(Picky::default());
            let sink = StandIn::start_for(name, picky.clone()).await;
            entries.push_str(&crate::yaml::cluster(
                name,
                "",
                format!("http://{}", sink.addr),
                "",
            ));
            sinks.push(((*name).to_owned(), picky, sink));
        }
        let (dir, config) = crate::inproc::tree();
        let objects = dir.path().join("objects");
        std::fs::write(
            objects.join("one.yaml"),
            meshhub_testkit::objects::vs("one", "one"),
        )
        .unwrap();
        crate::inproc::write_hub_config(&config, &entries, extra);
        let hub = Self::start_hub(&config).await;
        let mesh = Self {
            hub,
            config,
            objects,
            sinks,
            _dir: dir,
        };
        meshhub_testkit::eventually("every cluster holds the first version", || async {
            mesh.sinks
                .iter()
                .all(|(_, p, _)| p.names() == ["bookinfo/one"])
        })
        .await;
        mesh
    }

    /// A hub of `config` with a shutdown grace long enough that its
    /// shutdown always ends every task (so a restart finds its history
    /// database free, as a new process would).
    async fn start_hub(config: &std::path::Path) -> meshhub::app::Hub {
        let path = config.to_str().expect("a UTF-8 path");
        let mut config = meshhub::config::Config::from_args(crate::inproc::hub_args(
            crate::inproc::ANY_PORT,
            &["--config", path],
        ))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
        config.shutdown_grace = meshhub_testkit::DEADLINE;
        crate::inproc::ready_hub(config).await
    }

    /// Stops the hub (every task ended) and starts it again on the same
    /// configuration, history and state.
    pub async fn restart_hub(self) -> Self {
        let Self {
            hub,
            config,
            objects,
            sinks,
            _dir,
        } = self;
        assert!(
            hub.shutdown().await,
            "the hub stopped every task within its grace"
        );
        let hub = Self::start_hub(&config).await;
        Self {
            hub,
            config,
            objects,
            sinks,
            _dir,
        }
    }

    /// Rewrites the hub's configuration to dial `clusters` (this mesh's
    /// stand-ins by name, or `extra_sinks`: name and address) with `extra`
    /// top-level lines, and reloads it; returns once the reload applied.
    pub async fn reconfigure(
        &self,
        clusters: &[&str],
        extra_sinks: &[(&str, SocketAddr)],
        extra: &str,
    ) {
        let mut entries = String::new();
        for name in clusters {
            let addr = match self.sinks.iter().find(|(n, _, _)| n == name) {
                Some((_, _, sink)) => sink.addr,
                None => {
                    extra_sinks
                        .iter()
                        .find(|(n, _)| n == name)
                        .unwrap_or_else(|| panic!("no stand-in for {name}"))
                        .1
                }
            };
            entries.push_str(&crate::yaml::cluster(
                name,
                "",
                format!("http://{addr}"),
                "",
            ));
        }
        crate::inproc::write_hub_config(&self.config, &entries, extra);
        let mut status = self.hub.reload_status();
        let before = status.borrow_and_update().reloads;
        self.hub.reload().await;
        tokio::time::timeout(
            meshhub_testkit::DEADLINE,
            status.wait_for(|s| s.reloads > before),
        )
        .await
        .expect("the reload applies")
        .expect("the reloader runs");
    }

    /// `cluster`'s stand-in's updater.
    pub fn picky(&self, cluster: &str) -> &Picky {
        &self
            .sinks
            .iter()
            .find(|(n, _, _)| n == cluster)
            .expect("a cluster of the mesh")
            .1
    }

    /// Whether `cluster` holds the virtual service `name` (`ns/name`).
    pub fn holds(&self, cluster: &str, name: &str) -> bool {
        self.picky(cluster).names().iter().any(|n| n == name)
    }

    /// How many versions were offered to `cluster` so far.
    pub fn offered(&self, cluster: &str) -> usize {
        self.picky(cluster).offered.lock().unwrap().len()
    }

    /// `GET /rollout`.
    pub async fn rollout(&self) -> serde_json::Value {
        let (code, body) = meshhub_testkit::http::get(self.hub.admin_addr(), "/rollout").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    /// The current rollout's phase (empty: none).
    pub async fn phase(&self) -> String {
        self.rollout().await["rollout"]["phase"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// `POST path` with an empty body on the admin port, as user `ops`:
    /// (status, body).
    pub async fn post(&self, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = self.hub.admin_addr();
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nx-meshhub-user: ops\r\nConnection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_owned();
        (code, body)
    }

    /// Stops the hub and the stand-ins.
    pub async fn stop(self) {
        self.hub.shutdown().await;
        for (_, _, sink) in self.sinks {
            sink.stop().await;
        }
    }
}
