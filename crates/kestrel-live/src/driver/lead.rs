//! Leading: [`run`] waits for the lease and calls [`lead`], which starts the watches,
//! applies their events, runs a cycle when something changed, and hands the decisions to
//! the [`WriteQueue`]; losing the lease ends it and drops its state.

use super::apply::apply_change;
use super::listings::Synced;
use super::watches::start_watches;
use super::writes::{Answers, WriteQueue};
use super::DriverConfig;
use crate::api::ApiWriter;
use crate::index::{LiveIndex, REASON_KINDS};
use crate::metrics::Metrics;
use kube::Client;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Duration, Instant};

/// How often a leader whose listings are incomplete says which.
const LISTING_REPORT_EVERY: Duration = Duration::from_secs(10);

/// Why [`lead`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    LostLease,
    Shutdown,
}

/// Schedules while `leader` is true: watches, rebuilds, cycles, binds.
pub async fn lead(
    client: Client,
    writer: ApiWriter,
    config: &DriverConfig,
    metrics: &Metrics,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> Ended {
    let mut watches = JoinSet::new();
    let (stores, mut changes) = start_watches(&client, &mut watches);
    let mut state = LiveIndex::new(config.scheduler, &config.scheduler_name);
    let wall_origin = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    state.set_wall_origin(wall_origin);
    // The dashboard's pages show this leader's moments as UTC wall-clock times.
    let mut dashboard = config.dashboard.as_ref().map(|feed| {
        kestrel_view::explain_view::show_wall_clock(wall_origin);
        DashboardGuard(feed.clone())
    });
    let mut synced = Synced::default();
    let mut writes = WriteQueue::default();
    let mut dirty_since: Option<Instant> = None;
    let started = Instant::now();
    let mut next_listing_report = started + LISTING_REPORT_EVERY;
    let mut last_gauges = Instant::now() - Duration::from_secs(60);
    let ended = loop {
        // A cycle after a change (debounced), or when an eviction or an engine wake-up
        // (a minimum runtime or preemption delay ending) is due.
        let timer = state
            .next_timer()
            .map(|at| started + Duration::from_millis(at));
        let deadline = match (dirty_since.map(|t| t + config.debounce), timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .filter(|_| synced.all());
        let publish_at = dashboard
            .as_mut()
            .and_then(|d| d.feed().due())
            .filter(|_| synced.all())
            .map(Instant::from_std);
        let in_flight = writes.in_flight();
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => break Ended::Shutdown,
            _ = leadership(&mut leader, false) => break Ended::LostLease,
            Some(done) = writes.join_next(), if in_flight => {
                let answers = Answers {
                    state: &mut state,
                    metrics,
                    dashboard: dashboard.as_mut(),
                    started,
                };
                if writes.complete(done, answers) {
                    dirty_since.get_or_insert_with(Instant::now);
                }
            }
            Some(change) = changes.recv() => {
                let was_synced = synced.all();
                synced.note(&change);
                state.set_time(started.elapsed().as_millis() as u64);
                if apply_change(&mut state, &stores, change) {
                    dirty_since.get_or_insert_with(Instant::now);
                    if let Some(d) = dashboard.as_mut() {
                        d.feed().changed();
                    }
                }
                if synced.all() && !was_synced {
                    tracing::info!(
                        nodes = state.scheduler().cluster().len(),
                        pods = state.tracked_pods(),
                        took_ms = started.elapsed().as_millis() as u64,
                        "state rebuilt from the listing; scheduling"
                    );
                }
                if synced.all() {
                    metrics.ready.store(true, Ordering::Relaxed);
                }
            }
            _ = tokio::time::sleep_until(next_listing_report), if !synced.all() => {
                next_listing_report += LISTING_REPORT_EVERY;
                tracing::warn!(
                    waiting_s = started.elapsed().as_secs(),
                    kinds = %synced.missing().join(", "),
                    "not scheduling yet: these listings have not completed (see the watch errors above; /readyz stays not ready)"
                );
            }
            _ = sleep_until(deadline) => {
                dirty_since = None;
                let t = std::time::Instant::now();
                let out = state.cycle(started.elapsed().as_millis() as u64);
                metrics.cycle_duration.observe(t.elapsed().as_secs_f64());
                if let Some(d) = dashboard.as_mut() {
                    d.feed().changed();
                }
                if !out.binds.is_empty() || !out.unschedulable.is_empty() {
                    tracing::debug!(binds = out.binds.len(), unschedulable = out.unschedulable.len(), "cycle");
                }
                writes.push_cycle(out);
                if last_gauges.elapsed() >= Duration::from_secs(1) {
                    last_gauges = Instant::now();
                    writes.push_queue_statuses(state.queue_statuses());
                    let pending = state.pending_by_reason();
                    for kind in REASON_KINDS {
                        metrics.pending.get_or_create(&vec![("reason", kind)]).set(pending[kind]);
                    }
                }
            }
            // Wakes the loop when a dashboard copy is due; it is taken below.
            _ = sleep_until(publish_at) => {}
        }
        // Here too when changes never stop (the select above is biased towards them).
        if let Some(d) = dashboard.as_mut().filter(|_| synced.all()) {
            let mut feed = d.feed();
            if feed.due().is_some_and(|at| at <= std::time::Instant::now()) {
                let t = std::time::Instant::now();
                feed.publish(state.scheduler(), started.elapsed().as_millis() as u64);
                metrics
                    .dashboard_publish_duration
                    .observe(t.elapsed().as_secs_f64());
            }
        }
        // Warnings about other projects' objects: logged, and posted on the object.
        for warning in state.take_field_warnings() {
            tracing::warn!(warning = %warning, reason = warning.reason, "another project's object is not read as written (a Warning event on the object says so)");
            writes.push_field_warning(warning);
        }
        writes.send(&writer, config.max_in_flight, &leader);
    };
    writes.abort_all();
    watches.abort_all();
    metrics.ready.store(false, Ordering::Relaxed);
    ended
}

/// The dashboard's feed while this replica leads: dropped (however `lead` ends), the
/// pages say this replica stands by.
pub(super) struct DashboardGuard(Arc<std::sync::Mutex<crate::live_dashboard::DashboardFeed>>);

impl DashboardGuard {
    /// Only the scheduling loop locks the feed: this never waits. A panic while it was
    /// held leaves the feed as it was, which is still whole.
    pub(super) fn feed(
        &mut self,
    ) -> std::sync::MutexGuard<'_, crate::live_dashboard::DashboardFeed> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for DashboardGuard {
    fn drop(&mut self) {
        self.feed().withdraw();
    }
}

/// Waits until leadership is `want`. A closed channel keeps its last value for good (a
/// replica without leader election leads until shutdown): it never busy-loops.
async fn leadership(leader: &mut watch::Receiver<bool>, want: bool) {
    if leader.wait_for(|l| *l == want).await.is_err() && *leader.borrow() != want {
        std::future::pending::<()>().await;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
/// Runs the scheduler until shutdown: waits for the lease, leads, and starts over when
/// the lease is lost.
pub async fn run(
    client: Client,
    writer: ApiWriter,
    config: DriverConfig,
    metrics: Arc<Metrics>,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        metrics.leader.set(0);
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            _ = leadership(&mut leader, true) => {}
        }
        tracing::info!("leading: rebuilding state from a fresh listing");
        metrics.leader.set(1);
        let ended = lead(
            client.clone(),
            writer.clone(),
            &config,
            &metrics,
            leader.clone(),
            shutdown.clone(),
        )
        .await;
        metrics.leader.set(0);
        // Shutting down releases the lease too: that is no loss worth a warning.
        if ended == Ended::Shutdown || *shutdown.borrow() {
            return;
        }
        tracing::warn!("lease lost: stopped binding, state dropped");
    }
}
