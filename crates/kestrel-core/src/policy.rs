//! Scoring policies. Each ranks nodes by a key computed from the node alone (lower wins),
//! so the cluster index can keep nodes sorted and a placement stops at the first node
//! that fits. Pod-specific preferences (preferred affinity, PreferNoSchedule taints) are
//! ranked before the key, per node class.

use crate::cluster::{ClusterIndex, NodeState};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
pub enum Policy {
    /// Kestrel's default: packing-aware placement. Each node shape (or class) and free-GPU
    /// bucket offers a shortlist of fitting nodes in GPU-first order (the fewest free GPU
    /// thousandths, then the most allocated cpu and memory); the pod goes where it makes the
    /// least GPU capacity unusable for the pods expected to come ([`crate::packing`]: GPU
    /// shares priced by the LP of the learned mix, free GPUs stranded by cpu and memory).
    /// Ties go to the GPU-first order, which keeps whole nodes free for multi-GPU pods.
    #[default]
    Kestrel,
    /// kube-scheduler's `MostAllocated` over cpu, memory and GPUs (equal weights).
    BinPack,
    /// kube-scheduler's `LeastAllocated`: spread load over the emptiest nodes.
    Spread,
    /// The FGD artifact's BestFit: least `0.5 x free cpu / max node cpu + 0.5 x free GPU / 8`.
    BestFit,
    /// Uniformly random among the nodes that fit (a baseline).
    Random,
    /// The FGD paper's policy (fragmentation gradient descent, [`crate::fgd`]): every
    /// fitting node, scored by how much the placement grows its fragmentation for the
    /// typical pods of the mix seen so far (a baseline).
    Fgd,
}

impl Policy {
    pub const ALL: [Policy; 6] = [
        Policy::Kestrel,
        Policy::BinPack,
        Policy::Spread,
        Policy::BestFit,
        Policy::Random,
        Policy::Fgd,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Kestrel => "kestrel",
            Policy::BinPack => "binpack",
            Policy::Spread => "spread",
            Policy::BestFit => "bestfit",
            Policy::Random => "random",
            Policy::Fgd => "fgd",
        }
    }

    /// The node's rank under this policy: lower is better. Random and FGD rank every node
    /// alike (they look at every fitting node).
    pub fn node_key(self, cluster: &ClusterIndex, node: &NodeState) -> u64 {
        const SCALE: f64 = (1u64 << 20) as f64;
        let frac = |free: i64, total: i64| {
            if total <= 0 {
                0.0
            } else {
                free.max(0) as f64 / total as f64
            }
        };
        let alloc = &node.spec.allocatable;
        let cpu_free = frac(node.free.cpu_milli, alloc.cpu_milli);
        let mem_free = frac(node.free.memory_bytes, alloc.memory_bytes);
        let gpu_free = frac(node.free_gpu_milli() as i64, 1000 * node.gpu_count() as i64);
        let has_gpu = node.gpu_count() > 0;
        let most_allocated = if has_gpu {
            (cpu_free + mem_free + gpu_free) / 3.0
        } else {
            (cpu_free + mem_free) / 2.0
        };
        match self {
            Policy::Kestrel => {
                let gpu_part = node.free_gpu_milli().min(0xFFFF);
                (gpu_part << 40) | ((cpu_free + mem_free) / 2.0 * SCALE) as u64
            }
            Policy::BinPack => (most_allocated * SCALE) as u64,
            Policy::Spread => ((1.0 - most_allocated) * SCALE) as u64,
            Policy::BestFit => {
                // 0.5 * cpu/max_cpu + 0.5 * gpu/8000, scaled by 8000 * max_cpu: exact integers.
                node.free.cpu_milli.max(0) as u64 * 8000
                    + node.free_gpu_milli() * cluster.max_node_cpu.max(1) as u64
            }
            Policy::Random | Policy::Fgd => 0,
        }
    }

    /// Whether the BestFit normaliser matters (keys must be redone when it changes).
    pub(crate) fn uses_max_node_cpu(self) -> bool {
        self == Policy::BestFit
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Policy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown policy {s:?}; use one of {}", names.join(", "))
            })
    }
}
