//! Each rule on a snapshot that keeps it and on one that breaks it.

use super::*;

fn node(name: &str, cpu: Amount, gpus: u32) -> NodeView {
    let mut allocatable = BTreeMap::from([
        ("cpu".to_string(), cpu * 1000),
        ("memory".to_string(), (64i128 << 30) * 1000),
        (PODS.to_string(), 10_000),
        ("rdma/hca".to_string(), 2000),
    ]);
    if gpus > 0 {
        allocatable.insert(GPU.to_string(), Amount::from(gpus) * 1000);
    }
    NodeView {
        name: name.into(),
        allocatable,
        gpu_devices: gpus,
        ..Default::default()
    }
}

fn pod(key: &str, node: Option<&str>, cpu: Amount) -> PodView {
    PodView {
        key: key.into(),
        node: node.map(String::from),
        requests: BTreeMap::from([("cpu".to_string(), cpu * 1000)]),
        ..Default::default()
    }
}

fn gpu_pod(key: &str, node: &str, indices: &[u32]) -> PodView {
    let mut p = pod(key, Some(node), 1);
    p.requests
        .insert(GPU.into(), 1000 * indices.len() as Amount);
    p.gpu = GpuClaim::Whole(indices.to_vec());
    p
}

fn share(key: &str, node: &str, index: u32, milli: u32) -> PodView {
    let mut p = pod(key, Some(node), 1);
    p.gpu = GpuClaim::Share { index, milli };
    p
}

fn cluster(pods: Vec<PodView>) -> Snapshot {
    Snapshot {
        nodes: vec![node("n1", 8, 4), node("n2", 8, 0)],
        pods,
        ..Default::default()
    }
}

fn violations(s: &Snapshot) -> Vec<Violation> {
    check(s).err().unwrap_or_default()
}

/// `s` passes; `broken` fails with exactly one violation, which `is` recognises and whose
/// text names `names`.
fn holds_then_breaks(s: Snapshot, broken: Snapshot, is: fn(&Violation) -> bool, names: &[&str]) {
    assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));
    let v = violations(&broken);
    assert_eq!(v.len(), 1, "{}", describe(&v));
    assert!(is(&v[0]), "{:?}", v[0]);
    let text = v[0].to_string();
    for n in names {
        assert!(text.contains(n), "{text:?} lacks {n:?}");
    }
}

#[test]
fn cpu_memory_pods_and_extended_resources_stay_within_allocatable() {
    let ok = cluster(vec![pod("a/p1", Some("n1"), 4), pod("a/p2", Some("n1"), 4)]);
    let mut over = ok.clone();
    over.pods.push(pod("a/p3", Some("n1"), 1));
    holds_then_breaks(
        ok.clone(),
        over,
        |v| matches!(v, Violation::OverAllocatable { resource, requested: 9000, allocatable: 8000, .. } if resource == "cpu"),
        &["node n1", "9 of cpu", "allocatable is 8", "a/p3"],
    );
    // Pending pods take nothing.
    let mut pending = ok.clone();
    pending.pods.push(pod("a/p3", None, 100));
    assert_eq!(check(&pending), Ok(()));

    let many: Vec<PodView> = (0..11)
        .map(|i| pod(&format!("a/q{i}"), Some("n2"), 0))
        .collect();
    let slots = |n| cluster(many[..n].to_vec());
    holds_then_breaks(
        slots(10),
        slots(11),
        |v| matches!(v, Violation::OverAllocatable { resource, .. } if resource == PODS),
        &["node n2", "11 of pods", "allocatable is 10"],
    );

    let rdma = |n: Amount| {
        let mut p = pod("a/r", Some("n2"), 1);
        p.requests.insert("rdma/hca".into(), n * 1000);
        cluster(vec![p])
    };
    holds_then_breaks(
        rdma(2),
        rdma(3),
        |v| matches!(v, Violation::OverAllocatable { resource, .. } if resource == "rdma/hca"),
        &["3 of rdma/hca", "allocatable is 2"],
    );

    let memory = |gib: Amount| {
        let mut p = pod("a/m", Some("n2"), 1);
        p.requests.insert("memory".into(), (gib << 30) * 1000);
        cluster(vec![p])
    };
    holds_then_breaks(
        memory(64),
        memory(65),
        |v| matches!(v, Violation::OverAllocatable { resource, .. } if resource == "memory"),
        &["memory", "bytes"],
    );

    // A resource the node does not offer at all is over its zero.
    let mut gpu_on_cpu_node = gpu_pod("a/g", "n2", &[]);
    gpu_on_cpu_node.requests.insert(GPU.into(), 1000);
    gpu_on_cpu_node.gpu = GpuClaim::None;
    holds_then_breaks(
        cluster(vec![]),
        cluster(vec![gpu_on_cpu_node]),
        |v| matches!(v, Violation::OverAllocatable { resource, allocatable: 0, .. } if resource == GPU),
        &["nvidia.com/gpu", "1 GPU"],
    );
}

#[test]
fn devices_are_held_once_shares_fit_and_indices_exist() {
    let ok = cluster(vec![
        gpu_pod("a/w1", "n1", &[0, 1]),
        gpu_pod("a/w2", "n1", &[2]),
        share("a/s1", "n1", 3, 600),
        share("a/s2", "n1", 3, 400),
    ]);
    let mut twice = ok.clone();
    twice.pods[1] = gpu_pod("a/w2", "n1", &[1]);
    holds_then_breaks(
        ok.clone(),
        twice,
        |v| matches!(v, Violation::DeviceTwice { index: 1, .. }),
        &["node n1", "GPU 1", "a/w1", "a/w2"],
    );
    let mut whole_and_share = ok.clone();
    whole_and_share.pods[3] = share("a/s2", "n1", 2, 400);
    holds_then_breaks(
        ok.clone(),
        whole_and_share,
        |v| matches!(v, Violation::DeviceTwice { index: 2, .. }),
        &["GPU 2", "a/w2", "a/s2"],
    );
    let mut over = ok.clone();
    over.pods[3] = share("a/s2", "n1", 3, 401);
    holds_then_breaks(
        ok.clone(),
        over,
        |v| {
            matches!(
                v,
                Violation::DeviceOverShared {
                    index: 3,
                    milli: 1001,
                    ..
                }
            )
        },
        &["GPU 3", "1001/1000", "a/s1", "a/s2"],
    );
    let mut out_of_range = ok.clone();
    out_of_range.pods[3] = share("a/s2", "n1", 4, 400);
    holds_then_breaks(
        ok.clone(),
        out_of_range,
        |v| {
            matches!(
                v,
                Violation::DeviceOutOfRange {
                    index: 4,
                    devices: 4,
                    ..
                }
            )
        },
        &["a/s2", "GPU 4", "node n1", "4 GPU(s)"],
    );
    let mut mismatch = ok.clone();
    mismatch.pods[0].gpu = GpuClaim::Whole(vec![0]);
    holds_then_breaks(
        ok,
        mismatch,
        |v| {
            matches!(
                v,
                Violation::GpuClaimMismatch {
                    requested: 2000,
                    claimed: 1000,
                    ..
                }
            )
        },
        &["a/w1", "2 GPU", "1 GPU"],
    );
}

#[test]
fn a_whole_gpu_pod_is_bound_with_its_gpus_or_its_claims() {
    let ok = cluster(vec![gpu_pod("a/w", "n1", &[0, 1])]);
    let mut bare = ok.clone();
    bare.pods[0].gpu = GpuClaim::None;
    holds_then_breaks(
        ok,
        bare.clone(),
        |v| {
            matches!(
                v,
                Violation::GpuWithoutIndices {
                    requested: 2000,
                    ..
                }
            )
        },
        &["a/w", "2 GPU", "node n1", "no GPU by index"],
    );
    // Left out: kube-scheduler's pods (it records no indices), pods whose devices come
    // through ResourceClaims, pods pending, and pods on nodes without GPU devices (they
    // are over the node's allocatable instead).
    let mut foreign = bare.clone();
    foreign.pods[0].scheduler = Some(KUBE_SCHEDULER.into());
    assert_eq!(check(&foreign), Ok(()));
    let mut claimed = bare.clone();
    claimed.pods[0].resource_claims = vec!["a/w-gpus".into()];
    assert_eq!(check(&claimed), Ok(()));
    let mut pending = bare.clone();
    pending.pods[0].node = None;
    assert_eq!(check(&pending), Ok(()));
    let mut cpu_node = bare.clone();
    cpu_node.pods[0].node = Some("n2".into());
    assert!(violations(&cpu_node)
        .iter()
        .all(|v| matches!(v, Violation::OverAllocatable { .. })));
    // Another scheduler than kube-scheduler is taken for Kestrel under another name.
    let mut renamed = bare;
    renamed.pods[0].scheduler = Some("kestrel-diff".into());
    assert!(matches!(
        violations(&renamed)[..],
        [Violation::GpuWithoutIndices { .. }]
    ));
}

#[test]
fn pods_on_unknown_nodes_and_twice_are_reported() {
    holds_then_breaks(
        cluster(vec![pod("a/p", Some("n1"), 1)]),
        cluster(vec![pod("a/p", Some("gone"), 1)]),
        |v| matches!(v, Violation::UnknownNode { .. }),
        &["a/p", "node gone"],
    );
    holds_then_breaks(
        cluster(vec![pod("a/p", Some("n1"), 1)]),
        cluster(vec![pod("a/p", Some("n1"), 1), pod("a/p", None, 1)]),
        |v| matches!(v, Violation::DuplicatePod { .. }),
        &["a/p"],
    );
}

fn gang_cluster(bound: usize, departed: u32) -> Snapshot {
    let mut s = cluster(
        (0..4)
            .map(|i| {
                let mut p = pod(&format!("a/g-{i}"), (i < bound).then_some("n2"), 1);
                p.gang = Some("a/g".into());
                p
            })
            .collect(),
    );
    s.gangs.push(GangView {
        key: "a/g".into(),
        min_member: 3,
        total: Some(4),
        departed,
        ..Default::default()
    });
    s
}

#[test]
fn gangs_run_whole_or_not_at_all() {
    assert_eq!(check(&gang_cluster(0, 0)), Ok(()));
    assert_eq!(
        check(&gang_cluster(4, 0)),
        Ok(()),
        "above minMember is fine"
    );
    holds_then_breaks(
        gang_cluster(3, 0),
        gang_cluster(2, 0),
        |v| {
            matches!(
                v,
                Violation::GangPartial {
                    bound: 2,
                    min_member: 3,
                    ..
                }
            )
        },
        &["gang a/g", "2 pod(s) bound", "minMember 3"],
    );
    // A member that completed or was lost with its node counts.
    assert_eq!(check(&gang_cluster(2, 1)), Ok(()));
    let mut undeclared = gang_cluster(3, 0);
    undeclared.gangs.clear();
    let v = violations(&undeclared);
    assert_eq!(v.len(), 3, "{}", describe(&v));
    assert!(v[0].to_string().contains("undeclared gang a/g"), "{}", v[0]);
}

fn queue(
    name: &str,
    cohort: Option<&str>,
    nominal: Amount,
    borrow: Option<Amount>,
    lend: Option<Amount>,
) -> QueueView {
    QueueView {
        name: name.into(),
        cohort: cohort.map(String::from),
        quotas: vec![QuotaView {
            flavor: "default".into(),
            resource: "cpu".into(),
            nominal: nominal * 1000,
            borrowing_limit: borrow.map(|b| b * 1000),
            lending_limit: lend.map(|l| l * 1000),
        }],
    }
}

fn queued(key: &str, q: &str, cpu: Amount) -> PodView {
    let mut p = pod(key, Some("n1"), cpu);
    p.queue = Some(q.into());
    p
}

#[test]
fn a_queue_stays_within_nominal_plus_borrowing_limit() {
    let alone = |cpu| Snapshot {
        queues: vec![queue("q", None, 3, None, None)],
        ..cluster(vec![
            queued("a/p1", "q", 2),
            queued("a/p2", "q", cpu),
            pod("a/free", Some("n1"), 2),
        ])
    };
    holds_then_breaks(
        alone(1),
        alone(2),
        |v| {
            matches!(
                v,
                Violation::QueueOverLimit {
                    used: 4000,
                    limit: 3000,
                    ..
                }
            )
        },
        &["ClusterQueue q", "flavor default", "4 of cpu", "limit is 3"],
    );
    let borrowing = |cpu| Snapshot {
        queues: vec![
            queue("q", Some("org"), 2, Some(1), None),
            queue("r", Some("org"), 4, None, None),
        ],
        ..cluster(vec![queued("a/p1", "q", 2), queued("a/p2", "q", cpu)])
    };
    holds_then_breaks(
        borrowing(1),
        borrowing(2),
        |v| {
            matches!(
                v,
                Violation::QueueOverLimit {
                    used: 4000,
                    limit: 3000,
                    ..
                }
            )
        },
        &["ClusterQueue q", "limit is 3"],
    );
    // A queue that has no quota for what its pod uses.
    let mut gpu = queued("a/g", "q", 0);
    gpu.requests.insert(GPU.into(), 1000);
    gpu.gpu = GpuClaim::Whole(vec![0]);
    holds_then_breaks(
        alone(1),
        Snapshot {
            pods: [alone(1).pods, vec![gpu]].concat(),
            ..alone(1)
        },
        |v| matches!(v, Violation::QueueNotCovered { .. }),
        &["ClusterQueue q", "nvidia.com/gpu", "a/g"],
    );
}

#[test]
fn a_cohort_lends_no_more_than_its_queues_and_it_hold() {
    // q keeps 2 of its 4 (lending limit 2); r lends all of its 2; the cohort holds 1:
    // the pool is 2 + 2 + 1 = 5. q using 4 takes 2 from it, r using up to 3 takes 3.
    let snapshot = |r_cpu| Snapshot {
        queues: vec![
            queue("q", Some("org"), 4, None, Some(2)),
            queue("r", Some("org"), 2, None, None),
        ],
        cohorts: vec![cohort("org", None, 1, None, None)],
        ..cluster(vec![queued("a/q", "q", 4), queued("a/r", "r", r_cpu)])
    };
    holds_then_breaks(
        snapshot(3),
        snapshot(4),
        |v| {
            matches!(
                v,
                Violation::CohortOverLent {
                    taken: 6000,
                    pool: 5000,
                    ..
                }
            )
        },
        &["cohort org", "flavor default", "6 of cpu", "pool of 5"],
    );
    // Flavors: a pod charged to another flavor takes nothing from this one.
    let mut other = snapshot(4);
    other.queues[1].quotas.push(QuotaView {
        flavor: "spot".into(),
        resource: "cpu".into(),
        nominal: 8000,
        ..Default::default()
    });
    other.pods[1].flavors.insert("cpu".into(), "spot".into());
    assert_eq!(check(&other), Ok(()), "{}", describe(&violations(&other)));
}

/// A cohort holding `nominal` cpus itself, with limits.
fn cohort(
    name: &str,
    parent: Option<&str>,
    nominal: Amount,
    borrow: Option<Amount>,
    lend: Option<Amount>,
) -> CohortView {
    CohortView {
        name: name.into(),
        parent: parent.map(String::from),
        quotas: queue(name, None, nominal, borrow, lend).quotas,
    }
}

#[test]
fn an_inner_cohort_takes_no_more_from_its_parent_than_it_lends_plus_its_borrowing_limit() {
    // org > research (borrowing limit 1) > q, r (2 cpus each); p (4) beside research.
    // research lends org 4 and may take 5 from it: q and r may use 5 in all.
    let snapshot = |r_cpu| Snapshot {
        queues: vec![
            queue("q", Some("research"), 2, None, None),
            queue("r", Some("research"), 2, None, None),
            queue("p", Some("org"), 4, None, None),
        ],
        cohorts: vec![
            cohort("org", None, 0, None, None),
            cohort("research", Some("org"), 0, Some(1), None),
        ],
        ..cluster(vec![queued("a/q", "q", 3), queued("a/r", "r", r_cpu)])
    };
    holds_then_breaks(
        snapshot(2),
        snapshot(3),
        |v| {
            matches!(
                v,
                Violation::CohortOverLimit {
                    taken: 6000,
                    limit: 5000,
                    ..
                }
            )
        },
        &[
            "cohort research",
            "flavor default",
            "6 of cpu",
            "may lend it 5",
        ],
    );
    // Without the limit, the root's pool (8) holds them.
    let mut unlimited = snapshot(3);
    unlimited.cohorts[1].quotas[0].borrowing_limit = None;
    assert_eq!(
        check(&unlimited),
        Ok(()),
        "{}",
        describe(&violations(&unlimited))
    );
    // What an inner cohort keeps (lending limit 1 of its 4) is not in the root's pool:
    // p may borrow 3, not 4.
    let lending = |p_cpu| Snapshot {
        queues: vec![
            queue("q", Some("research"), 2, None, None),
            queue("r", Some("research"), 2, None, None),
            queue("p", Some("org"), 4, None, None),
        ],
        cohorts: vec![cohort("research", Some("org"), 0, None, Some(3))],
        ..cluster(vec![queued("a/p", "p", p_cpu)])
    };
    holds_then_breaks(
        lending(7),
        lending(8),
        |v| {
            matches!(
                v,
                Violation::CohortOverLent {
                    taken: 8000,
                    pool: 7000,
                    ..
                }
            )
        },
        &["cohort org", "8 of cpu", "pool of 7"],
    );
}

#[test]
fn pending_pods_are_never_dropped() {
    let before = cluster(vec![
        pod("a/p", None, 1),
        pod("a/q", None, 1),
        pod("a/b", Some("n1"), 1),
    ]);
    let bound = cluster(vec![pod("a/p", Some("n1"), 1), pod("a/q", None, 1)]);
    let none = BTreeSet::new();
    assert_eq!(
        check_transition(&before, &bound, &none),
        Ok(()),
        "bound pods may end"
    );
    let dropped = cluster(vec![pod("a/p", Some("n1"), 1)]);
    let v = check_transition(&before, &dropped, &none).unwrap_err();
    assert_eq!(v, vec![Violation::PendingPodDropped { pod: "a/q".into() }]);
    assert!(v[0].to_string().contains("pending pod a/q"));
    let left = BTreeSet::from(["a/q".to_string()]);
    assert_eq!(check_transition(&before, &dropped, &left), Ok(()));
}

#[cfg(feature = "k8s")]
mod k8s_adapter;

#[test]
fn a_device_in_two_claims_and_a_bound_pod_without_its_claim_are_violations() {
    let claim = |key: &str, node: Option<&str>, devices: &[&str], reserved: &[&str]| ClaimView {
        key: key.into(),
        node: node.map(Into::into),
        devices: devices.iter().map(|d| d.to_string()).collect(),
        reserved_for: reserved.iter().map(|r| r.to_string()).collect(),
    };
    let user = |pod: &str, node: &str, claims: &[&str]| ClaimUser {
        pod: pod.into(),
        node: node.into(),
        claims: claims.iter().map(|c| c.to_string()).collect(),
    };
    let good = [
        claim("ns/a", Some("n1"), &["n1/gpu-0"], &["p"]),
        claim("ns/b", Some("n1"), &["n1/gpu-1"], &["q"]),
    ];
    assert_eq!(
        check_claims(
            &good,
            &[user("ns/p", "n1", &["ns/a"]), user("ns/q", "n1", &["ns/b"])]
        ),
        Ok(())
    );
    let twice = [
        claim("ns/a", Some("n1"), &["n1/gpu-0"], &["p"]),
        claim("ns/b", Some("n1"), &["n1/gpu-0"], &["q"]),
    ];
    let v = check_claims(&twice, &[]).unwrap_err();
    assert!(matches!(&v[0], Violation::DeviceInTwoClaims { claims, .. } if claims.len() == 2));
    for (claims, why) in [
        (vec![], "does not exist"),
        (vec![claim("ns/a", None, &[], &[])], "is not allocated"),
        (
            vec![claim("ns/a", Some("n2"), &["n2/gpu-0"], &["p"])],
            "is allocated on node n2",
        ),
        (
            vec![claim("ns/a", Some("n1"), &["n1/gpu-0"], &["other"])],
            "is not reserved",
        ),
    ] {
        let v = check_claims(&claims, &[user("ns/p", "n1", &["ns/a"])]).unwrap_err();
        assert!(v[0].to_string().contains(why), "{}", v[0]);
    }
}

#[cfg(feature = "k8s")]
mod k8s_placement;

mod placement_rules;

mod stranded_pods;
