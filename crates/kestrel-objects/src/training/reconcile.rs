//! The next step for a job: which pods to create or delete, which events to record.

use super::*;
use crate::gangs::KESTREL_ROLE_LABEL;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

// ---- reconcile: what to do next --------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// A pod of the job as the controller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedPod {
    pub name: String,
    pub attempt: i32,
    pub role: String,
    pub phase: PodPhase,
    pub bound: bool,
    /// Being deleted.
    pub deleting: bool,
    /// The failure: (container, exit code) of the first container that exited non-zero.
    pub exit: Option<(String, i32)>,
    /// `status.reason` (`Evicted`, `Preempted`, ...) of a failed pod.
    pub reason: Option<String>,
}

impl ObservedPod {
    /// Reads a pod the job labelled; `None` for others.
    pub fn read(pod: &Pod, job: &str) -> Option<ObservedPod> {
        let labels = pod.metadata.labels.as_ref()?;
        if labels.get(JOB_LABEL).map(String::as_str) != Some(job) {
            return None;
        }
        let attempt = labels.get(ATTEMPT_LABEL)?.parse().ok()?;
        let role = match labels.get(KESTREL_ROLE_LABEL)?.as_str() {
            "master" => MASTER,
            _ => WORKER,
        };
        let status = pod.status.as_ref();
        let phase = match status.and_then(|s| s.phase.as_deref()) {
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            _ => PodPhase::Pending,
        };
        let exit = status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .find_map(|c| {
                let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                (code != 0).then(|| (c.name.clone(), code))
            });
        Some(ObservedPod {
            name: pod.metadata.name.clone()?,
            attempt,
            role: role.into(),
            phase,
            bound: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some(),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            exit,
            reason: status.and_then(|s| s.reason.clone()),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create these (role, index) pods of the current attempt (and the Service and
    /// PodGroup, if missing).
    CreatePods(Vec<(String, u32)>),
    DeletePods(Vec<String>),
    /// `ttlSecondsAfterFinished` passed.
    DeleteJob,
}

/// An event to record on the job: (type `Normal`/`Warning`, reason, note).
pub type JobEvent = (&'static str, &'static str, String);

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub actions: Vec<Action>,
    pub status: TrainingJobStatus,
    pub events: Vec<JobEvent>,
    /// The job just finished (Succeeded or Failed): the tracking run is closed.
    pub finished: bool,
    /// The gang restarted in this step.
    pub restarted: bool,
}

/// Whether a failure restarts the gang (else it fails the job): evictions always do;
/// `ExitCode`: codes 128-255 (killed by a signal) do, 1-127 (the program's own error) do
/// not; a failure without an exit code (a lost node) does.
pub fn retryable(policy: RestartPolicy, exit: Option<i32>, evicted: bool) -> bool {
    if evicted {
        return true;
    }
    match policy {
        RestartPolicy::OnFailure | RestartPolicy::Always => true,
        RestartPolicy::Never => false,
        RestartPolicy::ExitCode => exit.is_none_or(|c| !(1..=127).contains(&c)),
    }
}

pub(super) fn secs(t: &Time, now: Timestamp) -> i64 {
    now.as_second() - t.0.as_second()
}

/// The next step for a job: `status` as it stands, `pods` all the pods carrying its label,
/// `waiting` the scheduler's explanation of why the gang is not placed (from its
/// PodGroup), `now` the clock.
pub fn reconcile(
    plan: &Plan,
    status: &TrainingJobStatus,
    pods: &[ObservedPod],
    waiting: Option<&str>,
    now: Timestamp,
) -> Decision {
    let mut next = status.clone();
    let mut d = Decision {
        actions: Vec::new(),
        status: TrainingJobStatus::default(),
        events: Vec::new(),
        finished: false,
        restarted: false,
    };
    let attempt = status.restarts;
    let current: Vec<&ObservedPod> = pods.iter().filter(|p| p.attempt == attempt).collect();
    next.replica_statuses = replica_statuses(plan, &current);

    if is_finished(status) {
        let done = status.completion_time.as_ref().map_or(0, |t| secs(t, now));
        if plan
            .ttl_seconds_after_finished
            .is_some_and(|ttl| done >= ttl)
        {
            d.actions.push(Action::DeleteJob);
        } else {
            let clean: Vec<String> = pods
                .iter()
                .filter(|p| !p.deleting)
                .filter(|p| match plan.clean_pod_policy {
                    CleanPodPolicy::All => true,
                    CleanPodPolicy::Running => {
                        matches!(p.phase, PodPhase::Pending | PodPhase::Running)
                    }
                    CleanPodPolicy::None => false,
                })
                .map(|p| p.name.clone())
                .collect();
            if !clean.is_empty() {
                d.actions.push(Action::DeletePods(clean));
            }
        }
        d.status = next;
        return d;
    }

    // Pods of an earlier attempt go first; the next attempt starts once they are gone,
    // so that no two attempts hold GPUs or rendezvous at once.
    let stale: Vec<String> = pods
        .iter()
        .filter(|p| p.attempt != attempt && !p.deleting)
        .map(|p| p.name.clone())
        .collect();
    if pods.iter().any(|p| p.attempt != attempt) {
        if !stale.is_empty() {
            d.actions.push(Action::DeletePods(stale));
        }
        d.status = next;
        return d;
    }

    let finish = |next: &mut TrainingJobStatus,
                  d: &mut Decision,
                  state: &str,
                  reason: &str,
                  message: String| {
        set_state(next, state, reason, &message, now);
        next.completion_time = Some(Time(now));
        next.waiting_reason = None;
        d.finished = true;
        let kind = if state == "Succeeded" {
            "Normal"
        } else {
            "Warning"
        };
        let reason: &'static str = match reason {
            "Succeeded" => "Succeeded",
            "BackoffLimitExceeded" => "BackoffLimitExceeded",
            "DeadlineExceeded" => "DeadlineExceeded",
            _ => "PermanentFailure",
        };
        d.events.push((kind, reason, message));
    };
    let clean = |d: &mut Decision, pods: &[&ObservedPod], all: bool| {
        let names: Vec<String> = pods
            .iter()
            .filter(|p| !p.deleting)
            .filter(|p| all || matches!(p.phase, PodPhase::Pending | PodPhase::Running))
            .map(|p| p.name.clone())
            .collect();
        if !names.is_empty() {
            d.actions.push(Action::DeletePods(names));
        }
    };
    let clean_all = plan.clean_pod_policy == CleanPodPolicy::All;
    let clean_some = plan.clean_pod_policy != CleanPodPolicy::None;

    // The master's success is the job's (workers may still be winding down).
    if current
        .iter()
        .any(|p| p.role == MASTER && p.phase == PodPhase::Succeeded)
    {
        finish(
            &mut next,
            &mut d,
            "Succeeded",
            "Succeeded",
            format!("the Master finished after {attempt} restart(s)"),
        );
        if clean_some {
            clean(&mut d, &current, clean_all);
        }
        d.status = next;
        return d;
    }

    if let (Some(deadline), Some(start)) = (plan.active_deadline_seconds, &status.start_time) {
        if secs(start, now) >= deadline {
            finish(
                &mut next,
                &mut d,
                "Failed",
                "DeadlineExceeded",
                format!("running longer than runPolicy.activeDeadlineSeconds ({deadline}s)"),
            );
            if clean_some {
                clean(&mut d, &current, clean_all);
            }
            d.status = next;
            return d;
        }
    }

    // A failed pod, or one of a fully created attempt that vanished (evicted, preempted,
    // deleted by hand).
    let created = status.created_attempt == Some(attempt);
    let failed = current.iter().find(|p| p.phase == PodPhase::Failed);
    let missing: Vec<(String, u32)> = plan
        .members()
        .into_iter()
        .filter(|(role, i)| {
            let name = plan.pod_name(role, *i);
            !current.iter().any(|p| p.name == name)
        })
        .collect();
    let lost = created && !missing.is_empty();
    let deleting = current
        .iter()
        .find(|p| p.deleting && p.phase != PodPhase::Succeeded);
    if failed.is_some() || lost || (created && deleting.is_some()) {
        let (retry, why) = match failed {
            Some(p) => {
                let evicted = p.reason.as_deref().is_some_and(|r| {
                    matches!(
                        r,
                        "Evicted" | "Preempted" | "Shutdown" | "Terminated" | "DeadlineExceeded"
                    )
                });
                let policy = plan
                    .roles
                    .iter()
                    .find(|r| r.name == p.role)
                    .map_or(RestartPolicy::ExitCode, |r| r.restart_policy);
                let code = p.exit.as_ref().map(|(_, c)| *c);
                let why = match (&p.exit, &p.reason) {
                    (Some((c, code)), _) => {
                        format!(
                            "pod {} failed: container {c} exited with code {code}",
                            p.name
                        )
                    }
                    (None, Some(r)) => format!("pod {} failed: {r}", p.name),
                    (None, None) => format!("pod {} failed", p.name),
                };
                (retryable(policy, code, evicted), why)
            }
            None => {
                let name = match deleting {
                    Some(p) => p.name.clone(),
                    None => plan.pod_name(&missing[0].0, missing[0].1),
                };
                (true, format!("pod {name} was deleted or evicted"))
            }
        };
        if !retry {
            finish(
                &mut next,
                &mut d,
                "Failed",
                "PermanentFailure",
                format!("{why} (1-127: the program's own error, not retried); fix it and submit the job again"),
            );
            if clean_some {
                clean(&mut d, &current, clean_all);
            }
        } else if attempt >= plan.backoff_limit {
            finish(
                &mut next,
                &mut d,
                "Failed",
                "BackoffLimitExceeded",
                format!(
                    "{why}; the gang restarted {attempt} time(s), runPolicy.backoffLimit is {}",
                    plan.backoff_limit
                ),
            );
            if clean_some {
                clean(&mut d, &current, clean_all);
            }
        } else {
            next.restarts = attempt + 1;
            next.waiting_reason = None;
            let message = format!(
                "{why}; restarting the whole gang (restart {} of {})",
                attempt + 1,
                plan.backoff_limit
            );
            set_state(&mut next, "Restarting", "GangRestart", &message, now);
            d.events.push(("Warning", "Restarting", message));
            d.restarted = true;
            let names: Vec<String> = current
                .iter()
                .filter(|p| !p.deleting)
                .map(|p| p.name.clone())
                .collect();
            if !names.is_empty() {
                d.actions.push(Action::DeletePods(names));
            }
        }
        d.status = next;
        return d;
    }

    if !missing.is_empty() {
        if next.start_time.is_none() {
            next.start_time = Some(Time(now));
        }
        if status.state.is_none() {
            let message = format!("creating {} pod(s) of one gang", plan.pods());
            set_state(&mut next, "Created", "PodsCreated", &message, now);
            d.events.push(("Normal", "Created", message));
        }
        next.created_attempt = Some(attempt);
        d.actions.push(Action::CreatePods(missing));
        d.status = next;
        return d;
    }

    let all_running = current.iter().all(|p| p.phase == PodPhase::Running);
    if all_running {
        if status.state.as_deref() != Some("Running") {
            let message = format!("all {} pods running (attempt {attempt})", plan.pods());
            set_state(&mut next, "Running", "GangRunning", &message, now);
            d.events.push(("Normal", "Running", message));
        }
        if next.running_time.is_none() {
            next.running_time = Some(Time(now));
        }
        next.waiting_reason = None;
    } else if current.iter().any(|p| !p.bound) {
        let reason = waiting.unwrap_or("waiting for the scheduler to place the gang");
        if status.state.as_deref() != Some("Queued")
            || status.waiting_reason.as_deref() != Some(reason)
        {
            set_state(&mut next, "Queued", "WaitingForGang", reason, now);
        }
        next.waiting_reason = Some(reason.to_string());
    } else {
        next.waiting_reason = None;
    }
    d.status = next;
    d
}
