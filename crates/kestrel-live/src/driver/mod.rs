//! The live scheduler's loop: watches in, cycles on change, binds and reports out.
//!
//! A replica schedules only while it leads. On taking the lease it starts the watches
//! afresh (a new LIST of Pods, Nodes, PriorityClasses, RuntimeClasses, Kueue's
//! WorkloadPriorityClasses, Namespaces,
//! PodDisruptionBudgets, ResourceQuotas, LimitRanges, and Kestrel's PodGroups, Topologies and queue
//! kinds), rebuilds the engine's state from that
//! listing (pods bound by anyone count as used), and binds only after every listing is in.
//! Where Kestrel's CRDs are not installed (or not readable), their listings count as empty.
//! Preemptions the engine decides are carried out here: checkpoint requests, then
//! evictions when due. On losing the
//! lease it aborts the binds in flight, posts nothing more, and drops its state; taking the
//! lease again starts over from a listing.
//!
//! Along a pod's life: [`watches`] list and watch each kind, [`listings`] say which kinds
//! and which of their listings are complete, [`apply`] reads each event into the index,
//! [`lead`] cycles and [`writes`] carry the decisions out to the API; [`snapshot`] reads the
//! same watches once for `kestrel explain --live`.

mod apply;
mod lead;
mod listings;
mod snapshot;
mod watches;
mod writes;

pub use apply::{apply_change, pod_group_keys};
pub use lead::{lead, run, Ended};
pub use listings::{
    other_projects_listings, QueueWatch, WorkloadPriorityWatch, LISTING_PENDING, NOT_SERVED,
    SERVED, WORKLOAD_PRIORITY_WATCHES,
};
pub use snapshot::{snapshot, SnapshotError};
pub use watches::{start_watches, Stores};

use crate::index::{DraEvent, VolumeEvent};
use k8s_openapi::api::core::v1::{LimitRange, Node, Pod, ResourceQuota};
use kestrel_core::SchedulerConfig;
use kestrel_objects::workloads::Owner;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use std::sync::Arc;
use tokio::time::Duration;

#[derive(Debug, Clone)]
pub struct DriverConfig {
    pub scheduler: SchedulerConfig,
    pub scheduler_name: String,
    /// Binds and status reports in flight at once.
    pub max_in_flight: usize,
    /// How long a cycle waits after a change for more changes.
    pub debounce: Duration,
    /// Copies of the leader's state for the dashboard (`--dashboard-addr`); `None`: off.
    /// Only the scheduling loop locks it, so the lock never waits.
    pub dashboard: Option<Arc<std::sync::Mutex<crate::live_dashboard::DashboardFeed>>>,
}

/// Binds and status reports in flight at once unless configured. Each bind is an
/// annotation PATCH and then a binding POST, so 64 in flight bind about 760 pods/s against
/// an API server that takes 40 ms per write (2,700 at 10 ms).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

impl DriverConfig {
    pub fn new(scheduler_name: &str) -> Self {
        DriverConfig {
            scheduler: SchedulerConfig::default(),
            scheduler_name: scheduler_name.to_string(),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            debounce: Duration::from_millis(20),
            dashboard: None,
        }
    }
}

/// A watch event, by kind.
#[derive(Debug)]
pub enum Change {
    Pod(Box<Event<Pod>>),
    Node(Box<Event<Node>>),
    /// A PriorityClass changed; `listed`: that watch finished listing.
    PriorityClasses {
        listed: bool,
    },
    /// A RuntimeClass changed; `listed`: that watch finished listing.
    RuntimeClasses {
        listed: bool,
    },
    /// A Kueue WorkloadPriorityClass changed (`kind`: the watch of one API version, as
    /// [`WORKLOAD_PRIORITY_WATCHES`] names it); `listed`: that watch finished listing.
    WorkloadPriorityClasses {
        kind: &'static str,
        listed: bool,
    },
    /// A Kestrel PodGroup changed.
    PodGroup(Box<Event<DynamicObject>>),
    /// A scheduler-plugins or Volcano PodGroup changed (`kind`: which); `listed`: that
    /// watch finished listing.
    ForeignPodGroup {
        kind: &'static str,
        event: Box<Event<DynamicObject>>,
    },
    /// A Kestrel Topology changed; `listed`: that watch finished listing.
    Topologies {
        listed: bool,
    },
    /// A queue object (ClusterQueue, LocalQueue, Cohort, ResourceFlavor) or a Namespace
    /// changed; `listed`: that kind's watch finished listing.
    Queues {
        kind: &'static str,
        listed: bool,
    },
    /// A ResourceQuota changed.
    ResourceQuota(Box<Event<ResourceQuota>>),
    /// A LimitRange changed.
    LimitRange(Box<Event<LimitRange>>),
    /// A Job, StatefulSet, ReplicaSet, PyTorchJob or JobSet changed (its pods may be one
    /// workload).
    Owner {
        kind: &'static str,
        event: Box<Event<Owner>>,
    },
    /// A DeviceClass, ResourceSlice or ResourceClaim changed.
    Dra(Box<DraEvent>),
    /// A PersistentVolumeClaim, PersistentVolume, StorageClass or CSINode changed.
    Volume(Box<VolumeEvent>),
    /// The API does not serve this kind (its CRD is not installed) or does not let
    /// Kestrel read it: its listing counts as empty until a watch succeeds.
    Unserved {
        kind: &'static str,
    },
}
