//! The orchestrator: runs P1–P4 and `clusters` (with its storms), each with its own hub process and load
//! generator process, checks every consumer's content against what the hub
//! published (the oracle), and prints the table.

mod clusters;
mod harness;
mod p1;
mod p2;
mod p3;
mod p4;

use anyhow::{Context as _, Result};

use crate::params::Params;
use crate::report::Results;

/// Runs the selected scenarios.
pub async fn run(params: &Params, only: &[String]) -> Result<Results> {
    let mut results = Results::default();
    let want = |p: &str| only.is_empty() || only.iter().any(|o| o.eq_ignore_ascii_case(p));
    if want("p1") {
        p1::p1(params, &mut results).await.context("P1")?;
    }
    if want("p2") {
        p2::p2(params, &mut results).await.context("P2")?;
    }
    if want("p3") {
        p3::p3(params, &mut results).await.context("P3")?;
    }
    if want("p4") {
        p4::p4(params, &mut results).await.context("P4")?;
    }
    if want("clusters") {
        clusters::clusters(params, &mut results)
            .await
            .context("clusters")?;
    }
    let explicit = only.iter().any(|o| o.eq_ignore_ascii_case("p5"));
    if explicit || (only.is_empty() && params.p5.by_default) {
        crate::p5::run(params.p5, &mut results)
            .await
            .context("P5")?;
    }
    if only.iter().any(|o| o.eq_ignore_ascii_case("k8s")) {
        crate::k8s::run(params.k8s, &mut results)
            .await
            .context("k8s")?;
    }
    Ok(results)
}
