//! `kestrel serve --dashboard-addr`: the dashboard over the leader's state.
//!
//! The scheduling loop ([`crate::driver::lead`]) owns the engine; it hands the dashboard a
//! copy through a [`DashboardFeed`] at most once per [`PUBLISH_EVERY`] while the state
//! changes (coalesced: many changes, one copy), and nothing while it does not. Publishing
//! replaces the latest copy in a watch channel and bumps the version `/api/stream`
//! announces: it never waits for an answer being computed or a browser reading. Answers
//! ([`LeaderSource`]) are the same functions the simulator's dashboard calls
//! ([`kestrel_sim::dashboard::answer`]), over that copy, so the JSON has the same shape.
//!
//! A standby (or a leader that lost its lease) has no state: it answers 503 saying so.

use crate::dashboard::Source;
use crate::live_view;
use kestrel_core::{Millis, PodId, Scheduler};
use kestrel_sim::dashboard::{answer, ApiError, Context, UsagePoint};
use kestrel_sim::explain_view::ExplainState;
use kestrel_sim::predict::{Deadline, Estimates};
use kestrel_sim::sim::events::{EventLog, RunEvent};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Least time between two copies of the leader's state.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// GPUs in use per queue: one point a minute, a day of them.
const HISTORY_EVERY: Duration = Duration::from_secs(60);
const HISTORY_KEPT: usize = 24 * 60;
/// Binds and evictions kept for the Events page.
const EVENTS_KEPT: usize = 2_000;
/// Answers kept per copy (every open page asks the same few paths after each update).
const CACHED_ANSWERS: usize = 256;
/// Wall-clock time one answer's predicted starts may take.
const PREDICT_BUDGET: Duration = Duration::from_secs(10);

/// The engine at one moment, as the dashboard reads it.
struct LeaderView {
    scheduler: Scheduler,
    now: Millis,
}

impl ExplainState for LeaderView {
    fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    fn now(&self) -> Millis {
        self.now
    }

    fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis> {
        live_view::end_of_running(&self.scheduler, self.now, pod, estimates)
    }
}

/// One published copy: the engine (its caches are not shared between threads, so answers
/// on one copy are taken one at a time), what happened, the usage history, and answers
/// already computed.
struct Published {
    view: Mutex<LeaderView>,
    events: Arc<Vec<RunEvent>>,
    history: Arc<Vec<UsagePoint>>,
    answers: Mutex<HashMap<String, Result<String, ApiError>>>,
}

/// The leader's side: takes copies of its state when due.
pub struct DashboardFeed {
    latest: watch::Sender<Option<Arc<Published>>>,
    version: watch::Sender<u64>,
    /// A change not yet published.
    dirty: bool,
    last_publish: Option<Instant>,
    last_history: Option<Instant>,
    history: VecDeque<UsagePoint>,
    history_shared: Arc<Vec<UsagePoint>>,
    events: EventLog,
    events_changed: bool,
    events_shared: Arc<Vec<RunEvent>>,
}

impl std::fmt::Debug for DashboardFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardFeed")
            .field("version", &*self.version.borrow())
            .field("dirty", &self.dirty)
            .finish_non_exhaustive()
    }
}

/// A feed and the source that answers from it; `version` is what `/api/stream` announces.
pub fn channel(identity: &str) -> (DashboardFeed, LeaderSource, watch::Receiver<u64>) {
    let (latest, latest_rx) = watch::channel(None);
    let (version, version_rx) = watch::channel(0u64);
    let feed = DashboardFeed {
        latest,
        version,
        dirty: false,
        last_publish: None,
        last_history: None,
        history: VecDeque::new(),
        history_shared: Arc::new(Vec::new()),
        events: EventLog::with_capacity(EVENTS_KEPT),
        events_changed: false,
        events_shared: Arc::new(Vec::new()),
    };
    let source = LeaderSource {
        latest: latest_rx,
        identity: identity.to_string(),
    };
    (feed, source, version_rx)
}

impl DashboardFeed {
    /// The state changed: it is published when due ([`DashboardFeed::due`]).
    pub fn changed(&mut self) {
        self.dirty = true;
    }

    /// Something happened (a bind, an eviction) for the Events page.
    pub fn event(&mut self, event: RunEvent) {
        self.events.push(event);
        self.events_changed = true;
        self.dirty = true;
    }

    /// When the next copy is due; `None`: nothing to publish.
    pub fn due(&self) -> Option<Instant> {
        if !self.dirty {
            return None;
        }
        Some(
            self.last_publish
                .map_or_else(Instant::now, |t| t + PUBLISH_EVERY),
        )
    }

    /// Publishes a copy of `scheduler` at `now` if one is due; cheap otherwise.
    pub fn publish_if_due(&mut self, scheduler: &Scheduler, now: Millis) {
        if self.due().is_some_and(|at| at <= Instant::now()) {
            self.publish(scheduler, now);
        }
    }

    /// Publishes a copy of `scheduler` at `now` (driver time).
    pub fn publish(&mut self, scheduler: &Scheduler, now: Millis) {
        let view = LeaderView {
            scheduler: scheduler.clone(),
            now,
        };
        let at = Instant::now();
        if self
            .last_history
            .is_none_or(|t| at.duration_since(t) >= HISTORY_EVERY)
        {
            self.last_history = Some(at);
            if self.history.len() == HISTORY_KEPT {
                self.history.pop_front();
            }
            self.history.push_back(UsagePoint::of(&view));
            self.history_shared = Arc::new(self.history.iter().cloned().collect());
        }
        if std::mem::take(&mut self.events_changed) {
            self.events_shared = Arc::new(self.events.iter().cloned().collect());
        }
        self.latest.send_replace(Some(Arc::new(Published {
            view: Mutex::new(view),
            events: self.events_shared.clone(),
            history: self.history_shared.clone(),
            answers: Mutex::new(HashMap::new()),
        })));
        self.version.send_modify(|v| *v += 1);
        self.dirty = false;
        self.last_publish = Some(at);
    }

    /// Leadership ended: the state is dropped, and the pages say this replica stands by.
    pub fn withdraw(&mut self) {
        self.latest.send_replace(None);
        self.version.send_modify(|v| *v += 1);
        self.dirty = false;
        self.last_publish = None;
        self.last_history = None;
        self.history.clear();
        self.history_shared = Arc::new(Vec::new());
        self.events = EventLog::with_capacity(EVENTS_KEPT);
        self.events_shared = Arc::new(Vec::new());
    }
}

fn poisoned<T>(_: T) -> ApiError {
    ApiError {
        status: 500,
        message: "an earlier answer panicked; the next state update starts afresh".into(),
    }
}

/// Answers the dashboard's `/api/...` paths from the latest copy of the leader's state.
pub struct LeaderSource {
    latest: watch::Receiver<Option<Arc<Published>>>,
    identity: String,
}

impl Source for LeaderSource {
    fn answer(&self, path: &str, query: Option<&str>) -> Result<String, ApiError> {
        // The copy is taken out of the channel at once: the leader never waits on it.
        let Some(published) = self.latest.borrow().clone() else {
            return Err(ApiError {
                status: 503,
                message: format!(
                    "standby: this replica ({}) is not the leader, or has not finished \
                     reading the cluster, so it has no state to show; the dashboard of the \
                     replica that holds the scheduler's Lease (its spec.holderIdentity) \
                     shows it",
                    self.identity
                ),
            });
        };
        if path.trim_end_matches('/') == "/api/times" {
            return Err(ApiError::not_found(
                "not found: /api/times: the live scheduler has no time slider (it shows now)",
            ));
        }
        let key = format!("{path}?{}", query.unwrap_or(""));
        if let Some(hit) = published.answers.lock().map_err(poisoned)?.get(&key) {
            return hit.clone();
        }
        let view = published.view.lock().map_err(poisoned)?;
        // Pages open in many browsers ask the same paths after each update: those that
        // waited for the lock take the answer the first one computed.
        if let Some(hit) = published.answers.lock().map_err(poisoned)?.get(&key) {
            return hit.clone();
        }
        let estimates = Estimates::declared();
        let predict = |targets: &[PodId]| {
            let deadline = Some(Deadline::after(PREDICT_BUDGET));
            live_view::predict(&view.scheduler, view.now, targets, deadline).ok()
        };
        let ctx = Context {
            estimates: &estimates,
            predict: &predict,
            events: &published.events,
            history: &published.history,
            source: "leader",
        };
        let result = answer(&*view, &ctx, path, query);
        drop(view);
        let mut answers = published.answers.lock().map_err(poisoned)?;
        if answers.len() >= CACHED_ANSWERS {
            answers.clear();
        }
        answers.insert(key, result.clone());
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_sim::scenarios::preemption_heavy;
    use kestrel_sim::{SimConfig, Simulation};
    use serde_json::Value;

    /// The simulator's answer over the same state, as the sim dashboard gives it.
    fn simulated(sim: &Simulation<'_>, path: &str) -> Value {
        let estimates = Estimates::declared();
        let predict = |_: &[PodId]| None;
        let ctx = Context {
            estimates: &estimates,
            predict: &predict,
            events: &[],
            history: &[],
            source: "leader",
        };
        serde_json::from_str(&answer(sim, &ctx, path, None).unwrap()).unwrap()
    }

    #[test]
    fn a_standby_says_so_and_a_leader_answers_as_the_simulator_does_coalesced() {
        let (mut feed, source, version) = channel("kestrel-0");
        let standby = source.answer("/api/summary", None).unwrap_err();
        assert_eq!(standby.status, 503);
        assert!(
            standby.message.contains("kestrel-0") && standby.message.contains("not the leader"),
            "{standby:?}"
        );
        let (cluster, workload) = preemption_heavy(7);
        let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
        sim.run_to(3_600_000).unwrap();
        assert!(feed.due().is_none(), "nothing changed yet");
        feed.changed();
        feed.publish_if_due(sim.scheduler(), sim.now());
        assert_eq!(*version.borrow(), 1);
        let map: Value = serde_json::from_str(&source.answer("/api/map", None).unwrap()).unwrap();
        assert!(
            map["counts"]["busy"].as_u64().unwrap() > 0,
            "{}",
            map["counts"]
        );
        for path in ["/api/summary", "/api/map", "/api/queues", "/api/pending"] {
            let live: Value = serde_json::from_str(&source.answer(path, None).unwrap()).unwrap();
            let sim = simulated(&sim, path);
            if path == "/api/queues" {
                // The leader keeps one usage point a minute; the simulator's are its stops.
                assert_eq!(live["page"], sim["page"]);
                assert_eq!(live["history"].as_array().unwrap().len(), 1);
            } else {
                assert_eq!(live, sim, "{path}");
            }
        }
        // Coalesced: a change right after a copy waits for the next due time.
        sim.run_to(7_200_000).unwrap();
        feed.changed();
        feed.publish_if_due(sim.scheduler(), sim.now());
        assert_eq!(*version.borrow(), 1);
        assert!(feed.due().unwrap() > Instant::now());
        let missing = source.answer("/api/pod/ml/ghost", None).unwrap_err();
        assert_eq!(missing.status, 404, "{missing:?}");
        assert_eq!(source.answer("/api/times", None).unwrap_err().status, 404);
        feed.withdraw();
        assert_eq!(*version.borrow(), 2);
        assert_eq!(source.answer("/api/map", None).unwrap_err().status, 503);
    }
}
