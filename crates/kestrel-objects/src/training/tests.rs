use super::*;
use crate::gangs::{KESTREL_POD_GROUP_LABEL, KESTREL_ROLE_LABEL};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

fn job(spec: Value) -> TrainingJob {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": "bert", "namespace": "ml", "uid": "u1"},
        "spec": spec,
    }))
    .expect("a TrainingJob")
}

fn template(gpus: u32, mounts: Value, volumes: Value) -> Value {
    json!({"spec": {
        "containers": [{"name": "train", "image": "trainer:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus}},
            "volumeMounts": mounts}],
        "volumes": volumes,
    }})
}

fn data() -> (Value, Value) {
    (
        json!([{"name": "data", "mountPath": "/data", "readOnly": true},
               {"name": "ckpt", "mountPath": "/ckpt"},
               {"name": "scratch", "mountPath": "/tmp"}]),
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}},
               {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}},
               {"name": "scratch", "emptyDir": {}}]),
    )
}

fn good() -> Value {
    let (m, v) = data();
    json!({
        "replicaSpecs": {
            "Master": {"replicas": 1, "template": template(4, m.clone(), v.clone())},
            "Worker": {"replicas": 2, "template": template(4, m, v)},
        },
        "runPolicy": {"backoffLimit": 1},
    })
}

fn refused(spec: Value) -> String {
    plan(Path::new("cluster"), &job(spec))
        .unwrap_err()
        .to_string()
}

#[test]
fn a_valid_job_plans_one_gang_with_the_rendezvous_variables() {
    let p = plan(Path::new("cluster"), &job(good())).unwrap();
    assert_eq!((p.pods(), p.gpus(), p.nproc_per_node), (3, 12, 4));
    let pg = p.pod_group();
    assert_eq!(pg.spec.min_member, 3);
    assert_eq!(
        pg.spec.min_task_member,
        [("master".to_string(), 1), ("worker".to_string(), 2)].into()
    );
    let pod = p.pod(WORKER, 1, 2, &[("MLFLOW_RUN_ID".into(), "r".into())]);
    assert_eq!(pod.metadata.name.as_deref(), Some("bert-worker-1"));
    let spec = pod.spec.unwrap();
    assert_eq!(spec.subdomain.as_deref(), Some("bert"));
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    let env: BTreeMap<String, String> = spec.containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    for (k, v) in [
        ("MASTER_ADDR", "bert-master-0.bert.ml.svc"),
        ("MASTER_PORT", "23456"),
        ("WORLD_SIZE", "12"),
        ("RANK", "2"),
        ("PET_NNODES", "3"),
        ("PET_NPROC_PER_NODE", "4"),
        ("PET_NODE_RANK", "2"),
        ("PET_MASTER_ADDR", "bert-master-0.bert.ml.svc"),
        ("PET_MASTER_PORT", "23456"),
        ("MLFLOW_RUN_ID", "r"),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
    }
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels[ATTEMPT_LABEL], "2");
    assert_eq!(labels[KESTREL_POD_GROUP_LABEL], "bert");
    assert_eq!(labels[KESTREL_ROLE_LABEL], "worker");
    let svc = p.service().spec.unwrap();
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
}

#[test]
fn bad_jobs_are_refused_naming_the_field() {
    let mut s = good();
    s["replicaSpecs"].as_object_mut().unwrap().remove("Master");
    assert!(refused(s).contains("field spec.replicaSpecs: no Master"));
    let mut s = good();
    s["replicaSpecs"]["Worker"]["replicas"] = json!(0);
    assert!(refused(s).contains("spec.replicaSpecs.Worker.replicas: 0 replicas"));
    let mut s = good();
    s["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/gpu": 2}});
    assert!(refused(s).contains("2 GPUs per pod but the Master has 4"));
    let mut s = good();
    s["nprocPerNode"] = json!(8);
    assert!(refused(s).contains("spec.nprocPerNode: 8 processes per pod"));
    // The same volume read-write in a worker.
    let mut s = good();
    s["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"][0]
        ["readOnly"] = json!(false);
    let e = refused(s);
    assert!(
        e.contains("replica Worker mounts volume \"data\" at \"/data\" read-write")
            && e.contains("Master mounts it read-only"),
        "{e}"
    );
    // Another claim at the same path.
    let mut s = good();
    s["replicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]
        ["claimName"] = json!("other");
    let e = refused(s);
    assert!(
        e.contains("spec.replicaSpecs.Worker.template.spec.volumes[\"data\"]"),
        "{e}"
    );
    // Missing in a worker; a pod's own scratch volume may differ.
    let mut s = good();
    s["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data", "readOnly": true}]);
    let e = refused(s);
    assert!(
        e.contains("does not mount volume \"ckpt\" at \"/ckpt\""),
        "{e}"
    );
    let mut s = good();
    s["mlflow"] = json!({"trackingUri": "https://mlflow"});
    assert!(refused(s).contains("spec.mlflow.trackingUri"));
    let mut s = good();
    s["replicaSpecs"]["Launcher"] = s["replicaSpecs"]["Master"].clone();
    assert!(refused(s).contains("unknown replica type"));
}

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn pods(p: &Plan, attempt: i32, phase: PodPhase) -> Vec<ObservedPod> {
    p.members()
        .into_iter()
        .map(|(role, i)| ObservedPod {
            name: p.pod_name(&role, i),
            attempt,
            role,
            phase,
            bound: phase != PodPhase::Pending,
            deleting: false,
            exit: None,
            reason: None,
        })
        .collect()
}

#[test]
fn the_gang_restarts_as_one_until_the_backoff_limit() {
    let p = plan(Path::new("cluster"), &job(good())).unwrap();
    let d = reconcile(&p, &TrainingJobStatus::default(), &[], None, t(0));
    assert_eq!(d.actions, vec![Action::CreatePods(p.members())]);
    assert_eq!(d.status.state.as_deref(), Some("Created"));
    let s = d.status;
    let d = reconcile(
        &p,
        &s,
        &pods(&p, 0, PodPhase::Pending),
        Some("no room"),
        t(1),
    );
    assert_eq!(d.status.waiting_reason.as_deref(), Some("no room"));
    assert_eq!(d.status.state.as_deref(), Some("Queued"));
    let d = reconcile(&p, &d.status, &pods(&p, 0, PodPhase::Running), None, t(5));
    assert_eq!(d.status.state.as_deref(), Some("Running"));
    let s = d.status;
    // A worker killed by a signal: everything goes, restart 1.
    let mut now = pods(&p, 0, PodPhase::Running);
    now[1].phase = PodPhase::Failed;
    now[1].exit = Some(("train".into(), 137));
    let d = reconcile(&p, &s, &now, None, t(9));
    assert!(d.restarted);
    assert_eq!(d.status.restarts, 1);
    assert_eq!(d.status.state.as_deref(), Some("Restarting"));
    assert_eq!(
        d.actions,
        vec![Action::DeletePods(
            now.iter().map(|p| p.name.clone()).collect()
        )]
    );
    let s = d.status;
    // The old attempt's pods go before the new ones come.
    let mut going = pods(&p, 0, PodPhase::Running);
    going.iter_mut().for_each(|p| p.deleting = true);
    assert!(reconcile(&p, &s, &going, None, t(10)).actions.is_empty());
    let d = reconcile(&p, &s, &[], None, t(11));
    assert_eq!(d.actions, vec![Action::CreatePods(p.members())]);
    let s = d.status;
    // An evicted pod (gone after the attempt was created) exhausts backoffLimit 1.
    let mut now = pods(&p, 1, PodPhase::Running);
    now.remove(2);
    let d = reconcile(&p, &s, &now, None, t(20));
    assert!(d.finished);
    let failed = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(failed.reason, "BackoffLimitExceeded");
    assert!(
        failed
            .message
            .contains("bert-worker-1 was deleted or evicted"),
        "{}",
        failed.message
    );
    // cleanPodPolicy Running: the rest are deleted.
    assert_eq!(d.actions.len(), 1);
}

#[test]
fn exit_codes_decide_between_restart_and_failure() {
    let p = plan(Path::new("cluster"), &job(good())).unwrap();
    let s = reconcile(&p, &TrainingJobStatus::default(), &[], None, t(0)).status;
    let mut now = pods(&p, 0, PodPhase::Running);
    now[0].phase = PodPhase::Failed;
    now[0].exit = Some(("train".into(), 1));
    let d = reconcile(&p, &s, &now, None, t(3));
    assert!(d.finished && !d.restarted);
    let failed = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(failed.reason, "PermanentFailure");
    assert!(failed
        .message
        .contains("container train exited with code 1"));
    // A False condition of its own (not a state) is listed.
    let mut tracked = TrainingJobStatus::default();
    set_condition(
        &mut tracked,
        "Tracking",
        false,
        "MlflowUnavailable",
        "down",
        t(1),
    );
    assert_eq!(tracked.conditions[0].message, "down");
    set_state(&mut tracked, "Created", "PodsCreated", "", t(1));
    assert_eq!(
        tracked.conditions.len(),
        2,
        "states never entered are not listed"
    );
    assert!(retryable(RestartPolicy::ExitCode, Some(143), false));
    assert!(!retryable(RestartPolicy::ExitCode, Some(127), false));
    assert!(retryable(RestartPolicy::Never, Some(1), true));
    assert!(retryable(RestartPolicy::OnFailure, Some(1), false));
    // The master's success is the job's.
    let mut now = pods(&p, 0, PodPhase::Running);
    now[0].phase = PodPhase::Succeeded;
    let d = reconcile(&p, &s, &now, None, t(3));
    assert_eq!(d.status.state.as_deref(), Some("Succeeded"));
    assert_eq!(
        d.actions,
        vec![Action::DeletePods(vec![
            "bert-worker-0".into(),
            "bert-worker-1".into()
        ])]
    );
}
