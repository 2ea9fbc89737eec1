//! `kestrel serve --dashboard-addr`: the dashboard over the leader's state.
//!
//! The scheduling loop ([`crate::driver::lead`]) owns the engine; it hands the dashboard a
//! copy through a [`DashboardFeed`] at most once per [`PUBLISH_EVERY`] while the state
//! changes (coalesced: many changes, one copy), and nothing while it does not. Publishing
//! replaces the latest copy in a watch channel and bumps the version `/api/stream`
//! announces: it never waits for an answer being computed or a browser reading. Answers
//! ([`LeaderSource`]) are the same functions the simulator's dashboard calls
//! ([`kestrel_view::dashboard::answer`]), over that copy, so the JSON has the same shape.
//! Predicted starts are forward runs of the simulator, which this crate does not link: the
//! caller hands them in ([`Predict`]).
//!
//! A standby (or a leader that lost its lease) has no state: it answers 503 saying so.

use crate::dashboard::Source;
use kestrel_core::{Millis, PodId, Scheduler};
use kestrel_view::dashboard::{answer, ApiError, Context, UsagePoint};
use kestrel_view::estimates::Estimates;
use kestrel_view::events::{EventLog, RunEvent};
use kestrel_view::explain_view::EngineAt;
use kestrel_view::predictions::{Deadline, Predictions};
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

/// Predicted starts of `targets` (pending pods) from a copy of the leader's engine at a
/// moment, within a wall-clock deadline; `None`: none could be made. The CLI hands in the
/// simulator's forward runs (`kestrel serve`'s `live_view::predict`).
pub type Predict = Arc<
    dyn Fn(&Scheduler, Millis, &[PodId], Option<Deadline>) -> Option<Predictions> + Send + Sync,
>;

/// One published copy: the engine (its caches are not shared between threads, so answers
/// on one copy are taken one at a time), what happened, the usage history, and answers
/// already computed.
struct Published {
    view: Mutex<EngineAt>,
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

/// A feed and the source that answers from it (predicting starts with `predict`); `version`
/// is what `/api/stream` announces.
pub fn channel(
    identity: &str,
    predict: Predict,
) -> (DashboardFeed, LeaderSource, watch::Receiver<u64>) {
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
        predict,
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
        let view = EngineAt {
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
    predict: Predict,
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
            (self.predict)(&view.scheduler, view.now, targets, deadline)
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
