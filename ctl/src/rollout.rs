//! `meshhubctl rollout status | promote | abort | resume [--cluster C]`:
//! the hub's staged rollout (`GET /rollout`, `POST /rollout/<action>`).

use meshhub_rollout::{ClusterState, Phase};

use crate::history::{AdminArgs, call, user};
use crate::output::{Format, render, short, structured};

/// `meshhubctl rollout`.
#[derive(clap::Args, Debug)]
pub struct RolloutArgs {
    #[command(subcommand)]
    command: RolloutCommand,
}

#[derive(clap::Subcommand, Debug)]
enum RolloutCommand {
    /// Show the policy's waves and the current rollout: phase, wave, and
    /// where each cluster stands.
    Status {
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value = "table")]
        output: Format,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Start the next wave now (from a wave waiting for promotion, or
    /// cutting a bake short); with --cluster, update that cluster now,
    /// ahead of its wave.
    Promote(Act),
    /// Stop the rollout (rolling updated clusters back when the policy
    /// says `onFailure: rollback`); with --cluster, take that cluster out
    /// and serve it its previous version.
    Abort(Act),
    /// Restart a halted or rolled-back rollout at the first wave not
    /// wholly ACKed; with --cluster, return that cluster to the rollout.
    Resume(Act),
}

#[derive(clap::Args, Debug)]
struct Act {
    /// One cluster instead of the whole rollout.
    #[arg(long)]
    cluster: Option<String>,
    /// Who asks, for the audit log.
    #[arg(long = "as", env = "MESHHUB_USER")]
    user: Option<String>,
    #[command(flatten)]
    admin: AdminArgs,
}

/// `GET /rollout` as the hub answers (`wait` reads it too).
pub(crate) use meshhub_api::rollout::View;

pub async fn run(args: RolloutArgs) -> Result<(), String> {
    let (path, act) = match args.command {
        RolloutCommand::Status { output, admin } => {
            let (view, _): (View, _) =
                call(&admin, http::Method::GET, "/rollout", None, None::<&()>).await?;
            let text = match structured(&view, output) {
                Some(t) => t?,
                None => table(&view),
            };
            print!("{text}");
            return Ok(());
        }
        RolloutCommand::Promote(a) => ("promote", a),
        RolloutCommand::Abort(a) => ("abort", a),
        RolloutCommand::Resume(a) => ("resume", a),
    };
    let who = user(act.user);
    let mut route = format!("/rollout/{path}");
    if let Some(c) = &act.cluster {
        let q: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("cluster", c)
            .finish();
        route.push('?');
        route.push_str(&q);
    }
    let (view, _): (View, _) = call(
        &act.admin,
        http::Method::POST,
        &route,
        Some(&who),
        None::<&()>,
    )
    .await?;
    print!("{}", table(&view));
    Ok(())
}

/// The state as the table spells it (`ROLLED-BACK`).
fn state(s: &ClusterState) -> String {
    s.name().to_uppercase().replace('_', "-")
}

fn table(view: &View) -> String {
    if !view.enabled {
        return "no rollout policy: every cluster gets a change at once (`rollout:` in the hub's configuration)\n".to_owned();
    }
    let Some(r) = &view.rollout else {
        return "no rollout yet: nothing changed since the hub started\n".to_owned();
    };
    let wave = r.wave_name().unwrap_or("-");
    let mut out = format!(
        "ROLLOUT {}  PHASE {}  WAVE {}/{} {}\n",
        r.id,
        r.phase.name(),
        (r.wave + 1).min(r.waves.len()),
        r.waves.len(),
        wave
    );
    match &r.phase {
        Phase::Halted { failure } | Phase::RolledBack { failure } => {
            out.push_str(&format!(
                "FAILED in wave {}{}: {}\n",
                failure.wave,
                failure
                    .cluster
                    .as_ref()
                    .map(|c| format!(", cluster {c}"))
                    .unwrap_or_default(),
                failure.message
            ));
        }
        Phase::Superseded { by } => out.push_str(&format!("superseded by rollout {by}\n")),
        _ => {}
    }
    if view.following {
        out.push_str(&format!(
            "decided by the leader {} (this replica follows; promote, abort and resume go to the leader)\n",
            view.leader.as_deref().unwrap_or("(not known yet)")
        ));
    }
    let mut rows = vec![vec![
        "WAVE".to_owned(),
        "CLUSTER".to_owned(),
        "STATE".to_owned(),
        "FROM".to_owned(),
        "TO".to_owned(),
        "DETAIL".to_owned(),
    ]];
    for w in &r.waves {
        for c in &w.clusters {
            let Some(t) = r.targets.get(c) else { continue };
            let detail = match &t.state {
                ClusterState::Failed { message } | ClusterState::Refused { message } => {
                    message.clone()
                }
                _ => String::new(),
            };
            rows.push(vec![
                w.name.clone(),
                c.clone(),
                state(&t.state),
                t.step.from.as_deref().map_or_else(|| "-".to_owned(), short),
                short(&t.step.to),
                detail,
            ]);
        }
    }
    out.push_str(&render(&rows));
    trouble(view, &mut out);
    out
}

/// Standing failures and versions this replica can't produce, after the
/// waves.
fn trouble(view: &View, out: &mut String) {
    if !view.standing.is_empty() {
        out.push_str("\nSTILL FAILING (left out of rollouts until their content changes, or `rollout resume --cluster C`):\n");
        let mut rows = vec![vec![
            "CLUSTER".to_owned(),
            "REFUSED".to_owned(),
            "ROLLOUT".to_owned(),
            "DETAIL".to_owned(),
        ]];
        for (c, s) in &view.standing {
            rows.push(vec![
                c.clone(),
                short(&s.version),
                s.sent_by()
                    .map_or_else(|| "none".to_owned(), |r| r.to_string()),
                s.message.clone(),
            ]);
        }
        out.push_str(&render(&rows));
    }
    for (c, objects) in &view.awaiting_acceptance {
        out.push_str(&format!(
            "\nAWAITING ACCEPTANCE: cluster {c} ACKed; its Gateway API controller has not accepted {} yet\n",
            objects.join(", ")
        ));
    }
    if !view.unavailable.is_empty() {
        out.push_str("\nUNAVAILABLE here (not in this replica's history; nothing is pushed, the cluster keeps what it holds):\n");
        let mut rows = vec![vec!["CLUSTER".to_owned(), "DECIDED".to_owned()]];
        for (c, v) in &view.unavailable {
            rows.push(vec![c.clone(), short(v)]);
        }
        out.push_str(&render(&rows));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standing_failures_and_unavailable_versions_are_shown() {
        let view = View {
            enabled: true,
            rollout: None,
            standing: [(
                "east".to_owned(),
                meshhub_api::rollout::Standing {
                    version: "0123456789ab".into(),
                    message: "VirtualService bookinfo/r: bad route".into(),
                    rollout: 4,
                },
            )]
            .into(),
            unavailable: [("west".to_owned(), "ba9876543210".to_owned())].into(),
            awaiting_acceptance: [("north".to_owned(), vec!["httproutes shop/r".to_owned()])]
                .into(),
            ..View::default()
        };
        let mut out = String::new();
        trouble(&view, &mut out);
        assert!(out.contains("STILL FAILING"), "{out}");
        assert!(
            out.contains("east") && out.contains("bad route") && out.contains(" 4 "),
            "{out}"
        );
        assert!(out.contains("UNAVAILABLE") && out.contains("west"), "{out}");
        assert!(
            out.contains("AWAITING ACCEPTANCE: cluster north ACKed; its Gateway API controller has not accepted httproutes shop/r yet"),
            "{out}"
        );
    }
}
