//! `meshhubctl watch`: subscribes to a `ResourceSource` (the hub, or a sink
//! agent re-serving) as a Pilot-like sink, or with `--ads` to the ADS
//! service as istiod does ([`ads`]), and prints every change
//! ([`printer`]).

mod ads;
mod args;
mod printer;

use std::collections::HashMap;
use std::sync::Arc;

use meshhub_mcp::ledger::{Ledger, Role};
use meshhub_mcp::sink::client::{SourceTarget, connect_once};
use meshhub_mcp::sink::{SinkCollection, SinkConfig};
use meshhub_mcp::source::drive::End;
use meshhub_proto::kinds::KindTable;
use meshhub_proto::mcp::SinkNode;
use tokio_util::sync::CancellationToken;

pub use self::args::WatchArgs;
use self::printer::Printer;

/// Largest response accepted.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

pub async fn run(args: WatchArgs) -> Result<(), String> {
    if args.ads {
        return ads::watch(args).await;
    }
    let kinds = KindTable::builtin();
    let collections: Vec<String> = if args.collections.is_empty() {
        kinds.iter().map(|k| k.collection().to_owned()).collect()
    } else {
        args.collections.clone()
    };
    let endpoint = args.endpoint()?;
    let stop = CancellationToken::new();
    let target = SourceTarget {
        name: args.server.clone(),
        endpoint,
        config: Arc::new(SinkConfig {
            node: SinkNode {
                id: args.cluster.clone().unwrap_or_default(),
                annotations: HashMap::new(),
            },
            collections: collections
                .iter()
                .map(|c| SinkCollection {
                    name: c.clone(),
                    incremental: args.incremental,
                })
                .collect(),
        }),
        reconnect: Default::default(),
        max_message_bytes: MAX_MESSAGE_BYTES,
    };
    let printer = Printer::new(
        kinds,
        args.output,
        collections.iter().cloned(),
        args.once.then(|| stop.clone()),
    );
    let ledger = Ledger::new();
    let record = ledger.register(Role::Sink, args.server.clone(), "");
    let ctrl_c = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        ctrl_c.cancel();
    });
    let mut backoff = meshhub_mcp::reconnect::Backoff::new(Default::default());
    let mut ever_connected = false;
    loop {
        match connect_once(&target, &printer, &record, &stop).await {
            Ok((End::Shutdown, _)) => return Ok(()),
            Ok((end, healthy)) => {
                ever_connected = true;
                if healthy {
                    backoff.reset();
                }
                eprintln!(
                    "meshhubctl: stream ended ({}); reconnecting",
                    end.error().unwrap_or_else(|| "closed by server".into())
                );
                if args.once {
                    return Err(format!(
                        "stream ended before every collection arrived: {}",
                        end.error().unwrap_or_default()
                    ));
                }
            }
            Err(e) if !ever_connected => {
                return Err(format!("cannot connect to {}: {e}", args.server));
            }
            Err(e) => eprintln!("meshhubctl: {e}; reconnecting"),
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}
