//! The soak's fault phase: a random interleaving of generator changes and
//! faults, all drawn from the generator's seeded RNG.
//!
//! Faults: SIGKILL and restart of the hub (at a random moment, or right
//! after it published a large change: mid-push) and of an agent (at a
//! random moment, or right after the hub published a change for it:
//! mid-persist); on a random link a partition (reset everything, refuse new
//! connections), a stall longer than keepalive and `sendTimeout`, a slow
//! period, or a drop of every connection; a consumer process frozen
//! (SIGSTOP, then SIGCONT); and a consumer that stops reading
//! while a response larger than its HTTP/2 window is sent to it, which the
//! hub must cut after `sendTimeout` while the cluster's agent still gets
//! the change.

use std::time::{Duration, Instant};

use meshhub_testkit::objects::VS;
use rand::Rng as _;

use super::proxy::Link;
use super::soak::{CLUSTERS, Soak};
use super::stuck::StuckConsumer;
use crate::{group_version, synced};

/// What is healed when its time comes.
#[derive(Debug)]
enum Heal {
    /// A link forwards normally again.
    Link(Link),
    /// A frozen consumer process continues (SIGCONT).
    Consumer(usize),
}

type Pending = Vec<(Instant, Heal)>;

impl Soak {
    /// Runs changes and faults for `duration`, then heals everything.
    pub fn chaos(&mut self, duration: Duration) {
        let start = Instant::now();
        let mut pending: Pending = Vec::new();
        let mut stuck_done = false;
        while start.elapsed() < duration {
            let now = Instant::now();
            let (due, later): (Pending, Pending) =
                pending.drain(..).partition(|(at, _)| *at <= now);
            pending = later;
            for (_, heal) in due {
                self.heal(heal);
            }
            self.revive_consumers();
            // One stuck consumer per run at least, a third of the way in.
            if !stuck_done && start.elapsed() >= duration / 3 {
                stuck_done = true;
                self.stuck_consumer(&mut pending);
                continue;
            }
            if self.generator.rng().random_range(0..100) < 8 {
                self.inject(&mut pending);
            } else {
                self.generator.step();
            }
            let pause = self.generator.rng().random_range(20..200);
            // The pace of a random process, not a wait for anything.
            std::thread::sleep(Duration::from_millis(pause));
        }
        for (_, heal) in pending.drain(..) {
            self.heal(heal);
        }
        self.heal_all();
    }

    fn heal(&mut self, heal: Heal) {
        match heal {
            Heal::Link(link) => link.heal(),
            Heal::Consumer(i) => {
                let c = &mut self.consumers[i];
                if c.stopped {
                    c.proc.signal("CONT");
                    c.stopped = false;
                }
            }
        }
    }

    fn count(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_default() += 1;
    }

    fn random_link(&mut self) -> Link {
        let n = self.pushes.len() + self.consumers.len();
        let i = self.generator.rng().random_range(0..n);
        match self.pushes.get(i) {
            Some(l) => l.clone(),
            None => self.consumers[i - self.pushes.len()].link.clone(),
        }
    }

    fn inject(&mut self, pending: &mut Pending) {
        let roll = self.generator.rng().random_range(0..100);
        match roll {
            0..8 => {
                self.count("hub-kill");
                self.restart_hub();
            }
            8..16 => {
                self.count("hub-kill-mid-push");
                let count = self.generator.rng().random_range(100..300);
                self.after_publish(0, |s| s.generator.bulk(count, 2048, None));
                self.restart_hub();
            }
            16..28 => {
                self.count("agent-kill");
                let i = self.generator.rng().random_range(0..CLUSTERS.len());
                self.restart_agent(i);
            }
            28..40 => {
                self.count("agent-kill-mid-persist");
                let i = self.generator.rng().random_range(0..CLUSTERS.len());
                self.after_publish(i, |s| {
                    s.generator.step();
                });
                self.restart_agent(i);
            }
            40..55 => {
                self.count("partition");
                let link = self.random_link();
                link.cut();
                let for_ms = self.generator.rng().random_range(500..4000);
                pending.push((
                    Instant::now() + Duration::from_millis(for_ms),
                    Heal::Link(link),
                ));
            }
            55..70 => {
                self.count("stall");
                let link = self.random_link();
                link.stall();
                // Longer than keepalive (1s + 1s) and sendTimeout (2s).
                let for_ms = self.generator.rng().random_range(3000..6000);
                pending.push((
                    Instant::now() + Duration::from_millis(for_ms),
                    Heal::Link(link),
                ));
            }
            70..82 => {
                self.count("slow");
                let link = self.random_link();
                let delay = self.generator.rng().random_range(5..40);
                link.slow(Duration::from_millis(delay));
                let for_ms = self.generator.rng().random_range(1000..4000);
                pending.push((
                    Instant::now() + Duration::from_millis(for_ms),
                    Heal::Link(link),
                ));
            }
            82..88 => {
                let i = self.generator.rng().random_range(0..self.consumers.len());
                let c = &mut self.consumers[i];
                if !c.stopped && c.proc.exited().is_none() {
                    c.proc.signal("STOP");
                    c.stopped = true;
                    self.count("consumer-freeze");
                    let for_ms = self.generator.rng().random_range(1500..5000);
                    pending.push((
                        Instant::now() + Duration::from_millis(for_ms),
                        Heal::Consumer(i),
                    ));
                }
            }
            _ => {
                self.count("drop");
                self.random_link().drop_all();
            }
        }
    }

    /// Applies `change`, then returns as soon as the hub published a new
    /// version for cluster `i` (or after 2 s if the change was not for it),
    /// so that what follows hits the push or the persist in progress.
    fn after_publish(&mut self, i: usize, change: impl FnOnce(&mut Self)) {
        let before = group_version(&self.hub().status(), CLUSTERS[i], VS);
        change(self);
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            if group_version(&self.hub().status(), CLUSTERS[i], VS) != before {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A consumer of the hub stops reading (see [`StuckConsumer`]) while a
    /// response of about 4.5 MB (over its 2 MiB HTTP/2 stream window) is
    /// sent to it: the hub must cut it after `sendTimeout`
    /// (`meshhub_mcp_streams_cut_total`, its stream ends), and meanwhile
    /// the agent of the same cluster ACKs that version.
    fn stuck_consumer(&mut self, pending: &mut Pending) {
        for (_, heal) in pending.drain(..) {
            self.heal(heal);
        }
        self.heal_all();
        let i = self.generator.rng().random_range(0..CLUSTERS.len());
        let link = self.proxy.link("stuck-consumer", self.hub().grpc);
        // The bulk is published and ACKed by the agent first; the stuck
        // consumer then subscribes and never reads, so its first response
        // (the full state, bulk included) is the one it is stuck on. (Had
        // it subscribed before the bulk, any small change published in
        // between would be the response it holds un-ACKed, and the hub,
        // which sends one un-ACKed response per collection, would never
        // send it the bulk.)
        let before = group_version(&self.hub().status(), CLUSTERS[i], VS);
        self.generator
            .bulk(1500, 3072, Some(vec![CLUSTERS[i].to_owned()]));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let s = self.hub().status();
            let resources = s["groups"]
                .as_array()
                .and_then(|g| g.iter().find(|g| g["name"] == CLUSTERS[i]))
                .and_then(|g| g["collections"][VS]["resources"].as_u64())
                .unwrap_or(0);
            let acked = group_version(&s, CLUSTERS[i], VS) != before
                && resources >= 1500
                && synced(&s, CLUSTERS[i], VS);
            if acked {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the agent of {} did not ACK the bulk (1500 resources published: {})",
                CLUSTERS[i],
                resources >= 1500,
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let cuts = self.hub_counter("meshhub_mcp_streams_cut_total");
        let mut stuck = StuckConsumer::subscribe_unread(link.addr(), CLUSTERS[i], VS);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.hub_counter("meshhub_mcp_streams_cut_total") <= cuts {
            assert!(
                Instant::now() < deadline,
                "a consumer of {} stopped reading a {} KB response and was not cut",
                CLUSTERS[i],
                1500 * 3,
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let ended = stuck.drain(Duration::from_secs(30));
        assert!(
            ended.is_err(),
            "the stuck consumer's stream is still open: {ended:?}"
        );
        self.count("stuck-consumer");
        self.generator.remove_bulk();
    }
}
