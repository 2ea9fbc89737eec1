//! The watches: one per kind, each into a reflector store (or, for Pods and the DRA and
//! storage kinds, straight into the index), their events sent to the leader as
//! [`Change`]s, with backoff on errors and a kind that is not served said once.

use super::apply::{namespaced_keys, role_owner};
use super::listings::{
    QueueWatch, WorkloadPriorityWatch, FOREIGN_POD_GROUPS, KUEUE_GROUP, LISTING_PENDING,
    QUEUE_KINDS_WATCHED, SERVED, WORKLOAD_PRIORITY_WATCHES,
};
use super::Change;
use crate::index::{DraEvent, VolumeEvent};
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
use kestrel_objects::crds::{PodGroup, Topology};
use kestrel_objects::device_taint_rule::DeviceTaintRule;
use kestrel_objects::kinds;
use kestrel_objects::workloads::Owner;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, store::Writer, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, Event, ExponentialBackoff};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Duration;

/// The reflector stores the driver reads on relists (pods have none: see
/// [`LiveIndex::begin_pod_relist`](crate::index::LiveIndex::begin_pod_relist)).
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
    pub(super) fn owners(&self) -> Vec<(&'static str, Owner)> {
        let jobs = self
            .jobs
            .state()
            .into_iter()
            .map(|j| ("Job", Owner::Job(Box::new((*j).clone()))));
        let sets = self
            .stateful_sets
            .state()
            .into_iter()
            .map(|s| ("StatefulSet", Owner::StatefulSet(Box::new((*s).clone()))));
        let replicas = self
            .replica_sets
            .state()
            .into_iter()
            .map(|r| ("ReplicaSet", Owner::ReplicaSet(Box::new((*r).clone()))));
        let roles = self.role_owners.iter().flat_map(|(kind, store)| {
            store
                .state()
                .into_iter()
                .map(|o| (*kind, role_owner(kind, &o)))
        });
        jobs.chain(sets).chain(replicas).chain(roles).collect()
    }

    /// The (namespace, name) of the listed objects of an owner kind.
    pub(super) fn owner_keys(&self, kind: &str) -> std::collections::HashSet<(String, String)> {
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

/// The listing failed because the API does not serve the kind (404) or forbids it (403).
pub(super) fn unserved(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404 || s.code == 403)
}

/// The listing was refused (403), as opposed to a kind that is not served (404).
pub(super) fn forbidden(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 403)
}

/// Watches a kind into a reflector store; its events arrive on `tx`. `unserved`: what to
/// send (once) when the API does not serve the kind, for kinds that may be missing.
pub(super) fn spawn_watch<K, F>(
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
pub(super) fn watch_backoff() -> ResetTimerBackoff<ExponentialBackoff> {
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
pub(super) fn forward_events<K, S, F>(
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
        |e| owner_change("Job", e, |j| Owner::Job(Box::new(j))),
        Some(Change::Unserved { kind: "Job" }),
    );
    let stateful_sets = spawn_watch(
        tasks,
        Api::<StatefulSet>::all(client.clone()),
        (),
        tx.clone(),
        |e| owner_change("StatefulSet", e, |s| Owner::StatefulSet(Box::new(s))),
        Some(Change::Unserved {
            kind: "StatefulSet",
        }),
    );
    let replica_sets = spawn_watch(
        tasks,
        Api::<ReplicaSet>::all(client.clone()),
        (),
        tx.clone(),
        |e| owner_change("ReplicaSet", e, |r| Owner::ReplicaSet(Box::new(r))),
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
pub(super) fn owner_change<K>(
    kind: &'static str,
    event: Event<K>,
    wrap: impl Fn(K) -> Owner,
) -> Change {
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
