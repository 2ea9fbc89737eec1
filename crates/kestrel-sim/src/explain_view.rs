//! What `kestrel explain` and `kestrel queue` show: views of the engine's state at one
//! moment of a simulated run, and their terminal rendering.
//!
//! A pending pod's explanation is the engine's own: the `Unschedulable` that the cycle which
//! decided stored on the pod (`pending_reason`), never a second computation. Only "what would
//! help" is computed here, in one pass over the nodes: the node that comes closest (the
//! smallest missing share of a node) and the earliest node where running pods' ends (by
//! estimated durations) free enough room.

use crate::predict::{Estimates, Predictions, StartPrediction};
use crate::sim::Simulation;
use kestrel_core::{
    format_amount, memory_share_milli, quota_scale, Bytes, CqId, Demand, GangPhase, GangProblem,
    GpuRequest, Millis, NodeId, NodeReason, NodeState, PlacementConstraints, PodId, PodPhase,
    PodSpec, Scheduler, Unschedulable, GPU_RESOURCE,
};
use kestrel_k8s::duration::format_duration;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A moment as a clock time from the start (`10:00`, `26:30`, `09:05:30`), the form
/// `--at` accepts.
pub fn clock(ms: Millis) -> String {
    let origin = WALL_ORIGIN.load(Ordering::Relaxed);
    if origin != NO_WALL_ORIGIN {
        return wall_clock(origin + ms as i64);
    }
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if s == 0 && ms.is_multiple_of(1000) {
        format!("{h:02}:{m:02}")
    } else if ms.is_multiple_of(1000) {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}.{:03}", ms % 1000)
    }
}

/// Unset: times are shown from the start of the run.
const NO_WALL_ORIGIN: i64 = i64::MIN;

/// The wall-clock time (Unix ms) of moment 0, when the state shown is a live cluster's.
static WALL_ORIGIN: AtomicI64 = AtomicI64::new(NO_WALL_ORIGIN);

/// Shows moments as UTC wall-clock times, moment 0 being `unix_ms` (a live cluster's state;
/// a simulated run's moments are shown from its start). For the whole process: one CLI
/// command shows one state.
pub fn show_wall_clock(unix_ms: i64) {
    WALL_ORIGIN.store(unix_ms, Ordering::Relaxed);
}

/// `2026-11-30 17:52:10Z` (seconds only when not zero).
fn wall_clock(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + (month <= 2) as i64;
    let (h, m, s) = (rest / 3600, rest / 60 % 60, rest % 60);
    if s == 0 {
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}Z")
    } else {
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02}Z")
    }
}

/// What the views read: the engine's state at one moment, and when running pods end. A
/// simulated run ([`Simulation`]) and a live cluster's snapshot both provide it.
pub trait ExplainState {
    fn scheduler(&self) -> &Scheduler;
    /// The moment shown.
    fn now(&self) -> Millis;
    /// When a running pod ends by `estimates`, knowing how long it has run; `None`: not
    /// running, or no known end.
    fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis>;
    /// For a name no pod has: "; it is created later: ..." when its Job arrives later.
    fn created_later(&self, _name: &str) -> Option<String> {
        None
    }
}

impl ExplainState for Simulation<'_> {
    fn scheduler(&self) -> &Scheduler {
        Simulation::scheduler(self)
    }
    fn now(&self) -> Millis {
        Simulation::now(self)
    }
    fn end_of_running(&self, pod: PodId, estimates: &Estimates) -> Option<Millis> {
        Simulation::end_of_running(self, pod, estimates)
    }
    fn created_later(&self, name: &str) -> Option<String> {
        created_later(self, name)
    }
}

/// An estimated moment, to the minute (estimates carry no finer meaning).
pub fn clock_approx(ms: Millis) -> String {
    clock((ms + 30_000) / 60_000 * 60_000)
}

fn secs(ms: Millis) -> f64 {
    ms as f64 / 1000.0
}

/// A name that does not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("{kind} {name:?} does not exist at {at}{hint}")]
    NotFound {
        kind: &'static str,
        name: String,
        at: String,
        hint: String,
    },
    #[error(
        "{kind} name {name:?} is ambiguous: it exists in {} namespaces; write one of: {}",
        candidates.len(),
        candidates.join(", ")
    )]
    Ambiguous {
        kind: &'static str,
        name: String,
        candidates: Vec<String>,
    },
}

/// Edit distance (Levenshtein), for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// Up to three known names close to `name`, as a "; did you mean ..." hint.
fn did_you_mean<'n>(name: &str, known: impl Iterator<Item = &'n str>) -> String {
    let limit = (name.chars().count() / 3).max(2);
    let len = name.chars().count();
    let mut close: Vec<(usize, &str)> = known
        .filter(|k| k.chars().count().abs_diff(len) <= limit)
        .map(|k| (distance(name, k), k))
        .filter(|(d, _)| *d <= limit)
        .collect();
    close.sort();
    close.dedup();
    close.truncate(3);
    if close.is_empty() {
        return String::new();
    }
    let names: Vec<String> = close.iter().map(|(_, k)| format!("{k:?}")).collect();
    format!("; did you mean {}?", names.join(" or "))
}

/// Resolves `ns/name` or a bare `name` among (namespace, name) keys.
fn resolve_namespaced(
    kind: &'static str,
    name: &str,
    at: Millis,
    keys: &BTreeSet<(String, String)>,
) -> Result<(String, String), LookupError> {
    let matches: Vec<&(String, String)> = match name.split_once('/') {
        Some((ns, n)) => keys.iter().filter(|k| k.0 == ns && k.1 == n).collect(),
        None => keys.iter().filter(|k| k.1 == name).collect(),
    };
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let full: Vec<String> = keys.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
            let hint = if name.contains('/') {
                did_you_mean(name, full.iter().map(String::as_str))
            } else {
                did_you_mean(name, keys.iter().map(|k| k.1.as_str()))
            };
            Err(LookupError::NotFound {
                kind,
                name: name.to_string(),
                at: clock(at),
                hint,
            })
        }
        many => Err(LookupError::Ambiguous {
            kind,
            name: name.to_string(),
            candidates: many.iter().map(|(ns, n)| format!("{ns}/{n}")).collect(),
        }),
    }
}

/// Finds a pod by `namespace/name`, or by `name` when one namespace has it. Of pods with
/// the same name the one that exists now wins, else the latest. A pod that a Job creates
/// later is named as such.
pub fn find_pod(sim: &dyn ExplainState, name: &str) -> Result<PodId, LookupError> {
    let scheduler = sim.scheduler();
    let (want_ns, want_name) = match name.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, name),
    };
    // One scan, no allocation per pod: names are compared in place.
    let mut by_namespace: BTreeMap<&str, PodId> = BTreeMap::new();
    for (id, record) in scheduler.pods() {
        let spec = &record.spec;
        if spec.name != want_name || want_ns.is_some_and(|ns| spec.namespace != ns) {
            continue;
        }
        let keep_old = by_namespace
            .get(spec.namespace.as_str())
            .is_some_and(|&old| {
                record.phase == PodPhase::Gone && scheduler.pod(old).phase != PodPhase::Gone
            });
        if !keep_old {
            by_namespace.insert(spec.namespace.as_str(), id);
        }
    }
    if by_namespace.len() == 1 {
        return Ok(*by_namespace.values().next().expect("one entry"));
    }
    if by_namespace.len() > 1 {
        return Err(LookupError::Ambiguous {
            kind: "pod",
            name: name.to_string(),
            candidates: by_namespace
                .keys()
                .map(|ns| format!("{ns}/{want_name}"))
                .collect(),
        });
    }
    let hint = match sim.created_later(name) {
        Some(later) => later,
        None => {
            let keys: BTreeSet<(String, String)> = scheduler
                .pods()
                .map(|(_, r)| (r.spec.namespace.clone(), r.spec.name.clone()))
                .collect();
            match resolve_namespaced("pod", name, sim.now(), &keys) {
                Err(LookupError::NotFound { hint, .. }) => hint,
                _ => String::new(),
            }
        }
    };
    Err(LookupError::NotFound {
        kind: "pod",
        name: name.to_string(),
        at: clock(sim.now()),
        hint,
    })
}

/// "; it is created at 13:30 (Job llm/x arrives then)" for a pod of a job still to come.
fn created_later(sim: &Simulation<'_>, name: &str) -> Option<String> {
    let (ns, pod) = match name.split_once('/') {
        Some((ns, pod)) => (Some(ns), pod),
        None => (None, name),
    };
    let job = sim.workload().jobs.iter().find(|j| {
        ns.is_none_or(|ns| j.namespace == ns)
            && j.arrival > sim.now()
            && (j.name == pod
                || pod
                    .strip_prefix(j.name.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
    })?;
    Some(format!(
        "; it is created later: {} {}/{} arrives at {}",
        job.source_kind,
        job.namespace,
        job.name,
        clock(job.arrival)
    ))
}

/// Finds a gang (declared by a PodGroup, or named by pods) by `namespace/name` or `name`.
pub fn find_gang(sim: &dyn ExplainState, name: &str) -> Result<(String, String), LookupError> {
    let scheduler = sim.scheduler();
    let keys: BTreeSet<(String, String)> = scheduler
        .gang_keys()
        .map(|(ns, n)| (ns.to_string(), n.to_string()))
        .collect();
    resolve_namespaced("gang", name, sim.now(), &keys)
}

/// Finds a ClusterQueue by name.
pub fn find_queue(sim: &dyn ExplainState, name: &str) -> Result<CqId, LookupError> {
    let scheduler = sim.scheduler();
    if let Some((id, _)) = scheduler.cluster_queues().find(|(_, q)| q.name == name) {
        return Ok(id);
    }
    let names: Vec<&str> = scheduler
        .cluster_queues()
        .map(|(_, q)| q.name.as_str())
        .collect();
    let hint = if names.is_empty() {
        "; the input declares no ClusterQueues".to_string()
    } else {
        did_you_mean(name, names.iter().copied())
    };
    Err(LookupError::NotFound {
        kind: "ClusterQueue",
        name: name.to_string(),
        at: clock(sim.now()),
        hint,
    })
}

/// Finds a node by name.
pub fn find_node(sim: &dyn ExplainState, name: &str) -> Result<NodeId, LookupError> {
    let cluster = sim.scheduler().cluster();
    if let Some(id) = cluster.id_of(name) {
        return Ok(id);
    }
    let hint = did_you_mean(name, cluster.iter().map(|(_, n)| n.spec.name.as_str()));
    Err(LookupError::NotFound {
        kind: "node",
        name: name.to_string(),
        at: clock(sim.now()),
        hint,
    })
}

/// A queue or gang problem: its kind (the engine's variant name), its message, and the
/// engine's fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub kind: String,
    pub message: String,
    pub detail: serde_json::Value,
}

impl Problem {
    fn of<P: Serialize + std::fmt::Display>(problem: &P) -> Self {
        let value = serde_json::to_value(problem).unwrap_or(serde_json::Value::Null);
        let (kind, detail) = match value {
            serde_json::Value::Object(map) if map.len() == 1 => {
                let (k, v) = map.into_iter().next().expect("one entry");
                (k, v)
            }
            serde_json::Value::String(s) => (s, serde_json::Value::Null),
            other => (String::new(), other),
        };
        Problem {
            kind,
            message: problem.to_string(),
            detail,
        }
    }
}

/// Nodes refused for one reason, as in "0/N nodes are available: 2 Insufficient ...".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeReasonCount {
    /// The reason in kube-scheduler's words.
    pub reason: String,
    /// `cordoned`, `taint`, `affinity`, `runtime-class`, `insufficient`, `too-many-pods`,
    /// `gpu-fragmented`, `reserved` (held for the workload at the head of the queue).
    pub kind: &'static str,
    /// The resource, taint, RuntimeClass or reserving workload it names.
    pub subject: Option<String>,
    pub nodes: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fragmentation {
    pub free_whole_gpus: u32,
    pub most_on_one_node: u32,
}

/// The engine's typed explanation of why a pod is pending.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The full message (kube-scheduler's form).
    pub message: String,
    /// The reason that matters most, in a few words.
    pub headline: String,
    /// Capacity (not configuration, quota or the gang) keeps it waiting.
    pub capacity: bool,
    pub queue_problem: Option<Problem>,
    pub gang_problem: Option<Problem>,
    pub total_nodes: u32,
    pub node_reasons: Vec<NodeReasonCount>,
    pub gpu_fragmentation: Option<Fragmentation>,
}

impl Explanation {
    pub fn of(u: &Unschedulable) -> Self {
        let node_reasons = u
            .reasons
            .iter()
            .map(|(reason, nodes)| {
                let (kind, subject) = match reason {
                    NodeReason::Cordoned => ("cordoned", None),
                    NodeReason::UntoleratedTaint(t) => ("taint", Some(t.to_string())),
                    NodeReason::AffinityMismatch => ("affinity", None),
                    NodeReason::RuntimeClassMismatch(rc) => ("runtime-class", Some(rc.clone())),
                    NodeReason::Insufficient(r) => ("insufficient", Some(r.clone())),
                    NodeReason::TooManyPods => ("too-many-pods", None),
                    NodeReason::GpuFragmented => ("gpu-fragmented", None),
                    NodeReason::Reserved(holder) => ("reserved", Some(holder.clone())),
                    NodeReason::Nominated(preemptor) => ("nominated", Some(preemptor.clone())),
                };
                NodeReasonCount {
                    reason: reason.to_string(),
                    kind,
                    subject,
                    nodes: *nodes,
                }
            })
            .collect();
        Explanation {
            message: u.to_string(),
            headline: u.headline(),
            capacity: u.is_capacity(),
            queue_problem: u.queue.as_ref().map(Problem::of),
            gang_problem: u.gang.as_ref().map(Problem::of),
            total_nodes: u.total_nodes,
            node_reasons,
            gpu_fragmentation: u.gpu_fragmentation.map(|(free, best)| Fragmentation {
                free_whole_gpus: free,
                most_on_one_node: best,
            }),
        }
    }
}

/// What a pod asks for, in the units users write.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Requests {
    pub cpu: f64,
    pub memory_bytes: i64,
    pub ephemeral_storage_bytes: i64,
    pub gpus: f64,
    pub extended: BTreeMap<String, i64>,
    /// One line: `4 nvidia.com/gpu, 32 cpu, 256Gi memory`.
    pub summary: String,
}

fn gpu_text(gpu: GpuRequest) -> Option<String> {
    match gpu {
        GpuRequest::None => None,
        GpuRequest::Whole(n) => Some(format!("{n} {GPU_RESOURCE}")),
        GpuRequest::Shared { milli } => Some(format!("{} GPU (shared)", milli as f64 / 1000.0)),
        GpuRequest::Memory { mib } => Some(format!("{mib} MiB of one GPU (shared)")),
    }
}

impl Requests {
    /// `gpu_milli`: the GPU thousandths the pod counts ([`Scheduler::gpu_milli`]: a share
    /// by memory differs by device).
    fn of(demand: &Demand, gpu_milli: u64) -> Self {
        let r = &demand.resources;
        let mut parts: Vec<String> = gpu_text(demand.gpu).into_iter().collect();
        if r.cpu_milli > 0 {
            parts.push(format!("{} cpu", format_amount("cpu", r.cpu_milli)));
        }
        if r.memory_bytes > 0 {
            parts.push(format!("{} memory", Bytes(r.memory_bytes)));
        }
        if r.ephemeral_storage_bytes > 0 {
            parts.push(format!(
                "{} ephemeral-storage",
                Bytes(r.ephemeral_storage_bytes)
            ));
        }
        for (name, amount) in &r.extended {
            parts.push(format!("{amount} {name}"));
        }
        Requests {
            cpu: r.cpu_milli as f64 / 1000.0,
            memory_bytes: r.memory_bytes,
            ephemeral_storage_bytes: r.ephemeral_storage_bytes,
            gpus: gpu_milli as f64 / 1000.0,
            extended: r.extended.iter().cloned().collect(),
            summary: if parts.is_empty() {
                "nothing".to_string()
            } else {
                parts.join(", ")
            },
        }
    }
}

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
fn positions(scheduler: &Scheduler) -> Vec<(PodId, Option<CqId>, u32)> {
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

fn queue_name(scheduler: &Scheduler, cq: Option<CqId>) -> Option<String> {
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
    fn of(p: &StartPrediction, predictions: &Predictions) -> Self {
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

/// One missing amount on a node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lack {
    pub resource: String,
    /// In the resource's user units (GPUs, cores, bytes, a count).
    pub missing: f64,
    /// `2 more nvidia.com/gpu`.
    pub text: String,
}

/// The node that comes closest to holding the pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Closest {
    pub node: String,
    pub lacks: Vec<Lack>,
}

/// A running pod whose end frees room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ending {
    pub pod: String,
    /// Estimated end, seconds from the start.
    pub ends_at_s: f64,
    pub gpus: f64,
}

/// The earliest node where running pods' estimated ends free enough room for the pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Room {
    pub node: String,
    pub at_s: f64,
    /// The pods on that node that end by then, in order.
    pub ending: Vec<Ending>,
}

/// A running pod whose preemption would make room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Victim {
    pub pod: String,
    pub priority: i32,
    pub gpus: f64,
    /// Its gang, which would be preempted whole.
    pub gang: Option<String>,
}

/// The node where preempting the fewest, lowest-priority running pods makes room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preemption {
    pub node: String,
    pub victims: Vec<Victim>,
    /// Why the scheduler does not take them itself.
    pub why_not: String,
}

/// What would help a pod that capacity keeps waiting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Help {
    /// `None` when no node may take it at all (taints, selectors, cordons).
    pub closest: Option<Closest>,
    /// `None` when no known end makes room on a single node.
    pub room: Option<Room>,
    /// `None` when preempting running pods makes room on no node (none run where it may
    /// go, or they are leaving already).
    pub preemption: Option<Preemption>,
    /// Nodes it may use that have the room now but hold it for other work (reserved for
    /// the head of the queue, or promised to a preemptor).
    pub held: u32,
}

/// One missing amount, in the engine's units, before it is put in words.
struct Missing<'a> {
    resource: &'a str,
    amount: i64,
}

/// What is missing on a node for a demand (empty when it fits), and the sum of each
/// missing amount as a share of the node's allocatable (the closeness measure).
fn missing_on<'a>(
    node: &NodeState,
    demand: &'a Demand,
    constraints: &PlacementConstraints,
) -> (Vec<Missing<'a>>, f64) {
    let mut missing = Vec::new();
    let mut share = 0.0;
    let alloc = &node.spec.allocatable;
    let mut add = |resource: &'a str, amount: i64, of: i64| {
        if amount > 0 {
            share += amount as f64 / of.max(1) as f64;
            missing.push(Missing { resource, amount });
        }
    };
    let gpu_total = node.gpu_count() as i64 * 1000;
    match demand.gpu {
        GpuRequest::None => {}
        GpuRequest::Whole(n) => {
            // A single-numa-node pod counts only the GPUs one NUMA node offers.
            let free = match constraints.single_numa_node {
                true => node.free_whole_gpus_on_one_numa(),
                false => node.free_whole_gpus(),
            };
            add(
                GPU_RESOURCE,
                n.saturating_sub(free) as i64 * 1000,
                gpu_total,
            )
        }
        GpuRequest::Shared { milli } => {
            let best = node
                .gpus
                .iter()
                .filter(|g| !g.held_whole)
                .map(|g| g.free_milli)
                .max()
                .unwrap_or(0);
            add(GPU_RESOURCE, milli.saturating_sub(best) as i64, gpu_total);
        }
        GpuRequest::Memory { mib } => {
            // The least missing on a device with the memory; none: the memory it lacks.
            let short = node
                .spec
                .gpus
                .iter()
                .zip(&node.gpus)
                .filter_map(|(d, g)| {
                    memory_share_milli(mib, d.memory_mib).map(|m| m.saturating_sub(g.free_milli))
                })
                .min();
            match short {
                Some(short) => add(GPU_RESOURCE, short as i64, gpu_total),
                None => {
                    let largest = node.spec.gpus.iter().map(|d| d.memory_mib).max();
                    let lacks = mib - largest.unwrap_or(0);
                    add(GPU_MEMORY, lacks as i64, mib as i64);
                }
            }
        }
    }
    let r = &demand.resources;
    add("cpu", r.cpu_milli - node.free.cpu_milli, alloc.cpu_milli);
    add(
        "memory",
        r.memory_bytes - node.free.memory_bytes,
        alloc.memory_bytes,
    );
    add(
        "ephemeral-storage",
        r.ephemeral_storage_bytes - node.free.ephemeral_storage_bytes,
        alloc.ephemeral_storage_bytes,
    );
    for (name, amount) in &r.extended {
        add(
            name,
            amount - node.free.extended(name),
            alloc.extended(name),
        );
    }
    if node.free_pods == 0 {
        add("pods", 1, node.spec.max_pods as i64);
    }
    (missing, share)
}

/// What a node lacks, in MiB, when none of its devices has the memory a share by memory
/// asks for.
const GPU_MEMORY: &str = "gpu-memory";

/// A missing amount in words and user units.
fn lack(m: &Missing<'_>, whole_gpus: bool) -> Lack {
    let (missing, text) = match m.resource {
        GPU_RESOURCE if whole_gpus => {
            let n = m.amount / 1000;
            (
                n as f64,
                format!("{n} more GPU{}", if n == 1 { "" } else { "s" }),
            )
        }
        GPU_RESOURCE => (
            m.amount as f64 / 1000.0,
            format!("{} more of one GPU", format_amount(GPU_RESOURCE, m.amount)),
        ),
        GPU_MEMORY => (
            m.amount as f64,
            format!("{} MiB more memory on one GPU", m.amount),
        ),
        "cpu" => (
            m.amount as f64 / 1000.0,
            format!("{} more cpu", format_amount("cpu", m.amount)),
        ),
        "memory" | "ephemeral-storage" => (
            m.amount as f64,
            format!("{} more {}", Bytes(m.amount), m.resource),
        ),
        "pods" => (1.0, "room for one more pod".to_string()),
        other => (m.amount as f64, format!("{} more {other}", m.amount)),
    };
    Lack {
        resource: m.resource.to_string(),
        missing,
        text,
    }
}

/// Frees a bound pod's share of a copy of its node, to play pods' ends forward.
fn release_pod(free: &mut NodeState, scheduler: &Scheduler, pod: PodId) {
    let record = scheduler.pod(pod);
    if let PodPhase::Bound { gpus, .. } = &record.phase {
        free.release(pod, &record.spec.demand.resources, gpus);
    }
}

/// Running pods with their estimated ends.
type Ends = Vec<(Millis, PodId)>;

/// Of the pods whose going makes room on a node (in the order they go), those that are
/// needed: each earlier one is left out when the room suffices without it (the last one is
/// always needed).
fn needed<K: Copy>(
    node: &NodeState,
    ends: &[(K, PodId)],
    scheduler: &Scheduler,
    spec: &PodSpec,
) -> Vec<(K, PodId)> {
    let fits_after = |kept: &[(K, PodId)]| {
        let mut free = node.clone();
        for (_, pod) in kept {
            release_pod(&mut free, scheduler, *pod);
        }
        free.fits_pod(&spec.demand, &spec.constraints)
    };
    let mut kept = ends.to_vec();
    let mut i = 0;
    while i + 1 < kept.len() {
        let mut without = kept.clone();
        without.remove(i);
        if fits_after(&without) {
            kept = without;
        } else {
            i += 1;
        }
    }
    kept
}

/// One pass over the nodes the pod may use (static predicates): the closest one by missing
/// share, and the earliest one where running pods' ends (`estimates`) make room.
pub fn help_for(sim: &dyn ExplainState, id: PodId, estimates: &Estimates) -> Help {
    let scheduler = sim.scheduler();
    let spec = &scheduler.pod(id).spec;
    let demand = &spec.demand;
    let mut probe = spec.clone();
    probe.demand = Demand::default();
    // (missing share, missing count, node name, node)
    let mut closest: Option<(f64, usize, &str, NodeId)> = None;
    // (time, pods that end, node name, the ends)
    let mut room: Option<(Millis, usize, &str, Ends)> = None;
    let mut ends: Ends = Vec::new();
    // (highest victim priority, victims, node name, the victims)
    let mut preemption: Option<(i32, usize, &str, Victims)> = None;
    let mut held = 0;
    for (node_id, node) in scheduler.cluster().iter() {
        // Static predicates only: a pod with no demand fits wherever they pass.
        if !scheduler.could_place_on(&probe, node_id) {
            continue;
        }
        let (missing, share) = missing_on(node, demand, &spec.constraints);
        if missing.is_empty() {
            // Room enough, though maybe not NUMA-aligned the way the pod asks.
            held += node.fits_pod(demand, &spec.constraints) as u32;
            continue;
        }
        let name = node.spec.name.as_str();
        let key = (share, missing.len(), name);
        if closest
            .as_ref()
            .is_none_or(|(s, n, c, _)| key < (*s, *n, *c))
        {
            closest = Some((share, missing.len(), name, node_id));
        }
        if let Some(victims) = victims_on(node, scheduler, spec, preemption.as_ref()) {
            let top = victims.last().map_or(i32::MIN, |v| v.0 .0);
            let key = (top, victims.len(), name);
            if preemption
                .as_ref()
                .is_none_or(|(t, n, c, _)| key < (*t, *n, *c))
            {
                preemption = Some((top, victims.len(), name, victims));
            }
        }
        ends.clear();
        ends.extend(
            node.pods
                .iter()
                .filter_map(|&p| sim.end_of_running(p, estimates).map(|e| (e, p))),
        );
        let best = room.as_ref().map(|r| r.0);
        if ends.is_empty() || best.is_some_and(|t| ends.iter().all(|(e, _)| *e > t)) {
            continue;
        }
        ends.sort_unstable();
        let mut free = node.clone();
        for k in 0..ends.len() {
            let (end, pod) = ends[k];
            if best.is_some_and(|t| end > t) {
                break;
            }
            release_pod(&mut free, scheduler, pod);
            if free.fits_pod(demand, &spec.constraints) {
                let needed = needed(node, &ends[..=k], scheduler, spec);
                let key = (end, needed.len(), name);
                if room.as_ref().is_none_or(|(t, n, c, _)| key < (*t, *n, *c)) {
                    room = Some((end, needed.len(), name, needed));
                }
                break;
            }
        }
    }
    let whole = matches!(demand.gpu, GpuRequest::Whole(_));
    Help {
        closest: closest.map(|(_, _, name, node)| Closest {
            node: name.to_string(),
            lacks: missing_on(scheduler.cluster().node(node), demand, &spec.constraints)
                .0
                .iter()
                .map(|m| lack(m, whole))
                .collect(),
        }),
        room: room.map(|(at, _, node, ending)| Room {
            node: node.to_string(),
            at_s: secs(at),
            ending: ending
                .into_iter()
                .map(|(end, pod)| {
                    let spec = &scheduler.pod(pod).spec;
                    Ending {
                        pod: spec.key(),
                        ends_at_s: secs(end),
                        gpus: scheduler.gpu_milli(pod) as f64 / 1000.0,
                    }
                })
                .collect(),
        }),
        preemption: preemption.map(|(top, _, node, victims)| Preemption {
            node: node.to_string(),
            why_not: why_not_preempted(scheduler, id, top),
            victims: victims
                .into_iter()
                .map(|(_, pod)| {
                    let spec = &scheduler.pod(pod).spec;
                    Victim {
                        pod: spec.key(),
                        priority: spec.priority,
                        gpus: scheduler.gpu_milli(pod) as f64 / 1000.0,
                        gang: spec.gang.as_ref().map(|g| g.gang.clone()),
                    }
                })
                .collect(),
        }),
        held,
    }
}

/// Running pods ordered as preemption takes them: lowest priority first, then the newest.
type Victims = Vec<((i32, std::cmp::Reverse<PodId>), PodId)>;

/// The fewest, lowest-priority running pods on `node` whose preemption makes room for the
/// pod (`None` when even all of them do not, or `best` already needs lower priorities).
fn victims_on(
    node: &NodeState,
    scheduler: &Scheduler,
    spec: &PodSpec,
    best: Option<&(i32, usize, &str, Victims)>,
) -> Option<Victims> {
    let mut candidates: Victims = node
        .pods
        .iter()
        .filter(|&&p| !scheduler.pod(p).evicting)
        .map(|&p| ((scheduler.pod(p).spec.priority, std::cmp::Reverse(p)), p))
        .collect();
    candidates.sort_unstable();
    let mut free = node.clone();
    for k in 0..candidates.len() {
        let (key, pod) = candidates[k];
        if best.is_some_and(|b| key.0 > b.0) {
            return None;
        }
        release_pod(&mut free, scheduler, pod);
        if free.fits_pod(&spec.demand, &spec.constraints) {
            return Some(needed(node, &candidates[..=k], scheduler, spec));
        }
    }
    None
}

/// Why the scheduler leaves victims of priority up to `top` where they are.
fn why_not_preempted(scheduler: &Scheduler, id: PodId, top: i32) -> String {
    let spec = &scheduler.pod(id).spec;
    if top >= spec.priority {
        format!(
            "they have priority {top}, not below its {}: Kestrel preempts only lower priorities",
            spec.priority
        )
    } else if spec.preemption.never_preempt {
        "its preemptionPolicy is Never: it waits for room instead".into()
    } else {
        "their priority is lower, but its queue's preemption policy, a PodDisruptionBudget \
         or a preemption under way keeps them (see the reasons above)"
            .into()
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

/// Where a waiting gang comes closest to starting whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GangHelp {
    /// The topology level it must start within (`None`: anywhere in the cluster).
    pub level: Option<String>,
    /// The domain (a value of `level`; `None`: the whole cluster) where the most pending
    /// members fit together now.
    pub domain: Option<String>,
    /// How many of the pending members fit there together now, of how many.
    pub fit: u32,
    pub pending: u32,
    /// The node of that domain that comes closest to holding the next member, and what it
    /// lacks.
    pub closest: Option<Closest>,
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

/// How many of `pending` fit together on `nodes` (copies, taken from as they fit), each on
/// the first node that holds it; and the first that does not fit.
fn fit_together(
    scheduler: &Scheduler,
    nodes: &mut [(NodeId, NodeState)],
    pending: &[PodId],
) -> (u32, Option<PodId>) {
    let mut fit = 0;
    let mut first_left = None;
    // Nodes before `from` are full for the previous member: valid while members are alike.
    let mut from = 0;
    let mut previous: Option<&PodSpec> = None;
    for &pod in pending {
        let spec = &scheduler.pod(pod).spec;
        let alike =
            previous.is_some_and(|p| p.demand == spec.demand && p.constraints == spec.constraints);
        if !alike {
            from = 0;
        }
        previous = Some(spec);
        let mut probe = spec.clone();
        probe.demand = Demand::default();
        let found = (from..nodes.len()).find(|&i| {
            let (id, node) = &mut nodes[i];
            scheduler.could_place_on(&probe, *id) && node.take_room(&spec.demand, &spec.constraints)
        });
        match found {
            Some(i) => {
                fit += 1;
                from = i;
            }
            None => {
                from = nodes.len();
                first_left.get_or_insert(pod);
            }
        }
    }
    (fit, first_left)
}

/// A domain's nodes after its gang members were fitted: (fit, nodes, first member left,
/// domain).
type Fitted<'a> = (
    u32,
    Vec<(NodeId, NodeState)>,
    Option<PodId>,
    Option<&'a str>,
);

/// The domain of `level` (or the whole cluster) where the most of a gang's pending members
/// fit together now, and what the closest node there lacks for the next one.
fn gang_help(scheduler: &Scheduler, level: Option<&str>, pending: &[PodId]) -> GangHelp {
    let mut domains: BTreeMap<Option<&str>, Vec<NodeId>> = BTreeMap::new();
    for (id, node) in scheduler.cluster().iter() {
        match level {
            Some(level) => {
                if let Some(value) = node.spec.labels.get(level) {
                    domains.entry(Some(value.as_str())).or_default().push(id);
                }
            }
            None => domains.entry(None).or_default().push(id),
        }
    }
    let mut best: Option<Fitted<'_>> = None;
    for (domain, ids) in domains {
        let mut nodes: Vec<(NodeId, NodeState)> = ids
            .iter()
            .map(|&id| (id, scheduler.cluster().node(id).clone()))
            .collect();
        let (fit, left) = fit_together(scheduler, &mut nodes, pending);
        if best.as_ref().is_none_or(|b| fit > b.0) {
            best = Some((fit, nodes, left, domain));
        }
    }
    let (fit, nodes, left, domain) =
        best.unwrap_or((0, Vec::new(), pending.first().copied(), None));
    let closest = left.and_then(|pod| {
        let spec = &scheduler.pod(pod).spec;
        let mut probe = spec.clone();
        probe.demand = Demand::default();
        let whole = matches!(spec.demand.gpu, GpuRequest::Whole(_));
        let mut best: Option<(f64, usize, &str, &NodeState)> = None;
        for (id, node) in &nodes {
            if !scheduler.could_place_on(&probe, *id) {
                continue;
            }
            let (missing, share) = missing_on(node, &spec.demand, &spec.constraints);
            let key = (share, missing.len(), node.spec.name.as_str());
            if !missing.is_empty() && best.as_ref().is_none_or(|(s, n, c, _)| key < (*s, *n, *c)) {
                best = Some((share, missing.len(), node.spec.name.as_str(), node));
            }
        }
        best.map(|(_, _, name, node)| Closest {
            node: name.to_string(),
            lacks: missing_on(node, &spec.demand, &spec.constraints)
                .0
                .iter()
                .map(|m| lack(m, whole))
                .collect(),
        })
    });
    GangHelp {
        level: level.map(str::to_string),
        domain: domain.map(str::to_string),
        fit,
        pending: pending.len() as u32,
        closest,
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

/// One pending pod in a list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingEntry {
    #[serde(skip)]
    pub id: PodId,
    pub pod: String,
    pub cluster_queue: Option<Shared>,
    pub position: u32,
    pub priority: i32,
    pub waiting_s: f64,
    pub gang: Option<String>,
    /// The headline of its explanation (`not tried yet` when no cycle has looked at it).
    pub reason: Shared,
    pub message: Shared,
    pub predicted_start: Option<PredictedStart>,
}

/// A string that many list entries share (a queue's name, an explanation), cloned by
/// reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared(Arc<str>);

impl From<&str> for Shared {
    fn from(s: &str) -> Self {
        Shared(s.into())
    }
}

impl From<String> for Shared {
    fn from(s: String) -> Self {
        Shared(s.into())
    }
}

impl std::ops::Deref for Shared {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Shared {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// An explanation in words: its headline and its message.
type Said = (Shared, Shared);

/// Explanations in words, each put in words once: the engine shares one `Arc` among pods
/// that failed alike in a cycle, and equal explanations from other cycles are found by
/// value, bucketed by a hash of what they name.
#[derive(Default)]
struct Words<'a> {
    by_arc: HashMap<*const Unschedulable, Said>,
    by_value: HashMap<u64, Vec<(&'a Unschedulable, Said)>>,
}

impl<'a> Words<'a> {
    /// Equal explanations compared per bucket, at most this many (distinct ones that hash
    /// alike are rare; past this they are simply formatted).
    const BUCKET: usize = 8;

    fn of(&mut self, reason: &'a Arc<Unschedulable>) -> Said {
        if let Some(said) = self.by_arc.get(&Arc::as_ptr(reason)) {
            return said.clone();
        }
        let u: &'a Unschedulable = reason;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (u.total_nodes, &u.reasons, u.gpu_fragmentation).hash(&mut hasher);
        u.queue
            .as_deref()
            .map(std::mem::discriminant)
            .hash(&mut hasher);
        u.gang.as_ref().map(gang_named).hash(&mut hasher);
        let bucket = self.by_value.entry(hasher.finish()).or_default();
        if let Some((_, said)) = bucket.iter().find(|(known, _)| *known == u) {
            return said.clone();
        }
        let said: Said = (u.headline().into(), u.to_string().into());
        if bucket.len() < Self::BUCKET {
            bucket.push((u, said.clone()));
        }
        self.by_arc.insert(Arc::as_ptr(reason), said.clone());
        said
    }
}

/// The gang a gang problem names.
fn gang_named(problem: &GangProblem) -> &str {
    match problem {
        GangProblem::NotFound { gang }
        | GangProblem::Incomplete { gang, .. }
        | GangProblem::Unplaceable { gang, .. }
        | GangProblem::NoDomain { gang, .. }
        | GangProblem::TimedOut { gang, .. } => gang,
    }
}

/// Pending pods in queue order, optionally of one ClusterQueue and/or one namespace.
pub fn pending_list(
    sim: &dyn ExplainState,
    queue: Option<CqId>,
    namespace: Option<&str>,
) -> Vec<PendingEntry> {
    let scheduler = sim.scheduler();
    let now = sim.now();
    let names: HashMap<CqId, Shared> = scheduler
        .cluster_queues()
        .map(|(id, spec)| (id, spec.name.as_str().into()))
        .collect();
    let not_tried = Shared::from("not tried yet");
    let mut words = Words::default();
    positions(scheduler)
        .into_iter()
        .filter(|(_, cq, _)| queue.is_none() || *cq == queue)
        .filter(|(id, _, _)| namespace.is_none_or(|ns| scheduler.pod(*id).spec.namespace == ns))
        .map(|(id, cq, position)| {
            let record = scheduler.pod(id);
            let spec = &record.spec;
            let (reason, message) = match &record.pending_reason {
                Some(r) => words.of(r),
                None => (not_tried.clone(), not_tried.clone()),
            };
            PendingEntry {
                id,
                pod: joined(&spec.namespace, &spec.name),
                cluster_queue: cq.and_then(|c| names.get(&c).cloned()),
                position,
                priority: spec.priority,
                waiting_s: secs(now.saturating_sub(record.submitted_at)),
                gang: spec.gang.as_ref().map(|m| joined(&spec.namespace, &m.gang)),
                reason,
                message,
                predicted_start: None,
            }
        })
        .collect()
}

/// `namespace/name`, without the formatting machinery (lists have many).
fn joined(namespace: &str, name: &str) -> String {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key
}

/// `kestrel queue`: pending pods in queue order, optionally of one ClusterQueue and/or
/// one namespace.
pub fn queue_list(
    sim: &dyn ExplainState,
    queue: Option<CqId>,
    namespace: Option<&str>,
) -> QueueListView {
    let scheduler = sim.scheduler();
    QueueListView {
        at_s: secs(sim.now()),
        at: clock(sim.now()),
        cluster_queue: queue_name(scheduler, queue),
        namespace: namespace.map(str::to_string),
        pending_total: scheduler.pending_count(),
        pending: pending_list(sim, queue, namespace),
    }
}

/// Attaches predicted starts to a pending list.
pub fn apply_list_predictions(list: &mut [PendingEntry], predictions: &Predictions) {
    for entry in list {
        if let Some(p) = predictions.starts.get(&entry.id) {
            entry.predicted_start = Some(PredictedStart::of(p, predictions));
        }
    }
}

/// `kestrel queue`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueListView {
    pub at_s: f64,
    pub at: String,
    pub cluster_queue: Option<String>,
    pub namespace: Option<String>,
    /// All pending pods (before the filters).
    pub pending_total: usize,
    pub pending: Vec<PendingEntry>,
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

// ---- Terminal rendering ----

/// The explanation's message after `first` (a label or an indent), continued at `indent`.
fn render_explanation(out: &mut String, e: &Explanation, first: &str, indent: &str) {
    let _ = writeln!(out, "{first}{}", e.message);
    if e.queue_problem.is_some() {
        let _ = writeln!(
            out,
            "{indent}(the queue holds it: no node was tried, and more nodes would not help)"
        );
    }
}

fn duration_s(s: f64) -> String {
    format_duration((s * 1000.0).round() as Millis)
}

fn clock_s(s: f64) -> String {
    clock((s * 1000.0).round() as Millis)
}

fn clock_approx_s(s: f64) -> String {
    clock_approx((s * 1000.0).round() as Millis)
}

pub fn render_pod(v: &PodView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "pod {} at {}", v.pod, v.at);
    let mut phase = v.phase.to_string();
    if let Some(w) = v.waiting_s {
        let _ = write!(
            phase,
            " for {} (created {})",
            duration_s(w),
            clock_s(v.created_at_s)
        );
    }
    let _ = writeln!(out, "  phase      {phase}, priority {}", v.priority);
    let _ = writeln!(out, "  requests   {}", v.requests.summary);
    if let Some(g) = &v.gang {
        let _ = writeln!(out, "  gang       {g}");
    }
    if let Some(node) = &v.node {
        let gpus = if v.gpus.is_empty() {
            String::new()
        } else {
            format!(
                ", GPUs {}",
                v.gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let _ = writeln!(
            out,
            "  node       {node}{gpus} (bound at {})",
            clock_s(v.bound_at_s.unwrap_or(0.0))
        );
    }
    if let Some(p) = &v.position {
        let queue = match &p.cluster_queue {
            Some(q) => format!("ClusterQueue {q}"),
            None => "no ClusterQueue".to_string(),
        };
        let _ = writeln!(
            out,
            "  queue      {queue}: position {} of {} pending workloads ({} ahead)",
            p.position, p.pending_workloads, p.ahead
        );
    }
    if let Some(e) = &v.explanation {
        let label = if v.phase == "Pending" {
            "why"
        } else {
            "reason"
        };
        render_explanation(&mut out, e, &format!("  {label:<10} "), "             ");
    } else if v.phase == "Pending" {
        let _ = writeln!(out, "  why        not tried yet");
    }
    if let Some(p) = &v.predicted_start {
        let _ = writeln!(out, "  start      {}", p.render());
    }
    if let Some(h) = &v.help {
        render_help(&mut out, h, v.gang.is_some());
    }
    out
}

fn render_help(out: &mut String, h: &Help, gang: bool) {
    let mut lines = Vec::new();
    if h.held > 0 {
        lines.push(format!(
            "{} node(s) it may use have room now, held for other work (see the reasons \
             above): it fits there once that work starts",
            h.held
        ));
    }
    match &h.closest {
        Some(c) => {
            let lacks: Vec<&str> = c.lacks.iter().map(|l| l.text.as_str()).collect();
            lines.push(format!(
                "fits on node {} if {} were free",
                c.node,
                lacks.join(" and ")
            ));
        }
        None if h.held == 0 => {
            lines.push("no node it may use lacks only capacity: see the reasons above".into())
        }
        None => {}
    }
    if let Some(r) = &h.room {
        let ending: Vec<String> = r
            .ending
            .iter()
            .take(6)
            .map(|e| {
                let gpus = if e.gpus > 0.0 {
                    format!(", {} GPU", e.gpus)
                } else {
                    String::new()
                };
                format!("{} ({}{gpus})", e.pod, clock_approx_s(e.ends_at_s))
            })
            .collect();
        let more = r.ending.len().saturating_sub(6);
        lines.push(format!(
            "room on {} from about {} when these end (estimated runtimes): {}{}",
            r.node,
            clock_approx_s(r.at_s),
            ending.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
        lines.push(format!(
            "(unless work ahead of it takes that room first{})",
            if gang {
                "; the gang needs room for all its pods"
            } else {
                ""
            }
        ));
    } else if h.closest.is_some() {
        lines.push("no running pod with a known end frees enough room on one node".into());
    }
    if let Some(p) = &h.preemption {
        let victims: Vec<String> = p
            .victims
            .iter()
            .take(6)
            .map(|v| {
                let gang = v
                    .gang
                    .as_ref()
                    .map(|g| format!(", gang {g} whole"))
                    .unwrap_or_default();
                format!("{} (priority {}{gang})", v.pod, v.priority)
            })
            .collect();
        let more = p.victims.len().saturating_sub(6);
        lines.push(format!(
            "fits on {} if these were preempted: {}{}",
            p.node,
            victims.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
        lines.push(format!("({})", p.why_not));
    }
    for (i, line) in lines.iter().enumerate() {
        let label = if i == 0 { "would help" } else { "" };
        let _ = writeln!(out, "  {label:<10} {line}");
    }
}

pub fn render_gang(v: &GangView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gang {} at {}", v.gang, v.at);
    let declared = if v.declared {
        format!(
            "minMember {}{}",
            v.min_member.unwrap_or(0),
            v.total
                .map(|t| format!(", {t} pods expected"))
                .unwrap_or_default()
        )
    } else {
        "not declared by a PodGroup".to_string()
    };
    let _ = writeln!(out, "  phase      {} ({declared})", v.phase);
    let expected = v.total.or(v.min_member).unwrap_or(v.exist);
    let _ = writeln!(
        out,
        "  members    {} of {} exist, {} bound, {} pending",
        v.exist, expected, v.bound, v.pending
    );
    for m in &v.members {
        let _ = writeln!(
            out,
            "             {} {}{}",
            m.pod,
            m.phase,
            m.node
                .as_ref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default()
        );
    }
    if let Some(p) = &v.problem {
        let _ = writeln!(out, "  problem    {}", p.message);
    }
    if let (Some(first), Some(e)) = (&v.first_pending, &v.first_pending_explanation) {
        let _ = writeln!(out, "  first pending member {first}:");
        render_explanation(&mut out, e, "             ", "             ");
    }
    if let Some(p) = &v.predicted_start {
        let _ = writeln!(out, "  start      {}", p.render());
    }
    if let Some(h) = &v.help {
        let place = match (&h.level, &h.domain) {
            (Some(level), Some(domain)) => format!("{level} {domain}"),
            (Some(level), None) => format!("any {level} (no node has that label)"),
            _ => "the cluster".to_string(),
        };
        let _ = writeln!(
            out,
            "  would help {} of its {} pending pods fit together in {place} now",
            h.fit, h.pending
        );
        if let Some(c) = &h.closest {
            let lacks: Vec<&str> = c.lacks.iter().map(|l| l.text.as_str()).collect();
            let _ = writeln!(
                out,
                "             one more fits on node {} if {} were free",
                c.node,
                lacks.join(" and ")
            );
        }
    }
    out
}

fn pending_table(out: &mut String, list: &[PendingEntry]) {
    if list.is_empty() {
        let _ = writeln!(out, "  (nothing pending)");
        return;
    }
    let width = list.iter().map(|e| e.pod.len()).max().unwrap_or(3).max(3);
    let qwidth = list
        .iter()
        .map(|e| e.cluster_queue.as_deref().unwrap_or("-").len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        out,
        "  {:>4}  {:<width$}  {:<qwidth$}  {:>8}  {:>10}  {:<34}  REASON",
        "POS", "POD", "QUEUE", "PRIORITY", "WAITING", "PREDICTED START (RANGE)"
    );
    for e in list {
        let start = match &e.predicted_start {
            Some(p) => {
                let point = p
                    .point_s
                    .map(clock_approx_s)
                    .unwrap_or_else(|| "none".to_string());
                let range = match (p.from_s, p.to_s) {
                    (Some(f), Some(t)) => format!("{}-{}", clock_approx_s(f), clock_approx_s(t)),
                    (Some(f), None) => format!("{}-never", clock_approx_s(f)),
                    _ => "never".to_string(),
                };
                format!("{point} ({range})")
            }
            None => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "  {:>4}  {:<width$}  {:<qwidth$}  {:>8}  {:>10}  {:<34}  {}",
            e.position,
            e.pod,
            e.cluster_queue.as_deref().unwrap_or("-"),
            e.priority,
            duration_s(e.waiting_s),
            start,
            e.reason
        );
    }
}

pub fn render_queue_list(v: &QueueListView) -> String {
    let mut out = String::new();
    let mut filter = Vec::new();
    if let Some(q) = &v.cluster_queue {
        filter.push(format!("ClusterQueue {q}"));
    }
    if let Some(ns) = &v.namespace {
        filter.push(format!("namespace {ns}"));
    }
    let _ = writeln!(
        out,
        "pending at {}: {} pod(s){}{}",
        v.at,
        v.pending.len(),
        if filter.is_empty() {
            String::new()
        } else {
            format!(" in {}", filter.join(", "))
        },
        if v.pending.len() != v.pending_total {
            format!(" ({} in all)", v.pending_total)
        } else {
            String::new()
        }
    );
    pending_table(&mut out, &v.pending);
    out
}

pub fn render_queue(v: &QueueView) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ClusterQueue {} at {}", v.cluster_queue, v.at);
    let _ = writeln!(
        out,
        "  cohort     {}, {}",
        v.cohort.as_deref().unwrap_or("none"),
        v.queueing_strategy
    );
    let _ = writeln!(
        out,
        "  workloads  {} pod(s) pending, {} admitted and running",
        v.pending, v.admitted
    );
    let _ = writeln!(out, "  quota");
    for q in &v.quota {
        let _ = writeln!(out, "    {:<16} {:<20} {}", q.flavor, q.resource, q.text);
    }
    pending_table(&mut out, &v.pending_list);
    out
}

pub fn render_node(v: &NodeView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {} at {}{}",
        v.node,
        v.at,
        if v.cordoned { " (cordoned)" } else { "" }
    );
    let (c, a) = (&v.capacity, &v.allocated);
    let _ = writeln!(
        out,
        "  allocated  cpu {}/{}, memory {}/{}, pods {}/{}, GPUs {}/{}",
        a.cpu,
        c.cpu,
        Bytes(a.memory_bytes),
        Bytes(c.memory_bytes),
        a.pods,
        c.pods,
        a.gpus,
        c.gpus
    );
    for (name, total) in &c.extended {
        let _ = writeln!(
            out,
            "             {name} {}/{total}",
            a.extended.get(name).copied().unwrap_or(0)
        );
    }
    let taints = if v.taints.is_empty() {
        "none".to_string()
    } else {
        v.taints.join(", ")
    };
    let _ = writeln!(out, "  taints     {taints}");
    if !v.gpus.is_empty() {
        let _ = writeln!(out, "  GPUs");
        for g in &v.gpus {
            let used = match (g.used_milli, g.held_whole) {
                (0, _) => "free".to_string(),
                (_, true) => "whole".to_string(),
                (m, false) => format!("{} shared", m as f64 / 1000.0),
            };
            let _ = writeln!(
                out,
                "    {:>2} {} NUMA {} {:<10} {}",
                g.index,
                g.model,
                g.numa_node,
                used,
                g.pods.join(", ")
            );
        }
    }
    let _ = writeln!(out, "  pods       {}", v.pods.len());
    for p in &v.pods {
        let _ = writeln!(
            out,
            "    {} (priority {}; {}; since {}, ends {})",
            p.pod,
            p.priority,
            p.requests,
            clock_s(p.bound_at_s),
            p.ends_at_s
                .map(|e| format!("about {}", clock_approx_s(e)))
                .unwrap_or_else(|| "never (runs to the end)".to_string())
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_times_are_utc_dates() {
        assert_eq!(wall_clock(0), "1970-01-01 00:00Z");
        assert_eq!(wall_clock(1_800_000_000_000), "2027-01-15 08:00Z");
        assert_eq!(wall_clock(951_782_400_000 + 61_000), "2000-02-29 00:01:01Z");
    }

    #[test]
    fn clock_times_read_back_as_durations() {
        assert_eq!(clock(36_000_000), "10:00");
        assert_eq!(clock(93_600_000), "26:00");
        assert_eq!(clock(34_230_000), "09:30:30");
        for t in [0, 36_000_000, 34_230_000] {
            assert_eq!(kestrel_k8s::duration::parse_duration(&clock(t)), Ok(t));
        }
    }

    #[test]
    fn did_you_mean_finds_close_names() {
        let known = ["gpu-0", "gpu-1", "cpu-0", "control-plane"];
        assert!(did_you_mean("gpu-9", known.iter().copied()).contains("\"gpu-0\""));
        assert_eq!(did_you_mean("zzzzzzzz", known.iter().copied()), "");
    }
}
