//! The run's event log, kept only when asked ([`super::Simulation::record_events`]): binds,
//! preemptions with the GPU-hours their victims lost, checkpoint requests, evictions and
//! cluster changes (cordons, drains, nodes added and removed), for the dashboard's Events
//! page. Off, it costs one branch per event.

use super::Simulation;
use crate::workload::ClusterChange;
use kestrel_core::{Binding, Millis, PodId, Preemption};
use serde::Serialize;

/// One thing that happened, named as users name it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEvent {
    /// Milliseconds since the start (driver time on a live cluster).
    pub at: Millis,
    /// `bind`, `preemption`, `checkpoint`, `eviction`, `drain`, `cordon`, `uncordon`,
    /// `node-added`, `node-removed`.
    pub kind: &'static str,
    /// `namespace/name` of the pod concerned (the preemptor for a preemption).
    pub pod: Option<String>,
    pub node: Option<String>,
    /// GPU-hours of work lost: an eviction's, or a preemption's victims' together as
    /// reckoned when they were chosen (work since their last checkpoint).
    pub gpu_hours: Option<f64>,
    /// The rest in words: a preemption's victims, a bind's GPUs.
    pub detail: String,
}

/// A bounded log: past `capacity` the oldest entries go, so a long run or a long-lived
/// leader keeps what a page can show.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    entries: std::collections::VecDeque<RunEvent>,
    capacity: usize,
    /// Entries dropped from the front so far (what a client's "since" counts against).
    dropped: u64,
}

impl EventLog {
    pub fn with_capacity(capacity: usize) -> Self {
        EventLog {
            entries: std::collections::VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    pub fn push(&mut self, event: RunEvent) {
        if self.capacity == 0 {
            return;
        }
        if self.entries.len() == self.capacity {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(event);
    }

    /// Events up to and including `at`, newest last.
    pub fn until(&self, at: Millis) -> impl Iterator<Item = &RunEvent> {
        self.entries.iter().take_while(move |e| e.at <= at)
    }

    pub fn iter(&self) -> impl Iterator<Item = &RunEvent> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries pushed in all, kept or not.
    pub fn total(&self) -> u64 {
        self.dropped + self.entries.len() as u64
    }
}

impl EventLog {
    fn on(&self) -> bool {
        self.capacity > 0
    }
}

impl Simulation<'_> {
    /// From now on, logs what happens (at most `capacity` entries, the newest kept).
    pub fn record_events(&mut self, capacity: usize) {
        self.event_log = EventLog::with_capacity(capacity);
    }

    /// What happened so far, when recording ([`Simulation::record_events`]).
    pub fn events(&self) -> &EventLog {
        &self.event_log
    }

    /// Takes what was logged so far (the log goes on, empty), so that clones of the run
    /// do not copy it.
    pub fn take_events(&mut self) -> Vec<RunEvent> {
        self.event_log.dropped += self.event_log.entries.len() as u64;
        self.event_log.entries.drain(..).collect()
    }

    fn pod_key(&self, pod: PodId) -> String {
        self.scheduler.pod(pod).spec.key()
    }

    pub(super) fn log_bind(&mut self, binding: &Binding) {
        if !self.event_log.on() {
            return;
        }
        let gpus = binding.gpus.indices();
        let event = RunEvent {
            at: self.now,
            kind: "bind",
            pod: Some(self.pod_key(binding.pod)),
            node: Some(
                self.scheduler
                    .cluster()
                    .node(binding.node)
                    .spec
                    .name
                    .clone(),
            ),
            gpu_hours: None,
            detail: if gpus.is_empty() {
                String::new()
            } else {
                format!("GPUs {gpus:?}")
            },
        };
        self.event_log.push(event);
    }

    pub(super) fn log_preemption(&mut self, p: &Preemption) {
        if !self.event_log.on() {
            return;
        }
        let victims: Vec<String> = p.victims.iter().map(|v| self.pod_key(v.pod)).collect();
        let lost_ms: u64 = p.victims.iter().map(|v| v.lost_gpu_ms).sum();
        let event = RunEvent {
            at: self.now,
            kind: "preemption",
            pod: p.preemptor.map(|id| self.pod_key(id)),
            node: None,
            gpu_hours: Some(lost_ms as f64 / 3_600_000.0),
            detail: format!(
                "{}; {} victim(s): {}",
                p.reason,
                victims.len(),
                victims.join(", ")
            ),
        };
        self.event_log.push(event);
    }

    /// A victim asked to checkpoint; it leaves `within` from now.
    pub(super) fn log_checkpoint(&mut self, pod: PodId, within: Millis) {
        if !self.event_log.on() {
            return;
        }
        let event = RunEvent {
            at: self.now,
            kind: "checkpoint",
            pod: Some(self.pod_key(pod)),
            node: None,
            gpu_hours: None,
            detail: format!("asked to checkpoint; leaves within {} s", within / 1000),
        };
        self.event_log.push(event);
    }

    /// A pod left its node: `why` is `preempted` or `drained`.
    pub(super) fn log_eviction(&mut self, pod: PodId, lost_gpu_hours: f64, why: &str) {
        if !self.event_log.on() {
            return;
        }
        let event = RunEvent {
            at: self.now,
            kind: if why == "drained" {
                "drain"
            } else {
                "eviction"
            },
            pod: Some(self.pod_key(pod)),
            node: None,
            gpu_hours: Some(lost_gpu_hours),
            detail: format!("{why}; {lost_gpu_hours:.2} GPU-hours of work lost"),
        };
        self.event_log.push(event);
    }

    pub(super) fn log_cluster_change(&mut self, change: &ClusterChange) {
        if !self.event_log.on() {
            return;
        }
        let (kind, node) = match change {
            ClusterChange::AddNode(spec) => ("node-added", spec.name.clone()),
            ClusterChange::RemoveNode(name) => ("node-removed", name.clone()),
            ClusterChange::Cordon(name) => ("cordon", name.clone()),
            ClusterChange::Uncordon(name) => ("uncordon", name.clone()),
        };
        let event = RunEvent {
            at: self.now,
            kind,
            pod: None,
            node: Some(node),
            gpu_hours: None,
            detail: String::new(),
        };
        self.event_log.push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at: Millis) -> RunEvent {
        RunEvent {
            at,
            kind: "bind",
            pod: Some(format!("ns/p{at}")),
            node: None,
            gpu_hours: None,
            detail: String::new(),
        }
    }

    #[test]
    fn a_full_log_drops_its_oldest_and_counts_them() {
        let mut log = EventLog::with_capacity(2);
        for at in [1, 2, 3] {
            log.push(event(at));
        }
        assert_eq!(log.iter().map(|e| e.at).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(log.total(), 3);
        assert_eq!(log.until(2).count(), 1);
        let mut off = EventLog::default();
        off.push(event(1));
        assert!(off.is_empty(), "a log of no capacity keeps nothing");
    }
}
