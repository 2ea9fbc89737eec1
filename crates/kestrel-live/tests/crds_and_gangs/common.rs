//! What the test modules share: their imports, and the nodes, pods, PodGroups and
//! stores of the index tests.

pub use http::{Request, Response};
pub use k8s_openapi::api::core::v1::{LimitRange, Namespace, Node, Pod, ResourceQuota};
pub use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
pub use k8s_openapi::jiff::Timestamp;
pub use kestrel_core::SchedulerConfig;
pub use kestrel_live::api::{pod_group_status_patch, ApiWriter, GpuIndicesWrite};
pub use kestrel_live::deploy;
pub use kestrel_live::driver::{self, Change, DriverConfig, Ended, QueueWatch, Stores};
pub use kestrel_live::index::{
    BindOutcome, CycleOutput, GroupStatusWrite, LiveIndex, PodState, QueueStatusWrite,
};
pub use kestrel_live::limiter::Limiter;
pub use kestrel_live::metrics::Metrics;
pub use kestrel_objects::crds::{self, PodGroupPhase};
pub use kestrel_objects::workloads::Owner;
pub use kestrel_test_support::k8s::{NodeJson, PodJson};
pub use kube::api::{ApiResource, DynamicObject};
pub use kube::client::Body;
pub use kube::runtime::reflector::store::Writer;
pub use kube::runtime::watcher::Event;
pub use kube::Client;
pub use serde_json::{json, Value};
pub use std::collections::{BTreeMap, BTreeSet};
pub use std::sync::{Arc, Mutex};
pub use tokio::sync::watch;
pub use tower_test::mock::{self, Handle};

pub fn node(name: &str, gpus: u32, rack: &str) -> Node {
    NodeJson::new(name, gpus)
        .label("topology.kestrel.dev/rack", rack)
        .allocatable("pods", "110")
        .node()
}

pub fn member(name: &str, group: &str, gpus: u32) -> Pod {
    PodJson::listed("ml", name, gpus, "kestrel")
        .label("scheduling.kestrel.dev/pod-group", group)
        .pod()
}

pub fn pod_group(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("pg-{name}"), "generation": 1},
        "spec": spec}),
    )
    .unwrap()
}

/// Stores filled by hand, as the reflectors fill them, and the state they feed.
pub struct Harness {
    pub state: LiveIndex,
    pub stores: Stores,
    pub groups: Writer<DynamicObject>,
    pub topologies: Writer<DynamicObject>,
    pub queues: Vec<(&'static str, Writer<DynamicObject>)>,
    pub namespaces: Writer<Namespace>,
    pub resource_quotas: Writer<ResourceQuota>,
    pub limit_ranges: Writer<LimitRange>,
    /// Kueue's WorkloadPriorityClasses (as `kueue.x-k8s.io/v1beta1` serves them), and
    /// whether that version counts as served.
    pub workload_priority_classes: Writer<DynamicObject>,
    pub workload_priority_served: Arc<std::sync::atomic::AtomicU8>,
}

impl Harness {
    pub fn new(nodes: &[Node]) -> Self {
        let pg = ApiResource::erase::<crds::PodGroup>(&());
        let topo = ApiResource::erase::<crds::Topology>(&());
        let node_store = Writer::<Node>::default();
        let pcs = Writer::default();
        let rcs = Writer::default();
        let groups = Writer::new(pg);
        let topologies = Writer::new(topo);
        let queues: Vec<(&'static str, Writer<DynamicObject>)> = vec![
            (
                "ClusterQueue",
                Writer::new(ApiResource::erase::<crds::ClusterQueue>(&())),
            ),
            (
                "LocalQueue",
                Writer::new(ApiResource::erase::<crds::LocalQueue>(&())),
            ),
            (
                "ResourceFlavor",
                Writer::new(ApiResource::erase::<crds::ResourceFlavor>(&())),
            ),
        ];
        let namespaces = Writer::<Namespace>::default();
        let resource_quotas = Writer::<ResourceQuota>::default();
        let limit_ranges = Writer::<LimitRange>::default();
        let gvk =
            kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta1", "WorkloadPriorityClass");
        let workload_priority_classes = Writer::new(ApiResource::from_gvk_with_plural(
            &gvk,
            "workloadpriorityclasses",
        ));
        let workload_priority_served =
            Arc::new(std::sync::atomic::AtomicU8::new(driver::LISTING_PENDING));
        let stores = Stores {
            nodes: node_store.as_reader(),
            priority_classes: pcs.as_reader(),
            runtime_classes: rcs.as_reader(),
            workload_priority_classes: vec![driver::WorkloadPriorityWatch {
                kind: driver::WORKLOAD_PRIORITY_WATCHES[1].0,
                store: workload_priority_classes.as_reader(),
                served: workload_priority_served.clone(),
            }],
            pod_groups: groups.as_reader(),
            topologies: topologies.as_reader(),
            queues: queues
                .iter()
                .map(|(k, w)| (QueueWatch::kestrel(k), w.as_reader()))
                .collect(),
            foreign_pod_groups: Vec::new(),
            namespaces: namespaces.as_reader(),
            disruption_budgets: Writer::default().as_reader(),
            resource_quotas: resource_quotas.as_reader(),
            limit_ranges: limit_ranges.as_reader(),
            jobs: Writer::default().as_reader(),
            stateful_sets: Writer::default().as_reader(),
            replica_sets: Writer::default().as_reader(),
            role_owners: Vec::new(),
        };
        let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
        for n in nodes {
            state.apply_node(n).unwrap();
        }
        Harness {
            state,
            stores,
            groups,
            topologies,
            queues,
            namespaces,
            resource_quotas,
            limit_ranges,
            workload_priority_classes,
            workload_priority_served,
        }
    }

    /// Kueue's WorkloadPriorityClass kind comes to be served (listed empty).
    pub fn serve_workload_priority_classes(&mut self) {
        self.workload_priority_served
            .store(driver::SERVED, std::sync::atomic::Ordering::Release);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::WorkloadPriorityClasses {
                kind: driver::WORKLOAD_PRIORITY_WATCHES[1].0,
                listed: true,
            },
        );
    }

    /// Kueue's WorkloadPriorityClass kind turns out not to be served.
    pub fn workload_priority_classes_not_served(&mut self) {
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::Unserved {
                kind: driver::WORKLOAD_PRIORITY_WATCHES[1].0,
            },
        );
    }

    /// A WorkloadPriorityClass (as listed: no apiVersion or kind) applied or deleted.
    pub fn workload_priority_class(&mut self, object: Value, delete: bool) {
        let o: DynamicObject = serde_json::from_value(object).unwrap();
        let e = if delete {
            Event::Delete(o)
        } else {
            Event::Apply(o)
        };
        self.workload_priority_classes.apply_watcher_event(&e);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::WorkloadPriorityClasses {
                kind: driver::WORKLOAD_PRIORITY_WATCHES[1].0,
                listed: false,
            },
        );
    }

    pub fn pod(&mut self, pod: Pod) {
        self.pod_event(Event::Apply(pod));
    }

    pub fn pod_event(&mut self, e: Event<Pod>) {
        driver::apply_change(&mut self.state, &self.stores, Change::Pod(Box::new(e)));
    }

    pub fn group(&mut self, group: DynamicObject) {
        let e = Event::Apply(group);
        self.groups.apply_watcher_event(&e);
        driver::apply_change(&mut self.state, &self.stores, Change::PodGroup(Box::new(e)));
    }

    /// A queue object (as listed: no apiVersion or kind) applied or deleted.
    pub fn queue(&mut self, kind: &'static str, object: Value, delete: bool) {
        let o: DynamicObject = serde_json::from_value(object).unwrap();
        let e = if delete {
            Event::Delete(o)
        } else {
            Event::Apply(o)
        };
        let writer = &mut self.queues.iter_mut().find(|(k, _)| *k == kind).unwrap().1;
        writer.apply_watcher_event(&e);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::Queues { kind, listed: true },
        );
    }

    /// A ResourceQuota applied or deleted; whether the state changed.
    pub fn resource_quota(&mut self, object: Value, delete: bool) -> bool {
        let q: ResourceQuota = serde_json::from_value(object).unwrap();
        let e = if delete {
            Event::Delete(q)
        } else {
            Event::Apply(q)
        };
        self.resource_quotas.apply_watcher_event(&e);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::ResourceQuota(Box::new(e)),
        )
    }

    /// A LimitRange event (`Apply`, `Delete` or the end of a relist that lists only what
    /// the store holds); whether the state changed.
    pub fn limit_range(&mut self, e: Event<LimitRange>) -> bool {
        self.limit_ranges.apply_watcher_event(&e);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::LimitRange(Box::new(e)),
        )
    }

    /// A Job (as JSON) applied or deleted.
    pub fn job(&mut self, object: Value, delete: bool) {
        self.owner(
            Owner::Job(Box::new(serde_json::from_value(object).unwrap())),
            delete,
        );
    }

    /// A Job, StatefulSet or ReplicaSet applied or deleted.
    pub fn owner(&mut self, owner: Owner, delete: bool) {
        let kind = owner.kind();
        let event = Box::new(if delete {
            Event::Delete(owner)
        } else {
            Event::Apply(owner)
        });
        driver::apply_change(&mut self.state, &self.stores, Change::Owner { kind, event });
    }

    pub fn namespace(&mut self, name: &str, labels: Value) {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        self.namespaces.apply_watcher_event(&Event::Apply(ns));
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::Queues {
                kind: "Namespace",
                listed: true,
            },
        );
    }

    pub fn topology(&mut self, name: &str, levels: &[&str]) {
        let levels: Vec<Value> = levels.iter().map(|l| json!({"nodeLabel": l})).collect();
        let t: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1",
            "kind": "Topology", "metadata": {"name": name}, "spec": {"levels": levels}}))
            .unwrap();
        self.topologies.apply_watcher_event(&Event::Apply(t));
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::Topologies { listed: true },
        );
    }
}
