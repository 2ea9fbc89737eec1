//! The openb trace for the packing tests: read from `../shared`; skipped loudly when it is
//! absent, and failed under `CI=true` ([`kestrel_test_support::shared::openb_traces`]).

use kestrel_sim::openb::{load_nodes, load_pods, OpenbNode, OpenbPod};
use std::path::{Path, PathBuf};

pub const SEEDS: [u64; 10] = [42, 43, 44, 45, 46, 47, 48, 49, 50, 51];

pub fn trace_dir() -> Option<PathBuf> {
    kestrel_test_support::shared::openb_traces()
}

/// The GPU node list and one pod list.
pub fn load(dir: &Path, pods: &str) -> (Vec<OpenbNode>, Vec<OpenbPod>) {
    let nodes_path = dir.join("openb_node_list_gpu_node.csv");
    let pods_path = dir.join(pods);
    let nodes = load_nodes(&nodes_path, &std::fs::read_to_string(&nodes_path).unwrap()).unwrap();
    let pods = load_pods(&pods_path, &std::fs::read_to_string(&pods_path).unwrap()).unwrap();
    (nodes, pods)
}
