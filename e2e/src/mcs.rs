//! The Kubernetes Multi-Cluster Services API (KEP-1645) for tests: the
//! `ServiceExport` and `ServiceImport` CRDs of `multicluster.x-k8s.io`
//! (`v1alpha1`), written here from the KEP's API (a ServiceExport has no
//! spec: its name and namespace name the Service; a ServiceImport carries
//! the merged ports, type and IPs), and helpers to export a Service.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;

use crate::kube::{ControlPlanes, apply_yaml, delete};

/// The two CRDs.
pub const MCS_CRDS: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: serviceexports.multicluster.x-k8s.io
spec:
  group: multicluster.x-k8s.io
  scope: Namespaced
  names: {kind: ServiceExport, listKind: ServiceExportList, plural: serviceexports, singular: serviceexport, shortNames: [svcex]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          status:
            type: object
            properties:
              conditions:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [type]
                items:
                  type: object
                  required: [type, status]
                  properties:
                    type: {type: string}
                    status: {type: string, enum: ["True", "False", "Unknown"]}
                    reason: {type: string}
                    message: {type: string}
                    lastTransitionTime: {type: string, format: date-time}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: serviceimports.multicluster.x-k8s.io
spec:
  group: multicluster.x-k8s.io
  scope: Namespaced
  names: {kind: ServiceImport, listKind: ServiceImportList, plural: serviceimports, singular: serviceimport, shortNames: [svcim]}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [ports, type]
            properties:
              type: {type: string, enum: [ClusterSetIP, Headless]}
              ips: {type: array, maxItems: 1, items: {type: string}}
              sessionAffinity: {type: string}
              ports:
                type: array
                x-kubernetes-list-type: atomic
                items:
                  type: object
                  required: [port]
                  properties:
                    name: {type: string}
                    port: {type: integer, format: int32}
                    protocol: {type: string}
                    appProtocol: {type: string}
          status:
            type: object
            properties:
              clusters:
                type: array
                items: {type: object, required: [cluster], properties: {cluster: {type: string}}}
"#;

/// Installs the MCS CRDs in cluster `name` and waits until they are
/// established.
pub async fn install_mcs_crds(planes: &ControlPlanes, name: &str) {
    let client = planes.client(name).await;
    apply_yaml(&client, MCS_CRDS).await;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for crd in [
        "serviceexports.multicluster.x-k8s.io",
        "serviceimports.multicluster.x-k8s.io",
    ] {
        let established = kube::runtime::wait::await_condition(
            api.clone(),
            crd,
            kube::runtime::conditions::is_crd_established(),
        );
        tokio::time::timeout(meshhub_testkit::DEADLINE, established)
            .await
            .unwrap_or_else(|_| panic!("{name}: CRD {crd} not established"))
            .unwrap_or_else(|e| panic!("{name}: CRD {crd}: {e}"));
    }
}

/// A Service `ns/name` with one HTTP port 80 (selecting `app: <name>`).
pub fn service(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  selector: {{app: {name}}}\n  ports:\n  - {{name: http, port: 80, targetPort: 8080}}\n"
    )
}

/// The `ServiceExport` of Service `ns/name`.
pub fn service_export(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {{name: {name}, namespace: {ns}}}\n"
    )
}

/// Deletes the `ServiceExport` `ns/name`; whether it existed.
pub async fn unexport(client: &kube::Client, ns: &str, name: &str) -> bool {
    delete(
        client,
        "multicluster.x-k8s.io/v1alpha1",
        "ServiceExport",
        ns,
        name,
    )
    .await
}

/// Creates, for every name, the Service `ns/<name>` (as [`service`]) and
/// its `ServiceExport`, `parallel` requests at a time (a thousand objects
/// through `apply_yaml`, which discovers the API per object, take minutes).
pub async fn export_many(client: &kube::Client, ns: &str, names: &[String], parallel: usize) {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};

    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ServiceExport");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "serviceexports");
    let exports: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in names.chunks(names.len().div_ceil(parallel.max(1)).max(1)) {
        let (services, exports, resource) = (services.clone(), exports.clone(), resource.clone());
        let (chunk, ns) = (chunk.to_vec(), ns.to_owned());
        tasks.spawn(async move {
            for name in chunk {
                let svc: Service = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {
                        "selector": {"app": name},
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                    },
                }))
                .expect("a Service");
                services
                    .create(&PostParams::default(), &svc)
                    .await
                    .unwrap_or_else(|e| panic!("create Service {ns}/{name}: {e}"));
                let export = DynamicObject::new(&name, &resource).within(&ns);
                exports
                    .create(&PostParams::default(), &export)
                    .await
                    .unwrap_or_else(|e| panic!("create ServiceExport {ns}/{name}: {e}"));
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("an export task");
    }
}
