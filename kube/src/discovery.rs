//! API discovery: which of meshhub's kinds an API server serves, and in
//! which version. A kind is served in the first of its versions (the kind
//! table orders them GA > beta > alpha) that the API server lists for its
//! group and whose resource list holds the kind under its plural.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::{Api, ApiResource, DynamicObject};
use meshhub_proto::kinds::Kind;

/// A kind as the API server serves it.
#[derive(Clone, Debug)]
pub struct Served {
    /// The kind of the kind table.
    pub kind: Kind,
    /// Its API resource in the version served.
    pub resource: ApiResource,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// The API resource of `kind` in `version` of `group` (empty: the core
/// group) under `plural`.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// The dynamic API of `resource` in `namespace`, or across every
/// namespace (and for cluster-scoped kinds) with `None`.
pub fn api(
    client: kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, resource),
        None => Api::all_with(client, resource),
    }
}

/// Which of `kinds` the API server serves, each in the first of its
/// versions that is served. A group-version gone between the group list
/// and its resource list (a CRD being removed) counts as not served.
pub async fn discover(client: &kube::Client, kinds: &[Kind]) -> Result<Vec<Served>, kube::Error> {
    let groups = client.list_api_groups().await?;
    let served_versions: HashMap<&str, BTreeSet<&str>> = groups
        .groups
        .iter()
        .map(|g| {
            (
                g.name.as_str(),
                g.versions.iter().map(|v| v.version.as_str()).collect(),
            )
        })
        .collect();
    // Each group-version's resource list, asked for once.
    let mut lists: HashMap<String, Option<APIResourceList>> = HashMap::new();
    let mut out = Vec::new();
    for kind in kinds {
        for version in kind.versions() {
            let core = kind.group().is_empty();
            if !core
                && !served_versions
                    .get(kind.group())
                    .is_some_and(|v| v.contains(version.as_str()))
            {
                continue;
            }
            let r = resource(kind.group(), version, kind.kind(), kind.plural());
            if !lists.contains_key(&r.api_version) {
                let list = if core {
                    client.list_core_api_resources(version).await
                } else {
                    client.list_api_group_resources(&r.api_version).await
                };
                let list = match list {
                    Ok(l) => Some(l),
                    // Served a moment ago, gone now (a CRD being removed).
                    Err(kube::Error::Api(s)) if s.code == 404 => None,
                    Err(e) => return Err(e),
                };
                lists.insert(r.api_version.clone(), list);
            }
            let Some(Some(list)) = lists.get(&r.api_version) else {
                continue;
            };
            let Some(found) = list
                .resources
                .iter()
                .find(|found| found.name == kind.plural() && found.kind == kind.kind())
            else {
                continue;
            };
            out.push(Served {
                kind: kind.clone(),
                namespaced: found.namespaced,
                resource: r,
            });
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
