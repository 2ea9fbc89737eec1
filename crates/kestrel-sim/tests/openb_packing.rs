//! The simulator's validation: the FGD packing experiment on the openb default mix must
//! reproduce the published Random (87.5%) and BestFit (93.1%) figures within 0.5 points.

mod common;

use common::{load, trace_dir, SEEDS};
use kestrel_core::Policy;
use kestrel_sim::openb::{inflate_and_shuffle, packing_run_observed, packing_summary};

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

/// The cluster state of whole-trace runs, through the invariant checker (recomputed from
/// the bound pods, not from the rates): no node over its cpu, memory or GPUs, no device
/// handed out twice, no share past a whole device. Checked every 500 arrivals and at the
/// end, for one seed of each policy.
#[test]
fn the_openb_trace_never_overcommits_the_cluster() {
    let Some(dir) = trace_dir() else { return };
    let (nodes, pods) = load(&dir, "openb_pod_list_default.csv");
    let capacity: u64 = nodes.iter().map(|n| 1000 * u64::from(n.gpus)).sum();
    let arrivals = inflate_and_shuffle(&pods, capacity, 42).len();
    for policy in Policy::ALL {
        let mut step = 0usize;
        let mut checked = 0;
        let run = packing_run_observed(&nodes, &pods, policy, 42, |s| {
            step += 1;
            if step.is_multiple_of(500) || step == arrivals {
                check_state(s);
                checked += 1;
            }
        });
        assert_eq!(run.pods_arrived, arrivals);
        assert_eq!(checked, arrivals.div_ceil(500), "{policy}");
    }
}

fn check_state(s: &kestrel_core::Scheduler) {
    let mut snapshot = kestrel_invariants::Snapshot::from_engine(s, &[]);
    // Inflated runs sample pods with replacement: names repeat.
    for (i, p) in snapshot.pods.iter_mut().enumerate() {
        p.key = format!("{}#{i}", p.key);
    }
    let bound = snapshot.pods.iter().filter(|p| p.node.is_some()).count();
    assert!(bound > 0);
    if let Err(v) = kestrel_invariants::check(&snapshot) {
        panic!("{}", kestrel_invariants::describe(&v));
    }
}
