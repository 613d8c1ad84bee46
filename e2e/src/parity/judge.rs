//! The three judges of an object: a real kube-apiserver (server-side dry
//! run with strict field validation, against Istio's CRDs), a real istiod's
//! validating webhook, and meshhub's checks (as its admission webhook and
//! as its file source run them).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use meshhub::store::{SemanticCheck, UnknownFields, verdict};
use meshhub::validation::semantic_check;
use meshhub::webhook::Validator;
use meshhub_proto::kinds::KindTable;
use serde_json::{Value, json};

use super::corpus::{Case, CrdIndex};

/// What a judge said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The object is valid.
    Accepted,
    /// Refused, with the judge's message.
    Refused(String),
}

impl Outcome {
    /// Whether accepted.
    pub fn accepted(&self) -> bool {
        matches!(self, Self::Accepted)
    }

    /// The message, empty when accepted.
    pub fn message(&self) -> &str {
        match self {
            Self::Accepted => "",
            Self::Refused(m) => m,
        }
    }
}

/// Attempts per request before a transport error fails the test.
const ATTEMPTS: usize = 5;

/// A kube-apiserver judging by `?dryRun=All&fieldValidation=Strict` creates.
#[derive(Clone)]
pub struct ApiServer {
    client: kube::Client,
    crds: Arc<CrdIndex>,
}

impl ApiServer {
    /// Judges with `client` (admin) the kinds of `crds`.
    pub fn new(client: kube::Client, crds: Arc<CrdIndex>) -> Self {
        Self { client, crds }
    }

    /// The API server's verdict on creating `case`'s object.
    pub async fn judge(&self, case: &Case) -> Outcome {
        let crd = self
            .crds
            .of(case)
            .unwrap_or_else(|| panic!("{}: not a served Istio kind", case.label));
        let uri = format!(
            "/apis/{}/{}/namespaces/{}/{}?dryRun=All&fieldValidation=Strict",
            case.group(),
            case.version(),
            case.namespace(),
            crd.plural
        );
        let body = serde_json::to_vec(&case.object).expect("JSON");
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let req = http::Request::post(&uri)
                .header("Content-Type", "application/json")
                .body(body.clone())
                .expect("request");
            match self.client.request_text(req).await {
                Ok(_) => return Outcome::Accepted,
                Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
                    return Outcome::Refused(s.message);
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("kube-apiserver did not judge {}: {last}", case.label)
    }
}

/// istiod's validating webhook (`/validate` on its `--httpsAddr`), called
/// directly with an `admission.k8s.io/v1` AdmissionReview.
#[derive(Clone)]
pub struct IstiodWebhook {
    client: kube::Client,
    crds: Arc<CrdIndex>,
}

impl IstiodWebhook {
    /// A client of istiod's HTTPS address. istiod serves a certificate of
    /// its own CA for its service name; the test trusts it blindly (it is
    /// a loopback connection to the process it started).
    pub fn new(https: SocketAddr, crds: Arc<CrdIndex>) -> Self {
        let mut config = kube::Config::new(format!("https://{https}").parse().expect("URL"));
        config.accept_invalid_certs = true;
        config.read_timeout = Some(Duration::from_secs(30));
        let client = kube::Client::try_from(config).expect("istiod client");
        Self { client, crds }
    }

    /// istiod's verdict on creating `case`'s object, or the transport
    /// error (for the readiness wait).
    pub async fn try_judge(&self, case: &Case, uid: usize) -> Result<Outcome, String> {
        let plural = self
            .crds
            .of(case)
            .map(|c| c.plural.clone())
            .unwrap_or_default();
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": format!("parity-{uid}"),
                "kind": {"group": case.group(), "version": case.version(), "kind": case.kind()},
                "resource": {"group": case.group(), "version": case.version(), "resource": plural},
                "name": case.name(),
                "namespace": case.namespace(),
                "operation": "CREATE",
                "userInfo": {"username": "parity"},
                "object": case.object,
                "dryRun": true,
            }
        });
        let req = http::Request::post("/validate")
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&review).expect("JSON"))
            .expect("request");
        let text = self
            .client
            .request_text(req)
            .await
            .map_err(|e| e.to_string())?;
        let answer: Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
        let response = &answer["response"];
        if response["allowed"] == true {
            return Ok(Outcome::Accepted);
        }
        let message = response["status"]["message"]
            .as_str()
            .unwrap_or("refused without a message");
        Ok(Outcome::Refused(message.to_owned()))
    }

    /// istiod's verdict, retrying transport errors.
    pub async fn judge(&self, case: &Case, uid: usize) -> Outcome {
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            match self.try_judge(case, uid).await {
                Ok(o) => return o,
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("istiod did not judge {}: {last}", case.label)
    }
}

/// meshhub's checks, in process: its admission webhook's review and its
/// file source's parse + store verdict, both with the hub's defaults
/// (builtin kinds, `unknownFields: reject`).
#[derive(Clone)]
pub struct Meshhub {
    kinds: KindTable,
    semantic: SemanticCheck,
    validator: Validator,
}

impl Default for Meshhub {
    fn default() -> Self {
        Self::new(meshhub_validate::Validator::default())
    }
}

impl Meshhub {
    /// meshhub's checks with `validator` (the hub's `validation.crds`).
    pub fn new(validator: meshhub_validate::Validator) -> Self {
        let kinds = KindTable::builtin();
        let semantic = semantic_check(&validator);
        let validator = Validator::new(kinds.clone(), UnknownFields::Reject, semantic.clone());
        Self {
            kinds,
            semantic,
            validator,
        }
    }

    /// The admission webhook's answer to a CREATE of `case`'s object.
    pub fn webhook(&self, case: &Case) -> Outcome {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "parity",
                "kind": {"group": case.group(), "version": case.version(), "kind": case.kind()},
                "resource": {"group": case.group(), "version": case.version(), "resource": "parity"},
                "name": case.name(),
                "namespace": case.namespace(),
                "operation": "CREATE",
                "object": case.object,
            }
        });
        let body = serde_json::to_vec(&review).expect("JSON");
        match self.validator.review(&body) {
            Ok(d) if d.allowed => Outcome::Accepted,
            Ok(d) => Outcome::Refused(d.message()),
            Err(e) => Outcome::Refused(format!("webhook error: {e}")),
        }
    }

    /// The file source's verdict on a file holding `case`'s object (as
    /// JSON).
    pub fn file(&self, case: &Case) -> Outcome {
        let bytes = serde_json::to_vec_pretty(&case.object).expect("JSON");
        let entries = meshhub::source::file::parse_file(
            &Arc::from("parity"),
            &Arc::from("case.json"),
            Path::new("case.json"),
            &bytes,
            usize::MAX,
        );
        let mut reasons = Vec::new();
        for entry in entries {
            match entry.parsed {
                Ok(obj) => {
                    let v = verdict(&self.kinds, UnknownFields::Reject, &self.semantic, obj);
                    reasons.extend(v.error_messages());
                }
                Err(e) => reasons.push(e),
            }
        }
        if reasons.is_empty() {
            Outcome::Accepted
        } else {
            Outcome::Refused(reasons.join("; "))
        }
    }
}
