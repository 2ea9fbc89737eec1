//! Kestrel's scheduling engine.
//!
//! Pure and synchronous: no I/O, no clock, no async runtime. Drivers (the simulator, the
//! Kubernetes scheduler) feed nodes and pods in, call [`Scheduler::schedule`] with the
//! current time, and carry out the [`Decisions`].

pub mod cluster;
mod constraints;
pub mod devices;
pub mod explain;
pub mod fgd;
pub mod gang;
mod hints;
pub mod inter_pod;
pub mod leaving;
pub mod model;
pub mod outcome;
pub mod packing;
pub mod policy;
mod predicates;
pub mod preempt;
pub mod queue;
pub mod resources;
pub mod rng;
pub mod scheduler;
pub mod topology;
pub mod types;
pub mod volumes;

pub use cluster::{ClusterIndex, GpuUse, NodeState};
pub use devices::{
    ClaimAllocation, ClaimShortfall, DeviceAttribute, DeviceChoice, DeviceClaim, DeviceClaims,
    DeviceCount, DeviceFilter, DeviceRef, DeviceRequest, DeviceResult, DraDevice, Filter,
    Partition, PartitionChoice, Partitions,
};
pub use explain::{GangProblem, NodeReason, Unschedulable, NUMA_ALIGNED_GPUS};
pub use gang::{GangError, GangId, GangPhase, GangSpec, GangState, GangTopology};
pub use inter_pod::{
    selector_matches, HostPort, InterPodRules, LabelSelector, PodAffinityTerm, SpreadConstraint,
};
pub use model::*;
pub use outcome::{ClusterError, Decisions};
pub use policy::Policy;
/// The engine's static fit check (cordon, node selector and affinity, RuntimeClass,
/// taints), for tools that judge a node the way the scheduler does.
pub use predicates::static_check;
pub use preempt::{DisruptionBudget, DisruptionLimit, IntOrPercent, Preemption, VictimOrder};
pub use queue::{
    format_amount, quota_scale, Admission, BorrowWithinCohort, ClusterQueueSpec, CohortSpec, CqId,
    FlavorQuotas, Inactive, LocalQueueSpec, QueueError, QueuePreemption, QueueProblem,
    QueueingStrategy, QuotaShortfall, QuotaUsage, ReclaimPolicy, ResourceFlavor, ResourceGroup,
    ResourceQuota, StopPolicy, WithinQueuePreemption, PODS_RESOURCE,
};
pub use resources::{parse_quantity, request_scale, Bytes, QuantityError, Resources, GPU_RESOURCE};
pub use rng::Rng;
pub use scheduler::{PodRecord, Scheduler, SchedulerConfig, DEFAULT_GANG_BACKOFF};
pub use topology::GpuTopology;
pub use types::{Binding, GpuAssignment, Millis, NodeId, PartitionRef, PodId, PodPhase};
pub use volumes::{
    AttachedVolume, ClaimBinding, ClaimTarget, StaticVolume, VolumeConflict, VolumeRules,
    VolumeTopology,
};
