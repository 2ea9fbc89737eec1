//! The simulator's validation: the FGD packing experiment on the openb default mix must
//! reproduce the published Random (87.5%) and BestFit (93.1%) figures within 0.5 points.

mod common;

use common::{load, trace_dir, SEEDS};
use kestrel_core::Policy;
use kestrel_sim::openb::packing_summary;

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
