//! The watch-to-engine index: Pod and Node objects in, the engine's nodes and pods out.
//!
//! Synchronous and clock-free like the engine it wraps: the driver applies watch events
//! ([`LiveIndex::apply_pod`], [`LiveIndex::delete_pod`], ...), runs
//! [`LiveIndex::cycle`], carries out the returned writes, and reports each bind's result
//! ([`LiveIndex::bind_result`]). Every pod has exactly one [`PodState`], so capacity is
//! counted once: a pod is in the queue, being bound, bound, or waiting for its node.
//!
//! Gangs: Kestrel's `PodGroup` objects ([`LiveIndex::apply_pod_group`]) and the
//! cluster's `Topology` ([`LiveIndex::set_topologies`]) are read with the simulator's
//! parser and declared to the engine, as are scheduler-plugins' and Volcano's PodGroups
//! (whose status Kestrel leaves alone); pods labelled `scheduling.kestrel.dev/pod-group`
//! (or the other projects' label or annotation, or Kueue's plain-pod group label) are
//! its members. A member whose PodGroup is missing
//! or unusable waits outside the engine ([`PodState::GangWait`]) with that reason. Each
//! cycle returns the PodGroup statuses that changed ([`GroupStatusWrite`]). An incomplete
//! gang whose missing pods a ResourceQuota or LimitRange of its namespace refuses
//! ([`LiveIndex::apply_namespace_policy`]) names that object in its status and its pods'.
//! A queued Job's, StatefulSet's or ReplicaSet's pods are one gang too
//! ([`LiveIndex::apply_owner`]).

mod cycle;
mod dra;
mod evictions;
mod groups;
mod nodes;
mod owners;
mod pods;
mod queue_status;
mod refusals;
mod volumes;

pub use cycle::{BindOutcome, BindWrite, CycleOutput, StatusWrite};
pub use dra::{
    ClaimWrite, DraEvent, ExtendedClaimWrite, DELETE_PROTECTION, EXTENDED_CLAIM_ANNOTATION,
};
pub use evictions::{CheckpointWrite, EvictWrite, NominationWrite};
pub use groups::{GroupEventWrite, GroupStatusWrite};
pub use queue_status::QueueStatusWrite;
pub use volumes::{ProvisionWrite, VolumeEvent};

use evictions::Evictions;
use groups::GroupBook;
use k8s_openapi::api::core::v1::{Node, Pod};
use kestrel_core::{GpuAssignment, Millis, PodId, PodSpec, Scheduler, SchedulerConfig};
use kestrel_objects::limit_range::PodResources;
use kestrel_objects::live::{self, ConvertError};
use kestrel_objects::pods::Catalog;
use kestrel_objects::warning::FieldWarning;
use owners::OwnerBook;
use queue_status::QueueStatusBook;
use refusals::Refusals;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// Where a pod stands.
#[derive(Debug, Clone, PartialEq)]
pub enum PodState {
    /// Ours, waiting in the engine's queue.
    Queued(PodId),
    /// The engine placed it; the binder is carrying the decision out.
    Binding { id: PodId, node: String },
    /// Bound in the API (by Kestrel or anyone else) and counted on its node.
    Bound { id: PodId, node: String },
    /// Bound in the API to a node the engine does not know (not yet watched, or deleted):
    /// not counted until the node appears.
    Orphan {
        node: String,
        spec: Box<PodSpec>,
        gpus: Option<GpuAssignment>,
    },
    /// Ours, but `spec.schedulingGates` is not empty.
    Gated,
    /// Ours, but Kestrel cannot read it (the error is reported on the pod); retried when
    /// the pod or the PriorityClasses/RuntimeClasses change.
    Invalid(Box<Pod>),
    /// Ours and readable, but its gang cannot be scheduled: its PodGroup does not exist or
    /// is invalid (`reason`, reported on the pod). Not in the engine; submitted when the
    /// PodGroup becomes usable.
    GangWait { spec: Box<PodSpec>, reason: String },
}

/// scheduler-plugins' PodGroup API group, read as well as Kestrel's own.
pub const PLUGINS_GROUP: &str = "scheduling.x-k8s.io";

/// Volcano's PodGroup API group, read as well as Kestrel's own.
pub const VOLCANO_GROUP: &str = "scheduling.volcano.sh";

/// A gang's (namespace, name).
pub type GroupKey = (String, String);

#[derive(Debug, Clone)]
struct Tracked {
    uid: String,
    state: PodState,
    /// The gang it belongs to (ours only).
    group: Option<GroupKey>,
    /// `status.phase` is Running.
    running: bool,
    /// A gang member's containers' requests and limits, for the LimitRanges that may
    /// refuse pods like it.
    resources: Option<Arc<PodResources>>,
}

/// The `PodScheduled=False` reason of a pod its queue holds back (not `Unschedulable`, so
/// that cluster autoscalers do not add nodes for quota).
pub const QUEUE_WAIT_REASON: &str = "WaitingForQueue";

/// Pending pods per reason kind (the `reason` label of `kestrel_pending_pods`).
pub const REASON_KINDS: [&str; 5] = ["capacity", "constraints", "gang", "invalid", "untried"];

/// The index: every pod Kestrel tracks and the engine they feed, with the books of the
/// other jobs it does for the driver (PodGroup status, queue status, namespace-policy refusals (ResourceQuota, LimitRange),
/// evictions).
pub struct LiveIndex {
    scheduler: Scheduler,
    scheduler_name: String,
    catalog: Catalog,
    pods: HashMap<String, Tracked>,
    keys: HashMap<PodId, String>,
    /// Explanations for invalid pods and pods waiting for their gang, reported at the next
    /// cycle.
    invalid_reports: Vec<StatusWrite>,
    catalog_errors: Vec<ConvertError>,
    /// The message last reported per waiting pod (`namespace/name`), so that a pod's own
    /// status update does not report it again.
    reported: HashMap<String, String>,
    /// The driver's clock ([`LiveIndex::set_time`]): when pods arrive, for gang timeouts.
    now: Millis,
    /// Wall time (Unix ms) at driver time 0, to read and write the checkpoint annotations.
    wall_origin: i64,
    /// Pods arrive at their creationTimestamp and bound pods started at
    /// `status.startTime` ([`LiveIndex::use_object_times`]), not when they are seen.
    object_times: bool,
    /// The pods (`namespace/name`) a pod relist in progress has listed so far: the driver
    /// keeps no store of Pod objects, so the index itself finds those deleted meanwhile.
    relisted_pods: Option<HashSet<String>>,
    /// Gangs, their PodGroups' status and events, and the topology levels.
    gangs: GroupBook,
    /// Jobs whose pods are one workload.
    owners: OwnerBook,
    /// ClusterQueue and LocalQueue objects and the statuses written for them.
    queues: QueueStatusBook,
    /// The ResourceQuotas and LimitRanges that explain incomplete gangs.
    refusals: Refusals,
    /// Preemption victims on their way out.
    evictions: Evictions,
    /// Warnings about other projects' objects not said yet
    /// ([`LiveIndex::take_field_warnings`]).
    field_warnings: Vec<FieldWarning>,
    /// DeviceClasses, ResourceSlices and ResourceClaims.
    dra: dra::DraBook,
    /// PersistentVolumeClaims, PersistentVolumes and StorageClasses.
    volumes: volumes::VolumeBook,
}

impl LiveIndex {
    pub fn new(config: SchedulerConfig, scheduler_name: impl Into<String>) -> Self {
        LiveIndex {
            scheduler: Scheduler::new(config),
            scheduler_name: scheduler_name.into(),
            // Pods naming a WorkloadPriorityClass wait for that listing.
            catalog: Catalog::live(
                Path::new(live::API_SOURCE),
                [],
                [],
                kestrel_objects::pods::WorkloadPriorityListing::Pending,
            )
            .0,
            pods: HashMap::new(),
            keys: HashMap::new(),
            invalid_reports: Vec::new(),
            catalog_errors: Vec::new(),
            reported: HashMap::new(),
            now: 0,
            wall_origin: 0,
            object_times: false,
            relisted_pods: None,
            gangs: GroupBook::default(),
            owners: OwnerBook::default(),
            queues: QueueStatusBook::default(),
            refusals: Refusals::default(),
            evictions: Evictions::default(),
            field_warnings: Vec::new(),
            dra: dra::DraBook::default(),
            volumes: volumes::VolumeBook::default(),
        }
    }

    /// The warnings about fields of other projects' objects (Volcano and KAI queues,
    /// ResourceQuotas, LimitRanges) that Kestrel does not honour, new since the last call:
    /// each is returned once while it lasts, for the driver to log and post as an Event.
    pub fn take_field_warnings(&mut self) -> Vec<FieldWarning> {
        std::mem::take(&mut self.field_warnings)
    }

    /// Sets the clock that pods applied from now on arrive at (a gang's
    /// `scheduleTimeoutSeconds` counts from its first pod's arrival). Never goes back.
    pub fn set_time(&mut self, now: Millis) {
        self.now = self.now.max(now);
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn scheduler_name(&self) -> &str {
        &self.scheduler_name
    }

    /// Sets the wall time (Unix ms) at driver time 0: checkpoint times in annotations are
    /// wall times.
    pub fn set_wall_origin(&mut self, unix_ms: i64) {
        self.wall_origin = unix_ms;
    }
}

/// The names of a node listing, for [`LiveIndex::retain_nodes`].
pub fn node_names<'a>(nodes: impl IntoIterator<Item = &'a Arc<Node>>) -> HashSet<String> {
    nodes
        .into_iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}
