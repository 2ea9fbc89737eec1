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
