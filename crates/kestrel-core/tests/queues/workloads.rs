//! Workloads admitted whole or down to their minimum, and flavors.

use super::*;

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
