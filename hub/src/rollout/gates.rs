//! Metric gates: PromQL queries against a Prometheus server, one per gate
//! and cluster, compared with their thresholds. A task of its own takes
//! the controller's requests and answers with what failed, so the pipeline
//! never waits on the network.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use meshhub_rollout::{GateFailure, MetricGate};
use rustls_pki_types::pem::PemObject as _;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::spec::PrometheusSpec;

/// Histogram: how long a gate's query took, in seconds.
pub const METRIC_QUERY: &str = "meshhub_rollout_gate_query_seconds";
/// Counter: gate evaluations, by `result` (`passed`, `failed`, `error`).
pub const METRIC_EVALUATIONS: &str = "meshhub_rollout_gate_evaluations_total";

/// The controller asks: evaluate `gates` for `clusters`.
#[derive(Clone, Debug)]
pub struct GateRequest {
    /// The rollout.
    pub rollout: u64,
    /// The wave index.
    pub wave: usize,
    /// Whether this is the evaluation at the end of the bake.
    pub last: bool,
    /// The wave's clusters.
    pub clusters: Vec<String>,
    /// Its gates.
    pub gates: Arc<[MetricGate]>,
}

/// The answer.
#[derive(Debug)]
pub struct GateAnswer {
    /// The request.
    pub request: GateRequest,
    /// What did not hold, or why nothing could be told (Prometheus
    /// unreachable, a query it refused): then the controller asks again
    /// later rather than deciding on no evidence.
    pub result: Result<Evaluation, QueryError>,
}

/// What one evaluation of a wave's gates saw.
#[derive(Debug, Default)]
pub struct Evaluation {
    /// What did not hold.
    pub failures: Vec<GateFailure>,
    /// Every gate × cluster: the deciding sample and whether it held.
    pub readings: Vec<Reading>,
}

/// One gate for one cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// The gate.
    pub gate: String,
    /// The cluster.
    pub cluster: String,
    /// The first failing sample, else the last; `None`: no sample.
    pub value: Option<f64>,
    /// Whether it held.
    pub passed: bool,
}

/// Why a query has no answer.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The server can't be reached or did not answer in time.
    #[error("{url}: {message}")]
    Unreachable {
        /// The query URL.
        url: String,
        /// What happened.
        message: String,
    },
    /// The server answered with an error (a query it can't parse, ...).
    #[error("{url} answered {status}: {message}")]
    Refused {
        /// The query URL.
        url: String,
        /// The HTTP status.
        status: u16,
        /// Prometheus's `error`, or the body.
        message: String,
    },
    /// The answer is not Prometheus's query API document.
    #[error("{url}: unexpected answer: {message}")]
    Unexpected {
        /// The query URL.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// The HTTPS client can't be set up (the `ca` file).
    #[error("rollout.prometheus: {0}")]
    Setup(String),
}

/// A Prometheus server's instant-query API.
#[derive(Clone, Debug)]
pub struct Prometheus {
    spec: PrometheusSpec,
    client: Client<HttpsConnector<HttpConnector>, Empty<bytes::Bytes>>,
}

#[derive(Deserialize)]
struct ApiAnswer {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApiData {
    result_type: String,
    result: serde_json::Value,
}

impl Prometheus {
    /// A client of the server `spec` names (reads `ca` if given).
    pub fn new(spec: PrometheusSpec) -> Result<Self, QueryError> {
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let builder = match &spec.ca {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    QueryError::Setup(format!("can't read ca {}: {e}", path.display()))
                })?;
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        QueryError::Setup(format!(
                            "ca {}: not PEM certificates: {e}",
                            path.display()
                        ))
                    })?;
                    roots
                        .add(cert)
                        .map_err(|e| QueryError::Setup(format!("ca {}: {e}", path.display())))?;
                }
                let config = rustls::ClientConfig::builder()
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                builder.with_tls_config(config)
            }
            None => builder
                .with_native_roots()
                .map_err(|e| QueryError::Setup(format!("the system's root certificates: {e}")))?,
        };
        let connector = builder.https_or_http().enable_http1().build();
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Self { spec, client })
    }

    /// The value of `query` now (`None`: no sample). Several samples must
    /// all agree with the gate, so the caller gets the worst one through
    /// [`Prometheus::check`].
    pub async fn query(&self, query: &str) -> Result<Vec<f64>, QueryError> {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", query)
            .finish();
        let url = format!("{}/api/v1/query?{q}", self.spec.url);
        let unreachable = |message: String| QueryError::Unreachable {
            url: url.clone(),
            message,
        };
        let uri: http::Uri = url.parse().map_err(|e| unreachable(format!("{e}")))?;
        let call = async {
            let response = self
                .client
                .get(uri)
                .await
                .map_err(|e| unreachable(meshhub_runtime::error_chain(&e)))?;
            let status = response.status();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| unreachable(e.to_string()))?
                .to_bytes();
            Ok::<_, QueryError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.spec.timeout, call)
            .await
            .map_err(|_| unreachable(format!("no answer within {:?}", self.spec.timeout)))??;
        let answer: Result<ApiAnswer, _> = serde_json::from_slice(&body);
        match answer {
            Ok(a) if a.status == "success" && status.is_success() => {
                let data = a.data.ok_or_else(|| QueryError::Unexpected {
                    url: url.clone(),
                    message: "no data".into(),
                })?;
                values(&data).map_err(|message| QueryError::Unexpected { url, message })
            }
            Ok(a) => Err(QueryError::Refused {
                url,
                status: status.as_u16(),
                message: a.error.unwrap_or_else(|| a.status.clone()),
            }),
            Err(e) if status.is_success() => Err(QueryError::Unexpected {
                url,
                message: e.to_string(),
            }),
            Err(_) => Err(QueryError::Refused {
                url,
                status: status.as_u16(),
                message: String::from_utf8_lossy(&body)
                    .trim()
                    .chars()
                    .take(300)
                    .collect(),
            }),
        }
    }

    /// Evaluates every gate for every cluster: what did not hold, and
    /// what each saw.
    pub async fn check(
        &self,
        gates: &[MetricGate],
        clusters: &[String],
    ) -> Result<Evaluation, QueryError> {
        let mut failures = Vec::new();
        let mut readings = Vec::new();
        for gate in gates {
            for cluster in clusters {
                let query = gate.query_for(cluster);
                let started = std::time::Instant::now();
                let samples = self.query(&query).await?;
                metrics::histogram!(METRIC_QUERY).record(started.elapsed().as_secs_f64());
                let failed = if samples.is_empty() {
                    (!gate.passes(None)).then(|| "no sample".to_owned())
                } else {
                    samples
                        .iter()
                        .find(|v| !gate.passes(Some(**v)))
                        .map(|v| format!("{v}"))
                };
                debug!(gate = %gate.name, cluster = %cluster, ?samples, passed = failed.is_none(), "gate evaluated");
                let failing = samples.iter().find(|v| !gate.passes(Some(**v)));
                readings.push(Reading {
                    gate: gate.name.clone(),
                    cluster: cluster.clone(),
                    value: failing.or(samples.last()).copied(),
                    passed: failed.is_none(),
                });
                if let Some(seen) = failed {
                    failures.push(GateFailure {
                        cluster: cluster.clone(),
                        gate: gate.name.clone(),
                        message: format!(
                            "{}: {seen} (wants {} {})",
                            gate.name,
                            gate.comparison.as_str(),
                            gate.threshold
                        ),
                    });
                }
            }
        }
        Ok(Evaluation { failures, readings })
    }

    /// Answers requests from `requests` on `answers` until `shutdown`.
    pub async fn run(
        self,
        mut requests: mpsc::Receiver<GateRequest>,
        answers: mpsc::Sender<GateAnswer>,
        shutdown: CancellationToken,
    ) {
        loop {
            let request = tokio::select! {
                r = requests.recv() => match r {
                    Some(r) => r,
                    None => break,
                },
                () = shutdown.cancelled() => break,
            };
            let result = tokio::select! {
                r = self.check(&request.gates, &request.clusters) => r,
                () = shutdown.cancelled() => break,
            };
            let label = match &result {
                Ok(e) if e.failures.is_empty() => "passed",
                Ok(_) => "failed",
                Err(e) => {
                    warn!(error = %e, wave = request.wave, "a metric gate could not be evaluated; asking again later");
                    "error"
                }
            };
            metrics::counter!(METRIC_EVALUATIONS, "result" => label).increment(1);
            if answers.send(GateAnswer { request, result }).await.is_err() {
                break;
            }
        }
    }
}

/// The samples of an instant query's answer: a vector's values or a
/// scalar.
fn values(data: &ApiData) -> Result<Vec<f64>, String> {
    let number = |v: &serde_json::Value| -> Result<f64, String> {
        // [ <time>, "<value>" ]
        v.get(1)
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| format!("a sample is not [time, \"value\"]: {v}"))?
            .parse::<f64>()
            .map_err(|e| format!("a sample's value: {e}"))
    };
    match data.result_type.as_str() {
        "vector" => data
            .result
            .as_array()
            .ok_or("a vector that is not a list")?
            .iter()
            .map(|s| number(s.get("value").unwrap_or(&serde_json::Value::Null)))
            .collect(),
        "scalar" => number(&data.result).map(|v| vec![v]),
        other => Err(format!(
            "result type {other:?}: a gate's query must give an instant vector or a scalar"
        )),
    }
}

/// The default `interval` as a duration, for the controller's schedule.
pub fn retry_after(spec: Option<&PrometheusSpec>) -> Duration {
    spec.map_or(super::spec::DEFAULT_GATE_INTERVAL, |p| p.interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(result_type: &str, result: serde_json::Value) -> ApiData {
        ApiData {
            result_type: result_type.into(),
            result,
        }
    }

    #[test]
    fn vectors_and_scalars_give_their_values_and_matrices_are_refused() {
        let v = data(
            "vector",
            serde_json::json!([
                {"metric": {"cluster": "a"}, "value": [1.5, "0.25"]},
                {"metric": {"cluster": "a"}, "value": [1.5, "NaN"]}
            ]),
        );
        let got = values(&v).unwrap();
        assert_eq!(got[0], 0.25);
        assert!(got[1].is_nan());
        assert_eq!(
            values(&data("vector", serde_json::json!([]))).unwrap(),
            Vec::<f64>::new()
        );
        assert_eq!(
            values(&data("scalar", serde_json::json!([1.5, "3"]))).unwrap(),
            vec![3.0]
        );
        let e = values(&data("matrix", serde_json::json!([]))).unwrap_err();
        assert!(e.contains("instant vector or a scalar"), "{e}");
        let e = values(&data("vector", serde_json::json!([{"value": [1, 2]}]))).unwrap_err();
        assert!(e.contains("not [time, \"value\"]"), "{e}");
    }
}
