//! Preemption: within a queue, whole gangs, the fewest jobs, checkpoint-aware choice,
//! minimum runtime, misconfigured queues, FIFO kinds, fair-share turns, and the property
//! that no pod is lost.

use super::*;

#[test]
fn within_queue_preemption_takes_lower_priority_only() {
    let mut s = scheduler(1, 8);
    let mut q = cq("team-a", None, 2, None);
    q.preemption.within_cluster_queue = WithinQueuePreemption::LowerPriority;
    with_queues(&mut s, vec![q]);
    let low = s.submit(pod("team-a", "low", "main", 1, 10), 0);
    let mid = s.submit(pod("team-a", "mid", "main", 1, 50), 0);
    s.schedule(0);
    let same = s.submit(pod("team-a", "same", "main", 1, 10), 1);
    let d = s.schedule(1);
    assert!(d.preemptions.is_empty(), "equal priority does not preempt");
    assert!(reason(&s, same).contains("quota"));
    let high = s.submit(pod("team-a", "high", "main", 1, 100), 2);
    let d = s.schedule(2);
    let victims = evict_all(&mut s, &d);
    assert_eq!(victims, vec![low], "the lowest priority goes");
    s.schedule(3);
    assert_eq!(bound(&s, &[high, mid]), 2);
}

#[test]
fn victims_are_whole_gangs_and_the_fewest_jobs() {
    let mut s = scheduler(1, 4);
    let mut q = cq("team-a", None, 4, None);
    q.preemption.within_cluster_queue = WithinQueuePreemption::LowerPriority;
    with_queues(&mut s, vec![q]);
    s.add_gang(GangSpec {
        namespace: "team-a".into(),
        name: "pair".into(),
        min_member: 2,
        ..Default::default()
    })
    .unwrap();
    let g0 = s.submit(gang_member("team-a", "pair", "g0", "main", 0), 0);
    let g1 = s.submit(gang_member("team-a", "pair", "g1", "main", 0), 0);
    let big = s.submit(pod("team-a", "big", "main", 2, 0), 0);
    s.schedule(0);
    assert_eq!(bound(&s, &[g0, g1, big]), 3);
    // Needs 2 GPUs: the 2-GPU pod (one job) goes, not a pod of the gang.
    let high = s.submit(pod("team-a", "high", "main", 2, 100), 10_000);
    let d = s.schedule(10_000);
    assert_eq!(evict_all(&mut s, &d), vec![big]);
    s.schedule(10_001);
    assert_eq!(bound(&s, &[high]), 1);
    // Needs 4 GPUs: both remaining workloads, the gang whole.
    let all = s.submit(pod("team-a", "all", "main", 4, 200), 20_000);
    let d = s.schedule(20_000);
    let mut victims = evict_all(&mut s, &d);
    victims.sort();
    assert_eq!(victims, vec![g0, g1, high]);
    s.schedule(20_001);
    assert_eq!(bound(&s, &[all]), 1);
    assert_eq!(bound(&s, &[g0, g1]), 0, "no half gang left behind");
}

#[test]
fn checkpoint_aware_choice_loses_least_work() {
    for (order, expected) in [
        (VictimOrder::CheckpointAware, "fresh"),
        (VictimOrder::LowestPriority, "stale"),
    ] {
        let mut s = Scheduler::new(SchedulerConfig {
            victim_order: order,
            ..Default::default()
        });
        s.add_node(node("n0", 2)).unwrap();
        let mut fresh = PodSpec::new(
            "ml",
            "fresh",
            Demand {
                resources: Resources::new(1_000, 1 << 30),
                gpu: GpuRequest::Whole(1),
            },
        );
        fresh.preemption.checkpoint_interval = Some(600_000);
        let mut stale = fresh.clone();
        stale.name = "stale".into();
        stale.preemption.checkpoint_interval = None;
        // "fresh" runs longer but checkpointed 1.5 s ago; "stale" started later (newest
        // first picks it) and never checkpointed.
        let fresh = s.submit(fresh, 0);
        s.schedule(0);
        let stale = s.submit(stale, 1_000);
        s.schedule(1_000);
        let mut high = PodSpec::new(
            "ml",
            "high",
            Demand {
                resources: Resources::new(1_000, 1 << 30),
                gpu: GpuRequest::Whole(1),
            },
        );
        high.priority = 100;
        let high = s.submit(high, 601_500);
        let d = s.schedule(601_500);
        let victims = evict_all(&mut s, &d);
        let name = &s.pod(victims[0]).spec.name;
        assert_eq!(name, expected, "{order:?}");
        if order == VictimOrder::CheckpointAware {
            assert_eq!(d.preemptions[0].victims[0].lost_gpu_ms, 1_500);
        }
        let _ = (stale, fresh);
        s.schedule(601_501);
        assert_eq!(bound(&s, &[high]), 1);
    }
}

#[test]
fn min_runtime_and_never_preempt_are_respected() {
    let mut s = scheduler(1, 1);
    let mut low = PodSpec::new(
        "ml",
        "low",
        Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::Whole(1),
        },
    );
    low.preemption.min_runtime = Some(60_000);
    s.submit(low.clone(), 0);
    s.schedule(0);
    let mut polite = low.clone();
    polite.name = "polite".into();
    polite.priority = 100;
    polite.preemption.never_preempt = true;
    s.submit(polite, 70_000);
    assert!(
        s.schedule(70_000).preemptions.is_empty(),
        "preemptionPolicy Never"
    );
    let mut high = low.clone();
    high.name = "high".into();
    high.priority = 100;
    s.submit(high, 30_000);
    assert!(
        s.schedule(30_000).preemptions.is_empty(),
        "victim too young"
    );
    s.finish(PodId(1)).unwrap();
    let d = s.schedule(60_000);
    assert_eq!(d.preemptions.len(), 1, "old enough now");
}

#[test]
fn misconfigured_queues_say_what_to_fix() {
    let mut s = scheduler(1, 8);
    let p = s.submit(pod("team-a", "p", "main", 1, 0), 0);
    s.schedule(0);
    assert!(reason(&s, p).contains("LocalQueue team-a/main does not exist"));
    s.add_local_queue(LocalQueueSpec {
        namespace: "team-a".into(),
        name: "main".into(),
        cluster_queue: "gpu".into(),
    });
    s.schedule(1);
    assert!(reason(&s, p).contains("ClusterQueue \"gpu\", which does not exist"));
    let mut q = cq("gpu", None, 8, None);
    q.namespace_selector = Some(vec![Requirement {
        key: "team".into(),
        operator: SelectorOperator::In,
        values: vec!["ml".into()],
    }]);
    s.add_cluster_queue(q).unwrap();
    s.schedule(2);
    assert!(reason(&s, p).contains("does not admit namespace team-a"));
    s.set_namespace_labels("team-a", [("team".to_string(), "ml".to_string())].into());
    s.schedule(3);
    assert_eq!(bound(&s, &[p]), 1);
    // A queue without GPU quota refuses GPU pods by name.
    let mut cpu_only = cq("cpu", None, 0, None);
    cpu_only.resource_groups[0]
        .covered
        .retain(|r| r != GPU_RESOURCE);
    cpu_only.resource_groups[0].flavors[0]
        .resources
        .retain(|r| r.name != GPU_RESOURCE);
    s.add_cluster_queue(cpu_only).unwrap();
    s.add_local_queue(LocalQueueSpec {
        namespace: "team-a".into(),
        name: "cpu".into(),
        cluster_queue: "cpu".into(),
    });
    let g = s.submit(pod("team-a", "g", "cpu", 1, 0), 4);
    s.schedule(4);
    assert!(reason(&s, g).contains("has no quota for nvidia.com/gpu"));
    // Bad specs are refused with the field named.
    let mut bad = cq("bad", None, 1, None);
    bad.resource_groups[0].flavors[0].resources[2].lending_limit = Some(5_000);
    let err = s.add_cluster_queue(bad).unwrap_err().to_string();
    assert!(
        err.contains("ClusterQueue bad: field resourceGroups[].flavors[].resources[].lendingLimit"),
        "{err}"
    );
}

#[test]
fn strict_fifo_blocks_behind_its_head_best_effort_does_not() {
    for (strategy, small_runs) in [
        (QueueingStrategy::StrictFifo, false),
        (QueueingStrategy::BestEffortFifo, true),
    ] {
        let mut s = scheduler(1, 8);
        let mut q = cq("team-a", None, 4, None);
        q.queueing_strategy = strategy;
        with_queues(&mut s, vec![q]);
        s.submit(pod("team-a", "run", "main", 2, 0), 0);
        s.schedule(0);
        let big = s.submit(pod("team-a", "big", "main", 4, 0), 1);
        let small = s.submit(pod("team-a", "small", "main", 1, 0), 2);
        s.schedule(2);
        assert_eq!(bound(&s, &[big]), 0);
        assert_eq!(bound(&s, &[small]) == 1, small_runs, "{strategy:?}");
        if !small_runs {
            assert!(reason(&s, small).contains("behind the head of StrictFIFO"));
        }
    }
}

#[test]
fn quota_admits_nothing_the_nodes_cannot_hold() {
    // 8 GPUs of quota, but two nodes of 4: an 8-GPU pod cannot be placed.
    let mut s = scheduler(2, 4);
    with_queues(&mut s, vec![cq("team-a", None, 8, None)]);
    let big = s.submit(pod("team-a", "big", "main", 8, 0), 0);
    let small = s.submit(pod("team-a", "small", "main", 2, 0), 1);
    s.schedule(1);
    assert_eq!(bound(&s, &[big]), 0);
    assert!(s.pod(big).pending_reason.as_ref().unwrap().is_capacity());
    assert_eq!(
        bound(&s, &[small]),
        1,
        "the unplaceable head does not block the queue"
    );
    assert_eq!(gpu_used(&s, "team-a"), 2, "only what is placed is charged");
}

#[test]
fn borrowers_take_turns_by_fair_share() {
    let mut s = scheduler(2, 8);
    let mut a = cq("team-a", Some("org"), 2, None);
    a.fair_weight = 1.0;
    let mut b = cq("team-b", Some("org"), 2, None);
    b.fair_weight = 3.0;
    let idle = cq("idle", Some("org"), 12, None);
    with_queues(&mut s, vec![a, b, idle]);
    for i in 0..16 {
        s.submit(pod("team-a", &format!("a{i}"), "main", 1, 0), 0);
        s.submit(pod("team-b", &format!("b{i}"), "main", 1, 0), 0);
    }
    s.schedule(0);
    // 12 idle GPUs lent 1:3.
    assert_eq!(gpu_used(&s, "team-a"), 2 + 3);
    assert_eq!(gpu_used(&s, "team-b"), 2 + 9);
}

#[test]
fn capacity_preemption_for_unqueued_pods_by_priority() {
    let mut s = scheduler(1, 2);
    let mut low = PodSpec::new(
        "web",
        "low",
        Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::Whole(2),
        },
    );
    low.preemption.checkpoint_grace = Some(30_000);
    let low = s.submit(low, 0);
    s.schedule(0);
    let mut high = s.pod(low).spec.clone();
    high.name = "high".into();
    high.priority = 1000;
    high.preemption.checkpoint_grace = None;
    let high = s.submit(high, 5);
    let d = s.schedule(5);
    assert_eq!(d.preemptions.len(), 1);
    let v = &d.preemptions[0].victims[0];
    assert_eq!((v.pod, v.checkpoint_grace), (low, Some(30_000)));
    assert!(reason(&s, high).contains("waiting for 1 preempted pod(s) to leave"));
    // Nothing else is preempted while victims leave.
    assert!(s.schedule(6).preemptions.is_empty());
    s.evict(low).unwrap();
    s.schedule(7);
    assert_eq!(bound(&s, &[high]), 1);
    assert_eq!(
        s.pod(low).phase,
        PodPhase::Pending,
        "the victim waits again"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever arrives and ends, no queue exceeds nominal + borrowing limit (nominal
    /// alone, out of a cohort), a cohort never lends more than its queues' nominal quota,
    /// and no pod is lost: usage recomputed from the bound pods by the invariant checker,
    /// every queue checked at every step, not the engine's own counters.
    #[test]
    fn quota_limits_always_hold(
        ops in proptest::collection::vec((0u8..4, 0u8..3, 1u32..5, 0i32..3), 1..120),
        limits in proptest::collection::vec((1i64..8, proptest::option::of(0i64..6)), 3),
    ) {
        let mut s = scheduler(4, 8);
        let mut queues = Vec::new();
        for (i, (nominal, limit)) in limits.iter().enumerate() {
            let mut q = cq(&format!("q{i}"), Some("org"), *nominal, *limit);
            q.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
            q.preemption.within_cluster_queue = WithinQueuePreemption::LowerPriority;
            queues.push(q);
        }
        with_queues(&mut s, queues);
        let mut live: Vec<PodId> = Vec::new();
        let mut before = Snapshot::from_engine(&s, &[]);
        for (t, (op, q, gpus, prio)) in ops.into_iter().enumerate() {
            let now = t as u64 * 1000;
            let mut left = std::collections::BTreeSet::new();
            match op {
                0 | 1 => {
                    let id = s.submit(pod(&format!("q{q}"), &format!("p{t}"), "main", gpus, prio), now);
                    live.push(id);
                }
                2 if !live.is_empty() => {
                    let id = live.remove(t % live.len());
                    left.insert(s.pod(id).spec.key());
                    s.finish(id).unwrap();
                }
                _ => {}
            }
            let d = s.schedule(now);
            evict_all(&mut s, &d);
            let after = Snapshot::from_engine(&s, &[]);
            prop_assert_eq!(after.queues.len(), 3);
            let mut broken = invariants::check(&after).err().unwrap_or_default();
            broken.extend(invariants::check_transition(&before, &after, &left).err().unwrap_or_default());
            prop_assert!(broken.is_empty(), "step {}:\n{}", t, invariants::describe(&broken));
            before = after;
            let counted = s.pods().filter(|(_, p)| p.phase != PodPhase::Gone).count();
            prop_assert_eq!(counted, live.len(), "no pod lost");
            prop_assert_eq!(s.pending_count(), s.pods().filter(|(_, p)| p.phase == PodPhase::Pending).count());
        }
    }

    /// Queueing hints (a pod's end wakes only the parked workloads it may help) decide as
    /// waking them all does, with quota, borrowing, reclaim and priority preemption at
    /// play, in a cohort and in a queue of its own.
    #[test]
    fn queueing_hints_give_the_same_decisions_with_queues(
        ops in proptest::collection::vec((0u8..4, 0u8..4, 1u32..5, 0i32..3), 1..120),
        limits in proptest::collection::vec((1i64..8, proptest::option::of(0i64..6)), 4),
    ) {
        let run = |hints: bool| {
            let mut s = scheduler(4, 8);
            s.set_queueing_hints(hints);
            let queues = limits
                .iter()
                .enumerate()
                .map(|(i, (nominal, limit))| {
                    let cohort = (i < 3).then_some("org");
                    let mut q = cq(&format!("q{i}"), cohort, *nominal, *limit);
                    q.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
                    q.preemption.within_cluster_queue = WithinQueuePreemption::LowerPriority;
                    q
                })
                .collect();
            with_queues(&mut s, queues);
            let mut live: Vec<PodId> = Vec::new();
            let mut log = Vec::new();
            for (t, (op, q, gpus, prio)) in ops.iter().enumerate() {
                let now = t as u64 * 1000;
                match op {
                    0 | 1 => live.push(s.submit(pod(&format!("q{q}"), &format!("p{t}"), "main", *gpus, *prio), now)),
                    2 if !live.is_empty() => {
                        let id = live.remove(t % live.len());
                        s.finish(id).unwrap();
                    }
                    _ => {}
                }
                let d = s.schedule(now);
                log.push(format!("{:?} {:?}", d.bindings, d.preemptions));
                evict_all(&mut s, &d);
            }
            log
        };
        prop_assert_eq!(run(false), run(true));
    }
}
