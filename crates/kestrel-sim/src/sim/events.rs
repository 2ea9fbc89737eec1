//! The run's event log, kept only when asked ([`Simulation::record_events`]): binds,
//! preemptions with the GPU-hours their victims lost, checkpoint requests, evictions and
//! cluster changes (cordons, drains, nodes added and removed), for the dashboard's Events
//! page. Off, it costs one branch per event. The log and its entries are
//! `kestrel_view::events`', which the live leader keeps too.

use super::Simulation;
use crate::workload::ClusterChange;
use kestrel_core::{Binding, Millis, PodId, Preemption};

pub use kestrel_view::events::{EventLog, RunEvent};

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
        self.event_log.take()
    }

    fn pod_key(&self, pod: PodId) -> String {
        self.scheduler.pod(pod).spec.key()
    }

    pub(super) fn log_bind(&mut self, binding: &Binding) {
        if !self.event_log.is_on() {
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
        if !self.event_log.is_on() {
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
        if !self.event_log.is_on() {
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
        if !self.event_log.is_on() {
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
        if !self.event_log.is_on() {
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
