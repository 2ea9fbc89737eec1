//! The engine's basic vocabulary: time, pod and node identities, and what a binding gives
//! a pod. Every other module builds on these, so this one uses none of them.

use serde::Serialize;

/// Time in milliseconds, supplied by the driver (virtual or wall clock).
pub type Millis = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PodId(pub u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NodeId(pub u32);

/// Which GPUs a binding gives a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub enum GpuAssignment {
    None,
    /// Device indices (`GpuDevice::index`), ascending.
    Whole(Vec<u32>),
    Shared {
        index: u32,
        milli: u32,
    },
    /// Partitions of GPUs (MIG devices a DRA driver publishes over a GPU's counters), by
    /// GPU index then partition number, ascending.
    Partitions(Vec<PartitionRef>),
}

/// One partition a binding holds: the GPU, which of its partitions
/// ([`crate::devices::Partitions::devices`]), and the thousandths of the GPU it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PartitionRef {
    pub index: u32,
    pub partition: u8,
    pub milli: u32,
}

impl GpuAssignment {
    pub fn indices(&self) -> Vec<u32> {
        match self {
            GpuAssignment::None => vec![],
            GpuAssignment::Whole(v) => v.clone(),
            GpuAssignment::Shared { index, .. } => vec![*index],
            GpuAssignment::Partitions(parts) => {
                let mut v: Vec<u32> = parts.iter().map(|p| p.index).collect();
                v.dedup();
                v
            }
        }
    }

    /// Thousandths of a device the binding holds (a share by memory: its converted share).
    pub fn milli(&self) -> u64 {
        match self {
            GpuAssignment::None => 0,
            GpuAssignment::Whole(v) => 1000 * v.len() as u64,
            GpuAssignment::Shared { milli, .. } => *milli as u64,
            GpuAssignment::Partitions(parts) => parts.iter().map(|p| p.milli as u64).sum(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum PodPhase {
    Pending,
    Bound {
        node: NodeId,
        gpus: GpuAssignment,
        at: Millis,
    },
    /// Finished or deleted; kept so ids stay valid.
    Gone,
}

/// A pod placed on a node with its devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    pub pod: PodId,
    pub node: NodeId,
    pub gpus: GpuAssignment,
}
