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

use crate::admission::AdmissionObject;
use crate::api::ApiWriter;
use crate::index::{
    self, BindOutcome, BindWrite, CheckpointWrite, DraEvent, EvictWrite, GroupEventWrite, GroupKey,
    GroupStatusWrite, LiveIndex, NominationWrite, QueueStatusWrite, StatusWrite, VolumeEvent,
    REASON_KINDS,
};
use crate::metrics::Metrics;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ResourceQuota,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kestrel_core::SchedulerConfig;
use kestrel_objects::crds::{PodGroup, Topology};
use kestrel_objects::device_taint_rule::DeviceTaintRule;
use kestrel_objects::kinds;
use kestrel_objects::pods::WorkloadPriorityListing;
use kestrel_objects::warning::FieldWarning;
use kestrel_objects::workloads::Owner;
use kestrel_view::events::RunEvent;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, Event, ExponentialBackoff};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Duration, Instant};

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

/// The reflector stores the driver reads on relists (pods have none: see
/// [`LiveIndex::begin_pod_relist`]).
#[derive(Clone)]
pub struct Stores {
    pub nodes: Store<Node>,
    pub priority_classes: Store<PriorityClass>,
    pub runtime_classes: Store<RuntimeClass>,
    /// Kueue's WorkloadPriorityClasses, one watch per API version.
    pub workload_priority_classes: Vec<WorkloadPriorityWatch>,
    pub pod_groups: Store<DynamicObject>,
    pub topologies: Store<DynamicObject>,
    /// ClusterQueues, LocalQueues, Cohorts and ResourceFlavors, by kind.
    pub queues: Vec<(QueueWatch, Store<DynamicObject>)>,
    /// scheduler-plugins' and Volcano's PodGroups, by kind.
    pub foreign_pod_groups: Vec<(&'static str, Store<DynamicObject>)>,
    pub namespaces: Store<Namespace>,
    pub disruption_budgets: Store<PodDisruptionBudget>,
    /// To explain gangs whose missing pods the API server refuses.
    pub resource_quotas: Store<ResourceQuota>,
    pub limit_ranges: Store<LimitRange>,
    pub jobs: Store<Job>,
    pub stateful_sets: Store<StatefulSet>,
    pub replica_sets: Store<ReplicaSet>,
    /// PyTorchJobs and JobSets, by kind (read when their CRDs are installed).
    pub role_owners: Vec<(&'static str, Store<DynamicObject>)>,
}

impl Stores {
    /// The owners listed, by kind.
    fn owners(&self) -> Vec<(&'static str, Owner)> {
        let jobs = self
            .jobs
            .state()
            .into_iter()
            .map(|j| ("Job", Owner::Job((*j).clone())));
        let sets = self
            .stateful_sets
            .state()
            .into_iter()
            .map(|s| ("StatefulSet", Owner::StatefulSet((*s).clone())));
        let replicas = self
            .replica_sets
            .state()
            .into_iter()
            .map(|r| ("ReplicaSet", Owner::ReplicaSet((*r).clone())));
        let roles = self.role_owners.iter().flat_map(|(kind, store)| {
            store
                .state()
                .into_iter()
                .map(|o| (*kind, role_owner(kind, &o)))
        });
        jobs.chain(sets).chain(replicas).chain(roles).collect()
    }

    /// The (namespace, name) of the listed objects of an owner kind.
    fn owner_keys(&self, kind: &str) -> std::collections::HashSet<(String, String)> {
        match kind {
            "Job" => namespaced_keys(&self.jobs),
            "StatefulSet" => namespaced_keys(&self.stateful_sets),
            "ReplicaSet" => namespaced_keys(&self.replica_sets),
            _ => self
                .role_owners
                .iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, store)| namespaced_keys(store))
                .unwrap_or_default(),
        }
    }
}

/// Other projects' PodGroups the live scheduler reads: (name, group, version).
const FOREIGN_POD_GROUPS: [(&str, &str, &str); 2] = [
    (
        "scheduler-plugins PodGroup",
        index::PLUGINS_GROUP,
        "v1alpha1",
    ),
    ("Volcano PodGroup", index::VOLCANO_GROUP, "v1beta1"),
];

/// The queue kinds the live scheduler reads (Kestrel's group), with the Namespaces their
/// namespaceSelectors match and the PodDisruptionBudgets preemption respects.
const QUEUE_WATCHES: [&str; 8] = [
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "ResourceFlavor",
    VOLCANO_QUEUE,
    KAI_QUEUE,
    "Namespace",
    "PodDisruptionBudget",
];

/// Kueue's API group.
const KUEUE_GROUP: &str = "kueue.x-k8s.io";

/// Volcano's and KAI's `Queue`, as the watches and their readiness name them.
const VOLCANO_QUEUE: &str = "Queue.scheduling.volcano.sh";
const KAI_QUEUE: &str = "Queue.scheduling.run.ai";

/// A watched kind of queue object: the name its watch goes by, and the type its objects
/// are read as (listed items may come without theirs).
#[derive(Clone, Copy, Debug)]
pub struct QueueWatch {
    pub name: &'static str,
    pub api_version: &'static str,
    pub kind: &'static str,
}

impl QueueWatch {
    /// A queue kind of Kestrel's own group.
    pub const fn kestrel(kind: &'static str) -> QueueWatch {
        QueueWatch {
            name: kind,
            api_version: kestrel_objects::crds::API_VERSION,
            kind,
        }
    }
}

/// The queue kinds watched besides Namespaces and PodDisruptionBudgets: Kestrel's, then
/// Volcano's and KAI's (read when their CRDs are installed).
const QUEUE_KINDS_WATCHED: [(QueueWatch, &str); 6] = [
    (QueueWatch::kestrel("ClusterQueue"), "clusterqueues"),
    (QueueWatch::kestrel("LocalQueue"), "localqueues"),
    (QueueWatch::kestrel("Cohort"), "cohorts"),
    (QueueWatch::kestrel("ResourceFlavor"), "resourceflavors"),
    (
        QueueWatch {
            name: VOLCANO_QUEUE,
            api_version: "scheduling.volcano.sh/v1beta1",
            kind: "Queue",
        },
        "queues",
    ),
    (
        QueueWatch {
            name: KAI_QUEUE,
            api_version: "scheduling.run.ai/v2",
            kind: "Queue",
        },
        "queues",
    ),
];

/// The listings (API paths) of other projects' kinds the live scheduler watches where
/// their CRDs are installed: foreign PodGroups, Volcano's and KAI's queues, multi-role
/// owners, Kueue's WorkloadPriorityClasses. Built from the watches themselves, so a mock
/// API server that answers these 404 (a cluster without those projects) follows them.
pub fn other_projects_listings() -> Vec<String> {
    let path =
        |group: &str, version: &str, plural: &str| format!("/apis/{group}/{version}/{plural}");
    let pod_groups = FOREIGN_POD_GROUPS
        .iter()
        .map(|(_, group, version)| path(group, version, "podgroups"));
    let queues = QUEUE_KINDS_WATCHED
        .iter()
        .filter(|(watch, _)| watch.api_version != kestrel_objects::crds::API_VERSION)
        .map(|(watch, plural)| format!("/apis/{}/{plural}", watch.api_version));
    let owners = kinds::live_untyped_owners().map(|k| path(k.group(), k.versions()[0], k.plural()));
    let priorities = WORKLOAD_PRIORITY_WATCHES
        .iter()
        .map(|(_, version)| path(KUEUE_GROUP, version, "workloadpriorityclasses"));
    // A cluster before Kubernetes 1.34 does not serve resource.k8s.io/v1, nor one before
    // 1.37 its DeviceTaintRules.
    let dra = [
        "deviceclasses",
        "resourceslices",
        "resourceclaims",
        "devicetaintrules",
    ]
    .into_iter()
    .map(move |plural| path("resource.k8s.io", "v1", plural));
    pod_groups
        .chain(queues)
        .chain(owners)
        .chain(priorities)
        .chain(dra)
        .collect()
}

/// Kueue's WorkloadPriorityClass, watched in one API version: Kueue serves it as
/// `v1beta1` and (from 0.15) `v1beta2`, and a later Kueue may serve `v1beta2` alone.
#[derive(Clone)]
pub struct WorkloadPriorityWatch {
    /// The name the watch goes by (one of [`WORKLOAD_PRIORITY_WATCHES`]).
    pub kind: &'static str,
    pub store: Store<DynamicObject>,
    /// What is known of this version: [`LISTING_PENDING`], [`SERVED`] (set before the
    /// change that says so is sent) or [`NOT_SERVED`] (set when that change is applied).
    pub served: Arc<std::sync::atomic::AtomicU8>,
}

pub const LISTING_PENDING: u8 = 0;
pub const SERVED: u8 = 1;
pub const NOT_SERVED: u8 = 2;

/// The WorkloadPriorityClass watches, the newer version first, with their API versions.
pub const WORKLOAD_PRIORITY_WATCHES: [(&str, &str); 2] = [
    ("WorkloadPriorityClass.kueue.x-k8s.io/v1beta2", "v1beta2"),
    ("WorkloadPriorityClass.kueue.x-k8s.io/v1beta1", "v1beta1"),
];

/// The WorkloadPriorityClasses of the served versions (each class once, the newer
/// version's object first); `None` while a version is not listed yet, and an empty
/// `Some` when no version is served (Kueue is not installed).
fn workload_priority_classes(stores: &Stores) -> Option<(bool, Vec<serde_json::Value>)> {
    let mut seen = std::collections::HashSet::new();
    let mut objects = Vec::new();
    let mut served = false;
    for watch in &stores.workload_priority_classes {
        match watch.served.load(Ordering::Acquire) {
            SERVED => served = true,
            NOT_SERVED => continue,
            _ => return None,
        }
        for o in watch.store.state() {
            if seen.insert(o.metadata.name.clone()) {
                objects.push(to_json(&o));
            }
        }
    }
    Some((served, objects))
}

/// Which listings are complete.
#[derive(Debug, Default, Clone)]
struct Synced {
    pods: bool,
    nodes: bool,
    priority_classes: bool,
    runtime_classes: bool,
    /// The WorkloadPriorityClass versions listed (or not served) so far.
    workload_priority_classes: std::collections::BTreeSet<&'static str>,
    pod_groups: bool,
    topologies: bool,
    /// The queue kinds (and Namespaces) listed so far.
    queues: std::collections::BTreeSet<&'static str>,
    /// The foreign PodGroup kinds listed so far.
    foreign_pod_groups: std::collections::BTreeSet<&'static str>,
    resource_quotas: bool,
    limit_ranges: bool,
    /// The owner kinds (Job, StatefulSet, ReplicaSet) listed so far.
    owners: std::collections::BTreeSet<&'static str>,
    /// The DRA kinds listed (or not served) so far: claims' allocations must be known
    /// before devices are given.
    dra: std::collections::BTreeSet<&'static str>,
    /// The storage kinds listed so far: a pod's claims are judged on all of them.
    volumes: std::collections::BTreeSet<&'static str>,
}

/// The storage kinds watched.
const VOLUME_KINDS: [&str; 4] = [
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
];

/// The DRA kinds watched.
const DRA_KINDS: [&str; 4] = [
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaim",
    "DeviceTaintRule",
];

impl Synced {
    /// Notes a listing that `change` completes.
    fn note(&mut self, change: &Change) {
        match change {
            Change::Pod(e) if matches!(**e, Event::InitDone) => self.pods = true,
            Change::Node(e) if matches!(**e, Event::InitDone) => self.nodes = true,
            Change::PriorityClasses { listed: true } => self.priority_classes = true,
            Change::RuntimeClasses { listed: true } => self.runtime_classes = true,
            Change::WorkloadPriorityClasses { kind, listed: true } => {
                self.workload_priority_classes.insert(kind);
            }
            Change::Unserved { kind } if kind.starts_with("WorkloadPriorityClass") => {
                self.workload_priority_classes.insert(kind);
            }
            Change::PodGroup(e) if matches!(**e, Event::InitDone) => self.pod_groups = true,
            Change::Topologies { listed: true } => self.topologies = true,
            Change::Unserved { kind: "PodGroup" } => self.pod_groups = true,
            Change::Unserved { kind: "Topology" } => self.topologies = true,
            Change::ResourceQuota(e) if matches!(**e, Event::InitDone) => {
                self.resource_quotas = true
            }
            Change::Unserved {
                kind: "ResourceQuota",
            } => self.resource_quotas = true,
            Change::LimitRange(e) if matches!(**e, Event::InitDone) => self.limit_ranges = true,
            Change::Unserved { kind: "LimitRange" } => self.limit_ranges = true,
            Change::Owner { kind, event } if matches!(**event, Event::InitDone) => {
                self.owners.insert(kind);
            }
            Change::Unserved { kind } if kinds::is_live_owner(kind) => {
                self.owners.insert(kind);
            }
            Change::ForeignPodGroup { kind, event } if matches!(**event, Event::InitDone) => {
                self.foreign_pod_groups.insert(kind);
            }
            Change::Unserved { kind } if kind.ends_with("PodGroup") => {
                self.foreign_pod_groups.insert(kind);
            }
            Change::Dra(event) => {
                let kind = match &**event {
                    DraEvent::Class(Event::InitDone) => "DeviceClass",
                    DraEvent::Slice(Event::InitDone) => "ResourceSlice",
                    DraEvent::Claim(Event::InitDone) => "ResourceClaim",
                    DraEvent::TaintRule(Event::InitDone) => "DeviceTaintRule",
                    _ => return,
                };
                self.dra.insert(kind);
            }
            Change::Unserved { kind } if DRA_KINDS.contains(kind) => {
                self.dra.insert(kind);
            }
            Change::Volume(event) => {
                let kind = match &**event {
                    VolumeEvent::Claim(e) if matches!(**e, Event::InitDone) => {
                        "PersistentVolumeClaim"
                    }
                    VolumeEvent::Volume(e) if matches!(**e, Event::InitDone) => "PersistentVolume",
                    VolumeEvent::Class(e) if matches!(**e, Event::InitDone) => "StorageClass",
                    VolumeEvent::CsiNode(e) if matches!(**e, Event::InitDone) => "CSINode",
                    _ => return,
                };
                self.volumes.insert(kind);
            }
            Change::Unserved { kind } if VOLUME_KINDS.contains(kind) => {
                self.volumes.insert(kind);
            }
            Change::Queues { kind, listed: true } | Change::Unserved { kind } => {
                self.queues.insert(kind);
            }
            _ => {}
        }
    }

    /// The listings not complete yet, for an error message.
    fn missing(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        for (done, kind) in [
            (self.pods, "Pod"),
            (self.nodes, "Node"),
            (self.priority_classes, "PriorityClass"),
            (self.runtime_classes, "RuntimeClass"),
            (self.pod_groups, "PodGroup"),
            (self.topologies, "Topology"),
            (self.resource_quotas, "ResourceQuota"),
            (self.limit_ranges, "LimitRange"),
        ] {
            if !done {
                missing.push(kind);
            }
        }
        missing.extend(
            WORKLOAD_PRIORITY_WATCHES
                .iter()
                .map(|(kind, _)| *kind)
                .filter(|k| !self.workload_priority_classes.contains(k)),
        );
        missing.extend(QUEUE_WATCHES.iter().filter(|k| !self.queues.contains(*k)));
        missing.extend(DRA_KINDS.iter().filter(|k| !self.dra.contains(*k)));
        missing.extend(VOLUME_KINDS.iter().filter(|k| !self.volumes.contains(*k)));
        missing.extend(
            kinds::live_owners()
                .map(|k| k.kind())
                .filter(|k| !self.owners.contains(k)),
        );
        missing.extend(
            FOREIGN_POD_GROUPS
                .iter()
                .map(|(kind, _, _)| *kind)
                .filter(|k| !self.foreign_pod_groups.contains(k)),
        );
        missing
    }

    fn all(&self) -> bool {
        self.pods
            && self.nodes
            && self.priority_classes
            && self.runtime_classes
            && self.workload_priority_classes.len() == WORKLOAD_PRIORITY_WATCHES.len()
            && self.pod_groups
            && self.topologies
            && self.resource_quotas
            && self.limit_ranges
            && self.owners.len() == kinds::live_owners().count()
            && self.queues.len() == QUEUE_WATCHES.len()
            && self.foreign_pod_groups.len() == FOREIGN_POD_GROUPS.len()
            && self.dra.len() == DRA_KINDS.len()
            && self.volumes.len() == VOLUME_KINDS.len()
    }
}

/// The listing failed because the API does not serve the kind (404) or forbids it (403).
fn unserved(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404 || s.code == 403)
}

/// The listing was refused (403), as opposed to a kind that is not served (404).
fn forbidden(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 403)
}

/// Watches a kind into a reflector store; its events arrive on `tx`. `unserved`: what to
/// send (once) when the API does not serve the kind, for kinds that may be missing.
fn spawn_watch<K, F>(
    tasks: &mut JoinSet<()>,
    api: Api<K>,
    dyntype: K::DynamicType,
    tx: mpsc::Sender<Change>,
    wrap: F,
    unserved_change: Option<Change>,
) -> Store<K>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    F: Fn(Event<K>) -> Change + Send + 'static,
{
    let kind = K::kind(&dyntype).to_string();
    let writer = Writer::new(dyntype);
    let store = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(api, watcher::Config::default())
            .modify(kestrel_objects::live::trim_watched::<K>),
    );
    forward_events(tasks, kind, stream, tx, wrap, unserved_change);
    store
}

/// How a failed watch retries: after 0.5 s, doubling to at most 4 s (jittered), the delay
/// forgotten after 2 min without errors. After an API server restart the first retries meet
/// refused connections and 403s (its authorizer not yet warm); kube-runtime's default (0.8 s
/// doubling to 30 s) had grown past 6 s by then and left the scheduler blind for that long.
fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
    let exponential = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(4))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times();
    ResetTimerBackoff::new(exponential.into(), Duration::from_secs(120))
}

/// Sends a watch's events, trimmed and wrapped, to `tx` (with backoff on errors) until the
/// receiver goes away. `unserved_change`: as for [`spawn_watch`].
fn forward_events<K, S, F>(
    tasks: &mut JoinSet<()>,
    kind: String,
    stream: S,
    tx: mpsc::Sender<Change>,
    wrap: F,
    mut unserved_change: Option<Change>,
) where
    K: Send + 'static,
    S: futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
    F: Fn(Event<K>) -> Change + Send + 'static,
{
    let stream = stream.backoff(watch_backoff());
    tasks.spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut listed = false;
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    listed |= matches!(event, Event::InitDone);
                    if tx.send(wrap(event)).await.is_err() {
                        return;
                    }
                }
                Err(e) if !listed && unserved(&e) => {
                    if let Some(change) = unserved_change.take() {
                        if forbidden(&e) {
                            tracing::warn!(kind = %kind, error = %e, "forbidden to list this kind: grant the scheduler's ServiceAccount list and watch on it (the ClusterRole kestrel-scheduler in deploy/kestrel.yaml); going on without it and retrying");
                        } else {
                            tracing::info!(kind = %kind, "kind not served (its CRD is not installed); going on without it and watching for it");
                        }
                        if tx.send(change).await.is_err() {
                            return;
                        }
                    } else {
                        tracing::debug!(kind = %kind, error = %e, "still not served; retrying");
                    }
                }
                Err(e) => tracing::warn!(kind = %kind, error = %e, "watch failed; retrying"),
            }
        }
    });
}

/// Starts the watches; their events arrive on the returned channel.
pub fn start_watches(client: &Client, tasks: &mut JoinSet<()>) -> (Stores, mpsc::Receiver<Change>) {
    let (tx, rx) = mpsc::channel(4096);
    // Pods are the bulk of what is watched: they live in the index only, with no store
    // of their objects (the index finds the pods a relist no longer has).
    forward_events(
        tasks,
        "Pod".to_string(),
        watcher::watcher(Api::<Pod>::all(client.clone()), watcher::Config::default())
            .modify(kestrel_objects::live::trim_watched::<Pod>),
        tx.clone(),
        |e| Change::Pod(Box::new(e)),
        None,
    );
    // DRA objects live in the index (claims are as many as pods): no stores.
    forward_events(
        tasks,
        "DeviceClass".to_string(),
        watcher::watcher(
            Api::<DeviceClass>::all(client.clone()),
            watcher::Config::default(),
        ),
        tx.clone(),
        |e| Change::Dra(Box::new(DraEvent::Class(e))),
        Some(Change::Unserved {
            kind: "DeviceClass",
        }),
    );
    forward_events(
        tasks,
        "ResourceSlice".to_string(),
        watcher::watcher(
            Api::<ResourceSlice>::all(client.clone()),
            watcher::Config::default(),
        ),
        tx.clone(),
        |e| Change::Dra(Box::new(DraEvent::Slice(e))),
        Some(Change::Unserved {
            kind: "ResourceSlice",
        }),
    );
    forward_events(
        tasks,
        "DeviceTaintRule".to_string(),
        watcher::watcher(
            Api::<DeviceTaintRule>::all(client.clone()),
            watcher::Config::default(),
        ),
        tx.clone(),
        |e| Change::Dra(Box::new(DraEvent::TaintRule(e))),
        Some(Change::Unserved {
            kind: "DeviceTaintRule",
        }),
    );
    forward_events(
        tasks,
        "ResourceClaim".to_string(),
        watcher::watcher(
            Api::<ResourceClaim>::all(client.clone()),
            watcher::Config::default(),
        )
        .modify(|c: &mut ResourceClaim| c.metadata.managed_fields = None),
        tx.clone(),
        |e| Change::Dra(Box::new(DraEvent::Claim(e))),
        Some(Change::Unserved {
            kind: "ResourceClaim",
        }),
    );
    // Storage objects live in the index too (claims are as many as pods).
    forward_events(
        tasks,
        "PersistentVolumeClaim".to_string(),
        watcher::watcher(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            watcher::Config::default(),
        )
        .modify(|c: &mut PersistentVolumeClaim| c.metadata.managed_fields = None),
        tx.clone(),
        |e| Change::Volume(Box::new(VolumeEvent::Claim(Box::new(e)))),
        Some(Change::Unserved {
            kind: "PersistentVolumeClaim",
        }),
    );
    forward_events(
        tasks,
        "PersistentVolume".to_string(),
        watcher::watcher(
            Api::<PersistentVolume>::all(client.clone()),
            watcher::Config::default(),
        )
        .modify(|v: &mut PersistentVolume| v.metadata.managed_fields = None),
        tx.clone(),
        |e| Change::Volume(Box::new(VolumeEvent::Volume(Box::new(e)))),
        Some(Change::Unserved {
            kind: "PersistentVolume",
        }),
    );
    forward_events(
        tasks,
        "StorageClass".to_string(),
        watcher::watcher(
            Api::<StorageClass>::all(client.clone()),
            watcher::Config::default(),
        ),
        tx.clone(),
        |e| Change::Volume(Box::new(VolumeEvent::Class(Box::new(e)))),
        Some(Change::Unserved {
            kind: "StorageClass",
        }),
    );
    forward_events(
        tasks,
        "CSINode".to_string(),
        watcher::watcher(
            Api::<CSINode>::all(client.clone()),
            watcher::Config::default(),
        )
        .modify(|n: &mut CSINode| n.metadata.managed_fields = None),
        tx.clone(),
        |e| Change::Volume(Box::new(VolumeEvent::CsiNode(Box::new(e)))),
        Some(Change::Unserved { kind: "CSINode" }),
    );
    let nodes = spawn_watch(
        tasks,
        Api::all(client.clone()),
        (),
        tx.clone(),
        |e| Change::Node(Box::new(e)),
        None,
    );
    let priority_classes = spawn_watch(
        tasks,
        Api::<PriorityClass>::all(client.clone()),
        (),
        tx.clone(),
        |e| Change::PriorityClasses {
            listed: matches!(e, Event::InitDone),
        },
        None,
    );
    let runtime_classes = spawn_watch(
        tasks,
        Api::<RuntimeClass>::all(client.clone()),
        (),
        tx.clone(),
        |e| Change::RuntimeClasses {
            listed: matches!(e, Event::InitDone),
        },
        None,
    );
    let mut workload_priority_classes = Vec::new();
    for (kind, version) in WORKLOAD_PRIORITY_WATCHES {
        let gvk = kube::api::GroupVersionKind::gvk(KUEUE_GROUP, version, "WorkloadPriorityClass");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "workloadpriorityclasses");
        let served = Arc::new(std::sync::atomic::AtomicU8::new(LISTING_PENDING));
        let listed = served.clone();
        let store = spawn_watch(
            tasks,
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            resource,
            tx.clone(),
            move |e| {
                let done = matches!(e, Event::InitDone);
                if done {
                    listed.store(SERVED, Ordering::Release);
                }
                Change::WorkloadPriorityClasses { kind, listed: done }
            },
            Some(Change::Unserved { kind }),
        );
        workload_priority_classes.push(WorkloadPriorityWatch {
            kind,
            store,
            served,
        });
    }
    // Kestrel's own kinds are read untyped, so that an object the typed schema would not
    // accept is reported on the object instead of failing the watch.
    let pod_group = ApiResource::erase::<PodGroup>(&());
    let pod_groups = spawn_watch(
        tasks,
        Api::<DynamicObject>::all_with(client.clone(), &pod_group),
        pod_group,
        tx.clone(),
        |e| Change::PodGroup(Box::new(e)),
        Some(Change::Unserved { kind: "PodGroup" }),
    );
    let topology = ApiResource::erase::<Topology>(&());
    let topologies = spawn_watch(
        tasks,
        Api::<DynamicObject>::all_with(client.clone(), &topology),
        topology,
        tx.clone(),
        |e| Change::Topologies {
            listed: matches!(e, Event::InitDone),
        },
        Some(Change::Unserved { kind: "Topology" }),
    );
    let mut queues = Vec::new();
    for (watch, plural) in QUEUE_KINDS_WATCHED {
        let (group, version) = watch.api_version.split_once('/').expect("group/version");
        let gvk = kube::api::GroupVersionKind::gvk(group, version, watch.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let kind = watch.name;
        let store = spawn_watch(
            tasks,
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            resource,
            tx.clone(),
            move |e| Change::Queues {
                kind,
                listed: matches!(e, Event::InitDone),
            },
            Some(Change::Unserved { kind }),
        );
        queues.push((watch, store));
    }
    let mut foreign_pod_groups = Vec::new();
    for (kind, group, version) in FOREIGN_POD_GROUPS {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, "PodGroup");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "podgroups");
        let store = spawn_watch(
            tasks,
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            resource,
            tx.clone(),
            move |e| Change::ForeignPodGroup {
                kind,
                event: Box::new(e),
            },
            Some(Change::Unserved { kind }),
        );
        foreign_pod_groups.push((kind, store));
    }
    let namespaces = spawn_watch(
        tasks,
        Api::<Namespace>::all(client.clone()),
        (),
        tx.clone(),
        |e| Change::Queues {
            kind: "Namespace",
            listed: matches!(e, Event::InitDone),
        },
        Some(Change::Unserved { kind: "Namespace" }),
    );
    let disruption_budgets = spawn_watch(
        tasks,
        Api::<PodDisruptionBudget>::all(client.clone()),
        (),
        tx.clone(),
        |e| Change::Queues {
            kind: "PodDisruptionBudget",
            listed: matches!(e, Event::InitDone),
        },
        Some(Change::Unserved {
            kind: "PodDisruptionBudget",
        }),
    );
    // Without read access (an older ClusterRole), quotas and LimitRanges are not used to
    // explain gangs.
    let resource_quotas = spawn_watch(
        tasks,
        Api::<ResourceQuota>::all(client.clone()),
        (),
        tx.clone(),
        |e| Change::ResourceQuota(Box::new(e)),
        Some(Change::Unserved {
            kind: "ResourceQuota",
        }),
    );
    let limit_ranges = spawn_watch(
        tasks,
        Api::<LimitRange>::all(client.clone()),
        (),
        tx.clone(),
        |e| Change::LimitRange(Box::new(e)),
        Some(Change::Unserved { kind: "LimitRange" }),
    );
    // Without read access (an older ClusterRole), an owner's pods are read one by one.
    let jobs = spawn_watch(
        tasks,
        Api::<Job>::all(client.clone()),
        (),
        tx.clone(),
        |e| owner_change("Job", e, Owner::Job),
        Some(Change::Unserved { kind: "Job" }),
    );
    let stateful_sets = spawn_watch(
        tasks,
        Api::<StatefulSet>::all(client.clone()),
        (),
        tx.clone(),
        |e| owner_change("StatefulSet", e, Owner::StatefulSet),
        Some(Change::Unserved {
            kind: "StatefulSet",
        }),
    );
    let replica_sets = spawn_watch(
        tasks,
        Api::<ReplicaSet>::all(client.clone()),
        (),
        tx.clone(),
        |e| owner_change("ReplicaSet", e, Owner::ReplicaSet),
        Some(Change::Unserved { kind: "ReplicaSet" }),
    );
    // Other projects' multi-role kinds, read untyped (their CRDs may be missing).
    let mut role_owners = Vec::new();
    for owner in kinds::live_untyped_owners() {
        let kind = owner.kind();
        let gvk = kube::api::GroupVersionKind::gvk(owner.group(), owner.versions()[0], kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, owner.plural());
        let store = spawn_watch(
            tasks,
            Api::<DynamicObject>::all_with(client.clone(), &resource),
            resource,
            tx.clone(),
            move |e| owner_change(kind, e, |o| role_owner(kind, &o)),
            Some(Change::Unserved { kind }),
        );
        role_owners.push((kind, store));
    }
    drop(tx);
    (
        Stores {
            nodes,
            priority_classes,
            runtime_classes,
            workload_priority_classes,
            pod_groups,
            topologies,
            queues,
            foreign_pod_groups,
            namespaces,
            disruption_budgets,
            resource_quotas,
            limit_ranges,
            jobs,
            stateful_sets,
            replica_sets,
            role_owners,
        },
        rx,
    )
}

/// An owner kind's watch event as the driver's change.
fn owner_change<K>(kind: &'static str, event: Event<K>, wrap: impl Fn(K) -> Owner) -> Change {
    let event = match event {
        Event::Apply(o) => Event::Apply(wrap(o)),
        Event::Delete(o) => Event::Delete(wrap(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(wrap(o)),
        Event::InitDone => Event::InitDone,
    };
    Change::Owner {
        kind,
        event: Box::new(event),
    }
}

/// A watched object as JSON, for the simulator's parser.
fn to_json(object: &DynamicObject) -> serde_json::Value {
    serde_json::to_value(object).unwrap_or_default()
}

/// A watched object with its type: listed items may come without theirs, and the
/// readers check it.
fn typed(mut json: serde_json::Value, api_version: &str, kind: &str) -> serde_json::Value {
    json["apiVersion"] = serde_json::json!(api_version);
    json["kind"] = serde_json::json!(kind);
    json
}

/// A watched PyTorchJob or JobSet as an owner.
fn role_owner(kind: &'static str, object: &DynamicObject) -> Owner {
    let json = match kinds::live_untyped_owners().find(|k| k.kind() == kind) {
        Some(k) => typed(
            to_json(object),
            &kinds::api_version(k.group(), k.versions()[0]),
            kind,
        ),
        None => to_json(object),
    };
    Owner::roles(kind, json)
}

/// The (namespace, name) of PodGroups in a listing, for [`LiveIndex::retain_pod_groups`].
pub fn pod_group_keys<'a>(
    objects: impl IntoIterator<Item = &'a Arc<DynamicObject>>,
) -> std::collections::HashSet<GroupKey> {
    objects
        .into_iter()
        .filter_map(|o| {
            Some((
                o.metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                o.metadata.name.clone()?,
            ))
        })
        .collect()
}

/// Applies a watch event of ResourceQuotas or LimitRanges (whose listing is `store`).
/// Returns whether what Kestrel uses of them changed.
fn admission_change<K>(state: &mut LiveIndex, store: &Store<K>, event: Event<K>) -> bool
where
    K: AdmissionObject + kube::Resource<DynamicType = ()> + Clone,
{
    match event {
        Event::Apply(o) | Event::InitApply(o) => state.apply_admission(&o),
        Event::Delete(o) => state.delete_admission(
            K::KIND,
            o.meta().namespace.as_deref().unwrap_or_default(),
            o.meta().name.as_deref().unwrap_or_default(),
        ),
        Event::Init => false,
        Event::InitDone => state.retain_admission(K::KIND, &namespaced_keys(store)),
    }
}

/// The (namespace, name) of the namespaced objects a relist left in `store`.
fn namespaced_keys<K>(store: &Store<K>) -> std::collections::HashSet<(String, String)>
where
    K: kube::Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .iter()
        .filter_map(|o| Some((o.meta().namespace.clone()?, o.meta().name.clone()?)))
        .collect()
}

/// Reads every queue object again into the state (each kind's store, typed).
fn refresh_queues(state: &mut LiveIndex, stores: &Stores) {
    let mut objects: Vec<serde_json::Value> = Vec::new();
    for (watch, store) in &stores.queues {
        for o in store.state() {
            objects.push(typed(to_json(&o), watch.api_version, watch.kind));
        }
    }
    for ns in stores.namespaces.state() {
        let json = serde_json::to_value(&*ns).unwrap_or_default();
        objects.push(typed(json, "v1", "Namespace"));
    }
    for pdb in stores.disruption_budgets.state() {
        let json = serde_json::to_value(&*pdb).unwrap_or_default();
        objects.push(typed(json, "policy/v1", "PodDisruptionBudget"));
    }
    for e in state.set_queues(&objects) {
        tracing::warn!(error = %e, "queue object cannot be used; its previous version (if any) stays in force");
    }
}

/// Applies one watch event to the state. Returns whether anything may have changed.
pub fn apply_change(state: &mut LiveIndex, stores: &Stores, change: Change) -> bool {
    match change {
        Change::Pod(event) => match *event {
            Event::Apply(p) | Event::InitApply(p) => state.apply_pod(&p),
            Event::Delete(p) => state.delete_pod(&p),
            Event::Init => {
                state.begin_pod_relist();
                return false;
            }
            Event::InitDone => state.end_pod_relist(),
        },
        Change::Node(event) => {
            match *event {
                Event::Apply(n) | Event::InitApply(n) => {
                    if let Err(e) = state.apply_node(&n) {
                        tracing::warn!(error = %e, object = ?e.object, "node cannot be read; it keeps its last readable state");
                    }
                }
                Event::Delete(n) => {
                    if let Some(name) = &n.metadata.name {
                        state.delete_node(name);
                    }
                }
                Event::Init => return false,
                Event::InitDone => state.retain_nodes(&index::node_names(&stores.nodes.state())),
            }
            // Volcano's and KAI's root cohorts hold the cluster: they follow its capacity.
            if state.queue_pools_outdated() {
                refresh_queues(state, stores);
            }
        }
        Change::PriorityClasses { .. }
        | Change::RuntimeClasses { .. }
        | Change::WorkloadPriorityClasses { .. } => {
            let pcs = stores.priority_classes.state();
            let rcs = stores.runtime_classes.state();
            let wpcs = workload_priority_classes(stores);
            let listing = match &wpcs {
                None => WorkloadPriorityListing::Pending,
                Some((false, _)) => WorkloadPriorityListing::NotServed,
                Some((true, objects)) => WorkloadPriorityListing::Listed(objects),
            };
            for e in state.set_classes(pcs.iter().map(|a| &**a), rcs.iter().map(|a| &**a), listing)
            {
                tracing::warn!(error = %e, object = ?e.object, "class cannot be read");
            }
        }
        Change::PodGroup(event) => match *event {
            Event::Apply(o) | Event::InitApply(o) => state.apply_pod_group(&to_json(&o)),
            Event::Delete(o) => {
                let namespace = o.metadata.namespace.as_deref().unwrap_or("default");
                state.delete_pod_group(namespace, o.metadata.name.as_deref().unwrap_or_default());
            }
            Event::Init => return false,
            Event::InitDone => state.retain_pod_groups(&pod_group_keys(&stores.pod_groups.state())),
        },
        Change::ForeignPodGroup { event, .. } => match *event {
            Event::Apply(o) | Event::InitApply(o) => {
                let mut json = to_json(&o);
                if json.get("apiVersion").is_none() {
                    // Listed items may come without their type.
                    json["apiVersion"] = serde_json::json!(o
                        .types
                        .as_ref()
                        .map(|t| t.api_version.clone())
                        .unwrap_or_default());
                }
                state.apply_pod_group(&json)
            }
            Event::Delete(o) => {
                let namespace = o.metadata.namespace.as_deref().unwrap_or("default");
                state.delete_pod_group(namespace, o.metadata.name.as_deref().unwrap_or_default());
            }
            Event::Init | Event::InitDone => return false,
        },
        Change::Topologies { .. } => {
            let objects: Vec<serde_json::Value> = stores
                .topologies
                .state()
                .iter()
                .map(|o| to_json(o))
                .collect();
            for e in state.set_topologies(&objects) {
                tracing::warn!(error = %e, "Topology cannot be read; it is not used");
            }
        }
        Change::Dra(event) => state.apply_dra(*event),
        Change::Volume(event) => state.apply_volume_event(*event),
        Change::Queues { .. } => refresh_queues(state, stores),
        Change::ResourceQuota(event) => {
            return admission_change(state, &stores.resource_quotas, *event)
        }
        Change::LimitRange(event) => return admission_change(state, &stores.limit_ranges, *event),
        Change::Owner { kind, event } => match *event {
            Event::Apply(o) | Event::InitApply(o) => state.apply_owner(&o),
            Event::Delete(o) => {
                let (namespace, name) = o.key();
                state.delete_owner(kind, &namespace, &name)
            }
            Event::Init => return false,
            Event::InitDone => state.retain_owners(kind, &stores.owner_keys(kind)),
        },
        Change::Unserved { kind } if kinds::is_whole_workload(kind) => {
            tracing::warn!(kind, "Kestrel may not list this kind (add its list and watch to Kestrel's ClusterRole): a queued one's pods are admitted one by one");
            state.set_owner_kind_unserved(kind);
        }
        Change::Unserved { kind } if kinds::is_live_owner(kind) => {
            // Its CRD is not installed (or not readable): its pods, if any, go one by one.
            tracing::info!(
                kind,
                "not served or not readable: its pods are read one by one"
            );
            state.set_owner_kind_unserved(kind);
        }
        Change::Unserved { kind } if kind.starts_with("WorkloadPriorityClass") => {
            for watch in stores
                .workload_priority_classes
                .iter()
                .filter(|w| w.kind == kind)
            {
                watch.served.store(NOT_SERVED, Ordering::Release);
            }
            return apply_change(state, stores, Change::PriorityClasses { listed: false });
        }
        Change::Unserved { .. } => {}
    }
    true
}

/// The listings of a snapshot did not complete in time.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not list {missing} within {seconds} s; check the kubeconfig's server and that its user may list them (the ClusterRole in deploy/kestrel.yaml)", missing = .missing.join(", "))]
pub struct SnapshotError {
    pub missing: Vec<&'static str>,
    pub seconds: u64,
}

/// The cluster as the scheduler sees it now, for `kestrel explain --live`: the same watches
/// and index as [`lead`], applied once every listing is complete (nodes first, pods last),
/// then one cycle whose decisions are dropped: nothing is written to the API. Pods count
/// as arrived at their creationTimestamp and bound pods as started at `status.startTime`
/// ([`LiveIndex::use_object_times`]); driver time 0 is `unix_now_ms - lookback`, and
/// the returned moment is now on that clock.
pub async fn snapshot(
    client: &Client,
    config: &DriverConfig,
    unix_now_ms: i64,
    lookback: Duration,
    timeout: Duration,
) -> Result<(LiveIndex, kestrel_core::Millis), SnapshotError> {
    let mut watches = JoinSet::new();
    let (stores, mut changes) = start_watches(client, &mut watches);
    let mut synced = Synced::default();
    // The pods as listed, for this one reading (the scheduler keeps no store of them).
    let mut pod_writer = Writer::<Pod>::default();
    let pods = pod_writer.as_reader();
    // DRA and storage objects have no stores: their events are replayed as they came.
    let mut device_and_volume_events = Vec::new();
    let deadline = Instant::now() + timeout;
    while !synced.all() {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Ok(Some(change)) => {
                synced.note(&change);
                match change {
                    Change::Pod(event) => pod_writer.apply_watcher_event(&event),
                    Change::Dra(_) | Change::Volume(_) => device_and_volume_events.push(change),
                    _ => {}
                }
            }
            Ok(None) | Err(_) => {
                return Err(SnapshotError {
                    missing: synced.missing(),
                    seconds: timeout.as_secs(),
                })
            }
        }
    }
    watches.abort_all();
    let now = lookback.as_millis() as kestrel_core::Millis;
    let mut state = LiveIndex::new(config.scheduler, &config.scheduler_name);
    state.set_wall_origin(unix_now_ms - now as i64);
    state.set_time(now);
    state.use_object_times();
    let init = |k: &'static str| Change::Queues {
        kind: k,
        listed: true,
    };
    let mut ordered: Vec<Change> = Vec::new();
    ordered.extend(
        stores
            .nodes
            .state()
            .iter()
            .map(|n| Change::Node(Box::new(Event::InitApply((**n).clone())))),
    );
    // Every listing is in: a WorkloadPriorityClass version not listed is not served.
    ordered.extend(
        stores
            .workload_priority_classes
            .iter()
            .filter(|w| w.served.load(Ordering::Acquire) != SERVED)
            .map(|w| Change::Unserved { kind: w.kind }),
    );
    ordered.push(Change::PriorityClasses { listed: true });
    ordered.push(Change::Topologies { listed: true });
    ordered.extend(
        stores
            .pod_groups
            .state()
            .iter()
            .map(|g| Change::PodGroup(Box::new(Event::InitApply((**g).clone())))),
    );
    for &(kind, ref store) in &stores.foreign_pod_groups {
        ordered.extend(store.state().iter().map(|g| Change::ForeignPodGroup {
            kind,
            event: Box::new(Event::InitApply((**g).clone())),
        }));
    }
    ordered.push(init("ClusterQueue"));
    ordered.extend(device_and_volume_events);
    ordered.extend(
        stores
            .resource_quotas
            .state()
            .iter()
            .map(|q| Change::ResourceQuota(Box::new(Event::InitApply((**q).clone())))),
    );
    ordered.extend(
        stores
            .limit_ranges
            .state()
            .iter()
            .map(|l| Change::LimitRange(Box::new(Event::InitApply((**l).clone())))),
    );
    ordered.extend(stores.owners().into_iter().map(|(kind, o)| Change::Owner {
        kind,
        event: Box::new(Event::InitApply(o)),
    }));
    ordered.extend(
        pods.state()
            .iter()
            .map(|p| Change::Pod(Box::new(Event::InitApply((**p).clone())))),
    );
    for change in ordered {
        apply_change(&mut state, &stores, change);
    }
    // Logged as the leader logs them; only the leader posts them as events.
    for warning in state.take_field_warnings() {
        tracing::warn!(warning = %warning, "a field of another project's object is not honoured");
    }
    let _ = state.cycle(now);
    Ok((state, now))
}

enum Done {
    Bind(BindWrite, BindOutcome),
    Evict(EvictWrite, Result<(), String>),
    CheckpointRequest(CheckpointWrite, Result<(), String>),
    Nomination(NominationWrite, Result<(), String>),
    Report(StatusWrite, Result<(), String>),
    Scheduled(BindWrite, Result<(), String>),
    GroupStatus(GroupStatusWrite, Result<Time, String>),
    GroupEvent(GroupEventWrite, Result<(), String>),
    QueueStatus(QueueStatusWrite, Result<(), String>),
    FieldWarning(FieldWarning, Result<(), String>),
}

/// PodGroup and queue status writes, and events about objects, waiting for a slot.
enum GroupWrite {
    Status(GroupStatusWrite),
    Event(GroupEventWrite),
    Queue(QueueStatusWrite),
    /// A Warning event on another project's object.
    FieldWarning(FieldWarning),
}

/// API writes that failed, logged as they happen but at most one line per
/// [`FAILURE_REPORT_EVERY`]: an API server that goes away fails every write in flight, and
/// the log should say so once, with a count, not once per pod.
#[derive(Default)]
struct WriteFailures {
    last_report: Option<Instant>,
    since_report: u64,
}

const FAILURE_REPORT_EVERY: Duration = Duration::from_secs(10);

impl WriteFailures {
    fn note(&mut self, what: &str, object: String, error: impl std::fmt::Display) {
        self.since_report += 1;
        let now = Instant::now();
        if self
            .last_report
            .is_some_and(|t| now.duration_since(t) < FAILURE_REPORT_EVERY)
        {
            return;
        }
        let failed = std::mem::take(&mut self.since_report);
        self.last_report = Some(now);
        if failed > 1 {
            tracing::warn!(object = %object, error = %error, failed_writes = failed, "{what} (and {} other API writes failed since the last report)", failed - 1);
        } else {
            tracing::warn!(object = %object, error = %error, "{what}");
        }
    }
}

/// How often a leader whose listings are incomplete says which.
const LISTING_REPORT_EVERY: Duration = Duration::from_secs(10);

/// Why [`lead`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    LostLease,
    Shutdown,
}

/// Schedules while `leader` is true: watches, rebuilds, cycles, binds.
pub async fn lead(
    client: Client,
    writer: ApiWriter,
    config: &DriverConfig,
    metrics: &Metrics,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> Ended {
    let mut watches = JoinSet::new();
    let (stores, mut changes) = start_watches(&client, &mut watches);
    let mut state = LiveIndex::new(config.scheduler, &config.scheduler_name);
    let wall_origin = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    state.set_wall_origin(wall_origin);
    // The dashboard's pages show this leader's moments as UTC wall-clock times.
    let mut dashboard = config.dashboard.as_ref().map(|feed| {
        kestrel_view::explain_view::show_wall_clock(wall_origin);
        DashboardGuard(feed.clone())
    });
    let mut evictions: VecDeque<EvictWrite> = VecDeque::new();
    let mut checkpoint_requests: VecDeque<CheckpointWrite> = VecDeque::new();
    let mut nominations: VecDeque<NominationWrite> = VecDeque::new();
    let mut synced = Synced::default();
    let mut binds: VecDeque<BindWrite> = VecDeque::new();
    let mut reports: VecDeque<StatusWrite> = VecDeque::new();
    // `Scheduled` events of bound pods: written after everything else.
    let mut scheduled: VecDeque<BindWrite> = VecDeque::new();
    let mut group_writes: VecDeque<GroupWrite> = VecDeque::new();
    let mut in_flight: JoinSet<Done> = JoinSet::new();
    let mut dirty_since: Option<Instant> = None;
    let started = Instant::now();
    let mut next_listing_report = started + LISTING_REPORT_EVERY;
    let mut failures = WriteFailures::default();
    let mut last_gauges = Instant::now() - Duration::from_secs(60);
    let ended = loop {
        // A cycle after a change (debounced), or when an eviction or an engine wake-up
        // (a minimum runtime or preemption delay ending) is due.
        let timer = state
            .next_timer()
            .map(|at| started + Duration::from_millis(at));
        let deadline = match (dirty_since.map(|t| t + config.debounce), timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .filter(|_| synced.all());
        let publish_at = dashboard
            .as_mut()
            .and_then(|d| d.feed().due())
            .filter(|_| synced.all())
            .map(Instant::from_std);
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => break Ended::Shutdown,
            _ = leadership(&mut leader, false) => break Ended::LostLease,
            Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                match done {
                    Ok(Done::Bind(write, outcome)) => {
                        let label = match &outcome {
                            BindOutcome::Bound => "bound",
                            BindOutcome::PodGone => "pod_gone",
                            BindOutcome::Conflict(_) => "conflict",
                            BindOutcome::Retry(why) => {
                                failures.note("bind failed; requeued", format!("pod {}/{} on {}", write.namespace, write.name, write.node), why);
                                "retry"
                            }
                        };
                        metrics.binds.get_or_create(&vec![("result", label)]).inc();
                        let bound = outcome == BindOutcome::Bound;
                        state.bind_result(write.id, outcome);
                        if let Some(d) = dashboard.as_mut() {
                            let mut feed = d.feed();
                            feed.changed();
                            if bound {
                                feed.event(RunEvent {
                                    at: started.elapsed().as_millis() as u64,
                                    kind: "bind",
                                    pod: Some(format!("{}/{}", write.namespace, write.name)),
                                    node: Some(write.node.clone()),
                                    gpu_hours: None,
                                    detail: write.gpu_indices.as_ref().map(|g| format!("GPUs {g}")).unwrap_or_default(),
                                });
                            }
                        }
                        if bound {
                            scheduled.push_back(write);
                        }
                        // A requeued pod, or a gang whose status may now change.
                        if !bound || state.groups_changed() {
                            dirty_since.get_or_insert_with(Instant::now);
                        }
                    }
                    Ok(Done::Evict(write, result)) => {
                        let label = match &result {
                            Ok(()) => "ok",
                            Err(e) => {
                                failures.note("could not evict the preemption victim; trying again shortly", format!("pod {}/{}", write.namespace, write.name), e);
                                "error"
                            }
                        };
                        metrics.evictions.get_or_create(&vec![("result", label)]).inc();
                        if let (Some(d), Ok(())) = (dashboard.as_mut(), &result) {
                            d.feed().event(RunEvent {
                                at: started.elapsed().as_millis() as u64,
                                kind: "eviction",
                                pod: Some(format!("{}/{}", write.namespace, write.name)),
                                node: None,
                                gpu_hours: None,
                                detail: write.message.clone(),
                            });
                        }
                        state.eviction_result(&write, result);
                    }
                    Ok(Done::Nomination(write, result)) => {
                        if let Err(e) = result {
                            failures.note("could not write the nominated node", format!("pod {}/{} on {}", write.namespace, write.name, write.node), &e);
                        }
                    }
                    Ok(Done::CheckpointRequest(write, result)) => {
                        if let Err(e) = result {
                            failures.note("could not ask the victim to checkpoint; it is evicted when its grace is over", format!("pod {}/{}", write.namespace, write.name), &e);
                        }
                    }
                    Ok(Done::Report(write, result)) => {
                        let label = if let Err(e) = result {
                            failures.note("could not report why the pod waits", format!("pod {}/{}", write.namespace, write.name), &e);
                            "error"
                        } else {
                            "ok"
                        };
                        metrics.status_reports.get_or_create(&vec![("result", label)]).inc();
                    }
                    Ok(Done::Scheduled(write, result)) => {
                        let label = if let Err(e) = result {
                            tracing::debug!(pod = %format!("{}/{}", write.namespace, write.name), error = %e, "could not record the Scheduled event");
                            "error"
                        } else {
                            "ok"
                        };
                        metrics.scheduled_events.get_or_create(&vec![("result", label)]).inc();
                    }
                    Ok(Done::GroupStatus(write, result)) => {
                        let result = result.map_err(|e| {
                            failures.note("could not write the PodGroup status; written again at its next change", format!("PodGroup {}/{}", write.namespace, write.name), &e);
                        });
                        state.group_status_result(&write, result);
                    }
                    Ok(Done::QueueStatus(write, result)) => {
                        if let Err(e) = &result {
                            failures.note("could not write the queue status; written again shortly", format!("{} {}", write.kind, write.name), e);
                        }
                        state.queue_status_result(&write, result.is_ok());
                    }
                    Ok(Done::FieldWarning(warning, result)) => {
                        if let Err(e) = result {
                            failures.note("could not post the warning event", warning.object.label(), &e);
                        }
                    }
                    Ok(Done::GroupEvent(write, result)) => {
                        if let Err(e) = result {
                            failures.note("could not post the PodGroup event", format!("PodGroup {}/{}", write.namespace, write.name), &e);
                        }
                    }
                    Err(e) if e.is_cancelled() => {}
                    Err(e) => tracing::error!(error = %e, "API task panicked"),
                }
            }
            Some(change) = changes.recv() => {
                let was_synced = synced.all();
                synced.note(&change);
                state.set_time(started.elapsed().as_millis() as u64);
                if apply_change(&mut state, &stores, change) {
                    dirty_since.get_or_insert_with(Instant::now);
                    if let Some(d) = dashboard.as_mut() {
                        d.feed().changed();
                    }
                }
                if synced.all() && !was_synced {
                    tracing::info!(
                        nodes = state.scheduler().cluster().len(),
                        pods = state.tracked_pods(),
                        took_ms = started.elapsed().as_millis() as u64,
                        "state rebuilt from the listing; scheduling"
                    );
                }
                if synced.all() {
                    metrics.ready.store(true, Ordering::Relaxed);
                }
            }
            _ = tokio::time::sleep_until(next_listing_report), if !synced.all() => {
                next_listing_report += LISTING_REPORT_EVERY;
                tracing::warn!(
                    waiting_s = started.elapsed().as_secs(),
                    kinds = %synced.missing().join(", "),
                    "not scheduling yet: these listings have not completed (see the watch errors above; /readyz stays not ready)"
                );
            }
            _ = sleep_until(deadline) => {
                dirty_since = None;
                let t = std::time::Instant::now();
                let out = state.cycle(started.elapsed().as_millis() as u64);
                metrics.cycle_duration.observe(t.elapsed().as_secs_f64());
                if let Some(d) = dashboard.as_mut() {
                    d.feed().changed();
                }
                if !out.binds.is_empty() || !out.unschedulable.is_empty() {
                    tracing::debug!(binds = out.binds.len(), unschedulable = out.unschedulable.len(), "cycle");
                }
                binds.extend(out.binds);
                evictions.extend(out.evictions);
                checkpoint_requests.extend(out.checkpoint_requests);
                nominations.extend(out.nominations);
                reports.extend(out.unschedulable);
                group_writes.extend(out.group_events.into_iter().map(GroupWrite::Event));
                group_writes.extend(out.group_status.into_iter().map(GroupWrite::Status));
                if last_gauges.elapsed() >= Duration::from_secs(1) {
                    last_gauges = Instant::now();
                    group_writes.extend(state.queue_statuses().into_iter().map(GroupWrite::Queue));
                    let pending = state.pending_by_reason();
                    for kind in REASON_KINDS {
                        metrics.pending.get_or_create(&vec![("reason", kind)]).set(pending[kind]);
                    }
                }
            }
            // Wakes the loop when a dashboard copy is due; it is taken below.
            _ = sleep_until(publish_at) => {}
        }
        // Here too when changes never stop (the select above is biased towards them).
        if let Some(d) = dashboard.as_mut().filter(|_| synced.all()) {
            let mut feed = d.feed();
            if feed.due().is_some_and(|at| at <= std::time::Instant::now()) {
                let t = std::time::Instant::now();
                feed.publish(state.scheduler(), started.elapsed().as_millis() as u64);
                metrics
                    .dashboard_publish_duration
                    .observe(t.elapsed().as_secs_f64());
            }
        }
        // Warnings about other projects' objects: logged, and posted on the object.
        for warning in state.take_field_warnings() {
            tracing::warn!(warning = %warning, "a field of another project's object is not honoured (a Warning event on the object says so)");
            group_writes.push_back(GroupWrite::FieldWarning(warning));
        }
        // Keep the pipeline full: binds first (a gang's binds are consecutive, so they go out
        // together, `max_in_flight` at a time), then preemptions, then reports; nothing once
        // the lease is gone.
        while in_flight.len() < config.max_in_flight && *leader.borrow() {
            if let Some(write) = binds.pop_front() {
                let writer = writer.clone();
                let leader = leader.clone();
                in_flight.spawn(async move {
                    let outcome = writer.bind(&write, || *leader.borrow()).await;
                    Done::Bind(write, outcome)
                });
            } else if let Some(write) = checkpoint_requests.pop_front() {
                let writer = writer.clone();
                in_flight.spawn(async move {
                    let result = writer
                        .request_checkpoint(&write)
                        .await
                        .map_err(|e| e.to_string());
                    Done::CheckpointRequest(write, result)
                });
            } else if let Some(write) = nominations.pop_front() {
                let writer = writer.clone();
                in_flight.spawn(async move {
                    let result = writer.nominate(&write).await.map_err(|e| e.to_string());
                    Done::Nomination(write, result)
                });
            } else if let Some(write) = evictions.pop_front() {
                let writer = writer.clone();
                in_flight.spawn(async move {
                    let result = writer.evict(&write).await.map_err(|e| e.to_string());
                    Done::Evict(write, result)
                });
            } else if let Some(write) = reports.pop_front() {
                let writer = writer.clone();
                in_flight.spawn(async move {
                    let result = writer
                        .report_unschedulable(&write)
                        .await
                        .map_err(|e| e.to_string());
                    Done::Report(write, result)
                });
            } else if let Some(write) = group_writes.pop_front() {
                let writer = writer.clone();
                in_flight.spawn(async move {
                    match write {
                        GroupWrite::Status(write) => {
                            let result = writer
                                .apply_pod_group_status(&write)
                                .await
                                .map_err(|e| e.to_string());
                            Done::GroupStatus(write, result)
                        }
                        GroupWrite::Queue(write) => {
                            let result = writer
                                .apply_queue_status(&write)
                                .await
                                .map_err(|e| e.to_string());
                            Done::QueueStatus(write, result)
                        }
                        GroupWrite::FieldWarning(warning) => {
                            let result = writer
                                .report_field_warning(&warning)
                                .await
                                .map_err(|e| e.to_string());
                            Done::FieldWarning(warning, result)
                        }
                        GroupWrite::Event(write) => {
                            let result = writer
                                .report_pod_group(&write)
                                .await
                                .map_err(|e| e.to_string());
                            Done::GroupEvent(write, result)
                        }
                    }
                });
            } else if let Some(write) = scheduled.pop_front() {
                let writer = writer.clone();
                in_flight.spawn(async move {
                    let result = writer
                        .report_scheduled(&write)
                        .await
                        .map_err(|e| e.to_string());
                    Done::Scheduled(write, result)
                });
            } else {
                break;
            }
        }
    };
    in_flight.abort_all();
    watches.abort_all();
    metrics.ready.store(false, Ordering::Relaxed);
    ended
}

/// The dashboard's feed while this replica leads: dropped (however `lead` ends), the
/// pages say this replica stands by.
struct DashboardGuard(Arc<std::sync::Mutex<crate::live_dashboard::DashboardFeed>>);

impl DashboardGuard {
    /// Only the scheduling loop locks the feed: this never waits. A panic while it was
    /// held leaves the feed as it was, which is still whole.
    fn feed(&mut self) -> std::sync::MutexGuard<'_, crate::live_dashboard::DashboardFeed> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for DashboardGuard {
    fn drop(&mut self) {
        self.feed().withdraw();
    }
}

/// Waits until leadership is `want`. A closed channel keeps its last value for good (a
/// replica without leader election leads until shutdown): it never busy-loops.
async fn leadership(leader: &mut watch::Receiver<bool>, want: bool) {
    if leader.wait_for(|l| *l == want).await.is_err() && *leader.borrow() != want {
        std::future::pending::<()>().await;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Runs the scheduler until shutdown: waits for the lease, leads, and starts over when
/// the lease is lost.
pub async fn run(
    client: Client,
    writer: ApiWriter,
    config: DriverConfig,
    metrics: Arc<Metrics>,
    mut leader: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        metrics.leader.set(0);
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|s| *s) => return,
            _ = leadership(&mut leader, true) => {}
        }
        tracing::info!("leading: rebuilding state from a fresh listing");
        metrics.leader.set(1);
        let ended = lead(
            client.clone(),
            writer.clone(),
            &config,
            &metrics,
            leader.clone(),
            shutdown.clone(),
        )
        .await;
        metrics.leader.set(0);
        // Shutting down releases the lease too: that is no loss worth a warning.
        if ended == Ended::Shutdown || *shutdown.borrow() {
            return;
        }
        tracing::warn!("lease lost: stopped binding, state dropped");
    }
}
