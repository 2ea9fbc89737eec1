//! Gangs through the index: all-or-nothing binds, PodGroup status, namespace-policy refusals (ResourceQuota, LimitRange),
//! malformed PodGroups, topology, timeouts, and the other projects' PodGroups.

use crate::common::*;

// ---- Gangs through the index ------------------------------------------------------------

fn status_of<'a>(out: &'a CycleOutput, name: &str) -> &'a GroupStatusWrite {
    out.group_status
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no status for {name}: {out:#?}"))
}

#[test]
fn a_pod_relist_drops_the_members_deleted_while_the_watch_was_down() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.group(pod_group("pt", json!({"minMember": 2})));
    h.pod_event(Event::Init);
    h.pod_event(Event::InitApply(member("pt-0", "pt", 4)));
    h.pod_event(Event::InitDone);
    h.pod(member("pt-1", "pt", 4));
    assert_eq!(h.state.tracked_pods(), 2);
    // The watch restarts; pt-0 was deleted meanwhile and the listing no longer has it.
    h.pod_event(Event::Init);
    assert_eq!(
        h.state.tracked_pods(),
        2,
        "nothing is dropped before the listing ends"
    );
    h.pod_event(Event::InitApply(member("pt-1", "pt", 4)));
    h.pod_event(Event::InitDone);
    assert_eq!(h.state.tracked_pods(), 1);
    assert!(h.state.pod_state("ml/pt-0").is_none());
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "1 of 2 members: nothing binds");
    assert!(
        status_of(&out, "pt").message.contains("1 of 2 pods exist"),
        "{:?}",
        status_of(&out, "pt")
    );
}

#[test]
fn a_gang_binds_all_or_nothing_and_its_status_says_why_it_waits() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r1")]);
    h.group(pod_group("pt", json!({"minMember": 3})));
    // Before any pod: the status says none exist.
    let out = h.state.cycle(0);
    let s = status_of(&out, "pt");
    assert_eq!(
        (s.phase, s.condition, s.reason.as_str()),
        (PodGroupPhase::Pending, "False", "Incomplete")
    );
    assert!(s.message.contains("0 of 3 pods exist"), "{s:?}");
    assert_eq!(s.observed_generation, Some(1));

    h.pod(member("pt-0", "pt", 4));
    h.pod(member("pt-1", "pt", 4));
    let out = h.state.cycle(1);
    assert!(out.binds.is_empty(), "2 of 3: nothing binds: {out:?}");
    let s = status_of(&out, "pt");
    assert_eq!(
        (s.phase, s.scheduled, s.reason.as_str()),
        (PodGroupPhase::Pending, 0, "Incomplete")
    );
    assert!(
        s.message
            .contains("gang ml/pt is incomplete: 2 of 3 pods exist (minMember 3)"),
        "{}",
        s.message
    );
    assert!(
        s.since.is_none(),
        "the condition's status did not change, but it was never written"
    );
    // The pods say so too.
    assert_eq!(out.unschedulable.len(), 2);
    assert!(out
        .unschedulable
        .iter()
        .all(|r| r.message.contains("2 of 3 pods exist")));
    h.state
        .group_status_result(s, Ok(Time(Timestamp::from_second(1_700_000_000).unwrap())));

    // Nothing changed: nothing is written again.
    let out = h.state.cycle(2);
    assert!(
        out.group_status.is_empty() && out.unschedulable.is_empty(),
        "{out:?}"
    );

    h.pod(member("pt-2", "pt", 4));
    let out = h.state.cycle(3);
    assert_eq!(out.binds.len(), 3, "the whole gang at once: {out:?}");
    let names: BTreeSet<&str> = out.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["pt-0", "pt-1", "pt-2"]));
    assert!(
        out.group_status.is_empty(),
        "no status while its binds are in flight"
    );
    for b in &out.binds {
        h.state.bind_result(b.id, BindOutcome::Bound);
    }
    assert!(h.state.groups_changed());
    let out = h.state.cycle(4);
    let s = status_of(&out, "pt");
    assert_eq!(
        (
            s.phase,
            s.scheduled,
            s.running,
            s.condition,
            s.reason.as_str()
        ),
        (PodGroupPhase::Scheduled, 3, 0, "True", "Scheduled")
    );
    assert!(s.since.is_none(), "the condition turned True now");
    // The pods start running.
    for (i, name) in ["pt-0", "pt-1", "pt-2"].iter().enumerate() {
        let mut p = member(name, "pt", 4);
        p.spec.as_mut().unwrap().node_name = Some(if i < 2 { "gpu-0" } else { "gpu-1" }.into());
        p.status.as_mut().unwrap().phase = Some("Running".into());
        h.pod(p);
    }
    let out = h.state.cycle(5);
    let s = status_of(&out, "pt");
    assert_eq!((s.phase, s.running), (PodGroupPhase::Running, 3));
}

fn gpu_quota(name: &str, hard: &str, used: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"hard": {"requests.nvidia.com/gpu": hard, "pods": "100"}},
        "status": {"hard": {"requests.nvidia.com/gpu": hard, "pods": "100"},
                   "used": {"requests.nvidia.com/gpu": used, "pods": "3"}}})
}

#[test]
fn an_incomplete_gang_names_the_resource_quota_that_refuses_its_missing_pods() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r1")]);
    // Room for the fourth pod's 2 GPUs: the gang just waits for it.
    assert!(h.resource_quota(gpu_quota("gpu-quota", "8", "6"), false));
    h.group(pod_group("train", json!({"minMember": 4})));
    for i in 0..3 {
        h.pod(member(&format!("train-{i}"), "train", 2));
    }
    let out = h.state.cycle(0);
    let s = status_of(&out, "train");
    assert_eq!(s.reason, "Incomplete");
    assert_eq!(
        s.message,
        "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); waiting for the rest to be created"
    );
    assert_eq!(out.unschedulable.len(), 3);

    // The quota is used up (a malformed quota beside it is skipped, not fatal): the
    // PodGroup and its pods name it.
    let broken = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "broken", "namespace": "ml"},
        "status": {"hard": {"requests.nvidia.com/gpu": "lots"}, "used": {"requests.nvidia.com/gpu": "0"}}});
    assert!(!h.resource_quota(broken, false), "nothing usable in it");
    assert!(h.resource_quota(gpu_quota("gpu-quota", "8", "8"), false));
    let out = h.state.cycle(1);
    let expected = "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); ResourceQuota \
        ml/gpu-quota has requests.nvidia.com/gpu 8 of 8 used, so the API server refuses the \
        missing pods: raise the quota or end pods in ml";
    let s = status_of(&out, "train");
    assert_eq!(
        (s.reason.as_str(), s.message.as_str()),
        ("Incomplete", expected)
    );
    let names: BTreeSet<&str> = out.unschedulable.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["train-0", "train-1", "train-2"]));
    assert!(
        out.unschedulable
            .iter()
            .all(|r| r.reason == "Unschedulable" && r.message == expected),
        "{:?}",
        out.unschedulable
    );
    // Nothing changed: nothing is said again.
    let out = h.state.cycle(2);
    assert!(
        out.group_status.is_empty() && out.unschedulable.is_empty(),
        "{out:?}"
    );

    // The quota is raised: the gang waits for its pod again, saying so.
    assert!(h.resource_quota(gpu_quota("gpu-quota", "16", "8"), false));
    let out = h.state.cycle(3);
    assert!(status_of(&out, "train")
        .message
        .ends_with("(minMember 4); waiting for the rest to be created"));
    assert_eq!(out.unschedulable.len(), 3, "{out:?}");
    assert!(out
        .unschedulable
        .iter()
        .all(|r| !r.message.contains("ResourceQuota")));

    // Used up again, then deleted: the note comes and goes with it.
    h.resource_quota(gpu_quota("gpu-quota", "16", "16"), false);
    assert!(status_of(&h.state.cycle(4), "train")
        .message
        .contains("ResourceQuota ml/gpu-quota"));
    assert!(h.resource_quota(gpu_quota("gpu-quota", "16", "16"), true));
    let out = h.state.cycle(5);
    assert!(!status_of(&out, "train").message.contains("ResourceQuota"));

    // A quota used up in pods only: it refuses any pod, even before one exists.
    h.group(pod_group("empty", json!({"minMember": 2})));
    h.resource_quota(
        json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "pod-count", "namespace": "ml"},
            "status": {"hard": {"count/pods": "3"}, "used": {"count/pods": "3"}}}),
        false,
    );
    let out = h.state.cycle(6);
    assert_eq!(
        status_of(&out, "empty").message,
        "gang ml/empty is incomplete: 0 of 2 pods exist (minMember 2); ResourceQuota \
         ml/pod-count has count/pods 3 of 3 used, so the API server refuses the missing pods: \
         raise the quota or end pods in ml"
    );
}

fn gpu_limits(name: &str, item: Value) -> LimitRange {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": name, "namespace": "ml"}, "spec": {"limits": [item]}}))
    .unwrap()
}

#[test]
fn an_incomplete_gang_names_the_limit_range_that_refuses_its_missing_pods() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r1")]);
    h.group(pod_group("train", json!({"minMember": 4})));
    for i in 0..3 {
        // As the API server stores them: extended resources have a limit.
        let mut p = member(&format!("train-{i}"), "train", 2);
        p.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .limits = Some(BTreeMap::from([(
            "nvidia.com/gpu".to_string(),
            Quantity("2".into()),
        )]));
        h.pod(p);
    }
    let waiting = "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); waiting for the rest to be created";
    assert_eq!(status_of(&h.state.cycle(0), "train").message, waiting);

    // Bounds the members keep to, and a claims item: nothing to say.
    let roomy = gpu_limits(
        "gpu-limits",
        json!({"type": "Container", "max": {"nvidia.com/gpu": "4"}, "min": {"cpu": "500m"}}),
    );
    assert!(h.limit_range(Event::Apply(roomy.clone())));
    assert!(!h.limit_range(Event::Apply(gpu_limits(
        "claims",
        json!({"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}})
    ))));
    let out = h.state.cycle(1);
    assert!(
        out.group_status.is_empty() && out.unschedulable.is_empty(),
        "{out:?}"
    );

    // Tightened below what the members ask: the PodGroup and its pods name it, ahead of a
    // used-up ResourceQuota (the API server checks LimitRanges first).
    assert!(h.resource_quota(gpu_quota("gpu-quota", "6", "6"), false));
    assert!(h.limit_range(Event::Apply(gpu_limits(
        "gpu-limits",
        json!({"type": "Container", "max": {"nvidia.com/gpu": "1"}})
    ))));
    let out = h.state.cycle(2);
    let expected = "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); LimitRange \
        ml/gpu-limits allows at most 1 nvidia.com/gpu per Container and a container of the \
        gang's pods has a limit of 2, so the API server refuses the missing pods: widen the \
        LimitRange or change the pods' resources in ml";
    assert_eq!(status_of(&out, "train").message, expected);
    assert_eq!(out.unschedulable.len(), 3, "{out:?}");
    assert!(out.unschedulable.iter().all(|r| r.message == expected));

    // Deleted: the quota is what refuses them now.
    assert!(h.limit_range(Event::Delete(gpu_limits(
        "gpu-limits",
        json!({"type": "Container"})
    ))));
    assert!(status_of(&h.state.cycle(3), "train")
        .message
        .contains("; ResourceQuota ml/gpu-quota has requests.nvidia.com/gpu 6 of 6 used"));
    h.resource_quota(gpu_quota("gpu-quota", "6", "6"), true);
    assert_eq!(status_of(&h.state.cycle(4), "train").message, waiting);

    // A Pod item bounds the containers together; a relist that no longer has it drops it.
    let per_pod = gpu_limits("per-pod", json!({"type": "Pod", "max": {"cpu": "500m"}}));
    assert!(h.limit_range(Event::Apply(per_pod.clone())));
    assert!(status_of(&h.state.cycle(5), "train").message.contains(
        "LimitRange ml/per-pod allows at most 500m cpu per Pod and a pod of the gang sets no cpu limit"
    ));
    h.limit_ranges.apply_watcher_event(&Event::Init);
    h.limit_ranges.apply_watcher_event(&Event::InitApply(roomy));
    assert!(h.limit_range(Event::InitDone));
    assert_eq!(status_of(&h.state.cycle(6), "train").message, waiting);
}

#[test]
fn a_malformed_pod_group_is_reported_and_its_pods_wait_with_that_reason() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    // Role minimums add up to more than minMember: the schema cannot see it, the engine can.
    h.group(pod_group(
        "bad",
        json!({"minMember": 2, "minTaskMember": {"master": 1, "worker": 4}}),
    ));
    h.pod(member("bad-0", "bad", 1));
    h.pod(member("bad-1", "bad", 1));
    assert!(matches!(
        h.state.pod_state("ml/bad-0"),
        Some(PodState::GangWait { .. })
    ));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty());
    assert_eq!(out.group_events.len(), 1, "{out:?}");
    let e = &out.group_events[0];
    assert_eq!(
        (e.name.as_str(), e.uid.as_str(), e.reason),
        ("bad", "pg-bad", "InvalidSpec")
    );
    assert!(
        e.message.contains("PodGroup ml/bad is invalid") && e.message.contains("minTaskMember"),
        "{}",
        e.message
    );
    assert_eq!(out.unschedulable.len(), 2);
    assert!(out
        .unschedulable
        .iter()
        .all(|r| r.reason == "Unschedulable" && r.message == e.message));
    let s = status_of(&out, "bad");
    assert_eq!(
        (s.phase, s.reason.as_str()),
        (PodGroupPhase::Pending, "InvalidSpec")
    );
    // The pods' own status updates do not report them again.
    h.pod(member("bad-0", "bad", 1));
    let out = h.state.cycle(1);
    assert!(
        out.unschedulable.is_empty() && out.group_events.is_empty(),
        "{out:?}"
    );
    // A field the parser does not know: the parser's message, no panic.
    h.group(pod_group("bad", json!({"minMember": 2, "minMembers": 3})));
    let out = h.state.cycle(2);
    assert!(
        out.group_events[0].message.contains("minMembers"),
        "{out:?}"
    );
    assert_eq!(out.unschedulable.len(), 2);
    // Fixed: the pods are scheduled.
    h.group(pod_group("bad", json!({"minMember": 2})));
    let out = h.state.cycle(3);
    assert_eq!(out.binds.len(), 2, "{out:?}");
    assert!(out.group_events.is_empty());
    // A pod of a PodGroup that does not exist waits, saying so.
    h.pod(member("lost-0", "lost", 1));
    let out = h.state.cycle(4);
    assert_eq!(out.unschedulable.len(), 1);
    assert!(
        out.unschedulable[0]
            .message
            .contains("gang ml/lost does not exist"),
        "{out:?}"
    );
    assert!(out.group_status.is_empty(), "no PodGroup, no status");
}

#[test]
fn topology_levels_come_from_the_topology_object_and_unknown_levels_are_reported() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r2")]);
    h.topology("default", &["topology.kestrel.dev/rack"]);
    assert_eq!(h.state.topology_levels(), ["topology.kestrel.dev/rack"]);
    h.group(pod_group(
        "blk",
        json!({"minMember": 2, "topology": {"required": "topology.kestrel.dev/block"}}),
    ));
    let problem = h.state.pod_group_problem("ml", "blk").unwrap().unwrap();
    assert!(
        problem.contains("not a level of the cluster's Topology"),
        "{problem}"
    );
    // Two 6-GPU pods need one rack: neither rack holds 12 GPUs, so nothing binds.
    h.group(pod_group(
        "blk",
        json!({"minMember": 2, "topology": {"required": "topology.kestrel.dev/rack"}}),
    ));
    assert_eq!(h.state.pod_group_problem("ml", "blk"), Some(None));
    h.pod(member("blk-0", "blk", 6));
    h.pod(member("blk-1", "blk", 6));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "{out:?}");
    let s = status_of(&out, "blk");
    assert_eq!(s.reason, "Unschedulable");
    assert!(
        s.message.contains("one topology.kestrel.dev/rack domain"),
        "{}",
        s.message
    );
}

#[test]
fn a_failed_bind_of_a_member_requeues_it_and_the_status_says_so() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.group(pod_group("pt", json!({"minMember": 2})));
    h.pod(member("pt-0", "pt", 2));
    h.pod(member("pt-1", "pt", 2));
    let out = h.state.cycle(0);
    assert_eq!(out.binds.len(), 2);
    h.state.bind_result(out.binds[0].id, BindOutcome::Bound);
    h.state.bind_result(
        out.binds[1].id,
        BindOutcome::Retry("the server is busy".into()),
    );
    assert!(matches!(
        h.state.pod_state("ml/pt-1"),
        Some(PodState::Queued(_))
    ));
    let out = h.state.cycle(1);
    assert_eq!(out.binds.len(), 1, "the member is placed again: {out:?}");
    let s = status_of(&out, "pt");
    assert_eq!(
        (s.phase, s.reason.as_str(), s.scheduled),
        (PodGroupPhase::Pending, "BindFailed", 1)
    );
    assert!(
        s.message
            .contains("binding pod ml/pt-1 to node gpu-0 failed (the server is busy)"),
        "{}",
        s.message
    );
    h.state.bind_result(out.binds[0].id, BindOutcome::Bound);
    let out = h.state.cycle(2);
    assert_eq!(status_of(&out, "pt").phase, PodGroupPhase::Scheduled);
}

#[test]
fn a_gang_times_out_at_its_deadline_keeps_its_pods_and_starts_after_the_back_off() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    // The scheduler has been leading for a day when the gang arrives.
    let day = 86_400_000;
    h.state.set_time(day);
    h.group(pod_group(
        "slow",
        json!({"minMember": 2, "scheduleTimeoutSeconds": 60}),
    ));
    h.pod(member("slow-0", "slow", 1));
    let out = h.state.cycle(day);
    assert_eq!(
        status_of(&out, "slow").reason,
        "Incomplete",
        "not timed out on arrival"
    );
    // Nothing else happens: the driver's timer is the deadline itself.
    assert_eq!(h.state.next_timer(), Some(day + 60_000));
    h.state.set_time(day + 60_000);
    let out = h.state.cycle(day + 60_000);
    let s = status_of(&out, "slow");
    assert_eq!(
        (s.phase, s.reason.as_str()),
        (PodGroupPhase::TimedOut, "TimedOut")
    );
    assert!(s.message.contains("timed out after 60 s"), "{}", s.message);
    assert!(s.message.contains("back-off of 60 s"), "{}", s.message);
    // The pod is not dropped: it stays queued, saying why.
    assert!(matches!(
        h.state.pod_state("ml/slow-0"),
        Some(PodState::Queued(_))
    ));
    assert_eq!(out.unschedulable.len(), 1);
    assert!(out.unschedulable[0].message.contains("timed out"));
    assert_eq!(h.state.pending_by_reason()["gang"], 1);
    // A quiet cluster stays quiet.
    assert_eq!(h.state.next_timer(), None);
    // The missing member arrives during the back-off: the gang waits it out, then starts.
    h.state.set_time(day + 70_000);
    h.pod(member("slow-1", "slow", 1));
    let out = h.state.cycle(day + 70_000);
    assert!(out.binds.is_empty());
    assert_eq!(h.state.next_timer(), Some(day + 120_000));
    h.state.set_time(day + 120_000);
    let out = h.state.cycle(day + 120_000);
    assert_eq!(out.binds.len(), 2);
}

#[test]
fn kueue_plain_pod_groups_need_no_pod_group_and_others_wait_for_theirs() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    let kueue = |name: &str| {
        let mut p = member(name, "unused", 1);
        p.metadata.labels = Some(
            [(
                "kueue.x-k8s.io/pod-group-name".to_string(),
                "kq".to_string(),
            )]
            .into(),
        );
        p.metadata.annotations = Some(
            [(
                "kueue.x-k8s.io/pod-group-total-count".to_string(),
                "2".to_string(),
            )]
            .into(),
        );
        p
    };
    h.pod(kueue("kq-0"));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty());
    assert!(
        out.unschedulable[0].message.contains("1 of 2 pods exist"),
        "{out:?}"
    );
    assert!(
        out.group_status.is_empty(),
        "no PodGroup object to write to"
    );
    h.pod(kueue("kq-1"));
    assert_eq!(h.state.cycle(1).binds.len(), 2);
    // A scheduler-plugins PodGroup label without its PodGroup: the pod waits for it.
    let mut p = member("sp-0", "unused", 1);
    p.metadata.labels = Some(
        [(
            "scheduling.x-k8s.io/pod-group".to_string(),
            "sp".to_string(),
        )]
        .into(),
    );
    h.pod(p);
    let out = h.state.cycle(2);
    assert!(matches!(
        h.state.pod_state("ml/sp-0"),
        Some(PodState::GangWait { .. })
    ));
    assert_eq!(out.unschedulable[0].reason, "Unschedulable");
    assert!(
        out.unschedulable[0]
            .message
            .contains("gang ml/sp does not exist"),
        "{out:?}"
    );
}

#[test]
fn scheduler_plugins_volcano_and_kubernetes_pod_groups_make_gangs_without_status_writes() {
    let mut h = Harness::new(&[
        node("gpu-0", 8, "r1"),
        node("gpu-1", 8, "r1"),
        node("gpu-2", 8, "r1"),
    ]);
    let plugins = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "sp", "namespace": "ml", "uid": "pg-sp"}, "spec": {"minMember": 2}});
    driver::apply_change(
        &mut h.state,
        &h.stores,
        Change::ForeignPodGroup {
            kind: "scheduler-plugins PodGroup",
            event: Box::new(Event::Apply(serde_json::from_value(plugins).unwrap())),
        },
    );
    let mut first: Value = serde_json::to_value(member("sp-0", "x", 4)).unwrap();
    first["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "sp"});
    h.pod(serde_json::from_value(first.clone()).unwrap());
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "1 of 2: {out:?}");
    assert!(
        out.group_status.is_empty(),
        "its status is not Kestrel's to write"
    );
    let mut second = first.clone();
    second["metadata"]["name"] = json!("sp-1");
    second["metadata"]["uid"] = json!("uid-sp-1");
    h.pod(serde_json::from_value(second).unwrap());
    let out = h.state.cycle(1);
    assert_eq!(out.binds.len(), 2, "the whole gang: {out:?}");
    assert!(out.group_status.is_empty() && out.group_events.is_empty());

    // Volcano: pods name their PodGroup by annotation.
    let volcano = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "vc", "namespace": "ml", "uid": "pg-vc"}, "spec": {"minMember": 2}});
    driver::apply_change(
        &mut h.state,
        &h.stores,
        Change::ForeignPodGroup {
            kind: "Volcano PodGroup",
            event: Box::new(Event::Apply(serde_json::from_value(volcano).unwrap())),
        },
    );
    for i in 0..2 {
        let mut p: Value = serde_json::to_value(member(&format!("vc-{i}"), "x", 4)).unwrap();
        p["metadata"]["labels"] = json!({});
        p["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": "vc"});
        h.pod(serde_json::from_value(p).unwrap());
    }
    let out = h.state.cycle(2);
    assert_eq!(out.binds.len(), 2, "{out:?}");

    // Kubernetes' Workload API: pods name their PodGroup in spec.schedulingGroup. Listed,
    // a built-in kind's items come without apiVersion and kind: the watch says which.
    let kube = json!({
        "metadata": {"name": "wl", "namespace": "ml", "uid": "pg-wl"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}});
    driver::apply_change(
        &mut h.state,
        &h.stores,
        Change::ForeignPodGroup {
            kind: "Kubernetes PodGroup",
            event: Box::new(Event::Apply(serde_json::from_value(kube).unwrap())),
        },
    );
    let wl_pod = |i: u32| {
        let mut p: Value = serde_json::to_value(member(&format!("wl-{i}"), "x", 4)).unwrap();
        p["metadata"]["labels"] = json!({});
        p["spec"]["schedulingGroup"] = json!({"podGroupName": "wl"});
        serde_json::from_value::<Pod>(p).unwrap()
    };
    h.pod(wl_pod(0));
    let out = h.state.cycle(3);
    assert!(out.binds.is_empty(), "1 of 2: {out:?}");
    h.pod(wl_pod(1));
    let out = h.state.cycle(4);
    assert_eq!(out.binds.len(), 2, "{out:?}");
    assert!(
        out.group_status.is_empty(),
        "its status is kube-scheduler's"
    );
}
