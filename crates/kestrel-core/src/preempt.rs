//! Preemption: making room for a workload by asking others to leave.
//!
//! Victims are whole workloads (a pod, every running pod of a gang, or the members of an
//! elastic gang above its minimum, highest ranks first), never a pod here and a pod there.
//! Two triggers:
//! - quota: the workload's ClusterQueue lacks quota; candidates follow the queue's
//!   `preemption` policy (lower priority in the same queue; workloads of cohort queues
//!   that borrow, to reclaim lent quota; lower-priority borrowers to borrow in turn;
//!   never those of a queue that keeps what it borrows, Volcano's `reclaimable: false`);
//! - capacity: quota admits it but no node holds it; candidates follow the same queue
//!   policy on the nodes, plus lower-priority pods outside any queue (a preemptor outside
//!   any queue takes lower-priority workloads anywhere, as kube-scheduler does).
//!
//! Candidates are ranked (see [`VictimOrder`]; workloads whose eviction would take a
//! PodDisruptionBudget below its floor go after all others of their tier, as
//! kube-scheduler prefers victims that violate no budget), added until the preemptor
//! fits (quota and a real placement attempt, then undone), and each is then let off again if the rest
//! suffice; one victim that suffices alone beats several. Workloads that ran less than
//! their minimum runtime are not candidates, and a preemptor waits out its queue's
//! preemption delay first. Victims keep their place until the driver evicts them.

use crate::gang::GangId;
use crate::model::{Labels, Requirement};
use crate::queue::{CqId, WithinQueuePreemption};
use crate::types::{Millis, PodId};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A PodDisruptionBudget (`policy/v1`): how many of the pods it selects must stay up.
/// Preemption prefers victims that keep every budget; like kube-scheduler, it still
/// evicts against a budget when nothing else makes room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DisruptionBudget {
    pub namespace: String,
    pub name: String,
    /// `spec.selector` as requirements (`matchLabels` become `In`). As in `policy/v1`, an
    /// empty selector selects every pod of the namespace and none (`None`) selects none.
    pub selector: Option<Vec<Requirement>>,
    pub limit: DisruptionLimit,
}

/// `spec.minAvailable` or `spec.maxUnavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DisruptionLimit {
    MinAvailable(IntOrPercent),
    MaxUnavailable(IntOrPercent),
}

/// A count, or a percentage of the pods the budget selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum IntOrPercent {
    Int(u32),
    Percent(u32),
}

impl IntOrPercent {
    /// The count out of `total`, percentages rounded up (as the disruption controller).
    fn of(self, total: u32) -> u32 {
        match self {
            IntOrPercent::Int(n) => n,
            IntOrPercent::Percent(p) => (p as u64 * total as u64).div_ceil(100) as u32,
        }
    }
}

impl DisruptionBudget {
    pub fn selects(&self, namespace: &str, labels: &Labels) -> bool {
        self.namespace == namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.iter().all(|r| r.matches(labels)))
    }

    /// Disruptions it allows with `expected` pods selected, `healthy` of them running:
    /// the pods above its floor (`status.disruptionsAllowed`).
    pub fn allowed(&self, expected: u32, healthy: u32) -> u32 {
        let floor = match self.limit {
            DisruptionLimit::MinAvailable(n) => n.of(expected),
            DisruptionLimit::MaxUnavailable(n) => expected.saturating_sub(n.of(expected)),
        };
        healthy.saturating_sub(floor)
    }
}

/// A workload: one pod, or a gang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum WorkloadKey {
    Pod(PodId),
    Gang(GangId),
}

/// How victims are ranked among workloads of equal priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum VictimOrder {
    /// Least work lost first: GPU-time since each victim's last checkpoint.
    #[default]
    CheckpointAware,
    /// The most recently started first, blind to checkpoints (kube-scheduler, Kueue).
    LowestPriority,
}

impl std::str::FromStr for VictimOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "checkpoint-aware" => Ok(VictimOrder::CheckpointAware),
            "lowest-priority" => Ok(VictimOrder::LowestPriority),
            _ => Err(format!(
                "unknown victim order {s:?}; use checkpoint-aware or lowest-priority"
            )),
        }
    }
}

/// One pod asked to leave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Victim {
    pub pod: PodId,
    /// It checkpoints on request: ask, then evict when it did or after this long.
    pub checkpoint_grace: Option<Millis>,
    /// Its termination grace period.
    pub termination_grace: Millis,
    /// GPU-milliseconds of work since its last checkpoint, when chosen.
    pub lost_gpu_ms: u64,
}

/// Workloads asked to leave, for a preemptor (or a draining queue).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preemption {
    pub preemptor: Option<PodId>,
    pub victims: Vec<Victim>,
    pub reason: String,
}

/// The engine's preemption bookkeeping: which bound pods may be asked to leave, the budgets
/// that protect them, and which preemptors wait for which victims.
#[derive(Debug, Clone, Default)]
pub(crate) struct PreemptionBook {
    /// Bound pods per ClusterQueue and by priority: preemption candidates.
    pub(crate) bound_by_cq: BTreeMap<CqId, BTreeSet<PodId>>,
    pub(crate) bound_by_priority: BTreeSet<(i32, PodId)>,
    /// PodDisruptionBudgets by (namespace, name): victims that would break one go last.
    pub(crate) disruption_budgets: BTreeMap<(String, String), DisruptionBudget>,
    /// Victims still to leave, per preemptor.
    pub(crate) awaiting: HashMap<WorkloadKey, u32>,
    pub(crate) preemptor_of: HashMap<PodId, WorkloadKey>,
    /// Victims' claims (`namespace/name`) whose devices the preemptor waits for, with the
    /// preemptor and the victim: a victim's claim outlives its pod until the claim
    /// controller releases it.
    pub(crate) victim_claims: HashMap<String, (WorkloadKey, PodId)>,
    /// Preemptors whose victims are all gone: they go first in the next cycle, so the room
    /// made for them is not taken by others.
    pub(crate) ready_preemptors: Vec<WorkloadKey>,
}

/// Which workloads of its own queue a preemptor of `priority`, submitted at
/// `submitted_at`, may preempt under `withinClusterQueue` (by their priority and start).
pub(crate) fn within_queue_victim(
    policy: WithinQueuePreemption,
    priority: i32,
    submitted_at: Millis,
) -> impl Fn(i32, Millis) -> bool {
    move |p, started| match policy {
        WithinQueuePreemption::Never => false,
        WithinQueuePreemption::LowerPriority => p < priority,
        WithinQueuePreemption::LowerOrNewerEqualPriority => {
            p < priority || (p == priority && started > submitted_at)
        }
    }
}
