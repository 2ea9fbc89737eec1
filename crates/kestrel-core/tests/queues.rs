//! Team queues: quota, borrowing, reclaim, fair share, preemption with whole gangs and
//! checkpoint-aware victim choice.

use kestrel_core::*;
use kestrel_invariants::{self as invariants, Snapshot};
use proptest::prelude::*;

fn node(name: &str, gpus: u32) -> NodeSpec {
    let mut n = NodeSpec::new(name, Resources::new(64_000, 512 << 30));
    (n.gpus, n.nics) = GpuTopology::Flat.devices("H100", 81_559, gpus);
    n
}

fn pod(ns: &str, name: &str, queue: &str, gpus: u32, priority: i32) -> PodSpec {
    let mut p = PodSpec::new(
        ns,
        name,
        Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::Whole(gpus),
        },
    );
    p.queue = Some(queue.to_string());
    p.priority = priority;
    p
}

fn quota(gpus: i64, borrowing_limit: Option<i64>) -> ResourceGroup {
    ResourceGroup {
        covered: vec!["cpu".into(), "memory".into(), GPU_RESOURCE.into()],
        flavors: vec![FlavorQuotas {
            flavor: "default".into(),
            resources: vec![
                ResourceQuota {
                    name: "cpu".into(),
                    nominal: 1_000_000,
                    borrowing_limit: None,
                    lending_limit: None,
                },
                ResourceQuota {
                    name: "memory".into(),
                    nominal: 1 << 50,
                    borrowing_limit: None,
                    lending_limit: None,
                },
                ResourceQuota {
                    name: GPU_RESOURCE.into(),
                    nominal: gpus * 1000,
                    borrowing_limit: borrowing_limit.map(|b| b * 1000),
                    lending_limit: None,
                },
            ],
        }],
    }
}

fn cq(
    name: &str,
    cohort: Option<&str>,
    gpus: i64,
    borrowing_limit: Option<i64>,
) -> ClusterQueueSpec {
    ClusterQueueSpec {
        name: name.into(),
        cohort: cohort.map(String::from),
        resource_groups: vec![quota(gpus, borrowing_limit)],
        fair_weight: 1.0,
        ..Default::default()
    }
}

fn scheduler(nodes: u32, gpus_per_node: u32) -> Scheduler {
    let mut s = Scheduler::new(SchedulerConfig::default());
    for i in 0..nodes {
        s.add_node(node(&format!("n{i}"), gpus_per_node)).unwrap();
    }
    s
}

fn with_queues(s: &mut Scheduler, queues: Vec<ClusterQueueSpec>) {
    for q in queues {
        let name = q.name.clone();
        s.add_cluster_queue(q).unwrap();
        s.add_local_queue(LocalQueueSpec {
            namespace: name.clone(),
            name: "main".into(),
            cluster_queue: name,
        });
    }
}

fn bound(s: &Scheduler, ids: &[PodId]) -> usize {
    ids.iter()
        .filter(|&&id| matches!(s.pod(id).phase, PodPhase::Bound { .. }))
        .count()
}

fn reason(s: &Scheduler, id: PodId) -> String {
    s.pod(id)
        .pending_reason
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default()
}

fn gpu_used(s: &Scheduler, name: &str) -> i64 {
    let (id, _) = s.cluster_queues().find(|(_, q)| q.name == name).unwrap();
    s.queue_usage(id)
        .iter()
        .filter(|u| u.resource == GPU_RESOURCE)
        .map(|u| u.used)
        .sum::<i64>()
        / 1000
}

/// Carries out preemptions at once, as a driver would after the grace period.
fn evict_all(s: &mut Scheduler, d: &Decisions) -> Vec<PodId> {
    let victims: Vec<PodId> = d
        .preemptions
        .iter()
        .flat_map(|p| p.victims.iter().map(|v| v.pod))
        .collect();
    for &v in &victims {
        s.evict(v).unwrap();
    }
    victims
}

#[test]
fn nominal_quota_holds_without_a_cohort() {
    let mut s = scheduler(2, 8);
    with_queues(&mut s, vec![cq("team-a", None, 4, None)]);
    let ids: Vec<PodId> = (0..6)
        .map(|i| s.submit(pod("team-a", &format!("p{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &ids), 4);
    assert_eq!(gpu_used(&s, "team-a"), 4);
    let why = reason(&s, ids[5]);
    assert!(
        why.contains("quota: ClusterQueue team-a flavor default needs 1 more nvidia.com/gpu: 4 in use of nominal 4"),
        "{why}"
    );
    let r = s.pod(ids[5]).pending_reason.clone().unwrap();
    assert!(!r.is_capacity(), "quota is not a capacity problem");
    // A finished pod returns its quota and the next one starts.
    s.finish(ids[0]).unwrap();
    s.schedule(1);
    assert_eq!(bound(&s, &ids), 4);
    assert_eq!(gpu_used(&s, "team-a"), 4);
}

#[test]
fn idle_quota_is_borrowed_up_to_the_borrowing_limit() {
    let mut s = scheduler(2, 8);
    with_queues(
        &mut s,
        vec![
            cq("team-a", Some("org"), 4, Some(2)),
            cq("team-b", Some("org"), 4, None),
        ],
    );
    let ids: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("p{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &ids), 6, "4 nominal + 2 borrowed");
    let why = reason(&s, ids[7]);
    assert!(why.contains("borrowing up to 6"), "{why}");
}

#[test]
fn lent_quota_is_reclaimed_by_preempting_the_borrower() {
    let mut s = scheduler(1, 8);
    let mut b = cq("team-b", Some("org"), 4, None);
    b.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
    with_queues(&mut s, vec![cq("team-a", Some("org"), 4, None), b]);
    let a: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 100), 0))
        .collect();
    s.schedule(0);
    assert_eq!(
        bound(&s, &a),
        8,
        "team-a borrows all of team-b's idle quota"
    );
    let b_ids: Vec<PodId> = (0..3)
        .map(|i| s.submit(pod("team-b", &format!("b{i}"), "main", 1, 0), 1_000))
        .collect();
    // One preemptor at a time per queue: the room it makes is its own.
    let mut victims = Vec::new();
    for t in 0..6 {
        let d = s.schedule(1_000 + t);
        assert!(d.preemptions.len() <= 1);
        victims.extend(evict_all(&mut s, &d));
    }
    assert_eq!(victims.len(), 3, "one victim per team-b pod");
    assert!(victims.iter().all(|v| a.contains(v)));
    assert_eq!(bound(&s, &b_ids), 3, "team-b got its quota back");
    assert_eq!(gpu_used(&s, "team-a"), 5);
    // The evicted borrowers wait; team-a may not take back what team-b uses.
    let waiting = a
        .iter()
        .filter(|&&p| s.pod(p).phase == PodPhase::Pending)
        .count();
    assert_eq!(waiting, 3);
}

/// Team-a borrows all of team-b's idle quota on one 8-GPU node; then team-b wants 3 GPUs
/// of its nominal 4 back. Returns how many team-a pods were preempted, and how many of
/// team-b's run, after a few cycles.
fn reclaim_from_a_borrower(borrower_keeps_borrowed_quota: bool) -> (usize, usize) {
    let mut s = scheduler(1, 8);
    let mut a = cq("team-a", Some("org"), 4, None);
    a.keeps_borrowed_quota = borrower_keeps_borrowed_quota;
    let mut b = cq("team-b", Some("org"), 4, None);
    b.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
    b.preemption.borrow_within_cohort = Some(BorrowWithinCohort {
        max_priority_threshold: None,
    });
    with_queues(&mut s, vec![a, b]);
    let a_ids: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &a_ids), 8);
    // Team-b's pods are of higher priority too: neither reclaim nor borrowing over
    // lower priority may take a non-reclaimable queue's work.
    let b_ids: Vec<PodId> = (0..3)
        .map(|i| s.submit(pod("team-b", &format!("b{i}"), "main", 1, 100), 1_000))
        .collect();
    let mut victims = Vec::new();
    for t in 0..6 {
        let d = s.schedule(1_000 + t);
        victims.extend(evict_all(&mut s, &d));
    }
    (victims.len(), bound(&s, &b_ids))
}

#[test]
fn a_queue_that_keeps_what_it_borrows_is_not_reclaimed_from() {
    assert_eq!(reclaim_from_a_borrower(false), (3, 3));
    assert_eq!(reclaim_from_a_borrower(true), (0, 0));
}

#[test]
fn a_queue_that_keeps_what_it_borrows_lends_it_back_when_its_work_ends() {
    let mut s = scheduler(1, 8);
    let mut a = cq("team-a", Some("org"), 4, None);
    a.keeps_borrowed_quota = true;
    let mut b = cq("team-b", Some("org"), 4, None);
    b.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
    with_queues(&mut s, vec![a, b]);
    let a_ids: Vec<PodId> = (0..8)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 0), 0))
        .collect();
    s.schedule(0);
    let b0 = s.submit(pod("team-b", "b0", "main", 1, 0), 1_000);
    assert!(s.schedule(1_000).preemptions.is_empty());
    assert_eq!(bound(&s, &[b0]), 0);
    // A borrowed workload of team-a ends: team-b takes its room.
    s.finish(a_ids[7]).unwrap();
    s.schedule(2_000);
    assert_eq!(bound(&s, &[b0]), 1);
    assert_eq!(gpu_used(&s, "team-a"), 7);
}

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

fn gang_member(ns: &str, gang: &str, name: &str, queue: &str, priority: i32) -> PodSpec {
    let mut p = pod(ns, name, queue, 1, priority);
    p.gang = Some(GangMembership {
        gang: gang.into(),
        role: None,
        rank: None,
    });
    p
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

#[test]
fn borrowers_wait_while_a_lender_takes_its_quota_back() {
    // Two nodes: team-a borrows all 8 GPUs of team-b's idle quota on one node.
    let mut s = scheduler(2, 8);
    let mut b = cq("team-b", Some("org"), 8, None);
    b.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
    with_queues(&mut s, vec![cq("team-a", Some("org"), 8, None), b]);
    let a: Vec<PodId> = (0..16)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 100), 0))
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &a), 16);
    // team-b wants 4 GPUs of its quota back: four victims, on their way out (their grace).
    let b0 = s.submit(pod("team-b", "b0", "main", 4, 0), 1_000);
    let d = s.schedule(1_000);
    assert_eq!(d.preemptions.len(), 1);
    let victims: Vec<PodId> = d.preemptions[0].victims.iter().map(|v| v.pod).collect();
    assert_eq!(victims.len(), 4);
    // Meanwhile a team-a pod that would borrow arrives and two other team-a pods end:
    // the quota they free is not lent again while team-b reclaims.
    let late = s.submit(pod("team-a", "late", "main", 1, 100), 1_001);
    for &p in a.iter().filter(|p| !victims.contains(p)).take(2) {
        s.finish(p).unwrap();
    }
    let d = s.schedule(1_002);
    assert!(
        !d.bindings.iter().any(|b| b.pod == late),
        "{:?}",
        d.bindings
    );
    assert!(
        reason(&s, late).contains("ClusterQueue team-b of its cohort is taking back its quota"),
        "{}",
        reason(&s, late)
    );
    // The victims leave: team-b's pod starts, then team-a may borrow again.
    for v in victims {
        s.evict(v).unwrap();
    }
    s.schedule(1_003);
    assert_eq!(bound(&s, &[b0]), 1);
    s.schedule(1_004);
    // What is left of the cohort is lent again, first to team-a's earlier pods (the
    // evicted ones); late waits for quota, no longer for the reclaim.
    assert_eq!(gpu_used(&s, "team-a") + gpu_used(&s, "team-b"), 16);
    assert!(
        reason(&s, late).contains("cohort can lend 0"),
        "{}",
        reason(&s, late)
    );
}

/// Team-a borrows for an hour, then team-a and team-b both want the one GPU left to
/// borrow: which gets it, with fair share counting history (`half_life`) or not (0).
fn last_gpu_after_a_borrowing_hour(half_life: u64) -> (usize, usize) {
    let mut s = Scheduler::new(SchedulerConfig {
        fair_share_half_life: half_life,
        ..Default::default()
    });
    s.add_node(node("n0", 8)).unwrap();
    with_queues(
        &mut s,
        vec![
            cq("team-a", Some("org"), 2, None),
            cq("team-b", Some("org"), 2, None),
            cq("team-c", Some("org"), 4, None),
        ],
    );
    // team-c runs 3 of its 4: one GPU of its quota stays lendable.
    for i in 0..3 {
        s.submit(pod("team-c", &format!("c{i}"), "main", 1, 0), 0);
    }
    let early: Vec<PodId> = (0..5)
        .map(|i| s.submit(pod("team-a", &format!("early{i}"), "main", 1, 0), 0))
        .collect();
    for t in [0, 1_800_000, 3_600_000] {
        s.schedule(t);
    }
    assert_eq!(bound(&s, &early), 5, "team-a borrowed 3 for an hour");
    for p in early {
        s.finish(p).unwrap();
    }
    let a: Vec<PodId> = (0..3)
        .map(|i| s.submit(pod("team-a", &format!("a{i}"), "main", 1, 0), 3_600_001))
        .collect();
    let b: Vec<PodId> = (0..3)
        .map(|i| s.submit(pod("team-b", &format!("b{i}"), "main", 1, 0), 3_600_001))
        .collect();
    s.schedule(3_600_002);
    (bound(&s, &a), bound(&s, &b))
}

#[test]
fn fair_share_can_count_recent_borrowing() {
    // Borrowing now alone: a tie, so arrival order gives the GPU to team-a.
    assert_eq!(last_gpu_after_a_borrowing_hour(0), (3, 2));
    // With an hour's half-life, team-a's recent borrowing puts team-b first.
    assert_eq!(last_gpu_after_a_borrowing_hour(3_600_000), (2, 3));
}

#[test]
fn capacity_preemption_spares_other_queues_inside_their_nominal_quota() {
    // Quota admits a's new pod, but the node is full: b's work inside b's nominal quota is
    // not a victim (b would take it straight back); a lower-priority pod outside any queue is.
    let mut s = scheduler(1, 8);
    with_queues(&mut s, vec![cq("a", None, 4, None), cq("b", None, 4, None)]);
    let b_work = s.submit(pod("b", "b-work", "main", 4, 0), 0);
    let a_work = s.submit(pod("a", "a-work", "main", 2, 0), 0);
    let mut web = pod("web", "web", "main", 2, 50);
    web.queue = None;
    let web = s.submit(web, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &[b_work, a_work, web]), 3);

    let urgent = s.submit(pod("a", "urgent", "main", 2, 100), 10);
    let d = s.schedule(10);
    let victims: Vec<PodId> = d
        .preemptions
        .iter()
        .flat_map(|p| p.victims.iter().map(|v| v.pod))
        .collect();
    assert_eq!(victims, vec![web], "{:?}", d.preemptions);
    evict_all(&mut s, &d);
    s.schedule(11);
    assert_eq!(bound(&s, &[urgent, b_work, a_work]), 3);

    // With nothing outside a queue to take, the next one of a's waits for capacity.
    let next = s.submit(pod("a", "next", "main", 2, 100), 20);
    let d = s.schedule(20);
    let victims: Vec<PodId> = d
        .preemptions
        .iter()
        .flat_map(|p| p.victims.iter().map(|v| v.pod))
        .collect();
    assert!(!victims.contains(&b_work), "{:?}", d.preemptions);
    assert_eq!(bound(&s, &[b_work]), 1);
    assert_eq!(bound(&s, &[next]), 0);
}

#[test]
fn victims_that_break_a_disruption_budget_go_last() {
    let mut s = scheduler(1, 2);
    let unqueued = |name: &str, app: &str, priority: i32| {
        let mut p = pod("web", name, "main", 1, priority);
        p.queue = None;
        p.labels.insert("app".into(), app.into());
        p
    };
    let batch = s.submit(unqueued("batch", "batch", 0), 0);
    s.schedule(0);
    // Newer, so it would be the victim without its budget.
    let db = s.submit(unqueued("db", "db", 0), 10);
    s.schedule(10);
    s.set_disruption_budget(DisruptionBudget {
        namespace: "web".into(),
        name: "db".into(),
        selector: Some(vec![Requirement {
            key: "app".into(),
            operator: SelectorOperator::In,
            values: vec!["db".into()],
        }]),
        limit: DisruptionLimit::MinAvailable(IntOrPercent::Int(1)),
    });
    let urgent = s.submit(unqueued("urgent", "api", 100), 20);
    let d = s.schedule(20);
    assert_eq!(evict_all(&mut s, &d), vec![batch]);
    s.schedule(21);
    assert_eq!(bound(&s, &[urgent, db]), 2);

    // Only the budget's pod is left to take: it is evicted all the same, as kube-scheduler
    // does when nothing else makes room.
    let second = s.submit(unqueued("second", "api", 100), 30);
    let d = s.schedule(30);
    assert_eq!(evict_all(&mut s, &d), vec![db]);
    s.schedule(31);
    assert_eq!(bound(&s, &[second]), 1);

    // Removed, it protects nothing.
    s.remove_disruption_budget("web", "db");
    assert!(s.pods().all(|(_, p)| p.phase != PodPhase::Gone));
}

#[test]
fn disruption_budget_allowance_follows_policy_v1() {
    let budget = |limit| DisruptionBudget {
        namespace: "ns".into(),
        name: "b".into(),
        selector: Some(vec![]),
        limit,
    };
    use IntOrPercent::*;
    // (expected, healthy) -> disruptions allowed
    assert_eq!(
        budget(DisruptionLimit::MinAvailable(Int(2))).allowed(4, 4),
        2
    );
    assert_eq!(
        budget(DisruptionLimit::MinAvailable(Int(2))).allowed(4, 1),
        0
    );
    assert_eq!(
        budget(DisruptionLimit::MinAvailable(Percent(50))).allowed(5, 5),
        2
    );
    assert_eq!(
        budget(DisruptionLimit::MaxUnavailable(Int(1))).allowed(4, 4),
        1
    );
    assert_eq!(
        budget(DisruptionLimit::MaxUnavailable(Int(1))).allowed(4, 3),
        0
    );
    assert_eq!(
        budget(DisruptionLimit::MaxUnavailable(Percent(30))).allowed(10, 10),
        3
    );
    assert!(budget(DisruptionLimit::MinAvailable(Int(0))).selects("ns", &Labels::new()));
    assert!(!budget(DisruptionLimit::MinAvailable(Int(0))).selects("other", &Labels::new()));
    let mut no_selector = budget(DisruptionLimit::MinAvailable(Int(0)));
    no_selector.selector = None;
    assert!(
        !no_selector.selects("ns", &Labels::new()),
        "policy/v1: a null selector selects none"
    );
}

#[test]
fn an_elastic_gang_gives_up_only_what_is_above_its_minimum() {
    let mut s = scheduler(1, 4);
    let mut q = cq("team-a", None, 4, None);
    q.preemption.within_cluster_queue = WithinQueuePreemption::LowerPriority;
    with_queues(&mut s, vec![q]);
    s.add_gang(GangSpec {
        namespace: "team-a".into(),
        name: "elastic".into(),
        min_member: 2,
        ..Default::default()
    })
    .unwrap();
    let members: Vec<PodId> = (0..4)
        .map(|i| {
            let mut p = gang_member("team-a", "elastic", &format!("w{i}"), "main", 0);
            p.gang.as_mut().unwrap().rank = Some(i);
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    assert_eq!(bound(&s, &members), 4);
    // Two GPUs: the two highest ranks go, the gang runs on at its minimum.
    let high = s.submit(pod("team-a", "high", "main", 2, 100), 10_000);
    let d = s.schedule(10_000);
    let mut victims = evict_all(&mut s, &d);
    victims.sort();
    assert_eq!(victims, vec![members[2], members[3]], "{:?}", d.preemptions);
    s.schedule(10_001);
    assert_eq!(bound(&s, &[high]), 1);
    assert_eq!(bound(&s, &members[..2]), 2);
    // Three more GPUs: at its minimum, the gang can only go whole.
    let all = s.submit(pod("team-a", "all", "main", 3, 200), 20_000);
    let d = s.schedule(20_000);
    let victims = evict_all(&mut s, &d);
    assert!(victims.contains(&members[0]) && victims.contains(&members[1]));
    s.schedule(20_001);
    assert_eq!(bound(&s, &[all]), 1);
    assert_eq!(bound(&s, &members), 0, "no gang left below its minimum");
}

#[test]
fn a_deleted_cluster_queue_lends_nothing_and_its_work_can_be_reclaimed() {
    let mut s = scheduler(1, 8);
    let queues = ["a", "b"].map(|name| {
        let mut q = cq(name, Some("org"), 4, None);
        q.preemption.reclaim_within_cohort = ReclaimPolicy::Any;
        q
    });
    with_queues(&mut s, queues.to_vec());
    let b_work = s.submit(pod("b", "b-work", "main", 2, 0), 0);
    s.schedule(0);
    assert_eq!(bound(&s, &[b_work]), 1);

    s.remove_cluster_queue("b");
    assert_eq!(
        s.cluster_queues()
            .map(|(_, q)| q.name.as_str())
            .collect::<Vec<_>>(),
        vec!["a"]
    );
    // b's 4 GPUs of quota left with it: a may no longer borrow them.
    let wide = s.submit(pod("a", "wide", "main", 6, 0), 10);
    s.schedule(10);
    assert_eq!(bound(&s, &[wide]), 0);
    assert!(
        reason(&s, wide).ends_with("of nominal 4, cohort can lend 2"),
        "{}",
        reason(&s, wide)
    );
    s.finish(wide).unwrap();

    // What b still runs counts as borrowed from a's quota: a takes it back.
    let own = s.submit(pod("a", "own", "main", 4, 0), 20);
    let d = s.schedule(20);
    assert_eq!(evict_all(&mut s, &d), vec![b_work]);
    s.schedule(21);
    assert_eq!(bound(&s, &[own]), 1);
}

fn workload_pods(s: &mut Scheduler, gang: &str, count: u32, at: Millis) -> Vec<PodId> {
    (0..count)
        .map(|i| {
            let mut p = gang_member("team-a", gang, &format!("{gang}-{i}"), "main", 0);
            p.gang.as_mut().unwrap().rank = Some(i);
            s.submit(p, at)
        })
        .collect()
}

#[test]
fn a_workload_is_admitted_whole_or_down_to_its_minimum() {
    // Quota for 2 GPUs on a node with 8: the node has room, the quota decides.
    let mut s = scheduler(1, 8);
    with_queues(&mut s, vec![cq("team-a", None, 2, None)]);
    s.add_gang(GangSpec {
        namespace: "team-a".into(),
        name: "whole".into(),
        min_member: 3,
        total: Some(3),
        keeps_admission: true,
        ..Default::default()
    })
    .unwrap();
    let whole = workload_pods(&mut s, "whole", 3, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &whole), 0, "3 pods under a quota of 2: none run");
    assert!(
        reason(&s, whole[0]).contains("quota"),
        "{}",
        reason(&s, whole[0])
    );
    assert_eq!(gpu_used(&s, "team-a"), 0);

    // Partial admission: parallelism 4, at least 1, quota for 2: the largest count that
    // fits starts, the lowest ranks first.
    s.add_gang(GangSpec {
        namespace: "team-a".into(),
        name: "partial".into(),
        min_member: 1,
        total: Some(4),
        keeps_admission: true,
        ..Default::default()
    })
    .unwrap();
    let partial = workload_pods(&mut s, "partial", 4, 1_000);
    s.schedule(1_000);
    assert_eq!(bound(&s, &partial[..2]), 2);
    assert_eq!(bound(&s, &partial[2..]), 0);
    assert_eq!(gpu_used(&s, "team-a"), 2, "the quota holds");
}

/// Fast admission (a StatefulSet whose pods come one at a time): the first pod starts
/// only when the queue holds all the replicas, and once started the workload holds the
/// quota of its pods not created yet, so a second such workload does not start on it.
#[test]
fn a_fast_admission_workload_holds_quota_for_its_pods_to_come() {
    let mut s = scheduler(1, 8);
    with_queues(&mut s, vec![cq("team-a", None, 4, None)]);
    let declare = |s: &mut Scheduler, name: &str| {
        s.add_gang(GangSpec {
            namespace: "team-a".into(),
            name: name.into(),
            min_member: 1,
            total: Some(3),
            keeps_admission: true,
            fast_admission: true,
            ..Default::default()
        })
        .unwrap();
    };
    let member = |s: &mut Scheduler, gang: &str, i: u32, at: Millis| {
        s.submit(
            gang_member("team-a", gang, &format!("{gang}-{i}"), "main", 0),
            at,
        )
    };
    declare(&mut s, "a");
    declare(&mut s, "b");
    let a0 = member(&mut s, "a", 0, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &[a0]), 1, "the queue holds all 3 of a's replicas");
    assert_eq!(gpu_used(&s, "team-a"), 3, "a's 2 pods to come are held");
    let b0 = member(&mut s, "b", 0, 1_000);
    s.schedule(1_000);
    assert_eq!(bound(&s, &[b0]), 0, "b needs 3, a leaves 1");
    assert!(reason(&s, b0).contains("quota"), "{}", reason(&s, b0));
    let a1 = member(&mut s, "a", 1, 2_000);
    s.schedule(2_000);
    let a2 = member(&mut s, "a", 2, 3_000);
    s.schedule(3_000);
    assert_eq!(bound(&s, &[a1, a2]), 2, "a's next pods start on its hold");
    assert_eq!(gpu_used(&s, "team-a"), 3);
    assert_eq!(bound(&s, &[b0]), 0);
    // a ends: b starts, holding for its own next pods.
    for p in [a0, a1, a2] {
        s.finish(p).unwrap();
    }
    s.schedule(4_000);
    assert_eq!(bound(&s, &[b0]), 1);
    assert_eq!(gpu_used(&s, "team-a"), 3);

    // Never admitted partially: 5 replicas under a quota of 4 wait whole.
    let mut s = scheduler(1, 8);
    with_queues(&mut s, vec![cq("team-a", None, 4, None)]);
    s.add_gang(GangSpec {
        namespace: "team-a".into(),
        name: "big".into(),
        min_member: 1,
        total: Some(5),
        keeps_admission: true,
        fast_admission: true,
        ..Default::default()
    })
    .unwrap();
    let pods = workload_pods(&mut s, "big", 3, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &pods), 0);
    assert_eq!(gpu_used(&s, "team-a"), 0);
    // A fast-admission gang must say how many pods it will have.
    let e = s
        .add_gang(GangSpec {
            namespace: "team-a".into(),
            name: "unsized".into(),
            min_member: 1,
            fast_admission: true,
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.field, "total", "{e}");
    // Its slices divide all its pods, not the one that starts it.
    let sliced = |total: u32| GangSpec {
        namespace: "team-a".into(),
        name: format!("sliced-{total}"),
        min_member: 1,
        total: Some(total),
        keeps_admission: true,
        fast_admission: true,
        topology: kestrel_core::GangTopology {
            slice: Some(("nvidia.com/gpu.clique".into(), 2)),
            ..Default::default()
        },
        ..Default::default()
    };
    s.add_gang(sliced(4)).unwrap();
    let e = s.add_gang(sliced(3)).unwrap_err();
    assert!(
        e.to_string()
            .contains("2 does not divide the gang's 3 pods; use a divisor of its pod count"),
        "{e}"
    );
}

#[test]
fn an_admitted_workload_runs_its_next_pods_without_the_minimum() {
    // A Job of parallelism 3 and completions 5: after the first three end together, its
    // controller creates the last two. The workload was admitted: they start.
    let build = |keeps_admission: bool| {
        let mut s = scheduler(1, 8);
        with_queues(&mut s, vec![cq("team-a", None, 8, None)]);
        s.add_gang(GangSpec {
            namespace: "team-a".into(),
            name: "job".into(),
            min_member: 3,
            total: Some(3),
            keeps_admission,
            ..Default::default()
        })
        .unwrap();
        let first = workload_pods(&mut s, "job", 3, 0);
        s.schedule(0);
        assert_eq!(bound(&s, &first), 3);
        for &p in &first {
            s.finish(p).unwrap();
        }
        let next: Vec<PodId> = (3..5)
            .map(|i| {
                let p = gang_member("team-a", "job", &format!("job-{i}"), "main", 0);
                s.submit(p, 10_000)
            })
            .collect();
        s.schedule(10_000);
        bound(&s, &next)
    };
    assert_eq!(build(true), 2, "an admitted workload's last pods run");
    assert_eq!(build(false), 0, "a PodGroup's minimum holds at every start");
}

#[test]
fn a_flavor_whose_node_taints_the_pod_does_not_tolerate_is_skipped() {
    let spot = Taint {
        key: "spot".into(),
        value: "true".into(),
        effect: TaintEffect::NoSchedule,
    };
    let mut s = Scheduler::new(SchedulerConfig::default());
    let mut tainted = node("spot-0", 4);
    tainted.labels.insert("pool".into(), "spot".into());
    tainted.taints.push(spot.clone());
    s.add_node(tainted).unwrap();
    let mut plain = node("od-0", 4);
    plain.labels.insert("pool".into(), "on-demand".into());
    s.add_node(plain).unwrap();
    for (name, taints) in [("spot", vec![spot.clone()]), ("on-demand", vec![])] {
        s.add_flavor(ResourceFlavor {
            name: name.into(),
            node_labels: [("pool".to_string(), name.to_string())].into(),
            node_taints: taints,
            tolerations: vec![],
        });
    }
    let mut q = cq("team-a", None, 4, None);
    let group = q.resource_groups[0].flavors[0].clone();
    q.resource_groups[0].flavors = ["spot", "on-demand"]
        .iter()
        .map(|f| FlavorQuotas {
            flavor: f.to_string(),
            ..group.clone()
        })
        .collect();
    let mut spot_only = q.clone();
    spot_only.name = "team-b".into();
    spot_only.resource_groups[0].flavors.truncate(1);
    with_queues(&mut s, vec![q, spot_only]);
    let node_of = |s: &Scheduler, id: PodId| match s.pod(id).phase {
        PodPhase::Bound { node, .. } => s.cluster().node(node).spec.name.clone(),
        _ => String::new(),
    };
    // No toleration: spot is skipped, on-demand admits it.
    let plain = s.submit(pod("team-a", "plain", "main", 2, 0), 0);
    // Tolerating spot: the first flavor, spot, admits it.
    let mut tolerant = pod("team-a", "tolerant", "main", 2, 0);
    tolerant.constraints.tolerations.push(Toleration {
        key: "spot".into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    });
    let tolerant = s.submit(tolerant, 0);
    s.schedule(0);
    assert_eq!(node_of(&s, plain), "od-0");
    assert_eq!(node_of(&s, tolerant), "spot-0");
    // On-demand's quota is spent: the next untolerating pod waits, and says why spot is
    // no use to it.
    let more = s.submit(pod("team-a", "more", "main", 4, 0), 1);
    s.schedule(1);
    assert_eq!(bound(&s, &[more]), 0);
    let why = reason(&s, more);
    assert!(why.contains("quota"), "{why}");
    // A queue with only the spot flavor admits no untolerating pod, and says why.
    let lone = s.submit(pod("team-b", "lone", "main", 1, 0), 2);
    s.schedule(2);
    assert_eq!(bound(&s, &[lone]), 0);
    let why = reason(&s, lone);
    assert!(
        why.contains("flavor spot") && why.contains("spot=true:NoSchedule"),
        "{why}"
    );
}

#[test]
fn flavor_fungibility_decides_between_borrowing_and_the_next_flavor() {
    let run = |borrow_first: bool| {
        let mut s = Scheduler::new(SchedulerConfig::default());
        for pool in ["a", "b"] {
            let mut n = node(&format!("{pool}-0"), 4);
            n.labels.insert("pool".into(), pool.into());
            s.add_node(n).unwrap();
            s.add_flavor(ResourceFlavor {
                name: pool.into(),
                node_labels: [("pool".to_string(), pool.to_string())].into(),
                ..Default::default()
            });
        }
        let flavor = |name: &str, gpus: i64| {
            let mut f = quota(gpus, None).flavors.remove(0);
            f.flavor = name.into();
            f
        };
        // The team owns nothing in flavor a (it may borrow the lender's) and 4 GPUs in b.
        let mut team = cq("team", Some("org"), 0, None);
        team.resource_groups[0].flavors = vec![flavor("a", 0), flavor("b", 4)];
        team.borrow_in_first_fitting_flavor = borrow_first;
        let mut lender = cq("lender", Some("org"), 0, None);
        lender.resource_groups[0].flavors = vec![flavor("a", 4)];
        with_queues(&mut s, vec![team, lender]);
        let p = s.submit(pod("team", "p", "main", 1, 0), 0);
        s.schedule(0);
        match s.pod(p).phase {
            PodPhase::Bound { node, .. } => s.cluster().node(node).spec.name.clone(),
            _ => String::new(),
        }
    };
    // Kestrel's default (TryNextFlavor): room without borrowing in b beats borrowing in a.
    assert_eq!(run(false), "b-0");
    // whenCanBorrow: Borrow: the first flavor that fits, by borrowing, is taken.
    assert_eq!(run(true), "a-0");
}

/// A cohort holding only limits on GPUs (`borrowing_limit`, `lending_limit`) under `parent`.
fn cohort(
    name: &str,
    parent: Option<&str>,
    gpus: i64,
    bl: Option<i64>,
    ll: Option<i64>,
) -> CohortSpec {
    CohortSpec {
        name: name.into(),
        parent: parent.map(String::from),
        resource_groups: vec![ResourceGroup {
            covered: vec![GPU_RESOURCE.into()],
            flavors: vec![FlavorQuotas {
                flavor: "default".into(),
                resources: vec![ResourceQuota {
                    name: GPU_RESOURCE.into(),
                    nominal: gpus * 1000,
                    borrowing_limit: bl.map(|b| b * 1000),
                    lending_limit: ll.map(|l| l * 1000),
                }],
            }],
        }],
    }
}

/// Queues `research-a`, `research-b` (2 GPUs each) under cohort `research`, and `prod` (8
/// GPUs) beside it under `org`, which holds `org_gpus` itself; 16 GPUs of nodes.
fn research_tree(org_gpus: i64, research: CohortSpec) -> Scheduler {
    let mut s = scheduler(2, 8);
    s.add_cohort(cohort("org", None, org_gpus, None, None))
        .unwrap();
    s.add_cohort(research).unwrap();
    with_queues(
        &mut s,
        vec![
            cq("research-a", Some("research"), 2, None),
            cq("research-b", Some("research"), 2, None),
            cq("prod", Some("org"), 8, None),
        ],
    );
    s
}

fn submit_n(s: &mut Scheduler, queue: &str, n: usize, at: Millis) -> Vec<PodId> {
    (0..n)
        .map(|i| s.submit(pod(queue, &format!("{queue}-{at}-{i}"), "main", 1, 0), at))
        .collect()
}

#[test]
fn an_inner_cohorts_borrowing_limit_bounds_its_subtree_with_room_at_the_root() {
    // research may take 2 GPUs from org beyond its queues' 4: 6 in all, though org holds
    // 4 of its own and prod's 8 are idle.
    let mut s = research_tree(4, cohort("research", Some("org"), 0, Some(2), None));
    let a = submit_n(&mut s, "research-a", 5, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &a), 5, "2 own + 2 of research-b's + 1 from org");
    let b = submit_n(&mut s, "research-b", 3, 1);
    s.schedule(1);
    assert_eq!(
        bound(&s, &b),
        1,
        "research holds 6 in all: 4 nominal + borrowing limit 2"
    );
    let why = reason(&s, b[2]);
    assert!(
        why.contains("Cohort research is at its borrowingLimit"),
        "{why}"
    );
    // prod's own quota is untouched by research's borrowing.
    let p = submit_n(&mut s, "prod", 8, 2);
    s.schedule(2);
    assert_eq!(bound(&s, &p), 8);
    assert_eq!(gpu_used(&s, "research-a") + gpu_used(&s, "research-b"), 6);
    // Inside the subtree, a queue still borrows what its sibling leaves idle.
    s.finish(a[0]).unwrap();
    s.finish(a[1]).unwrap();
    s.schedule(3);
    assert_eq!(
        bound(&s, &b),
        3,
        "research-b takes the room research-a left"
    );
}

#[test]
fn an_inner_cohorts_own_quota_and_lending_limit_keep_room_for_its_subtree() {
    // research holds 4 GPUs of its own; with its queues' 4 that is 8, of which it lends
    // org 4 (lending limit).
    let mut s = research_tree(0, cohort("research", Some("org"), 4, None, Some(4)));
    let p = submit_n(&mut s, "prod", 16, 0);
    s.schedule(0);
    assert_eq!(
        bound(&s, &p),
        12,
        "prod takes its 8 and the 4 research lends, never the 4 research keeps"
    );
    let a = submit_n(&mut s, "research-a", 4, 1);
    s.schedule(1);
    assert_eq!(bound(&s, &a), 4, "research's own 4 wait for its queues");
}

#[test]
fn a_cohort_tree_three_deep_takes_the_tightest_limit_on_the_way_up() {
    // org > research (may borrow 4) > vision (may borrow 1) > research-a, research-b.
    let mut s = scheduler(2, 8);
    s.add_cohort(cohort("org", None, 0, None, None)).unwrap();
    s.add_cohort(cohort("research", Some("org"), 0, Some(4), None))
        .unwrap();
    s.add_cohort(cohort("vision", Some("research"), 0, Some(1), None))
        .unwrap();
    with_queues(
        &mut s,
        vec![
            cq("research-a", Some("vision"), 2, None),
            cq("research-b", Some("vision"), 2, None),
            cq("prod", Some("org"), 12, None),
        ],
    );
    let a = submit_n(&mut s, "research-a", 8, 0);
    s.schedule(0);
    assert_eq!(bound(&s, &a), 5, "vision: its queues' 4 plus 1");
    let why = reason(&s, a[7]);
    assert!(
        why.contains("Cohort vision is at its borrowingLimit"),
        "{why}"
    );
}
