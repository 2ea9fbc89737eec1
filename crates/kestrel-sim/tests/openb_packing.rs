//! The simulator's validation: the FGD packing experiment on the openb default mix must
//! reproduce the published Random (87.5%) and BestFit (93.1%) figures within 0.5 points.

use kestrel_core::Policy;
use kestrel_sim::openb::{load_nodes, load_pods, packing_summary, OpenbNode, OpenbPod};
use std::path::PathBuf;

fn trace_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/openb");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("skipping: {} is absent", dir.display());
        None
    }
}

fn load(dir: &std::path::Path, pods: &str) -> (Vec<OpenbNode>, Vec<OpenbPod>) {
    let nodes_path = dir.join("openb_node_list_gpu_node.csv");
    let pods_path = dir.join(pods);
    let nodes = load_nodes(&nodes_path, &std::fs::read_to_string(&nodes_path).unwrap()).unwrap();
    let pods = load_pods(&pods_path, &std::fs::read_to_string(&pods_path).unwrap()).unwrap();
    (nodes, pods)
}

const SEEDS: [u64; 10] = [42, 43, 44, 45, 46, 47, 48, 49, 50, 51];

#[test]
fn random_and_bestfit_reproduce_the_published_figures() {
    let Some(dir) = trace_dir() else { return };
    let (nodes, pods) = load(&dir, "openb_pod_list_default.csv");
    assert_eq!(nodes.len(), 1213);
    assert_eq!(nodes.iter().map(|n| n.gpus).sum::<u32>(), 6212);
    let mut failures = Vec::new();
    for (policy, published) in [(Policy::Random, 0.875), (Policy::BestFit, 0.931)] {
        let summary = packing_summary(&nodes, &pods, policy, &SEEDS);
        let got = summary.mean_allocation_at_130;
        eprintln!(
            "{policy}: {:.2}% at 130% (published {:.1}%)",
            100.0 * got,
            100.0 * published
        );
        assert!(summary.mean_allocation_at_100 <= got);
        if (got - published).abs() > 0.005 {
            failures.push(format!(
                "{policy}: {:.2}% is not within 0.5 points of {:.1}%",
                100.0 * got,
                100.0 * published
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}
