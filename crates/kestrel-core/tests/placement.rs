//! Placement behaviour, feature by feature, as kube-scheduler users expect it.

use kestrel_core::*;

fn gpu_node(name: &str, gpus: u32) -> NodeSpec {
    let mut node = NodeSpec::new(name, Resources::new(64_000, 512 << 30));
    // Four GPUs per NUMA node, as on DGX-class servers.
    node.gpus = GpuTopology::Flat.devices("H100", 81_559, gpus).0;
    for gpu in &mut node.gpus {
        gpu.numa_node = gpu.index / 4;
    }
    node.labels.insert(GPU_PRODUCT_LABEL.into(), "H100".into());
    node.taints.push(Taint {
        key: GPU_RESOURCE.into(),
        value: "true".into(),
        effect: TaintEffect::NoSchedule,
    });
    node
}

fn cpu_node(name: &str) -> NodeSpec {
    NodeSpec::new(name, Resources::new(16_000, 64 << 30))
}

fn gpu_toleration() -> Toleration {
    Toleration {
        key: GPU_RESOURCE.into(),
        operator: TolerationOperator::Exists,
        value: String::new(),
        effect: None,
    }
}

fn pod(name: &str, cpu: i64, gpu: GpuRequest) -> PodSpec {
    let mut p = PodSpec::new(
        "team",
        name,
        Demand {
            resources: Resources::new(cpu, 1 << 30),
            gpu,
        },
    );
    if gpu != GpuRequest::None {
        p.constraints.tolerations.push(gpu_toleration());
    }
    p
}

fn scheduler(policy: Policy, nodes: Vec<NodeSpec>) -> Scheduler {
    let mut s = Scheduler::new(SchedulerConfig {
        policy,
        seed: 1,
        ..Default::default()
    });
    for n in nodes {
        s.add_node(n).unwrap();
    }
    s
}

fn node_of(s: &Scheduler, id: PodId) -> String {
    match &s.pod(id).phase {
        PodPhase::Bound { node, .. } => s.cluster().node(*node).spec.name.clone(),
        other => panic!("not bound: {other:?}"),
    }
}

#[test]
fn gpu_taint_keeps_cpu_pods_off_gpu_nodes() {
    let mut s = scheduler(
        Policy::Kestrel,
        vec![gpu_node("gpu-0", 8), cpu_node("cpu-0")],
    );
    let web = s.submit(pod("web", 1000, GpuRequest::None), 0);
    let train = s.submit(pod("train", 1000, GpuRequest::Whole(8)), 0);
    s.schedule(0);
    assert_eq!(node_of(&s, web), "cpu-0");
    assert_eq!(node_of(&s, train), "gpu-0");
    // A second CPU pod that does not fit the CPU node stays pending, with the taint named.
    let big = s.submit(pod("big", 20_000, GpuRequest::None), 1);
    let d = s.schedule(1);
    assert_eq!(d.unschedulable.len(), 1);
    let reason = s.pod(big).pending_reason.clone().unwrap();
    let text = reason.to_string();
    assert!(text.starts_with("0/2 nodes are available"), "{text}");
    assert!(text.contains("1 Insufficient cpu"), "{text}");
    assert!(
        text.contains("1 node(s) had untolerated taint {nvidia.com/gpu: true}"),
        "{text}"
    );
    assert!(reason.is_capacity());
}

#[test]
fn whole_gpus_get_concrete_devices_on_one_numa_node() {
    let mut s = scheduler(Policy::Kestrel, vec![gpu_node("gpu-0", 8)]);
    let a = s.submit(pod("a", 100, GpuRequest::Whole(2)), 0);
    let b = s.submit(pod("b", 100, GpuRequest::Whole(4)), 0);
    let d = s.schedule(0);
    let gpus = |id: PodId| {
        d.bindings
            .iter()
            .find(|b| b.pod == id)
            .unwrap()
            .gpus
            .indices()
    };
    let (ga, gb) = (gpus(a), gpus(b));
    assert_eq!(ga.len(), 2);
    assert_eq!(gb.len(), 4);
    // a sits on one NUMA node; b takes the other, whole.
    assert!(ga.iter().all(|&g| g / 4 == ga[0] / 4), "{ga:?}");
    assert!(gb.iter().all(|&g| g / 4 == gb[0] / 4), "{gb:?}");
    assert_ne!(ga[0] / 4, gb[0] / 4);
}

#[test]
fn shares_never_sit_on_a_whole_gpu_and_pack_together() {
    let mut s = scheduler(Policy::Kestrel, vec![gpu_node("gpu-0", 4)]);
    let whole = s.submit(pod("whole", 100, GpuRequest::Whole(1)), 0);
    let s1 = s.submit(pod("s1", 100, GpuRequest::Shared { milli: 300 }), 0);
    let s2 = s.submit(pod("s2", 100, GpuRequest::Shared { milli: 600 }), 0);
    let d = s.schedule(0);
    assert_eq!(d.bindings.len(), 3);
    let gpu = |id: PodId| {
        d.bindings
            .iter()
            .find(|b| b.pod == id)
            .unwrap()
            .gpus
            .indices()[0]
    };
    assert_ne!(gpu(whole), gpu(s1));
    assert_eq!(gpu(s1), gpu(s2), "shares pack onto one device");
    // Two more shares of 600 cannot join it and take one device each.
    let s3 = s.submit(pod("s3", 100, GpuRequest::Shared { milli: 600 }), 1);
    let s4 = s.submit(pod("s4", 100, GpuRequest::Shared { milli: 600 }), 1);
    s.schedule(1);
    assert_ne!(node_of(&s, s3), "");
    // 0.1 + 0.4 + 0.4 GPU are free, but no whole device: fragmented, and said so.
    let more = s.submit(pod("more", 100, GpuRequest::Whole(1)), 2);
    s.schedule(2);
    let reason = s.pod(more).pending_reason.clone().unwrap().to_string();
    assert!(reason.contains("Insufficient nvidia.com/gpu"), "{reason}");
    s.finish(s1).unwrap();
    let other = s.submit(pod("other", 100, GpuRequest::Whole(1)), 3);
    s.schedule(3);
    let reason = s.pod(other).pending_reason.clone().unwrap().to_string();
    assert!(reason.contains("split across shared devices"), "{reason}");
    // When the shares on a device finish, it is whole again.
    s.finish(s2).unwrap();
    s.finish(s4).unwrap();
    s.schedule(4);
    assert_eq!(node_of(&s, more), "gpu-0");
}

#[test]
fn binpack_fills_one_node_and_spread_uses_both() {
    for (policy, same) in [
        (Policy::BinPack, true),
        (Policy::Spread, false),
        (Policy::Kestrel, true),
    ] {
        let mut s = scheduler(policy, vec![gpu_node("a", 8), gpu_node("b", 8)]);
        let p1 = s.submit(pod("p1", 1000, GpuRequest::Whole(1)), 0);
        s.schedule(0);
        let p2 = s.submit(pod("p2", 1000, GpuRequest::Whole(1)), 1);
        s.schedule(1);
        assert_eq!(node_of(&s, p1) == node_of(&s, p2), same, "{policy}");
    }
}

#[test]
fn fragmentation_is_named_when_free_gpus_are_spread_thin() {
    let mut s = scheduler(Policy::Spread, vec![gpu_node("a", 8), gpu_node("b", 8)]);
    for i in 0..2 {
        s.submit(pod(&format!("fill-{i}"), 100, GpuRequest::Whole(5)), 0);
    }
    s.schedule(0);
    let big = s.submit(pod("big", 100, GpuRequest::Whole(4)), 1);
    s.schedule(1);
    let reason = s.pod(big).pending_reason.clone().unwrap();
    assert_eq!(reason.gpu_fragmentation, Some((6, 3)));
    assert!(
        reason.to_string().contains("6 whole GPUs are free"),
        "{reason}"
    );
}

#[test]
fn node_affinity_required_and_preferred() {
    let mut a = cpu_node("a");
    a.labels.insert("tier".into(), "gold".into());
    a.labels.insert("gen".into(), "5".into());
    let mut b = cpu_node("b");
    b.labels.insert("tier".into(), "silver".into());
    b.labels.insert("gen".into(), "3".into());
    let term = |key: &str, op, values: &[&str]| NodeSelectorTerm {
        match_expressions: vec![Requirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
        match_fields: vec![],
    };
    // Spread would pick either; preferred affinity for silver wins.
    let mut s = scheduler(Policy::Spread, vec![a.clone(), b.clone()]);
    let mut p = pod("p", 100, GpuRequest::None);
    p.constraints.affinity.preferred = vec![(50, term("tier", SelectorOperator::In, &["silver"]))];
    let id = s.submit(p, 0);
    s.schedule(0);
    assert_eq!(node_of(&s, id), "b");
    // Required Gt.
    let mut p = pod("q", 100, GpuRequest::None);
    p.constraints.affinity.required = Some(vec![term("gen", SelectorOperator::Gt, &["4"])]);
    let id = s.submit(p, 1);
    s.schedule(1);
    assert_eq!(node_of(&s, id), "a");
    // Nothing matches: affinity mismatch on both nodes.
    let mut p = pod("r", 100, GpuRequest::None);
    p.constraints.affinity.required = Some(vec![term("tier", SelectorOperator::In, &["bronze"])]);
    let id = s.submit(p, 2);
    s.schedule(2);
    let reason = s.pod(id).pending_reason.clone().unwrap();
    assert_eq!(reason.reasons, vec![(NodeReason::AffinityMismatch, 2)]);
    assert!(!reason.is_capacity(), "configuration, not capacity");
}

#[test]
fn hostname_selector_is_checked_node_by_node() {
    let mut s = scheduler(
        Policy::Kestrel,
        vec![cpu_node("a"), cpu_node("b"), cpu_node("c")],
    );
    let mut p = pod("pinned", 100, GpuRequest::None);
    p.constraints
        .node_selector
        .insert(HOSTNAME_LABEL.into(), "b".into());
    let id = s.submit(p, 0);
    s.schedule(0);
    assert_eq!(node_of(&s, id), "b");
}

#[test]
fn runtime_class_selector_tolerations_and_mismatch() {
    let mut kata = cpu_node("kata-0");
    kata.labels.insert("runtime".into(), "kata".into());
    kata.taints.push(Taint {
        key: "sandbox".into(),
        value: String::new(),
        effect: TaintEffect::NoSchedule,
    });
    let mut s = scheduler(Policy::Kestrel, vec![cpu_node("plain"), kata]);
    let rc = RuntimeClassScheduling {
        name: "kata".into(),
        node_selector: [("runtime".to_string(), "kata".to_string())].into(),
        tolerations: vec![Toleration {
            key: "sandbox".into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        }],
    };
    let mut p = pod("sandboxed", 100, GpuRequest::None);
    p.constraints.runtime_class = Some(rc.clone());
    let id = s.submit(p, 0);
    s.schedule(0);
    assert_eq!(node_of(&s, id), "kata-0");
    let mut wrong = rc;
    wrong.node_selector = [("runtime".to_string(), "gvisor".to_string())].into();
    let mut p = pod("nowhere", 100, GpuRequest::None);
    p.constraints.runtime_class = Some(wrong);
    let id = s.submit(p, 1);
    s.schedule(1);
    let text = s.pod(id).pending_reason.clone().unwrap().to_string();
    assert!(
        text.contains("didn't match RuntimeClass \"kata\""),
        "{text}"
    );
}

#[test]
fn cordon_pod_count_and_prefer_no_schedule() {
    let mut a = cpu_node("a");
    a.max_pods = 1;
    let mut b = cpu_node("b");
    b.taints.push(Taint {
        key: "spot".into(),
        value: String::new(),
        effect: TaintEffect::PreferNoSchedule,
    });
    let mut s = scheduler(Policy::Spread, vec![a, b]);
    let first = s.submit(pod("first", 100, GpuRequest::None), 0);
    s.schedule(0);
    assert_eq!(
        node_of(&s, first),
        "a",
        "PreferNoSchedule steers away from b"
    );
    let second = s.submit(pod("second", 100, GpuRequest::None), 1);
    s.schedule(1);
    assert_eq!(node_of(&s, second), "b", "a is full by pod count");
    s.set_unschedulable("b", true).unwrap();
    let third = s.submit(pod("third", 100, GpuRequest::None), 2);
    s.schedule(2);
    let text = s.pod(third).pending_reason.clone().unwrap().to_string();
    assert!(
        text.contains("1 Too many pods") && text.contains("1 node(s) were unschedulable"),
        "{text}"
    );
    s.set_unschedulable("b", false).unwrap();
    s.schedule(3);
    assert_eq!(node_of(&s, third), "b");
}

#[test]
fn priority_orders_the_queue_and_removed_nodes_requeue_their_pods() {
    let mut s = scheduler(Policy::Kestrel, vec![gpu_node("a", 8)]);
    let mut low = pod("low", 100, GpuRequest::Whole(8));
    low.priority = 1;
    let mut high = pod("high", 100, GpuRequest::Whole(8));
    high.priority = 100;
    let low = s.submit(low, 0);
    let high = s.submit(high, 1);
    s.schedule(1);
    assert_eq!(node_of(&s, high), "a");
    assert_eq!(s.pod(low).phase, PodPhase::Pending);
    assert_eq!(s.pending(), vec![low]);
    let evicted = s.remove_node("a").unwrap();
    assert_eq!(evicted, vec![high]);
    assert_eq!(
        s.pending(),
        vec![high, low],
        "priority order, nothing dropped"
    );
    s.add_node(gpu_node("b", 8)).unwrap();
    s.schedule(2);
    assert_eq!(node_of(&s, high), "b");
    assert!(matches!(
        s.remove_node("a"),
        Err(ClusterError::UnknownNode(_))
    ));
    assert!(matches!(
        s.add_node(gpu_node("b", 8)),
        Err(ClusterError::DuplicateNode(_))
    ));
}

#[test]
fn invalid_nodes_are_refused_with_the_field_named() {
    let mut node = gpu_node("bad", 2);
    node.gpus[1].index = 0;
    let err = Scheduler::new(SchedulerConfig::default())
        .add_node(node)
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("\"bad\"") && text.contains("gpus[].index"),
        "{text}"
    );
}

#[test]
fn an_empty_cluster_explains_itself() {
    let mut s = Scheduler::new(SchedulerConfig::default());
    let id = s.submit(pod("p", 100, GpuRequest::None), 0);
    s.schedule(0);
    let text = s.pod(id).pending_reason.clone().unwrap().to_string();
    assert_eq!(text, "0/0 nodes are available: the cluster has no nodes");
}

#[test]
fn extended_resources_are_counted() {
    let mut a = cpu_node("a");
    a.allocatable.set_extended("rdma/ib", 1);
    let mut s = scheduler(Policy::Kestrel, vec![a]);
    let mut p = pod("p", 100, GpuRequest::None);
    p.demand.resources.set_extended("rdma/ib", 1);
    let first = s.submit(p.clone(), 0);
    let second = s.submit(p, 0);
    s.schedule(0);
    assert_eq!(node_of(&s, first), "a");
    let text = s.pod(second).pending_reason.clone().unwrap().to_string();
    assert!(text.contains("1 Insufficient rdma/ib"), "{text}");
}

#[test]
fn the_headline_is_the_shortfall_not_the_excluded_nodes() {
    // Two tainted CPU-only nodes outnumber the one GPU node that is merely full.
    let tainted = |name: &str| {
        let mut n = cpu_node(name);
        n.taints.push(Taint {
            key: "dedicated".into(),
            value: "db".into(),
            effect: TaintEffect::NoSchedule,
        });
        n
    };
    let mut s = scheduler(
        Policy::Kestrel,
        vec![gpu_node("gpu-0", 1), tainted("a"), tainted("b")],
    );
    s.submit(pod("q", 100, GpuRequest::Whole(1)), 0);
    let id = s.submit(pod("r", 100, GpuRequest::Whole(1)), 0);
    s.schedule(0);
    let reason = s.pod(id).pending_reason.clone().unwrap();
    assert_eq!(
        reason.reasons[0].1, 2,
        "the taint is the most common reason"
    );
    assert_eq!(reason.headline(), "Insufficient nvidia.com/gpu");
}

#[test]
fn update_node_keeps_pods_and_recomputes_free_capacity() {
    let mut s = scheduler(Policy::Kestrel, vec![gpu_node("a", 8)]);
    let p = s.submit(pod("p", 10_000, GpuRequest::Whole(4)), 0);
    s.schedule(0);
    let mut grown = gpu_node("a", 8);
    grown.allocatable.cpu_milli = 128_000;
    grown.labels.insert("pool".into(), "big".into());
    s.update_node(grown).unwrap();
    let node = s.cluster().node(s.cluster().id_of("a").unwrap());
    assert_eq!(node.free.cpu_milli, 118_000);
    assert_eq!(node.free_whole_gpus(), 4);
    assert_eq!(node_of(&s, p), "a");
    // A selector on the new label now matches.
    let mut q = pod("q", 100, GpuRequest::Whole(4));
    q.constraints
        .node_selector
        .insert("pool".into(), "big".into());
    let q = s.submit(q, 1);
    s.schedule(1);
    assert_eq!(node_of(&s, q), "a");
    // update_node on an unknown name adds it.
    s.update_node(cpu_node("new")).unwrap();
    assert_eq!(s.cluster().len(), 2);
}

#[test]
fn restored_pods_count_even_beyond_capacity_and_unbind_requeues() {
    let mut s = scheduler(Policy::Kestrel, vec![gpu_node("a", 2)]);
    let gpus = GpuAssignment::Whole(vec![1]);
    let old = s
        .restore_bound(
            pod("old", 60_000, GpuRequest::Whole(1)),
            "a",
            Some(gpus.clone()),
            0,
        )
        .unwrap();
    assert!(matches!(&s.pod(old).phase, PodPhase::Bound { gpus: g, .. } if *g == gpus));
    // Kubernetes placed more than the node declares: counted, and nothing more fits.
    s.restore_bound(pod("extra", 10_000, GpuRequest::None), "a", None, 0)
        .unwrap();
    let node = s.cluster().node(s.cluster().id_of("a").unwrap());
    assert_eq!(node.free.cpu_milli, -6_000);
    assert_eq!(node.gpus[1].free_milli, 0);
    let waiting = s.submit(pod("waiting", 1_000, GpuRequest::Whole(1)), 1);
    s.schedule(1);
    assert_eq!(s.pod(waiting).phase, PodPhase::Pending);
    assert!(matches!(
        s.restore_bound(pod("lost", 1, GpuRequest::None), "gone", None, 1),
        Err(ClusterError::UnknownNode(_))
    ));
    // The API refused old's binding after all: its capacity returns, it waits again.
    s.unbind(old).unwrap();
    assert_eq!(s.pod(old).phase, PodPhase::Pending);
    assert!(s.unbind(old).is_err(), "not bound any more");
    assert_eq!(s.pending(), vec![old, waiting]);
}

#[test]
fn room_made_by_preemption_is_held_for_the_preemptor() {
    // cpu-only node of 16 cores: l1 (10) and low l2 (2) run, 4 free; low l3 (4) waits behind
    // the high-priority pod p (6), which needs l2's room on top of the free 4.
    let mut s = scheduler(Policy::BinPack, vec![cpu_node("n")]);
    let mut first = pod("l1", 10_000, GpuRequest::None);
    first.priority = 1000; // not a candidate victim
    let l1 = s.submit(first, 0);
    let l2 = s.submit(pod("l2", 2_000, GpuRequest::None), 0);
    assert_eq!(s.schedule(0).bindings.len(), 2);
    let mut high = pod("p", 6_000, GpuRequest::None);
    high.priority = 1000;
    let p = s.submit(high, 1);
    let l3 = s.submit(pod("l3", 4_000, GpuRequest::None), 1);
    let d = s.schedule(1);
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(d.preemptions[0].victims.len(), 1);
    assert_eq!(d.preemptions[0].victims[0].pod, l2);
    // l3 would fit the free 4 cores, but they are promised to p.
    assert!(d.bindings.is_empty(), "{:?}", d.bindings);
    let why = s.pod(l3).pending_reason.as_ref().unwrap().to_string();
    assert!(why.contains("promised to preemptor team/p"), "{why}");
    // The victim leaves (after its grace): p takes the room; l2 and l3 wait.
    s.evict(l2).unwrap();
    let d = s.schedule(2);
    let bound: Vec<PodId> = d.bindings.iter().map(|b| b.pod).collect();
    assert_eq!(bound, vec![p]);
    assert!(d.preemptions.is_empty());
    assert_eq!(node_of(&s, l1), "n");
    // Once p is bound, the hold is gone: l2 fits the 2 cores that are left.
    s.finish(l1).unwrap();
    let d = s.schedule(3);
    let mut bound: Vec<PodId> = d.bindings.iter().map(|b| b.pod).collect();
    bound.sort();
    assert_eq!(bound, vec![l2, l3]);
}

#[test]
fn mig_slices_are_extended_resources_apart_from_whole_gpus() {
    const MIG: &str = "nvidia.com/mig-1g.10gb";
    // A MIG node in the "mixed" strategy: 2 whole GPUs plus 7 slices of another.
    let mut mig = gpu_node("mig-0", 2);
    mig.allocatable.set_extended(MIG, 7);
    let mut s = scheduler(Policy::Kestrel, vec![gpu_node("gpu-0", 8), mig]);
    let slice = |name: &str| {
        let mut p = pod(name, 100, GpuRequest::None);
        p.constraints.tolerations.push(gpu_toleration());
        p.demand.resources.set_extended(MIG, 1);
        p
    };
    let slices: Vec<PodId> = (0..8)
        .map(|i| s.submit(slice(&format!("s{i}")), 0))
        .collect();
    let whole = s.submit(pod("whole", 100, GpuRequest::Whole(2)), 0);
    s.schedule(0);
    for &id in &slices[..7] {
        assert_eq!(node_of(&s, id), "mig-0", "only the node advertising slices");
        match &s.pod(id).phase {
            PodPhase::Bound { gpus, .. } => assert_eq!(*gpus, GpuAssignment::None),
            other => panic!("{other:?}"),
        }
    }
    // The eighth finds no slice left, though gpu-0 has 8 free whole GPUs.
    let text = s.pod(slices[7]).pending_reason.clone().unwrap().to_string();
    assert!(text.contains(&format!("2 Insufficient {MIG}")), "{text}");
    // Slices took none of the node's whole GPUs, and whole GPUs none of its slices.
    let mig_node = s.cluster().node(s.cluster().id_of("mig-0").unwrap());
    assert_eq!(mig_node.free.extended(MIG), 0);
    let whole_on = node_of(&s, whole);
    let free_whole = |name: &str| {
        s.cluster()
            .node(s.cluster().id_of(name).unwrap())
            .free_whole_gpus()
    };
    assert_eq!(
        free_whole("mig-0") + free_whole("gpu-0"),
        8,
        "only the 2-GPU pod ({whole_on}) holds whole GPUs"
    );
}

fn single_numa(name: &str, gpu: GpuRequest) -> PodSpec {
    let mut p = pod(name, 100, gpu);
    p.constraints.single_numa_node = true;
    p
}

fn bound_gpus(s: &Scheduler, id: PodId) -> Vec<u32> {
    match &s.pod(id).phase {
        PodPhase::Bound { gpus, .. } => gpus.indices(),
        other => panic!("not bound: {other:?}"),
    }
}

#[test]
fn single_numa_node_pods_wait_rather_than_straddle_sockets() {
    let mut s = scheduler(Policy::Kestrel, vec![gpu_node("gpu-0", 8)]);
    // Two GPUs in use on each NUMA node: four free, two per socket.
    for (name, gpus) in [("x", vec![0, 1]), ("y", vec![4, 5])] {
        s.restore_bound(
            pod(name, 100, GpuRequest::Whole(2)),
            "gpu-0",
            Some(GpuAssignment::Whole(gpus)),
            0,
        )
        .unwrap();
    }
    let aligned = s.submit(single_numa("aligned", GpuRequest::Whole(4)), 0);
    s.schedule(0);
    let reason = s.pod(aligned).pending_reason.clone().unwrap();
    assert_eq!(reason.reasons, vec![(NodeReason::numa_unaligned(), 1)]);
    assert!(reason.is_capacity());
    let text = reason.to_string();
    assert!(
        text.contains("1 Insufficient nvidia.com/gpu on one NUMA node (single-numa-node)"),
        "{text}"
    );
    assert!(!s.could_place_on(&s.pod(aligned).spec, s.cluster().id_of("gpu-0").unwrap()));
    // Without the annotation the same request takes the four GPUs across both sockets.
    let plain = s.submit(pod("plain", 100, GpuRequest::Whole(4)), 1);
    s.schedule(1);
    assert_eq!(bound_gpus(&s, plain), vec![2, 3, 6, 7]);
    // A fresh node gives the aligned pod one socket's GPUs.
    s.add_node(gpu_node("gpu-1", 8)).unwrap();
    s.schedule(2);
    assert_eq!(node_of(&s, aligned), "gpu-1");
    let gpus = bound_gpus(&s, aligned);
    assert!(gpus == [0, 1, 2, 3] || gpus == [4, 5, 6, 7], "{gpus:?}");
}

#[test]
fn single_numa_node_requests_larger_than_a_socket_fit_nowhere() {
    let mut s = scheduler(
        Policy::BinPack,
        vec![gpu_node("gpu-0", 8), gpu_node("gpu-1", 8)],
    );
    let eight = s.submit(single_numa("eight", GpuRequest::Whole(8)), 0);
    let four = s.submit(single_numa("four", GpuRequest::Whole(4)), 0);
    s.schedule(0);
    let reason = s.pod(eight).pending_reason.clone().unwrap();
    assert_eq!(reason.reasons, vec![(NodeReason::numa_unaligned(), 2)]);
    assert_eq!(bound_gpus(&s, four).len(), 4);
    assert!(bound_gpus(&s, four)
        .iter()
        .all(|g| g / 4 == bound_gpus(&s, four)[0] / 4));
}

#[test]
fn single_numa_node_keeps_gpus_beside_their_nics() {
    // A DGX-like node whose first switch's NICs hang off the other socket: GPUs 0 and 1
    // cannot be NUMA-aligned with their NICs.
    let mut node = gpu_node("odd", 8);
    (node.gpus, node.nics) = GpuTopology::DgxH100.devices("H100", 81_559, 8);
    for nic in node.nics.iter_mut().filter(|n| n.pcie_switch == Some(0)) {
        nic.numa_node = 1;
    }
    assert_eq!(node.max_gpus_on_one_numa(), 4);
    let mut s = scheduler(Policy::Kestrel, vec![node]);
    let plain_share = s.submit(
        pod("plain-share", 100, GpuRequest::Shared { milli: 500 }),
        0,
    );
    s.schedule(0);
    assert_eq!(
        bound_gpus(&s, plain_share),
        vec![0],
        "no alignment asked: any device"
    );
    let share = s.submit(single_numa("share", GpuRequest::Shared { milli: 500 }), 0);
    s.schedule(0);
    assert_eq!(
        bound_gpus(&s, share),
        vec![2],
        "the first device beside its NICs"
    );
    // Socket 0 keeps GPUs 2 and 3 usable by aligned pods (one holds a share); socket 1
    // has four. A 4-GPU aligned pod takes socket 1; a second finds no socket.
    let first = s.submit(single_numa("first", GpuRequest::Whole(4)), 1);
    let second = s.submit(single_numa("second", GpuRequest::Whole(2)), 1);
    s.schedule(1);
    assert_eq!(bound_gpus(&s, first), vec![4, 5, 6, 7]);
    let reason = s.pod(second).pending_reason.clone().unwrap();
    assert_eq!(reason.reasons, vec![(NodeReason::numa_unaligned(), 1)]);
}

/// A GPU node whose devices have `memory_mib` each.
fn memory_node(name: &str, gpus: u32, memory_mib: u64) -> NodeSpec {
    let mut node = gpu_node(name, gpus);
    for gpu in &mut node.gpus {
        gpu.memory_mib = memory_mib;
    }
    node
}

fn gpu_memory(mib: u64) -> GpuRequest {
    GpuRequest::Memory { mib }
}

fn assignment(s: &Scheduler, id: PodId) -> GpuAssignment {
    match &s.pod(id).phase {
        PodPhase::Bound { gpus, .. } => gpus.clone(),
        other => panic!("not bound: {other:?}"),
    }
}

#[test]
fn memory_shares_convert_at_the_device_memory() {
    assert_eq!(memory_share_milli(20_480, 81_920), Some(250));
    assert_eq!(memory_share_milli(20_480, 40_960), Some(500));
    assert_eq!(memory_share_milli(20_480, 16_384), None);
    assert_eq!(memory_share_milli(30_000, 81_920), Some(367), "rounded up");
    assert_eq!(
        memory_share_milli(1, 81_920),
        Some(1),
        "at least one thousandth"
    );
    assert_eq!(memory_share_milli(81_920, 81_920), Some(1000));
    for (memory, milli) in [(81_920, 250), (40_960, 500)] {
        for policy in Policy::ALL {
            let mut s = scheduler(policy, vec![memory_node("gpu-0", 2, memory)]);
            let p = s.submit(pod("p", 100, gpu_memory(20_480)), 0);
            s.schedule(0);
            let GpuAssignment::Shared { milli: got, .. } = assignment(&s, p) else {
                panic!("a share by memory is bound as a share");
            };
            assert_eq!(got, milli, "{policy} on {memory} MiB");
            assert_eq!(s.gpu_milli(p), milli as u64);
        }
    }
}

#[test]
fn memory_shares_wait_for_a_device_with_the_memory_and_say_so() {
    let mut s = scheduler(
        Policy::Kestrel,
        vec![
            memory_node("t4-0", 4, 16_384),
            memory_node("t4-1", 1, 16_384),
        ],
    );
    let big = s.submit(pod("big", 100, gpu_memory(20_480)), 0);
    let small = s.submit(pod("small", 100, gpu_memory(8_192)), 0);
    s.schedule(0);
    assert_eq!(s.pod(big).phase, PodPhase::Pending);
    assert_eq!(
        assignment(&s, small),
        GpuAssignment::Shared {
            index: 0,
            milli: 500
        }
    );
    let reason = s.pod(big).pending_reason.clone().unwrap();
    assert_eq!(
        reason.reasons,
        vec![(NodeReason::gpu_memory_short(20_480), 2)]
    );
    assert_eq!(
        reason.to_string(),
        "0/2 nodes are available: 2 Insufficient GPU memory on one device (needs 20480 MiB)."
    );
    // A node with enough memory per device arrives: it goes there.
    s.add_node(memory_node("a100", 1, 40_960)).unwrap();
    s.schedule(1);
    assert_eq!(node_of(&s, big), "a100");
    assert_eq!(s.gpu_milli(big), 500);
}

#[test]
fn memory_shares_never_join_a_whole_gpu_and_release_exactly() {
    let mut s = scheduler(Policy::Kestrel, vec![memory_node("gpu-0", 2, 81_920)]);
    let whole = s.submit(pod("whole", 100, GpuRequest::Whole(1)), 0);
    let m1 = s.submit(pod("m1", 100, gpu_memory(30_000)), 0);
    let m2 = s.submit(pod("m2", 100, gpu_memory(40_960)), 0);
    s.schedule(0);
    let device = |s: &Scheduler, id: PodId| assignment(s, id).indices()[0];
    assert_ne!(
        device(&s, whole),
        device(&s, m1),
        "never beside a whole GPU"
    );
    assert_eq!(
        device(&s, m1),
        device(&s, m2),
        "shares pack onto one device"
    );
    let node_id = s.cluster().id_of("gpu-0").unwrap();
    let shared = device(&s, m1) as usize;
    assert_eq!(
        s.cluster().node(node_id).gpus[shared].free_milli,
        1000 - 367 - 500
    );
    // 133 thousandths (10.9 GB) are left on the shared device: 20 GiB fits nowhere, and
    // the whole GPU is taken.
    let m3 = s.submit(pod("m3", 100, gpu_memory(20_480)), 1);
    s.schedule(1);
    let reason = s.pod(m3).pending_reason.clone().unwrap().to_string();
    assert!(reason.contains("1 Insufficient nvidia.com/gpu"), "{reason}");
    // Nor does a whole GPU fit on the device with shares on it.
    let whole2 = s.submit(pod("whole2", 100, GpuRequest::Whole(1)), 1);
    s.schedule(1);
    assert_eq!(s.pod(whole2).phase, PodPhase::Pending);
    // Each share releases exactly what it took: then m3 fits, and when the shares are
    // gone the device is whole again.
    s.finish(m2).unwrap();
    assert_eq!(s.cluster().node(node_id).gpus[shared].free_milli, 633);
    s.schedule(2);
    assert_eq!(assignment(&s, m3).indices()[0] as usize, shared);
    assert_eq!(s.cluster().node(node_id).gpus[shared].free_milli, 633 - 250);
    s.finish(m1).unwrap();
    s.finish(m3).unwrap();
    assert_eq!(s.cluster().node(node_id).gpus[shared].free_milli, 1000);
    s.schedule(3);
    assert_eq!(node_of(&s, whole2), "gpu-0");
}

#[test]
fn memory_shares_fill_the_smallest_device_that_holds_them() {
    // One node with an 80 GiB and a 40 GiB device: 20 GiB goes to the 40 GiB device,
    // keeping the big one whole for 60 GiB, which only it holds.
    let mut node = memory_node("mixed", 2, 81_920);
    node.gpus[1].memory_mib = 40_960;
    for policy in [
        Policy::Kestrel,
        Policy::BinPack,
        Policy::Spread,
        Policy::BestFit,
    ] {
        let mut s = scheduler(policy, vec![node.clone()]);
        let small = s.submit(pod("small", 100, gpu_memory(20_480)), 0);
        s.schedule(0);
        let big = s.submit(pod("big", 100, gpu_memory(61_440)), 1);
        s.schedule(1);
        let share = |index, milli| GpuAssignment::Shared { index, milli };
        assert_eq!(assignment(&s, small), share(1, 500), "{policy}");
        assert_eq!(assignment(&s, big), share(0, 750), "{policy}");
    }
}

#[test]
fn room_held_for_a_preemptor_is_its_planned_devices() {
    // A DGX (GPUs 0-3 on NUMA 0, 4-7 on 1): v holds 0-3, w and x three of 4-7.
    let mut dgx = gpu_node("dgx", 8);
    (dgx.gpus, dgx.nics) = GpuTopology::DgxH100.devices("H100", 81_559, 8);
    let mut s = scheduler(Policy::Kestrel, vec![dgx]);
    let v = s.submit(pod("v", 100, GpuRequest::Whole(4)), 0);
    // w and x are not candidate victims (priority as high as p's).
    let mut w = pod("w", 100, GpuRequest::Whole(2));
    w.priority = 1000;
    let w = s.submit(w, 0);
    let mut x = pod("x", 100, GpuRequest::Whole(1));
    x.priority = 1000;
    s.submit(x, 0);
    s.schedule(0);
    let gpus_of = |s: &Scheduler, id: PodId| match &s.pod(id).phase {
        PodPhase::Bound { gpus, .. } => gpus.indices(),
        other => panic!("{other:?}"),
    };
    let v_gpus = gpus_of(&s, v);
    assert_eq!(v_gpus.len(), 4);
    let mut high = pod("p", 100, GpuRequest::Whole(4));
    high.priority = 1000;
    let p = s.submit(high, 1);
    let d = s.schedule(1);
    assert_eq!(d.preemptions[0].victims[0].pod, v);
    // While v leaves, the GPU nobody planned on takes a pod of no higher priority,
    // aligned on one NUMA node as it asks: the promise is v's devices, not a count.
    let mut aligned = pod("q", 100, GpuRequest::Whole(1));
    aligned.constraints.single_numa_node = true;
    let q = s.submit(aligned, 2);
    s.schedule(2);
    let q_gpus = gpus_of(&s, q);
    assert!(q_gpus.iter().all(|g| !v_gpus.contains(g)), "{q_gpus:?}");
    // Another finds no room left beside the promise.
    let r = s.submit(pod("r", 100, GpuRequest::Whole(1)), 3);
    s.schedule(3);
    assert_eq!(s.pod(r).phase, PodPhase::Pending);
    s.evict(v).unwrap();
    s.schedule(4);
    assert_eq!(gpus_of(&s, p), v_gpus, "p gets the devices it was promised");
    assert!(matches!(s.pod(w).phase, PodPhase::Bound { .. }));
}

#[test]
fn the_head_of_the_queue_reserves_only_nodes_that_could_hold_it() {
    // The head wants an RDMA adapter besides its GPU: the empty node without one could
    // never hold it, so reserving it would only keep the next pod off an empty node.
    let mut rdma = gpu_node("rdma", 1);
    rdma.allocatable.set_extended("rdma/hca", 1);
    let plain = gpu_node("plain", 4);
    let mut s = Scheduler::new(SchedulerConfig {
        seed: 1,
        head_reservation: 60_000,
        ..Default::default()
    });
    s.add_node(rdma).unwrap();
    s.add_node(plain).unwrap();
    let first = s.submit(pod("first", 1000, GpuRequest::Whole(1)), 0);
    s.schedule(0);
    assert_eq!(node_of(&s, first), "rdma");
    let mut head = pod("head", 1000, GpuRequest::Whole(1));
    head.demand.resources.set_extended("rdma/hca", 1);
    let head = s.submit(head, 1);
    s.schedule(1);
    assert_eq!(s.pod(head).phase, PodPhase::Pending);
    let reserved = s
        .reservation()
        .map(|(_, nodes, _)| nodes)
        .unwrap_or_default();
    assert!(
        reserved
            .iter()
            .all(|&n| s.cluster().node(n).spec.name == "rdma"),
        "{:?}",
        s.reservation()
    );
    let next = s.submit(pod("next", 1000, GpuRequest::Whole(2)), 2);
    s.schedule(2);
    assert_eq!(node_of(&s, next), "plain");
}
