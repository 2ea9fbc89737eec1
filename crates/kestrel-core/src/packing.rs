//! Kestrel's packing score: how good it is to put a pod on a node, judged by what the
//! placement leaves behind for the pods that are expected to come.
//!
//! The scheduler shows the scorer every pod it is given (`observe`), so the scorer can learn
//! the workload's mix, and asks it to rank the shortlist of fitting nodes (`score`).

use crate::cluster::NodeState;
use crate::model::Demand;

#[derive(Debug, Clone, Default)]
pub struct PackingScorer {
    observed: u64,
}

impl PackingScorer {
    /// Learns from a pod entering the queue.
    pub fn observe(&mut self, _demand: &Demand) {
        self.observed += 1;
    }

    /// Higher is better. GPU-first packing: the fewer GPU thousandths the node keeps free,
    /// the better; then the fuller its cpu and memory.
    pub fn score(&self, node: &NodeState, _demand: &Demand) -> i64 {
        let frac = |free: i64, total: i64| {
            if total <= 0 {
                0.0
            } else {
                free.max(0) as f64 / total as f64
            }
        };
        let alloc = &node.spec.allocatable;
        let cpu_mem = (frac(node.free.cpu_milli, alloc.cpu_milli)
            + frac(node.free.memory_bytes, alloc.memory_bytes))
            / 2.0;
        -((node.free_gpu_milli() as i64) << 24) - (cpu_mem * (1 << 20) as f64) as i64
    }
}
