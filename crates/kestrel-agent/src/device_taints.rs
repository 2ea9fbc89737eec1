//! GPU health on nodes whose GPUs NVIDIA's DRA driver publishes: there is no device plugin
//! to mark a GPU unhealthy, so the agent puts a DeviceTaintRule (`resource.k8s.io/v1`) on
//! each unhealthy GPU's DRA device, and takes it off once the GPU recovers. Schedulers that
//! honour device taints (Kestrel, kube-scheduler 1.37) then give the device to no claim
//! that does not tolerate the taint.

use crate::cluster::Cluster;
use crate::health::HealthMap;
use crate::inventory::Inventory;
use serde_json::json;
use std::collections::BTreeMap;

/// The taint key the agent's rules carry; the value is the fault's reason (`XidError`,
/// `GpuLost`).
pub const UNHEALTHY_TAINT: &str = "kestrel.dev/gpu-unhealthy";
/// The annotation naming the node a rule of the agent is for.
pub const RULE_NODE_ANNOTATION: &str = "kestrel.dev/gpu-health-node";

/// A GPU as NVIDIA's DRA driver publishes it for the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraGpu {
    pub pool: String,
    pub device: String,
    /// Its `uuid` attribute.
    pub uuid: Option<String>,
    /// Its `index` attribute.
    pub index: Option<i64>,
}

/// The rule that takes `gpu` of `node` out of service for `reason`.
pub fn rule(node: &str, gpu: &DraGpu, reason: &str) -> serde_json::Value {
    json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
        "metadata": {
            "name": rule_name(node, &gpu.device),
            "annotations": {RULE_NODE_ANNOTATION: node},
        },
        "spec": {
            "deviceSelector": {
                "driver": kestrel_objects::dra::NVIDIA_GPU_DRIVER,
                "pool": gpu.pool,
                "device": gpu.device,
            },
            "taint": {"key": UNHEALTHY_TAINT, "value": reason, "effect": "NoSchedule"},
        },
    })
}

/// `kestrel-gpu-health-<node>-<device>`: node names are DNS subdomains and device names DNS
/// labels, so the name is a DNS subdomain too.
pub fn rule_name(node: &str, device: &str) -> String {
    format!("kestrel-gpu-health-{node}-{device}")
}

/// The rules the node should have: one per unhealthy GPU that DRA publishes (found by its
/// UUID, else by its index), by name.
pub fn desired(
    node: &str,
    inv: &Inventory,
    health: &HealthMap,
    published: &[DraGpu],
) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for gpu in &inv.gpus {
        let Some(fault) = health.get(&gpu.uuid).and_then(|h| h.fault.as_ref()) else {
            continue;
        };
        let device = published
            .iter()
            .find(|d| d.uuid.as_deref() == Some(gpu.uuid.as_str()))
            .or_else(|| {
                published
                    .iter()
                    .find(|d| d.uuid.is_none() && d.index == Some(i64::from(gpu.index)))
            });
        if let Some(device) = device {
            out.insert(
                rule_name(node, &device.device),
                rule(node, device, fault.reason()),
            );
        }
    }
    out
}

/// Puts the node's rules right: an unhealthy GPU's rule written, a recovered GPU's
/// deleted. Failures are logged; the next health change tries again.
pub async fn reconcile(cluster: &Cluster, node: &str, inv: &Inventory, health: &HealthMap) {
    let published = match cluster.dra_gpus_of(node).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read this node's ResourceSlices; device taints not updated");
            return;
        }
    };
    let want = desired(node, inv, health, &published);
    let have = match cluster.device_taint_rules_of(node).await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(
                error = %e,
                "cannot list DeviceTaintRules (grant list on devicetaintrules, resource.k8s.io); \
                 device taints not updated"
            );
            return;
        }
    };
    for (name, rule) in &want {
        if have.get(name) == Some(&rule["spec"]) {
            continue;
        }
        match cluster.put_device_taint_rule(name, rule).await {
            Ok(()) => tracing::warn!(rule = %name, "unhealthy GPU's DRA device tainted"),
            Err(e) => tracing::warn!(rule = %name, error = %e, "cannot write DeviceTaintRule"),
        }
    }
    for name in have.keys().filter(|n| !want.contains_key(*n)) {
        match cluster.delete_device_taint_rule(name).await {
            Ok(()) => tracing::info!(rule = %name, "recovered GPU's DRA device untainted"),
            Err(e) => tracing::warn!(rule = %name, error = %e, "cannot delete DeviceTaintRule"),
        }
    }
}
