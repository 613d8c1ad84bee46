//! State the hub replicas share through one ConfigMap each (the pins, the
//! rollout): writing some of its keys, and following its data.

use std::collections::BTreeMap;

use futures::stream::BoxStream;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::watch_backoff::WatchBackoff;

/// One ConfigMap the replicas share, in the leader election's namespace.
#[derive(Clone)]
pub struct Shared {
    api: Api<ConfigMap>,
    namespace: String,
    name: &'static str,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// ConfigMap `name` in `namespace`, over `client` (the app's client
    /// of the leader election's connection).
    pub fn new(client: kube::Client, namespace: &str, name: &'static str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name,
        }
    }

    /// `namespace/name`.
    pub fn location(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// [`write_keys`] on it.
    pub async fn write(&self, data: BTreeMap<String, Option<String>>) -> Result<(), kube::Error> {
        write_keys(&self.api, self.name, data).await
    }

    /// Sets `key` to `value` after `fence` accepted the value found there
    /// (`None`: no such key, or no ConfigMap), with the resourceVersion
    /// read as the write's precondition: when another writer changed the
    /// ConfigMap in between, it is read and fenced again (a few times).
    pub async fn write_fenced<E: From<kube::Error>>(
        &self,
        key: &str,
        value: &str,
        fence: impl Fn(Option<&str>) -> Result<(), E>,
    ) -> Result<(), E> {
        const ATTEMPTS: usize = 5;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.api.get_opt(self.name).await?;
            fence(
                current
                    .as_ref()
                    .and_then(|cm| cm.data.as_ref())
                    .and_then(|d| d.get(key))
                    .map(String::as_str),
            )?;
            let result = match current {
                Some(cm) => {
                    // The resourceVersion read in the patch is its
                    // precondition: the API server answers a conflict if
                    // the ConfigMap changed since (a patch, not a replace:
                    // the RBAC grants `patch`).
                    let patch = serde_json::json!({
                        "metadata": { "resourceVersion": cm.metadata.resource_version },
                        "data": { key: value },
                    });
                    self.api
                        .patch(self.name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(drop)
                }
                None => {
                    let cm = ConfigMap {
                        metadata: kube::api::ObjectMeta {
                            name: Some(self.name.to_owned()),
                            labels: Some(meshhub_kube::object::own_labels()),
                            ..Default::default()
                        },
                        data: Some(BTreeMap::from([(key.to_owned(), value.to_owned())])),
                        ..Default::default()
                    };
                    self.api.create(&PostParams::default(), &cm).await.map(drop)
                }
            };
            match result {
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < ATTEMPTS => {}
                other => return other.map_err(E::from),
            }
        }
    }

    /// [`watch_data`] of it.
    pub fn watch(&self) -> DataStream {
        watch_data(self.api.clone(), self.name)
    }

    /// The next data from `changes` (a failed watch is logged and goes
    /// on); `None` once `shutdown` fires or the watch ends.
    pub async fn next_data(
        &self,
        changes: &mut DataStream,
        shutdown: &CancellationToken,
    ) -> Option<BTreeMap<String, String>> {
        loop {
            let ev = tokio::select! {
                () = shutdown.cancelled() => return None,
                ev = changes.next() => ev?,
            };
            match ev {
                Ok(data) => return Some(data),
                Err(e) => {
                    warn!(error = %e, configmap = %self.location(), "watching a shared ConfigMap failed; retrying");
                }
            }
        }
    }
}

/// A ConfigMap's data as it changes ([`watch_data`]).
pub type DataStream = BoxStream<'static, Result<BTreeMap<String, String>, watcher::Error>>;

/// Sets the keys of `data` in ConfigMap `name` (a `None` value removes
/// its key), creating the ConfigMap (labelled as meshhub's) when it does
/// not exist yet. Keys not named keep their values.
pub async fn write_keys(
    api: &Api<ConfigMap>,
    name: &str,
    data: BTreeMap<String, Option<String>>,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({ "data": &data });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let values: BTreeMap<String, String> = data
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            if values.is_empty() {
                return Ok(());
            }
            let cm = ConfigMap {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some(meshhub_kube::object::own_labels()),
                    ..Default::default()
                },
                data: Some(values),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => Ok(()),
                // Created meanwhile by another replica: patch it.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// The data of ConfigMap `name`, whole, after the first listing and after
/// every change (empty while the ConfigMap does not exist). Errors are
/// the watch's; it goes on after them, backed off like every Kubernetes
/// watch of the hub.
pub fn watch_data(api: Api<ConfigMap>, name: &str) -> DataStream {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // The ConfigMap as listed so far (an initial list ends with InitDone).
    let mut listing: Option<BTreeMap<String, String>> = None;
    watcher::watcher(api, config)
        .backoff(WatchBackoff::new())
        .try_filter_map(move |ev| {
            let data = match ev {
                Event::Init => {
                    listing = Some(BTreeMap::new());
                    None
                }
                Event::InitApply(cm) => {
                    listing = Some(cm.data.unwrap_or_default());
                    None
                }
                Event::InitDone => Some(listing.take().unwrap_or_default()),
                Event::Apply(cm) => Some(cm.data.unwrap_or_default()),
                Event::Delete(_) => Some(BTreeMap::new()),
            };
            futures::future::ready(Ok(data))
        })
        .boxed()
}
