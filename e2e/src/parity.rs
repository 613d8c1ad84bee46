//! The differential validation test's machinery: a corpus of Istio objects
//! ([`corpus`], with seeded mutants from [`mutate`]), three judges that say
//! whether each object is valid ([`judge`]: a real kube-apiserver's dry run
//! with Istio's CRDs, a real istiod's `/validate` webhook, and meshhub's own
//! checks as its admission webhook and its file source run them), and the
//! agreement table ([`table`]). It runs per Istio line (a release's CRDs
//! and its istiod); [`line`] says which cases a line can judge.
//!
//! Istio's verdict on an object is "accepted by both the API server and
//! istiod": what a `kubectl apply` in a cluster running istiod does.

pub mod corpus;
pub mod judge;
pub mod line;
pub mod mutate;
pub mod schema_mutants;
pub mod table;

pub use corpus::{Case, CrdIndex};
pub use judge::{ApiServer, IstiodWebhook, Meshhub, Outcome};
pub use line::LineKnows;
pub use table::{Direction, Disagreement, Row, Table};
