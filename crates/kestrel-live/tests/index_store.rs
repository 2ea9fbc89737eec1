//! The watch-to-index path with reflector stores filled by hand.

use k8s_openapi::api::core::v1::{Node, Pod};
use kestrel_core::SchedulerConfig;
use kestrel_live::index::{self, BindOutcome, LiveIndex, PodState, VolumeEvent};
use kube::runtime::reflector::store;
use kube::runtime::watcher::Event;
use serde_json::json;

use kestrel_test_support::k8s::{NodeJson, PodJson};

fn node(name: &str, gpus: u32) -> Node {
    NodeJson::new(name, gpus).node()
}

fn pod(name: &str, gpus: u32, node: Option<&str>) -> Pod {
    let mut p = PodJson::new("ml", name, gpus)
        .uid(&format!("u-{name}"))
        .scheduler("kestrel");
    if let Some(n) = node {
        p = p.node(n);
    }
    p.pod()
}

fn free_gpus(state: &LiveIndex, node: &str) -> u64 {
    let c = state.scheduler().cluster();
    let n = c.node(c.id_of(node).unwrap());
    n.gpus.iter().map(|g| u64::from(g.free_milli)).sum()
}

#[test]
fn a_relist_forgets_what_was_deleted_while_the_watch_was_down() {
    let (nodes, mut node_writer) = store::<Node>();
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    for e in [
        Event::Init,
        Event::InitApply(node("gpu-0", 8)),
        Event::InitApply(node("gpu-1", 8)),
        Event::InitDone,
    ] {
        node_writer.apply_watcher_event(&e);
        if let Event::InitApply(n) = &e {
            state.apply_node(n).unwrap();
        }
    }
    // Pods have no store: the index tracks which pods a listing names.
    state.begin_pod_relist();
    state.apply_pod(&pod("a", 4, Some("gpu-0")));
    state.apply_pod(&pod("b", 2, Some("gpu-1")));
    state.end_pod_relist();
    assert_eq!(free_gpus(&state, "gpu-0"), 4000);
    assert_eq!(free_gpus(&state, "gpu-1"), 6000);
    // Pods seen outside a listing are kept by the next one's end only if it lists them.
    state.apply_pod(&pod("c", 1, Some("gpu-0")));
    state.end_pod_relist();
    assert!(
        state.pod_state("ml/c").is_some(),
        "no listing begun: nothing dropped"
    );
    // The watch restarts; pods a and c and node gpu-1 were deleted meanwhile.
    state.begin_pod_relist();
    state.apply_pod(&pod("b", 2, Some("gpu-1")));
    state.end_pod_relist();
    node_writer.apply_watcher_event(&Event::Init);
    node_writer.apply_watcher_event(&Event::InitApply(node("gpu-0", 8)));
    node_writer.apply_watcher_event(&Event::InitDone);
    assert!(state.pod_state("ml/c").is_none());
    state.retain_nodes(&index::node_names(&nodes.state()));
    assert_eq!(free_gpus(&state, "gpu-0"), 8000, "a's GPUs are free again");
    assert!(state.pod_state("ml/a").is_none());
    assert!(
        matches!(state.pod_state("ml/b"), Some(PodState::Orphan { node, .. }) if node == "gpu-1"),
        "b waits for its node and is not rescheduled: {:?}",
        state.pod_state("ml/b")
    );
    assert_eq!(state.scheduler().pending_count(), 0);
    // The node comes back: b counts on it again.
    state.apply_node(&node("gpu-1", 8)).unwrap();
    assert_eq!(free_gpus(&state, "gpu-1"), 6000);
}

#[test]
fn bind_results_never_leak_or_double_count() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&node("gpu-0", 8)).unwrap();
    for name in ["p", "q", "r", "s"] {
        state.apply_pod(&pod(name, 2, None));
    }
    let out = state.cycle(0);
    assert_eq!(out.binds.len(), 4);
    assert_eq!(free_gpus(&state, "gpu-0"), 0);
    let id = |n: &str| out.binds.iter().find(|b| b.name == n).unwrap().id;
    // p: bound, then the watch confirms it.
    state.bind_result(id("p"), BindOutcome::Bound);
    state.apply_pod(&pod("p", 2, Some("gpu-0")));
    assert!(matches!(
        state.pod_state("ml/p"),
        Some(PodState::Bound { .. })
    ));
    // q: deleted meanwhile.
    state.bind_result(id("q"), BindOutcome::PodGone);
    assert!(state.pod_state("ml/q").is_none());
    // r: a transient error: requeued, capacity freed.
    state.bind_result(id("r"), BindOutcome::Retry("timeout".into()));
    assert!(matches!(state.pod_state("ml/r"), Some(PodState::Queued(_))));
    // s: someone else bound it elsewhere (conflict with the pod read back).
    state.apply_node(&node("gpu-1", 8)).unwrap();
    let elsewhere = pod("s", 2, Some("gpu-1"));
    state.bind_result(id("s"), BindOutcome::Conflict(Some(Box::new(elsewhere))));
    assert!(
        matches!(state.pod_state("ml/s"), Some(PodState::Bound { node, .. }) if node == "gpu-1")
    );
    assert_eq!(
        free_gpus(&state, "gpu-0"),
        6000,
        "only p holds GPUs on gpu-0: q and r freed theirs, s moved"
    );
    assert_eq!(free_gpus(&state, "gpu-1"), 6000);
    // A stale result for p is ignored.
    state.bind_result(id("p"), BindOutcome::Retry("late".into()));
    assert!(matches!(
        state.pod_state("ml/p"),
        Some(PodState::Bound { .. })
    ));
    // r is placed again.
    let again = state.cycle(1);
    assert_eq!(again.binds.len(), 1);
    assert_eq!(again.binds[0].name, "r");
    // Terminal pods free their GPUs.
    let mut done = pod("p", 2, Some("gpu-0"));
    done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
    state.apply_pod(&done);
    assert!(state.pod_state("ml/p").is_none());
}

#[test]
fn other_schedulers_pods_wait_untouched_and_gated_pods_wait() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&node("gpu-0", 8)).unwrap();
    let mut theirs = pod("theirs", 1, None);
    theirs.spec.as_mut().unwrap().scheduler_name = Some("default-scheduler".into());
    state.apply_pod(&theirs);
    let mut gated = pod("gated", 1, None);
    gated.spec.as_mut().unwrap().scheduling_gates = Some(vec![serde_json::from_value(
        json!({"name": "example.com/wait"}),
    )
    .unwrap()]);
    state.apply_pod(&gated);
    assert!(state.pod_state("ml/theirs").is_none());
    assert_eq!(state.pod_state("ml/gated"), Some(&PodState::Gated));
    assert!(state.cycle(0).binds.is_empty());
    gated.spec.as_mut().unwrap().scheduling_gates = None;
    state.apply_pod(&gated);
    assert_eq!(state.cycle(1).binds.len(), 1);
}

#[test]
fn an_unreadable_pod_is_reported_and_retried_when_classes_change() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&node("gpu-0", 8)).unwrap();
    let mut p = pod("kata", 1, None);
    p.spec.as_mut().unwrap().runtime_class_name = Some("kata".into());
    state.apply_pod(&p);
    assert!(matches!(
        state.pod_state("ml/kata"),
        Some(PodState::Invalid(_))
    ));
    let rc =
        serde_json::from_value(json!({"metadata": {"name": "kata"}, "handler": "kata"})).unwrap();
    state.set_classes(
        [],
        [&rc],
        kestrel_objects::pods::WorkloadPriorityListing::NotServed,
    );
    assert!(matches!(
        state.pod_state("ml/kata"),
        Some(PodState::Queued(_))
    ));
    let out = state.cycle(0);
    assert!(
        out.unschedulable.is_empty(),
        "the stale report is dropped: {out:?}"
    );
    assert_eq!(out.binds.len(), 1);
    // Without the class the report names the field.
    let mut q = pod("kata2", 1, None);
    q.spec.as_mut().unwrap().runtime_class_name = Some("gvisor".into());
    state.apply_pod(&q);
    let out = state.cycle(1);
    assert_eq!(out.unschedulable.len(), 1);
    assert_eq!(out.unschedulable[0].reason, "SchedulerError");
    assert!(
        out.unschedulable[0]
            .message
            .contains("spec.runtimeClassName"),
        "{:?}",
        out.unschedulable[0]
    );
}

fn prioritized(mut p: Pod, priority: i32, annotations: &[(&str, &str)]) -> Pod {
    p.spec.as_mut().unwrap().priority = Some(priority);
    let a = p.metadata.annotations.get_or_insert_with(Default::default);
    for (k, v) in annotations {
        a.insert(k.to_string(), v.to_string());
    }
    p
}

#[test]
fn preemption_victims_are_evicted_or_asked_to_checkpoint_first() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    // Driver time 0 is 2026-11-30T12:00:00Z.
    state.set_wall_origin(1_796_040_000_000);
    state.apply_node(&node("gpu-0", 8)).unwrap();
    let plain = prioritized(pod("sweep", 4, Some("gpu-0")), 0, &[]);
    let ckpt = prioritized(
        pod("train", 4, Some("gpu-0")),
        0,
        &[("kestrel.dev/checkpoint-grace", "60s")],
    );
    state.apply_pod(&plain);
    state.apply_pod(&ckpt);
    state.set_time(1_000);
    state.apply_pod(&prioritized(pod("urgent", 8, None), 1000, &[]));
    let out = state.cycle(1_000);
    assert!(out.binds.is_empty());
    assert_eq!(out.nominations.len(), 1, "{out:?}");
    assert_eq!(
        (
            out.nominations[0].name.as_str(),
            out.nominations[0].node.as_str()
        ),
        ("urgent", "gpu-0")
    );
    assert_eq!(out.evictions.len(), 1, "{out:?}");
    assert_eq!(out.evictions[0].name, "sweep");
    assert_eq!(out.evictions[0].uid, "u-sweep");
    assert!(
        out.evictions[0].message.contains("for ml/urgent"),
        "{}",
        out.evictions[0].message
    );
    assert_eq!(out.checkpoint_requests.len(), 1);
    let request = &out.checkpoint_requests[0];
    assert_eq!(request.name, "train");
    assert_eq!(request.requested_at, "2026-11-30T12:00:01Z");
    assert_eq!(request.grace_seconds, 60);
    // The checkpointing victim goes when its grace is over at the latest.
    assert_eq!(state.next_timer(), Some(61_000));
    // Nothing is handed out twice.
    let again = state.cycle(2_000);
    assert!(again.evictions.is_empty() && again.checkpoint_requests.is_empty());
    // It reports a checkpoint after the request: it may go now.
    state.set_time(5_000);
    state.apply_pod(&prioritized(
        pod("train", 4, Some("gpu-0")),
        0,
        &[
            ("kestrel.dev/checkpoint-grace", "60s"),
            ("kestrel.dev/last-checkpoint", "2026-11-30T12:00:04Z"),
        ],
    ));
    let out = state.cycle(5_000);
    assert_eq!(out.evictions.len(), 1);
    assert_eq!(out.evictions[0].name, "train");
    // Both leave; the preemptor is bound.
    state.delete_pod(&plain);
    state.delete_pod(&ckpt);
    let out = state.cycle(6_000);
    assert_eq!(out.binds.len(), 1);
    assert_eq!(out.binds[0].name, "urgent");
}

#[test]
fn a_failed_eviction_is_tried_again_and_an_early_checkpoint_does_not_hurry_it() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.set_wall_origin(1_796_040_000_000);
    state.apply_node(&node("gpu-0", 8)).unwrap();
    // Its last checkpoint is older than any request.
    let ckpt = prioritized(
        pod("train", 8, Some("gpu-0")),
        0,
        &[
            ("kestrel.dev/checkpoint-grace", "30s"),
            ("kestrel.dev/last-checkpoint", "2026-11-30T11:59:00Z"),
        ],
    );
    state.apply_pod(&ckpt);
    state.apply_pod(&prioritized(pod("urgent", 8, None), 1000, &[]));
    let out = state.cycle(0);
    assert_eq!(out.checkpoint_requests.len(), 1);
    state.apply_pod(&ckpt);
    assert!(
        state.cycle(1_000).evictions.is_empty(),
        "its checkpoint predates the request"
    );
    let out = state.cycle(30_000);
    assert_eq!(out.evictions.len(), 1);
    state.eviction_result(&out.evictions[0], Err("the server is busy".into()));
    assert_eq!(state.next_timer(), Some(35_000));
    assert_eq!(state.cycle(35_000).evictions.len(), 1);
}

#[test]
fn disruption_budgets_steer_victims_and_bad_ones_are_reported() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&node("gpu-0", 8)).unwrap();
    let labelled = |name: &str, app: &str| {
        let mut p = prioritized(pod(name, 4, Some("gpu-0")), 0, &[]);
        p.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("app".into(), app.into());
        p
    };
    state.apply_pod(&labelled("batch", "batch"));
    state.set_time(500);
    // Newer: the victim it would be without its budget.
    state.apply_pod(&labelled("db", "db"));
    let budget = |spec: serde_json::Value| {
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "db", "namespace": "ml"}, "spec": spec})
    };
    let good = budget(json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}));
    assert!(state.set_queues([&good]).is_empty());
    assert_eq!(state.scheduler().disruption_budgets().count(), 1);

    // A malformed version is reported and the one in force stays.
    let bad = budget(json!({"minAvailable": 1, "maxUnavailable": "10%"}));
    let errors = state.set_queues([&bad]);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].contains("PodDisruptionBudget ml/db")
            && errors[0].contains("spec.maxUnavailable"),
        "{}",
        errors[0]
    );
    assert_eq!(state.scheduler().disruption_budgets().count(), 1);

    state.set_time(1_000);
    state.apply_pod(&prioritized(pod("urgent", 4, None), 1000, &[]));
    let out = state.cycle(1_000);
    assert_eq!(out.evictions.len(), 1, "{out:?}");
    assert_eq!(out.evictions[0].name, "batch");

    // Deleted from the listing, it is gone.
    let none: [&serde_json::Value; 0] = [];
    assert!(state.set_queues(none).is_empty());
    assert_eq!(state.scheduler().disruption_budgets().count(), 0);
}

/// Warnings about Volcano queues, as the live scheduler reads them (every listing again):
/// each said once while it lasts, naming the object (apiVersion and uid from the listing,
/// a parent queue's too) and the field; a broken version keeps the warnings of the one in
/// force; a queue that goes away is forgotten.
#[test]
fn queue_warnings_are_said_once_while_they_last() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    let queue = |name: &str, uid: &str, spec: serde_json::Value| {
        json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
               "metadata": {"name": name, "uid": uid}, "spec": spec})
    };
    let org = queue(
        "org",
        "u-org",
        json!({"capability": {"nvidia.com/gpu": 4}, "weight": 2}),
    );
    let team = queue(
        "team",
        "u-team",
        json!({"parent": "org", "weight": 1, "extendClusters": []}),
    );
    assert!(state.set_queues([&org, &team]).is_empty());
    let said = state.take_field_warnings();
    assert_eq!(said.len(), 2, "{said:?}");
    let unread = said
        .iter()
        .find(|w| w.object.name == "team")
        .expect("team's unread field");
    assert_eq!(unread.field.as_deref(), Some("spec.extendClusters"));
    assert_eq!(
        unread.object.api_version.as_deref(),
        Some("scheduling.volcano.sh/v1beta1")
    );
    assert_eq!(unread.object.uid.as_deref(), Some("u-team"));
    assert_eq!(
        unread.to_string(),
        "cluster: Queue team: field spec.extendClusters: is not read by Kestrel and has no effect"
    );
    let parent = said.iter().find(|w| w.object.name == "org").unwrap();
    assert!(
        parent
            .to_string()
            .starts_with("Queue org: field spec.weight: is a parent queue's"),
        "{parent}"
    );
    assert_eq!(
        (
            parent.object.api_version.as_deref(),
            parent.object.uid.as_deref()
        ),
        (Some("scheduling.volcano.sh/v1beta1"), Some("u-org"))
    );

    // Read again, and changed with the same warnings: nothing new.
    assert!(state.set_queues([&org, &team]).is_empty());
    let team_heavier = queue(
        "team",
        "u-team",
        json!({"parent": "org", "weight": 3, "extendClusters": []}),
    );
    assert!(state.set_queues([&org, &team_heavier]).is_empty());
    assert_eq!(state.take_field_warnings(), vec![]);

    // A version that cannot be read: the one in force stays, and so do its warnings.
    let broken = queue(
        "team",
        "u-team",
        json!({"parent": "org", "reclaimable": "no", "extendClusters": []}),
    );
    assert_eq!(state.set_queues([&org, &broken]).len(), 1);
    assert!(state.set_queues([&org, &team]).is_empty());
    assert_eq!(state.take_field_warnings(), vec![]);

    // Fixed, then broken again: said again. Gone, then back: said again.
    let fixed = queue("team", "u-team", json!({"parent": "org"}));
    assert!(state.set_queues([&org, &fixed]).is_empty());
    assert!(state.set_queues([&org, &team]).is_empty());
    assert_eq!(state.take_field_warnings().len(), 1);
    assert!(state.set_queues([&org]).is_empty());
    assert!(state.set_queues([&org, &team]).is_empty());
    let again = state.take_field_warnings();
    assert_eq!(
        again.len(),
        2,
        "team's, and org's as a parent again: {again:?}"
    );
}

/// A parent Volcano queue whose new version cannot be read keeps its previous one in
/// force, as a leaf does: its capability still bounds its children together.
#[test]
fn a_broken_parent_queue_keeps_its_limit_in_force() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&node("gpu-0", 8)).unwrap();
    let queue = |name: &str, spec: serde_json::Value| {
        json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
               "metadata": {"name": name, "uid": format!("u-{name}")}, "spec": spec})
    };
    let org = queue("org", json!({"capability": {"nvidia.com/gpu": 4}}));
    let team = queue("team", json!({"parent": "org"}));
    assert!(state.set_queues([&org, &team]).is_empty());
    let broken_org = queue(
        "org",
        json!({"capability": {"nvidia.com/gpu": 4}, "reclaimable": "no"}),
    );
    let errors = state.set_queues([&broken_org, &team]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("org"), "{}", errors[0]);
    for i in 0..3 {
        let name = format!("w{i}");
        state.apply_pod(&prioritized(
            pod(&name, 2, None),
            0,
            &[("scheduling.volcano.sh/queue-name", "team")],
        ));
    }
    let out = state.cycle(0);
    assert_eq!(
        out.binds.len(),
        2,
        "org's capability of 4 GPUs stays in force: {:?}",
        out.binds
    );
    assert_eq!(free_gpus(&state, "gpu-0"), 4_000);

    // Its fixed version, without a capability, lets the third in.
    let open_org = queue("org", json!({}));
    assert!(state.set_queues([&open_org, &team]).is_empty());
    assert_eq!(state.cycle(1_000).binds.len(), 1);
}

/// A ResourceQuota's warning is said once while it lasts, naming the quota.
#[test]
fn admission_warnings_are_said_once_while_they_last() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    let quota = |scope: &str| -> k8s_openapi::api::core::v1::ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": "gpus", "namespace": "ml", "uid": "u-q"},
            "spec": {"scopes": [scope]},
            "status": {"hard": {"pods": "4"}, "used": {"pods": "1"}},
        }))
        .unwrap()
    };
    state.apply_namespace_policy(&quota("Sometimes"));
    let said = state.take_field_warnings();
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0].object.kind, "ResourceQuota");
    assert_eq!(said[0].object.namespace.as_deref(), Some("ml"));
    assert_eq!(said[0].object.uid.as_deref(), Some("u-q"));
    assert_eq!(said[0].field.as_deref(), Some("spec.scopes"));
    state.apply_namespace_policy(&quota("Sometimes"));
    assert_eq!(state.take_field_warnings(), vec![]);
    // Not used (its scope is unknown), but its warning is forgotten with it.
    assert!(!state.delete_namespace_policy("ResourceQuota", "ml", "gpus"));
    state.apply_namespace_policy(&quota("Sometimes"));
    assert_eq!(state.take_field_warnings().len(), 1, "deleted and back");
}

fn with_claim(mut p: Pod, claim: &str) -> Pod {
    let spec = p.spec.as_mut().unwrap();
    spec.volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
    )
    .unwrap()]);
    p
}

fn claim_event(name: &str, volume: &str) -> VolumeEvent {
    let claim = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml",
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"accessModes": ["ReadWriteMany"], "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    VolumeEvent::Claim(Box::new(Event::Apply(claim)))
}

fn volume_event(name: &str, claim: &str, zone: &str) -> VolumeEvent {
    let pv = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
                 "csi": {"driver": "disk.example.com", "volumeHandle": name},
                 "claimRef": {"namespace": "ml", "name": claim},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}},
    }))
    .unwrap();
    VolumeEvent::Volume(Box::new(Event::Apply(pv)))
}

fn zoned(mut n: Node, zone: &str) -> Node {
    n.metadata.labels =
        Some([("topology.kubernetes.io/zone".to_string(), zone.to_string())].into());
    n
}

/// Pods wait on their claims outside the engine with kube-scheduler's reason; each storage
/// change reads again the pods of the claims it touches (the claim itself, its volume);
/// a pod whose claim is settled goes where its volume is.
#[test]
fn pods_wait_on_their_claims_and_are_read_again_when_those_change() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&zoned(node("gpu-a", 8), "a")).unwrap();
    state.apply_node(&zoned(node("gpu-b", 8), "b")).unwrap();
    state.apply_pod(&with_claim(pod("one", 1, None), "one-data"));
    state.apply_pod(&with_claim(pod("two", 1, None), "two-data"));
    let waiting = |state: &LiveIndex, key: &str| {
        assert!(
            matches!(state.pod_state(key), Some(PodState::Invalid(_))),
            "{key} waits outside the engine: {:?}",
            state.pod_state(key)
        );
    };
    let out = state.cycle(0);
    assert_eq!(out.binds.len(), 0);
    let message = |name: &str| {
        out.unschedulable
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.message.clone())
            .unwrap_or_default()
    };
    assert!(
        message("one").contains("persistentvolumeclaim \"one-data\" not found"),
        "{:?}",
        out.unschedulable
    );
    assert!(message("two").contains("\"two-data\" not found"));

    // one's claim arrives, bound to a volume not listed yet: it still waits, as two does.
    state.apply_volume_event(claim_event("one-data", "pv-one"));
    waiting(&state, "ml/one");
    waiting(&state, "ml/two");
    // The volume arrives, in zone b: one goes there; two still waits for its claim.
    state.apply_volume_event(volume_event("pv-one", "one-data", "b"));
    let out = state.cycle(1);
    assert_eq!(out.binds.len(), 1, "{:?}", out.unschedulable);
    assert_eq!(
        (out.binds[0].name.as_str(), out.binds[0].node.as_str()),
        ("one", "gpu-b")
    );
    waiting(&state, "ml/two");
    state.apply_volume_event(claim_event("two-data", "pv-two"));
    state.apply_volume_event(volume_event("pv-two", "two-data", "a"));
    let out = state.cycle(2);
    assert_eq!(out.binds.len(), 1, "{:?}", out.unschedulable);
    assert_eq!(
        (out.binds[0].name.as_str(), out.binds[0].node.as_str()),
        ("two", "gpu-a")
    );
}

/// A local volume (class `local`) in `zone`, with the claim it names (none: Available).
fn local_volume_event(name: &str, zone: &str, claim: Option<&str>) -> VolumeEvent {
    let mut pv = json!({
        "metadata": {"name": name},
        "spec": {"storageClassName": "local", "capacity": {"storage": "10Gi"},
                 "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/disks/1"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]}]}}},
        "status": {"phase": "Available"},
    });
    if let Some(claim) = claim {
        pv["spec"]["claimRef"] = json!({"namespace": "ml", "name": claim});
        pv["status"]["phase"] = json!("Bound");
    }
    VolumeEvent::Volume(Box::new(Event::Apply(serde_json::from_value(pv).unwrap())))
}

/// A claim of class `local`, bound to `volume` when given.
fn local_claim_event(name: &str, volume: Option<&str>) -> VolumeEvent {
    let mut claim = json!({
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "5Gi"}}},
    });
    if let Some(volume) = volume {
        claim["spec"]["volumeName"] = json!(volume);
        claim["metadata"]["annotations"] = json!({"pv.kubernetes.io/bind-completed": "yes"});
    }
    VolumeEvent::Claim(Box::new(Event::Apply(
        serde_json::from_value(claim).unwrap(),
    )))
}

/// Claims of a class without a provisioner: a bind carries the volume the engine chose
/// for its claim; a pod with no volume left waits with kube-scheduler's reason until one
/// comes; the engine's choice lasts until the API shows the claim bound.
#[test]
fn claims_without_a_provisioner_are_bound_to_the_volumes_the_engine_chose() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&zoned(node("gpu-a", 8), "a")).unwrap();
    state.apply_node(&zoned(node("gpu-b", 8), "b")).unwrap();
    let class = serde_json::from_value(json!({
        "metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
    .unwrap();
    state.apply_volume_event(VolumeEvent::Class(Box::new(Event::Apply(class))));
    state.apply_volume_event(local_volume_event("pv-a", "a", None));
    state.apply_volume_event(local_claim_event("c1", None));
    state.apply_volume_event(local_claim_event("c2", None));
    state.apply_pod(&with_claim(pod("one", 1, None), "c1"));
    state.apply_pod(&with_claim(pod("two", 1, None), "c2"));
    let out = state.cycle(0);
    assert_eq!(out.binds.len(), 1, "one volume for two claims");
    let bind = &out.binds[0];
    assert_eq!(bind.node, "gpu-a");
    assert_eq!(bind.provision.len(), 1);
    assert_eq!(bind.provision[0].volume.as_deref(), Some("pv-a"));
    let (bound_claim, other) = if bind.name == "one" {
        ("c1", "two")
    } else {
        ("c2", "one")
    };
    assert_eq!(bind.provision[0].claim, bound_claim);
    let waits = out.unschedulable.iter().find(|s| s.name == other).unwrap();
    assert!(
        waits
            .message
            .contains("didn't find available persistent volumes to bind"),
        "{}",
        waits.message
    );
    state.bind_result(bind.id, BindOutcome::Bound);

    // The binder wrote the claim on the volume: the choice stands until the claim is bound.
    state.apply_volume_event(local_volume_event("pv-a", "a", Some(bound_claim)));
    let key = format!("ml/{bound_claim}");
    assert!(state.scheduler().claim_binding(&key).is_some());
    // A second volume, in zone b: the other pod goes there.
    state.apply_volume_event(local_volume_event("pv-b", "b", None));
    let out = state.cycle(1);
    assert_eq!(out.binds.len(), 1, "{:?}", out.unschedulable);
    assert_eq!(out.binds[0].node, "gpu-b");
    assert_eq!(out.binds[0].provision[0].volume.as_deref(), Some("pv-b"));
    // The volume controller binds the claim: the engine forgets its choice.
    state.apply_volume_event(local_claim_event(bound_claim, Some("pv-a")));
    assert!(state.scheduler().claim_binding(&key).is_none());
}

fn csi_node_event(node: &str, count: u32) -> VolumeEvent {
    let csi = serde_json::from_value(json!({
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": "disk.example.com", "nodeID": node,
                              "allocatable": {"count": count}}]},
    }))
    .unwrap();
    VolumeEvent::CsiNode(Box::new(Event::Apply(csi)))
}

/// A node's CSINode limits the volumes of its driver the node attaches; a CSINode that
/// allows more lets the waiting pod in.
#[test]
fn csinode_limits_hold_pods_until_the_node_may_attach_their_volumes() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    state.apply_node(&zoned(node("gpu-b", 8), "b")).unwrap();
    state.apply_volume_event(csi_node_event("gpu-b", 1));
    for name in ["one", "two"] {
        state.apply_volume_event(claim_event(&format!("{name}-data"), &format!("pv-{name}")));
        state.apply_volume_event(volume_event(
            &format!("pv-{name}"),
            &format!("{name}-data"),
            "b",
        ));
    }
    state.apply_pod(&with_claim(pod("one", 1, None), "one-data"));
    let out = state.cycle(0);
    assert_eq!(out.binds.len(), 1, "{:?}", out.unschedulable);
    state.apply_pod(&with_claim(pod("two", 1, None), "two-data"));
    let out = state.cycle(1);
    assert_eq!(out.binds.len(), 0);
    assert!(
        out.unschedulable[0]
            .message
            .contains("1 node(s) exceed max volume count"),
        "{:?}",
        out.unschedulable
    );
    state.apply_volume_event(csi_node_event("gpu-b", 2));
    let out = state.cycle(2);
    assert_eq!(out.binds.len(), 1, "{:?}", out.unschedulable);
}

/// A node without `nvidia.com/gpu` whose four GPUs NVIDIA's DRA driver publishes, and a
/// DeviceClass that serves `nvidia.com/gpu` from them.
fn dra_served(state: &mut LiveIndex, node_name: &str) {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
    state.apply_node(&node(node_name, 0)).unwrap();
    let devices: Vec<serde_json::Value> = (0..4)
        .map(|i| {
            json!({"name": format!("gpu-{i}"), "attributes": {
            "type": {"string": "gpu"}, "index": {"int": i}}})
        })
        .collect();
    let slice: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": format!("{node_name}-gpus")},
        "spec": {"driver": "gpu.nvidia.com", "nodeName": node_name,
                 "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices}}))
    .unwrap();
    state.apply_resource_slice(&format!("{node_name}-gpus"), Some(&slice));
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"extendedResourceName": "nvidia.com/gpu",
                 "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}))
    .unwrap();
    state.apply_device_class("gpu.nvidia.com", Some(&class));
}

/// An extended-resource claim of pod `owner` (uid `u-<owner>`), allocated on `devices` of
/// node `node` when given.
fn extended_claim(
    name: &str,
    owner: &str,
    node: &str,
    devices: &[u32],
) -> k8s_openapi::api::resource::v1::ResourceClaim {
    let results: Vec<serde_json::Value> = devices
        .iter()
        .map(|i| {
            json!({"request": "container-0-request-1", "driver": "gpu.nvidia.com",
                        "pool": node, "device": format!("gpu-{i}")})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml",
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner,
                                 "uid": format!("u-{owner}"), "controller": true}]},
        "spec": {"devices": {"requests": [{"name": "container-0-request-1", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
            "count": devices.len()}}]}},
        "status": {"allocation": {"devices": {"results": results}, "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}))
    .unwrap()
}

#[test]
fn nvidia_gpu_pods_on_dra_nodes_get_the_claim_kube_scheduler_writes() {
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    dra_served(&mut state, "d-0");
    // Another scheduler's pod, seen bound before its claim: counted on two GPUs the index
    // picks, then on those its claim names (2 and 3) once the claim comes.
    let mut theirs = pod("theirs", 2, Some("d-0"));
    theirs.spec.as_mut().unwrap().scheduler_name = Some("default-scheduler".into());
    theirs.status = Some(
        serde_json::from_value(json!({"extendedResourceClaimStatus": {
            "resourceClaimName": "theirs-x", "requestMappings": []}}))
        .unwrap(),
    );
    state.apply_pod(&theirs);
    assert_eq!(free_gpus(&state, "d-0"), 2000);
    state.apply_resource_claim(&extended_claim("theirs-x", "theirs", "d-0", &[2, 3]));
    // The pod and its claim on the same two GPUs: two are free.
    assert_eq!(free_gpus(&state, "d-0"), 2000);
    // Ours: two GPUs, bound with the claim written first (the free ones, 0 and 1).
    state.apply_pod(&pod("ours", 2, None));
    let out = state.cycle(0);
    assert_eq!(out.binds.len(), 1);
    let write = out.binds[0]
        .extended_claim
        .as_ref()
        .expect("an extended claim");
    assert_eq!(
        write.claim["metadata"]["generateName"],
        "ours-extended-resources-"
    );
    assert_eq!(
        write.claim["metadata"]["ownerReferences"][0]["uid"],
        "u-ours"
    );
    assert_eq!(
        write.claim["spec"]["devices"]["requests"],
        json!([{"name": "container-0-request-1", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}])
    );
    let devices: Vec<&str> = write.status["allocation"]["devices"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["device"].as_str().unwrap())
        .collect();
    assert_eq!(
        devices,
        ["gpu-0", "gpu-1"],
        "not the GPUs the other pod's claim holds"
    );
    assert_eq!(write.status["reservedFor"][0]["uid"], "u-ours");
    assert_eq!(
        write.mappings,
        vec![
            json!({"containerName": "c", "resourceName": "nvidia.com/gpu",
                    "requestName": "container-0-request-1"})
        ]
    );
    assert_eq!(write.stale, None);
    // The bind fails after a claim was left behind: the next try deletes it first.
    let id = out.binds[0].id;
    state.apply_resource_claim(&extended_claim("ours-old", "ours", "d-0", &[]));
    state.bind_result(id, BindOutcome::Retry("timeout".into()));
    let again = state.cycle(1);
    let write = again.binds[0].extended_claim.as_ref().unwrap();
    assert_eq!(write.stale.as_deref(), Some("ours-old"));
    // A pod with GPUs on a plain node gets no claim.
    state.apply_node(&node("plain", 8)).unwrap();
    state.apply_pod(&pod("plain-pod", 8, None));
    let out = state.cycle(2);
    let plain = out.binds.iter().find(|b| b.name == "plain-pod").unwrap();
    assert!(plain.extended_claim.is_none());
}
