//! TrainingJobs in the simulator run by the live controller's decisions
//! (`kestrel_objects::training::reconcile`): gang restarts, the ExitCode policy, the backoff
//! limit, the active deadline, preemption, and failures injected with
//! `kestrel.dev/sim-failures`.

mod one_node;

use kestrel_sim::metrics::{SimReport, TrainingJobReport};
use kestrel_sim::{simulate, SimConfig};
use one_node::{cluster, read};

fn run(yaml: &str) -> SimReport {
    let workload = read(yaml).unwrap();
    simulate(&cluster(8), &workload, SimConfig::default(), &mut |_, _| {}).unwrap()
}

/// A TrainingJob of a Master and two Workers of 2 GPUs each that runs 1h, with extra
/// annotations and run policy.
fn job(annotations: &str, run_policy: &str) -> String {
    let template = "
        metadata:
          annotations: {kestrel.dev/checkpoint-interval: 10m}
        spec:
          containers:
          - name: train
            image: trainer
            resources: {limits: {nvidia.com/gpu: 2}}";
    format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1
kind: TrainingJob
metadata:
  name: bert
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 1h{annotations}}}
spec:
  runPolicy: {{{run_policy}}}
  replicaSpecs:
    Master:
      replicas: 1
      template:{template}
    Worker:
      replicas: 2
      template:{template}
"
    )
}

/// Seconds from the job's arrival to its success (the last to finish).
fn finished_after(r: &SimReport) -> f64 {
    assert!(r.jobs.completed >= 2, "both roles finish: {:?}", r.jobs);
    r.completion_time.max
}

fn only(r: &SimReport) -> &TrainingJobReport {
    assert_eq!(r.training_jobs.len(), 1, "{:?}", r.training_jobs);
    &r.training_jobs[0]
}

#[test]
fn a_job_that_never_fails_succeeds_without_restarts() {
    let r = run(&job("", ""));
    let t = only(&r);
    assert_eq!((t.state.as_str(), t.restarts), ("Succeeded", 0), "{t:?}");
    assert_eq!(t.queue_wait_seconds, Some(0.0));
    // 6 GPUs for an hour, nothing lost.
    assert!((t.gpu_hours - 6.0).abs() < 1e-9, "{t:?}");
    assert_eq!(t.lost_gpu_hours, 0.0);
    assert_eq!((r.pods.created, r.pods.completed), (3, 3));
    assert_eq!((r.jobs.submitted, r.jobs.completed), (2, 2), "one per role");
    assert_eq!(finished_after(&r), 3600.0);
}

#[test]
fn a_worker_killed_once_restarts_the_gang_from_its_checkpoint_and_succeeds() {
    let r = run(&job(
        ", kestrel.dev/sim-failures: \"worker-1@25m:exit=137\"",
        "",
    ));
    let t = only(&r);
    assert_eq!((t.state.as_str(), t.restarts), ("Succeeded", 1), "{t:?}");
    // The whole gang went at 25m and came back at once, resuming from the 20m checkpoint:
    // 40m more, done at 65m.
    assert_eq!(finished_after(&r), 65.0 * 60.0);
    assert_eq!(r.pods.created, 6, "two attempts of three pods");
    // 5 minutes of 3 pods of 2 GPUs past the checkpoint were lost.
    assert!((t.lost_gpu_hours - 0.5).abs() < 1e-9, "{t:?}");
    assert!((t.gpu_hours - 6.5).abs() < 1e-9, "{t:?}");
    assert_eq!(r.gangs.started, 1, "a restart is not a new gang");
}

#[test]
fn a_programs_own_error_fails_the_job_and_cleans_its_running_pods() {
    let r = run(&job(
        ", kestrel.dev/sim-failures: \"master-0@30m:exit=1\"",
        "",
    ));
    let t = only(&r);
    assert_eq!((t.state.as_str(), t.restarts), ("Failed", 0), "{t:?}");
    assert_eq!(t.reason.as_deref(), Some("PermanentFailure"));
    let message = t.message.as_deref().unwrap_or_default();
    assert!(
        message.contains("pod bert-master-0 failed: container train exited with code 1"),
        "{message}"
    );
    // cleanPodPolicy Running (the default): the workers are deleted at 30m, not run on.
    assert!((t.gpu_hours - 3.0).abs() < 1e-9, "{t:?}");
    assert_eq!(t.lost_gpu_hours, 0.0, "lost to restarts only");
    assert_eq!((r.pods.running_at_end, r.pods.completed), (0, 0));
    assert_eq!(r.jobs.completed, 0);
    // cleanPodPolicy None: the workers run on to their end.
    let r = run(&job(
        ", kestrel.dev/sim-failures: \"master-0@30m:exit=1\"",
        "cleanPodPolicy: None",
    ));
    let t = only(&r);
    assert_eq!(t.state, "Failed");
    assert!((t.gpu_hours - 5.0).abs() < 1e-9, "{t:?}");
    assert_eq!(r.pods.completed, 2);
}

#[test]
fn failures_beyond_the_backoff_limit_fail_the_job() {
    let failures = ", kestrel.dev/sim-failures: \"worker-0@5m:exit=137, worker-0@5m:exit=143\"";
    let r = run(&job(failures, "backoffLimit: 1"));
    let t = only(&r);
    assert_eq!((t.state.as_str(), t.restarts), ("Failed", 1), "{t:?}");
    assert_eq!(t.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(
        t.message
            .as_deref()
            .unwrap_or_default()
            .contains("exited with code 143"),
        "{t:?}"
    );
    // Two runs of 5 minutes; the first one's work was lost (no checkpoint yet).
    assert!((t.gpu_hours - 1.0).abs() < 1e-9, "{t:?}");
    assert!((t.lost_gpu_hours - 0.5).abs() < 1e-9, "{t:?}");
    // Within the default limit (3) the same failures cost two restarts.
    let t = only(&run(&job(failures, ""))).clone();
    assert_eq!((t.state.as_str(), t.restarts), ("Succeeded", 2), "{t:?}");
}

#[test]
fn the_active_deadline_fails_a_job_that_runs_too_long() {
    let r = run(&job("", "activeDeadlineSeconds: 1800"));
    let t = only(&r);
    assert_eq!(t.state, "Failed", "{t:?}");
    assert_eq!(t.reason.as_deref(), Some("DeadlineExceeded"));
    assert!((t.gpu_hours - 3.0).abs() < 1e-9, "{t:?}");
    assert_eq!(r.pods.running_at_end, 0);
    // A deadline the job meets changes nothing.
    let t = only(&run(&job("", "activeDeadlineSeconds: 7200"))).clone();
    assert_eq!(t.state, "Succeeded");
}

#[test]
fn a_preempted_member_restarts_the_whole_gang() {
    let urgent = "
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: Pod
metadata:
  name: urgent
  namespace: ml
  annotations: {kestrel.dev/sim-duration: 10m, kestrel.dev/sim-arrival: 15m}
spec:
  priorityClassName: high
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 4}}}]
";
    let r = run(&(job("", "") + urgent));
    let t = only(&r);
    assert_eq!((t.state.as_str(), t.restarts), ("Succeeded", 1), "{t:?}");
    assert!(r.preemption.victim_pods >= 1, "{:?}", r.preemption);
    let restart = t.message.as_deref().unwrap_or_default();
    assert!(restart.contains("after 1 restart(s)"), "{restart}");
    // The gang left after its 30s termination grace (15m30s), waited for the urgent pod
    // (to 25m30s), then resumed from the 10m checkpoint: 50m more.
    assert_eq!(finished_after(&r), 75.5 * 60.0);
    assert!((t.lost_gpu_hours - 0.55).abs() < 1e-9, "{t:?}");
}

#[test]
fn the_same_seed_gives_the_same_report() {
    let yaml = job(
        ", kestrel.dev/sim-failures: \"worker-1@25m:exit=137, master-0@10m:exit=139\"",
        "",
    );
    let workload = read(&yaml).unwrap();
    let go = || simulate(&cluster(8), &workload, SimConfig::default(), &mut |_, _| {}).unwrap();
    let (a, b) = (go(), go());
    assert_eq!(a, b);
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    assert_eq!(only(&a).restarts, 2);
}

#[test]
fn bad_failure_annotations_are_refused_naming_the_object_and_the_fix() {
    let refused = |failures: &str| {
        read(&job(
            &format!(", kestrel.dev/sim-failures: \"{failures}\""),
            "",
        ))
        .unwrap_err()
    };
    let field = "w.yaml: TrainingJob ml/bert: field \
                 metadata.annotations[\"kestrel.dev/sim-failures\"]";
    for (failures, why) in [
        (
            "worker-2@5m:exit=137",
            "the job has no member \"worker-2\"; its members are master-0, worker-0, worker-1",
        ),
        ("worker-1@5m:exit=0", "exit code \"0\" is not from 1 to 255"),
        ("worker-1@5m", "no :exit=<code>"),
        ("worker-1:exit=137", "no @<run time>"),
        ("worker-1@soon:exit=137", "in duration \"soon\""),
        ("worker-1@5m:code=1", "\"code=1\" is not exit=<code>"),
        (" , ", "names no failure"),
    ] {
        let e = refused(failures);
        assert!(e.starts_with(field), "{e}");
        assert!(e.contains(why), "{failures}: {e}");
        assert!(e.contains("write ") || e.contains("e.g."), "{e}");
    }
    // Only a TrainingJob is restarted by Kestrel: elsewhere the annotation is refused.
    let e = read(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: j
  namespace: ml
  annotations: {kestrel.dev/sim-duration: 1h, kestrel.dev/sim-failures: \"x-0@1m:exit=1\"}
spec:
  template:
    spec: {containers: [{name: c, image: x}]}
",
    )
    .unwrap_err();
    assert!(
        e.contains(
            "Job ml/j: field metadata.annotations[\"kestrel.dev/sim-failures\"]: only TrainingJobs"
        ),
        "{e}"
    );
}

#[test]
fn reports_without_training_jobs_leave_the_field_out() {
    let r = run("apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml, annotations: {kestrel.dev/sim-duration: 1m}}
spec: {containers: [{name: c, image: x}]}
");
    assert!(r.training_jobs.is_empty());
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("training_jobs"), "{json}");
}

/// The worked example of docs/concepts/training-jobs.md ("TrainingJobs in the simulator")
/// runs as it says.
#[test]
fn the_documented_example_runs_as_documented() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page = "docs/concepts/training-jobs.md";
    let doc = std::fs::read_to_string(root.join(page)).expect(page);
    let section = &doc[doc
        .find("## TrainingJobs in the simulator")
        .expect("the section")..];
    let yaml = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the example's YAML");
    let cluster =
        kestrel_sim::inputs::load_cluster_file(&root.join("examples/falcon-ai/cluster.yaml"))
            .unwrap();
    let workload = read(yaml).unwrap();
    let r = simulate(&cluster, &workload, SimConfig::default(), &mut |_, _| {}).unwrap();
    let summary = kestrel_sim::summary::render_summary(&r);
    let rows: Vec<&str> = summary
        .lines()
        .skip_while(|l| !l.starts_with("TrainingJobs"))
        .take(5)
        .collect();
    for row in rows {
        assert!(
            section.contains(row),
            "{page}: the example's output lacks {row:?}"
        );
    }
    let bert = &r.training_jobs[0];
    assert_eq!((bert.state.as_str(), bert.restarts), ("Succeeded", 1));
    assert!((bert.lost_gpu_hours - 16.0 / 6.0).abs() < 1e-9, "{bert:?}");
    assert_eq!(
        r.training_jobs[1].reason.as_deref(),
        Some("PermanentFailure")
    );
}

#[test]
fn a_training_job_is_admitted_by_its_queue_whole() {
    let queues = |gpus: u32| {
        format!(
            "apiVersion: scheduling.kestrel.dev/v1alpha1
kind: ResourceFlavor
metadata: {{name: default}}
---
apiVersion: scheduling.kestrel.dev/v1alpha1
kind: ClusterQueue
metadata: {{name: team}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: default
      resources:
      - {{name: cpu, nominalQuota: 100}}
      - {{name: memory, nominalQuota: 1Ti}}
      - {{name: nvidia.com/gpu, nominalQuota: {gpus}}}
---
apiVersion: scheduling.kestrel.dev/v1alpha1
kind: LocalQueue
metadata: {{name: research, namespace: ml}}
spec: {{clusterQueue: team}}
---
"
        )
    };
    // spec.queue puts the job's pods in the queue, as the controller labels them live.
    let queued = job("", "").replace(
        "spec:\n  runPolicy",
        "spec:\n  queue: research\n  runPolicy",
    );
    assert!(queued.contains("queue: research"));
    let fits = run(&(queues(6) + &queued));
    assert_eq!(only(&fits).state, "Succeeded");
    // 6 GPUs of gang through a 4-GPU quota: none of it runs, on 8 free GPUs.
    let short = run(&(queues(4) + &queued));
    assert_eq!(only(&short).queue_wait_seconds, None, "{:?}", only(&short));
}
