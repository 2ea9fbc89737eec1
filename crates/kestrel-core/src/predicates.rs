//! Node predicates as pure functions of a pod's constraints and a node: the static checks
//! kube-scheduler makes (cordon, affinity, taints, RuntimeClass) and the resource reasons a
//! node cannot take a demand now. The engine caches their verdicts; nothing here keeps state.

use crate::cluster::{NodeState, PER_NODE_LABELS};
use crate::explain::NodeReason;
use crate::model::{
    Demand, GpuRequest, NodeSelectorTerm, NodeSpec, PlacementConstraints, TaintEffect,
};
use crate::resources::GPU_RESOURCE;

/// The resource reasons a node that passes static predicates cannot take the demand now.
pub(crate) fn node_shortfalls(
    node: &NodeState,
    demand: &Demand,
    c: &PlacementConstraints,
) -> Vec<NodeReason> {
    let mut out: Vec<NodeReason> = node
        .free
        .shortfalls(&demand.resources)
        .map(|r| NodeReason::Insufficient(r.to_string()))
        .collect();
    if node.free_pods == 0 {
        out.push(NodeReason::TooManyPods);
    }
    if let Some(claims) = &c.devices {
        if let Err(short) = node.choose_devices(claims) {
            out.push(claim_reason(short));
        }
        return out;
    }
    let memory_short = match demand.gpu {
        GpuRequest::Memory { mib } if !node.has_device_memory(mib) => Some(mib),
        _ => None,
    };
    if node.dra && demand.gpu != GpuRequest::None {
        // Its GPUs are published through DRA: it has no nvidia.com/gpu at all.
        out.push(NodeReason::Insufficient(GPU_RESOURCE.to_string()));
    } else if let Some(mib) = memory_short {
        out.push(NodeReason::gpu_memory_short(mib));
    } else if !node.gpu_fits(demand.gpu) {
        let enough_in_total = match demand.gpu {
            // Free thousandths on the devices with the memory, against the least share
            // it takes on one of them.
            GpuRequest::Memory { mib } => {
                let (free, need) = node
                    .spec
                    .gpus
                    .iter()
                    .zip(&node.gpus)
                    .filter_map(|(d, g)| {
                        crate::model::memory_share_milli(mib, d.memory_mib)
                            .map(|m| (g.free_milli as u64, m as u64))
                    })
                    .fold((0, u64::MAX), |(f, n), (free, m)| (f + free, n.min(m)));
                free >= need
            }
            gpu => node.free_gpu_milli() >= gpu.milli(),
        };
        out.push(if enough_in_total {
            NodeReason::GpuFragmented
        } else {
            NodeReason::Insufficient(GPU_RESOURCE.to_string())
        });
    } else if c.single_numa_node && node.choose_gpus_single_numa(demand.gpu).is_none() {
        out.push(NodeReason::numa_unaligned());
    }
    out
}

/// Cordoned nodes are skipped unless the pod tolerates the taint that stands for the cordon.
static CORDON_TAINT_VIEW: std::sync::LazyLock<crate::model::Taint> =
    std::sync::LazyLock::new(|| crate::model::Taint {
        key: "node.kubernetes.io/unschedulable".to_string(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    });

/// Static predicates in kube-scheduler's order (NodeUnschedulable, TaintToleration,
/// NodeAffinity), plus the RuntimeClass's own selector. On success, the node's
/// preference score: matched preferred-affinity weights, minus 100 per untolerated
/// PreferNoSchedule taint.
pub fn static_check(c: &PlacementConstraints, node: &NodeSpec) -> Result<i64, NodeReason> {
    if node.unschedulable
        && !c
            .tolerations
            .iter()
            .any(|t| t.tolerates(&CORDON_TAINT_VIEW))
    {
        return Err(NodeReason::Cordoned);
    }
    // kube-scheduler's filter order: TaintToleration before NodeAffinity, so a node failing
    // both is counted under its taint.
    let tolerations = || tolerations_of(c);
    let mut score = 0i64;
    for taint in &node.taints {
        let tolerated = tolerations().any(|t| t.tolerates(taint));
        match taint.effect {
            TaintEffect::NoSchedule | TaintEffect::NoExecute if !tolerated => {
                return Err(NodeReason::UntoleratedTaint(taint.clone()));
            }
            TaintEffect::PreferNoSchedule if !tolerated => score -= 100,
            _ => {}
        }
    }
    if !selects_node(c, node) {
        return Err(NodeReason::AffinityMismatch);
    }
    if let Some(rc) = &c.runtime_class {
        if !rc
            .node_selector
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v))
        {
            return Err(NodeReason::RuntimeClassMismatch(rc.name.clone()));
        }
    }
    if let Some(volumes) = &c.volumes {
        volumes
            .allows(node)
            .map_err(crate::scheduler::volume_reason)?;
    }
    score += c
        .affinity
        .preferred
        .iter()
        .filter(|(_, term)| term.matches(node))
        .map(|(w, _)| *w as i64)
        .sum::<i64>();
    Ok(score)
}

/// The pod's nodeSelector and required node affinity allow the node.
pub(crate) fn selects_node(c: &PlacementConstraints, node: &NodeSpec) -> bool {
    c.node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k) == Some(v))
        && c.affinity
            .required
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(node)))
}

/// The pod's tolerations, its RuntimeClass's included.
fn tolerations_of(c: &PlacementConstraints) -> impl Iterator<Item = &crate::model::Toleration> {
    let runtime_tolerations = c.runtime_class.iter().flat_map(|rc| &rc.tolerations);
    c.tolerations.iter().chain(runtime_tolerations)
}

/// The pod tolerates every NoSchedule and NoExecute taint of the node.
pub(crate) fn tolerates_node(c: &PlacementConstraints, node: &NodeSpec) -> bool {
    node.taints.iter().all(|taint| {
        matches!(taint.effect, TaintEffect::PreferNoSchedule)
            || tolerations_of(c).any(|t| t.tolerates(taint))
    })
}

pub(crate) fn names_per_node_labels(c: &PlacementConstraints) -> bool {
    let term_names = |t: &NodeSelectorTerm| {
        !t.match_fields.is_empty()
            || t.match_expressions
                .iter()
                .any(|r| PER_NODE_LABELS.contains(&r.key.as_str()))
    };
    let per_node_key = |k: &String| PER_NODE_LABELS.contains(&k.as_str());
    c.node_selector.keys().any(per_node_key)
        || c.runtime_class
            .as_ref()
            .is_some_and(|rc| rc.node_selector.keys().any(per_node_key))
        || c.affinity.required.iter().flatten().any(term_names)
        || c.affinity.preferred.iter().any(|(_, t)| term_names(t))
        || c.volumes.iter().flat_map(|v| v.terms()).any(term_names)
}

/// A node's DRA shortfall in kube-scheduler's words, with what no node alike could give.
fn claim_reason(short: crate::devices::ClaimShortfall) -> NodeReason {
    use crate::devices::ClaimShortfall;
    match short {
        ClaimShortfall::Request {
            claim,
            request,
            matching: 0,
            error,
            ..
        } => NodeReason::NoMatchingDevice(match error {
            Some(e) => format!("ResourceClaim {claim} request {request}: no device matches; a selector failed: {e}"),
            None => format!("ResourceClaim {claim} request {request}: no device matches"),
        }),
        ClaimShortfall::Request {
            fragmented: true, ..
        } => NodeReason::PartitionsFragmented,
        ClaimShortfall::Request { .. } => NodeReason::ClaimsUnallocatable,
        other => NodeReason::NoMatchingDevice(other.to_string()),
    }
}
