//! Kestrel's scheduling engine.
//!
//! Pure and synchronous: no I/O, no clock, no async runtime. Drivers (the simulator, the
//! Kubernetes scheduler) feed nodes and pods in, call [`Scheduler::schedule`] with the
//! current time, and carry out the [`Decisions`].

pub mod cluster;
pub mod explain;
pub mod gang;
mod hints;
pub mod model;
pub mod packing;
pub mod policy;
pub mod preempt;
pub mod queue;
pub mod resources;
pub mod rng;
pub mod scheduler;
pub mod topology;

pub use cluster::{ClusterIndex, GpuAssignment, GpuUse, NodeId, NodeState};
pub use explain::{GangProblem, NodeReason, Unschedulable, NUMA_ALIGNED_GPUS};
pub use gang::{GangError, GangId, GangPhase, GangSpec, GangState, GangTopology};
pub use model::*;
pub use policy::Policy;
pub use preempt::{DisruptionBudget, DisruptionLimit, IntOrPercent, Preemption, VictimOrder};
pub use queue::{
    format_amount, quota_scale, Admission, BorrowWithinCohort, ClusterQueueSpec, CohortSpec, CqId,
    FlavorQuotas, LocalQueueSpec, QueueError, QueuePreemption, QueueProblem, QueueingStrategy,
    QuotaShortfall, QuotaUsage, ReclaimPolicy, ResourceFlavor, ResourceGroup, ResourceQuota,
    StopPolicy, WithinQueuePreemption, PODS_RESOURCE,
};
pub use resources::{parse_quantity, Bytes, QuantityError, Resources, GPU_RESOURCE};
pub use rng::Rng;
/// The engine's static fit check (cordon, node selector and affinity, RuntimeClass,
/// taints), for tools that judge a node the way the scheduler does.
pub use scheduler::static_check;
pub use scheduler::{
    Binding, ClusterError, Decisions, Millis, PodId, PodPhase, PodRecord, Scheduler,
    SchedulerConfig,
};
pub use topology::GpuTopology;
