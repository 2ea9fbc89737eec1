//! Reclaim over time, fair share by recent borrowing, disruption budgets, elastic gangs and
//! deleted ClusterQueues.

use super::*;

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
