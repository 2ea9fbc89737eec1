//! The cluster index: node state, node classes and free-capacity buckets.
//!
//! Nodes with the same static attributes (shape, devices, taints, cordon, labels other
//! than per-node ones) form a *class*; a pod's static predicates are evaluated once per
//! class. Inside a class, nodes sit in buckets by free whole GPUs (full nodes apart, so
//! that a GPU pod never looks at them), each bucket ordered by the policy's node key, so a placement visits the few nodes that can win instead of the
//! whole cluster. Classes with the same *shape* (capacity and devices) differ only in
//! labels, taints or cordon; each shape keeps buckets of its own, so that a pod to which
//! many such classes are alike (labels that vary from rack to rack, say) visits them as
//! one group instead of class by class.

pub use crate::types::{GpuAssignment, NodeId};

mod buckets;
mod classes;
mod gpu_use;
mod index;
mod node;
#[cfg(test)]
mod tests;

pub(crate) use buckets::*;
pub(crate) use classes::*;
pub use gpu_use::*;
pub use index::*;
pub use node::*;
