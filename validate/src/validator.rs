//! [`Validator`]: the semantic checks together with the CRDs they were
//! given, shared by whoever validates (the hub's sources and webhook,
//! `meshhubctl validate`).

use std::sync::Arc;

use meshhub_proto::object::Object;

use crate::check::{into_result, problems_with};
use crate::crd::CrdSchemas;
use crate::problem::{Problem, ValidationError};

/// Validation of objects: Istio's semantic rules for its kinds, and, for
/// the custom resources whose CRDs it holds (the Gateway API's), those
/// CRDs' schemas and CEL rules as the API server checks them. Cheap to
/// clone.
#[derive(Clone, Debug, Default)]
pub struct Validator {
    crds: Arc<CrdSchemas>,
}

impl Validator {
    /// A validator that checks custom resources against `crds`.
    pub fn new(crds: CrdSchemas) -> Self {
        Self {
            crds: Arc::new(crds),
        }
    }

    /// The CRDs it checks against.
    pub fn crds(&self) -> &CrdSchemas {
        &self.crds
    }

    /// Every problem of `obj`, in field order; empty when it is valid.
    pub fn problems(&self, obj: &Object) -> Vec<Problem> {
        problems_with(obj, Some(&self.crds))
    }

    /// Checks `obj`: `Err` names every problem.
    pub fn validate(&self, obj: &Object) -> Result<(), ValidationError> {
        into_result(obj, self.problems(obj))
    }
}
