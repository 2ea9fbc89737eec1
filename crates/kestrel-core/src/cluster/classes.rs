//! Node classes and shapes: the keys that group nodes alike, and their members.

use super::*;
use crate::model::{Labels, NodeSpec, Taint};
use crate::resources::Resources;

/// What nodes of one shape share: capacity and devices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ShapeKey {
    allocatable: Resources,
    max_pods: u32,
    /// Model, memory, and whether DRA publishes it.
    gpu_models: Vec<(String, u64, bool)>,
    gpu_extended_class: Option<String>,
}

/// What nodes of one class share. Two nodes with equal keys are interchangeable for
/// every static predicate that does not name a per-node label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ClassKey {
    pub(super) shape: ShapeKey,
    pub(super) taints: Vec<Taint>,
    pub(super) unschedulable: bool,
    pub(super) labels: Labels,
}

impl ClassKey {
    pub(super) fn of(spec: &NodeSpec) -> Self {
        let mut taints = spec.taints.clone();
        taints.sort();
        ClassKey {
            shape: ShapeKey {
                allocatable: spec.allocatable.clone(),
                max_pods: spec.max_pods,
                gpu_models: spec
                    .gpus
                    .iter()
                    .map(|g| (g.model.clone(), g.memory_mib, g.dra.is_some()))
                    .collect(),
                gpu_extended_class: spec.gpu_extended_class.clone(),
            },
            taints,
            unschedulable: spec.unschedulable,
            labels: spec
                .labels
                .iter()
                .filter(|(k, _)| !PER_NODE_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }
}

/// Nodes of one class, in buckets by room for GPUs ([`bucket_of`]), each ordered by (key,
/// node).
#[derive(Debug, Clone)]
pub(crate) struct NodeClass {
    /// A member's spec, for class-level predicates (per-node labels are not to be trusted).
    pub representative: NodeSpec,
    pub buckets: Vec<Bucket>,
    pub len: usize,
    /// Index into [`ClusterIndex::shapes`].
    pub shape: usize,
}

/// Nodes of one shape (all its classes), in buckets as in a class.
#[derive(Debug, Clone)]
pub(crate) struct NodeShape {
    pub buckets: Vec<Bucket>,
    pub len: usize,
}
