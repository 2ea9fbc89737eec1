//! Inter-pod affinity and anti-affinity, topology spread and host ports, as kube-scheduler's
//! InterPodAffinity, PodTopologySpread and NodePorts plugins decide them.

use kestrel_core::*;

const HOST: &str = "kubernetes.io/hostname";
const ZONE: &str = "topology.kubernetes.io/zone";

fn node(name: &str, zone: &str) -> NodeSpec {
    let mut n = NodeSpec::new(name, Resources::new(16_000, 64 << 30));
    n.labels.insert(HOST.into(), name.into());
    n.labels.insert(ZONE.into(), zone.into());
    n
}

fn scheduler(nodes: Vec<NodeSpec>) -> Scheduler {
    let mut s = Scheduler::new(SchedulerConfig {
        seed: 1,
        ..Default::default()
    });
    for n in nodes {
        s.add_node(n).unwrap();
    }
    s
}

fn pod(name: &str, app: &str) -> PodSpec {
    let mut p = PodSpec::new(
        "prod",
        name,
        Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::None,
        },
    );
    p.labels.insert("app".into(), app.into());
    p
}

fn app_is(app: &str) -> LabelSelector {
    vec![Requirement {
        key: "app".into(),
        operator: SelectorOperator::In,
        values: vec![app.into()],
    }]
}

fn term(app: &str, key: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        selector: Some(app_is(app)),
        namespaces: vec!["prod".into()],
        namespace_selector: None,
        topology_key: key.into(),
    }
}

fn spread(app: &str, key: &str, max_skew: u32, hard: bool) -> SpreadConstraint {
    SpreadConstraint {
        max_skew,
        topology_key: key.into(),
        hard,
        selector: Some(app_is(app)),
        min_domains: None,
        honor_node_affinity: true,
        honor_taints: false,
    }
}

fn with(mut p: PodSpec, rules: impl FnOnce(&mut InterPodRules)) -> PodSpec {
    let mut r = InterPodRules::default();
    rules(&mut r);
    p.constraints.inter_pod = Some(Box::new(r));
    p
}

fn node_of(s: &Scheduler, id: PodId) -> Option<String> {
    match &s.pod(id).phase {
        PodPhase::Bound { node, .. } => Some(s.cluster().node(*node).spec.name.clone()),
        _ => None,
    }
}

fn zone_of(s: &Scheduler, id: PodId) -> Option<String> {
    let name = node_of(s, id)?;
    let node = s.cluster().id_of(&name).unwrap();
    s.cluster().node(node).spec.labels.get(ZONE).cloned()
}

fn reason(s: &Scheduler, id: PodId) -> String {
    s.pod(id)
        .pending_reason
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default()
}

#[test]
fn required_anti_affinity_on_hostname_keeps_replicas_apart_and_leaves_the_extra_pending() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1")]);
    let replicas: Vec<PodId> = (0..3)
        .map(|i| {
            let p = with(pod(&format!("web-{i}"), "web"), |r| {
                r.anti_affinity.push(term("web", HOST))
            });
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    let nodes: Vec<Option<String>> = replicas.iter().map(|&p| node_of(&s, p)).collect();
    assert_eq!(nodes[0].is_some() as u8 + nodes[1].is_some() as u8, 2);
    assert_ne!(nodes[0], nodes[1]);
    assert_eq!(nodes[2], None);
    assert_eq!(
        reason(&s, replicas[2]),
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    );
    // One replica ends: the pending one takes its node.
    s.finish(replicas[0]).unwrap();
    s.schedule(1);
    assert_eq!(node_of(&s, replicas[2]), nodes[0]);
}

#[test]
fn an_existing_pods_anti_affinity_keeps_matching_pods_out_of_its_domain() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1"), node("c", "z2")]);
    let loner = with(pod("loner", "db"), |r| {
        r.anti_affinity.push(term("web", ZONE))
    });
    let loner = s.submit(loner, 0);
    s.schedule(0);
    let loner_zone = zone_of(&s, loner).unwrap();
    // Plain pods of app web, with no rules of their own, stay out of the loner's zone.
    let webs: Vec<PodId> = (0..3)
        .map(|i| s.submit(pod(&format!("web-{i}"), "web"), 1))
        .collect();
    let other = s.submit(pod("cache", "cache"), 1);
    s.schedule(1);
    for &w in &webs {
        assert_ne!(zone_of(&s, w).unwrap(), loner_zone);
    }
    assert!(node_of(&s, other).is_some());
    // With room only in the loner's zone, a web pod is refused there, with the reason.
    let mut s = scheduler(vec![node("a", "z1")]);
    s.submit(
        with(pod("loner", "db"), |r| {
            r.anti_affinity.push(term("web", ZONE))
        }),
        0,
    );
    let web = s.submit(pod("web", "web"), 0);
    s.schedule(0);
    assert_eq!(
        reason(&s, web),
        "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules."
    );
}

#[test]
fn required_affinity_waits_for_its_peer_and_follows_it_into_its_zone() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z2"), node("c", "z3")]);
    let client = with(pod("client", "client"), |r| {
        r.affinity.push(term("db", ZONE))
    });
    let client = s.submit(client, 0);
    s.schedule(0);
    assert_eq!(node_of(&s, client), None);
    assert_eq!(
        reason(&s, client),
        "0/3 nodes are available: 3 node(s) didn't match pod affinity rules."
    );
    // The db lands on the one node it may use; the client follows it there.
    let mut db = pod("db", "db");
    db.constraints.node_selector.insert(HOST.into(), "b".into());
    s.submit(db, 1);
    s.schedule(1);
    s.schedule(2);
    assert_eq!(zone_of(&s, client).as_deref(), Some("z2"));
}

#[test]
fn the_first_pod_of_a_self_affine_series_goes_anywhere_and_the_rest_follow() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z2"), node("c", "z3")]);
    let pods: Vec<PodId> = (0..5)
        .map(|i| {
            let p = with(pod(&format!("shard-{i}"), "shard"), |r| {
                r.affinity.push(term("shard", ZONE))
            });
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    let zones: Vec<Option<String>> = pods.iter().map(|&p| zone_of(&s, p)).collect();
    assert!(zones[0].is_some());
    assert!(zones.iter().all(|z| *z == zones[0]), "{zones:?}");
}

#[test]
fn hard_spread_over_hostnames_keeps_the_skew_and_min_domains_counts_missing_domains_as_empty() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1")]);
    let pods: Vec<PodId> = (0..4)
        .map(|i| {
            let p = with(pod(&format!("w-{i}"), "w"), |r| {
                r.spread.push(spread("w", HOST, 1, true))
            });
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    let on_a = pods
        .iter()
        .filter(|&&p| node_of(&s, p).as_deref() == Some("a"))
        .count();
    let on_b = pods
        .iter()
        .filter(|&&p| node_of(&s, p).as_deref() == Some("b"))
        .count();
    assert_eq!((on_a, on_b), (2, 2));

    // minDomains 3 on 2 nodes: the least loaded domain counts as 0, so each node takes one.
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1")]);
    let pods: Vec<PodId> = (0..3)
        .map(|i| {
            let mut c = spread("w", HOST, 1, true);
            c.min_domains = Some(3);
            s.submit(with(pod(&format!("w-{i}"), "w"), |r| r.spread.push(c)), 0)
        })
        .collect();
    s.schedule(0);
    assert_eq!(
        pods.iter().filter(|&&p| node_of(&s, p).is_some()).count(),
        2
    );
    assert_eq!(
        reason(&s, pods[2]),
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints."
    );
}

#[test]
fn hard_spread_refuses_nodes_without_the_key_and_counts_only_nodes_the_pod_may_use() {
    let mut unlabeled = NodeSpec::new("bare", Resources::new(16_000, 64 << 30));
    unlabeled.labels.insert(HOST.into(), "bare".into());
    let mut s = scheduler(vec![unlabeled]);
    let p = with(pod("w", "w"), |r| r.spread.push(spread("w", ZONE, 1, true)));
    let p = s.submit(p, 0);
    s.schedule(0);
    assert_eq!(
        reason(&s, p),
        "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label)."
    );

    // Pods restricted to zone z1 spread over z1's nodes only (nodeAffinityPolicy Honor):
    // zone z2's empty node does not hold the least-loaded count at 0.
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1"), node("c", "z2")]);
    let pods: Vec<PodId> = (0..4)
        .map(|i| {
            let mut p = with(pod(&format!("w-{i}"), "w"), |r| {
                r.spread.push(spread("w", ZONE, 1, true))
            });
            p.constraints.node_selector.insert(ZONE.into(), "z1".into());
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    assert!(pods
        .iter()
        .all(|&p| zone_of(&s, p).as_deref() == Some("z1")));
    // Ignored, the empty zone counts: only one pod may go to z1 (skew 1 over z2's 0).
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1"), node("c", "z2")]);
    let pods: Vec<PodId> = (0..3)
        .map(|i| {
            let mut c = spread("w", ZONE, 1, true);
            c.honor_node_affinity = false;
            let mut p = with(pod(&format!("w-{i}"), "w"), |r| r.spread.push(c));
            p.constraints.node_selector.insert(ZONE.into(), "z1".into());
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    assert_eq!(
        pods.iter().filter(|&&p| node_of(&s, p).is_some()).count(),
        1
    );
}

#[test]
fn soft_spread_prefers_the_emptiest_zone_and_never_refuses() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z2"), node("c", "z3")]);
    let pods: Vec<PodId> = (0..6)
        .map(|i| {
            let p = with(pod(&format!("w-{i}"), "w"), |r| {
                r.spread.push(spread("w", ZONE, 1, false))
            });
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    for zone in ["z1", "z2", "z3"] {
        let n = pods
            .iter()
            .filter(|&&p| zone_of(&s, p).as_deref() == Some(zone))
            .count();
        assert_eq!(n, 2, "{zone}");
    }
    // A zone with no room left does not stop a soft spread.
    let mut s = scheduler(vec![node("a", "z1")]);
    let pods: Vec<PodId> = (0..3)
        .map(|i| {
            let p = with(pod(&format!("w-{i}"), "w"), |r| {
                r.spread.push(spread("w", ZONE, 1, false))
            });
            s.submit(p, 0)
        })
        .collect();
    s.schedule(0);
    assert!(pods.iter().all(|&p| node_of(&s, p).is_some()));
}

#[test]
fn preferred_anti_affinity_spreads_and_preferred_affinity_gathers() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z2")]);
    let db = s.submit(pod("db", "db"), 0);
    s.schedule(0);
    let db_zone = zone_of(&s, db).unwrap();
    let near = with(pod("near", "x"), |r| {
        r.preferred_affinity.push((50, term("db", ZONE)))
    });
    let far = with(pod("far", "y"), |r| {
        r.preferred_anti_affinity.push((50, term("db", ZONE)))
    });
    let (near, far) = (s.submit(near, 1), s.submit(far, 1));
    s.schedule(1);
    assert_eq!(zone_of(&s, near).unwrap(), db_zone);
    assert_ne!(zone_of(&s, far).unwrap(), db_zone);
}

#[test]
fn host_ports_taken_on_a_node_keep_a_second_taker_off_it() {
    let port = |p: u16, ip: &str| HostPort {
        protocol: "TCP".into(),
        ip: ip.into(),
        port: p,
    };
    let mut s = scheduler(vec![node("a", "z1")]);
    let mut first = pod("first", "x");
    first.constraints.host_ports = vec![port(8080, "")];
    let mut second = pod("second", "x");
    second.constraints.host_ports = vec![port(8080, "10.0.0.1")];
    let mut other = pod("other", "x");
    other.constraints.host_ports = vec![port(9090, "")];
    let first = s.submit(first, 0);
    let second = s.submit(second, 0);
    let other = s.submit(other, 0);
    s.schedule(0);
    assert!(node_of(&s, first).is_some());
    assert!(node_of(&s, other).is_some());
    assert_eq!(
        reason(&s, second),
        "0/1 nodes are available: 1 node(s) didn't have free ports for the requested pod ports."
    );
    s.finish(first).unwrap();
    s.schedule(1);
    assert!(node_of(&s, second).is_some());
}

#[test]
fn namespace_selectors_choose_whose_pods_a_term_sees() {
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z2")]);
    s.set_namespace_labels("shared", [("team".to_string(), "infra".to_string())].into());
    let mut cache = pod("cache", "cache");
    cache.namespace = "shared".into();
    cache
        .constraints
        .node_selector
        .insert(HOST.into(), "a".into());
    s.submit(cache, 0);
    s.schedule(0);
    // Its own namespace only (the default): no cache pod there, so no preference holds
    // and it is refused nowhere; by namespace selector, it must join the shared cache.
    let mut t = term("cache", HOST);
    t.namespaces.clear();
    t.namespace_selector = Some(vec![Requirement {
        key: "team".into(),
        operator: SelectorOperator::In,
        values: vec!["infra".into()],
    }]);
    let joined = s.submit(with(pod("app", "app"), |r| r.affinity.push(t)), 1);
    let own_ns = s.submit(
        with(pod("lonely", "app"), |r| {
            r.affinity.push(term("cache", HOST))
        }),
        1,
    );
    s.schedule(1);
    assert_eq!(node_of(&s, joined).as_deref(), Some("a"));
    assert_eq!(
        node_of(&s, own_ns),
        None,
        "no cache pod in its own namespace"
    );
}

#[test]
fn a_gangs_members_count_against_each_other_and_it_starts_whole_or_not_at_all() {
    let member = |i: u32| {
        let mut p = with(pod(&format!("m-{i}"), "trainer"), |r| {
            r.anti_affinity.push(term("trainer", HOST))
        });
        p.gang = Some(GangMembership {
            gang: "g".into(),
            role: None,
            rank: Some(i),
        });
        p
    };
    let gang = GangSpec {
        namespace: "prod".into(),
        name: "g".into(),
        min_member: 3,
        ..Default::default()
    };
    // Two nodes for three members that must not share one: nothing starts.
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1")]);
    s.add_gang(gang.clone()).unwrap();
    let members: Vec<PodId> = (0..3).map(|i| s.submit(member(i), 0)).collect();
    s.schedule(0);
    assert!(members.iter().all(|&m| node_of(&s, m).is_none()));
    // A third node: all start, one per node.
    s.add_node(node("c", "z1")).unwrap();
    s.schedule(1);
    let mut nodes: Vec<String> = members.iter().map(|&m| node_of(&s, m).unwrap()).collect();
    nodes.sort();
    assert_eq!(nodes, ["a", "b", "c"]);
}

#[test]
fn a_spread_with_an_empty_selector_counts_no_placed_pod_as_kube_scheduler_does() {
    // Three pods on a, none on b; then a pod for a whose hard spread over hostnames (max
    // skew 1, both nodes counted) selects `{}`. kube-scheduler counts no placed pod for
    // an empty selector (only the pod itself matches it): the skew is 1 and the pod binds.
    let mut s = scheduler(vec![node("a", "z1"), node("b", "z1")]);
    let on_a = |mut p: PodSpec| {
        p.constraints.node_selector.insert(HOST.into(), "a".into());
        p
    };
    let first: Vec<PodId> = (0..3)
        .map(|i| s.submit(on_a(pod(&format!("w-{i}"), "w")), 0))
        .collect();
    let mut c = spread("w", HOST, 1, true);
    c.selector = Some(Vec::new());
    c.honor_node_affinity = false;
    let last = s.submit(on_a(with(pod("w-3", "w"), |r| r.spread.push(c))), 0);
    s.schedule(0);
    for p in first.into_iter().chain([last]) {
        assert_eq!(node_of(&s, p).as_deref(), Some("a"), "{}", reason(&s, p));
    }
}

#[test]
fn csi_volume_limits_count_each_volume_once_per_node_and_free_when_pods_end() {
    let attach = |volumes: &[&str]| {
        Some(Box::new(VolumeRules {
            attach: volumes
                .iter()
                .map(|v| AttachedVolume {
                    driver: "ebs.csi.aws.com".into(),
                    volume: (*v).into(),
                })
                .collect(),
            ..VolumeRules::default()
        }))
    };
    let mut limited = node("a", "z1");
    limited.volume_limits.insert("ebs.csi.aws.com".into(), 2);
    let mut s = scheduler(vec![limited]);
    let mut ids = Vec::new();
    for (name, volumes) in [
        ("one", &["pv-1"][..]),
        ("shares-one", &["pv-1"][..]),
        ("two", &["pv-2"][..]),
        ("three", &["pv-3"][..]),
        ("big", &["pv-4", "pv-5", "pv-6"][..]),
    ] {
        let mut p = pod(name, "x");
        p.constraints.volumes = attach(volumes);
        ids.push(s.submit(p, 0));
    }
    s.schedule(0);
    let bound: Vec<bool> = ids.iter().map(|&id| node_of(&s, id).is_some()).collect();
    assert_eq!(
        bound,
        [true, true, true, false, false],
        "pv-1 counts once; pv-3 would be the third"
    );
    assert_eq!(
        reason(&s, ids[3]),
        "0/1 nodes are available: 1 node(s) exceed max volume count."
    );
    // Ending a pod whose volume another pod still uses frees nothing; ending the last
    // user does.
    s.finish(ids[0]).unwrap();
    s.schedule(1);
    assert!(node_of(&s, ids[3]).is_none());
    s.finish(ids[1]).unwrap();
    s.schedule(2);
    assert!(node_of(&s, ids[3]).is_some());
    // Three volumes never fit a node that attaches two.
    assert!(node_of(&s, ids[4]).is_none());
    assert_eq!(
        reason(&s, ids[4]),
        "0/1 nodes are available: 1 node(s) exceed max volume count."
    );
    // A CSINode that allows more lets it in.
    let mut raised = s
        .cluster()
        .node(s.cluster().id_of("a").unwrap())
        .spec
        .clone();
    raised.volume_limits.insert("ebs.csi.aws.com".into(), 5);
    s.update_node(raised).unwrap();
    s.schedule(3);
    assert!(node_of(&s, ids[4]).is_some(), "{}", reason(&s, ids[4]));
}

/// A preemptor waiting for its victim counts as placed on the node held for it (as
/// kube-scheduler counts a nominated pod): a pod its required anti-affinity repels may not
/// take the domain the victim is leaving, or the preemptor would find it there and preempt
/// again, cycle after cycle.
#[test]
fn a_waiting_preemptors_anti_affinity_keeps_matching_pods_out_of_its_held_domain() {
    let mut s = scheduler(vec![
        node("z0-a", "z0"),
        node("z0-b", "z0"),
        node("z0-c", "z0"),
        node("z1-a", "z1"),
    ]);
    let sized = |name: &str, app: &str, cpu: i64, priority: i32, on: Option<&str>| {
        let mut p = pod(name, app);
        p.demand.resources = Resources::new(cpu * 1000, 1 << 30);
        p.priority = priority;
        if let Some(node) = on {
            p.constraints.node_selector.insert(HOST.into(), node.into());
        }
        p
    };
    // Fillers nobody may preempt; the victim on z0-a.
    for (name, cpu, node) in [
        ("b1", 4, "z0-a"),
        ("b2", 16, "z0-b"),
        ("b3", 16, "z1-a"),
        ("b4", 12, "z0-c"),
    ] {
        s.submit(sized(name, "filler", cpu, 1000, Some(node)), 0);
    }
    let victim = s.submit(sized("v", "a", 12, 0, Some("z0-a")), 0);
    s.schedule(0);
    assert_eq!(node_of(&s, victim).as_deref(), Some("z0-a"));
    // The preemptor keeps pods of app a out of its zone and finds no room.
    let preemptor = s.submit(
        with(sized("p", "b", 8, 100, None), |r| {
            r.anti_affinity.push(term("a", ZONE))
        }),
        1,
    );
    let d = s.schedule(1);
    assert_eq!(d.preemptions.len(), 1);
    assert_eq!(d.preemptions[0].victims[0].pod, victim);
    let held = s.nominated_node(preemptor).expect("room held");
    assert_eq!(s.cluster().node(held).spec.name, "z0-a");
    // While the victim leaves, a pod of app a may not take z0-c's room in zone z0.
    let late = s.submit(sized("late", "a", 4, 0, None), 2);
    s.schedule(2);
    assert_eq!(node_of(&s, late), None, "kept out of the preemptor's zone");
    assert!(
        reason(&s, late).contains("didn't satisfy existing pods anti-affinity rules"),
        "{}",
        reason(&s, late)
    );
    // The victim gone, the preemptor binds where its room was held.
    s.finish(victim).unwrap();
    s.schedule(3);
    assert_eq!(node_of(&s, preemptor).as_deref(), Some("z0-a"));
    assert_eq!(node_of(&s, late), None);
}
