//! `kestrel doctor`: a diagnosis of a cluster's Nodes, Pods and Events.
//!
//! Pure: the caller reads files or lists objects from the API server; this crate turns
//! them into [`Finding`]s, renders the report (text or JSON) and the PrometheusRules that
//! watch for the same problems (one per check, or one for a failure signature).
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
//! | `image-pull-failed` | warning | image pull failures by registry and error class |
//! | `container-crashloop` | warning | containers in CrashLoopBackOff, GPU pods apart |
//! | `container-oom-killed` | warning | containers OOMKilled (GPU pods apart), kernel OOM kills on nodes |
//! | `pod-sandbox-failed` | critical | sandbox (network) creation failures by CNI and message |
//! | `volume-mount-failed` | warning | volume mount and attach failures, datasets and checkpoints called out |
//! | `pod-network-attachment-failed` | critical | running RDMA/SR-IOV pods missing a Multus network |
//! | `operator-pod-not-ready` | critical | GPU and Network Operator pods not ready, per node |
//! | `gpu-unhealthy` | critical | the node agent's XID errors and lost GPUs, by XID |
//! | `node-usage-high` | warning | nodes near full in real use (metrics API) while pods there fail |
//! | `pod-failed-scheduling` | info | FailedScheduling events by scheduler and reason |
//! | `event-other` | info | Warning events of reasons no other check reads |
//!
//! Findings from events and container states carry a signature (`check/Reason/pattern`,
//! e.g. `image-pull-failed/ErrImagePull/auth`) and their incidents: the signature's events
//! in runs without a pause of more than 30 minutes.
//!
//! A snapshot is judged as of its newest timestamp (node heartbeats, pod conditions), so
//! the same file always gives the same findings; the live command passes the clock.
//!
//! - `snapshot`: reading Nodes, Pods, Events and DRA objects from YAML files (or the API
//!   server's lists);
//! - `events`: Events aggregated by signature as they are read; `signatures`: what an
//!   event or container state is; `event_checks`: the checks on them;
//! - `objects`: the Nodes and Pods as the checks read them;
//! - `checks`: the catalogue of checks and what one finds; `node_checks`, `pod_checks`:
//!   the checks themselves;
//! - `render`: the text and JSON reports; `prometheus`: the PrometheusRules.

mod checks;
mod dra_checks;
mod event_checks;
mod events;
mod node_checks;
mod objects;
mod pod_checks;
mod prometheus;
mod render;
mod signatures;
mod snapshot;
#[cfg(test)]
mod tests;

use k8s_openapi::jiff::Timestamp;
use kestrel_core::GPU_PRODUCT_LABEL;
use kestrel_objects::nodes::node_from_kube;
use node_checks::{
    gpu_count_dropped, gpu_driver_version_mixed, gpu_node_untainted, gpu_node_without_gpus,
    kubelet_version_mixed, node_not_ready, node_pressure,
};
use objects::{is_gpu_resource, parse_amounts, untainted, NodeView, PodView};
use pod_checks::{
    cpu_pod_on_gpu_node, gpu_operand_version_mixed, pod_pending_long, pod_resource_unavailable,
    pod_stranded_by_taints,
};
use serde::Serialize;
use snapshot::{newest_timestamp, pod_spec};
use std::collections::BTreeMap;
use std::path::Path;

pub use checks::{check, Check, Finding, Incident, Severity, Subject, CHECKS};
pub use event_checks::{fix_for, INCIDENT_GAP_SECONDS};
pub use events::EventLog;
pub use pod_checks::format_age;
pub use prometheus::{
    known_signatures, prometheus_rule, render_prometheus_rule, render_signature_rule,
    signature_rule, SignatureRule,
};
pub use render::{render_json, render_text};
pub use snapshot::{parse_yaml, read_snapshot, DaemonSetCounts, NodeUsage, Snapshot};

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

/// How [`diagnose`] judges time.
#[derive(Debug, Clone)]
pub struct DoctorOptions {
    /// The time of the snapshot; `None`: its newest timestamp.
    pub now: Option<Timestamp>,
    /// A pod unschedulable for at least this long (milliseconds) is `pod-pending-long`.
    pub pending_for_ms: u64,
    /// Only events last seen this recently (milliseconds before the snapshot's time)
    /// count; `None`: all.
    pub since_ms: Option<u64>,
}

impl Default for DoctorOptions {
    fn default() -> Self {
        DoctorOptions {
            now: None,
            pending_for_ms: 15 * 60 * 1000,
            since_ms: None,
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
    /// Events read (each object once), and of those the Normal ones no check reads.
    pub events: usize,
    pub events_normal: u64,
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

/// The checks on a snapshot. Objects that cannot be read are left out with a note.
pub fn diagnose(snapshot: &Snapshot, options: &DoctorOptions) -> Diagnosis {
    let source = Path::new(&snapshot.source);
    let mut notes = snapshot.notes.clone();
    let empty = BTreeMap::new();
    let dra_gpus = dra_checks::dra_gpus_by_node(&snapshot.slices);
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
                .sum::<i64>()
            // GPUs NVIDIA's DRA driver publishes in ResourceSlices (no device plugin).
            + dra_gpus.get(&spec.name).copied().unwrap_or(0);
        let node_dra_gpus = dra_gpus.get(&spec.name).copied().unwrap_or(0);
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
            untainted: untainted(&spec),
            spec,
            labels,
            capacity,
            gpu_offered,
            gpu_labelled,
            dra_gpus: node_dra_gpus,
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
    findings.extend(dra_checks::dra_claim_unallocated(
        &snapshot.claims,
        &pods,
        now,
        options.pending_for_ms,
    ));
    findings.extend(dra_checks::dra_pool_incomplete(snapshot));
    findings.extend(event_checks::event_findings(
        &snapshot.events,
        &pods,
        now,
        options.since_ms,
    ));
    findings.extend(event_checks::pod_network_attachment_failed(&pods));
    findings.extend(event_checks::operator_pod_not_ready(&pods));
    findings.extend(event_checks::operator_pods_missing(&snapshot.daemonsets));
    let usage = event_checks::node_usage_high(&nodes, &snapshot.node_usage, &findings);
    findings.extend(usage);
    let order = |id: &str| CHECKS.iter().position(|c| c.id == id).unwrap_or(usize::MAX);
    // Stable: within a check, findings keep the order the check gave them.
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
        events: snapshot.events.read,
        events_normal: snapshot.events.normal.values().sum(),
        as_of: now.map(|t| t.to_string()),
    }
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
