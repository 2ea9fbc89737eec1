//! ClusterQueues and LocalQueues through the index: admission by quota, their statuses
//! and `Active` conditions.

use crate::common::*;

// ---- Queues through the index -----------------------------------------------------------

fn queued(name: &str, queue: &str, gpus: u32) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"schedulerName": "kestrel", "priority": 0, "containers": [{"name": "c",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending"}}))
    .unwrap()
}

fn cluster_queue(gpus: u32, selector: Value) -> Value {
    json!({"metadata": {"name": "team-a"}, "spec": {
        "namespaceSelector": selector,
        "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"],
            "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 64},
                {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}})
}

#[test]
fn live_queues_admit_by_quota_and_changes_apply_without_a_restart() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.queue("ResourceFlavor", flavor("default"), false);
    h.pod(queued("a", "team", 4));
    // No LocalQueue yet: the pod waits and says so.
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty());
    assert!(
        out.unschedulable[0].message.contains("LocalQueue"),
        "{:?}",
        out.unschedulable
    );
    h.queue(
        "LocalQueue",
        json!({"metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}),
        false,
    );
    h.queue("ClusterQueue", cluster_queue(4, json!({})), false);
    let out = h.state.cycle(1);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    // Queue statuses: admitted and pending workloads, usage per flavor; written once.
    let statuses = h.state.queue_statuses();
    let cq = statuses.iter().find(|j| j.kind == "ClusterQueue").unwrap();
    assert_eq!(cq.name, "team-a");
    assert_eq!(cq.namespace, None);
    assert_eq!(cq.status["admittedWorkloads"], 1);
    assert_eq!(cq.status["pendingWorkloads"], 0);
    let usage = &cq.status["flavorsUsage"][0];
    assert_eq!(usage["name"], "default");
    assert!(usage["resources"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "nvidia.com/gpu", "total": "4", "borrowed": "0"})));
    let lq = statuses.iter().find(|j| j.kind == "LocalQueue").unwrap();
    assert_eq!(
        (lq.namespace.as_deref(), lq.name.as_str()),
        (Some("ml"), "team")
    );
    assert_eq!(lq.status["admittedWorkloads"], 1);
    assert!(
        h.state.queue_statuses().is_empty(),
        "unchanged: not written again"
    );
    // The quota is full: the next pod waits for quota although the node has room, under
    // a reason cluster autoscalers do not scale up for.
    h.pod(queued("b", "team", 4));
    let out = h.state.cycle(2);
    assert!(out.binds.is_empty());
    assert_eq!(out.unschedulable[0].reason, "WaitingForQueue");
    assert!(
        out.unschedulable[0].message.contains("team-a"),
        "{:?}",
        out.unschedulable
    );
    // An invalid update is refused and the last good version stays in force.
    let mut bad = cluster_queue(8, json!({}));
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = json!("x");
    h.queue("ClusterQueue", bad, false);
    assert!(h.state.cycle(3).binds.is_empty());
    // Raising the quota lets it in.
    h.queue("ClusterQueue", cluster_queue(8, json!({})), false);
    let out = h.state.cycle(4);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    assert_eq!(out.binds[0].name, "b");
    // A namespaceSelector that the namespace's labels do not match keeps new pods out,
    // until the namespace gets the label.
    h.queue(
        "ClusterQueue",
        cluster_queue(16, json!({"matchLabels": {"team": "a"}})),
        false,
    );
    h.pod(queued("c", "team", 0));
    let out = h.state.cycle(5);
    assert!(out.binds.is_empty(), "{out:?}");
    h.namespace("ml", json!({"team": "a"}));
    let out = h.state.cycle(6);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    // The LocalQueue is deleted: new pods wait for it again.
    h.queue(
        "LocalQueue",
        json!({"metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}),
        true,
    );
    h.pod(queued("d", "team", 0));
    let out = h.state.cycle(7);
    assert!(out.binds.is_empty());
    assert!(out.unschedulable[0].message.contains("LocalQueue"));
}

/// A queued pod labelled with Kueue's WorkloadPriorityClass `class`.
fn classed(name: &str, class: &str, gpus: u32) -> Pod {
    let mut p = queued(name, "team", gpus);
    p.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kueue.x-k8s.io/priority-class".into(), class.into());
    p
}

fn team_queue_of(gpus: u32) -> Harness {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.queue("ResourceFlavor", flavor("default"), false);
    h.queue("LocalQueue", local_queue("team", "team-a"), false);
    h.queue("ClusterQueue", cluster_queue(gpus, json!({})), false);
    h
}

#[test]
fn a_workload_priority_class_orders_a_queue_live_and_a_missing_one_holds_its_pod() {
    let mut h = team_queue_of(4);
    h.serve_workload_priority_classes();
    // The class does not exist yet: the pod waits, and says which label names what.
    h.pod(classed("urgent-job", "urgent", 4));
    assert!(matches!(
        h.state.pod_state("ml/urgent-job"),
        Some(PodState::Invalid(_))
    ));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "{out:?}");
    let report = &out.unschedulable[0];
    assert_eq!(
        (report.name.as_str(), report.reason),
        ("urgent-job", "SchedulerError")
    );
    assert!(
        report
            .message
            .contains(r#"metadata.labels["kueue.x-k8s.io/priority-class"]"#)
            && report
                .message
                .contains(r#"no WorkloadPriorityClass "urgent" on the API server"#),
        "{report:?}"
    );
    // An earlier pod of the same PriorityClass arrives; then the class is created: the
    // labelled pod is read again and goes first, by the class's value.
    h.pod(queued("plain-job", "team", 4));
    h.workload_priority_class(
        json!({"metadata": {"name": "urgent"}, "value": 1000}),
        false,
    );
    let out = h.state.cycle(1);
    let bound: Vec<&str> = out.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(bound, ["urgent-job"], "{out:?}");
    // A class without a usable value is reported on the class, and pods naming it wait.
    h.workload_priority_class(
        json!({"metadata": {"name": "broken"}, "value": "high"}),
        false,
    );
    h.pod(classed("broken-job", "broken", 1));
    assert!(matches!(
        h.state.pod_state("ml/broken-job"),
        Some(PodState::Invalid(_))
    ));
}

#[test]
fn without_kueues_kind_served_the_priority_class_label_is_not_resolved() {
    let mut h = team_queue_of(4);
    // Before the listing is in, the pod waits for it.
    h.pod(classed("job", "nowhere", 4));
    assert!(matches!(
        h.state.pod_state("ml/job"),
        Some(PodState::Invalid(_))
    ));
    h.workload_priority_classes_not_served();
    assert!(matches!(
        h.state.pod_state("ml/job"),
        Some(PodState::Queued(_))
    ));
    assert_eq!(h.state.cycle(0).binds.len(), 1);
}

/// A pod the Job controller creates for Job `job`: owned by it, no queue label.
fn job_pod(name: &str, job: &str, gpus: u32) -> Pod {
    owned_pod(name, "batch/v1", "Job", job, gpus)
}

/// A pod a controller creates for its `kind` `owner`: owned by it, no queue label.
fn owned_pod(name: &str, api_version: &str, kind: &str, owner: &str, gpus: u32) -> Pod {
    let mut pod = queued(name, "", gpus);
    pod.metadata.labels = None;
    pod.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": api_version, "kind": kind, "name": owner, "uid": format!("uid-{owner}"),
        "controller": true}))
    .unwrap()]);
    pod
}

/// An apps/v1 StatefulSet or ReplicaSet of `replicas`, its template in queue `team`;
/// `owner`: the Deployment that owns it.
fn replica_owner(kind: &str, name: &str, replicas: u32, owner: Option<&str>) -> Owner {
    let owners = owner.map_or(json!([]), |d| {
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": d,
            "uid": format!("uid-{d}"), "controller": true}])
    });
    let object = json!({"apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "namespace": "ml", "ownerReferences": owners},
        "spec": {"replicas": replicas, "serviceName": name, "selector": {},
            "template": {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team"}},
                "spec": {"containers": []}}}});
    match kind {
        "StatefulSet" => Owner::StatefulSet(serde_json::from_value(object).unwrap()),
        _ => Owner::ReplicaSet(serde_json::from_value(object).unwrap()),
    }
}

/// One 8-GPU node and LocalQueue ml/team of a ClusterQueue with 2 GPUs of quota.
fn two_gpu_queue() -> Harness {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.queue("ResourceFlavor", flavor("default"), false);
    h.queue(
        "LocalQueue",
        json!({"metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}),
        false,
    );
    h.queue("ClusterQueue", cluster_queue(2, json!({})), false);
    h
}

#[test]
fn a_queued_stateful_set_is_one_workload_live_and_a_deployments_pods_are_not() {
    let mut h = two_gpu_queue();
    // A StatefulSet of 3 under a quota of 2: its pods (queued by the template label the
    // controller copies) wait together; none runs.
    h.owner(replica_owner("StatefulSet", "db", 3, None), false);
    let labelled = |mut pod: Pod| {
        pod.metadata.labels =
            Some([("kueue.x-k8s.io/queue-name".to_string(), "team".to_string())].into());
        pod
    };
    let db: Vec<Pod> = (0..3)
        .map(|i| {
            labelled(owned_pod(
                &format!("db-{i}"),
                "apps/v1",
                "StatefulSet",
                "db",
                1,
            ))
        })
        .collect();
    for pod in &db {
        h.pod(pod.clone());
    }
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "{out:?}");
    assert_eq!(out.unschedulable[0].reason, "WaitingForQueue", "{out:?}");
    // Scaled to 2, it fits: both start together.
    h.owner(replica_owner("StatefulSet", "db", 2, None), false);
    h.state.delete_pod(&db[2]);
    let out = h.state.cycle(1);
    let mut bound: Vec<&str> = out.binds.iter().map(|b| b.name.as_str()).collect();
    bound.sort();
    assert_eq!(bound, ["db-0", "db-1"], "{out:?}");
    h.owner(replica_owner("StatefulSet", "db", 2, None), true);
    h.state.delete_pod(&db[0]);
    h.state.delete_pod(&db[1]);
    // A Deployment's ReplicaSet: its pods, seen before it, wait for it; once it is seen
    // they are workloads of their own, so two of three start under the quota of 2.
    for i in 0..3 {
        h.pod(labelled(owned_pod(
            &format!("web-{i}"),
            "apps/v1",
            "ReplicaSet",
            "web-1",
            1,
        )));
    }
    assert!(h.state.cycle(2).binds.is_empty());
    h.owner(replica_owner("ReplicaSet", "web-1", 3, Some("web")), false);
    let out = h.state.cycle(3);
    assert_eq!(out.binds.len(), 2, "pod by pod: {out:?}");
    h.owner(replica_owner("ReplicaSet", "web-1", 3, Some("web")), true);
    for i in 0..3 {
        h.state.delete_pod(&owned_pod(
            &format!("web-{i}"),
            "apps/v1",
            "ReplicaSet",
            "web-1",
            1,
        ));
    }
    // A ReplicaSet no Deployment owns is one workload, like a StatefulSet: 3 under a
    // quota of 2 run none.
    h.owner(replica_owner("ReplicaSet", "solo", 3, None), false);
    for i in 0..3 {
        h.pod(labelled(owned_pod(
            &format!("solo-{i}"),
            "apps/v1",
            "ReplicaSet",
            "solo",
            1,
        )));
    }
    let out = h.state.cycle(4);
    assert!(out.binds.is_empty(), "{out:?}");
}

/// A StatefulSet's controller creates pod `i + 1` only once pod `i` runs (`OrderedReady`,
/// the default). Its first pod starts alone when the queue holds all its replicas, and
/// the next ones as they come; one the queue cannot hold whole never starts, however
/// few of its pods exist.
#[test]
fn an_ordered_stateful_set_starts_pod_by_pod_once_admitted_whole() {
    let mut h = two_gpu_queue();
    let labelled = |mut pod: Pod| {
        pod.metadata.labels =
            Some([("kueue.x-k8s.io/queue-name".to_string(), "team".to_string())].into());
        pod
    };
    let member = |set: &str, i: u32| {
        labelled(owned_pod(
            &format!("{set}-{i}"),
            "apps/v1",
            "StatefulSet",
            set,
            1,
        ))
    };
    // 3 replicas under a quota of 2: its first pod waits, though 1 GPU would fit.
    h.owner(replica_owner("StatefulSet", "big", 3, None), false);
    h.pod(member("big", 0));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "{out:?}");
    assert_eq!(out.unschedulable[0].reason, "WaitingForQueue", "{out:?}");
    h.owner(replica_owner("StatefulSet", "big", 3, None), true);
    h.state.delete_pod(&member("big", 0));

    // 2 replicas under a quota of 2: pod 0 starts alone, pod 1 when it comes.
    h.owner(replica_owner("StatefulSet", "db", 2, None), false);
    h.pod(member("db", 0));
    let out = h.state.cycle(1);
    let bound: Vec<&str> = out.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(bound, ["db-0"], "{out:?}");
    h.pod(member("db", 1));
    let out = h.state.cycle(2);
    let bound: Vec<&str> = out.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(bound, ["db-1"], "{out:?}");
}

fn job(name: &str, parallelism: u32, queue: Option<&str>, annotations: Value) -> Value {
    let labels = queue.map_or(json!({}), |q| json!({"kueue.x-k8s.io/queue-name": q}));
    json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("job-{name}"),
            "labels": labels, "annotations": annotations},
        "spec": {"parallelism": parallelism, "completions": parallelism,
            "template": {"spec": {"containers": []}}}})
}

#[test]
fn a_queued_jobs_pods_are_admitted_together_live() {
    let mut h = two_gpu_queue();
    // Pods seen before their Job wait for it, whatever room there is.
    for i in 0..3 {
        h.pod(job_pod(&format!("whole-{i}"), "whole", 1));
    }
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "{out:?}");
    assert!(
        matches!(h.state.pod_state("ml/whole-0"), Some(PodState::GangWait { reason, .. }) if reason.contains("waiting to see its Job ml/whole")),
        "{:?}",
        h.state.pod_state("ml/whole-0")
    );
    // The Job names the queue: three GPUs under a quota of two, none runs.
    h.job(job("whole", 3, Some("team"), json!({})), false);
    let out = h.state.cycle(1);
    assert!(out.binds.is_empty(), "{out:?}");
    assert_eq!(out.unschedulable[0].reason, "WaitingForQueue", "{out:?}");
    // Partial admission: two of four start.
    h.job(
        job(
            "partial",
            4,
            Some("team"),
            json!({"kueue.x-k8s.io/job-min-parallelism": "1"}),
        ),
        false,
    );
    for i in 0..4 {
        h.pod(job_pod(&format!("partial-{i}"), "partial", 1));
    }
    let out = h.state.cycle(2);
    let mut bound: Vec<&str> = out.binds.iter().map(|b| b.name.as_str()).collect();
    bound.sort();
    assert_eq!(bound, ["partial-0", "partial-1"], "{out:?}");
    // An unqueued Job's pods are workloads of their own: released once it is seen.
    h.pod(job_pod("free-0", "free", 0));
    assert!(h.state.cycle(3).binds.is_empty());
    h.job(job("free", 1, None, json!({})), false);
    let out = h.state.cycle(4);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    // A bad minimum names the Job, the annotation and the range; its pods wait.
    h.job(
        job(
            "bad",
            2,
            Some("team"),
            json!({"kueue.x-k8s.io/job-min-parallelism": "5"}),
        ),
        false,
    );
    h.pod(job_pod("bad-0", "bad", 0));
    let _ = h.state.cycle(5);
    assert!(
        matches!(h.state.pod_state("ml/bad-0"), Some(PodState::GangWait { reason, .. }) if reason.contains("Job ml/bad") && reason.contains("job-min-parallelism")),
        "{:?}",
        h.state.pod_state("ml/bad-0")
    );
}

/// The `Active` condition of a queue's status among those written.
fn active(statuses: &[QueueStatusWrite], kind: &str, name: &str) -> Value {
    let job = statuses
        .iter()
        .find(|j| j.kind == kind && j.name == name)
        .unwrap_or_else(|| panic!("no status of {kind} {name} written: {statuses:?}"));
    let conditions = job.status["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert_eq!(conditions[0]["type"], "Active");
    conditions[0].clone()
}

/// Wall time at driver time 0 in the queue condition tests (2027-01-15T08:00:00Z).
const WALL: i64 = 1_800_000_000_000;

/// `lastTransitionTime` at driver time `ms`.
fn at(ms: i64) -> Value {
    json!(Timestamp::from_millisecond(WALL + ms).unwrap().to_string())
}

fn flavor(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {}})
}

fn local_queue(name: &str, cluster_queue: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ml", "generation": 1},
        "spec": {"clusterQueue": cluster_queue}})
}

#[test]
fn queue_active_conditions_follow_the_stop_policy_and_keep_their_transition_time() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.state.set_wall_origin(WALL);
    h.queue("ResourceFlavor", flavor("default"), false);
    let mut cq = cluster_queue(8, json!({}));
    cq["metadata"]["generation"] = json!(3);
    h.queue("ClusterQueue", cq.clone(), false);
    h.queue("LocalQueue", local_queue("team", "team-a"), false);
    h.state.cycle(1_000);
    let statuses = h.state.queue_statuses();
    assert_eq!(
        active(&statuses, "ClusterQueue", "team-a"),
        json!({"type": "Active", "status": "True", "reason": "Ready",
            "message": "Can admit new workloads", "lastTransitionTime": at(1_000),
            "observedGeneration": 3})
    );
    assert_eq!(
        active(&statuses, "LocalQueue", "team"),
        json!({"type": "Active", "status": "True", "reason": "Ready",
            "message": "Can submit new workloads to ClusterQueue team-a",
            "lastTransitionTime": at(1_000), "observedGeneration": 1})
    );
    h.state.cycle(5_000);
    assert!(
        h.state.queue_statuses().is_empty(),
        "unchanged queues are not written again as time passes"
    );

    // Stopped: inactive, and the LocalQueue says why.
    cq["metadata"]["generation"] = json!(4);
    cq["spec"]["stopPolicy"] = json!("Hold");
    h.queue("ClusterQueue", cq.clone(), false);
    h.pod(queued("a", "team", 1));
    let out = h.state.cycle(10_000);
    assert!(out.binds.is_empty(), "a stopped queue admits nothing");
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (
            &c["status"],
            &c["reason"],
            &c["lastTransitionTime"],
            &c["observedGeneration"]
        ),
        (&json!("False"), &json!("Stopped"), &at(10_000), &json!(4))
    );
    assert_eq!(
        c["message"],
        "Can't admit new workloads: spec.stopPolicy is Hold; set it to None to admit workloads"
    );
    let l = active(&statuses, "LocalQueue", "team");
    assert_eq!(
        (&l["status"], &l["reason"], &l["lastTransitionTime"]),
        (
            &json!("False"),
            &json!("ClusterQueueIsInactive"),
            &at(10_000)
        )
    );
    assert_eq!(
        l["message"],
        "Can't submit new workloads: ClusterQueue team-a is inactive (Stopped): spec.stopPolicy is Hold; set it to None to admit workloads"
    );
    assert_eq!(
        statuses
            .iter()
            .find(|j| j.kind == "LocalQueue")
            .unwrap()
            .status["pendingWorkloads"],
        1
    );
    h.state.cycle(20_000);
    assert!(h.state.queue_statuses().is_empty());

    // Still stopped, another way: the message changes, the transition time does not.
    cq["spec"]["stopPolicy"] = json!("HoldAndDrain");
    h.queue("ClusterQueue", cq.clone(), false);
    h.state.cycle(30_000);
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("Stopped"))
    );
    assert!(
        c["message"].as_str().unwrap().contains("HoldAndDrain"),
        "{c}"
    );
    assert_eq!(
        c["lastTransitionTime"],
        at(10_000),
        "status unchanged: time kept"
    );
    let l = active(&statuses, "LocalQueue", "team");
    assert!(
        l["message"].as_str().unwrap().contains("HoldAndDrain"),
        "{l}"
    );
    assert_eq!(
        l["lastTransitionTime"],
        at(10_000),
        "status unchanged: time kept"
    );

    // Running again: True, with a new transition time; the pending pod is admitted.
    cq["spec"]["stopPolicy"] = json!("None");
    h.queue("ClusterQueue", cq, false);
    let out = h.state.cycle(40_000);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    let statuses = h.state.queue_statuses();
    for (kind, name) in [("ClusterQueue", "team-a"), ("LocalQueue", "team")] {
        let c = active(&statuses, kind, name);
        assert_eq!(
            (&c["status"], &c["reason"], &c["lastTransitionTime"]),
            (&json!("True"), &json!("Ready"), &at(40_000)),
            "{kind} {name}"
        );
    }
}

#[test]
fn queue_conditions_name_missing_flavors_queues_and_unreadable_specs() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.state.set_wall_origin(WALL);
    // A flavor that does not exist: as in Kueue the queue is inactive, admits nothing and
    // says what is missing; its LocalQueue says its ClusterQueue is inactive.
    h.queue("ClusterQueue", cluster_queue(8, json!({})), false);
    h.queue("LocalQueue", local_queue("team", "team-a"), false);
    h.pod(queued("a", "team", 1));
    let out = h.state.cycle(1_000);
    assert!(out.binds.is_empty(), "{out:?}");
    assert!(
        out.unschedulable[0]
            .message
            .contains("ClusterQueue team-a is inactive: FlavorNotFound"),
        "{:?}",
        out.unschedulable
    );
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("FlavorNotFound"))
    );
    assert_eq!(
        c["message"],
        "Can't admit new workloads: spec.resourceGroups[0].flavors[0].name: ResourceFlavor \"default\" does not exist; create it, or fix the name"
    );
    assert!(
        c.get("observedGeneration").is_none(),
        "no generation listed"
    );
    assert_eq!(
        active(&statuses, "LocalQueue", "team")["reason"],
        "ClusterQueueIsInactive"
    );
    // The flavor appears: the queue admits the waiting pod.
    h.queue("ResourceFlavor", flavor("default"), false);
    let out = h.state.cycle(2_000);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (&c["status"], &c["reason"], &c["lastTransitionTime"]),
        (&json!("True"), &json!("Ready"), &at(2_000))
    );

    // An unreadable update: the previous version stays in force, and the condition says so.
    let mut bad = cluster_queue(8, json!({}));
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = json!("x");
    h.queue("ClusterQueue", bad.clone(), false);
    h.state.cycle(3_000);
    let c = active(&h.state.queue_statuses(), "ClusterQueue", "team-a");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("True"), &json!("InvalidSpec"))
    );
    let message = c["message"].as_str().unwrap();
    assert!(
        message.starts_with("Can admit new workloads; its current spec cannot be used, so the previous one stays in force: field spec.resourceGroups[0].flavors[0].resources[1].nominalQuota"),
        "{message}"
    );

    // A ClusterQueue never readable is inactive, and so are its LocalQueues.
    bad["metadata"]["name"] = json!("broken");
    h.queue("ClusterQueue", bad, false);
    h.queue("LocalQueue", local_queue("via-broken", "broken"), false);
    // A LocalQueue whose ClusterQueue does not exist.
    h.queue("LocalQueue", local_queue("lost", "nope"), false);
    h.state.cycle(4_000);
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "broken");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("InvalidSpec"))
    );
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("Can't admit new workloads: its spec cannot be used: field spec.resourceGroups[0].flavors[0].resources[1].nominalQuota"),
        "{c}"
    );
    let l = active(&statuses, "LocalQueue", "via-broken");
    assert_eq!(
        (&l["status"], &l["reason"]),
        (&json!("False"), &json!("ClusterQueueIsInactive"))
    );
    assert!(
        l["message"]
            .as_str()
            .unwrap()
            .contains("ClusterQueue broken is inactive (InvalidSpec)"),
        "{l}"
    );
    let l = active(&statuses, "LocalQueue", "lost");
    assert_eq!(
        l,
        json!({"type": "Active", "status": "False", "reason": "ClusterQueueDoesNotExist",
            "message": "Can't submit new workloads: ClusterQueue \"nope\" (spec.clusterQueue) does not exist; create it, or fix spec.clusterQueue",
            "lastTransitionTime": at(4_000), "observedGeneration": 1})
    );
    // Creating it activates the LocalQueue.
    let mut nope = cluster_queue(8, json!({}));
    nope["metadata"]["name"] = json!("nope");
    h.queue("ClusterQueue", nope, false);
    h.state.cycle(5_000);
    let l = active(&h.state.queue_statuses(), "LocalQueue", "lost");
    assert_eq!(
        (&l["status"], &l["reason"], &l["lastTransitionTime"]),
        (&json!("True"), &json!("Ready"), &at(5_000))
    );

    // A namespaceSelector that does not select the LocalQueue's namespace, until it does.
    h.queue(
        "ClusterQueue",
        cluster_queue(8, json!({"matchLabels": {"team": "a"}})),
        false,
    );
    h.state.cycle(6_000);
    let l = active(&h.state.queue_statuses(), "LocalQueue", "team");
    assert_eq!(
        (&l["status"], &l["reason"]),
        (&json!("False"), &json!("NamespaceNotSelected"))
    );
    assert!(
        l["message"]
            .as_str()
            .unwrap()
            .contains("ClusterQueue team-a does not admit namespace ml"),
        "{l}"
    );
    h.namespace("ml", json!({"team": "a"}));
    h.state.cycle(7_000);
    let l = active(&h.state.queue_statuses(), "LocalQueue", "team");
    assert_eq!(
        (&l["status"], &l["reason"]),
        (&json!("True"), &json!("Ready"))
    );
}

#[test]
fn a_queue_status_already_on_the_object_is_kept_and_not_written_again() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.state.set_wall_origin(WALL);
    h.queue("ResourceFlavor", flavor("default"), false);
    // Written by an earlier leader an hour before: Active since then, counts stale.
    let mut cq = cluster_queue(8, json!({}));
    cq["status"] = json!({"pendingWorkloads": 7, "admittedWorkloads": 0,
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready",
            "message": "Can admit new workloads", "lastTransitionTime": at(-3_600_000)}]});
    h.queue("ClusterQueue", cq.clone(), false);
    h.state.cycle(1_000);
    let statuses = h.state.queue_statuses();
    let job = statuses.iter().find(|j| j.name == "team-a").unwrap();
    assert_eq!(job.status["pendingWorkloads"], 0);
    assert_eq!(
        active(&statuses, "ClusterQueue", "team-a")["lastTransitionTime"],
        at(-3_600_000),
        "the condition's status did not change"
    );
    // The watch brings the written status back: nothing to write.
    cq["status"] = job.status.clone();
    h.queue("ClusterQueue", cq.clone(), false);
    h.state.cycle(2_000);
    assert!(h.state.queue_statuses().is_empty());
    // Another replica (or a restart) that finds this status writes nothing either.
    let mut other = Harness::new(&[node("gpu-0", 8, "r1")]);
    other.state.set_wall_origin(WALL);
    other.queue("ResourceFlavor", flavor("default"), false);
    other.queue("ClusterQueue", cq.clone(), false);
    other.state.cycle(60_000);
    assert!(other.state.queue_statuses().is_empty());
    // Deleted and created again (without a status): written afresh.
    other.queue("ClusterQueue", cq.clone(), true);
    cq.as_object_mut().unwrap().remove("status");
    other.queue("ClusterQueue", cq, false);
    other.state.cycle(61_000);
    let statuses = other.state.queue_statuses();
    assert_eq!(
        active(&statuses, "ClusterQueue", "team-a")["lastTransitionTime"],
        at(61_000)
    );
}

/// A pod of a multi-role owner: its controller reference (`controller`: api version, kind,
/// name) and labels, no queue label.
fn role_pod(name: &str, controller: (&str, &str, &str), labels: Value, gpus: u32) -> Pod {
    let (api_version, kind, owner) = controller;
    let mut pod = owned_pod(name, api_version, kind, owner, gpus);
    pod.metadata.labels = Some(serde_json::from_value(labels).unwrap());
    pod
}

fn pytorch_job(name: &str, workers: u32, queue: Option<&str>) -> Owner {
    let labels = queue.map_or(json!({}), |q| json!({"kueue.x-k8s.io/queue-name": q}));
    let template = json!({"spec": {"containers": [{"name": "pytorch", "image": "train"}]}});
    Owner::roles(
        "PyTorchJob",
        json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml", "labels": labels},
            "spec": {"pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": workers, "template": template}}}}),
    )
}

fn pytorch_pod(job: &str, role: &str, i: u32) -> Pod {
    role_pod(
        &format!("{job}-{role}-{i}"),
        ("kubeflow.org/v1", "PyTorchJob", job),
        json!({"training.kubeflow.org/replica-type": role, "training.kubeflow.org/job-name": job}),
        1,
    )
}

#[test]
fn a_pytorchjobs_and_a_jobsets_pods_are_one_gang_live() {
    let mut h = two_gpu_queue();
    // A queued PyTorchJob of a master and two workers (3 GPUs) under a quota of 2: its
    // pods wait for it, then wait whole for quota.
    for pod in [("master", 0), ("worker", 0), ("worker", 1)] {
        h.pod(pytorch_pod("big", pod.0, pod.1));
    }
    assert!(h.state.cycle(0).binds.is_empty());
    assert!(
        matches!(h.state.pod_state("ml/big-master-0"), Some(PodState::GangWait { reason, .. }) if reason.contains("waiting to see its PyTorchJob ml/big")),
        "{:?}",
        h.state.pod_state("ml/big-master-0")
    );
    h.owner(pytorch_job("big", 2, Some("team")), false);
    let out = h.state.cycle(1);
    assert!(out.binds.is_empty(), "{out:?}");
    assert_eq!(out.unschedulable[0].reason, "WaitingForQueue", "{out:?}");
    // An unqueued one is a gang all the same: a master and one of two workers wait for the
    // second worker, then all three start.
    h.owner(pytorch_job("free", 2, None), false);
    h.pod(pytorch_pod("free", "master", 0));
    h.pod(pytorch_pod("free", "worker", 0));
    assert!(h.state.cycle(2).binds.is_empty());
    h.pod(pytorch_pod("free", "worker", 1));
    let mut bound: Vec<String> = h.state.cycle(3).binds.into_iter().map(|b| b.name).collect();
    bound.sort();
    assert_eq!(bound, ["free-master-0", "free-worker-0", "free-worker-1"]);
    // Roles count: three workers and no master are not the gang.
    h.owner(pytorch_job("headless", 2, None), false);
    for i in 0..3 {
        h.pod(pytorch_pod("headless", "worker", i));
    }
    assert!(h.state.cycle(4).binds.is_empty());
    // A JobSet's pods, owned by its Jobs (which are not workloads of their own), are one
    // gang by the JobSet's label: a driver and a Job of two workers.
    let job_of_jobset = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "run-workers-0", "namespace": "ml",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "run"},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "name": "run", "uid": "uid-run", "controller": true}]},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": []}}}});
    h.job(job_of_jobset, false);
    let jobset_pod = |name: &str, job: &str, role: &str| {
        role_pod(
            name,
            ("batch/v1", "Job", job),
            json!({"jobset.sigs.k8s.io/jobset-name": "run",
                "jobset.sigs.k8s.io/replicatedjob-name": role}),
            1,
        )
    };
    h.pod(jobset_pod("run-workers-0-0", "run-workers-0", "workers"));
    h.pod(jobset_pod("run-workers-0-1", "run-workers-0", "workers"));
    let template =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "run"}]}}}});
    let workers = json!({"spec": {"parallelism": 2, "completions": 2,
        "template": {"spec": {"containers": [{"name": "c", "image": "run"}]}}}});
    h.owner(
        Owner::roles(
            "JobSet",
            json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "run", "namespace": "ml"},
                "spec": {"replicatedJobs": [
                    {"name": "driver", "replicas": 1, "template": template},
                    {"name": "workers", "replicas": 1, "template": workers}]}}),
        ),
        false,
    );
    assert!(h.state.cycle(5).binds.is_empty(), "the driver is missing");
    h.pod(jobset_pod("run-driver-0-0", "run-driver-0", "driver"));
    let mut bound: Vec<String> = h.state.cycle(6).binds.into_iter().map(|b| b.name).collect();
    bound.sort();
    assert_eq!(
        bound,
        ["run-driver-0-0", "run-workers-0-0", "run-workers-0-1"]
    );
}

/// A JobSet that Trainer made for a TrainJob: controlled by it, with the TrainJob's
/// `spec.labels` only (no queue label), two 1-GPU workers.
fn trainer_jobset(name: &str, workers: u32) -> Owner {
    let workers = json!({"spec": {"parallelism": workers, "completions": workers,
        "template": {"spec": {"containers": [{"name": "node", "image": "train"}]}}}});
    Owner::roles(
        "JobSet",
        json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml",
                "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob", "name": name, "uid": format!("uid-{name}"),
                    "controller": true}]},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": workers}]}}),
    )
}

fn train_job(name: &str, queue: Option<&str>) -> Owner {
    let labels = queue.map_or(json!({}), |q| json!({"kueue.x-k8s.io/queue-name": q}));
    Owner::roles(
        "TrainJob",
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ml", "labels": labels},
            "spec": {"runtimeRef": {"name": "torch-distributed"}}}),
    )
}

fn trainer_pod(jobset: &str, i: u32) -> Pod {
    role_pod(
        &format!("{jobset}-node-0-{i}"),
        ("batch/v1", "Job", &format!("{jobset}-node-0")),
        json!({"jobset.sigs.k8s.io/jobset-name": jobset,
            "jobset.sigs.k8s.io/replicatedjob-name": "node"}),
        1,
    )
}

#[test]
fn a_trainjobs_jobset_waits_for_the_trainjob_and_takes_its_queue() {
    let mut h = two_gpu_queue();
    // Three workers under a quota of 2, the JobSet and its pods seen before the TrainJob:
    // they wait for it, as its queue label is Kueue's on the TrainJob alone.
    h.owner(trainer_jobset("llm", 3), false);
    for i in 0..3 {
        h.pod(trainer_pod("llm", i));
    }
    assert!(h.state.cycle(0).binds.is_empty());
    assert!(
        matches!(h.state.pod_state("ml/llm-node-0-0"), Some(PodState::GangWait { reason, .. }) if reason.contains("waiting to see its TrainJob ml/llm")),
        "{:?}",
        h.state.pod_state("ml/llm-node-0-0")
    );
    // The TrainJob seen: the gang is in the queue, and waits whole for its quota though
    // the node has 8 GPUs free.
    h.owner(train_job("llm", Some("team")), false);
    let out = h.state.cycle(1);
    assert!(out.binds.is_empty(), "{out:?}");
    assert_eq!(out.unschedulable[0].reason, "WaitingForQueue", "{out:?}");
    // A TrainJob seen first, its JobSet after: its two pods fit the quota and start.
    h.owner(train_job("small", Some("team")), false);
    h.owner(trainer_jobset("small", 2), false);
    h.pod(trainer_pod("small", 0));
    h.pod(trainer_pod("small", 1));
    let mut bound: Vec<String> = h.state.cycle(2).binds.into_iter().map(|b| b.name).collect();
    bound.sort();
    assert_eq!(bound, ["small-node-0-0", "small-node-0-1"]);
}

#[test]
fn without_the_trainjob_kind_a_jobsets_pods_go_on_without_its_queue() {
    let mut h = two_gpu_queue();
    h.owner(trainer_jobset("llm", 3), false);
    for i in 0..3 {
        h.pod(trainer_pod("llm", i));
    }
    assert!(h.state.cycle(0).binds.is_empty());
    // Trainer's CRD is not installed (or Kestrel may not read it): the JobSet is read
    // alone, a gang in no queue, and its three pods start together.
    driver::apply_change(
        &mut h.state,
        &h.stores,
        Change::Unserved { kind: "TrainJob" },
    );
    assert_eq!(h.state.cycle(1).binds.len(), 3);
}
