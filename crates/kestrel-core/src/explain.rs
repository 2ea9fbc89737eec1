//! Why a pod is pending: typed reasons, counted per node like kube-scheduler's
//! "0/N nodes are available: ..." message, computed by the pass that decided.

use crate::model::Taint;
use serde::Serialize;
use std::fmt;

/// Why one node cannot take a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NodeReason {
    /// Cordoned (`spec.unschedulable`).
    Cordoned,
    /// A NoSchedule/NoExecute taint the pod does not tolerate.
    UntoleratedTaint(Taint),
    /// nodeSelector or required node affinity do not match.
    AffinityMismatch,
    /// The pod's RuntimeClass `scheduling.nodeSelector`/tolerations do not match.
    RuntimeClassMismatch(String),
    /// Not enough of a resource free (`cpu`, `memory`, `nvidia.com/gpu`, ...).
    Insufficient(String),
    /// The node holds its maximum pod count.
    TooManyPods,
    /// The node has enough free GPU share in total, but no single device that the request
    /// can use (whole GPUs split by shares, or shares spread thin).
    GpuFragmented,
}

impl NodeReason {
    /// A shortfall of free capacity (as opposed to a node the pod may not use at all).
    pub fn is_capacity(&self) -> bool {
        matches!(
            self,
            NodeReason::Insufficient(_) | NodeReason::TooManyPods | NodeReason::GpuFragmented
        )
    }
}

impl fmt::Display for NodeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeReason::Cordoned => write!(f, "node(s) were unschedulable (cordoned)"),
            NodeReason::UntoleratedTaint(t) => {
                write!(
                    f,
                    "node(s) had untolerated taint {{{}: {}}}",
                    t.key, t.value
                )
            }
            NodeReason::AffinityMismatch => {
                write!(f, "node(s) didn't match Pod's node affinity/selector")
            }
            NodeReason::RuntimeClassMismatch(rc) => {
                write!(f, "node(s) didn't match RuntimeClass {rc:?} scheduling")
            }
            NodeReason::Insufficient(r) => write!(f, "Insufficient {r}"),
            NodeReason::TooManyPods => write!(f, "Too many pods"),
            NodeReason::GpuFragmented => {
                write!(
                    f,
                    "node(s) had free GPU capacity split across shared devices"
                )
            }
        }
    }
}

/// Why a pod fits no node, and what would have to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unschedulable {
    pub total_nodes: u32,
    /// Node counts per reason, most frequent first. A node may count under several
    /// resource shortfalls, as in kube-scheduler.
    pub reasons: Vec<(NodeReason, u32)>,
    /// Set when the cluster has enough free whole GPUs in total but no eligible node
    /// has enough: `(free whole GPUs on eligible nodes, most on one eligible node)`.
    pub gpu_fragmentation: Option<(u32, u32)>,
}

impl Unschedulable {
    /// The reason that matters most, for one-line summaries: what stops the pod on the
    /// nodes it is otherwise allowed on (a shortfall), else the most common exclusion.
    pub fn headline(&self) -> String {
        let shortfall = self.reasons.iter().find(|(r, _)| r.is_capacity());
        match shortfall.or(self.reasons.first()) {
            Some((reason, _)) => reason.to_string(),
            None => "no nodes in the cluster".to_string(),
        }
    }

    /// Whether a capacity problem (not configuration) blocks the pod: adding nodes could help.
    pub fn is_capacity(&self) -> bool {
        self.reasons.iter().any(|(r, _)| r.is_capacity())
    }
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0/{} nodes are available", self.total_nodes)?;
        if self.total_nodes == 0 {
            return write!(f, ": the cluster has no nodes");
        }
        let parts: Vec<String> = self
            .reasons
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        write!(f, ": {}.", parts.join(", "))?;
        if let Some((free, best)) = self.gpu_fragmentation {
            write!(
                f,
                " GPUs are fragmented: {free} whole GPUs are free on eligible nodes, at most {best} on any one node."
            )?;
        }
        Ok(())
    }
}
