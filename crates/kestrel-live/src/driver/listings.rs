//! What the live scheduler lists: the kinds it watches (its own, Kubernetes', other
//! projects' where their CRDs are installed) and which of their listings are complete
//! ([`Synced`]: nothing binds before every listing is in).

use super::Change;
use crate::index::{self, DraEvent, VolumeEvent};
use kestrel_objects::{gangs, kinds};
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::Event;
use std::sync::Arc;

/// Other projects' PodGroups, and Kubernetes' own (served with the `GenericWorkload`
/// feature gate), the live scheduler reads: (name, group, version).
pub(super) const FOREIGN_POD_GROUPS: [(&str, &str, &str); 3] = [
    (
        "scheduler-plugins PodGroup",
        index::PLUGINS_GROUP,
        "v1alpha1",
    ),
    ("Volcano PodGroup", index::VOLCANO_GROUP, "v1beta1"),
    (
        "Kubernetes PodGroup",
        gangs::KUBE_SCHEDULING_GROUP,
        gangs::KUBE_POD_GROUP_VERSION,
    ),
];

/// The queue kinds the live scheduler reads (Kestrel's group), with the Namespaces their
/// namespaceSelectors match and the PodDisruptionBudgets preemption respects.
pub(super) const QUEUE_WATCHES: [&str; 8] = [
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
pub(super) const KUEUE_GROUP: &str = "kueue.x-k8s.io";

/// Volcano's and KAI's `Queue`, as the watches and their readiness name them.
pub(super) const VOLCANO_QUEUE: &str = "Queue.scheduling.volcano.sh";
pub(super) const KAI_QUEUE: &str = "Queue.scheduling.run.ai";

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
pub(super) const QUEUE_KINDS_WATCHED: [(QueueWatch, &str); 6] = [
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

/// Which listings are complete.
#[derive(Debug, Default, Clone)]
pub(super) struct Synced {
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
pub(super) const VOLUME_KINDS: [&str; 4] = [
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "CSINode",
];

/// The DRA kinds watched.
pub(super) const DRA_KINDS: [&str; 4] = [
    "DeviceClass",
    "ResourceSlice",
    "ResourceClaim",
    "DeviceTaintRule",
];

impl Synced {
    /// Notes a listing that `change` completes.
    pub(super) fn note(&mut self, change: &Change) {
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
    pub(super) fn missing(&self) -> Vec<&'static str> {
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

    pub(super) fn all(&self) -> bool {
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
