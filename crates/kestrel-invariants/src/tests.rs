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
mod k8s_adapter {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    fn node(name: &str, gpus: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {
                "cpu": "15900m", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": gpus,
                "rdma/hca": "1k",
            }}
        }))
        .unwrap()
    }

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        });
        merge(&mut base, extra);
        serde_json::from_value(base).unwrap()
    }

    fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
        match (into, from) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    #[test]
    fn nodes_read_allocatable_in_milli_units() {
        let s = Snapshot::from_k8s(&[node("g", "8")], &[], &BTreeMap::new()).unwrap();
        let n = &s.nodes[0];
        assert_eq!(n.gpu_devices, 8);
        assert_eq!(n.allocatable["cpu"], 15_900);
        assert_eq!(n.allocatable["memory"], (1i128 << 40) * 1000);
        assert_eq!(n.allocatable[PODS], 110_000);
        assert_eq!(n.allocatable[GPU], 8000);
        assert_eq!(n.allocatable["rdma/hca"], 1_000_000);
        let bad = Snapshot::from_k8s(&[node("g", "eight")], &[], &BTreeMap::new()).unwrap_err();
        assert!(
            bad.to_string().contains("Node g") && bad.to_string().contains("nvidia.com/gpu"),
            "{bad}"
        );
    }

    #[test]
    fn requests_sum_containers_max_init_containers_add_sidecars_and_overhead() {
        let p = pod(json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "2Gi", "nvidia.com/gpu": "2"}}},
            ],
            "initContainers": [
                {"name": "big-init", "resources": {"requests": {"cpu": "4"}}},
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                {"name": "late-init", "resources": {"requests": {"cpu": "1", "memory": "8Gi"}}},
            ],
            "overhead": {"cpu": "100m", "memory": "10Mi"},
        }}));
        let r = pod_requests(&p).unwrap();
        // cpu: containers 1.5 + sidecar 0.25 = 1.75; init max(4, 0.25 + 1) = 4; + 0.1.
        assert_eq!(r["cpu"], 4100);
        // memory: containers 1Gi + 2Gi (limit) + sidecar 1Gi = 4Gi; late init 1Gi + 8Gi.
        assert_eq!(r["memory"], ((9i128 << 30) + (10 << 20)) * 1000);
        assert_eq!(r[GPU], 2000);
        // Pod-level requests replace what they name.
        let p = pod(json!({"spec": {"resources": {"requests": {"cpu": "3"}}}}));
        assert_eq!(pod_requests(&p).unwrap()["cpu"], 3000);
        let bad = pod(json!({"spec": {"overhead": {"cpu": "lots"}}}));
        let e = pod_requests(&bad).unwrap_err().to_string();
        assert!(
            e.contains("Pod ml/p") && e.contains("spec.overhead[\"cpu\"]"),
            "{e}"
        );
    }

    #[test]
    fn bindings_devices_gangs_and_ended_pods() {
        let gpu = |name: &str, indices: &str| {
            pod(json!({
                "metadata": {"name": name, "labels": {"scheduling.x-k8s.io/pod-group": "train"},
                             "annotations": {GPU_INDICES_ANNOTATION: indices}},
                "spec": {"nodeName": "g", "priority": 7,
                         "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
            }))
        };
        let done = pod(json!({
            "metadata": {"name": "done", "labels": {"scheduling.x-k8s.io/pod-group": "train"}},
            "spec": {"nodeName": "g"},
            "status": {"phase": "Succeeded"},
        }));
        let shared = pod(json!({
            "metadata": {"name": "s", "annotations": {GPU_INDICES_ANNOTATION: "5:250", "scheduling.k8s.io/group-name": "v"}},
            "spec": {"nodeName": "g"},
        }));
        let kueue = pod(json!({
            "metadata": {"name": "k", "labels": {"kueue.x-k8s.io/pod-group-name": "kg"},
                         "annotations": {"kueue.x-k8s.io/pod-group-total-count": "2"}},
        }));
        let pods = [gpu("w0", "0,1"), gpu("w1", "2, 3"), done, shared, kueue];
        let mins = BTreeMap::from([("ml/train".to_string(), 3), ("ml/v".to_string(), 1)]);
        let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &mins).unwrap();
        assert_eq!(s.pods.len(), 4, "the pod that succeeded is left out");
        let w1 = s.pod("ml/w1").unwrap();
        assert_eq!(w1.node.as_deref(), Some("g"));
        assert_eq!(w1.gpu, GpuClaim::Whole(vec![2, 3]));
        assert_eq!(w1.gang.as_deref(), Some("ml/train"));
        assert_eq!(w1.priority, 7);
        assert_eq!(
            s.pod("ml/s").unwrap().gpu,
            GpuClaim::Share {
                index: 5,
                milli: 250
            }
        );
        assert_eq!(s.pod("ml/s").unwrap().gang.as_deref(), Some("ml/v"));
        let train = s.gangs.iter().find(|g| g.key == "ml/train").unwrap();
        assert_eq!(
            (train.min_member, train.total, train.departed),
            (3, Some(3), 1)
        );
        let kg = s.gangs.iter().find(|g| g.key == "ml/kg").unwrap();
        assert_eq!(kg.min_member, 2);
        assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));

        // The same pods with a device handed out twice and the gang one member short.
        let pods = [gpu("w0", "0,1"), gpu("w1", "1,2")];
        let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &mins).unwrap();
        let v = violations(&s);
        assert!(
            v.iter()
                .any(|v| matches!(v, Violation::DeviceTwice { index: 1, .. })),
            "{}",
            describe(&v)
        );
        assert!(
            v.iter().any(|v| matches!(
                v,
                Violation::GangPartial {
                    bound: 2,
                    min_member: 3,
                    ..
                }
            )),
            "{}",
            describe(&v)
        );
        let bad = Snapshot::from_k8s(&[], &[gpu("w0", "zero")], &mins).unwrap_err();
        assert!(
            bad.to_string().contains("Pod ml/w0")
                && bad.to_string().contains(GPU_INDICES_ANNOTATION),
            "{bad}"
        );
    }

    #[test]
    fn a_gpu_pod_kestrel_bound_without_indices_is_reported_and_kube_schedulers_is_not() {
        let bound = |name: &str, scheduler: Option<&str>, annotations: serde_json::Value| {
            let mut p = pod(json!({
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"nodeName": "g",
                         "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            }));
            p.spec.as_mut().unwrap().scheduler_name = scheduler.map(String::from);
            p
        };
        let claimed = pod(json!({
            "metadata": {"name": "claimed"},
            "spec": {"nodeName": "g", "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpu"}],
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        }));
        let pods = [
            bound("k", Some("kestrel"), json!({GPU_INDICES_ANNOTATION: "0"})),
            bound("d", Some("default-scheduler"), json!({})),
            bound("unset", None, json!({})),
            bound("cpu", Some("kestrel"), json!({})),
            claimed,
        ];
        let mut pods = pods.to_vec();
        // A CPU pod of Kestrel's needs no indices.
        let containers = &mut pods[3].spec.as_mut().unwrap().containers;
        containers[0].resources = None;
        let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &BTreeMap::new()).unwrap();
        assert_eq!(
            s.pod("ml/unset").unwrap().scheduler.as_deref(),
            Some(KUBE_SCHEDULER)
        );
        assert_eq!(
            s.pod("ml/claimed").unwrap().resource_claims,
            vec!["ml/shared-gpu"]
        );
        assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));
        pods.push(bound("bare", Some("kestrel"), json!({})));
        let s = Snapshot::from_k8s(&[node("g", "8")], &pods, &BTreeMap::new()).unwrap();
        let v = violations(&s);
        assert!(
            matches!(&v[..], [Violation::GpuWithoutIndices { pod, .. }] if pod == "ml/bare"),
            "{}",
            describe(&v)
        );
    }

    #[test]
    fn what_the_stranded_rule_reads_from_api_objects() {
        let mut cordoned = node("c", "4");
        cordoned.spec = Some(serde_json::from_value(json!({"unschedulable": true})).unwrap());
        let pods = [
            pod(json!({"metadata": {"name": "preemptor"}, "status": {"nominatedNodeName": "g"}})),
            pod(json!({"metadata": {"name": "gated"},
                       "spec": {"schedulingGates": [{"name": "example.com/wait"}]}})),
            pod(json!({"metadata": {"name": "half", "annotations": {"gpu-fraction": "0.5"}}})),
            pod(json!({"metadata": {"name": "mem", "annotations": {"gpu-memory": "20480"}}})),
            pod(json!({"metadata": {"name": "numa",
                       "annotations": {"kestrel.dev/numa-policy": "single-numa-node"}}})),
        ];
        let s = Snapshot::from_k8s(&[node("g", "8"), cordoned], &pods, &BTreeMap::new()).unwrap();
        assert!(s.nodes[0].reserved && !s.nodes[0].unschedulable);
        assert!(s.nodes[1].unschedulable && !s.nodes[1].reserved);
        assert!(s.pod("ml/gated").unwrap().gated);
        assert_eq!(
            s.pod("ml/half").unwrap().gpu_share,
            Some(ShareRequest::Milli(500))
        );
        assert_eq!(
            s.pod("ml/mem").unwrap().gpu_share,
            Some(ShareRequest::MemoryMib(20_480))
        );
        assert!(s.pod("ml/numa").unwrap().single_numa_node);
        // Every node is reserved or cordoned: none is empty for the others.
        assert!(stranded(&s).is_empty(), "{:?}", stranded(&s));
    }

    #[test]
    fn nvidia_gpu_served_by_dra_is_checked_through_the_claim_the_pod_status_names() {
        use k8s_openapi::api::resource::v1::ResourceClaim;
        let served = |name: &str, claim: &str| {
            pod(json!({
                "metadata": {"name": name, "annotations": {GPU_INDICES_ANNOTATION: "0,1"}},
                "spec": {"nodeName": "d",
                         "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
                "status": {"extendedResourceClaimStatus": {"resourceClaimName": claim,
                    "requestMappings": [{"containerName": "c", "resourceName": "nvidia.com/gpu",
                                         "requestName": "container-0-request-0"}]}},
            }))
        };
        let claim = |name: &str, devices: &[&str], pod: &str| -> ResourceClaim {
            let results: Vec<serde_json::Value> = devices
                .iter()
                .map(|d| {
                    json!({"request": "container-0-request-0", "driver": "gpu.nvidia.com",
                                "pool": "d", "device": d})
                })
                .collect();
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {"devices": {"requests": []}},
                "status": {"allocation": {"devices": {"results": results},
                    "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["d"]}]}]}},
                    "reservedFor": [{"resource": "pods", "name": pod, "uid": "u"}]},
            }))
            .unwrap()
        };
        // A DRA-only node: no nvidia.com/gpu in its allocatable.
        let pods = [served("a", "a-x"), served("b", "b-x")];
        let s = Snapshot::from_k8s(&[node("d", "0")], &pods, &BTreeMap::new()).unwrap();
        assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));
        let ok = [
            claim("a-x", &["gpu-0", "gpu-1"], "a"),
            claim("b-x", &["gpu-2", "gpu-3"], "b"),
        ];
        let (claims, users) = claims_from_k8s(&ok, &pods);
        assert_eq!(users.len(), 2);
        assert_eq!(users[0].claims, vec!["ml/a-x".to_string()]);
        assert_eq!(check_claims(&claims, &users), Ok(()));
        // A device in both claims, and a claim that is not reserved for its pod.
        let bad = [
            claim("a-x", &["gpu-0", "gpu-1"], "a"),
            claim("b-x", &["gpu-1", "gpu-2"], "someone-else"),
        ];
        let (claims, users) = claims_from_k8s(&bad, &pods);
        let v = check_claims(&claims, &users).unwrap_err();
        assert_eq!(v.len(), 2, "{}", describe(&v));
    }
}

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
mod k8s_placement {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
    };
    use serde_json::json;

    fn node(name: &str, zone: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"zone": zone}},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: &str, spec: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": name, "namespace": "ml", "labels": {"app": "web", "rev": "2"}},
            "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        });
        for (k, v) in spec.as_object().unwrap() {
            base["spec"][k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn pods_read_affinity_spread_tolerations_and_volumes() {
        let term = json!({
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["rev"],
            "namespaceSelector": {"matchExpressions": [
                {"key": "team", "operator": "Exists"}]},
            "topologyKey": "zone",
        });
        let p = pod(
            "w0",
            "n1",
            json!({
                "affinity": {
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {}, "topologyKey": "zone"}]},
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a"]}]}]}},
                },
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                     "labelSelector": {"matchLabels": {"app": "web"}}, "minDomains": 2,
                     "nodeTaintsPolicy": "Honor"},
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
                     "labelSelector": {}},
                ],
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                ],
            }),
        );
        let q = pod(
            "w1",
            "n2",
            json!({"volumes": [{"name": "x", "persistentVolumeClaim": {"claimName": "w0-scratch"}}]}),
        );
        let claims: Vec<PersistentVolumeClaim> = serde_json::from_value(json!([
            {"metadata": {"name": "data", "namespace": "ml"},
             "spec": {"volumeName": "pv-a", "accessModes": ["ReadWriteOnce"]}},
            {"metadata": {"name": "w0-scratch", "namespace": "ml"},
             "spec": {"accessModes": ["ReadWriteOncePod"]}},
        ]))
        .unwrap();
        let volumes: Vec<PersistentVolume> = serde_json::from_value(json!([
            {"metadata": {"name": "pv-a"}, "spec": {"nodeAffinity": {"required": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["b"]}]}]}}}},
        ]))
        .unwrap();
        let namespaces: Vec<Namespace> = serde_json::from_value(json!([
            {"metadata": {"name": "ml", "labels": {"team": "x"}}},
        ]))
        .unwrap();
        let extras = K8sExtras {
            namespaces: &namespaces,
            claims: &claims,
            volumes: &volumes,
        };
        let s = Snapshot::from_k8s_with(
            &[node("n1", "a"), node("n2", "a")],
            &[p, q],
            &BTreeMap::new(),
            &extras,
        )
        .unwrap();
        assert_eq!(s.nodes[0].labels["zone"], "a");
        assert_eq!(s.nodes[0].taints[0].effect, "NoSchedule");
        assert_eq!(s.namespaces["ml"]["team"], "x");
        let w0 = s.pod("ml/w0").unwrap();
        assert_eq!(w0.labels["rev"], "2");
        assert_eq!(
            w0.anti_affinity[0].selector,
            Some(vec![
                Requirement::new("app", Operator::In, &["web"]),
                Requirement::new("rev", Operator::In, &["2"]),
            ])
        );
        assert_eq!(w0.affinity[0].selector, Some(vec![]));
        assert_eq!(w0.spread.len(), 1, "ScheduleAnyway is not checked");
        assert!(w0.spread[0].honor_taints && w0.spread[0].honor_node_affinity);
        assert_eq!(w0.spread[0].min_domains, Some(2));
        assert!(w0.tolerates_node(&s.nodes[0]));
        assert!(w0.node_affinity.is_some());
        assert_eq!(w0.volume_affinity[0].claim, "ml/data");
        assert_eq!(w0.exclusive_claims, ["ml/w0-scratch"]);
        assert_eq!(
            w0.claims_to_bind,
            ["ml/w0-scratch"],
            "a claim without a volume yet"
        );
        // w0 on n1 breaks its PV's affinity (zone b), its anti-affinity (w1 in zone a),
        // and the RWOP claim is used by both.
        let v = check(&s).err().unwrap_or_default();
        let kinds: Vec<&str> = v
            .iter()
            .map(|v| match v {
                Violation::AntiAffinityBroken { .. } => "anti",
                Violation::VolumeNodeConflict { .. } => "volume",
                Violation::ClaimUsedTwice { .. } => "rwop",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["anti", "volume", "rwop"], "{}", describe(&v));
        // Without the extras, namespaces have no labels and claims are unknown.
        let plain =
            Snapshot::from_k8s(&[node("n1", "a"), node("n2", "a")], &[], &BTreeMap::new()).unwrap();
        assert!(plain.namespaces.is_empty());
    }
}

mod placement_rules {
    //! Pod anti-affinity, affinity and topology spread, bound volumes' node affinity and
    //! ReadWriteOncePod claims.

    use super::*;

    const ZONE: &str = "zone";
    const HOST: &str = "kubernetes.io/hostname";

    /// Nodes `n1`..: (name, zone or none).
    fn labelled(nodes: &[(&str, Option<&str>)]) -> Vec<NodeView> {
        nodes
            .iter()
            .map(|(name, zone)| {
                let mut n = node(name, 8, 0);
                n.labels.insert(HOST.into(), name.to_string());
                if let Some(z) = zone {
                    n.labels.insert(ZONE.into(), z.to_string());
                }
                n
            })
            .collect()
    }

    fn app(key: &str, node: Option<&str>, app: &str) -> PodView {
        let mut p = pod(key, node, 1);
        p.labels.insert("app".into(), app.into());
        p
    }

    fn app_is(v: &str) -> Option<Selector> {
        Some(vec![Requirement::new("app", Operator::In, &[v])])
    }

    fn term(v: &str, key: &str) -> PodTerm {
        PodTerm {
            selector: app_is(v),
            topology_key: key.into(),
            ..Default::default()
        }
    }

    fn snapshot(nodes: Vec<NodeView>, pods: Vec<PodView>) -> Snapshot {
        Snapshot {
            nodes,
            pods,
            ..Default::default()
        }
    }

    fn transition(before: &Snapshot, after: &Snapshot) -> Vec<Violation> {
        check_transition(before, after, &BTreeSet::new())
            .err()
            .unwrap_or_default()
    }

    fn names(v: &Violation, words: &[&str]) {
        let text = v.to_string();
        for w in words {
            assert!(text.contains(w), "{text:?} lacks {w:?}");
        }
    }

    #[test]
    fn required_anti_affinity_is_broken_from_either_side_in_one_domain() {
        let nodes = labelled(&[("n1", Some("a")), ("n2", Some("a")), ("n3", Some("b"))]);
        let mut web = app("ml/web-0", Some("n1"), "web");
        web.anti_affinity = vec![term("web", ZONE)];
        let ok = snapshot(
            nodes.clone(),
            vec![
                web.clone(),
                app("ml/web-1", Some("n3"), "web"),
                app("ml/db", Some("n2"), "db"),
                app("ml/web-2", None, "web"),
            ],
        );
        assert_eq!(check(&ok), Ok(()), "{}", describe(&violations(&ok)));
        // web-1 placed beside web-0 (whose term repels it): reported under web-0's term.
        let mut broken = ok.clone();
        broken.pods[1].node = Some("n2".into());
        let v = violations(&broken);
        assert_eq!(v.len(), 1, "{}", describe(&v));
        assert!(
            matches!(&v[0], Violation::AntiAffinityBroken { pod, others, .. }
            if pod == "ml/web-0" && others == &["ml/web-1".to_string()])
        );
        names(&v[0], &["ml/web-0", "ml/web-1", "anti-affinity", "zone=a"]);
        // Another namespace: the term names none, so only its own counts.
        let mut elsewhere = broken.clone();
        elsewhere.pods[1].key = "other/web-1".into();
        assert_eq!(check(&elsewhere), Ok(()));
        // namespaceSelector {}: every namespace.
        elsewhere.pods[0].anti_affinity[0].namespace_selector = Some(vec![]);
        assert_eq!(violations(&elsewhere).len(), 1);
        // A namespace selector on labels (kubernetes.io/metadata.name is implied).
        elsewhere.pods[0].anti_affinity[0].namespace_selector =
            Some(vec![Requirement::new("team", Operator::In, &["x"])]);
        assert_eq!(check(&elsewhere), Ok(()));
        elsewhere.namespaces.insert(
            "other".into(),
            BTreeMap::from([("team".into(), "x".into())]),
        );
        assert_eq!(violations(&elsewhere).len(), 1);
        elsewhere.namespaces.clear();
        elsewhere.pods[0].anti_affinity[0].namespace_selector = Some(vec![Requirement::new(
            "kubernetes.io/metadata.name",
            Operator::In,
            &["other"],
        )]);
        assert_eq!(violations(&elsewhere).len(), 1);
    }

    #[test]
    fn nodes_without_the_topology_key_are_in_no_domain() {
        let nodes = labelled(&[("n1", None), ("n2", None)]);
        let mut web = app("ml/web-0", Some("n1"), "web");
        web.anti_affinity = vec![term("web", ZONE)];
        let s = snapshot(nodes, vec![web, app("ml/web-1", Some("n1"), "web")]);
        assert_eq!(check(&s), Ok(()), "{}", describe(&violations(&s)));
        // A term without a label selector matches no pod.
        let mut none = s.clone();
        none.nodes = labelled(&[("n1", Some("a")), ("n2", Some("a"))]);
        none.pods[0].anti_affinity[0].selector = None;
        assert_eq!(check(&none), Ok(()));
        none.pods[0].anti_affinity[0].selector = Some(vec![]);
        assert_eq!(
            violations(&none).len(),
            1,
            "an empty selector matches every pod"
        );
    }

    #[test]
    fn a_newly_bound_pod_needs_its_affinity_met_unless_first_of_its_series() {
        let nodes = labelled(&[("n1", Some("a")), ("n2", Some("b")), ("n3", None)]);
        let mut cache = app("ml/cache", None, "cache");
        cache.affinity = vec![term("web", ZONE)];
        let web = app("ml/web", Some("n1"), "web");
        let before = snapshot(nodes.clone(), vec![web.clone(), cache.clone()]);
        let bind = |node: &str| {
            let mut after = before.clone();
            after.pods[1].node = Some(node.into());
            after
        };
        assert_eq!(transition(&before, &bind("n1")), vec![]);
        let v = transition(&before, &bind("n2"));
        assert_eq!(v.len(), 1, "{}", describe(&v));
        assert!(matches!(&v[0], Violation::AffinityUnmet { pod, .. } if pod == "ml/cache"));
        names(&v[0], &["ml/cache", "n2", "pod affinity", "zone=b"]);
        let v = transition(&before, &bind("n3"));
        assert!(
            matches!(&v[..], [Violation::NoTopologyDomain { key, .. }] if key == ZONE),
            "{}",
            describe(&v)
        );
        names(&v[0], &["ml/cache", "n3", "zone"]);
        // At steady state the partner may have ended since: not a violation.
        let mut later = bind("n1");
        later.pods.remove(0);
        assert_eq!(check(&later), Ok(()));
        // The partner left during the step: it may have left after the binding.
        assert_eq!(transition(&before, &later), vec![]);
        let mut later = bind("n2");
        later.pods.remove(0);
        assert_eq!(transition(&before, &later).len(), 1);
        // First of a series: nothing matches anywhere and it matches its own terms.
        let mut series = app("ml/w0", None, "web");
        series.affinity = vec![term("web", ZONE)];
        let before = snapshot(nodes.clone(), vec![series.clone()]);
        let mut after = before.clone();
        after.pods[0].node = Some("n2".into());
        assert_eq!(transition(&before, &after), vec![]);
        // ...but not when a matching pod ran throughout the step elsewhere.
        let before = snapshot(nodes.clone(), vec![web.clone(), series.clone()]);
        let mut after = before.clone();
        after.pods[1].node = Some("n2".into());
        assert_eq!(transition(&before, &after).len(), 1);
        // A matching pod newly bound in the same step may have come after it.
        let mut before = before.clone();
        before.pods[0].node = None;
        let mut after = before.clone();
        after.pods[0].node = Some("n1".into());
        after.pods[1].node = Some("n2".into());
        assert_eq!(transition(&before, &after), vec![]);
    }

    #[test]
    fn a_spread_with_an_empty_selector_counts_no_placed_pod() {
        // kube-scheduler counts no placed pod for `{}`; the pod itself matches it.
        let nodes = labelled(&[("n1", Some("a")), ("n2", Some("b"))]);
        let mut rule = spread(1, ZONE);
        rule.selector = Some(vec![]);
        let before = snapshot(
            nodes,
            vec![
                spreading("ml/w0", Some("n1"), &rule),
                spreading("ml/w1", Some("n1"), &rule),
                spreading("ml/w2", None, &rule),
            ],
        );
        let mut after = before.clone();
        after.pods[2].node = Some("n1".into());
        let v = transition(&before, &after);
        assert_eq!(v, vec![], "{}", describe(&v));
    }

    fn spread(max_skew: u32, key: &str) -> SpreadRule {
        SpreadRule {
            max_skew,
            topology_key: key.into(),
            selector: app_is("web"),
            honor_node_affinity: true,
            ..Default::default()
        }
    }

    fn spreading(key: &str, node: Option<&str>, rule: &SpreadRule) -> PodView {
        let mut p = app(key, node, "web");
        p.spread = vec![rule.clone()];
        p
    }

    #[test]
    fn do_not_schedule_spread_is_kept_at_the_moment_of_binding() {
        let nodes = labelled(&[("n1", Some("a")), ("n2", Some("b")), ("n3", None)]);
        let rule = spread(1, ZONE);
        // a: 1 pod, b: 0 (n3 has no zone: not a domain, its pod not counted).
        let before = snapshot(
            nodes.clone(),
            vec![
                spreading("ml/w0", Some("n1"), &rule),
                app("ml/w9", Some("n3"), "web"),
                spreading("ml/w1", None, &rule),
            ],
        );
        let bind = |node: &str| {
            let mut after = before.clone();
            after.pods[2].node = Some(node.into());
            after
        };
        assert_eq!(transition(&before, &bind("n2")), vec![]);
        let v = transition(&before, &bind("n1"));
        assert_eq!(v.len(), 1, "{}", describe(&v));
        assert!(matches!(
            &v[0],
            Violation::SpreadOverSkew {
                count: 2,
                min: 0,
                max_skew: 1,
                tolerance: 0,
                ..
            }
        ));
        names(
            &v[0],
            &["ml/w1", "n1", "topology spread", "zone=a", "maxSkew 1"],
        );
        assert!(matches!(
            &transition(&before, &bind("n3"))[..],
            [Violation::NoTopologyDomain { .. }]
        ));
        // Pods of other namespaces or labels do not count.
        let mut other = before.clone();
        other.pods[0].key = "dev/w0".into();
        let mut after = other.clone();
        after.pods[2].node = Some("n1".into());
        assert_eq!(transition(&other, &after), vec![]);
        // Not at steady state: a check of one snapshot says nothing of spread.
        assert_eq!(check(&bind("n1")), Ok(()));
    }

    #[test]
    fn spread_counts_eligible_nodes_and_min_domains() {
        let mut nodes = labelled(&[("n1", Some("a")), ("n2", Some("b"))]);
        nodes[1].taints.push(TaintView {
            key: "gpu".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
        });
        let mut rule = spread(1, ZONE);
        let before = |rule: &SpreadRule| {
            snapshot(
                nodes.clone(),
                vec![
                    spreading("ml/w0", Some("n1"), rule),
                    spreading("ml/w1", None, rule),
                ],
            )
        };
        let after = |b: &Snapshot| {
            let mut a = b.clone();
            a.pods[1].node = Some("n1".into());
            a
        };
        // Zone b counts (taints ignored by default): 2 - 0 > 1.
        let b = before(&rule);
        assert_eq!(transition(&b, &after(&b)).len(), 1);
        // nodeTaintsPolicy Honor: zone b is not eligible, only zone a is.
        rule.honor_taints = true;
        let b = before(&rule);
        assert_eq!(transition(&b, &after(&b)), vec![]);
        // ...unless fewer domains than minDomains: the minimum is then 0.
        rule.min_domains = Some(2);
        let b = before(&rule);
        assert_eq!(transition(&b, &after(&b)).len(), 1);
        // A toleration makes zone b eligible again.
        rule.min_domains = None;
        let mut b = before(&rule);
        for p in &mut b.pods {
            p.tolerations.push(TolerationView {
                key: "gpu".into(),
                exists: true,
                ..Default::default()
            });
        }
        assert_eq!(transition(&b, &after(&b)).len(), 1);
        // nodeAffinityPolicy Honor: a node selector for zone a leaves zone b out.
        for p in &mut b.pods {
            p.node_selector.insert(ZONE.into(), "a".into());
        }
        assert_eq!(transition(&b, &after(&b)), vec![]);
        rule.honor_node_affinity = false;
        rule.honor_taints = false;
        let mut b = before(&rule);
        for p in &mut b.pods {
            p.node_selector.insert(ZONE.into(), "a".into());
        }
        assert_eq!(transition(&b, &after(&b)).len(), 1);
    }

    #[test]
    fn pods_newly_bound_together_are_tolerated_in_the_skew() {
        let nodes = labelled(&[("n1", Some("a")), ("n2", Some("b"))]);
        let rule = spread(1, ZONE);
        let before = snapshot(
            nodes,
            vec![
                spreading("ml/w0", None, &rule),
                spreading("ml/w1", None, &rule),
                spreading("ml/w2", None, &rule),
            ],
        );
        let mut after = before.clone();
        // a: w0, w1; b: none. Bound together: w1 may have come first (skew 1), then w0
        // (skew 2, broken) — but either may be the later one, so each is allowed one.
        after.pods[0].node = Some("n1".into());
        after.pods[1].node = Some("n1".into());
        assert_eq!(transition(&before, &after), vec![]);
        // Three in one zone: skew 3, and each pod has two others newly bound (3 <= 1 + 2).
        after.pods[2].node = Some("n1".into());
        assert_eq!(transition(&before, &after), vec![]);
        // With one already bound before the step, the tolerance is one less.
        let mut before2 = before.clone();
        before2.pods[0].node = Some("n1".into());
        let v = transition(&before2, &after);
        assert_eq!(v.len(), 2, "{}", describe(&v));
        assert!(v.iter().all(|v| matches!(
            v,
            Violation::SpreadOverSkew {
                count: 3,
                tolerance: 1,
                ..
            }
        )));
        names(&v[0], &["+1 for pods bound in the same step"]);
    }

    #[test]
    fn a_pod_stays_on_the_nodes_its_bound_volume_allows() {
        let nodes = labelled(&[("n1", Some("a")), ("n2", Some("b"))]);
        let mut p = pod("ml/p", Some("n1"), 1);
        p.volume_affinity = vec![VolumeAffinity {
            claim: "ml/data".into(),
            terms: vec![
                NodeTerm {
                    match_expressions: vec![Requirement::new(ZONE, Operator::In, &["a"])],
                    ..Default::default()
                },
                NodeTerm {
                    match_fields: vec![Requirement::new("metadata.name", Operator::In, &["n9"])],
                    ..Default::default()
                },
            ],
        }];
        let ok = snapshot(nodes, vec![p]);
        let mut broken = ok.clone();
        broken.pods[0].node = Some("n2".into());
        holds_then_breaks(
            ok,
            broken,
            |v| matches!(v, Violation::VolumeNodeConflict { .. }),
            &["ml/p", "n2", "ml/data", "volume node affinity conflict"],
        );
    }

    #[test]
    fn a_read_write_once_pod_claim_has_one_bound_user() {
        let nodes = labelled(&[("n1", Some("a")), ("n2", Some("b"))]);
        let user = |key: &str, node: Option<&str>| {
            let mut p = pod(key, node, 1);
            p.exclusive_claims = vec!["ml/ckpt".into()];
            p
        };
        let ok = snapshot(nodes, vec![user("ml/a", Some("n1")), user("ml/b", None)]);
        let mut broken = ok.clone();
        broken.pods[1].node = Some("n2".into());
        holds_then_breaks(
            ok,
            broken,
            |v| matches!(v, Violation::ClaimUsedTwice { .. }),
            &["ReadWriteOncePod", "ml/ckpt", "ml/a", "ml/b"],
        );
    }

    #[test]
    fn a_node_attaches_no_more_csi_volumes_than_its_limit() {
        let mut nodes = labelled(&[("n1", Some("a")), ("n2", Some("b"))]);
        nodes[0].volume_limits.insert("ebs".into(), 2);
        let user = |key: &str, node: Option<&str>, volume: &str| {
            let mut p = pod(key, node, 1);
            p.attached_volumes = vec![("ebs".into(), volume.into())];
            p
        };
        // Two pods on one volume count once.
        let ok = snapshot(
            nodes,
            vec![
                user("ml/a", Some("n1"), "v1"),
                user("ml/b", Some("n1"), "v1"),
                user("ml/c", Some("n1"), "v2"),
                user("ml/d", Some("n2"), "v3"),
            ],
        );
        let mut broken = ok.clone();
        broken.pods[3].node = Some("n1".into());
        holds_then_breaks(
            ok,
            broken,
            |v| matches!(v, Violation::VolumeLimitExceeded { .. }),
            &["node n1", "3 volumes", "ebs", "limit of 2"],
        );
    }
}

mod stranded_pods {
    use super::*;

    // `cluster`: two nodes of 8 cpus, `n1` with 4 GPUs, `n2` with none.

    /// What a watch of `cycles` reports over `n` copies of `s`, per snapshot.
    fn watched(cycles: u32, s: &Snapshot, n: usize) -> Vec<Vec<Violation>> {
        let mut watch = StrandedWatch::new(cycles);
        (0..n)
            .map(|_| watch.observe(s).err().unwrap_or_default())
            .collect()
    }

    fn never_stranded(s: &Snapshot) {
        let seen = watched(1, s, 3);
        assert!(seen.iter().all(|v| v.is_empty()), "{seen:?}");
    }

    fn gpu_wanting(key: &str, gpus: Amount) -> PodView {
        let mut p = pod(key, None, 1);
        p.requests.insert(GPU.into(), gpus * 1000);
        p
    }

    #[test]
    fn a_pod_pending_while_it_fits_an_empty_node_is_stranded_after_n_cycles() {
        let s = cluster(vec![gpu_wanting("a/p", 2)]);
        let seen = watched(3, &s, 4);
        assert!(seen[0].is_empty() && seen[1].is_empty(), "{seen:?}");
        for v in &seen[2..] {
            assert!(
                matches!(&v[..], [Violation::Stranded { pod, node, .. }] if pod == "a/p" && node == "n1"),
                "{v:?}"
            );
        }
        let text = seen[2][0].to_string();
        for word in ["a/p", "3 cycles", "empty node n1", "stranded"] {
            assert!(text.contains(word), "{text:?} lacks {word:?}");
        }
        assert!(seen[3][0].to_string().contains("4 cycles"));
    }

    #[test]
    fn a_pod_bound_or_no_longer_fitting_starts_its_count_again() {
        let pending = cluster(vec![pod("a/p", None, 1)]);
        let mut bound = pending.clone();
        bound.pods[0].node = Some("n2".into());
        let mut watch = StrandedWatch::new(2);
        assert_eq!(watch.observe(&pending), Ok(()));
        assert_eq!(watch.observe(&bound), Ok(()));
        assert_eq!(watch.observe(&pending), Ok(()));
        assert!(watch.observe(&pending).is_err());
        // Both nodes taken: nothing is empty, so waiting is no sign of a stuck scheduler.
        let mut full = pending.clone();
        full.pods.push(pod("a/x", Some("n1"), 1));
        full.pods.push(pod("a/y", Some("n2"), 1));
        assert_eq!(watch.observe(&full), Ok(()));
        assert_eq!(watch.observe(&pending), Ok(()));
    }

    #[test]
    fn a_pod_that_fits_no_empty_node_is_not_stranded() {
        // Over every node's cpu; GPUs where the GPU node is taken; a share on no GPU node.
        never_stranded(&cluster(vec![pod("a/big", None, 9)]));
        let mut taken = cluster(vec![gpu_wanting("a/g", 1), pod("a/x", Some("n1"), 1)]);
        never_stranded(&taken);
        taken.pods[0] = pod("a/s", None, 1);
        taken.pods[0].gpu_share = Some(ShareRequest::Milli(500));
        never_stranded(&taken);
        // The GPU node tainted, cordoned, or not selected.
        let mut s = cluster(vec![gpu_wanting("a/g", 1)]);
        s.nodes[0].taints.push(TaintView {
            key: "gpu".into(),
            value: "yes".into(),
            effect: "NoSchedule".into(),
        });
        never_stranded(&s);
        s.pods[0].tolerations.push(TolerationView {
            key: "gpu".into(),
            exists: true,
            ..Default::default()
        });
        assert!(stranded(&s).contains_key("a/g"), "a toleration lets it in");
        s.nodes[0].unschedulable = true;
        never_stranded(&s);
        s.nodes[0].unschedulable = false;
        s.nodes[0].reserved = true;
        never_stranded(&s);
        s.nodes[0].reserved = false;
        s.pods[0].node_selector.insert("pool".into(), "a".into());
        never_stranded(&s);
    }

    #[test]
    fn gated_claimed_and_queued_pods_and_pods_with_pod_rules_are_left_out() {
        let base = cluster(vec![pod("a/p", None, 1)]);
        assert!(stranded(&base).contains_key("a/p"));
        let left_out: [fn(&mut PodView); 7] = [
            |p| p.gated = true,
            |p| p.resource_claims = vec!["a/c".into()],
            |p| p.claims_to_bind = vec!["a/scratch".into()],
            |p| p.queue = Some("cq".into()),
            |p| p.single_numa_node = true,
            |p| p.gpu_share = Some(ShareRequest::MemoryMib(20_480)),
            |p| {
                p.affinity = vec![PodTerm {
                    selector: Some(vec![]),
                    topology_key: "zone".into(),
                    ..Default::default()
                }]
            },
        ];
        for change in left_out {
            let mut s = base.clone();
            change(&mut s.pods[0]);
            never_stranded(&s);
        }
    }

    fn gang_of(key: &str, pods: usize, gpus: Amount, min_member: u32) -> Snapshot {
        let mut s = cluster(
            (0..pods)
                .map(|i| {
                    let mut p = gpu_wanting(&format!("a/{key}-{i}"), gpus);
                    p.gang = Some(format!("a/{key}"));
                    p
                })
                .collect(),
        );
        s.nodes.push(node("n3", 8, 4));
        s.gangs.push(GangView {
            key: format!("a/{key}"),
            min_member,
            total: Some(pods as u32),
            ..Default::default()
        });
        s
    }

    #[test]
    fn a_gang_is_stranded_only_when_its_minimum_fits_empty_nodes_whole() {
        // Two GPU nodes: two members of 4 GPUs fit, three do not.
        let fits = gang_of("g", 3, 4, 2);
        assert_eq!(stranded(&fits).len(), 2, "{:?}", stranded(&fits));
        never_stranded(&gang_of("g", 3, 4, 3));
        // Fewer members than its minimum exist yet.
        never_stranded(&gang_of("g", 1, 1, 2));
        // A required rack that the two GPU nodes do not share.
        let mut racks = fits.clone();
        racks.gangs[0].required_domain = Some("rack".into());
        racks.nodes[0].labels.insert("rack".into(), "r1".into());
        racks.nodes[2].labels.insert("rack".into(), "r2".into());
        never_stranded(&racks);
        racks.nodes[2].labels.insert("rack".into(), "r1".into());
        assert_eq!(stranded(&racks).len(), 2);
        // A member bound, an undeclared gang, roles or slices: left out.
        let mut running = fits.clone();
        running.pods[2].node = Some("n2".into());
        running.pods[2].requests.remove(GPU);
        never_stranded(&running);
        let mut undeclared = fits.clone();
        undeclared.gangs.clear();
        never_stranded(&undeclared);
        let mut roles = fits.clone();
        roles.gangs[0].roles_or_slices = true;
        never_stranded(&roles);
        let mut backing_off = fits;
        backing_off.gangs[0].timed_out = true;
        never_stranded(&backing_off);
    }
}
