//! Small zoned CPU clusters and workload files run for a minute: what the inter-pod and
//! volume tests share.

use kestrel_core::{NodeSpec, Resources, HOSTNAME_LABEL};
use kestrel_sim::manifests::load_manifests;
use kestrel_sim::{SimCluster, SimConfig, Simulation, Workload};
use std::collections::BTreeMap;

pub const ZONE: &str = "topology.kubernetes.io/zone";

/// CPU nodes `n0..`, each in the zone given.
pub fn cluster(zones: &[&str]) -> SimCluster {
    let mut cluster = SimCluster::default();
    for (i, zone) in zones.iter().enumerate() {
        let name = format!("n{i}");
        let mut n = NodeSpec::new(&name, Resources::new(16_000, 64 << 30));
        n.labels.insert(HOSTNAME_LABEL.into(), name.clone());
        n.labels.insert(ZONE.into(), zone.to_string());
        cluster.nodes.push(n);
    }
    cluster
}

pub fn read(yaml: &str) -> Result<Workload, String> {
    load_manifests(&[(std::path::PathBuf::from("w.yaml"), yaml.to_string())])
        .map_err(|e| e.to_string())
}

/// Pod name -> node name after the first minute, and the pending pods' reasons.
pub fn run(zones: &[&str], yaml: &str) -> (BTreeMap<String, String>, Vec<String>) {
    let cluster = cluster(zones);
    let workload = read(yaml).unwrap();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(60_000).unwrap();
    let placed = sim
        .placements()
        .into_iter()
        .map(|(pod, node, _)| (pod, node))
        .collect();
    let reasons = sim
        .scheduler()
        .pods()
        .filter_map(|(_, r)| r.pending_reason.as_ref().map(|u| u.to_string()))
        .collect();
    (placed, reasons)
}
