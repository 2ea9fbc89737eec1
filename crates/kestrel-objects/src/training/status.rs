//! A job's state, conditions and per-role pod counts.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// The states, in the order a job goes through them.
pub const STATES: [&str; 6] = [
    "Created",
    "Queued",
    "Running",
    "Restarting",
    "Succeeded",
    "Failed",
];

/// Sets the current state: its condition True, the other states' False (times kept when
/// unchanged).
pub fn set_state(
    status: &mut TrainingJobStatus,
    state: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    status.state = Some(state.to_string());
    for s in STATES {
        let on = s == state;
        let (reason, message) = if on { (reason, message) } else { ("", "") };
        set_condition(status, s, on, reason, message, now);
    }
}

/// Sets one condition; its transition time moves only when its status does.
pub fn set_condition(
    status: &mut TrainingJobStatus,
    kind: &str,
    on: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let value = if on { "True" } else { "False" };
    let given = reason;
    let reason = if reason.is_empty() { kind } else { reason };
    // States never entered are not listed as False.
    if !on && given.is_empty() && !status.conditions.iter().any(|c| c.type_ == kind) {
        return;
    }
    match status.conditions.iter_mut().find(|c| c.type_ == kind) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Time(now);
            }
            c.status = value.into();
            // A state left (no reason given) keeps why it was entered: the last
            // restart's cause stays readable.
            if !given.is_empty() {
                c.reason = reason.into();
                c.message = message.into();
            }
        }
        None => status.conditions.push(Condition {
            type_: kind.into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
}

pub fn is_finished(status: &TrainingJobStatus) -> bool {
    matches!(status.state.as_deref(), Some("Succeeded" | "Failed"))
}

pub(super) fn replica_statuses(
    plan: &Plan,
    pods: &[&ObservedPod],
) -> BTreeMap<String, ReplicaStatus> {
    plan.roles
        .iter()
        .map(|r| {
            let mut s = ReplicaStatus::default();
            for p in pods.iter().filter(|p| p.role == r.name) {
                match p.phase {
                    PodPhase::Pending => s.pending += 1,
                    PodPhase::Running => s.running += 1,
                    PodPhase::Succeeded => s.succeeded += 1,
                    PodPhase::Failed => s.failed += 1,
                }
            }
            (r.name.clone(), s)
        })
        .collect()
}
