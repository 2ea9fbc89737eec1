//! The checks on Nodes: GPUs advertised, taints, conditions, versions.

use super::checks::Finding;
use super::objects::{is_gpu_resource, NodeView};
use super::{
    count, short_list, DRIVER_VERSION_LABEL, DRIVER_VERSION_PARTS, GPU_COUNT_LABEL,
    GPU_REPLICAS_LABEL, MIG_STRATEGY_LABEL,
};
use kestrel_core::{Taint, GPU_PRODUCT_LABEL, GPU_RESOURCE};
use std::collections::{BTreeMap, BTreeSet};

pub(super) fn gpu_node_without_gpus(nodes: &[NodeView]) -> Vec<Finding> {
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

pub(super) fn gpu_count_dropped(nodes: &[NodeView]) -> Vec<Finding> {
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
            let alloc = n.offers(GPU_RESOURCE) + n.offers("nvidia.com/gpu.shared") + n.dra_gpus;
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

pub(super) fn is_gpu_taint(t: &Taint) -> bool {
    t.key.to_ascii_lowercase().contains("gpu")
}

pub(super) fn gpu_node_untainted(nodes: &[NodeView]) -> Vec<Finding> {
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

pub(super) fn condition<'a>(
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

pub(super) fn condition_detail(c: &k8s_openapi::api::core::v1::NodeCondition) -> String {
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

pub(super) fn node_not_ready(nodes: &[NodeView]) -> Vec<Finding> {
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

pub(super) fn node_pressure(nodes: &[NodeView]) -> Vec<Finding> {
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
pub(super) fn driver_version(n: &NodeView) -> Option<String> {
    if let Some(v) = n.label(DRIVER_VERSION_LABEL).filter(|v| !v.is_empty()) {
        return Some(v.to_string());
    }
    DRIVER_VERSION_PARTS.iter().find_map(|keys| {
        let parts: Vec<&str> = keys.iter().map_while(|k| n.label(k)).collect();
        (!parts.is_empty()).then(|| parts.join("."))
    })
}

/// `version: a, b (2 nodes)` per value, the most common first.
pub(super) fn by_value(groups: BTreeMap<String, Vec<String>>) -> Vec<String> {
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

pub(super) fn gpu_driver_version_mixed(nodes: &[NodeView]) -> Vec<Finding> {
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

pub(super) fn kubelet_version_mixed(nodes: &[NodeView]) -> Vec<Finding> {
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
