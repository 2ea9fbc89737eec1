//! Gang scheduling: all or nothing, waiting for missing pods, topology, ranks, timeouts.

use kestrel_core::*;

use kestrel_test_support::engine;

fn node(name: &str, rack: &str, block: &str) -> NodeSpec {
    engine::node(name)
        .cpu_milli(224_000)
        .memory(2 << 40)
        .devices(GpuTopology::DgxH100, "H100", 81_559, 8)
        .label(RACK_LABEL, rack)
        .label(BLOCK_LABEL, block)
        .build()
}

fn member(gang: &str, name: &str, gpus: u32, rank: Option<u32>) -> PodSpec {
    engine::pod("ml", name)
        .cpu_milli(8_000)
        .memory(64 << 30)
        .gpu(GpuRequest::Whole(gpus))
        .member_of(gang, rank)
        .build()
}

fn gang(name: &str, min: u32) -> GangSpec {
    engine::gang("ml", name, min)
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

fn node_of(s: &Scheduler, id: PodId) -> Option<String> {
    match &s.pod(id).phase {
        PodPhase::Bound { node, .. } => Some(s.cluster().node(*node).spec.name.clone()),
        _ => None,
    }
}

fn reason(s: &Scheduler, id: PodId) -> String {
    s.pod(id)
        .pending_reason
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default()
}

#[test]
fn a_gang_starts_whole_or_not_at_all() {
    let mut s = scheduler(
        Policy::Kestrel,
        vec![
            node("a", "r0", "b0"),
            node("b", "r0", "b0"),
            node("c", "r0", "b0"),
        ],
    );
    s.add_gang(gang("train", 4)).unwrap();
    let pods: Vec<PodId> = (0..4)
        .map(|i| s.submit(member("train", &format!("w{i}"), 8, Some(i)), 0))
        .collect();
    let d = s.schedule(0);
    assert!(
        d.bindings.is_empty(),
        "three nodes cannot hold four 8-GPU pods"
    );
    assert!(pods.iter().all(|&p| node_of(&s, p).is_none()));
    assert_eq!(
        s.cluster()
            .iter()
            .map(|(_, n)| n.free_whole_gpus())
            .sum::<u32>(),
        24,
        "nothing held"
    );
    let text = reason(&s, pods[0]);
    assert!(
        text.contains("gang ml/train cannot start whole: only 3 of the 4"),
        "{text}"
    );
    assert!(text.contains("Insufficient nvidia.com/gpu"), "{text}");
    // Small pods are not blocked meanwhile.
    let small = s.submit(
        PodSpec::new(
            "ml",
            "small",
            Demand {
                resources: Resources::new(100, 1),
                gpu: GpuRequest::Whole(1),
            },
        ),
        1,
    );
    s.schedule(1);
    assert!(node_of(&s, small).is_some());
    s.finish(small).unwrap();
    s.add_node(node("d", "r0", "b0")).unwrap();
    let d = s.schedule(2);
    assert_eq!(d.bindings.len(), 4);
    assert_eq!(
        s.gang(s.gang_id("ml", "train").unwrap()).phase,
        GangPhase::Running
    );
}

#[test]
fn an_incomplete_gang_waits_and_starts_when_its_last_pod_arrives() {
    let mut s = scheduler(
        Policy::Kestrel,
        vec![node("a", "r0", "b0"), node("b", "r0", "b0")],
    );
    s.add_gang(GangSpec {
        total: Some(3),
        ..gang("job", 3)
    })
    .unwrap();
    let a = s.submit(member("job", "p0", 2, Some(0)), 0);
    s.submit(member("job", "p1", 2, Some(1)), 0);
    s.schedule(0);
    assert!(node_of(&s, a).is_none());
    assert!(
        reason(&s, a).contains("2 of 3 pods exist (minMember 3)"),
        "{}",
        reason(&s, a)
    );
    assert!(
        !s.pod(a).pending_reason.as_ref().unwrap().is_capacity(),
        "not a capacity problem"
    );
    s.submit(member("job", "p2", 2, Some(2)), 1);
    let d = s.schedule(1);
    assert_eq!(d.bindings.len(), 3);
}

#[test]
fn competing_gangs_do_not_deadlock_or_split() {
    let mut s = scheduler(
        Policy::Kestrel,
        (0..3).map(|i| node(&format!("n{i}"), "r0", "b0")).collect(),
    );
    s.add_gang(gang("x", 2)).unwrap();
    s.add_gang(gang("y", 2)).unwrap();
    // Interleaved arrivals: a naive scheduler binds x0 and y0 and both gangs wait forever.
    let x0 = s.submit(member("x", "x0", 8, None), 0);
    let y0 = s.submit(member("y", "y0", 8, None), 0);
    let x1 = s.submit(member("x", "x1", 8, None), 0);
    let y1 = s.submit(member("y", "y1", 8, None), 0);
    s.schedule(0);
    let bound = |p| node_of(&s, p).is_some();
    assert!(bound(x0) && bound(x1), "the first gang starts whole");
    assert!(!bound(y0) && !bound(y1), "the second waits whole");
    s.finish(x0).unwrap();
    s.finish(x1).unwrap();
    s.schedule(1);
    assert!(node_of(&s, y0).is_some() && node_of(&s, y1).is_some());
}

#[test]
fn required_rack_keeps_the_gang_in_one_rack() {
    let nodes = vec![
        node("r0-a", "r0", "b0"),
        node("r0-b", "r0", "b0"),
        node("r1-a", "r1", "b0"),
        node("r1-b", "r1", "b0"),
        node("r1-c", "r1", "b0"),
    ];
    let mut s = scheduler(Policy::Spread, nodes);
    let mut spec = gang("tp", 3);
    spec.topology.required = Some(RACK_LABEL.into());
    s.add_gang(spec).unwrap();
    let pods: Vec<PodId> = (0..3)
        .map(|i| s.submit(member("tp", &format!("p{i}"), 8, Some(i)), 0))
        .collect();
    s.schedule(0);
    for p in &pods {
        assert!(
            node_of(&s, *p).unwrap().starts_with("r1-"),
            "{:?}",
            node_of(&s, *p)
        );
    }
    // A second one fits no rack: r0 has 2 nodes, r1 is full.
    let mut spec = gang("tp2", 3);
    spec.topology.required = Some(RACK_LABEL.into());
    s.add_gang(spec).unwrap();
    let more: Vec<PodId> = (0..3)
        .map(|i| s.submit(member("tp2", &format!("q{i}"), 8, Some(i)), 1))
        .collect();
    s.schedule(1);
    assert!(more.iter().all(|&p| node_of(&s, p).is_none()));
    let text = reason(&s, more[0]);
    assert!(
        text.contains("needs all its pods in one topology.kestrel.dev/rack domain; none of the 2"),
        "{text}"
    );
}

#[test]
fn preferred_level_packs_tightly_and_falls_back_upward() {
    let nodes = vec![
        node("r0-a", "r0", "b0"),
        node("r1-a", "r1", "b0"),
        node("r1-b", "r1", "b0"),
        node("r2-a", "r2", "b1"),
    ];
    let mut s = scheduler(Policy::Spread, nodes);
    s.set_topology_levels(vec![
        BLOCK_LABEL.into(),
        RACK_LABEL.into(),
        HOSTNAME_LABEL.into(),
    ]);
    let mut spec = gang("pack", 2);
    spec.topology.preferred = Some(RACK_LABEL.into());
    s.add_gang(spec).unwrap();
    let pods: Vec<PodId> = (0..2)
        .map(|i| s.submit(member("pack", &format!("p{i}"), 8, Some(i)), 0))
        .collect();
    s.schedule(0);
    // Spread alone would scatter; the preferred rack keeps both in r1.
    assert!(pods
        .iter()
        .all(|&p| node_of(&s, p).unwrap().starts_with("r1-")));
    // Three more pods prefer one rack, none has room: one block (b0 has r0-a; b1 has r2-a)
    // cannot hold three either, so they go anywhere rather than wait.
    let mut spec = gang("wide", 2);
    spec.topology.preferred = Some(RACK_LABEL.into());
    s.add_gang(spec).unwrap();
    let wide: Vec<PodId> = (0..2)
        .map(|i| s.submit(member("wide", &format!("w{i}"), 8, Some(i)), 1))
        .collect();
    s.schedule(1);
    let mut places: Vec<String> = wide.iter().map(|&p| node_of(&s, p).unwrap()).collect();
    places.sort();
    assert_eq!(places, ["r0-a", "r2-a"]);
}

#[test]
fn unknown_levels_and_bad_sizes_are_refused() {
    let mut s = scheduler(Policy::Kestrel, vec![node("a", "r0", "b0")]);
    s.set_topology_levels(vec![BLOCK_LABEL.into(), RACK_LABEL.into()]);
    let mut spec = gang("g", 4);
    spec.topology.required = Some("zone".into());
    let e = s.add_gang(spec).unwrap_err().to_string();
    assert!(
        e.contains("ml/g") && e.contains("\"zone\" is not a level"),
        "{e}"
    );
    let mut spec = gang("g", 6);
    spec.topology.slice = Some((RACK_LABEL.into(), 4));
    let e = s.add_gang(spec).unwrap_err().to_string();
    assert!(e.contains("4 does not divide the gang's 6 pods"), "{e}");
    let e = s.add_gang(gang("g", 0)).unwrap_err().to_string();
    assert!(e.contains("minMember") && e.contains("at least 1"), "{e}");
    let e = s
        .add_gang(GangSpec {
            total: Some(2),
            ..gang("g", 3)
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 exceeds the gang's 2 pods"), "{e}");
}

#[test]
fn slices_and_ranks_keep_neighbours_together() {
    // Four nodes in two NVLink cliques; 8 pods of 4 GPUs, slices of 4 pods per clique.
    let mut nodes = Vec::new();
    for (i, clique) in ["c0", "c0", "c1", "c1"].iter().enumerate() {
        let mut n = node(&format!("n{i}"), "r0", "b0");
        n.labels.insert(GPU_CLIQUE_LABEL.into(), clique.to_string());
        nodes.push(n);
    }
    let mut s = scheduler(Policy::Spread, nodes);
    let mut spec = gang("slices", 8);
    spec.topology.slice = Some((GPU_CLIQUE_LABEL.into(), 4));
    s.add_gang(spec).unwrap();
    // Submitted out of rank order.
    let ranks = [5, 2, 7, 0, 3, 6, 1, 4];
    let pods: Vec<(u32, PodId)> = ranks
        .iter()
        .map(|&r| {
            (
                r,
                s.submit(member("slices", &format!("rank-{r}"), 4, Some(r)), 0),
            )
        })
        .collect();
    s.schedule(0);
    let clique_of = |s: &Scheduler, p: PodId| {
        let name = node_of(s, p).unwrap();
        let id = s.cluster().id_of(&name).unwrap();
        s.cluster().node(id).spec.labels[GPU_CLIQUE_LABEL].clone()
    };
    let mut by_rank = pods.clone();
    by_rank.sort();
    let cliques: Vec<String> = by_rank.iter().map(|&(_, p)| clique_of(&s, p)).collect();
    assert!(cliques[..4].iter().all(|c| *c == cliques[0]), "{cliques:?}");
    assert!(cliques[4..].iter().all(|c| *c == cliques[4]), "{cliques:?}");
    assert_ne!(cliques[0], cliques[4]);
    // Ranks 0-1 share a node (the first fills before the next), even under Spread.
    assert_eq!(node_of(&s, by_rank[0].1), node_of(&s, by_rank[1].1));
}

#[test]
fn a_gang_times_out_at_its_deadline_backs_off_and_starts_later() {
    let mut s = scheduler(Policy::Kestrel, vec![node("a", "r0", "b0")]);
    let gang_id = s
        .add_gang(GangSpec {
            schedule_timeout: Some(60_000),
            ..gang("late", 2)
        })
        .unwrap();
    let p0 = s.submit(member("late", "p0", 8, None), 0);
    let p1 = s.submit(member("late", "p1", 8, None), 0);
    s.schedule(0);
    assert_eq!(s.pending_count(), 2);
    // Nothing else happens: the deadline itself brings the gang back.
    assert_eq!(s.next_wakeup(), Some(60_000));
    let d = s.schedule(60_000);
    assert_eq!(d.timed_out, vec![gang_id]);
    assert_eq!(s.gang(gang_id).phase, GangPhase::TimedOut);
    assert_eq!(s.gang(gang_id).timeouts, 1);
    // Its pods are not dropped: they wait, saying why.
    assert_eq!(s.pending_count(), 2);
    for p in [p0, p1] {
        assert!(
            reason(&s, p).contains("timed out after 60 s"),
            "{}",
            reason(&s, p)
        );
    }
    // A quiet cluster stays quiet: no retry for its own sake.
    assert_eq!(s.next_wakeup(), None);
    // Room appears during the back-off (60 s by default): the gang waits it out.
    s.add_node(node("b", "r0", "b0")).unwrap();
    let d = s.schedule(70_000);
    assert!(d.bindings.is_empty() && d.timed_out.is_empty(), "{d:?}");
    assert_eq!(s.next_wakeup(), Some(120_000));
    let d = s.schedule(120_000);
    assert_eq!(d.bindings.len(), 2, "{d:?}");
    assert_eq!(s.gang(gang_id).phase, GangPhase::Running);
}

#[test]
fn a_gang_that_does_not_fit_after_its_back_off_times_out_again() {
    let mut s = Scheduler::new(SchedulerConfig {
        gang_backoff: 10_000,
        ..Default::default()
    });
    s.add_node(node("a", "r0", "b0")).unwrap();
    let g = s
        .add_gang(GangSpec {
            schedule_timeout: Some(30_000),
            ..gang("big", 2)
        })
        .unwrap();
    s.submit(member("big", "p0", 8, None), 0);
    s.submit(member("big", "p1", 8, None), 0);
    s.schedule(0);
    assert_eq!(s.schedule(30_000).timed_out, vec![g]);
    // A change after the back-off: tried at once, and a new window starts at the
    // back-off's end (40 s), so the next timeout is due at 70 s.
    s.add_node(NodeSpec::new("cpu-only", Resources::new(64_000, 256 << 30)))
        .unwrap();
    let d = s.schedule(50_000);
    assert!(d.timed_out.is_empty() && d.bindings.is_empty());
    assert_eq!(s.next_wakeup(), Some(70_000));
    assert_eq!(s.schedule(70_000).timed_out, vec![g]);
    assert_eq!(s.gang(g).timeouts, 2);
    assert_eq!(s.pending_count(), 2);
}

#[test]
fn pods_of_an_undeclared_gang_wait_until_it_is_declared() {
    let mut s = scheduler(Policy::Kestrel, vec![node("a", "r0", "b0")]);
    let p = s.submit(member("ghost", "p", 1, None), 0);
    s.schedule(0);
    assert!(
        reason(&s, p).contains("gang ml/ghost does not exist"),
        "{}",
        reason(&s, p)
    );
    s.add_gang(gang("ghost", 1)).unwrap();
    s.schedule(1);
    assert!(node_of(&s, p).is_some());
}

#[test]
fn role_minimums_and_replacements_near_running_peers() {
    let nodes = ["r0-a", "r0-b", "r0-c", "r1-a", "r1-b", "r1-c"]
        .iter()
        .map(|n| node(n, &n[..2], "b0"))
        .collect();
    let mut s = scheduler(Policy::Spread, nodes);
    let mut spec = gang("pt", 2);
    spec.topology.preferred = Some(RACK_LABEL.into());
    spec.role_minimums = vec![("master".into(), 1), ("worker".into(), 1)];
    s.add_gang(spec).unwrap();
    let with_role = |name: &str, role: &str| {
        let mut p = member("pt", name, 8, None);
        p.gang.as_mut().unwrap().role = Some(role.into());
        p
    };
    let w0 = s.submit(with_role("w0", "worker"), 0);
    let w1 = s.submit(with_role("w1", "worker"), 0);
    s.schedule(0);
    assert!(
        reason(&s, w0).contains("0 pod(s) of role master exist, its minimum is 1"),
        "{}",
        reason(&s, w0)
    );
    let m = s.submit(with_role("m", "master"), 1);
    s.schedule(1);
    assert!(node_of(&s, m).is_some() && node_of(&s, w0).is_some() && node_of(&s, w1).is_some());
    // A worker fails; its replacement goes next to the running peers' rack.
    let peers_rack = |s: &Scheduler, p: PodId| {
        let id = s.cluster().id_of(&node_of(s, p).unwrap()).unwrap();
        s.cluster().node(id).spec.labels[RACK_LABEL].clone()
    };
    let rack_of_master = peers_rack(&s, m);
    assert_eq!(
        peers_rack(&s, w0),
        rack_of_master,
        "preferred rack packs the gang"
    );
    s.finish(w1).unwrap();
    let w2 = s.submit(with_role("w2", "worker"), 2);
    s.schedule(2);
    assert_eq!(peers_rack(&s, w2), rack_of_master);
}

mod properties {
    use super::*;
    use kestrel_invariants::{self as invariants, Snapshot};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    struct GangCase {
        pods: u32,
        min: u32,
        gpus: u32,
        rack_required: bool,
    }

    fn gang_case() -> impl Strategy<Value = GangCase> {
        (1u32..=6, 1u32..=8, any::<bool>()).prop_flat_map(|(pods, gpus, rack)| {
            (1..=pods).prop_map(move |min| GangCase {
                pods,
                min,
                gpus,
                rack_required: rack,
            })
        })
    }

    fn spec_of(i: usize, case: &GangCase) -> GangSpec {
        let mut g = gang(&format!("g{i}"), case.min);
        g.total = Some(case.pods);
        if case.rack_required {
            g.topology.required = Some(RACK_LABEL.into());
        }
        g
    }

    fn cluster(nodes: usize) -> Vec<NodeSpec> {
        (0..nodes)
            .map(|i| node(&format!("n{i}"), &format!("r{}", i % 3), "b0"))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(10))]

        /// The stress run: 10 cases x 1,000 gangs (10,000 gangs) of mixed sizes and
        /// priorities arriving in bursts on 12 nodes, with priority preemption (victims
        /// evicted whole), head-of-queue reservations and completions. No gang is ever
        /// partially bound, and once the work stops arriving every gang that fits the
        /// empty cluster starts: nothing deadlocks.
        #[test]
        fn ten_thousand_gangs_never_partial_never_deadlocked(
            cases in proptest::collection::vec((gang_case(), 0i32..3), 1000),
            finish_every in 1usize..4,
        ) {
            let mut s = Scheduler::new(SchedulerConfig {
                head_reservation: 50,
                ..Default::default()
            });
            for n in cluster(12) {
                s.add_node(n).unwrap();
            }
            let mut members: Vec<Vec<PodId>> = Vec::new();
            for (i, (c, _)) in cases.iter().enumerate() {
                s.add_gang(spec_of(i, c)).unwrap();
            }
            let mut started = vec![false; cases.len()];
            // Members that completed while their gang ran count towards its minimum (the
            // rest of the gang may go on, and pending members may join it); nothing else
            // excuses a gang bound below minMember, at any step, after preemption too.
            let mut departed: BTreeMap<String, u32> = BTreeMap::new();
            let mut check = |s: &Scheduler, members: &[Vec<PodId>], departed: &BTreeMap<String, u32>| -> Result<(), TestCaseError> {
                let mut snapshot = Snapshot::from_engine(s, &[]);
                snapshot.set_departed(departed);
                if let Err(v) = invariants::check(&snapshot) {
                    prop_assert!(false, "{}", invariants::describe(&v));
                }
                for (g, pods) in members.iter().enumerate() {
                    started[g] |= pods.iter().any(|&p| node_of(s, p).is_some());
                }
                Ok(())
            };
            let finish = |s: &mut Scheduler, p: PodId, departed: &mut BTreeMap<String, u32>| {
                if node_of(s, p).is_some() {
                    let gang = s.pod(p).spec.gang.as_ref().unwrap().gang.clone();
                    *departed.entry(format!("ml/{gang}")).or_default() += 1;
                }
                s.finish(p).unwrap();
            };
            let mut t = 0u64;
            let evict = |s: &mut Scheduler, d: &Decisions| {
                for p in &d.preemptions {
                    for v in &p.victims {
                        s.evict(v.pod).unwrap();
                    }
                }
            };
            for (burst, chunk) in cases.chunks(25).enumerate() {
                for (j, (c, priority)) in chunk.iter().enumerate() {
                    let g = burst * 25 + j;
                    let pods: Vec<PodId> = (0..c.pods)
                        .map(|k| {
                            let mut pod = member(&format!("g{g}"), &format!("g{g}-{k}"), c.gpus, Some(k));
                            pod.priority = *priority * 100;
                            s.submit(pod, t)
                        })
                        .collect();
                    members.push(pods);
                }
                t += 10;
                let d = s.schedule(t);
                evict(&mut s, &d);
                check(&s, &members, &departed)?;
                if burst % finish_every == 0 {
                    // The oldest running gang finishes whole.
                    if let Some(g) = members.iter().position(|p| p.iter().any(|&x| node_of(&s, x).is_some())) {
                        for &p in &members[g] {
                            if s.pod(p).phase != PodPhase::Gone {
                                finish(&mut s, p, &mut departed);
                            }
                        }
                    }
                }
            }
            // Drain: finish whatever runs and cycle, until the empty cluster starts nothing
            // for a few cycles in a row (reservations of impossible gangs come and go).
            let mut idle = 0;
            for _ in 0..20_000 {
                t += 100;
                let d = s.schedule(t);
                evict(&mut s, &d);
                check(&s, &members, &departed)?;
                let running: Vec<PodId> = members
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|&p| node_of(&s, p).is_some())
                    .collect();
                idle = if running.is_empty() { idle + 1 } else { 0 };
                if idle > 3 {
                    break;
                }
                for p in running {
                    finish(&mut s, p, &mut departed);
                }
            }
            // What never started could not, even alone on the empty cluster. (Members of
            // a gang that ran may be left when their peers ended: the gang is incomplete.)
            let node_gpus = 8;
            check(&s, &members, &departed)?;
            for (g, pods) in members.iter().enumerate() {
                let waiting = pods.iter().any(|&p| s.pod(p).phase == PodPhase::Pending);
                if waiting && !started[g] {
                    let c = &cases[g].0;
                    let nodes_needed = c.min.div_ceil(node_gpus / c.gpus);
                    let fits_alone = nodes_needed <= if c.rack_required { 4 } else { 12 };
                    prop_assert!(!fits_alone, "gang g{g} left waiting: {:?}", s.pod(pods[0]).pending_reason);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(150))]

        /// Gangs start whole (at least minMember, inside one rack when required) or not at
        /// all, whatever the interleaving of arrivals, cycles and completions; and a gang
        /// left waiting on an idle cluster could not start on that cluster by itself.
        #[test]
        fn gangs_are_never_partial_and_never_deadlock(
            nodes in 1usize..=6,
            cases in proptest::collection::vec(gang_case(), 1..10),
            steps in proptest::collection::vec(0u8..3, 1..40),
        ) {
            let mut s = scheduler(Policy::Kestrel, cluster(nodes));
            for (i, c) in cases.iter().enumerate() {
                s.add_gang(spec_of(i, c)).unwrap();
            }
            // Pods of all gangs, interleaved round-robin.
            let mut arrivals: Vec<(usize, u32)> = Vec::new();
            for k in 0..6 {
                for (i, c) in cases.iter().enumerate() {
                    if k < c.pods {
                        arrivals.push((i, k));
                    }
                }
            }
            let mut members: BTreeMap<usize, Vec<PodId>> = BTreeMap::new();
            let mut next = 0;
            let mut t = 0;
            for step in steps.iter().chain(std::iter::repeat_n(&1, arrivals.len() + 2)) {
                t += 1;
                match step {
                    0 if next < arrivals.len() => {
                        let (g, k) = arrivals[next];
                        next += 1;
                        let id = s.submit(member(&format!("g{g}"), &format!("g{g}-{k}"), cases[g].gpus, Some(k)), t);
                        members.entry(g).or_default().push(id);
                    }
                    2 => {
                        // A running gang finishes whole.
                        if let Some((&g, pods)) = members.iter().find(|(_, p)| p.iter().any(|&x| node_of(&s, x).is_some())) {
                            for &p in pods {
                                s.finish(p).unwrap();
                            }
                            members.remove(&g);
                        }
                    }
                    _ => {
                        s.schedule(t);
                    }
                }
                for (g, pods) in &members {
                    let bound: Vec<String> = pods.iter().filter_map(|&p| node_of(&s, p)).collect();
                    prop_assert!(bound.is_empty() || bound.len() as u32 >= cases[*g].min,
                        "gang g{g} partially bound: {} of min {}", bound.len(), cases[*g].min);
                    if cases[*g].rack_required && !bound.is_empty() {
                        let racks: std::collections::BTreeSet<_> = bound
                            .iter()
                            .map(|n| s.cluster().node(s.cluster().id_of(n).unwrap()).spec.labels[RACK_LABEL].clone())
                            .collect();
                        prop_assert_eq!(racks.len(), 1, "gang g{} spans racks", g);
                    }
                }
                let idle = s.pods().all(|(_, p)| !matches!(p.phase, PodPhase::Bound { .. }));
                if idle && *step == 1 {
                    for (g, pods) in &members {
                        if pods.len() as u32 >= cases[*g].min {
                            // Alone on the same empty cluster, would it start?
                            let mut alone = scheduler(Policy::Kestrel, cluster(nodes));
                            alone.add_gang(spec_of(*g, &cases[*g])).unwrap();
                            for k in 0..pods.len() as u32 {
                                alone.submit(member(&format!("g{g}"), &format!("x{k}"), cases[*g].gpus, Some(k)), 0);
                            }
                            prop_assert!(alone.schedule(0).bindings.is_empty(),
                                "gang g{g} waits on an idle cluster that can hold it");
                        }
                    }
                }
            }
        }
    }
}

fn small(name: &str, estimate: Option<u64>) -> PodSpec {
    let mut p = PodSpec::new(
        "web",
        name,
        Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::Whole(1),
        },
    );
    p.preemption.runtime_estimate = estimate;
    p
}

fn reserving(head_reservation: u64) -> Scheduler {
    let mut s = Scheduler::new(SchedulerConfig {
        head_reservation,
        ..Default::default()
    });
    for n in ["a", "b"] {
        s.add_node(node(n, "r0", "b0")).unwrap();
    }
    s
}

/// Small pods keep arriving as others end; the 2 x 8-GPU gang needs both nodes empty.
fn churn(s: &mut Scheduler, estimate: Option<u64>) -> (Vec<PodId>, Vec<PodId>) {
    let mut running: Vec<PodId> = (0..4)
        .map(|i| s.submit(small(&format!("s{i}"), estimate), 0))
        .collect();
    s.schedule(0);
    s.add_gang(gang("big", 2)).unwrap();
    let big: Vec<PodId> = (0..2)
        .map(|i| s.submit(member("big", &format!("w{i}"), 8, Some(i)), 1))
        .collect();
    s.schedule(1);
    for t in 2..10u64 {
        let done = running.remove(0);
        s.finish(done).unwrap();
        running.push(s.submit(small(&format!("n{t}"), estimate), t * 1000));
        s.schedule(t * 1000);
    }
    (running, big)
}

#[test]
fn a_head_reservation_keeps_small_pods_from_starving_a_big_gang() {
    let mut s = reserving(0);
    let (_, big) = churn(&mut s, None);
    assert!(
        node_of(&s, big[0]).is_none(),
        "without a reservation the gang starves"
    );

    let mut s = reserving(3_600_000);
    let (running, big) = churn(&mut s, None);
    assert!(
        node_of(&s, big[0]).is_some(),
        "the reservation drained the nodes"
    );
    assert!(node_of(&s, big[1]).is_some());
    let waiting = running
        .iter()
        .filter(|&&p| node_of(&s, p).is_none())
        .count();
    assert!(waiting > 0);
    assert!(
        s.reservation()
            .is_none_or(|(holder, _, _)| holder != "gang ml/big"),
        "released once the gang started"
    );

    // Small pods that arrive while the reservation holds say why they wait.
    let mut s = reserving(3_600_000);
    s.submit(small("old", None), 0);
    s.schedule(0);
    s.add_gang(gang("big", 2)).unwrap();
    s.submit(member("big", "w0", 8, Some(0)), 1);
    s.submit(member("big", "w1", 8, Some(1)), 1);
    s.schedule(1);
    let (holder, nodes, until) = s.reservation().expect("the gang holds nodes");
    assert_eq!((holder, nodes.len(), until), ("gang ml/big", 2, 3_600_001));
    let late = s.submit(small("late", None), 2);
    s.schedule(2);
    assert!(
        reason(&s, late).contains("2 node(s) were reserved for gang ml/big"),
        "{}",
        reason(&s, late)
    );
    // The reservation is bounded: it ends, and the small pod runs.
    s.schedule(3_600_001);
    assert!(s.reservation().is_none());
    assert!(node_of(&s, late).is_some());
}

#[test]
fn work_that_ends_before_the_reserved_start_backfills() {
    let mut s = reserving(3_600_000);
    // Running pods declare 10-minute runtimes: the gang starts in 10 minutes at the latest.
    s.submit(small("old", Some(600_000)), 0);
    s.schedule(0);
    s.add_gang(gang("big", 2)).unwrap();
    s.submit(member("big", "w0", 8, Some(0)), 1);
    s.submit(member("big", "w1", 8, Some(1)), 1);
    s.schedule(1);
    let short = s.submit(small("short", Some(300_000)), 2);
    let long = s.submit(small("long", Some(3_000_000)), 2);
    let unknown = s.submit(small("unknown", None), 2);
    s.schedule(2);
    assert!(
        node_of(&s, short).is_some(),
        "ends before the gang could start"
    );
    assert!(node_of(&s, long).is_none());
    assert!(node_of(&s, unknown).is_none());
}

#[test]
fn racks_labelled_alike_in_two_blocks_are_two_racks() {
    // Rack "r0" exists in block b0 (one node) and in block b1 (one node); rack "r1" of b1
    // has two nodes. A gang of two 8-GPU pods that requires one rack fits only r1.
    let nodes = vec![
        node("b0-r0", "r0", "b0"),
        node("b1-r0", "r0", "b1"),
        node("b1-r1-a", "r1", "b1"),
        node("b1-r1-b", "r1", "b1"),
    ];
    for levels in [
        vec![BLOCK_LABEL.to_string(), RACK_LABEL.to_string()],
        // Without a Topology, block is above rack too.
        Vec::new(),
    ] {
        let mut s = scheduler(Policy::Kestrel, nodes.clone());
        s.set_topology_levels(levels.clone());
        // Fill r1 first so that only the two "r0" racks have room, one node each.
        let mut filler = member("fill", "f0", 8, None);
        filler.gang = None;
        filler.constraints.node_selector =
            [("kubernetes.io/hostname".to_string(), "b1-r1-a".to_string())]
                .into_iter()
                .collect();
        let f = s.submit(filler, 0);
        s.schedule(0);
        assert_eq!(node_of(&s, f).as_deref(), Some("b1-r1-a"));
        let mut spec = gang("rack", 2);
        spec.topology.required = Some(RACK_LABEL.into());
        s.add_gang(spec).unwrap();
        let pods: Vec<PodId> = (0..2)
            .map(|i| s.submit(member("rack", &format!("p{i}"), 8, Some(i)), 1))
            .collect();
        s.schedule(1);
        let places: Vec<Option<String>> = pods.iter().map(|&p| node_of(&s, p)).collect();
        assert_eq!(
            places,
            [None, None],
            "levels {levels:?}: the two r0 racks are different racks"
        );
        assert!(
            reason(&s, pods[0]).contains("rack"),
            "{}",
            reason(&s, pods[0])
        );
    }
}
