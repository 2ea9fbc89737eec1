//! The leader's API writes: [`WriteQueue`] holds what a cycle decided until a slot is
//! free, sends it in a fixed order (binds, checkpoint requests, nominations, evictions,
//! reports, PodGroup and queue writes, `Scheduled` events), and reads each write's answer
//! back into the index, the metrics and the dashboard.

use super::lead::DashboardGuard;
use crate::api::ApiWriter;
use crate::index::{
    BindOutcome, BindWrite, CheckpointWrite, CycleOutput, EvictWrite, GroupEventWrite,
    GroupStatusWrite, LiveIndex, NominationWrite, QueueStatusWrite, StatusWrite,
};
use crate::metrics::Metrics;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kestrel_objects::warning::FieldWarning;
use kestrel_view::events::RunEvent;
use std::collections::VecDeque;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};
use tokio::time::{Duration, Instant};

/// A write's answer, with the write.
pub(super) enum Done {
    Bind(BindWrite, BindOutcome),
    Evict(EvictWrite, Result<(), String>),
    CheckpointRequest(CheckpointWrite, Result<(), String>),
    Nomination(NominationWrite, Result<(), String>),
    Report(StatusWrite, Result<(), String>),
    Scheduled(BindWrite, Result<(), String>),
    GroupStatus(GroupStatusWrite, Result<Time, String>),
    GroupEvent(GroupEventWrite, Result<(), String>),
    QueueStatus(QueueStatusWrite, Result<(), String>),
    FieldWarning(FieldWarning, Result<(), String>),
}

/// PodGroup and queue status writes, and events about objects, waiting for a slot.
enum GroupWrite {
    Status(GroupStatusWrite),
    Event(GroupEventWrite),
    Queue(QueueStatusWrite),
    /// A Warning event on another project's object.
    FieldWarning(FieldWarning),
}

/// API writes that failed, logged as they happen but at most one line per
/// [`FAILURE_REPORT_EVERY`]: an API server that goes away fails every write in flight, and
/// the log should say so once, with a count, not once per pod.
#[derive(Default)]
struct WriteFailures {
    last_report: Option<Instant>,
    since_report: u64,
}

const FAILURE_REPORT_EVERY: Duration = Duration::from_secs(10);

impl WriteFailures {
    fn note(&mut self, what: &str, object: String, error: impl std::fmt::Display) {
        self.since_report += 1;
        let now = Instant::now();
        if self
            .last_report
            .is_some_and(|t| now.duration_since(t) < FAILURE_REPORT_EVERY)
        {
            return;
        }
        let failed = std::mem::take(&mut self.since_report);
        self.last_report = Some(now);
        let error = crate::api::describe_write_error(&error.to_string());
        if failed > 1 {
            tracing::warn!(object = %object, error = %error, failed_writes = failed, "{what} (and {} other API writes failed since the last report)", failed - 1);
        } else {
            tracing::warn!(object = %object, error = %error, "{what}");
        }
    }
}

/// Where a write's answer goes: the index, the metrics, the dashboard's feed.
pub(super) struct Answers<'a> {
    pub state: &'a mut LiveIndex,
    pub metrics: &'a Metrics,
    pub dashboard: Option<&'a mut DashboardGuard>,
    /// When this leader started (the dashboard's events are timed from it).
    pub started: Instant,
}

/// The writes waiting for a slot, one queue per kind, and those in flight.
#[derive(Default)]
pub(super) struct WriteQueue {
    binds: VecDeque<BindWrite>,
    checkpoint_requests: VecDeque<CheckpointWrite>,
    nominations: VecDeque<NominationWrite>,
    evictions: VecDeque<EvictWrite>,
    reports: VecDeque<StatusWrite>,
    group_writes: VecDeque<GroupWrite>,
    /// `Scheduled` events of bound pods: written after everything else.
    scheduled: VecDeque<BindWrite>,
    in_flight: JoinSet<Done>,
    failures: WriteFailures,
}

impl WriteQueue {
    /// Queues what a cycle decided.
    pub fn push_cycle(&mut self, out: CycleOutput) {
        self.binds.extend(out.binds);
        self.evictions.extend(out.evictions);
        self.checkpoint_requests.extend(out.checkpoint_requests);
        self.nominations.extend(out.nominations);
        self.reports.extend(out.unschedulable);
        self.group_writes
            .extend(out.group_events.into_iter().map(GroupWrite::Event));
        self.group_writes
            .extend(out.group_status.into_iter().map(GroupWrite::Status));
    }

    /// Queues queue objects' statuses.
    pub fn push_queue_statuses(&mut self, statuses: Vec<QueueStatusWrite>) {
        self.group_writes
            .extend(statuses.into_iter().map(GroupWrite::Queue));
    }

    /// Queues a Warning event on another project's object.
    pub fn push_field_warning(&mut self, warning: FieldWarning) {
        self.group_writes
            .push_back(GroupWrite::FieldWarning(warning));
    }

    /// Whether writes are in flight (only then does [`Self::join_next`] answer).
    pub fn in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// The next write in flight to be answered.
    pub async fn join_next(&mut self) -> Option<Result<Done, JoinError>> {
        self.in_flight.join_next().await
    }

    /// Stops the writes in flight (the lease is gone or the scheduler shuts down).
    pub fn abort_all(&mut self) {
        self.in_flight.abort_all();
    }

    /// Keeps the pipeline full: binds first (a gang's binds are consecutive, so they go
    /// out together, `max_in_flight` at a time), then preemptions, then reports; nothing
    /// once the lease is gone.
    pub fn send(
        &mut self,
        writer: &ApiWriter,
        max_in_flight: usize,
        leader: &watch::Receiver<bool>,
    ) {
        while self.in_flight.len() < max_in_flight && *leader.borrow() {
            let writer = writer.clone();
            if let Some(write) = self.binds.pop_front() {
                let leader = leader.clone();
                self.in_flight.spawn(async move {
                    let outcome = writer.bind(&write, || *leader.borrow()).await;
                    Done::Bind(write, outcome)
                });
            } else if let Some(write) = self.checkpoint_requests.pop_front() {
                self.in_flight.spawn(async move {
                    let result = writer
                        .request_checkpoint(&write)
                        .await
                        .map_err(|e| e.to_string());
                    Done::CheckpointRequest(write, result)
                });
            } else if let Some(write) = self.nominations.pop_front() {
                self.in_flight.spawn(async move {
                    let result = writer.nominate(&write).await.map_err(|e| e.to_string());
                    Done::Nomination(write, result)
                });
            } else if let Some(write) = self.evictions.pop_front() {
                self.in_flight.spawn(async move {
                    let result = writer.evict(&write).await.map_err(|e| e.to_string());
                    Done::Evict(write, result)
                });
            } else if let Some(write) = self.reports.pop_front() {
                self.in_flight.spawn(async move {
                    let result = writer
                        .report_unschedulable(&write)
                        .await
                        .map_err(|e| e.to_string());
                    Done::Report(write, result)
                });
            } else if let Some(write) = self.group_writes.pop_front() {
                self.in_flight
                    .spawn(async move { send_group_write(&writer, write).await });
            } else if let Some(write) = self.scheduled.pop_front() {
                self.in_flight.spawn(async move {
                    let result = writer
                        .report_scheduled(&write)
                        .await
                        .map_err(|e| e.to_string());
                    Done::Scheduled(write, result)
                });
            } else {
                break;
            }
        }
    }

    /// Reads a write's answer back. Returns whether the index wants a cycle (a requeued
    /// pod, or a gang whose status may now change).
    pub fn complete(&mut self, done: Result<Done, JoinError>, to: Answers<'_>) -> bool {
        let Answers {
            state,
            metrics,
            mut dashboard,
            started,
        } = to;
        let failures = &mut self.failures;
        match done {
            Ok(Done::Bind(write, outcome)) => {
                let label = match &outcome {
                    BindOutcome::Bound => "bound",
                    BindOutcome::PodGone => "pod_gone",
                    BindOutcome::Conflict(_) => "conflict",
                    BindOutcome::Retry(why) => {
                        failures.note(
                            "bind failed; requeued",
                            format!("pod {}/{} on {}", write.namespace, write.name, write.node),
                            why,
                        );
                        "retry"
                    }
                };
                metrics.binds.get_or_create(&vec![("result", label)]).inc();
                let bound = outcome == BindOutcome::Bound;
                state.bind_result(write.id, outcome);
                if let Some(d) = dashboard.as_mut() {
                    let mut feed = d.feed();
                    feed.changed();
                    if bound {
                        feed.event(RunEvent {
                            at: started.elapsed().as_millis() as u64,
                            kind: "bind",
                            pod: Some(format!("{}/{}", write.namespace, write.name)),
                            node: Some(write.node.clone()),
                            gpu_hours: None,
                            detail: write
                                .gpu_indices
                                .as_ref()
                                .map(|g| format!("GPUs {g}"))
                                .unwrap_or_default(),
                        });
                    }
                }
                if bound {
                    self.scheduled.push_back(write);
                }
                return !bound || state.groups_changed();
            }
            Ok(Done::Evict(write, result)) => {
                let label = match &result {
                    Ok(()) => "ok",
                    Err(e) => {
                        failures.note(
                            "could not evict the preemption victim; trying again shortly",
                            format!("pod {}/{}", write.namespace, write.name),
                            e,
                        );
                        "error"
                    }
                };
                metrics
                    .evictions
                    .get_or_create(&vec![("result", label)])
                    .inc();
                if let (Some(d), Ok(())) = (dashboard.as_mut(), &result) {
                    d.feed().event(RunEvent {
                        at: started.elapsed().as_millis() as u64,
                        kind: "eviction",
                        pod: Some(format!("{}/{}", write.namespace, write.name)),
                        node: None,
                        gpu_hours: None,
                        detail: write.message.clone(),
                    });
                }
                state.eviction_result(&write, result);
            }
            Ok(Done::Nomination(write, result)) => {
                if let Err(e) = result {
                    failures.note(
                        "could not write the nominated node",
                        format!("pod {}/{} on {}", write.namespace, write.name, write.node),
                        &e,
                    );
                }
            }
            Ok(Done::CheckpointRequest(write, result)) => {
                if let Err(e) = result {
                    failures.note("could not ask the victim to checkpoint; it is evicted when its grace is over", format!("pod {}/{}", write.namespace, write.name), &e);
                }
            }
            Ok(Done::Report(write, result)) => {
                let label = if let Err(e) = result {
                    failures.note(
                        "could not report why the pod waits",
                        format!("pod {}/{}", write.namespace, write.name),
                        &e,
                    );
                    "error"
                } else {
                    "ok"
                };
                metrics
                    .status_reports
                    .get_or_create(&vec![("result", label)])
                    .inc();
            }
            Ok(Done::Scheduled(write, result)) => {
                let label = if let Err(e) = result {
                    tracing::debug!(pod = %format!("{}/{}", write.namespace, write.name), error = %e, "could not record the Scheduled event");
                    "error"
                } else {
                    "ok"
                };
                metrics
                    .scheduled_events
                    .get_or_create(&vec![("result", label)])
                    .inc();
            }
            Ok(Done::GroupStatus(write, result)) => {
                let result = result.map_err(|e| {
                    failures.note(
                        "could not write the PodGroup status; written again at its next change",
                        format!("PodGroup {}/{}", write.namespace, write.name),
                        &e,
                    );
                });
                state.group_status_result(&write, result);
            }
            Ok(Done::QueueStatus(write, result)) => {
                if let Err(e) = &result {
                    failures.note(
                        "could not write the queue status; written again shortly",
                        format!("{} {}", write.kind, write.name),
                        e,
                    );
                }
                state.queue_status_result(&write, result.is_ok());
            }
            Ok(Done::FieldWarning(warning, result)) => {
                if let Err(e) = result {
                    failures.note(
                        "could not post the warning event",
                        warning.object.label(),
                        &e,
                    );
                }
            }
            Ok(Done::GroupEvent(write, result)) => {
                if let Err(e) = result {
                    failures.note(
                        "could not post the PodGroup event",
                        format!("PodGroup {}/{}", write.namespace, write.name),
                        &e,
                    );
                }
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => tracing::error!(error = %e, "API task panicked"),
        }
        false
    }
}

/// Sends a PodGroup or queue write, or an event about an object.
async fn send_group_write(writer: &ApiWriter, write: GroupWrite) -> Done {
    match write {
        GroupWrite::Status(write) => {
            let result = writer
                .apply_pod_group_status(&write)
                .await
                .map_err(|e| e.to_string());
            Done::GroupStatus(write, result)
        }
        GroupWrite::Queue(write) => {
            let result = writer
                .apply_queue_status(&write)
                .await
                .map_err(|e| e.to_string());
            Done::QueueStatus(write, result)
        }
        GroupWrite::FieldWarning(warning) => {
            let result = writer
                .report_field_warning(&warning)
                .await
                .map_err(|e| e.to_string());
            Done::FieldWarning(warning, result)
        }
        GroupWrite::Event(write) => {
            let result = writer
                .report_pod_group(&write)
                .await
                .map_err(|e| e.to_string());
            Done::GroupEvent(write, result)
        }
    }
}
