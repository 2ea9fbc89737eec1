//! `kestrel queue`: pending pods in queue order, their explanations put in words once.

use super::clock::{clock, secs};
use super::views::{positions, queue_name, PredictedStart};
use super::ExplainState;
use crate::predictions::Predictions;
use kestrel_core::{CqId, GangProblem, PodId, Unschedulable};
use serde::Serialize;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

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
