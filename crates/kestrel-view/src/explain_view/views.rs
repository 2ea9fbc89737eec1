//! The views of `kestrel explain pod|gang|queue|node`: what the engine's state says about
//! one object, with its queue position and predicted start.

use super::clock::{clock, clock_approx, secs};
use super::explanation::{Explanation, Problem, Requests};
use super::help::{gang_help, help_for, GangHelp, Help};
use super::pending::{pending_list, PendingEntry};
use super::ExplainState;
use crate::estimates::Estimates;
use crate::predictions::{Predictions, StartPrediction};
use kestrel_core::{
    format_amount, quota_scale, CqId, GangPhase, GangProblem, Millis, NodeId, PodId, PodPhase,
    Scheduler,
};
use kestrel_objects::duration::format_duration;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// Where a pending workload stands in its ClusterQueue (pods outside queues: among all
/// pending workloads outside queues), in queue order: priority, then arrival. A gang counts
/// once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Position {
    pub cluster_queue: Option<String>,
    /// 1 for the head.
    pub position: u32,
    /// Pending workloads ahead of it.
    pub ahead: u32,
    /// Pending workloads in that queue.
    pub pending_workloads: u32,
}

/// Queue positions of all pending pods, in queue order: per ClusterQueue (pods outside
/// queues together), a gang once, at its first pending pod.
pub(super) fn positions(scheduler: &Scheduler) -> Vec<(PodId, Option<CqId>, u32)> {
    // Counters per ClusterQueue, indexed by its id + 1 (0: outside queues).
    let slots = scheduler
        .cluster_queues()
        .map(|(id, _)| id.0 as usize + 1)
        .max();
    let mut counters = vec![0u32; slots.unwrap_or(0) + 1];
    let mut gang_positions: HashMap<(&str, &str), u32> = HashMap::new();
    scheduler
        .pending()
        .into_iter()
        .map(|id| {
            let spec = &scheduler.pod(id).spec;
            let cq = scheduler.queue_of(id);
            let counter = &mut counters[cq.map_or(0, |c| c.0 as usize + 1)];
            let mut next = || {
                *counter += 1;
                *counter
            };
            let position = match &spec.gang {
                Some(m) => *gang_positions
                    .entry((spec.namespace.as_str(), m.gang.as_str()))
                    .or_insert_with(next),
                None => next(),
            };
            (id, cq, position)
        })
        .collect()
}

/// Where one pending pod stands in its queue.
fn position_of(scheduler: &Scheduler, id: PodId) -> Option<Position> {
    let all = positions(scheduler);
    let &(_, cq, position) = all.iter().find(|e| e.0 == id)?;
    let pending_workloads = all.iter().filter(|e| e.1 == cq).map(|e| e.2).max()?;
    Some(Position {
        cluster_queue: queue_name(scheduler, cq),
        position,
        ahead: position - 1,
        pending_workloads,
    })
}

pub(super) fn queue_name(scheduler: &Scheduler, cq: Option<CqId>) -> Option<String> {
    let cq = cq?;
    scheduler
        .cluster_queues()
        .find(|(id, _)| *id == cq)
        .map(|(_, spec)| spec.name.clone())
}

/// A predicted start: the likely forward run's, and the range of all three (runtimes read
/// as likely, at their short ends, at their long ends).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictedStart {
    /// The likely run's start (seconds from the start); `null` when that run never starts
    /// it.
    pub point_s: Option<f64>,
    pub from_s: Option<f64>,
    /// `null` when some run never starts it.
    pub to_s: Option<f64>,
    /// Per run: likely, shortest, longest.
    pub runs_s: Vec<Option<f64>>,
    /// The runtime estimates' relative error bound the range allows for.
    pub estimate_error: f64,
    /// The moment predicted from.
    pub at_s: f64,
}

impl PredictedStart {
    pub(super) fn of(p: &StartPrediction, predictions: &Predictions) -> Self {
        PredictedStart {
            point_s: p.point().map(secs),
            from_s: p.from().map(secs),
            to_s: p.to().map(secs),
            runs_s: p.runs.iter().map(|r| r.map(secs)).collect(),
            estimate_error: predictions.estimate_error,
            at_s: secs(predictions.at),
        }
    }

    /// `13:20 (in 3h20m; 13:05-13:40 with runtimes 20% off either way)`.
    pub fn render(&self) -> String {
        let ms = |s: f64| (s * 1000.0).round() as Millis;
        let at = ms(self.at_s);
        let runs = self.runs_s.len();
        let off = format!(
            "runtimes {:.0}% off either way",
            self.estimate_error * 100.0
        );
        let range = match (self.from_s, self.to_s) {
            (Some(from), Some(to)) if from == to => format!("the same with {off}"),
            (Some(from), Some(to)) => {
                format!(
                    "{}-{} with {off}",
                    clock_approx(ms(from)),
                    clock_approx(ms(to))
                )
            }
            (Some(from), None) => format!(
                "from {}; {} of {runs} runs never start it",
                clock_approx(ms(from)),
                self.runs_s.iter().filter(|r| r.is_none()).count()
            ),
            _ => String::new(),
        };
        match self.point_s {
            Some(point) => format!(
                "{} (in {}; {range})",
                clock_approx(ms(point)),
                format_duration((ms(point).saturating_sub(at) + 30_000) / 60_000 * 60_000)
            ),
            None if range.is_empty() => format!(
                "none: with what is known at {}, nothing makes room for it (in any of {runs} runs)",
                clock(at)
            ),
            None => format!(
                "none in most runs: with what is known at {}, nothing makes room for it ({range})",
                clock(at)
            ),
        }
    }
}

fn phase_name(scheduler: &Scheduler, id: PodId) -> &'static str {
    let record = scheduler.pod(id);
    match record.phase {
        PodPhase::Pending => "Pending",
        PodPhase::Bound { .. } => "Running",
        PodPhase::Gone if record.pending_reason.is_some() => "Dropped",
        PodPhase::Gone => "Finished",
    }
}

/// `kestrel explain pod`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodView {
    #[serde(skip)]
    pub id: PodId,
    pub pod: String,
    pub namespace: String,
    pub name: String,
    /// The moment shown, seconds from the start, and as a clock time.
    pub at_s: f64,
    pub at: String,
    /// `Pending`, `Running`, `Finished`, or `Dropped` (its gang timed out).
    pub phase: &'static str,
    pub priority: i32,
    pub created_at_s: f64,
    pub requests: Requests,
    pub gang: Option<String>,
    pub node: Option<String>,
    pub gpus: Vec<u32>,
    pub bound_at_s: Option<f64>,
    /// Pending: how long it has waited since it was created.
    pub waiting_s: Option<f64>,
    pub explanation: Option<Explanation>,
    pub position: Option<Position>,
    pub predicted_start: Option<PredictedStart>,
    pub help: Option<Help>,
}

/// The view of one pod. `estimates`: the runtime estimates "what would help" uses.
pub fn pod_view(sim: &dyn ExplainState, id: PodId, estimates: &Estimates) -> PodView {
    let scheduler = sim.scheduler();
    let now = sim.now();
    let record = scheduler.pod(id);
    let spec = &record.spec;
    let (node, gpus, bound_at) = match &record.phase {
        PodPhase::Bound { node, gpus, at } => (
            Some(scheduler.cluster().node(*node).spec.name.clone()),
            gpus.indices(),
            Some(secs(*at)),
        ),
        _ => (None, Vec::new(), None),
    };
    let pending = record.phase == PodPhase::Pending;
    // Bound pods have none; a dropped pod keeps the reason it was dropped for.
    let explanation = record.pending_reason.as_deref().map(Explanation::of);
    let position = pending.then(|| position_of(scheduler, id)).flatten();
    let help = (pending && explanation.as_ref().is_some_and(|e| e.capacity))
        .then(|| help_for(sim, id, estimates));
    PodView {
        id,
        pod: spec.key(),
        namespace: spec.namespace.clone(),
        name: spec.name.clone(),
        at_s: secs(now),
        at: clock(now),
        phase: phase_name(scheduler, id),
        priority: spec.priority,
        created_at_s: secs(record.submitted_at),
        requests: Requests::of(&spec.demand, scheduler.gpu_milli(id)),
        gang: spec
            .gang
            .as_ref()
            .map(|m| format!("{}/{}", spec.namespace, m.gang)),
        node,
        gpus,
        bound_at_s: bound_at,
        waiting_s: pending.then(|| secs(now.saturating_sub(record.submitted_at))),
        explanation,
        position,
        predicted_start: None,
        help,
    }
}

impl PodView {
    pub fn apply_predictions(&mut self, predictions: &Predictions) {
        if let Some(p) = predictions.starts.get(&self.id) {
            self.predicted_start = Some(PredictedStart::of(p, predictions));
        }
    }
}

/// A gang member.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    pub pod: String,
    pub phase: &'static str,
    pub node: Option<String>,
}

/// `kestrel explain gang`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GangView {
    pub gang: String,
    pub at_s: f64,
    pub at: String,
    /// `Waiting`, `Running` or `TimedOut`.
    pub phase: String,
    /// Declared by a PodGroup (else only named by pods).
    pub declared: bool,
    pub min_member: Option<u32>,
    pub total: Option<u32>,
    /// Member pods that exist now, bound and pending.
    pub exist: u32,
    pub bound: u32,
    pub pending: u32,
    pub members: Vec<Member>,
    /// Why it waits (from its first pending member's explanation).
    pub problem: Option<Problem>,
    pub first_pending: Option<String>,
    pub first_pending_explanation: Option<Explanation>,
    /// The latest predicted start of its pending members.
    pub predicted_start: Option<PredictedStart>,
    /// For a waiting gang whose pods exist: where it comes closest to starting.
    pub help: Option<GangHelp>,
    #[serde(skip)]
    pub pending_ids: Vec<PodId>,
}

pub fn gang_view(sim: &dyn ExplainState, namespace: &str, name: &str) -> GangView {
    let scheduler = sim.scheduler();
    let now = sim.now();
    let state = scheduler
        .gang_id(namespace, name)
        .map(|id| scheduler.gang(id));
    let members: Vec<PodId> = state
        .map(|s| s.members.iter().copied().collect())
        .unwrap_or_default();
    let order: HashMap<PodId, usize> = scheduler
        .pending()
        .into_iter()
        .enumerate()
        .map(|(i, p)| (p, i))
        .collect();
    let mut pending_ids: Vec<PodId> = members
        .iter()
        .copied()
        .filter(|p| scheduler.pod(*p).phase == PodPhase::Pending)
        .collect();
    pending_ids.sort_by_key(|p| order.get(p).copied().unwrap_or(usize::MAX));
    let first = pending_ids.first().copied();
    let first_reason = first.and_then(|p| scheduler.pod(p).pending_reason.clone());
    let spec = state.and_then(|s| s.spec.as_ref());
    // A gang whose pods all exist but which does not start whole: where it comes closest.
    let waiting_whole = matches!(
        first_reason.as_ref().and_then(|r| r.gang.as_ref()),
        Some(GangProblem::Unplaceable { .. } | GangProblem::NoDomain { .. })
    );
    let level = spec.and_then(|s| s.topology.required.as_deref());
    GangView {
        gang: format!("{namespace}/{name}"),
        at_s: secs(now),
        at: clock(now),
        phase: match state.map(|s| s.phase) {
            Some(GangPhase::Running) => "Running",
            Some(GangPhase::TimedOut) => "TimedOut",
            _ => "Waiting",
        }
        .to_string(),
        declared: spec.is_some(),
        min_member: spec.map(|s| s.min_member),
        total: spec.and_then(|s| s.total),
        exist: members.len() as u32,
        bound: members
            .iter()
            .filter(|p| matches!(scheduler.pod(**p).phase, PodPhase::Bound { .. }))
            .count() as u32,
        pending: pending_ids.len() as u32,
        members: members
            .iter()
            .map(|&p| {
                let record = scheduler.pod(p);
                Member {
                    pod: record.spec.key(),
                    phase: phase_name(scheduler, p),
                    node: match record.phase {
                        PodPhase::Bound { node, .. } => {
                            Some(scheduler.cluster().node(node).spec.name.clone())
                        }
                        _ => None,
                    },
                }
            })
            .collect(),
        problem: first_reason
            .as_ref()
            .and_then(|r| r.gang.as_ref().map(Problem::of)),
        first_pending: first.map(|p| scheduler.pod(p).spec.key()),
        first_pending_explanation: first_reason.as_deref().map(Explanation::of),
        predicted_start: None,
        help: waiting_whole.then(|| gang_help(scheduler, level, &pending_ids)),
        pending_ids,
    }
}

impl GangView {
    pub fn apply_predictions(&mut self, predictions: &Predictions) {
        let latest = self
            .pending_ids
            .iter()
            .filter_map(|p| predictions.starts.get(p))
            .max_by_key(|p| p.point().unwrap_or(Millis::MAX));
        self.predicted_start = latest.map(|p| PredictedStart::of(p, predictions));
    }
}

/// Quota and usage of one resource in one flavor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuotaLine {
    pub flavor: String,
    pub resource: String,
    /// In user units (GPUs, cores, bytes, a count).
    pub nominal: f64,
    pub used: f64,
    pub borrowed: f64,
    /// `8 / 16 (2 borrowed)` in the units users write.
    pub text: String,
}

/// `kestrel explain queue`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueView {
    pub cluster_queue: String,
    pub at_s: f64,
    pub at: String,
    pub cohort: Option<String>,
    pub queueing_strategy: String,
    pub quota: Vec<QuotaLine>,
    /// Pods pending in it, and pods it admitted that run now.
    pub pending: u32,
    pub admitted: u32,
    pub pending_list: Vec<PendingEntry>,
}

pub fn queue_view(sim: &dyn ExplainState, cq: CqId) -> QueueView {
    let scheduler = sim.scheduler();
    let now = sim.now();
    let spec = scheduler
        .cluster_queues()
        .find(|(id, _)| *id == cq)
        .map(|(_, s)| s)
        .expect("a ClusterQueue found by find_queue");
    let quota = scheduler
        .queue_usage(cq)
        .into_iter()
        .map(|u| {
            let scale = quota_scale(&u.resource) as f64;
            let a = |v: i64| format_amount(&u.resource, v);
            let mut text = format!("{} used of {}", a(u.used), a(u.nominal));
            if u.borrowed > 0 {
                let _ = write!(text, " ({} borrowed)", a(u.borrowed));
            }
            QuotaLine {
                flavor: u.flavor.clone(),
                resource: u.resource.clone(),
                nominal: u.nominal as f64 / scale,
                used: u.used as f64 / scale,
                borrowed: u.borrowed as f64 / scale,
                text,
            }
        })
        .collect();
    let admitted = scheduler
        .pods()
        .filter(|(_, r)| matches!(r.phase, PodPhase::Bound { .. }))
        .filter(|(_, r)| r.admission.as_ref().is_some_and(|a| a.cq == cq))
        .count() as u32;
    let pending_list = pending_list(sim, Some(cq), None);
    QueueView {
        cluster_queue: spec.name.clone(),
        at_s: secs(now),
        at: clock(now),
        cohort: spec.cohort.clone(),
        queueing_strategy: format!("{:?}", spec.queueing_strategy),
        quota,
        pending: pending_list.len() as u32,
        admitted,
        pending_list,
    }
}

/// Amounts on a node, in user units.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Amounts {
    pub cpu: f64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub pods: u32,
    pub gpus: f64,
    pub extended: BTreeMap<String, i64>,
}

/// One GPU device of a node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuView {
    pub index: u32,
    pub model: String,
    pub memory_mib: u64,
    pub numa_node: u32,
    /// Thousandths of the device in use.
    pub used_milli: u32,
    pub held_whole: bool,
    pub pods: Vec<String>,
}

/// A pod bound to a node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodePod {
    pub pod: String,
    pub priority: i32,
    pub gpus: Vec<u32>,
    pub requests: String,
    pub bound_at_s: f64,
    /// Estimated end (seconds from the start); `null`: runs to the end.
    pub ends_at_s: Option<f64>,
}

/// `kestrel explain node`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeView {
    pub node: String,
    pub at_s: f64,
    pub at: String,
    pub cordoned: bool,
    pub taints: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub capacity: Amounts,
    pub allocated: Amounts,
    pub gpus: Vec<GpuView>,
    pub pods: Vec<NodePod>,
}

pub fn node_view(sim: &dyn ExplainState, id: NodeId, estimates: &Estimates) -> NodeView {
    let scheduler = sim.scheduler();
    let now = sim.now();
    let node = scheduler.cluster().node(id);
    let alloc = &node.spec.allocatable;
    let gpu_count = node.gpu_count();
    let mut on_device: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    let mut pods = Vec::new();
    for &p in &node.pods {
        let record = scheduler.pod(p);
        let (gpus, at) = match &record.phase {
            PodPhase::Bound { gpus, at, .. } => (gpus.indices(), *at),
            _ => (Vec::new(), 0),
        };
        for &g in &gpus {
            on_device.entry(g).or_default().push(record.spec.key());
        }
        pods.push(NodePod {
            pod: record.spec.key(),
            priority: record.spec.priority,
            gpus,
            requests: Requests::of(&record.spec.demand, scheduler.gpu_milli(p)).summary,
            bound_at_s: secs(at),
            ends_at_s: sim.end_of_running(p, estimates).map(secs),
        });
    }
    let free_milli: u64 = node.free_gpu_milli();
    NodeView {
        node: node.spec.name.clone(),
        at_s: secs(now),
        at: clock(now),
        cordoned: node.spec.unschedulable,
        taints: node.spec.taints.iter().map(|t| t.to_string()).collect(),
        labels: node.spec.labels.clone(),
        capacity: Amounts {
            cpu: alloc.cpu_milli as f64 / 1000.0,
            memory_bytes: alloc.memory_bytes,
            ephemeral_storage_bytes: alloc.ephemeral_storage_bytes,
            pods: node.spec.max_pods,
            gpus: gpu_count as f64,
            extended: alloc.extended.iter().cloned().collect(),
        },
        allocated: Amounts {
            cpu: (alloc.cpu_milli - node.free.cpu_milli) as f64 / 1000.0,
            memory_bytes: alloc.memory_bytes - node.free.memory_bytes,
            ephemeral_storage_bytes: alloc.ephemeral_storage_bytes
                - node.free.ephemeral_storage_bytes,
            pods: node.spec.max_pods.saturating_sub(node.free_pods),
            gpus: (gpu_count as u64 * 1000 - free_milli.min(gpu_count as u64 * 1000)) as f64
                / 1000.0,
            extended: alloc
                .extended
                .iter()
                .map(|(n, a)| (n.clone(), a - node.free.extended(n)))
                .collect(),
        },
        gpus: node
            .spec
            .gpus
            .iter()
            .zip(&node.gpus)
            .map(|(device, usage)| GpuView {
                index: device.index,
                model: device.model.clone(),
                memory_mib: device.memory_mib,
                numa_node: device.numa_node,
                used_milli: 1000 - usage.free_milli,
                held_whole: usage.held_whole,
                pods: on_device.remove(&device.index).unwrap_or_default(),
            })
            .collect(),
        pods,
    }
}
