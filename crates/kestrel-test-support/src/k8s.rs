//! Kubernetes Nodes and Pods as tests write them: JSON (as a mocked API server lists them)
//! or k8s-openapi objects. Each builder sets only what it is asked to, so a test states
//! every field its object has.
//!
//! ```
//! use kestrel_test_support::k8s::{gpu_node_json, gpu_pod_json, PodJson, Stamps};
//! let node = gpu_node_json("gpu-0");
//! let running = gpu_pod_json("big", 6, Some("gpu-0"), Some("0,1,2,3,4,5"), "kestrel");
//! let stamps = Stamps::at(1_800_000_000_000);
//! let pending = PodJson::listed("ml", "two", 2, "kestrel").created(&stamps.ago(600_000)).json();
//! let typed: k8s_openapi::api::core::v1::Pod = PodJson::new("ml", "a", 1).pod();
//! # let _ = (node, running, pending, typed);
//! ```

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

/// Timestamps a given time before a fixed moment, as the API server writes them.
#[derive(Clone, Copy, Debug)]
pub struct Stamps {
    /// The moment, in milliseconds since the Unix epoch.
    pub unix_now: i64,
}

impl Stamps {
    pub fn at(unix_now: i64) -> Self {
        Stamps { unix_now }
    }

    /// `ago` milliseconds before the moment, RFC 3339.
    pub fn ago(&self, ago: i64) -> String {
        k8s_openapi::jiff::Timestamp::from_millisecond(self.unix_now - ago)
            .unwrap()
            .to_string()
    }
}

/// A Pod as JSON, with one container `c` requesting 1 cpu and `gpus` `nvidia.com/gpu`.
#[derive(Clone, Debug)]
pub struct PodJson(Value);

impl PodJson {
    /// `{"metadata": {name, namespace}, "spec": {"containers": [c]}}`, nothing more.
    pub fn new(namespace: &str, name: &str, gpus: u32) -> Self {
        PodJson(json!({"metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c",
                "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}}}]}}))
    }

    /// A pending pod for `scheduler` as an API server lists it: apiVersion and kind, uid
    /// `uid-NAME`, priority 0, phase Pending.
    pub fn listed(namespace: &str, name: &str, gpus: u32, scheduler: &str) -> Self {
        Self::new(namespace, name, gpus)
            .typed()
            .uid(&format!("uid-{name}"))
            .scheduler(scheduler)
            .priority(0)
            .phase("Pending")
    }

    /// `apiVersion: v1`, `kind: Pod`.
    pub fn typed(mut self) -> Self {
        self.0["apiVersion"] = json!("v1");
        self.0["kind"] = json!("Pod");
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.0["metadata"]["uid"] = json!(uid);
        self
    }

    pub fn scheduler(mut self, scheduler: &str) -> Self {
        self.0["spec"]["schedulerName"] = json!(scheduler);
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.0["spec"]["priority"] = json!(priority);
        self
    }

    /// `spec.nodeName` (the phase is left as it is).
    pub fn node(mut self, node: &str) -> Self {
        self.0["spec"]["nodeName"] = json!(node);
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.0["status"]["phase"] = json!(phase);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["labels"][key] = json!(value);
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }

    /// `metadata.creationTimestamp`.
    pub fn created(mut self, stamp: &str) -> Self {
        self.0["metadata"]["creationTimestamp"] = json!(stamp);
        self
    }

    pub fn json(self) -> Value {
        self.0
    }

    pub fn pod(self) -> Pod {
        serde_json::from_value(self.0).expect("a Pod")
    }
}

/// A pod for `scheduler` as an API server lists it ([`PodJson::listed`]); on `node`, it is
/// Running there; with `indices`, it carries them in `kestrel.dev/gpu-indices`.
pub fn gpu_pod_json(
    name: &str,
    gpus: u32,
    node: Option<&str>,
    indices: Option<&str>,
    scheduler: &str,
) -> Value {
    let mut pod = PodJson::listed("ml", name, gpus, scheduler);
    if let Some(node) = node {
        pod = pod.node(node).phase("Running");
    }
    if let Some(indices) = indices {
        pod = pod.annotation("kestrel.dev/gpu-indices", indices);
    }
    pod.json()
}

/// A Node as JSON: `{"metadata": {name}, "status": {"allocatable": {...}}}`, nothing more.
#[derive(Clone, Debug)]
pub struct NodeJson(Value);

impl NodeJson {
    /// Allocatable 64 cpu, 512Gi and `gpus` `nvidia.com/gpu`.
    pub fn new(name: &str, gpus: u32) -> Self {
        NodeJson(json!({"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": gpus.to_string()}}}))
    }

    /// `apiVersion: v1`, `kind: Node`.
    pub fn typed(mut self) -> Self {
        self.0["apiVersion"] = json!("v1");
        self.0["kind"] = json!("Node");
        self
    }

    /// Sets (or replaces) one allocatable amount.
    pub fn allocatable(mut self, resource: &str, amount: &str) -> Self {
        self.0["status"]["allocatable"][resource] = json!(amount);
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["labels"][key] = json!(value);
        self
    }

    pub fn json(self) -> Value {
        self.0
    }

    pub fn node(self) -> Node {
        serde_json::from_value(self.0).expect("a Node")
    }
}

/// An 8-GPU H100 node (200 cpu, 2000Gi, 110 pods) as an API server lists it.
pub fn gpu_node_json(name: &str) -> Value {
    NodeJson::new(name, 8)
        .typed()
        .label("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3")
        .allocatable("cpu", "200")
        .allocatable("memory", "2000Gi")
        .allocatable("pods", "110")
        .json()
}
