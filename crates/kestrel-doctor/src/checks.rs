//! The catalogue of checks (id, severity, the Prometheus alert for the same problem) and
//! what a check finds.

use serde::Serialize;
use std::fmt;

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
pub const CHECKS: [Check; 25] = [
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
    Check {
        id: "dra-claim-unallocated",
        severity: Severity::Warning,
        title: "ResourceClaims pending pods wait on, unallocated for longer than --pending-for",
        alert: "KestrelDraClaimUnallocated",
        expr: "max by (namespace, signature) (kestrel_doctor_finding{check=\"dra-claim-unallocated\"}) > 0",
        for_: "15m",
        summary: "ResourceClaims that pending pods wait on are not allocated",
        description: "No node has free devices that the claim's DeviceClass and selectors accept, or no DRA driver publishes them, so the pods that use the claim never start. kube-state-metrics exports no ResourceClaims: this rule reads kestrel_doctor_finding, which kestrel serve exports from its doctor run every --doctor-interval.",
    },
    Check {
        id: "dra-pool-incomplete",
        severity: Severity::Warning,
        title: "DRA pools with slices missing or left from an older generation",
        alert: "KestrelDraPoolIncomplete",
        expr: "max by (signature) (kestrel_doctor_finding{check=\"dra-pool-incomplete\"}) > 0",
        for_: "15m",
        summary: "A DRA pool has slices missing or left from an older generation",
        description: "Schedulers use a pool's devices only once every slice of its newest generation is there, and ignore older generations: the devices are not given out, or a restarted driver did not clean up. Look at the DRA driver's kubelet plugin on the node. This rule reads kestrel_doctor_finding, which kestrel serve exports from its doctor run every --doctor-interval.",
    },
    Check {
        id: "image-pull-failed",
        severity: Severity::Warning,
        title: "pods that cannot pull their images, by registry and error",
        alert: "KestrelImagePullFailed",
        expr: "max by (namespace, node, signature) (kestrel_doctor_finding{check=\"image-pull-failed\"}) > 0",
        for_: "10m",
        summary: "Pods in {{ $labels.namespace }} cannot pull their images ({{ $labels.signature }})",
        description: "kestrel serve's doctor found image pull failures (ErrImagePull, ImagePullBackOff): the containers never start. kestrel doctor --live names the pods, the registry and the error.",
    },
    Check {
        id: "container-crashloop",
        severity: Severity::Warning,
        title: "containers restarting in a loop (CrashLoopBackOff), GPU pods called out",
        alert: "KestrelContainerCrashLoop",
        expr: "kube_pod_container_status_waiting_reason{reason=\"CrashLoopBackOff\"} == 1",
        for_: "15m",
        summary: "Container {{ $labels.container }} of {{ $labels.namespace }}/{{ $labels.pod }} is in CrashLoopBackOff",
        description: "The container exits soon after each start. kubectl logs --previous shows why; a GPU pod holds its GPUs meanwhile.",
    },
    Check {
        id: "container-oom-killed",
        severity: Severity::Warning,
        title: "containers killed for exceeding their memory limit, and kernel OOM kills on nodes",
        alert: "KestrelContainerOomKilled",
        expr: "kube_pod_container_status_last_terminated_reason{reason=\"OOMKilled\"} == 1",
        for_: "0m",
        summary: "Container {{ $labels.container }} of {{ $labels.namespace }}/{{ $labels.pod }} was OOMKilled",
        description: "The container used more memory than its limit and was killed. For GPU jobs host memory (data loaders, pinned buffers) is the usual cause; raise the limit.",
    },
    Check {
        id: "pod-sandbox-failed",
        severity: Severity::Critical,
        title: "pods whose sandbox (network) cannot be created, by CNI and message",
        alert: "KestrelPodSandboxFailed",
        expr: "max by (namespace, node, signature) (kestrel_doctor_finding{check=\"pod-sandbox-failed\"}) > 0",
        for_: "5m",
        summary: "Pods on {{ $labels.node }} cannot get a network ({{ $labels.signature }})",
        description: "kubelet cannot create pod sandboxes: the CNI (Multus, SR-IOV, IPAM) fails. kestrel doctor --live names the pods and the CNI's message.",
    },
    Check {
        id: "volume-mount-failed",
        severity: Severity::Warning,
        title: "pods that cannot mount or attach a volume (datasets and checkpoints called out)",
        alert: "KestrelVolumeMountFailed",
        expr: "max by (namespace, node, signature) (kestrel_doctor_finding{check=\"volume-mount-failed\"}) > 0",
        for_: "10m",
        summary: "Pods in {{ $labels.namespace }} cannot mount a volume ({{ $labels.signature }})",
        description: "kubelet starts no container before every volume is mounted. kestrel doctor --live names the pods, the volume and the error.",
    },
    Check {
        id: "pod-network-attachment-failed",
        severity: Severity::Critical,
        title: "running RDMA/SR-IOV pods without the secondary networks they asked for",
        alert: "KestrelPodNetworkAttachmentFailed",
        expr: "max by (namespace, node, signature) (kestrel_doctor_finding{check=\"pod-network-attachment-failed\"}) > 0",
        for_: "5m",
        summary: "RDMA/SR-IOV pods in {{ $labels.namespace }} on {{ $labels.node }} run without their network",
        description: "Multus did not attach the networks the pods ask for: their RDMA traffic falls back to TCP or fails.",
    },
    Check {
        id: "operator-pod-not-ready",
        severity: Severity::Critical,
        title: "GPU and Network Operator pods not ready, per node",
        alert: "KestrelOperatorPodNotReady",
        expr: "(kube_pod_status_ready{condition=\"false\"} == 1) and on (namespace, pod) kube_pod_owner{owner_kind=\"DaemonSet\", owner_name=~\"nvidia-.*|gpu-feature-discovery.*|(nvidia-)?dcgm-exporter.*|mofed.*|doca-driver.*|ofed-driver.*|rdma-shared-d.*|sriov(-network)?-device-plugin.*|.*multus.*|whereabouts.*|nv-ipam.*\"}",
        for_: "10m",
        summary: "Operator pod {{ $labels.namespace }}/{{ $labels.pod }} is not ready",
        description: "A GPU or Network Operator component (driver, toolkit, device plugin, DCGM, OFED, RDMA/SR-IOV device plugin) is not ready: the node's GPUs or RDMA devices are missing.",
    },
    Check {
        id: "gpu-unhealthy",
        severity: Severity::Critical,
        title: "GPUs the node agent marked unhealthy: XID errors and lost GPUs",
        alert: "KestrelGpuUnhealthyEvents",
        expr: "max by (node, signature) (kestrel_doctor_finding{check=\"gpu-unhealthy\"}) > 0",
        for_: "0m",
        summary: "GPUs on {{ $labels.node }} are unhealthy ({{ $labels.signature }})",
        description: "Kestrel's node agent reported XID errors or a GPU that stopped answering; the kubelet no longer hands the GPU out. The XID names the fault.",
    },
    Check {
        id: "node-usage-high",
        severity: Severity::Warning,
        title: "nodes near full in real memory or CPU use while pods there fail or are evicted",
        alert: "KestrelNodeUsageHigh",
        expr: "max by (node, signature) (kestrel_doctor_finding{check=\"node-usage-high\"}) > 0",
        for_: "10m",
        summary: "Node {{ $labels.node }} is near full in real use while pods there fail ({{ $labels.signature }})",
        description: "The node's real use (the metrics API) is near its allocatable while pods there are OOM-killed, crash or get evicted: memory pressure that looks like a scheduling or application failure.",
    },
    Check {
        id: "pod-failed-scheduling",
        severity: Severity::Info,
        title: "FailedScheduling events, by scheduler and reason",
        alert: "KestrelPodFailedScheduling",
        expr: "max by (namespace, signature) (kestrel_doctor_finding{check=\"pod-failed-scheduling\"}) > 0",
        for_: "30m",
        summary: "Pods in {{ $labels.namespace }} fail to schedule ({{ $labels.signature }})",
        description: "A scheduler (Kestrel or another) reports FailedScheduling for these pods. kestrel doctor --live groups them by scheduler and reason.",
    },
    Check {
        id: "event-other",
        severity: Severity::Info,
        title: "Warning events of reasons no other check reads, by reason and reporter",
        alert: "KestrelWarningEvents",
        expr: "max by (namespace, signature) (kestrel_doctor_finding{check=\"event-other\"}) > 0",
        for_: "1h",
        summary: "Warning events {{ $labels.signature }} in {{ $labels.namespace }}",
        description: "Warning events of a reason no check reads, kept so nothing the cluster reports is lost.",
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
    /// The failure signature (`check/Reason/pattern`) of findings from events and
    /// container states; `kestrel doctor --alert-for` takes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The signature's events grouped in time (events only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub incidents: Vec<Incident>,
    /// The nodes and namespaces it concerns, for the metric `kestrel serve` exports.
    #[serde(skip)]
    pub subjects: Vec<Subject>,
}

/// A run of a signature's events without a pause longer than
/// [`super::INCIDENT_GAP_SECONDS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Incident {
    pub first_seen: Option<String>,
    pub last_seen: Option<String>,
    /// Events (each counted as often as it happened).
    pub count: u64,
    pub nodes: Vec<String>,
    /// The pods (`namespace/name`), or other objects (`Kind namespace/name`).
    pub pods: Vec<String>,
}

/// A node and a namespace a finding concerns ("" when it concerns none).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Subject {
    pub node: String,
    pub namespace: String,
}

impl Finding {
    pub(super) fn new(
        id: &str,
        what: String,
        r#where: Vec<String>,
        why: &str,
        fix: String,
    ) -> Finding {
        let severity = check(id).expect("a known check id").severity;
        Finding {
            id: id.to_string(),
            severity,
            what,
            r#where,
            why: why.to_string(),
            fix,
            signature: None,
            incidents: Vec::new(),
            subjects: Vec::new(),
        }
    }
}
