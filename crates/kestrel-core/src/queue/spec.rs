//! What the engine is told of queues: flavors, ClusterQueues, LocalQueues, cohorts.

use crate::model::{Labels, Requirement, Taint, Toleration};
use crate::types::Millis;
use serde::Serialize;

/// The resource name that counts pods.
pub const PODS_RESOURCE: &str = "pods";

/// Node labels, taints and tolerations that stand for one kind of node (`a100`, `spot`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ResourceFlavor {
    pub name: String,
    /// Pods admitted under this flavor only go to nodes with these labels.
    pub node_labels: Labels,
    /// Taints the flavor's nodes carry: the flavor admits only pods that tolerate them
    /// (with its own `tolerations`); the next flavor is tried for the others.
    pub node_taints: Vec<Taint>,
    /// Tolerations added to pods admitted under this flavor.
    pub tolerations: Vec<Toleration>,
}

/// Quota of one resource in one flavor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceQuota {
    pub name: String,
    pub nominal: i64,
    /// How much more than `nominal` the queue may borrow from its cohort (`None`: no limit).
    pub borrowing_limit: Option<i64>,
    /// How much of `nominal` the cohort may borrow (`None`: all of it).
    pub lending_limit: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlavorQuotas {
    pub flavor: String,
    pub resources: Vec<ResourceQuota>,
}

/// Resources that are assigned one flavor together (e.g. cpu, memory and GPUs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceGroup {
    pub covered: Vec<String>,
    pub flavors: Vec<FlavorQuotas>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum QueueingStrategy {
    /// A head that does not fit quota blocks the workloads behind it.
    StrictFifo,
    /// Workloads behind a head that does not fit may go first.
    #[default]
    BestEffortFifo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum WithinQueuePreemption {
    #[default]
    Never,
    LowerPriority,
    LowerOrNewerEqualPriority,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum ReclaimPolicy {
    #[default]
    Never,
    LowerPriority,
    Any,
}

/// May a workload that needs to borrow preempt others' borrowed workloads?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BorrowWithinCohort {
    /// Only victims of priority at or below this may be preempted.
    pub max_priority_threshold: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct QueuePreemption {
    pub within_cluster_queue: WithinQueuePreemption,
    pub reclaim_within_cohort: ReclaimPolicy,
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum StopPolicy {
    #[default]
    None,
    /// Admit nothing new; admitted workloads keep running.
    Hold,
    /// Admit nothing new and evict what runs.
    HoldAndDrain,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct ClusterQueueSpec {
    pub name: String,
    pub cohort: Option<String>,
    /// Namespaces whose LocalQueues may point here (`None`: all).
    pub namespace_selector: Option<Vec<Requirement>>,
    pub queueing_strategy: QueueingStrategy,
    pub resource_groups: Vec<ResourceGroup>,
    pub preemption: QueuePreemption,
    /// Weight for fair sharing of borrowed quota (default 1).
    pub fair_weight: f64,
    pub stop_policy: StopPolicy,
    /// Admitted workloads are not preempted before they ran this long (anti-thrash).
    pub min_runtime: Option<Millis>,
    /// A workload waits this long before it may preempt others.
    pub preemption_delay: Option<Millis>,
    /// Why the queue admits nothing, as Kueue deactivates a ClusterQueue (it names a
    /// ResourceFlavor that does not exist); `None`: active.
    pub inactive: Option<Inactive>,
    /// Pods in any namespace name this queue itself rather than a LocalQueue, as with
    /// Volcano's and KAI's cluster-wide queues; a LocalQueue of the same name in the
    /// pod's namespace still wins.
    pub cluster_scoped: bool,
    /// Kueue's `flavorFungibility.whenCanBorrow: Borrow`: a workload that fits a flavor by
    /// borrowing takes it; `false` (Kestrel's default, Kueue's `TryNextFlavor`): the later
    /// flavors are tried for room without borrowing first.
    pub borrow_in_first_fitting_flavor: bool,
    /// Volcano's `reclaimable: false`: other queues of its cohort never preempt its
    /// workloads, neither to reclaim the quota it borrows from them nor to borrow in
    /// turn; they wait until its workloads end. `false`: what it borrows is taken back as
    /// the other queues' `reclaimWithinCohort` and `borrowWithinCohort` allow.
    pub keeps_borrowed_quota: bool,
}

/// Why a ClusterQueue is inactive: Kueue's reason (`FlavorNotFound`) and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inactive {
    pub reason: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalQueueSpec {
    pub namespace: String,
    pub name: String,
    pub cluster_queue: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CohortSpec {
    pub name: String,
    pub parent: Option<String>,
    /// Quota the cohort itself holds, shared by all its queues.
    pub resource_groups: Vec<ResourceGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {object}: field {field}: {why}")]
pub struct QueueError {
    pub kind: &'static str,
    pub object: String,
    pub field: &'static str,
    pub why: String,
}
