//! What the agent reads from and writes to the API server: the pods bound to its node,
//! the allocation record on a pod, its node's labels, annotations and GPU condition, and
//! events. `Memory` keeps the same state in process, for tests without an API server.

use crate::choose::{format_indices, Candidate, GPU_ALLOCATED_ANNOTATION};
use crate::device_taints::{DraGpu, RULE_NODE_ANNOTATION};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kestrel_objects::device_taint_rule::DeviceTaintRule;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The node condition the agent keeps: `True` while any GPU is unhealthy (the
/// node-problem-detector convention: a problem condition is true when the problem is).
pub const GPU_CONDITION: &str = "GPUUnhealthy";
const COMPONENT: &str = "kestrel-agent";

/// Labels or annotations to set (`Some`) or remove (`None`).
pub type MetaChanges = BTreeMap<String, Option<String>>;

pub enum Cluster {
    Kube(Client),
    Memory(Box<MemoryCluster>),
}

/// An in-process stand-in for the API server: pods, one node's metadata, events.
#[derive(Default)]
pub struct MemoryCluster {
    pub pods: Mutex<Vec<Pod>>,
    pub labels: Mutex<BTreeMap<String, String>>,
    pub annotations: Mutex<BTreeMap<String, String>>,
    /// (status, reason, message) of the GPU condition.
    pub condition: Mutex<Option<(String, String, String)>>,
    /// (object, reason, note).
    pub events: Mutex<Vec<(String, String, String)>>,
    /// ResourceSlices: (name, driver, node).
    pub slices: Mutex<Vec<(String, String, String)>>,
    /// The GPUs NVIDIA's DRA driver publishes, by node.
    pub dra_gpus: Mutex<BTreeMap<String, Vec<DraGpu>>>,
    /// DeviceTaintRules by name: (node, spec).
    pub taint_rules: Mutex<BTreeMap<String, (String, serde_json::Value)>>,
}

fn apply_changes(map: &mut BTreeMap<String, String>, changes: &MetaChanges) {
    for (k, v) in changes {
        match v {
            Some(v) => map.insert(k.clone(), v.clone()),
            None => map.remove(k),
        };
    }
}

fn pod_ref(c: &Candidate) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(c.namespace.clone()),
        name: Some(c.name.clone()),
        uid: Some(c.uid.clone()),
        ..Default::default()
    }
}

impl Cluster {
    /// The names of the ResourceSlices `driver` publishes for `node` (empty where DRA is
    /// not served).
    pub async fn slices_of(&self, node: &str, driver: &str) -> Result<Vec<String>, kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<k8s_openapi::api::resource::v1::ResourceSlice> =
                    Api::all(client.clone());
                let lp = ListParams::default()
                    .fields(&format!("spec.nodeName={node},spec.driver={driver}"));
                match api.list(&lp).await {
                    Ok(list) => Ok(list
                        .items
                        .into_iter()
                        .filter_map(|s| s.metadata.name)
                        .collect()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
                    Err(e) => Err(e),
                }
            }
            Cluster::Memory(m) => Ok(m
                .slices
                .lock()
                .expect("slices lock")
                .iter()
                .filter(|(_, d, n)| d == driver && n == node)
                .map(|(name, _, _)| name.clone())
                .collect()),
        }
    }

    /// The GPUs NVIDIA's DRA driver publishes for `node` (none where DRA is not served).
    pub async fn dra_gpus_of(&self, node: &str) -> Result<Vec<DraGpu>, kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<k8s_openapi::api::resource::v1::ResourceSlice> =
                    Api::all(client.clone());
                let lp = ListParams::default().fields(&format!(
                    "spec.nodeName={node},spec.driver={}",
                    kestrel_objects::dra::NVIDIA_GPU_DRIVER
                ));
                let slices = match api.list(&lp).await {
                    Ok(list) => list.items,
                    Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
                    Err(e) => return Err(e),
                };
                let driver = kestrel_objects::dra::NVIDIA_GPU_DRIVER;
                let attribute = |d: &k8s_openapi::api::resource::v1::Device, name: &str| {
                    d.attributes.as_ref().and_then(|a| {
                        a.get(name)
                            .or_else(|| a.get(&format!("{driver}/{name}")))
                            .cloned()
                    })
                };
                Ok(slices
                    .iter()
                    .flat_map(|s| {
                        s.spec.devices.iter().flatten().map(|d| DraGpu {
                            pool: s.spec.pool.name.clone(),
                            device: d.name.clone(),
                            uuid: attribute(d, "uuid").and_then(|v| v.string),
                            index: attribute(d, "index").and_then(|v| v.int),
                        })
                    })
                    .collect())
            }
            Cluster::Memory(m) => Ok(m
                .dra_gpus
                .lock()
                .expect("dra lock")
                .get(node)
                .cloned()
                .unwrap_or_default()),
        }
    }

    /// The specs of the DeviceTaintRules the agent wrote for `node`, by name.
    pub async fn device_taint_rules_of(
        &self,
        node: &str,
    ) -> Result<BTreeMap<String, serde_json::Value>, kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<DeviceTaintRule> = Api::all(client.clone());
                Ok(api
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|r| {
                        r.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(RULE_NODE_ANNOTATION))
                            .is_some_and(|n| n == node)
                    })
                    .map(|r| {
                        let spec = serde_json::to_value(&r.spec).unwrap_or_default();
                        (r.metadata.name.unwrap_or_default(), spec)
                    })
                    .collect())
            }
            Cluster::Memory(m) => Ok(m
                .taint_rules
                .lock()
                .expect("rules lock")
                .iter()
                .filter(|(_, (n, _))| n == node)
                .map(|(name, (_, spec))| (name.clone(), spec.clone()))
                .collect()),
        }
    }

    /// Writes a DeviceTaintRule (server-side apply, as the agent's own).
    pub async fn put_device_taint_rule(
        &self,
        name: &str,
        rule: &serde_json::Value,
    ) -> Result<(), kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<DeviceTaintRule> = Api::all(client.clone());
                api.patch(
                    name,
                    &PatchParams::apply(COMPONENT).force(),
                    &Patch::Apply(rule),
                )
                .await?;
                Ok(())
            }
            Cluster::Memory(m) => {
                let node = rule["metadata"]["annotations"][RULE_NODE_ANNOTATION]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                m.taint_rules
                    .lock()
                    .expect("rules lock")
                    .insert(name.to_string(), (node, rule["spec"].clone()));
                Ok(())
            }
        }
    }

    pub async fn delete_device_taint_rule(&self, name: &str) -> Result<(), kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<DeviceTaintRule> = Api::all(client.clone());
                match api.delete(name, &Default::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Cluster::Memory(m) => {
                m.taint_rules.lock().expect("rules lock").remove(name);
                Ok(())
            }
        }
    }

    /// The pods bound to `node`.
    pub async fn pods_on_node(&self, node: &str) -> Result<Vec<Pod>, kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<Pod> = Api::all(client.clone());
                let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
                Ok(api.list(&lp).await?.items)
            }
            Cluster::Memory(m) => Ok(m
                .pods
                .lock()
                .expect("pods lock")
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
                .cloned()
                .collect()),
        }
    }

    /// Records the GPUs handed to the pod so far (`kestrel.dev/gpu-allocated`), guarded
    /// by the pod's UID so a pod recreated under the same name is left alone.
    pub async fn record_allocation(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        allocated: &[u32],
    ) -> Result<(), kube::Error> {
        let value = format_indices(allocated);
        match self {
            Cluster::Kube(client) => {
                let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
                let patch = json!({"metadata": {
                    "uid": uid,
                    "annotations": {GPU_ALLOCATED_ANNOTATION: value},
                }});
                api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok(())
            }
            Cluster::Memory(m) => {
                let mut pods = m.pods.lock().expect("pods lock");
                if let Some(p) = pods
                    .iter_mut()
                    .find(|p| p.metadata.uid.as_deref() == Some(uid))
                {
                    p.metadata
                        .annotations
                        .get_or_insert_with(Default::default)
                        .insert(GPU_ALLOCATED_ANNOTATION.into(), value);
                }
                Ok(())
            }
        }
    }

    /// A Warning or Normal event about a pod.
    pub async fn pod_event(&self, pod: &Candidate, type_: &str, reason: &str, note: &str) {
        self.event(pod_ref(pod), type_, reason, note).await;
    }

    /// An event about the node (in the `default` namespace, where node events live).
    pub async fn node_event(&self, node: &str, type_: &str, reason: &str, note: &str) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            namespace: Some("default".into()),
            ..Default::default()
        };
        self.event(regarding, type_, reason, note).await;
    }

    async fn event(&self, regarding: ObjectReference, type_: &str, reason: &str, note: &str) {
        let name = regarding.name.clone().unwrap_or_default();
        match self {
            Cluster::Kube(client) => {
                let now = Timestamp::now();
                let ns = regarding
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                let event = Event {
                    metadata: ObjectMeta {
                        name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    },
                    event_time: Some(MicroTime(now)),
                    action: Some("Allocate".into()),
                    reason: Some(reason.into()),
                    type_: Some(type_.into()),
                    note: Some(note.chars().take(1024).collect()),
                    reporting_controller: Some(format!("kestrel.dev/{COMPONENT}")),
                    reporting_instance: Some(COMPONENT.into()),
                    regarding: Some(regarding),
                    ..Default::default()
                };
                let api: Api<Event> = Api::namespaced(client.clone(), &ns);
                if let Err(e) = api.create(&PostParams::default(), &event).await {
                    tracing::warn!(object = %name, reason, error = %e, "cannot write event");
                }
            }
            Cluster::Memory(m) => {
                m.events
                    .lock()
                    .expect("events lock")
                    .push((name, reason.into(), note.into()))
            }
        }
    }

    /// Sets and removes node labels and annotations in one merge patch.
    pub async fn patch_node_meta(
        &self,
        node: &str,
        labels: &MetaChanges,
        annotations: &MetaChanges,
    ) -> Result<(), kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<Node> = Api::all(client.clone());
                let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
                api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                Ok(())
            }
            Cluster::Memory(m) => {
                apply_changes(&mut m.labels.lock().expect("labels lock"), labels);
                apply_changes(
                    &mut m.annotations.lock().expect("annotations lock"),
                    annotations,
                );
                Ok(())
            }
        }
    }

    /// The node's current labels and annotations (to patch only what changed).
    pub async fn node_meta(
        &self,
        node: &str,
    ) -> Result<(BTreeMap<String, String>, BTreeMap<String, String>), kube::Error> {
        match self {
            Cluster::Kube(client) => {
                let api: Api<Node> = Api::all(client.clone());
                let n = api.get(node).await?;
                Ok((
                    n.metadata.labels.unwrap_or_default(),
                    n.metadata.annotations.unwrap_or_default(),
                ))
            }
            Cluster::Memory(m) => Ok((
                m.labels.lock().expect("labels lock").clone(),
                m.annotations.lock().expect("annotations lock").clone(),
            )),
        }
    }

    /// Sets the node's `GPUUnhealthy` condition (strategic merge on `status.conditions`,
    /// keyed by type, so the kubelet's own conditions are untouched).
    pub async fn set_gpu_condition(
        &self,
        node: &str,
        unhealthy: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let status = if unhealthy { "True" } else { "False" };
        match self {
            Cluster::Kube(client) => {
                let api: Api<Node> = Api::all(client.clone());
                let now = Time(Timestamp::now());
                let patch = json!({"status": {"conditions": [{
                    "type": GPU_CONDITION,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }]}});
                api.patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await?;
                Ok(())
            }
            Cluster::Memory(m) => {
                *m.condition.lock().expect("condition lock") =
                    Some((status.into(), reason.into(), message.into()));
                Ok(())
            }
        }
    }
}
