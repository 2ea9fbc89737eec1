//! Waking parked pods when a pod ends: in queue order, each only if the room freed may
//! still hold it in its turn. No pod is left waiting while room for it is free, and the
//! decisions are those of waking every parked pod (queueing hints off).

use kestrel_core::*;
use std::collections::HashMap;

use kestrel_test_support::engine;

fn node(name: &str, gpus: u32, cpu_milli: i64) -> NodeSpec {
    engine::node(name).cpu_milli(cpu_milli).gpus(gpus).build()
}

/// Pods of priority 10 run; those waiting have less, so none preempts.
fn pod(name: &str, priority: i32, gpus: u32, cpu_milli: i64) -> PodSpec {
    engine::pod("team", name)
        .cpu_milli(cpu_milli)
        .gpus(gpus)
        .priority(priority)
        .build()
}

enum Step {
    Submit(Box<PodSpec>),
    Schedule,
    Finish(&'static str),
}

/// Plays the steps; returns the scheduler, pod ids by name and the bindings in order as
/// `pod@node`.
fn play(
    policy: Policy,
    nodes: &[NodeSpec],
    steps: Vec<Step>,
    hints: bool,
) -> (Scheduler, HashMap<String, PodId>, Vec<String>) {
    let mut s = Scheduler::new(SchedulerConfig {
        policy,
        ..Default::default()
    });
    s.set_queueing_hints(hints);
    for n in nodes {
        s.add_node(n.clone()).unwrap();
    }
    let mut ids = HashMap::new();
    let mut bindings = Vec::new();
    for (t, step) in steps.into_iter().enumerate() {
        match step {
            Step::Submit(spec) => {
                let name = spec.name.clone();
                ids.insert(name, s.submit(*spec, t as u64));
            }
            Step::Schedule => {
                for b in s.schedule(t as u64).bindings {
                    let node = &s.cluster().node(b.node).spec.name;
                    bindings.push(format!("{}@{node}", s.pod(b.pod).spec.name));
                }
            }
            Step::Finish(name) => s.finish(ids[name]).unwrap(),
        }
    }
    (s, ids, bindings)
}

/// Plays the steps with queueing hints on, checks that waking every parked pod decides
/// the same, and returns the bindings.
fn bindings(policy: Policy, nodes: &[NodeSpec], steps: impl Fn() -> Vec<Step>) -> Vec<String> {
    let (_, _, with_hints) = play(policy, nodes, steps(), true);
    let (_, _, all_woken) = play(policy, nodes, steps(), false);
    assert_eq!(with_hints, all_woken, "policy {policy}");
    with_hints
}

#[test]
fn two_pods_that_fit_the_freed_room_one_after_the_other_both_start() {
    let nodes = [node("n1", 2, 64_000)];
    let steps = || {
        vec![
            Step::Submit(Box::new(pod("running", 10, 2, 1000))),
            Step::Schedule,
            Step::Submit(Box::new(pod("first", 5, 1, 1000))),
            Step::Submit(Box::new(pod("second", 0, 1, 1000))),
            Step::Submit(Box::new(pod("too-big", 0, 2, 1000))),
            Step::Schedule,
            Step::Finish("running"),
            Step::Schedule,
        ]
    };
    for policy in Policy::ALL {
        assert_eq!(
            bindings(policy, &nodes, steps),
            ["running@n1", "first@n1", "second@n1"]
        );
    }
}

#[test]
fn a_pod_short_of_cpu_where_a_gpu_freed_starts_when_the_cpu_frees() {
    let nodes = [node("n1", 2, 16_000)];
    let steps = || {
        vec![
            Step::Submit(Box::new(pod("gpu-job", 10, 1, 1000))),
            Step::Submit(Box::new(pod("cpu-job", 10, 0, 14_000))),
            Step::Schedule,
            Step::Submit(Box::new(pod("waiting", 0, 1, 8000))),
            Step::Schedule,
            // A GPU more, but still 2 cpu free of the 8 it needs.
            Step::Finish("gpu-job"),
            Step::Schedule,
            Step::Finish("cpu-job"),
            Step::Schedule,
        ]
    };
    for policy in Policy::ALL {
        assert_eq!(
            bindings(policy, &nodes, steps),
            ["gpu-job@n1", "cpu-job@n1", "waiting@n1"]
        );
    }
}

#[test]
fn a_pod_the_room_was_taken_from_starts_at_the_next_end() {
    let nodes = [node("n1", 1, 64_000), node("n2", 1, 64_000)];
    let steps = || {
        vec![
            Step::Submit(Box::new(pod("a", 10, 1, 1000))),
            Step::Submit(Box::new(pod("b", 10, 1, 1000))),
            Step::Schedule,
            Step::Submit(Box::new(pod("high", 9, 1, 1000))),
            Step::Submit(Box::new(pod("low", 1, 1, 1000))),
            Step::Schedule,
            Step::Finish("a"),
            Step::Schedule,
            Step::Schedule,
            Step::Finish("b"),
            Step::Schedule,
        ]
    };
    for policy in Policy::ALL {
        let placed = bindings(policy, &nodes, steps);
        assert_eq!(placed.len(), 4, "{placed:?}");
        assert!(placed[2].starts_with("high@"), "{placed:?}");
        assert!(placed[3].starts_with("low@"), "{placed:?}");
    }
}

#[test]
fn a_pod_the_freed_room_cannot_hold_does_not_stop_the_ones_behind_it() {
    let nodes = [node("n1", 2, 16_000)];
    let steps = || {
        vec![
            Step::Submit(Box::new(pod("running", 10, 1, 8000))),
            Step::Submit(Box::new(pod("stays", 10, 1, 8000))),
            Step::Schedule,
            Step::Submit(Box::new(pod("needs-more-cpu", 9, 1, 12_000))),
            Step::Submit(Box::new(pod("one-gpu", 5, 1, 4000))),
            Step::Submit(Box::new(pod("cpu-only", 1, 0, 4000))),
            Step::Schedule,
            Step::Finish("running"),
            Step::Schedule,
        ]
    };
    for policy in Policy::ALL {
        assert_eq!(
            bindings(policy, &nodes, steps),
            ["running@n1", "stays@n1", "one-gpu@n1", "cpu-only@n1"]
        );
    }
}

/// Two nodes free room in one cycle: wherever the policy puts the first pod, the second
/// is tried on what is left, as when every parked pod is woken.
#[test]
fn ends_on_two_nodes_in_one_cycle_are_shared_as_the_policy_places() {
    let nodes = [node("n1", 2, 64_000), node("n2", 2, 64_000)];
    let steps = || {
        vec![
            Step::Submit(Box::new(pod("n1-a", 10, 1, 1000))),
            Step::Submit(Box::new(pod("n1-b", 10, 1, 1000))),
            Step::Submit(Box::new(pod("n2-a", 10, 2, 1000))),
            Step::Schedule,
            Step::Submit(Box::new(pod("one", 5, 1, 1000))),
            Step::Submit(Box::new(pod("two", 4, 2, 1000))),
            Step::Submit(Box::new(pod("another-one", 3, 1, 1000))),
            Step::Schedule,
            Step::Finish("n1-a"),
            Step::Finish("n2-a"),
            Step::Schedule,
        ]
    };
    for policy in Policy::ALL {
        let placed = bindings(policy, &nodes, steps);
        assert!(placed.iter().any(|b| b.starts_with("one@")), "{placed:?}");
    }
}

/// A full cluster with many pods alike waiting: each end starts the first of them in
/// queue order, and the rest wait for the next.
#[test]
fn each_end_on_a_full_cluster_starts_the_next_pod_in_queue_order() {
    let nodes: Vec<NodeSpec> = (0..4).map(|i| node(&format!("n{i}"), 2, 64_000)).collect();
    let mut steps = Vec::new();
    for i in 0..8 {
        steps.push(Step::Submit(Box::new(pod(
            &format!("running-{i}"),
            0,
            1,
            1000,
        ))));
    }
    steps.push(Step::Schedule);
    let waiting: Vec<String> = (0..20).map(|i| format!("waiting-{i:02}")).collect();
    for name in &waiting {
        steps.push(Step::Submit(Box::new(pod(name, 0, 1, 1000))));
    }
    steps.push(Step::Schedule);
    let (mut s, ids, placed) = play(Policy::Kestrel, &nodes, steps, true);
    assert_eq!(placed.len(), 8);
    for (i, name) in waiting.iter().take(8).enumerate() {
        s.finish(ids[&format!("running-{i}")]).unwrap();
        let d = s.schedule(100 + i as u64);
        let started: Vec<&str> = d
            .bindings
            .iter()
            .map(|b| s.pod(b.pod).spec.name.as_str())
            .collect();
        assert_eq!(started, [name.as_str()]);
    }
    assert_eq!(s.pending_count(), 12);
    for id in s.pending() {
        assert!(s.pod(id).pending_reason.is_some());
    }
}
