//! Team queues in the simulator: the built-in scenarios and namespace ResourceQuotas.

use kestrel_core::{Demand, GpuRequest, PodSpec, Resources, VictimOrder};
use kestrel_objects::quota::{read_quota_from, Quota, QuotaSource};
use kestrel_sim::metrics::SimReport;
use kestrel_sim::scenarios::{contended_day, kueue_baseline, preemption_heavy};
use kestrel_sim::{simulate, JobKind, PodSet, SimCluster, SimConfig, Workload};

fn run(cluster: &SimCluster, workload: &Workload, config: SimConfig) -> SimReport {
    simulate(cluster, workload, config, &mut |_, _| {}).unwrap()
}

#[test]
fn kueue_baseline_admits_everything_by_priority() {
    let (cluster, workload) = kueue_baseline();
    assert_eq!(workload.jobs.len(), 15_000);
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!(r.pods.completed, 15_000);
    assert_eq!(r.pods.pending_at_end, 0);
    let wait = |p: &str| {
        r.by_priority
            .iter()
            .find(|g| g.group == p)
            .unwrap()
            .queue_wait
            .mean
    };
    assert!(wait("200") < wait("100") && wait("100") < wait("50"));
    let nominal: f64 = r.queues.iter().map(|q| q.nominal).sum();
    let used: f64 = r.queues.iter().map(|q| q.used_mean).sum();
    assert!(used <= nominal, "a cohort never lends more than it has");
    assert!(used / nominal > 0.5, "usage {}", used / nominal);
}

#[test]
fn checkpoint_aware_preemption_loses_less_work() {
    let lost = |order, requests| -> f64 {
        (0..3)
            .map(|seed| {
                let (cluster, workload) = preemption_heavy(seed);
                let config = SimConfig {
                    victim_order: order,
                    checkpoint_requests: requests,
                    ..Default::default()
                };
                let r = run(&cluster, &workload, config);
                assert!(r.preemption.victim_pods > 0);
                r.preemption.lost_gpu_hours
            })
            .sum()
    };
    let blind = lost(VictimOrder::LowestPriority, false);
    let choice = lost(VictimOrder::CheckpointAware, false);
    let asked = lost(VictimOrder::CheckpointAware, true);
    assert!(choice < blind, "choice {choice} vs blind {blind}");
    assert!(asked <= 0.5 * blind, "asked {asked} vs blind {blind}");
}

#[test]
fn contended_day_shares_follow_entitlements() {
    let (cluster, workload) = contended_day(42);
    let a = run(&cluster, &workload, SimConfig::default());
    let b = run(&cluster, &workload, SimConfig::default());
    assert_eq!(a, b, "same inputs, same run");
    assert!(a.queue_fairness.unwrap() > 0.95, "{:?}", a.queue_fairness);
    assert!(a.queues.iter().map(|q| q.borrowed_hours).sum::<f64>() > 0.0);
    assert_eq!(a.pods.pending_at_end, 0);
    assert!(a.preemption.checkpoint_requests > 0);
    // Lent quota comes back within a cycle plus the victims' grace (30 s, or 60 s to
    // checkpoint): reclaims never chain.
    let reclaim = &a.preemption.reclaim_latency;
    assert!(reclaim.count > 0);
    assert!(reclaim.p99 <= 61.0, "reclaim p99 {} s", reclaim.p99);
}

#[test]
fn namespace_resource_quota_refuses_creations_until_pods_end() {
    let mut cluster = SimCluster::default();
    let mut n = kestrel_core::NodeSpec::new("n0", Resources::new(64_000, 1 << 40));
    (n.gpus, n.nics) = kestrel_core::GpuTopology::Flat.devices("H100", 81_559, 8);
    cluster.nodes.push(n);
    let template = PodSpec::new(
        "",
        "",
        Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::Whole(1),
        },
    );
    let mut workload = Workload::default();
    workload.jobs.push(PodSet {
        kind: JobKind::Job,
        source_kind: "Job".into(),
        namespace: "team".into(),
        name: "batch".into(),
        arrival: 0,
        duration: Some(60_000),
        parallelism: 4,
        completions: 4,
        template,
        gpu_utilization: 1.0,
    });
    workload.queues.resource_quotas.push(file_quota(
        "team",
        serde_json::json!({"hard": {"requests.nvidia.com/gpu": "2"}}),
    ));
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!(r.pods.completed, 4, "refused creations are retried");
    assert_eq!(r.pods.rejected_by_quota, 0, "none left refused at the end");
    assert_eq!(r.span, 120_000, "two at a time: two rounds of 60 s");

    // Shares by annotation request no nvidia.com/gpu: the quota does not see them.
    let mut shared = workload.jobs[0].clone();
    shared.name = "shared".into();
    shared.template.demand.gpu = GpuRequest::Shared { milli: 600 };
    workload.jobs = vec![shared];
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!(r.pods.completed, 4);
    assert_eq!(r.span, 60_000, "all four at once");

    // A quota scoped to a priority class counts only the pods of that class, as the
    // live scheduler reads it.
    let scoped = serde_json::json!({"hard": {"requests.nvidia.com/gpu": "2"},
        "scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["urgent"]}]}});
    workload.queues.resource_quotas = vec![file_quota("team", scoped)];
    workload.jobs[0].template.demand.gpu = GpuRequest::Whole(1);
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!(r.span, 60_000, "pods of no class are not counted");
    workload.jobs[0].template.priority_class = Some("urgent".into());
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!(r.pods.completed, 4);
    assert_eq!(r.span, 120_000, "urgent pods two at a time");
}

/// A ResourceQuota `gpus` in `namespace` with this spec, read as the files' are.
fn file_quota(namespace: &str, spec: serde_json::Value) -> Quota {
    let quota = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpus", "namespace": namespace}, "spec": spec}))
    .unwrap();
    read_quota_from(&quota, QuotaSource::File).quota.unwrap()
}

/// A Kueue setup (one flavor, a ClusterQueue of `gpus` GPUs) and `jobs`, read as files are.
fn queued(gpus: u32, jobs: &str) -> (SimCluster, Workload) {
    queued_with_flavor(gpus, jobs, "default")
}

/// [`queued`] with the ResourceFlavor object named `flavor` (the queue names `default`).
fn queued_with_flavor(gpus: u32, jobs: &str, flavor: &str) -> (SimCluster, Workload) {
    let mut cluster = SimCluster::default();
    let mut n = kestrel_core::NodeSpec::new("n0", Resources::new(64_000, 1 << 40));
    (n.gpus, n.nics) = kestrel_core::GpuTopology::Flat.devices("H100", 81_559, 8);
    cluster.nodes.push(n);
    let queues = format!(
        "apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: {flavor}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: team}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources:
      - {{name: nvidia.com/gpu, nominalQuota: {gpus}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: main, namespace: team}}
spec: {{clusterQueue: team}}
"
    );
    let files = vec![
        (std::path::PathBuf::from("queues.yaml"), queues),
        (std::path::PathBuf::from("jobs.yaml"), jobs.to_string()),
    ];
    (
        cluster,
        kestrel_sim::manifests::load_manifests(&files).unwrap(),
    )
}

/// A Job in queue `main` of one-GPU pods running a minute.
fn job(name: &str, parallelism: u32, completions: u32, annotations: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team
  labels: {{kueue.x-k8s.io/queue-name: main}}
  annotations: {{kestrel.dev/sim-duration: 60s{annotations}}}
spec:
  parallelism: {parallelism}
  completions: {completions}
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: w
        image: trainer
        resources: {{limits: {{nvidia.com/gpu: 1}}}}
---
"
    )
}

#[test]
fn a_queued_job_is_admitted_whole_not_pod_by_pod() {
    // Parallelism 3 under a quota of 2: Kueue runs none, and so does Kestrel.
    let (cluster, workload) = queued(2, &job("whole", 3, 3, ""));
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!((r.pods.scheduled, r.pods.pending_at_end), (0, 3));
    let reason = &r.pending_at_end[0].reason;
    assert!(reason.contains("quota"), "{reason}");

    // Partial admission down to 1: two start, then the other two once they end.
    let (cluster, workload) = queued(
        2,
        &job(
            "partial",
            4,
            4,
            ", kueue.x-k8s.io/job-min-parallelism: \"1\"",
        ),
    );
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!(r.pods.completed, 4);
    assert_eq!(r.span, 120_000, "two at a time");
    // The most the quota takes, found among all counts down to the minimum: 5 of 7.
    let (cluster, workload) = queued(
        5,
        &job("most", 7, 7, ", kueue.x-k8s.io/job-min-parallelism: \"2\""),
    );
    let r = run(&cluster, &workload, SimConfig::default());
    let most = r.samples.iter().map(|s| s.pods_running).max();
    assert_eq!((r.pods.completed, most), (7, Some(5)));

    // Parallelism 3, completions 5: after the first three end together, the last two
    // run under the workload's admission, without its minimum of 3.
    let (cluster, workload) = queued(3, &job("waves", 3, 5, ""));
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!((r.pods.completed, r.pods.pending_at_end), (5, 0));
    assert_eq!(r.span, 120_000);
}

#[test]
fn a_bad_partial_admission_minimum_names_the_job_and_field() {
    let files = |min: &str| {
        vec![(
            std::path::PathBuf::from("jobs.yaml"),
            job(
                "train",
                4,
                4,
                &format!(", kueue.x-k8s.io/job-min-parallelism: \"{min}\""),
            ),
        )]
    };
    for bad in ["0", "9", "many"] {
        let e = kestrel_sim::manifests::load_manifests(&files(bad))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Job team/train") && e.contains("job-min-parallelism"),
            "{e}"
        );
    }
}

#[test]
fn a_cluster_queue_naming_a_missing_flavor_admits_nothing() {
    let (cluster, workload) = queued_with_flavor(8, &job("lost", 1, 1, ""), "other");
    let r = run(&cluster, &workload, SimConfig::default());
    assert_eq!((r.pods.scheduled, r.pods.pending_at_end), (0, 1));
    let reason = &r.pending_at_end[0].reason;
    assert!(
        reason.contains("ClusterQueue team is inactive: FlavorNotFound")
            && reason.contains("ResourceFlavor \"default\" does not exist"),
        "{reason}"
    );
}
