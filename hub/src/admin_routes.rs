//! Every route of the hub's admin port, assembled from the features that
//! own them: the admin base and `/status` ([`admin`]), the rollout's, the
//! history's and the web console's.

use axum::Router;

use crate::admin::{self, AdminState};

/// Every route of the admin port: [`admin::router`]'s, the rollout's, the
/// history's (with one) and the console's (when on). The state-changing
/// ones — the rollout's actions, pin and unpin, the console's session
/// check — sit behind the admin authorization.
pub fn routes(
    state: AdminState,
    rollout: crate::rollout::routes::RolloutState,
    history: Option<crate::history::routes::HistoryState>,
    console: Option<crate::console::ConsoleState>,
) -> Router {
    use crate::history::routes as history_routes;
    use crate::rollout::routes as rollout_routes;
    let auth = state.base.auth.clone();
    let mut routes = admin::router(state)
        .merge(rollout_routes::read_routes(rollout.clone()))
        .merge(auth.protect(rollout_routes::write_routes(rollout)));
    if let Some(h) = history {
        routes = routes
            .merge(history_routes::read_routes(h.clone()))
            .merge(auth.protect(history_routes::write_routes(h)));
    }
    if let Some(c) = console {
        routes = routes.merge(crate::console::routes(c, &auth));
    }
    routes
}
