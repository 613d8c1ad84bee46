//! `meshhubctl watch --ads [--delta]`: subscribes to the ADS service of a
//! hub or sink agent the way istiod's config-source client does (reference
//! §3.3–§3.5): a proxy-style node id with `GENERATOR=api` on the first
//! request, one wildcard request per type URL (the 1.24+ GVK strings of the
//! kind table), every response ACKed (or NACKed if it cannot be printed).
//! With `--delta` it uses `DeltaAggregatedResources` instead, prints
//! additions, updates and removals, and on reconnect declares what it holds
//! in `initial_resource_versions` so only the difference comes back.

use std::collections::HashMap;
use std::time::Duration;

use meshhub_api::node::CLUSTER_ANNOTATION;
use meshhub_mcp::reconnect::Backoff;
use meshhub_mcp::sink::Change;
use meshhub_proto::ads::client::AggregatedDiscoveryServiceClient;
use meshhub_proto::ads::{
    DeltaDiscoveryRequest, DiscoveryRequest, ErrorDetail, Node, Struct, Value, ValueKind,
};
use meshhub_proto::error_chain;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::Resource;
use meshhub_proto::wire::MCP_RESOURCE_TYPE_URL;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use super::args::WatchArgs;
use super::printer::Printer;

/// The node id, shaped as istiod's (`<type>~<ip>~<pod>.<ns>~<ns>.svc.cluster.local`).
pub const NODE_ID: &str = "sidecar~127.0.0.1~meshhubctl.default~default.svc.cluster.local";

/// Largest response accepted.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// How long `--once` waits for the server to close after the last ACK.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// gRPC `INVALID_ARGUMENT`, the code of our NACKs.
const INVALID_ARGUMENT: i32 = 3;

/// How one stream ended.
enum Outcome {
    /// `--once` saw every type, or Ctrl-C.
    Done,
    /// The stream broke; whether any response had arrived.
    Broken { error: String, healthy: bool },
}

/// What every stream of this watch shares.
struct Watch {
    type_urls: Vec<String>,
    node: Node,
    printer: Printer,
    once: bool,
    stop: CancellationToken,
}

pub async fn watch(args: WatchArgs) -> Result<(), String> {
    let kinds = KindTable::builtin();
    let type_urls: Vec<String> = if args.collections.is_empty() {
        // What istiod would ask for: the Gateway API kinds are not
        // offered over ADS.
        kinds
            .iter()
            .filter(|k| k.offered_over_ads())
            .map(|k| k.current_type_url().to_owned())
            .collect()
    } else {
        args.collections
            .iter()
            .map(|c| match kinds.by_collection(c) {
                Some(kind) => kind.current_type_url().to_owned(),
                None => c.clone(),
            })
            .collect()
    };
    let endpoint = args.endpoint()?.endpoint().map_err(|e| e.to_string())?;
    let endpoint = meshhub_mcp::transport::tune(endpoint);
    let stop = CancellationToken::new();
    let ctrl_c = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });
    let w = Watch {
        node: node(args.cluster.as_deref()),
        printer: Printer::new(kinds, args.output, type_urls.iter().cloned(), None),
        type_urls,
        once: args.once,
        stop: stop.clone(),
    };
    let mut backoff = Backoff::new(Default::default());
    let mut ever_opened = false;
    loop {
        let opened = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            c = endpoint.connect() => c.map_err(|e| error_chain(&e)),
        };
        let outcome = match opened {
            Ok(channel) if args.delta => run_delta(&w, channel, &mut ever_opened).await,
            Ok(channel) => run_sotw(&w, channel, &mut ever_opened).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Outcome::Done) => return Ok(()),
            Err(e) if !ever_opened => {
                return Err(format!("cannot connect to {}: {e}", args.server));
            }
            Err(e) => eprintln!("meshhubctl: {e}; reconnecting"),
            Ok(Outcome::Broken { error, healthy }) => {
                if w.once {
                    return Err(format!("stream ended before every type arrived: {error}"));
                }
                if healthy {
                    backoff.reset();
                }
                eprintln!("meshhubctl: stream ended ({error}); reconnecting");
            }
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

/// The node, as istiod sends it: `GENERATOR=api`; and the cluster whose
/// view we want, if any.
fn node(cluster: Option<&str>) -> Node {
    let string = |s: &str| Value {
        kind: Some(ValueKind::StringValue(s.to_owned())),
    };
    let mut fields = HashMap::from([("GENERATOR".to_owned(), string("api"))]);
    if let Some(cluster) = cluster {
        fields.insert(CLUSTER_ANNOTATION.to_owned(), string(cluster));
    }
    Node {
        id: NODE_ID.to_owned(),
        metadata: Some(Struct { fields }),
        ..Default::default()
    }
}

fn status_text(s: &tonic::Status) -> String {
    format!("{}: {}", s.code(), s.message())
}

/// Decodes one `Any(istio.mcp.v1alpha1.Resource)`.
fn decode_resource(type_url: &str, value: &[u8]) -> Result<Resource, String> {
    if type_url != MCP_RESOURCE_TYPE_URL {
        return Err(format!(
            "resource of type {type_url:?}, expected {MCP_RESOURCE_TYPE_URL}"
        ));
    }
    Resource::decode(value).map_err(|e| format!("undecodable resource: {e}"))
}

fn nack(message: String) -> Option<ErrorDetail> {
    eprintln!("meshhubctl: NACK: {message}");
    Some(ErrorDetail {
        code: INVALID_ARGUMENT,
        message,
        details: vec![],
    })
}

/// Ends a stream cleanly: half-closes it and waits (briefly) for the
/// server to close its side, which it does after reading every request, so
/// the last ACKs are not lost when the process exits.
async fn finish<Req, T>(tx: mpsc::Sender<Req>, mut stream: tonic::Streaming<T>) {
    drop(tx);
    let drain = async { while let Ok(Some(_)) = stream.message().await {} };
    let _ = tokio::time::timeout(CLOSE_WAIT, drain).await;
}

/// Reads the next response, or why there is none.
async fn next<T>(w: &Watch, stream: &mut tonic::Streaming<T>, healthy: bool) -> Result<T, Outcome> {
    tokio::select! {
        () = w.stop.cancelled() => Err(Outcome::Done),
        m = stream.message() => match m {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(Outcome::Broken { error: "closed by server".into(), healthy }),
            Err(s) => Err(Outcome::Broken { error: status_text(&s), healthy }),
        },
    }
}

/// State of the world: every response is a type's full state.
async fn run_sotw(w: &Watch, channel: Channel, ever_opened: &mut bool) -> Result<Outcome, String> {
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel(w.type_urls.len() + 16);
    for (i, type_url) in w.type_urls.iter().enumerate() {
        let first = DiscoveryRequest {
            // The node goes on the first request of a stream.
            node: (i == 0).then(|| w.node.clone()),
            type_url: type_url.clone(),
            ..Default::default()
        };
        tx.try_send(first).map_err(|_| "internal: queue full")?;
    }
    let mut stream = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|s| status_text(&s))?
        .into_inner();
    *ever_opened = true;
    // The version each type last ACKed, for NACKs.
    let mut acked: HashMap<String, String> = HashMap::new();
    let mut healthy = false;
    loop {
        let response = match next(w, &mut stream, healthy).await {
            Ok(r) => r,
            Err(outcome) => return Ok(outcome),
        };
        healthy = true;
        let resources: Result<Vec<Resource>, String> = response
            .resources
            .iter()
            .map(|any| decode_resource(&any.type_url, &any.value))
            .collect();
        let change = resources.map(|resources| Change {
            collection: response.type_url.clone(),
            version: response.version_info.clone(),
            resources,
            removed: Vec::new(),
            incremental: false,
            nonce: response.nonce.clone(),
        });
        let shown = change.and_then(|c| w.printer.show(&c, false));
        let (version_info, error_detail) = match &shown {
            Ok(_) => {
                acked.insert(response.type_url.clone(), response.version_info.clone());
                (response.version_info.clone(), None)
            }
            Err(e) => (
                acked.get(&response.type_url).cloned().unwrap_or_default(),
                nack(e.clone()),
            ),
        };
        let reply = DiscoveryRequest {
            version_info,
            node: Some(w.node.clone()),
            type_url: response.type_url,
            response_nonce: response.nonce,
            error_detail,
            ..Default::default()
        };
        if tx.send(reply).await.is_err() {
            return Ok(Outcome::Broken {
                error: "request stream closed".into(),
                healthy,
            });
        }
        if w.once && shown == Ok(true) {
            finish(tx, stream).await;
            return Ok(Outcome::Done);
        }
    }
}

/// Incremental xDS: responses carry what changed and what was removed.
async fn run_delta(w: &Watch, channel: Channel, ever_opened: &mut bool) -> Result<Outcome, String> {
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let (tx, rx) = mpsc::channel(w.type_urls.len() + 16);
    for (i, type_url) in w.type_urls.iter().enumerate() {
        let first = DeltaDiscoveryRequest {
            node: (i == 0).then(|| w.node.clone()),
            type_url: type_url.clone(),
            // No names: a wildcard subscription. What we already hold (after
            // a reconnect) is not sent again.
            initial_resource_versions: w.printer.held_of(type_url),
            ..Default::default()
        };
        tx.try_send(first).map_err(|_| "internal: queue full")?;
    }
    let mut stream = client
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .map_err(|s| status_text(&s))?
        .into_inner();
    *ever_opened = true;
    let mut healthy = false;
    loop {
        let response = match next(w, &mut stream, healthy).await {
            Ok(r) => r,
            Err(outcome) => return Ok(outcome),
        };
        healthy = true;
        let resources: Result<Vec<Resource>, String> = response
            .resources
            .iter()
            .map(|r| {
                let any = r
                    .resource
                    .as_ref()
                    .ok_or_else(|| format!("resource {:?} without content", r.name))?;
                decode_resource(&any.type_url, &any.value)
            })
            .collect();
        let change = resources.map(|resources| Change {
            collection: response.type_url.clone(),
            version: response.system_version_info.clone(),
            resources,
            removed: response.removed_resources.clone(),
            incremental: true,
            nonce: response.nonce.clone(),
        });
        let shown = change.and_then(|c| w.printer.show(&c, true));
        let reply = DeltaDiscoveryRequest {
            type_url: response.type_url,
            response_nonce: response.nonce,
            error_detail: shown.as_ref().err().and_then(|e| nack(e.clone())),
            ..Default::default()
        };
        if tx.send(reply).await.is_err() {
            return Ok(Outcome::Broken {
                error: "request stream closed".into(),
                healthy,
            });
        }
        if w.once && shown == Ok(true) {
            finish(tx, stream).await;
            return Ok(Outcome::Done);
        }
    }
}
