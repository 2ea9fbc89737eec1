//! `kestrel doctor`: a diagnosis of a cluster's Nodes and Pods.
//!
//! Pure: the caller reads files or lists objects from the API server; this module turns
//! them into [`Finding`]s, renders the report (text or JSON) and the PrometheusRule that
//! watches for the same problems.
//!
//! Each check has a stable id and a severity ([`CHECKS`]):
//!
//! | id | severity | finds |
//! |---|---|---|
//! | `gpu-node-without-gpus` | critical | a node labelled as a GPU node that advertises no allocatable GPUs |
//! | `gpu-count-dropped` | warning | a GPU node with fewer allocatable GPUs than its label or capacity says |
//! | `gpu-node-untainted` | warning | GPU nodes without a GPU taint while other GPU nodes have one |
//! | `cpu-pod-on-gpu-node` | info | pods that request no GPU running on GPU nodes |
//! | `pod-stranded-by-taints` | warning | pending pods whose every fitting node has a taint they do not tolerate |
//! | `pod-resource-unavailable` | critical | pending pods asking for an extended resource no node offers (enough of) |
//! | `node-not-ready` | critical | nodes whose Ready condition is not True |
//! | `node-pressure` | warning | nodes under MemoryPressure, DiskPressure or PIDPressure |
//! | `gpu-driver-version-mixed` | warning | GPU nodes on different NVIDIA driver versions |
//! | `gpu-operand-version-mixed` | warning | a GPU DaemonSet running different images on different nodes |
//! | `kubelet-version-mixed` | info | nodes on different kubelet versions |
//! | `pod-pending-long` | warning | pods unschedulable for longer than a threshold, grouped by message |
//!
//! A snapshot is judged as of its newest timestamp (node heartbeats, pod conditions), so
//! the same file always gives the same findings; the live command passes the clock.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use kestrel_core::{
    parse_quantity, GpuRequest, NodeSpec, PodSpec, Taint, TaintEffect, GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
};
use kestrel_k8s::documents::read_documents;
use kestrel_k8s::nodes::node_from_kube;
use kestrel_k8s::pods::Catalog;
use kestrel_k8s::LoadError;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// GFD: the node has NVIDIA GPUs (`"true"`).
pub const GPU_PRESENT_LABEL: &str = "nvidia.com/gpu.present";
/// GFD: number of GPUs (or MIG devices) on the node.
pub const GPU_COUNT_LABEL: &str = "nvidia.com/gpu.count";
/// GFD: time-slicing replicas per GPU.
pub const GPU_REPLICAS_LABEL: &str = "nvidia.com/gpu.replicas";
/// GFD: MIG strategy (`none`, `single`, `mixed`).
pub const MIG_STRATEGY_LABEL: &str = "nvidia.com/mig.strategy";
/// Node Feature Discovery: a PCI device of vendor 10de (NVIDIA) is present.
pub const NFD_NVIDIA_PCI_LABEL: &str = "feature.node.kubernetes.io/pci-10de.present";
/// GFD: the full driver version (`570.124.06`).
pub const DRIVER_VERSION_LABEL: &str = "nvidia.com/cuda.driver-version.full";
/// GFD's driver version parts, current and older spellings.
const DRIVER_VERSION_PARTS: [[&str; 3]; 2] = [
    [
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.revision",
    ],
    [
        "nvidia.com/cuda.driver.major",
        "nvidia.com/cuda.driver.minor",
        "nvidia.com/cuda.driver.rev",
    ],
];
/// Annotation of static pods' mirror objects.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The taint that stands for a cordon (`spec.unschedulable`).
const CORDON_TAINT: &str = "node.kubernetes.io/unschedulable";
/// Items shown per list in the text report (JSON lists them all).
const SHOWN: usize = 8;
/// Message groups of `pod-pending-long` reported one by one; the rest are merged.
const PENDING_GROUPS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One check: its id and severity, and the Prometheus alert that watches for the same
/// problem over kube-state-metrics and DCGM-exporter metrics.
#[derive(Debug, Clone, Copy)]
pub struct Check {
    pub id: &'static str,
    pub severity: Severity,
    /// What the check looks for, one line.
    pub title: &'static str,
    pub alert: &'static str,
    pub expr: &'static str,
    /// How long the expression must hold before the alert fires.
    pub for_: &'static str,
    /// Alert summary (may use `{{ $labels.x }}` and `{{ $value }}`).
    pub summary: &'static str,
    pub description: &'static str,
}

/// Every check, in report order.
pub const CHECKS: [Check; 12] = [
    Check {
        id: "gpu-node-without-gpus",
        severity: Severity::Critical,
        title: "GPU nodes that advertise no allocatable GPUs",
        alert: "KestrelGpuNodeWithoutGpus",
        expr: "(max by (node) (kube_node_labels{label_nvidia_com_gpu_present=\"true\"}) or max by (node) (kube_node_status_capacity{resource=\"nvidia_com_gpu\"} > 0)) unless on (node) (kube_node_status_allocatable{resource=\"nvidia_com_gpu\"} > 0)",
        for_: "10m",
        summary: "GPU node {{ $labels.node }} advertises no allocatable nvidia.com/gpu",
        description: "The node has GPUs (GPU labels or GPU capacity) but no allocatable nvidia.com/gpu: the NVIDIA driver or device plugin is not running, or every device is unhealthy. No GPU pod can start there. Check the driver and device-plugin pods on the node and the kubelet log. The label half of this rule needs kube-state-metrics --metric-labels-allowlist=nodes=[nvidia.com/gpu.present].",
    },
    Check {
        id: "gpu-count-dropped",
        severity: Severity::Warning,
        title: "GPU nodes with fewer allocatable GPUs than they have",
        alert: "KestrelGpuCountDropped",
        expr: "(kube_node_status_capacity{resource=\"nvidia_com_gpu\"} - on (node) kube_node_status_allocatable{resource=\"nvidia_com_gpu\"} > 0) and on (node) (kube_node_status_allocatable{resource=\"nvidia_com_gpu\"} > 0)",
        for_: "10m",
        summary: "{{ $value }} GPU(s) of node {{ $labels.node }} are not allocatable",
        description: "The device plugin reports fewer healthy GPUs than the node has: a GPU fell off the bus, hit an Xid error or failed a health check. Jobs that need the whole node no longer fit. Look at DCGM_FI_DEV_XID_ERRORS and the kernel log of the node, drain it and reset or replace the GPU.",
    },
    Check {
        id: "gpu-node-untainted",
        severity: Severity::Warning,
        title: "GPU nodes without the GPU taint the other GPU nodes carry",
        alert: "KestrelGpuNodeUntainted",
        expr: "(kube_node_status_allocatable{resource=\"nvidia_com_gpu\"} > 0) unless on (node) kube_node_spec_taint{key=~\".*gpu.*\"} and on () (count(kube_node_spec_taint{key=~\".*gpu.*\"}) > 0)",
        for_: "30m",
        summary: "GPU node {{ $labels.node }} has no GPU taint while other GPU nodes do",
        description: "Pods that request no GPU can land on this node and take its CPU and memory from GPU jobs. Taint it like the other GPU nodes (e.g. nvidia.com/gpu=present:NoSchedule).",
    },
    Check {
        id: "cpu-pod-on-gpu-node",
        severity: Severity::Info,
        title: "pods that request no GPU running on GPU nodes",
        alert: "KestrelCpuPodsOnGpuNode",
        expr: "count by (node) ((kube_pod_info{node!=\"\", created_by_kind!~\"DaemonSet|Node\"} unless on (namespace, pod) kube_pod_container_resource_requests{resource=~\"nvidia_com_gpu.*|nvidia_com_mig.*\"}) and on (namespace, pod) (kube_pod_status_phase{phase=\"Running\"} == 1)) and on (node) (kube_node_status_allocatable{resource=\"nvidia_com_gpu\"} > 0)",
        for_: "1h",
        summary: "{{ $value }} pod(s) without a GPU request run on GPU node {{ $labels.node }}",
        description: "CPU-only pods on a GPU node hold CPU, memory and pod slots that GPU jobs need, and keep the node from draining for maintenance. Taint GPU nodes and give only GPU pods the toleration.",
    },
    Check {
        id: "pod-stranded-by-taints",
        severity: Severity::Warning,
        title: "pending pods whose every fitting node has a taint they do not tolerate",
        alert: "KestrelGpuPodsStrandedByTaints",
        expr: "(sum by (namespace, pod) (kube_pod_container_resource_requests{resource=\"nvidia_com_gpu\"}) > 0) and on (namespace, pod) (kube_pod_status_unschedulable == 1) and on () (count(kube_node_status_allocatable{resource=\"nvidia_com_gpu\"} > 0) == count(count by (node) (kube_node_spec_taint{effect=~\"NoSchedule|NoExecute\"}) and on (node) (kube_node_status_allocatable{resource=\"nvidia_com_gpu\"} > 0)))",
        for_: "15m",
        summary: "GPU pod {{ $labels.namespace }}/{{ $labels.pod }} is unschedulable and every GPU node is tainted",
        description: "An approximation (kube-state-metrics does not export tolerations): the pod asks for GPUs, cannot be scheduled, and every GPU node carries a NoSchedule or NoExecute taint. If the pod tolerates none of them it waits forever. Run kestrel doctor --live for the exact taints, then add the toleration to the pod template or remove the taint.",
    },
    Check {
        id: "pod-resource-unavailable",
        severity: Severity::Critical,
        title: "pending pods asking for an extended resource no node offers",
        alert: "KestrelPodResourceUnavailable",
        expr: "(sum by (namespace, pod, resource) (kube_pod_container_resource_requests{resource!~\"cpu|memory|ephemeral_storage|pods\"}) > 0) and on (namespace, pod) (kube_pod_status_phase{phase=\"Pending\"} == 1) unless on (resource) (sum by (resource) (kube_node_status_allocatable) > 0)",
        for_: "15m",
        summary: "Pod {{ $labels.namespace }}/{{ $labels.pod }} requests {{ $labels.resource }}, which no node offers",
        description: "No node advertises this resource, so the pod stays Pending. For RDMA, SR-IOV or GPU resources the device plugin (or the operator that deploys it) is missing or failing on every node; otherwise the resource name in the pod is misspelled.",
    },
    Check {
        id: "node-not-ready",
        severity: Severity::Critical,
        title: "nodes that are not Ready",
        alert: "KestrelNodeNotReady",
        expr: "kube_node_status_condition{condition=\"Ready\", status!=\"true\"} == 1",
        for_: "5m",
        summary: "Node {{ $labels.node }} is not Ready ({{ $labels.status }})",
        description: "The kubelet is down, unreachable or unhealthy: no new pods start on the node and its pods are evicted after the toleration period. Check the kubelet and container runtime on the node, its network, and kubectl describe node.",
    },
    Check {
        id: "node-pressure",
        severity: Severity::Warning,
        title: "nodes under memory, disk or PID pressure",
        alert: "KestrelNodePressure",
        expr: "kube_node_status_condition{condition=~\"MemoryPressure|DiskPressure|PIDPressure\", status=\"true\"} == 1",
        for_: "5m",
        summary: "Node {{ $labels.node }} reports {{ $labels.condition }}",
        description: "The kubelet is short of memory, disk or process ids: it taints the node, refuses new pods and evicts running ones. Free space (images, logs, emptyDir), find the pod that leaks, or give the system more reserved resources.",
    },
    Check {
        id: "gpu-driver-version-mixed",
        severity: Severity::Warning,
        title: "GPU nodes on different NVIDIA driver versions",
        alert: "KestrelGpuDriverVersionMixed",
        expr: "count(count by (DCGM_FI_DRIVER_VERSION) (label_replace(DCGM_FI_DEV_GPU_TEMP, \"DCGM_FI_DRIVER_VERSION\", \"$1\", \"DCGM_FI_SYSTEM_DRIVER_VERSION\", \"(.+)\"))) > 1",
        for_: "1h",
        summary: "{{ $value }} NVIDIA driver versions run in the cluster",
        description: "Multi-node jobs that span driver versions can fail or slow down in NCCL, and a CUDA image may work on some nodes only. Finish the driver rollout (or roll it back) so every GPU node runs one version.",
    },
    Check {
        id: "gpu-operand-version-mixed",
        severity: Severity::Warning,
        title: "GPU DaemonSets running different images on different nodes",
        alert: "KestrelGpuOperandVersionMixed",
        expr: "count by (namespace, owner_name) (count by (namespace, owner_name, image) (kube_pod_container_info{image=~\".*(nvidia|dcgm).*\"} * on (namespace, pod) group_left (owner_name) kube_pod_owner{owner_kind=\"DaemonSet\"})) > 1",
        for_: "1h",
        summary: "DaemonSet {{ $labels.namespace }}/{{ $labels.owner_name }} runs {{ $value }} different images",
        description: "A GPU component (driver, device plugin, toolkit, DCGM exporter) is half rolled out: nodes behave differently. Check the DaemonSet's rollout status and the pods that did not update.",
    },
    Check {
        id: "kubelet-version-mixed",
        severity: Severity::Info,
        title: "nodes on different kubelet versions",
        alert: "KestrelKubeletVersionMixed",
        expr: "count(count by (kubelet_version) (kube_node_info)) > 1",
        for_: "6h",
        summary: "{{ $value }} kubelet versions run in the cluster",
        description: "Normal during an upgrade; otherwise finish the upgrade, since features and fixes differ between the node groups.",
    },
    Check {
        id: "pod-pending-long",
        severity: Severity::Warning,
        title: "pods unschedulable for a long time",
        alert: "KestrelPodPendingLong",
        expr: "kube_pod_status_unschedulable == 1",
        for_: "15m",
        summary: "Pod {{ $labels.namespace }}/{{ $labels.pod }} has been unschedulable for 15 minutes",
        description: "The scheduler finds no node for the pod. Its PodScheduled condition says why (kubectl describe pod); kestrel doctor groups such pods by that message.",
    },
];

/// The check with this id.
pub fn check(id: &str) -> Option<&'static Check> {
    CHECKS.iter().find(|c| c.id == id)
}

/// One problem found: what, where, why it matters and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub id: String,
    pub severity: Severity,
    pub what: String,
    #[serde(rename = "where")]
    pub r#where: Vec<String>,
    pub why: String,
    pub fix: String,
}

impl Finding {
    fn new(id: &str, what: String, r#where: Vec<String>, why: &str, fix: String) -> Finding {
        let severity = check(id).expect("a known check id").severity;
        Finding {
            id: id.to_string(),
            severity,
            what,
            r#where,
            why: why.to_string(),
            fix,
        }
    }
}

/// The Nodes and Pods of a cluster, from files or the API server.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Where the objects came from: file names, or "the API server".
    pub source: String,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    /// Things worth knowing about the input (objects ignored, duplicates).
    pub notes: Vec<String>,
}

/// Reads a snapshot from YAML texts: `kubectl get nodes,pods -A -o yaml` output (a `v1
/// List`), or any number of files and documents holding Node and Pod objects. Objects of
/// other kinds are ignored with a note. Errors name the file, the object and the field:
/// text that is not YAML, a Node or Pod Kestrel cannot read, or no Node at all.
pub fn read_snapshot(files: &[(PathBuf, String)]) -> Result<Snapshot, LoadError> {
    let mut snap = Snapshot {
        source: files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        ..Snapshot::default()
    };
    let mut node_names: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut pod_keys = BTreeSet::new();
    for (path, text) in files {
        let mut ignored: BTreeMap<String, usize> = BTreeMap::new();
        for doc in read_documents(path, text, None)? {
            match doc.kind() {
                "Node" => {
                    let node: Node = doc.typed(path)?;
                    let spec = node_from_kube(path, &node)?;
                    if let Some(first) = node_names.get(&spec.name) {
                        snap.notes.push(format!(
                            "{}: {}: a second Node with this name (the first is in {}); kept the first",
                            path.display(),
                            doc.object(),
                            first.display()
                        ));
                        continue;
                    }
                    node_names.insert(spec.name, path.clone());
                    snap.nodes.push(node);
                }
                "Pod" => {
                    let pod: Pod = doc.typed(path)?;
                    let spec = pod_spec(path, &pod)?;
                    if !pod_keys.insert(spec.key()) {
                        snap.notes.push(format!(
                            "{}: {}: a second Pod with this name; kept the first",
                            path.display(),
                            doc.object()
                        ));
                        continue;
                    }
                    snap.pods.push(pod);
                }
                other => *ignored.entry(other.to_string()).or_default() += 1,
            }
        }
        if !ignored.is_empty() {
            let n: usize = ignored.values().sum();
            let kinds: Vec<String> = ignored.iter().map(|(k, n)| format!("{k} ({n})")).collect();
            snap.notes.push(format!(
                "{}: ignored {n} object{} that {} not Nodes or Pods: {}",
                path.display(),
                plural(n),
                if n == 1 { "is" } else { "are" },
                kinds.join(", ")
            ));
        }
    }
    if snap.nodes.is_empty() {
        let what = if files.len() == 1 {
            "no Node objects in the file"
        } else {
            "no Node objects in these files"
        };
        return Err(LoadError::new(
            Path::new(&snap.source),
            format!(
                "{what}; kestrel doctor needs the cluster's Nodes (and its Pods): export them \
                 with kubectl get nodes,pods -A -o yaml"
            ),
        ));
    }
    Ok(snap)
}

/// A Pod as the scheduler's pod, for its requests, tolerations and node selection. The
/// API server has resolved priorities and RuntimeClasses already (`spec.priority`,
/// `spec.overhead`, the class's tolerations merged into the pod), so neither is looked up.
fn pod_spec(source: &Path, pod: &Pod) -> Result<PodSpec, LoadError> {
    let mut resolved = pod.clone();
    if let Some(spec) = resolved.spec.as_mut() {
        spec.priority.get_or_insert(0);
        spec.runtime_class_name = None;
    }
    Catalog::new().pod_from_kube(source, &resolved)
}

/// How [`diagnose`] judges time.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// The time of the snapshot; `None`: its newest timestamp.
    pub now: Option<Timestamp>,
    /// A pod unschedulable for at least this long (milliseconds) is `pod-pending-long`.
    pub pending_for_ms: u64,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            now: None,
            pending_for_ms: 15 * 60 * 1000,
        }
    }
}

/// What [`diagnose`] found.
#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    pub source: String,
    /// Sorted by severity, then check order.
    pub findings: Vec<Finding>,
    /// Checks that found nothing.
    pub passed: Vec<&'static str>,
    pub notes: Vec<String>,
    pub nodes: usize,
    pub gpu_nodes: usize,
    pub gpus_allocatable: i64,
    pub pods: usize,
    pub pending: usize,
    /// The time the snapshot was judged at.
    pub as_of: Option<String>,
}

impl Diagnosis {
    /// 2 when a finding is critical or a warning, else 0 (1 is for errors).
    pub fn exit_code(&self) -> i32 {
        if self
            .findings
            .iter()
            .any(|f| f.severity <= Severity::Warning)
        {
            2
        } else {
            0
        }
    }
}

struct NodeView<'a> {
    raw: &'a Node,
    spec: NodeSpec,
    labels: &'a BTreeMap<String, String>,
    capacity: BTreeMap<String, i64>,
    /// Allocatable GPU-like devices: `nvidia.com/gpu`, `nvidia.com/gpu.shared`, MIG slices.
    gpu_offered: i64,
    /// Labelled by GFD or NFD as having NVIDIA GPUs.
    gpu_labelled: bool,
    /// Taints that keep pods off: NoSchedule and NoExecute, plus the cordon's.
    hard_taints: Vec<Taint>,
}

impl NodeView<'_> {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn is_gpu_node(&self) -> bool {
        self.gpu_labelled || self.gpu_offered > 0
    }

    /// Allocatable amount of an extended resource (`nvidia.com/gpu` included).
    fn offers(&self, resource: &str) -> i64 {
        if resource == GPU_RESOURCE {
            self.spec.gpus.len() as i64
        } else {
            self.spec.allocatable.extended(resource)
        }
    }

    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// Taints that keep pods off a node: its NoSchedule and NoExecute taints, plus the
/// cordon's when the node is cordoned and the taint is not listed.
fn hard_taints(spec: &NodeSpec) -> Vec<Taint> {
    let mut taints: Vec<Taint> = spec
        .taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .cloned()
        .collect();
    if spec.unschedulable && !taints.iter().any(|t| t.key == CORDON_TAINT) {
        taints.push(Taint {
            key: CORDON_TAINT.to_string(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        });
    }
    taints
}

struct PodView<'a> {
    raw: &'a Pod,
    spec: PodSpec,
    phase: &'a str,
    node: Option<&'a str>,
}

impl PodView<'_> {
    fn key(&self) -> String {
        self.spec.key()
    }

    /// Not yet bound to a node, and not finished.
    fn is_pending(&self) -> bool {
        self.node.is_none() && matches!(self.phase, "Pending" | "")
    }

    /// Bound to a node and not finished.
    fn is_placed(&self) -> bool {
        self.node.is_some() && matches!(self.phase, "Pending" | "Running" | "Unknown" | "")
    }

    /// Requested extended resources, whole GPUs included, by name.
    fn extended_requests(&self) -> Vec<(String, i64)> {
        let mut out = self.spec.demand.resources.extended.clone();
        let gpus = self.spec.demand.gpu.whole();
        if gpus > 0 {
            out.push((GPU_RESOURCE.to_string(), gpus as i64));
            out.sort();
        }
        out
    }

    fn uses_gpu(&self) -> bool {
        self.spec.demand.gpu != GpuRequest::None
            || self
                .spec
                .demand
                .resources
                .extended
                .iter()
                .any(|(r, _)| is_gpu_resource(r))
    }

    fn owner_kind(&self) -> Option<&str> {
        self.raw
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .or_else(|| self.raw.metadata.owner_references.iter().flatten().next())
            .map(|o| o.kind.as_str())
    }

    fn owner_name(&self) -> Option<&str> {
        self.raw
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "DaemonSet")
            .map(|o| o.name.as_str())
    }

    /// DaemonSet pods and static pods belong on every node.
    fn is_node_agent(&self) -> bool {
        matches!(self.owner_kind(), Some("DaemonSet" | "Node"))
            || self
                .raw
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
    }

    /// The PodScheduled condition when it is False.
    fn unschedulable(&self) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
        self.raw
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    }
}

/// A resource that is a GPU or a share of one (`nvidia.com/gpu`, `nvidia.com/gpu.shared`,
/// `nvidia.com/mig-1g.10gb`, `amd.com/gpu` ...).
fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("nvidia.com/mig-") || name.contains("gpu")
}

fn parse_amounts(list: Option<&BTreeMap<String, Quantity>>) -> BTreeMap<String, i64> {
    list.into_iter()
        .flatten()
        .filter_map(|(k, Quantity(v))| parse_quantity(v, 1).ok().map(|n| (k.clone(), n)))
        .collect()
}

/// The checks on a snapshot. Objects that cannot be read are left out with a note.
pub fn diagnose(snapshot: &Snapshot, options: &DoctorOptions) -> Diagnosis {
    let source = Path::new(&snapshot.source);
    let mut notes = snapshot.notes.clone();
    let empty = BTreeMap::new();
    let mut nodes = Vec::new();
    for raw in &snapshot.nodes {
        let spec = match node_from_kube(source, raw) {
            Ok(spec) => spec,
            Err(e) => {
                notes.push(format!("left out: {e}"));
                continue;
            }
        };
        let status = raw.status.as_ref();
        let capacity = parse_amounts(status.and_then(|s| s.capacity.as_ref()));
        let gpu_offered = spec.gpus.len() as i64
            + spec
                .allocatable
                .extended
                .iter()
                .filter(|(r, _)| is_gpu_resource(r) && r.starts_with("nvidia.com/"))
                .map(|(_, n)| n)
                .sum::<i64>();
        let labels = raw.metadata.labels.as_ref().unwrap_or(&empty);
        let is = |k: &str| labels.get(k).is_some_and(|v| v == "true");
        let gpu_labelled = is(GPU_PRESENT_LABEL)
            || is(NFD_NVIDIA_PCI_LABEL)
            || labels.contains_key(GPU_PRODUCT_LABEL)
            || labels
                .get(GPU_COUNT_LABEL)
                .is_some_and(|v| v.trim().parse::<i64>().is_ok_and(|n| n > 0));
        nodes.push(NodeView {
            raw,
            hard_taints: hard_taints(&spec),
            spec,
            labels,
            capacity,
            gpu_offered,
            gpu_labelled,
        });
    }
    let mut pods = Vec::new();
    for raw in &snapshot.pods {
        let spec = match pod_spec(source, raw) {
            Ok(spec) => spec,
            Err(e) => {
                notes.push(format!("left out: {e}"));
                continue;
            }
        };
        let status = raw.status.as_ref();
        pods.push(PodView {
            raw,
            spec,
            phase: status.and_then(|s| s.phase.as_deref()).unwrap_or(""),
            node: raw
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .filter(|n| !n.is_empty()),
        });
    }
    let now = options.now.or_else(|| newest_timestamp(snapshot));

    let mut findings = Vec::new();
    findings.extend(gpu_node_without_gpus(&nodes));
    findings.extend(gpu_count_dropped(&nodes));
    findings.extend(gpu_node_untainted(&nodes));
    findings.extend(cpu_pod_on_gpu_node(&nodes, &pods));
    findings.extend(pod_stranded_by_taints(&nodes, &pods));
    findings.extend(pod_resource_unavailable(&nodes, &pods));
    findings.extend(node_not_ready(&nodes));
    findings.extend(node_pressure(&nodes));
    findings.extend(gpu_driver_version_mixed(&nodes));
    findings.extend(gpu_operand_version_mixed(&pods));
    findings.extend(kubelet_version_mixed(&nodes));
    findings.extend(pod_pending_long(&pods, now, options.pending_for_ms));
    let order = |id: &str| CHECKS.iter().position(|c| c.id == id).unwrap_or(usize::MAX);
    findings.sort_by_key(|f| (f.severity, order(&f.id)));
    let passed = CHECKS
        .iter()
        .map(|c| c.id)
        .filter(|id| !findings.iter().any(|f| f.id == *id))
        .collect();
    Diagnosis {
        source: snapshot.source.clone(),
        findings,
        passed,
        notes,
        nodes: nodes.len(),
        gpu_nodes: nodes.iter().filter(|n| n.is_gpu_node()).count(),
        gpus_allocatable: nodes.iter().map(|n| n.gpu_offered).sum(),
        pods: pods.len(),
        pending: pods.iter().filter(|p| p.is_pending()).count(),
        as_of: now.map(|t| t.to_string()),
    }
}

/// The newest time stamped on any object: close to when the snapshot was taken.
fn newest_timestamp(snapshot: &Snapshot) -> Option<Timestamp> {
    let mut times = Vec::new();
    for node in &snapshot.nodes {
        times.extend(node.metadata.creation_timestamp.as_ref().map(|t| t.0));
        for c in node
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            times.extend(c.last_heartbeat_time.as_ref().map(|t| t.0));
            times.extend(c.last_transition_time.as_ref().map(|t| t.0));
        }
    }
    for pod in &snapshot.pods {
        times.extend(pod.metadata.creation_timestamp.as_ref().map(|t| t.0));
        for c in pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
        {
            times.extend(c.last_transition_time.as_ref().map(|t| t.0));
        }
    }
    times.into_iter().max()
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `3 nodes`, `1 node`.
fn count(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", plural(n))
}

/// `a, b, c` or `a, b, c and 4 more`.
fn short_list<S: AsRef<str>>(items: &[S], max: usize) -> String {
    let shown: Vec<&str> = items.iter().take(max).map(AsRef::as_ref).collect();
    let mut s = shown.join(", ");
    if items.len() > max {
        s.push_str(&format!(" and {} more", items.len() - max));
    }
    s
}

fn gpu_node_without_gpus(nodes: &[NodeView]) -> Vec<Finding> {
    let bad: Vec<String> = nodes
        .iter()
        .filter(|n| n.gpu_labelled && n.gpu_offered == 0)
        .map(|n| {
            let mut facts = Vec::new();
            if let Some(p) = n.label(GPU_PRODUCT_LABEL) {
                facts.push(p.to_string());
            }
            if let Some(c) = n.label(GPU_COUNT_LABEL) {
                facts.push(format!("{GPU_COUNT_LABEL}={c}"));
            }
            if let Some(c) = n.capacity.get(GPU_RESOURCE).filter(|c| **c > 0) {
                facts.push(format!("capacity {c}"));
            }
            facts.push("allocatable 0".to_string());
            format!("{} ({})", n.name(), facts.join(", "))
        })
        .collect();
    if bad.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "gpu-node-without-gpus",
        format!(
            "{} labelled as having NVIDIA GPUs advertise{} no allocatable {GPU_RESOURCE}",
            count(bad.len(), "node"),
            if bad.len() == 1 { "s" } else { "" }
        ),
        bad,
        "GPU pods cannot start there: the NVIDIA driver or the device plugin is not running, \
         or every GPU failed its health check; the node's GPUs sit idle.",
        "Check the driver and device-plugin pods on each node (kubectl get pods -A -o wide \
         --field-selector spec.nodeName=NODE), their logs and the kubelet log; run nvidia-smi \
         on the node; restart the device plugin once the driver works."
            .to_string(),
    )]
}

fn gpu_count_dropped(nodes: &[NodeView]) -> Vec<Finding> {
    let mut bad = Vec::new();
    for n in nodes.iter().filter(|n| n.gpu_offered > 0) {
        let mut lost: Vec<String> = Vec::new();
        // Capacity counts every device; allocatable only the healthy ones.
        let mut resources: BTreeSet<&str> = n
            .capacity
            .keys()
            .map(String::as_str)
            .filter(|r| is_gpu_resource(r) && r.starts_with("nvidia.com/"))
            .collect();
        resources.insert(GPU_RESOURCE);
        for r in resources {
            let cap = n.capacity.get(r).copied().unwrap_or(0);
            let alloc = n.offers(r);
            if cap > alloc {
                lost.push(format!("{alloc} of {cap} {r} allocatable"));
            }
        }
        let mig = n.label(MIG_STRATEGY_LABEL).unwrap_or("none");
        let labelled = n
            .label(GPU_COUNT_LABEL)
            .and_then(|v| v.trim().parse::<i64>().ok());
        if let (Some(count), "none") = (labelled, mig) {
            let replicas = n
                .label(GPU_REPLICAS_LABEL)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|r| *r > 0)
                .unwrap_or(1);
            let alloc = n.offers(GPU_RESOURCE) + n.offers("nvidia.com/gpu.shared");
            let want = count * replicas;
            if want > alloc && lost.is_empty() {
                lost.push(format!(
                    "{alloc} allocatable, label {GPU_COUNT_LABEL}={count}{}",
                    if replicas > 1 {
                        format!(" x {replicas} replicas")
                    } else {
                        String::new()
                    }
                ));
            }
        }
        if !lost.is_empty() {
            bad.push(format!("{} ({})", n.name(), lost.join("; ")));
        }
    }
    if bad.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "gpu-count-dropped",
        format!(
            "{} {} fewer allocatable GPUs than installed",
            count(bad.len(), "GPU node"),
            if bad.len() == 1 { "has" } else { "have" }
        ),
        bad,
        "A GPU fell off the bus, hit an Xid error or failed the device plugin's health check. \
         Jobs that need the whole node no longer fit there, and the other GPUs may fail next.",
        "Look for Xid errors (dmesg, DCGM_FI_DEV_XID_ERRORS) and run nvidia-smi on the node; \
         cordon and drain it, then reset the GPU or reboot; replace hardware that keeps \
         failing."
            .to_string(),
    )]
}

fn is_gpu_taint(t: &Taint) -> bool {
    t.key.to_ascii_lowercase().contains("gpu")
}

fn gpu_node_untainted(nodes: &[NodeView]) -> Vec<Finding> {
    let gpu_nodes: Vec<&NodeView> = nodes.iter().filter(|n| n.is_gpu_node()).collect();
    let mut taints: BTreeMap<String, usize> = BTreeMap::new();
    let mut untainted = Vec::new();
    for n in &gpu_nodes {
        let gpu_taints: Vec<&Taint> = n.spec.taints.iter().filter(|t| is_gpu_taint(t)).collect();
        if gpu_taints.is_empty() {
            untainted.push(n.name().to_string());
        }
        for t in gpu_taints {
            *taints.entry(t.to_string()).or_default() += 1;
        }
    }
    let tainted = gpu_nodes.len() - untainted.len();
    if untainted.is_empty() || tainted == 0 {
        return Vec::new();
    }
    let common = taints
        .iter()
        .max_by_key(|(t, n)| (**n, std::cmp::Reverse(*t)))
        .map(|(t, _)| t.clone())
        .unwrap_or_default();
    let names = if untainted.len() <= 5 {
        untainted.join(" ")
    } else {
        "NODE...".to_string()
    };
    let fix = format!(
        "Taint them like the others: kubectl taint nodes {names} {common} (and give GPU pods \
         the toleration in their templates); or, if CPU pods are welcome on GPU nodes, remove \
         the taint from the others."
    );
    vec![Finding::new(
        "gpu-node-untainted",
        format!(
            "{} of {} {} no GPU taint, while {} {} {common}",
            untainted.len(),
            count(gpu_nodes.len(), "GPU node"),
            if untainted.len() == 1 { "has" } else { "have" },
            tainted,
            if tainted == 1 { "has" } else { "have" },
        ),
        untainted,
        "Pods that need no GPU can be scheduled there and take the CPU, memory and pod \
         slots GPU jobs need; the taint on the other GPU nodes suggests that is not intended.",
        fix,
    )]
}

fn cpu_pod_on_gpu_node(nodes: &[NodeView], pods: &[PodView]) -> Vec<Finding> {
    let gpu_nodes: BTreeSet<&str> = nodes
        .iter()
        .filter(|n| n.is_gpu_node())
        .map(|n| n.name())
        .collect();
    let mut on = BTreeSet::new();
    let mut items = Vec::new();
    for p in pods {
        let Some(node) = p.node.filter(|n| gpu_nodes.contains(n)) else {
            continue;
        };
        if p.is_placed() && !p.uses_gpu() && !p.is_node_agent() {
            on.insert(node);
            items.push(format!("{} on {node}", p.key()));
        }
    }
    if items.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "cpu-pod-on-gpu-node",
        format!(
            "{} that request{} no GPU run{} on {}",
            count(items.len(), "pod"),
            if items.len() == 1 { "s" } else { "" },
            if items.len() == 1 { "s" } else { "" },
            count(on.len(), "GPU node")
        ),
        items,
        "GPU nodes are the cluster's most expensive capacity: CPU-only pods there hold CPU, \
         memory and pod slots that GPU jobs then lack, and keep the nodes from draining.",
        "Taint the GPU nodes (e.g. nvidia.com/gpu=present:NoSchedule) so only pods that \
         tolerate it land there, or move these pods with a nodeSelector/affinity for CPU \
         nodes. DaemonSet and static pods are not counted."
            .to_string(),
    )]
}

fn selects(pod: &PodView, node: &NodeView) -> bool {
    let c = &pod.spec.constraints;
    c.node_selector
        .iter()
        .all(|(k, v)| node.spec.labels.get(k) == Some(v))
        && c.affinity
            .required
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(&node.spec)))
}

fn pod_stranded_by_taints(nodes: &[NodeView], pods: &[PodView]) -> Vec<Finding> {
    // (blocking taints) -> (pods, fitting nodes)
    let mut groups: BTreeMap<Vec<String>, (Vec<String>, BTreeSet<String>)> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_pending()) {
        let requests = p.extended_requests();
        let candidates: Vec<&NodeView> = nodes
            .iter()
            .filter(|n| selects(p, n) && requests.iter().all(|(r, a)| n.offers(r) >= *a))
            .collect();
        if candidates.is_empty() {
            continue;
        }
        let mut blocking = BTreeSet::new();
        let mut stranded = true;
        for n in &candidates {
            let untolerated: Vec<&Taint> = n
                .hard_taints
                .iter()
                .filter(|t| {
                    !p.spec
                        .constraints
                        .tolerations
                        .iter()
                        .any(|tol| tol.tolerates(t))
                })
                .collect();
            if untolerated.is_empty() {
                stranded = false;
                break;
            }
            blocking.extend(untolerated.iter().map(|t| t.to_string()));
        }
        if !stranded {
            continue;
        }
        let wants = if requests.is_empty() {
            String::new()
        } else {
            let r: Vec<String> = requests.iter().map(|(r, a)| format!("{a} {r}")).collect();
            format!(", wants {}", r.join(" + "))
        };
        let entry = groups.entry(blocking.into_iter().collect()).or_default();
        entry.0.push(format!("{}{wants}", p.key()));
        entry
            .1
            .extend(candidates.iter().map(|n| n.name().to_string()));
    }
    groups
        .into_iter()
        .map(|(taints, (pods, fitting))| {
            let fitting: Vec<String> = fitting.into_iter().collect();
            let first = &taints[0];
            let (key_value, effect) = first.rsplit_once(':').unwrap_or((first, "NoSchedule"));
            let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
            let system = if taints.iter().any(|t| t.starts_with("node.kubernetes.io/")) {
                "; node.kubernetes.io/ taints go away when the node is uncordoned or healthy \
                 again"
            } else {
                ""
            };
            let toleration = if value.is_empty() {
                format!("{{key: {key}, operator: Exists, effect: {effect}}}")
            } else {
                format!("{{key: {key}, operator: Equal, value: {value}, effect: {effect}}}")
            };
            Finding::new(
                "pod-stranded-by-taints",
                format!(
                    "{} {} {} ({}) but {} not tolerate the taint{} {}",
                    count(pods.len(), "pending pod"),
                    if pods.len() == 1 { "fits" } else { "fit" },
                    count(fitting.len(), "node"),
                    short_list(&fitting, 5),
                    if pods.len() == 1 { "does" } else { "do" },
                    plural(taints.len()),
                    taints.join(", ")
                ),
                pods,
                "Every node with the resources, nodeSelector and affinity these pods need is \
                 closed to them by a taint, so they wait forever; more capacity elsewhere does \
                 not help.",
                format!(
                    "Add the toleration to the pods' template, e.g. tolerations: [{toleration}], \
                     or remove the taint from nodes meant for them (kubectl taint nodes NODE \
                     {first}-){system}."
                ),
            )
        })
        .collect()
}

fn pod_resource_unavailable(nodes: &[NodeView], pods: &[PodView]) -> Vec<Finding> {
    // (resource, most any node offers) -> pods
    let mut groups: BTreeMap<(String, i64), Vec<String>> = BTreeMap::new();
    let mut most_of: BTreeMap<String, i64> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_pending()) {
        for (r, a) in p.extended_requests() {
            let most = *most_of
                .entry(r.clone())
                .or_insert_with(|| nodes.iter().map(|n| n.offers(&r)).max().unwrap_or(0));
            if most < a {
                groups
                    .entry((r.clone(), most))
                    .or_default()
                    .push(format!("{} (wants {a})", p.key()));
            }
        }
    }
    groups
        .into_iter()
        .map(|((resource, most), pods)| {
            let n = pods.len();
            let (what, fix) = if most == 0 {
                (
                    format!(
                        "{} request{} {resource}, which no node offers",
                        count(n, "pending pod"),
                        if n == 1 { "s" } else { "" }
                    ),
                    format!(
                        "Check the device plugin that should advertise {resource} (its \
                         DaemonSet, the operator that deploys it, and its config: resource \
                         names are set there) and that it runs on the nodes with the \
                         hardware; kubectl get nodes -o json | grep {resource} should show \
                         it. If the name in the pods is wrong, fix their template."
                    ),
                )
            } else {
                (
                    format!(
                        "{} request{} more {resource} than any node offers ({most} at most)",
                        count(n, "pending pod"),
                        if n == 1 { "s" } else { "" }
                    ),
                    format!(
                        "Lower the request to {most} or less per pod (split the job into more \
                         pods), or add nodes that offer more {resource}."
                    ),
                )
            };
            Finding::new(
                "pod-resource-unavailable",
                what,
                pods,
                "No node can ever take these pods, however much is freed: they stay Pending \
                 until the resource appears.",
                fix,
            )
        })
        .collect()
}

fn condition<'a>(
    node: &'a NodeView,
    kind: &str,
) -> Option<&'a k8s_openapi::api::core::v1::NodeCondition> {
    node.raw
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
}

fn condition_detail(c: &k8s_openapi::api::core::v1::NodeCondition) -> String {
    let mut s = format!("{}={}", c.type_, c.status);
    if let Some(t) = &c.last_transition_time {
        s.push_str(&format!(" since {}", t.0));
    }
    let why: Vec<&str> = [c.reason.as_deref(), c.message.as_deref()]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect();
    if !why.is_empty() {
        s.push_str(&format!(": {}", why.join(": ")));
    }
    s
}

fn node_not_ready(nodes: &[NodeView]) -> Vec<Finding> {
    let bad: Vec<String> = nodes
        .iter()
        .filter_map(|n| {
            let c = condition(n, "Ready")?;
            (c.status != "True").then(|| format!("{} ({})", n.name(), condition_detail(c)))
        })
        .collect();
    if bad.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "node-not-ready",
        format!(
            "{} {} not Ready",
            count(bad.len(), "node"),
            if bad.len() == 1 { "is" } else { "are" }
        ),
        bad,
        "No pod starts on a node that is not Ready, its pods are evicted once their \
         tolerations run out, and gangs that counted on its GPUs cannot start.",
        "kubectl describe node NODE; check the kubelet (journalctl -u kubelet), the container \
         runtime, disk space and network on the node; drain and repair or replace it."
            .to_string(),
    )]
}

fn node_pressure(nodes: &[NodeView]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (kind, fix) in [
        (
            "MemoryPressure",
            "Find the pods using the most memory (kubectl top pods -A --sort-by=memory), set \
             memory limits, and reserve memory for the system (kubelet --system-reserved).",
        ),
        (
            "DiskPressure",
            "Free disk on the node: unused images (crictl rmi --prune), logs, large emptyDir \
             volumes; give the container runtime's disk more room.",
        ),
        (
            "PIDPressure",
            "Find the pod that spawns processes (ps on the node), set a pod PID limit \
             (kubelet --pod-max-pids), and fix the leak.",
        ),
    ] {
        let bad: Vec<String> = nodes
            .iter()
            .filter_map(|n| {
                let c = condition(n, kind)?;
                (c.status == "True").then(|| format!("{} ({})", n.name(), condition_detail(c)))
            })
            .collect();
        if !bad.is_empty() {
            out.push(Finding::new(
                "node-pressure",
                format!(
                    "{} {} under {kind}",
                    count(bad.len(), "node"),
                    if bad.len() == 1 { "is" } else { "are" }
                ),
                bad,
                "The kubelet taints the node, admits no new pods and evicts running ones to \
                 recover; long jobs lose their progress.",
                fix.to_string(),
            ));
        }
    }
    out
}

/// The NVIDIA driver version GFD labelled the node with.
fn driver_version(n: &NodeView) -> Option<String> {
    if let Some(v) = n.label(DRIVER_VERSION_LABEL).filter(|v| !v.is_empty()) {
        return Some(v.to_string());
    }
    DRIVER_VERSION_PARTS.iter().find_map(|keys| {
        let parts: Vec<&str> = keys.iter().map_while(|k| n.label(k)).collect();
        (!parts.is_empty()).then(|| parts.join("."))
    })
}

/// `version: a, b (2 nodes)` per value, the most common first.
fn by_value(groups: BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut groups: Vec<(String, Vec<String>)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    groups
        .into_iter()
        .map(|(v, names)| {
            format!(
                "{v}: {} ({})",
                short_list(&names, 5),
                count(names.len(), "node")
            )
        })
        .collect()
}

fn gpu_driver_version_mixed(nodes: &[NodeView]) -> Vec<Finding> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in nodes.iter().filter(|n| n.is_gpu_node()) {
        if let Some(v) = driver_version(n) {
            groups.entry(v).or_default().push(n.name().to_string());
        }
    }
    if groups.len() < 2 {
        return Vec::new();
    }
    let versions = groups.len();
    let nodes_with: usize = groups.values().map(Vec::len).sum();
    let items = by_value(groups);
    let common = items[0].split(':').next().unwrap_or_default().to_string();
    vec![Finding::new(
        "gpu-driver-version-mixed",
        format!(
            "{} GPU nodes run {versions} NVIDIA driver versions",
            nodes_with
        ),
        items,
        "A job spread over nodes with different drivers can fail or slow down in NCCL, and a \
         CUDA image may need a newer driver than some nodes have, so it fails only there.",
        format!(
            "Finish (or roll back) the driver rollout so every GPU node runs one version, e.g. \
             {common} (the most common here): update the driver DaemonSet or the node image, \
             one drained node at a time."
        ),
    )]
}

fn gpu_operand_version_mixed(pods: &[PodView]) -> Vec<Finding> {
    // (namespace, DaemonSet) -> images -> nodes
    let mut sets: BTreeMap<(String, String), BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_placed()) {
        let (Some(ds), Some(node)) = (p.owner_name(), p.node) else {
            continue;
        };
        let mut images: Vec<&str> = p
            .raw
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter_map(|c| c.image.as_deref())
            .collect();
        images.sort();
        let images = images.join(" + ");
        let looks_gpu = [ds, &images, &p.spec.namespace]
            .iter()
            .any(|s| ["nvidia", "gpu", "dcgm"].iter().any(|w| s.contains(w)));
        if !looks_gpu || images.is_empty() {
            continue;
        }
        sets.entry((p.spec.namespace.clone(), ds.to_string()))
            .or_default()
            .entry(images)
            .or_default()
            .push(node.to_string());
    }
    sets.into_iter()
        .filter(|(_, by_image)| by_image.len() > 1)
        .map(|((ns, ds), by_image)| {
            let n = by_image.len();
            Finding::new(
                "gpu-operand-version-mixed",
                format!("DaemonSet {ns}/{ds} runs {n} different images across its nodes"),
                by_value(by_image),
                "A GPU component is half rolled out or stuck: nodes with the old image behave \
                 differently (driver, device plugin, toolkit or exporter), which shows up as \
                 failures on some nodes only.",
                format!(
                    "kubectl -n {ns} rollout status daemonset/{ds}; delete the pods still on \
                     the old image if the update strategy is OnDelete, or find why the new \
                     ones do not become ready."
                ),
            )
        })
        .collect()
}

fn kubelet_version_mixed(nodes: &[NodeView]) -> Vec<Finding> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in nodes {
        let v = n
            .raw
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.kubelet_version.as_str())
            .filter(|v| !v.is_empty());
        if let Some(v) = v {
            groups
                .entry(v.to_string())
                .or_default()
                .push(n.name().to_string());
        }
    }
    if groups.len() < 2 {
        return Vec::new();
    }
    let versions = groups.len();
    vec![Finding::new(
        "kubelet-version-mixed",
        format!("nodes run {versions} kubelet versions"),
        by_value(groups),
        "Usual during an upgrade; left that way, node groups differ in features and fixes \
         and the skew may exceed what the control plane supports.",
        "Finish the node upgrade (or confirm it is in progress).".to_string(),
    )]
}

/// `2h15m`, `45m`, `3d4h`, `30s`.
pub fn format_age(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, 0) => format!("{h}h"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, 0, _) => format!("{d}d"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

/// A pending pod and how long it has waited, when known.
type Waiting = (String, Option<u64>);

fn pod_pending_long(pods: &[PodView], now: Option<Timestamp>, threshold_ms: u64) -> Vec<Finding> {
    // message -> (pods, oldest age)
    let mut groups: BTreeMap<String, Vec<Waiting>> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_pending()) {
        // Gated pods wait for a queue or controller to release them, on purpose.
        let Some(c) = p
            .unschedulable()
            .filter(|c| c.reason.as_deref() != Some("SchedulingGated"))
        else {
            continue;
        };
        let since = c
            .last_transition_time
            .as_ref()
            .or(p.raw.metadata.creation_timestamp.as_ref())
            .map(|t| t.0);
        let age = match (now, since) {
            (Some(now), Some(since)) => {
                Some(u64::try_from(now.as_millisecond() - since.as_millisecond()).unwrap_or(0))
            }
            _ => None,
        };
        if age.is_some_and(|a| a < threshold_ms) {
            continue;
        }
        // "Unschedulable" is the usual reason; others (SchedulingGated ...) say more.
        let reason = c.reason.as_deref().filter(|r| *r != "Unschedulable");
        let message = [reason, c.message.as_deref()]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        let message = if message.is_empty() {
            "(no message)".to_string()
        } else {
            message
        };
        groups.entry(message).or_default().push((p.key(), age));
    }
    let mut groups: Vec<(String, Vec<Waiting>)> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let threshold = format_age(threshold_ms);
    let why = "Work is waiting and the scheduler keeps saying why: the message names what \
               no node has (resources, a matching label, a tolerated taint).";
    let item = |(key, age): &Waiting| match age {
        Some(a) => format!("{key} ({})", format_age(*a)),
        None => key.clone(),
    };
    let mut out = Vec::new();
    let rest = if groups.len() > PENDING_GROUPS {
        groups.split_off(PENDING_GROUPS - 1)
    } else {
        Vec::new()
    };
    for (message, mut pods) in groups {
        pods.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out.push(Finding::new(
            "pod-pending-long",
            format!(
                "{} unschedulable for over {threshold}: {message}",
                count(pods.len(), "pod")
            ),
            pods.iter().map(item).collect(),
            why,
            "Act on the message: free or add the resource it names, fix the pods' \
             nodeSelector/affinity or tolerations, or lower their requests; the other \
             findings of this report often name the cause."
                .to_string(),
        ));
    }
    if !rest.is_empty() {
        let messages = rest.len();
        let mut pods: Vec<Waiting> = rest.into_iter().flat_map(|g| g.1).collect();
        pods.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out.push(Finding::new(
            "pod-pending-long",
            format!(
                "{} unschedulable for over {threshold}, with {messages} other messages",
                count(pods.len(), "pod")
            ),
            pods.iter().map(item).collect(),
            why,
            "kubectl describe pod POD shows each one's message; act on it as above.".to_string(),
        ));
    }
    out
}

/// The compact text report: findings grouped by severity, each in a few lines.
pub fn render_text(d: &Diagnosis) -> String {
    let mut out = format!("kestrel doctor: {}\n", d.source);
    out.push_str(&format!(
        "{} ({} with GPUs, {} GPUs allocatable), {} ({} pending)",
        count(d.nodes, "node"),
        d.gpu_nodes,
        d.gpus_allocatable,
        count(d.pods, "pod"),
        d.pending
    ));
    if let Some(t) = &d.as_of {
        out.push_str(&format!(", as of {t}"));
    }
    out.push('\n');
    for severity in [Severity::Critical, Severity::Warning, Severity::Info] {
        let found: Vec<&Finding> = d
            .findings
            .iter()
            .filter(|f| f.severity == severity)
            .collect();
        if found.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "\n{} ({})\n",
            severity.as_str().to_uppercase(),
            found.len()
        ));
        for f in found {
            out.push_str(&format!("  [{}] {}\n", f.id, f.what));
            let joined = short_list(&f.r#where, SHOWN);
            let one_line = f.r#where.len() <= 1
                || (joined.len() <= 90 && !f.r#where.iter().any(|w| w.contains(", ")));
            if one_line {
                out.push_str(&format!("    where: {joined}\n"));
            } else {
                out.push_str("    where:\n");
                for w in f.r#where.iter().take(SHOWN) {
                    out.push_str(&format!("      - {w}\n"));
                }
                if f.r#where.len() > SHOWN {
                    out.push_str(&format!(
                        "      ... and {} more (--json lists all)\n",
                        f.r#where.len() - SHOWN
                    ));
                }
            }
            out.push_str(&format!("    why:   {}\n", f.why));
            out.push_str(&format!("    fix:   {}\n", f.fix));
        }
    }
    if d.findings.is_empty() {
        out.push_str("\nno problems found\n");
    }
    if !d.passed.is_empty() {
        out.push_str(&format!("\npassed: {}\n", d.passed.join(", ")));
    }
    let n = |s: Severity| d.findings.iter().filter(|f| f.severity == s).count();
    out.push_str(&format!(
        "{} critical, {} warning, {} info\n",
        n(Severity::Critical),
        n(Severity::Warning),
        n(Severity::Info)
    ));
    out
}

/// The findings as a JSON array of `{id, severity, what, where, why, fix}`.
pub fn render_json(d: &Diagnosis) -> String {
    serde_json::to_string_pretty(&d.findings).expect("findings serialize")
}

/// A PrometheusRule (`monitoring.coreos.com/v1`) with one alerting rule per check.
pub fn prometheus_rule() -> Value {
    let rules: Vec<Value> = CHECKS
        .iter()
        .map(|c| {
            json!({
                "alert": c.alert,
                "expr": c.expr,
                "for": c.for_,
                "labels": {"severity": c.severity.as_str(), "kestrel_check": c.id},
                "annotations": {"summary": c.summary, "description": c.description},
            })
        })
        .collect();
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kestrel-doctor",
            "labels": {"app.kubernetes.io/name": "kestrel", "app.kubernetes.io/component": "doctor"},
        },
        "spec": {"groups": [{"name": "kestrel-doctor", "rules": rules}]},
    })
}

/// [`prometheus_rule`] as YAML, in the usual key order, expressions as block scalars.
pub fn render_prometheus_rule() -> String {
    let q = |s: &str| Value::String(s.to_string()).to_string();
    let mut out = String::from(
        "# Generated by `kestrel doctor --prometheus-rules`: one alert per doctor check, over\n\
         # kube-state-metrics and DCGM-exporter metrics. Add the labels your Prometheus\n\
         # selects rules by (e.g. release: <name>) before applying it.\n\
         apiVersion: monitoring.coreos.com/v1\n\
         kind: PrometheusRule\n\
         metadata:\n  name: kestrel-doctor\n  labels:\n\
         \x20   app.kubernetes.io/name: kestrel\n    app.kubernetes.io/component: doctor\n\
         spec:\n  groups:\n  - name: kestrel-doctor\n    rules:\n",
    );
    for c in &CHECKS {
        out.push_str(&format!(
            "    - alert: {}\n      expr: |-\n        {}\n      for: {}\n      labels:\n        \
             severity: {}\n        kestrel_check: {}\n      annotations:\n        summary: {}\n        \
             description: {}\n",
            c.alert,
            c.expr,
            c.for_,
            c.severity,
            c.id,
            q(c.summary),
            q(c.description)
        ));
    }
    out
}

/// Parses YAML documents the way `kestrel doctor` reads snapshots (also for checking what
/// it prints).
pub fn parse_yaml(text: &str) -> Result<Vec<Value>, String> {
    serde_saphyr::from_multiple(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(text: &str) -> Result<Snapshot, LoadError> {
        read_snapshot(&[(PathBuf::from("snap.yaml"), text.to_string())])
    }

    fn run(text: &str) -> Diagnosis {
        diagnose(&snap(text).unwrap(), &DoctorOptions::default())
    }

    fn ids(d: &Diagnosis) -> Vec<&str> {
        d.findings.iter().map(|f| f.id.as_str()).collect()
    }

    fn finding<'a>(d: &'a Diagnosis, id: &str) -> &'a Finding {
        d.findings
            .iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("no {id} in {:#?}", d.findings))
    }

    /// A Node document. `labels`, `taints` and `status_extra` are YAML flow text.
    fn node(name: &str, labels: &str, taints: &str, alloc: &str, status_extra: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{{labels}}}}}\n\
             spec: {{taints: [{taints}]}}\n\
             status:\n  allocatable: {{cpu: \"64\", memory: 512Gi, pods: \"110\"{alloc}}}\n\
             {status_extra}---\n"
        )
    }

    const GPU_LABELS: &str =
        "nvidia.com/gpu.present: \"true\", nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, nvidia.com/gpu.count: \"8\"";
    const GPU_TAINT: &str = "{key: nvidia.com/gpu, value: present, effect: NoSchedule}";

    fn gpu_node(name: &str) -> String {
        node(name, GPU_LABELS, GPU_TAINT, ", nvidia.com/gpu: \"8\"", "")
    }

    /// A Pod document: `requests` and `spec_extra` are YAML flow text / spec lines.
    fn pod(name: &str, node: Option<&str>, requests: &str, spec_extra: &str) -> String {
        let (phase, node_line) = match node {
            Some(n) => ("Running", format!("  nodeName: {n}\n")),
            None => ("Pending", String::new()),
        };
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n{node_line}{spec_extra}  containers:\n  - name: c\n    image: img\n    resources: {{requests: {{cpu: \"1\"{requests}}}}}\nstatus: {{phase: {phase}}}\n---\n"
        )
    }

    #[test]
    fn gpu_node_without_gpus() {
        let bad = node("g0", GPU_LABELS, GPU_TAINT, "", "") + &gpu_node("g1");
        let d = run(&bad);
        let f = finding(&d, "gpu-node-without-gpus");
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.r#where.len(), 1);
        assert!(f.r#where[0].starts_with("g0 (NVIDIA-H100"), "{f:?}");
        assert!(f.what.contains("1 node labelled"), "{}", f.what);
        // Capacity without allocatable also counts; a node with GPUs does not.
        let cap = node(
            "g2",
            "nvidia.com/gpu.present: \"true\"",
            "",
            ", nvidia.com/gpu: \"0\"",
            "  capacity: {nvidia.com/gpu: \"8\"}\n",
        );
        let d = run(&cap);
        assert!(finding(&d, "gpu-node-without-gpus").r#where[0].contains("capacity 8"));
        assert!(!ids(&run(&gpu_node("g1"))).contains(&"gpu-node-without-gpus"));
        // A MIG node offers slices instead of whole GPUs.
        let mig = node(
            "m0",
            "nvidia.com/gpu.present: \"true\", nvidia.com/mig.strategy: mixed",
            "",
            ", nvidia.com/mig-1g.10gb: \"7\"",
            "",
        );
        assert!(!ids(&run(&mig)).contains(&"gpu-node-without-gpus"));
        // A CPU node is not a GPU node.
        assert!(ids(&run(&node("c0", "", "", "", ""))).is_empty());
    }

    #[test]
    fn gpu_count_dropped_by_label_or_capacity() {
        let by_label = node("g0", GPU_LABELS, GPU_TAINT, ", nvidia.com/gpu: \"7\"", "");
        let d = run(&by_label);
        let f = finding(&d, "gpu-count-dropped");
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.r#where,
            vec!["g0 (7 allocatable, label nvidia.com/gpu.count=8)"]
        );
        let by_capacity = node(
            "g0",
            "",
            "",
            ", nvidia.com/gpu: \"6\"",
            "  capacity: {nvidia.com/gpu: \"8\"}\n",
        );
        assert_eq!(
            finding(&run(&by_capacity), "gpu-count-dropped").r#where,
            vec!["g0 (6 of 8 nvidia.com/gpu allocatable)"]
        );
        // Time-slicing: 8 GPUs x 4 replicas = 32 allocatable is whole.
        let sliced = node(
            "g0",
            &format!("{GPU_LABELS}, nvidia.com/gpu.replicas: \"4\""),
            GPU_TAINT,
            ", nvidia.com/gpu: \"32\"",
            "",
        );
        assert!(!ids(&run(&sliced)).contains(&"gpu-count-dropped"));
        assert!(!ids(&run(&gpu_node("g1"))).contains(&"gpu-count-dropped"));
        // A node with no GPUs left is gpu-node-without-gpus only.
        let none = node("g0", GPU_LABELS, GPU_TAINT, "", "");
        assert_eq!(ids(&run(&none)), vec!["gpu-node-without-gpus"]);
    }

    #[test]
    fn gpu_node_untainted_only_when_others_are() {
        let plain = node("g2", GPU_LABELS, "", ", nvidia.com/gpu: \"8\"", "");
        let d = run(&(gpu_node("g0") + &gpu_node("g1") + &plain));
        let f = finding(&d, "gpu-node-untainted");
        assert_eq!(f.r#where, vec!["g2"]);
        assert!(
            f.what.contains("1 of 3 GPU nodes")
                && f.what.contains("nvidia.com/gpu=present:NoSchedule"),
            "{}",
            f.what
        );
        assert!(f
            .fix
            .contains("kubectl taint nodes g2 nvidia.com/gpu=present:NoSchedule"));
        // All untainted, or all tainted: consistent, nothing to say.
        let plain2 = node("g3", GPU_LABELS, "", ", nvidia.com/gpu: \"8\"", "");
        assert!(!ids(&run(&(plain.clone() + &plain2))).contains(&"gpu-node-untainted"));
        assert!(!ids(&run(&(gpu_node("g0") + &gpu_node("g1")))).contains(&"gpu-node-untainted"));
    }

    #[test]
    fn cpu_pods_on_gpu_nodes_but_not_agents_or_gpu_pods() {
        let nodes = gpu_node("g0") + &node("c0", "", "", "", "");
        let web = pod("web", Some("g0"), "", "");
        let d = run(&(nodes.clone() + &web));
        let f = finding(&d, "cpu-pod-on-gpu-node");
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(f.r#where, vec!["ml/web on g0"]);
        assert_eq!(d.exit_code(), 0, "info alone exits 0");
        let ok = pod("train", Some("g0"), ", nvidia.com/gpu: \"8\"", "")
            + &pod("web", Some("c0"), "", "")
            + &pod("done", Some("g0"), "", "").replace("phase: Running", "phase: Succeeded")
            + &pod("agent", Some("g0"), "", "").replace(
                "namespace: ml}",
                "namespace: ml, ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: ds, uid: u1, controller: true}]}",
            );
        let d = run(&(nodes + &ok));
        assert!(d.findings.is_empty(), "{:?}", d.findings);
    }

    #[test]
    fn pods_stranded_by_taints() {
        let l40s = node(
            "l0",
            "nvidia.com/gpu.product: NVIDIA-L40S",
            &format!("{GPU_TAINT}, {{key: dedicated, value: inference, effect: NoSchedule}}"),
            ", nvidia.com/gpu: \"4\"",
            "",
        );
        let tolerates_gpu = "  tolerations: [{key: nvidia.com/gpu, operator: Exists}]\n";
        let selector = "  nodeSelector: {nvidia.com/gpu.product: NVIDIA-L40S}\n";
        let stuck = pod(
            "infer",
            None,
            ", nvidia.com/gpu: \"2\"",
            &format!("{tolerates_gpu}{selector}"),
        );
        let d = run(&(gpu_node("g0") + &l40s + &stuck));
        let f = finding(&d, "pod-stranded-by-taints");
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.r#where, vec!["ml/infer, wants 2 nvidia.com/gpu"]);
        assert!(
            f.what
                == "1 pending pod fits 1 node (l0) but does not tolerate the taint dedicated=inference:NoSchedule",
            "{}",
            f.what
        );
        assert!(f
            .fix
            .contains("{key: dedicated, operator: Equal, value: inference, effect: NoSchedule}"));
        // Without the selector the pod also fits g0, whose taint it tolerates.
        let free = pod("infer", None, ", nvidia.com/gpu: \"2\"", tolerates_gpu);
        assert!(!ids(&run(&(gpu_node("g0") + &l40s + &free))).contains(&"pod-stranded-by-taints"));
        // No toleration at all: both GPU nodes are closed to it.
        let bare = pod("bare", None, ", nvidia.com/gpu: \"1\"", "");
        let d = run(&(gpu_node("g0") + &l40s + &bare));
        let f = finding(&d, "pod-stranded-by-taints");
        assert_eq!(
            f.what,
            "1 pending pod fits 2 nodes (g0, l0) but does not tolerate the taints \
             dedicated=inference:NoSchedule, nvidia.com/gpu=present:NoSchedule"
        );
        // An untainted node with the GPUs: not stranded (just busy, maybe).
        let plain = node("g9", GPU_LABELS, "", ", nvidia.com/gpu: \"8\"", "");
        assert!(!ids(&run(&(plain + &bare))).contains(&"pod-stranded-by-taints"));
        // A cordoned node counts as tainted.
        let cordoned =
            node("c0", "", "", "", "").replace("spec: {taints: []}", "spec: {unschedulable: true}");
        let d = run(&(cordoned + &pod("web", None, "", "")));
        assert!(finding(&d, "pod-stranded-by-taints")
            .what
            .contains("node.kubernetes.io/unschedulable:NoSchedule"));
    }

    #[test]
    fn pods_asking_for_resources_no_node_offers() {
        let rdma = pod("ib", None, ", rdma/rdma_shared_device_a: \"1\"", "");
        let huge = pod("big", None, ", nvidia.com/gpu: \"16\"", "");
        let d = run(&(gpu_node("g0") + &rdma + &huge));
        let found: Vec<&Finding> = d
            .findings
            .iter()
            .filter(|f| f.id == "pod-resource-unavailable")
            .collect();
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(found[0].severity, Severity::Critical);
        assert!(found[0]
            .what
            .contains("more nvidia.com/gpu than any node offers (8 at most)"));
        assert_eq!(found[0].r#where, vec!["ml/big (wants 16)"]);
        assert!(found[1]
            .what
            .contains("1 pending pod requests rdma/rdma_shared_device_a, which no node offers"));
        assert_eq!(d.exit_code(), 2);
        let offered = node(
            "g1",
            GPU_LABELS,
            GPU_TAINT,
            ", nvidia.com/gpu: \"8\", rdma/rdma_shared_device_a: \"63\"",
            "",
        );
        assert!(!ids(&run(&(offered + &rdma))).contains(&"pod-resource-unavailable"));
        // A bound pod is not pending.
        let bound = pod("ib", Some("g0"), ", rdma/rdma_shared_device_a: \"1\"", "");
        assert!(!ids(&run(&(gpu_node("g0") + &bound))).contains(&"pod-resource-unavailable"));
    }

    fn conditions(list: &[(&str, &str)]) -> String {
        let mut s = "  conditions:\n".to_string();
        for (t, st) in list {
            s.push_str(&format!(
                "  - {{type: {t}, status: \"{st}\", reason: R{t}, message: m, lastHeartbeatTime: \"2025-06-02T10:00:00Z\", lastTransitionTime: \"2025-06-02T09:00:00Z\"}}\n"
            ));
        }
        s
    }

    #[test]
    fn node_conditions() {
        let healthy = conditions(&[("Ready", "True"), ("DiskPressure", "False")]);
        let down = conditions(&[("Ready", "Unknown")]);
        let full = conditions(&[
            ("Ready", "True"),
            ("DiskPressure", "True"),
            ("PIDPressure", "True"),
        ]);
        let d = run(&(node("a", "", "", "", &healthy)
            + &node("b", "", "", "", &down)
            + &node("c", "", "", "", &full)));
        let f = finding(&d, "node-not-ready");
        assert_eq!(
            f.r#where,
            vec!["b (Ready=Unknown since 2025-06-02T09:00:00Z: RReady: m)"]
        );
        let pressure: Vec<&str> = d
            .findings
            .iter()
            .filter(|f| f.id == "node-pressure")
            .map(|f| f.what.as_str())
            .collect();
        assert_eq!(
            pressure,
            vec![
                "1 node is under DiskPressure",
                "1 node is under PIDPressure"
            ]
        );
        assert_eq!(d.as_of.as_deref(), Some("2025-06-02T10:00:00Z"));
        assert!(ids(&run(&node("a", "", "", "", &healthy))).is_empty());
    }

    #[test]
    fn mixed_driver_and_kubelet_versions() {
        let with = |name: &str, driver: &str, kubelet: &str| {
            node(
                name,
                &format!("{GPU_LABELS}, nvidia.com/cuda.driver-version.full: \"{driver}\""),
                GPU_TAINT,
                ", nvidia.com/gpu: \"8\"",
                &format!("  nodeInfo: {{kubeletVersion: {kubelet}}}\n"),
            )
        };
        let old_labels = node(
            "g3",
            &format!("{GPU_LABELS}, nvidia.com/cuda.driver.major: \"550\", nvidia.com/cuda.driver.minor: \"127\", nvidia.com/cuda.driver.rev: \"05\""),
            GPU_TAINT,
            ", nvidia.com/gpu: \"8\"",
            "  nodeInfo: {kubeletVersion: v1.33.2}\n",
        );
        let d = run(&(with("g0", "570.124.06", "v1.33.2")
            + &with("g1", "570.124.06", "v1.33.2")
            + &with("g2", "550.127.05", "v1.32.5")
            + &old_labels));
        let f = finding(&d, "gpu-driver-version-mixed");
        assert_eq!(
            f.r#where,
            vec![
                "550.127.05: g2, g3 (2 nodes)",
                "570.124.06: g0, g1 (2 nodes)"
            ]
        );
        assert!(f.what.contains("4 GPU nodes run 2 NVIDIA driver versions"));
        let k = finding(&d, "kubelet-version-mixed");
        assert_eq!(k.severity, Severity::Info);
        assert_eq!(
            k.r#where,
            vec!["v1.33.2: g0, g1, g3 (3 nodes)", "v1.32.5: g2 (1 node)"]
        );
        let same =
            run(&(with("g0", "570.124.06", "v1.33.2") + &with("g1", "570.124.06", "v1.33.2")));
        assert!(ids(&same).is_empty(), "{:?}", same.findings);
    }

    #[test]
    fn mixed_gpu_daemonset_images() {
        let agent = |name: &str, node: &str, image: &str| {
            pod(name, Some(node), "", "")
                .replace("image: img", &format!("image: {image}"))
                .replace(
                    "namespace: ml}",
                    "namespace: gpu-operator, ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: nvidia-device-plugin, uid: u1, controller: true}]}",
                )
        };
        let nodes = gpu_node("g0") + &gpu_node("g1");
        let mixed = agent("dp-a", "g0", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0")
            + &agent("dp-b", "g1", "nvcr.io/nvidia/k8s-device-plugin:v0.16.2");
        let d = run(&(nodes.clone() + &mixed));
        let f = finding(&d, "gpu-operand-version-mixed");
        assert!(f
            .what
            .contains("gpu-operator/nvidia-device-plugin runs 2 different images"));
        assert_eq!(f.r#where.len(), 2);
        let same = agent("dp-a", "g0", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0")
            + &agent("dp-b", "g1", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0");
        assert!(ids(&run(&(nodes + &same))).is_empty());
    }

    fn pending_pod(name: &str, created: &str, message: &str) -> String {
        pod(name, None, "", "").replace(
            "status: {phase: Pending}",
            &format!("status: {{phase: Pending, conditions: [{{type: PodScheduled, status: \"False\", reason: Unschedulable, message: \"{message}\", lastTransitionTime: \"{created}\"}}]}}"),
        )
    }

    #[test]
    fn long_pending_pods_grouped_by_message() {
        let nodes = node("c0", "", "", "", &conditions(&[("Ready", "True")]));
        let msg_a = "0/1 nodes are available: 1 Insufficient cpu.";
        let msg_b = "0/1 nodes are available: 1 Insufficient memory.";
        let pods = pending_pod("a1", "2025-06-02T07:40:00Z", msg_a)
            + &pending_pod("a2", "2025-06-02T08:00:00Z", msg_a)
            + &pending_pod("b1", "2025-06-02T09:00:00Z", msg_b)
            + &pending_pod("new", "2025-06-02T09:55:00Z", msg_b)
            + &pending_pod("gated", "2025-06-02T07:00:00Z", "waiting for a queue")
                .replace("reason: Unschedulable", "reason: SchedulingGated");
        let d = run(&(nodes.clone() + &pods));
        let found: Vec<&Finding> = d
            .findings
            .iter()
            .filter(|f| f.id == "pod-pending-long")
            .collect();
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[0].what,
            format!("2 pods unschedulable for over 15m: {msg_a}")
        );
        assert_eq!(found[0].r#where, vec!["ml/a1 (2h20m)", "ml/a2 (2h)"]);
        assert_eq!(
            found[1].r#where,
            vec!["ml/b1 (1h)"],
            "the 5-minute-old pod is not long"
        );
        // A longer threshold, or a later clock.
        let opts = DoctorOptions {
            now: None,
            pending_for_ms: 3 * 3600 * 1000,
        };
        assert!(diagnose(&snap(&(nodes.clone() + &pods)).unwrap(), &opts)
            .findings
            .is_empty());
        let later = DoctorOptions {
            now: Some("2025-06-02T12:00:00Z".parse().unwrap()),
            ..DoctorOptions::default()
        };
        let d = diagnose(&snap(&(nodes.clone() + &pods)).unwrap(), &later);
        assert_eq!(d.findings.iter().map(|f| f.r#where.len()).sum::<usize>(), 4);
        // More messages than shown: the rest are merged.
        let many: String = (0..7)
            .map(|i| {
                pending_pod(
                    &format!("p{i}"),
                    "2025-06-02T07:00:00Z",
                    &format!("message {i}"),
                )
            })
            .collect();
        let d = run(&(nodes + &many));
        let found: Vec<&Finding> = d
            .findings
            .iter()
            .filter(|f| f.id == "pod-pending-long")
            .collect();
        assert_eq!(found.len(), PENDING_GROUPS);
        assert!(
            found[4]
                .what
                .contains("3 pods unschedulable for over 15m, with 3 other messages"),
            "{}",
            found[4].what
        );
    }

    #[test]
    fn snapshot_reading_notes_and_errors() {
        let list = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n1}, status: {allocatable: {cpu: \"1\"}}}\n- {apiVersion: v1, kind: Service, metadata: {name: s}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n- {apiVersion: v1, kind: Service, metadata: {name: s2}}\n";
        let s = snap(list).unwrap();
        assert_eq!(s.nodes.len(), 1);
        assert_eq!(
            s.notes,
            vec!["snap.yaml: ignored 3 objects that are not Nodes or Pods: ConfigMap (1), Service (2)"]
        );
        let e = snap("kind: List\napiVersion: v1\nitems: []\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("snap.yaml: no Node objects in the file")
                && e.contains("kubectl get nodes,pods -A -o yaml"),
            "{e}"
        );
        let e = snap("a: [b\n").unwrap_err().to_string();
        assert!(e.starts_with("snap.yaml: not valid YAML"), "{e}");
        let e = snap(&pod("p", None, ", nvidia.com/gpu: lots", ""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Pod ml/p") && e.contains("nvidia.com/gpu"),
            "{e}"
        );
        let e = snap(&node("n1", "", "", "", "").replace("cpu: \"64\"", "cpu: many"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Node n1") && e.contains("status.allocatable.cpu"),
            "{e}"
        );
        // Duplicates across files: the first is kept, with a note.
        let files = vec![
            (PathBuf::from("a.yaml"), node("n1", "", "", "", "")),
            (PathBuf::from("b.yaml"), node("n1", "", "", "", "")),
        ];
        let s = read_snapshot(&files).unwrap();
        assert_eq!((s.nodes.len(), s.source.as_str()), (1, "a.yaml, b.yaml"));
        assert!(
            s.notes[0].contains("b.yaml: Node n1: a second Node") && s.notes[0].contains("a.yaml")
        );
        // A pod naming an unknown PriorityClass or RuntimeClass is read (the API server resolved them).
        let p = pod(
            "p",
            None,
            "",
            "  priorityClassName: training\n  runtimeClassName: nvidia\n",
        );
        assert_eq!(
            snap(&(node("n1", "", "", "", "") + &p)).unwrap().pods.len(),
            1
        );
    }

    #[test]
    fn live_objects_that_cannot_be_read_are_left_out_with_a_note() {
        let mut s = snap(&gpu_node("g0")).unwrap();
        let mut broken = s.nodes[0].clone();
        broken.metadata.name = Some("g1".into());
        broken.status = None;
        s.nodes.push(broken);
        let d = diagnose(&s, &DoctorOptions::default());
        assert_eq!(d.nodes, 1);
        assert!(
            d.notes[0].starts_with("left out: snap.yaml: Node g1"),
            "{:?}",
            d.notes
        );
    }

    #[test]
    fn text_report_groups_by_severity_and_caps_lists() {
        let mut text = String::new();
        for i in 0..12 {
            text += &node(&format!("g{i:02}"), GPU_LABELS, GPU_TAINT, "", "");
        }
        text += &node("c0", "", "", "", &conditions(&[("Ready", "False")]));
        let d = run(&text);
        let out = render_text(&d);
        assert!(out.starts_with("kestrel doctor: snap.yaml\n13 nodes (12 with GPUs, 0 GPUs allocatable), 0 pods (0 pending)"), "{out}");
        let crit = out.find("CRITICAL (2)").expect(&out);
        assert!(
            out[crit..].contains("[gpu-node-without-gpus] 12 nodes labelled"),
            "{out}"
        );
        assert!(
            out.contains("      ... and 4 more (--json lists all)"),
            "{out}"
        );
        assert!(out.contains("passed: gpu-count-dropped"), "{out}");
        assert!(out.ends_with("2 critical, 0 warning, 0 info\n"), "{out}");
        let json: Value = serde_json::from_str(&render_json(&d)).unwrap();
        let first = &json[0];
        assert_eq!(first["id"], "gpu-node-without-gpus");
        assert_eq!(first["severity"], "critical");
        assert_eq!(first["where"].as_array().unwrap().len(), 12);
        let mut keys: Vec<&String> = first.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["fix", "id", "severity", "what", "where", "why"]);
        let clean = run(&node("c0", "", "", "", ""));
        assert!(render_text(&clean).contains("no problems found"));
        assert_eq!(clean.exit_code(), 0);
    }

    #[test]
    fn prometheus_rule_has_one_alert_per_check() {
        let text = render_prometheus_rule();
        let docs = parse_yaml(&text).unwrap();
        assert_eq!(
            docs,
            vec![prometheus_rule()],
            "the YAML reads back as the object"
        );
        let rule = &docs[0];
        assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(rule["kind"], "PrometheusRule");
        let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
        let ids: Vec<&str> = rules
            .iter()
            .map(|r| r["labels"]["kestrel_check"].as_str().unwrap())
            .collect();
        assert_eq!(ids, CHECKS.iter().map(|c| c.id).collect::<Vec<_>>());
        let alerts: BTreeSet<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
        assert_eq!(alerts.len(), CHECKS.len(), "alert names are unique");
        for r in rules {
            assert!(["critical", "warning", "info"]
                .contains(&r["labels"]["severity"].as_str().unwrap()));
            assert!(!r["annotations"]["summary"].as_str().unwrap().is_empty());
            assert!(!r["annotations"]["description"].as_str().unwrap().is_empty());
            let expr = r["expr"].as_str().unwrap();
            assert_eq!(
                expr.matches('(').count(),
                expr.matches(')').count(),
                "{expr}"
            );
            assert_eq!(
                expr.matches('{').count(),
                expr.matches('}').count(),
                "{expr}"
            );
        }
    }

    #[test]
    fn ages() {
        assert_eq!(format_age(30_000), "30s");
        assert_eq!(format_age(45 * 60_000), "45m");
        assert_eq!(format_age(3 * 3_600_000), "3h");
        assert_eq!(format_age(135 * 60_000), "2h15m");
        assert_eq!(format_age(76 * 3_600_000), "3d4h");
        assert_eq!(format_age(48 * 3_600_000), "2d");
    }
}
