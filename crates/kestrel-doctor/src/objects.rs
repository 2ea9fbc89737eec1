//! The Nodes and Pods as the checks read them.

use super::{CORDON_TAINT, MIRROR_POD_ANNOTATION};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kestrel_core::{
    parse_quantity, static_check, GpuRequest, NodeReason, NodeSpec, PlacementConstraints, PodSpec,
    Taint, TaintEffect, GPU_RESOURCE,
};
use std::collections::BTreeMap;

pub(super) struct NodeView<'a> {
    pub(super) raw: &'a Node,
    pub(super) spec: NodeSpec,
    pub(super) labels: &'a BTreeMap<String, String>,
    pub(super) capacity: BTreeMap<String, i64>,
    /// Allocatable GPU-like devices: `nvidia.com/gpu`, `nvidia.com/gpu.shared`, MIG slices.
    pub(super) gpu_offered: i64,
    /// Labelled by GFD or NFD as having NVIDIA GPUs.
    pub(super) gpu_labelled: bool,
    /// GPUs NVIDIA's DRA driver publishes for it (ResourceSlices), part of `gpu_offered`.
    pub(super) dra_gpus: i64,
    /// The node with its taints and cordon lifted: judged by the engine's static check,
    /// it says whether a pod suits the node apart from taints (selectors, affinity).
    pub(super) untainted: NodeSpec,
}

impl NodeView<'_> {
    pub(super) fn name(&self) -> &str {
        &self.spec.name
    }

    pub(super) fn is_gpu_node(&self) -> bool {
        self.gpu_labelled || self.gpu_offered > 0
    }

    /// Allocatable amount of an extended resource (`nvidia.com/gpu` included).
    pub(super) fn offers(&self, resource: &str) -> i64 {
        if resource == GPU_RESOURCE {
            self.spec.gpus.len() as i64
        } else {
            self.spec.allocatable.extended(resource)
        }
    }

    pub(super) fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
}

/// The node with its taints and cordon lifted.
pub(super) fn untainted(spec: &NodeSpec) -> NodeSpec {
    NodeSpec {
        taints: Vec::new(),
        unschedulable: false,
        ..spec.clone()
    }
}

/// The taints (the cordon's included) that keep a pod with constraints `c` off a node,
/// as the engine's static check names them one after another; empty when the pod may go
/// there (or when the node refuses it for another reason).
pub(super) fn untolerated_taints(c: &PlacementConstraints, node: &NodeSpec) -> Vec<Taint> {
    let mut node = node.clone();
    let mut taints = Vec::new();
    loop {
        match static_check(c, &node) {
            Err(NodeReason::Cordoned) => {
                node.unschedulable = false;
                taints.push(Taint {
                    key: CORDON_TAINT.to_string(),
                    value: String::new(),
                    effect: TaintEffect::NoSchedule,
                });
            }
            Err(NodeReason::UntoleratedTaint(taint)) => {
                node.taints.retain(|t| *t != taint);
                taints.push(taint);
            }
            _ => return taints,
        }
    }
}

pub(super) struct PodView<'a> {
    pub(super) raw: &'a Pod,
    pub(super) spec: PodSpec,
    pub(super) phase: &'a str,
    pub(super) node: Option<&'a str>,
}

impl PodView<'_> {
    pub(super) fn key(&self) -> String {
        self.spec.key()
    }

    /// Not yet bound to a node, and not finished.
    pub(super) fn is_pending(&self) -> bool {
        self.node.is_none() && matches!(self.phase, "Pending" | "")
    }

    /// Bound to a node and not finished.
    pub(super) fn is_placed(&self) -> bool {
        self.node.is_some() && matches!(self.phase, "Pending" | "Running" | "Unknown" | "")
    }

    /// Requested extended resources, whole GPUs included, by name.
    pub(super) fn extended_requests(&self) -> Vec<(String, i64)> {
        let mut out = self.spec.demand.resources.extended.clone();
        let gpus = self.spec.demand.gpu.whole();
        if gpus > 0 {
            out.push((GPU_RESOURCE.to_string(), gpus as i64));
            out.sort();
        }
        out
    }

    pub(super) fn uses_gpu(&self) -> bool {
        self.spec.demand.gpu != GpuRequest::None
            || self
                .spec
                .demand
                .resources
                .extended
                .iter()
                .any(|(r, _)| is_gpu_resource(r))
    }

    pub(super) fn owner_kind(&self) -> Option<&str> {
        self.raw
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .or_else(|| self.raw.metadata.owner_references.iter().flatten().next())
            .map(|o| o.kind.as_str())
    }

    pub(super) fn owner_name(&self) -> Option<&str> {
        self.raw
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "DaemonSet")
            .map(|o| o.name.as_str())
    }

    /// DaemonSet pods and static pods belong on every node.
    pub(super) fn is_node_agent(&self) -> bool {
        matches!(self.owner_kind(), Some("DaemonSet" | "Node"))
            || self
                .raw
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION))
    }

    /// The PodScheduled condition when it is False.
    pub(super) fn unschedulable(&self) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
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
pub(super) fn is_gpu_resource(name: &str) -> bool {
    name.starts_with("nvidia.com/mig-") || name.contains("gpu")
}

pub(super) fn parse_amounts(list: Option<&BTreeMap<String, Quantity>>) -> BTreeMap<String, i64> {
    list.into_iter()
        .flatten()
        .filter_map(|(k, Quantity(v))| parse_quantity(v, 1).ok().map(|n| (k.clone(), n)))
        .collect()
}
