//! The `StrandedWatch`: pods (and gangs) pending while they fit an empty node.

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
