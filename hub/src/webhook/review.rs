//! `admission.k8s.io/v1` AdmissionReview handling, without I/O: a request
//! body in, a decision out.
//!
//! The object under review goes through exactly what a Kubernetes source's
//! objects go through: [`meshhub_kube::object::to_object`] (status and
//! `kubectl apply`'s copy dropped), then [`crate::store::verdict`] (kind
//! table with the `extraKinds`, transcoding with the `unknownFields`
//! policy, the semantic checks of [`meshhub_validate`]). What the webhook
//! refuses, the sources would have rejected, and the other way round.

use kube::api::DynamicObject;
use meshhub_proto::kinds::KindTable;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::SemanticCheck;
use crate::store::UnknownFields;

/// The only AdmissionReview version served.
pub const API_VERSION: &str = "admission.k8s.io/v1";

/// Why a request body is not an AdmissionReview meshhub can answer. The
/// webhook answers these with HTTP 400 and this text.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// Not JSON of the AdmissionReview shape.
    #[error("not an AdmissionReview: {0}")]
    Malformed(String),
    /// Another version or kind.
    #[error(
        "expected apiVersion {API_VERSION} and kind AdmissionReview, found {api_version:?} {kind:?}"
    )]
    WrongType {
        /// The apiVersion sent.
        api_version: String,
        /// The kind sent.
        kind: String,
    },
    /// No `request`.
    #[error("AdmissionReview has no request")]
    NoRequest,
    /// An empty `request.uid`.
    #[error("AdmissionReview request has no uid")]
    NoUid,
    /// A CREATE or UPDATE without `request.object`.
    #[error("AdmissionReview request {uid}: {operation} without request.object")]
    NoObject {
        /// The request's uid.
        uid: String,
        /// The operation.
        operation: String,
    },
    /// `request.object` is not a Kubernetes object.
    #[error("AdmissionReview request {uid}: request.object is not a Kubernetes object: {reason}")]
    BadObject {
        /// The request's uid.
        uid: String,
        /// Why.
        reason: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    // Read after the type is checked, so that another version is reported
    // as such rather than as a shape error.
    #[serde(default)]
    request: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    #[serde(default)]
    uid: String,
    kind: Gvk,
    resource: Gvr,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    operation: String,
    #[serde(default)]
    object: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Gvk {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
}

#[derive(Debug, Deserialize)]
struct Gvr {
    resource: String,
}

/// The answer to one review, with what metrics and logs need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The request's uid, echoed.
    pub uid: String,
    /// The object's kind as the API server named it.
    pub kind: String,
    /// `namespace/name` of the object (`name` when cluster-scoped).
    pub object: String,
    /// The operation (`CREATE`, `UPDATE`, ...).
    pub operation: String,
    /// Whether the object is admitted.
    pub allowed: bool,
    /// Why not: every reason, each naming the field.
    pub reasons: Vec<String>,
    /// Warnings shown to the client (pruned fields, unchecked versions).
    pub warnings: Vec<String>,
}

/// HTTP-like status code of a denial: the object is invalid.
pub const DENIED_CODE: u16 = 422;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: Response<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

#[derive(Serialize)]
struct Status {
    code: u16,
    reason: &'static str,
    message: String,
}

impl Decision {
    /// The denial message: every reason, `; `-separated.
    pub fn message(&self) -> String {
        self.reasons.join("; ")
    }

    /// The AdmissionReview answering this decision.
    pub fn to_json(&self) -> Value {
        let review = ResponseReview {
            api_version: API_VERSION,
            kind: "AdmissionReview",
            response: Response {
                uid: &self.uid,
                allowed: self.allowed,
                status: (!self.allowed).then(|| Status {
                    code: DENIED_CODE,
                    reason: "Invalid",
                    message: self.message(),
                }),
                warnings: &self.warnings,
            },
        };
        serde_json::to_value(review).unwrap_or(Value::Null)
    }
}

/// Reviews objects with the hub's kind table and checks.
#[derive(Clone)]
pub struct Validator {
    kinds: KindTable,
    unknown_fields: UnknownFields,
    semantic: SemanticCheck,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator")
            .field("kinds", &self.kinds.len())
            .field("unknown_fields", &self.unknown_fields)
            .finish_non_exhaustive()
    }
}

impl Validator {
    /// A validator with the hub's kind table (including `extraKinds`), its
    /// `unknownFields` policy and semantic checks.
    pub fn new(kinds: KindTable, unknown_fields: UnknownFields, semantic: SemanticCheck) -> Self {
        Self {
            kinds,
            unknown_fields,
            semantic,
        }
    }

    /// Decides one AdmissionReview request body.
    pub fn review(&self, body: &[u8]) -> Result<Decision, ReviewError> {
        let review: Review =
            serde_json::from_slice(body).map_err(|e| ReviewError::Malformed(e.to_string()))?;
        if review.api_version != API_VERSION || review.kind != "AdmissionReview" {
            return Err(ReviewError::WrongType {
                api_version: review.api_version,
                kind: review.kind,
            });
        }
        let req: Request = match review.request {
            None | Some(Value::Null) => return Err(ReviewError::NoRequest),
            Some(v) => serde_json::from_value(v)
                .map_err(|e| ReviewError::Malformed(format!("request: {e}")))?,
        };
        if req.uid.is_empty() {
            return Err(ReviewError::NoUid);
        }
        let object = match (req.namespace.as_deref(), req.name.as_deref()) {
            (Some(ns), Some(name)) if !ns.is_empty() => format!("{ns}/{name}"),
            (_, name) => name.unwrap_or_default().to_owned(),
        };
        let mut decision = Decision {
            uid: req.uid.clone(),
            kind: req.kind.kind.clone(),
            object,
            operation: req.operation.clone(),
            allowed: true,
            reasons: Vec::new(),
            warnings: Vec::new(),
        };
        // Only writes of the object itself are checked; a status update
        // carries nothing meshhub serves.
        let writes = matches!(req.operation.as_str(), "CREATE" | "UPDATE");
        if !writes || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
            return Ok(decision);
        }
        let Some(kind) = self.kinds.by_group_kind(&req.kind.group, &req.kind.kind) else {
            return Ok(decision); // not a kind meshhub carries
        };
        if !kind.serves(&req.kind.version) {
            // The sources read such objects in a version they know (the API
            // server converts); the webhook sees this one and can't judge.
            decision.warnings.push(format!(
                "meshhub: {} version {} is not in meshhub's schemas (known: {}); not checked",
                req.kind.kind,
                req.kind.version,
                kind.versions().join(", ")
            ));
            return Ok(decision);
        }
        let Some(value) = req.object else {
            return Err(ReviewError::NoObject {
                uid: req.uid,
                operation: req.operation,
            });
        };
        let mut dynamic: DynamicObject =
            serde_json::from_value(value).map_err(|e| ReviewError::BadObject {
                uid: req.uid.clone(),
                reason: e.to_string(),
            })?;
        // The API server fills both in before validating admission; the
        // request's own are the fallback.
        if dynamic.metadata.name.as_deref().is_none_or(str::is_empty) {
            dynamic.metadata.name = req.name.clone();
        }
        if dynamic.metadata.namespace.is_none() && kind.namespaced() {
            dynamic.metadata.namespace = req.namespace.clone();
        }
        let resource = meshhub_kube::discovery::resource(
            &req.kind.group,
            &req.kind.version,
            &req.kind.kind,
            &req.resource.resource,
        );
        let obj = meshhub_kube::object::to_object(&resource, dynamic);
        let verdict = crate::store::verdict(&self.kinds, self.unknown_fields, &self.semantic, obj);
        if verdict.is_accepted() {
            decision.warnings = verdict.warning_messages();
        } else {
            decision.allowed = false;
            decision.reasons = verdict.error_messages();
        }
        Ok(decision)
    }
}
