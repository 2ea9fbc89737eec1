//! Workloads written as YAML, run on one node: shared by the tests of workload kinds.

use kestrel_core::Resources;
use kestrel_sim::manifests::load_manifests;
use kestrel_sim::{SimCluster, Workload};

/// One node `n0` with `gpus` H100s, 64 CPUs and 1 TiB.
pub fn cluster(gpus: u32) -> SimCluster {
    let mut cluster = SimCluster::default();
    let mut n = kestrel_core::NodeSpec::new("n0", Resources::new(64_000, 1 << 40));
    (n.gpus, n.nics) = kestrel_core::GpuTopology::Flat.devices("H100", 81_559, gpus);
    cluster.nodes.push(n);
    cluster
}

/// The workload of one file `w.yaml`, or its error as text.
pub fn read(yaml: &str) -> Result<Workload, String> {
    load_manifests(&[(std::path::PathBuf::from("w.yaml"), yaml.to_string())])
        .map_err(|e| e.to_string())
}
