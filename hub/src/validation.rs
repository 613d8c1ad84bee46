//! What the hub checks objects with: Istio's semantic rules, and the CRDs
//! it is given (`validation.crds`: the Gateway API's, or those of a
//! source's `extraKinds`), whose OpenAPI schemas and CEL rules it checks as
//! a kube-apiserver does. The same checks judge every source's objects, the
//! admission webhook's reviews and the clusters' exports.
//!
//! ```yaml
//! validation:
//!   crds:                      # files or directories of CRD YAML
//!   - /etc/meshhub/crds/gateway-api
//! ```
//!
//! The CRDs are read at start; a reload reads them again, and a change to
//! the list or to the files is reported as needing a restart (a file that
//! no longer loads makes the reload fail, naming it, like any bad setting). Without them, a Gateway API object is checked
//! for being a well-formed object of its kind, and its cluster's API
//! server refuses the rest when the agent applies it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use meshhub_mcp::settings::SettingError;
use meshhub_proto::object::Object;
use meshhub_validate::{CrdSchemas, Validator};
use serde::Deserialize;
use tracing::{info, warn};

use crate::store::SemanticCheck;

/// `validation:` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawValidation {
    #[serde(default)]
    crds: Vec<PathBuf>,
}

/// The checked `validation:` block.
#[derive(Clone, Debug, Default)]
pub struct ValidationSpec {
    /// The CRD files and directories (resolved against the configuration
    /// file's directory).
    pub crds: Vec<PathBuf>,
    /// What they hold, read when the configuration was read.
    pub validator: Validator,
}

impl PartialEq for ValidationSpec {
    /// Equal when the same files are named and hold the same texts (a
    /// reload reads them again, so a CRD file updated in place is reported
    /// as needing a restart too).
    fn eq(&self, other: &Self) -> bool {
        self.crds == other.crds && self.validator.crds().digest() == other.validator.crds().digest()
    }
}

impl RawValidation {
    /// Reads the CRDs named; an unreadable file or an unusable schema is a
    /// setting error naming the file.
    pub fn check(self, base: &Path) -> Result<ValidationSpec, SettingError> {
        let crds: Vec<PathBuf> = self
            .crds
            .into_iter()
            .map(|p| if p.is_absolute() { p } else { base.join(p) })
            .collect();
        let schemas = CrdSchemas::load(&crds)
            .map_err(|e| SettingError::new("validation.crds", e.to_string()))?;
        Ok(ValidationSpec {
            crds,
            validator: Validator::new(schemas),
        })
    }
}

impl ValidationSpec {
    /// Logs what the checks hold: the kinds with CRD rules, and every rule
    /// that is not evaluated (with why).
    pub fn log(&self) {
        let crds = self.validator.crds();
        if crds.is_empty() {
            return;
        }
        info!(kinds = ?crds.kinds(), "validating custom resources against their CRDs");
        for n in crds.not_evaluated() {
            warn!(kind = %n.label(), at = %n.schema_path, rule = %n.rule, reason = %n.reason,
                "a CRD validation rule is not evaluated");
        }
    }
}

/// The semantic checks of `validator`, as the store calls them.
pub fn semantic_check(validator: &Validator) -> SemanticCheck {
    let validator = validator.clone();
    Arc::new(move |obj: &Object| match validator.validate(obj) {
        Ok(()) => Vec::new(),
        Err(e) => e.findings(),
    })
}

/// The store's checks of an object, as each cluster's export is judged
/// by before it is merged (the same as the generated entry then goes
/// through in the pipeline).
pub(crate) fn export_check(
    kinds: &meshhub_proto::kinds::KindTable,
    unknown_fields: crate::store::UnknownFields,
    validator: &Validator,
) -> crate::upward::judge::Check {
    let (kinds, semantic) = (kinds.clone(), semantic_check(validator));
    Arc::new(move |obj: Object| {
        crate::store::verdict(&kinds, unknown_fields, &semantic, obj).error_messages()
    })
}
