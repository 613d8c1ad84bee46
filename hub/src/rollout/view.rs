//! What `GET /rollout` shows, published on every change of the
//! controller's state.

use std::sync::Arc;

use super::shared::{self, Decisions};
use super::{Controller, Mode, View};

impl Controller {
    pub(super) fn publish_view(&self) {
        let decisions = Decisions {
            by: None,
            rollout: self.rollout.clone(),
            serving: self.serving_ids.clone(),
            standing: self.standing.clone(),
            counted_refusals: self.counted.clone(),
            term: self.term,
            schema: shared::SCHEMA,
        };
        self.saved.send_if_modified(|saved| {
            if saved.as_deref() == Some(&decisions) {
                return false;
            }
            *saved = Some(Arc::new(decisions));
            true
        });
        let (following, leader) = match &self.mode {
            Mode::Leading => (false, None),
            Mode::Following(m) => (true, m.as_ref().and_then(|m| m.decisions.by.clone())),
        };
        let (standing, unavailable) = self.trouble();
        self.view.send_replace(Arc::new(View {
            enabled: true,
            policy: Some(self.policy.clone()),
            rollout: self.rollout.clone(),
            following,
            leader,
            standing,
            unavailable,
            gates: self.gate_readings.clone(),
            awaiting_acceptance: self.awaiting_acceptance(),
        }));
    }
}
