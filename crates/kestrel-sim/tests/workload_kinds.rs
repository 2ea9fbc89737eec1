//! Workloads of several pod templates as their users write them: a Kubeflow PyTorchJob, a
//! Volcano Job and a JobSet are each one gang over all of their roles.

mod one_node;

use kestrel_sim::metrics::SimReport;
use kestrel_sim::{simulate, SimConfig};
use one_node::{cluster, read};

/// The warnings a workload's files gave, as the simulator prints them.
fn warnings_of(workload: &kestrel_sim::Workload) -> Vec<String> {
    workload
        .queues
        .warnings
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn run(gpus: u32, yaml: &str) -> SimReport {
    let workload = read(yaml).unwrap();
    simulate(
        &cluster(gpus),
        &workload,
        SimConfig::default(),
        &mut |_, _| {},
    )
    .unwrap()
}

const TEMPLATE: &str = "
        spec:
          containers:
          - name: main
            image: trainer
            resources: {limits: {nvidia.com/gpu: 2}}";

fn pytorch(workers: u32) -> String {
    format!(
        "apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: llm
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 60s}}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:{TEMPLATE}
    Worker:
      replicas: {workers}
      template:{TEMPLATE}
"
    )
}

#[test]
fn a_pytorchjob_starts_all_its_replicas_together_or_none() {
    // Master and 3 workers of 2 GPUs: 8 GPUs, all at once.
    let r = run(8, &pytorch(3));
    assert_eq!((r.pods.created, r.pods.completed), (4, 4));
    assert_eq!(r.span, 60_000, "together, in one round");
    assert_eq!(r.gangs.started, 1, "{:?}", r.gangs);
    // Four workers: 10 GPUs on 8. None starts, rather than a master without its workers.
    let r = run(8, &pytorch(4));
    assert_eq!((r.pods.scheduled, r.pods.pending_at_end), (0, 5));
    let reason = &r.pending_at_end[0].reason;
    assert!(reason.contains("pytorchjob-llm"), "{reason}");
}

#[test]
fn a_volcano_job_starts_at_its_min_available_and_a_jobset_whole() {
    let volcano = format!(
        "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: mpi
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 60s}}
spec:
  minAvailable: 3
  schedulerName: volcano
  tasks:
  - name: launcher
    replicas: 1
    minAvailable: 1
    template:{TEMPLATE}
  - name: worker
    replicas: 4
    template:{TEMPLATE}
"
    );
    // 8 GPUs hold 4 of its 5 pods: minAvailable 3 (the launcher among them) starts it.
    let r = run(8, &volcano);
    assert_eq!(r.pods.completed, 5);
    assert_eq!(r.gangs.started, 1);
    assert!(r.span > 60_000, "the fifth pod waits for room: {}", r.span);

    let deeper = TEMPLATE.replace('\n', "\n    ");
    let jobset = format!(
        "apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: sweep
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 60s}}
spec:
  replicatedJobs:
  - name: driver
    template:
      spec:
        template:{deeper}
  - name: workers
    replicas: 2
    template:
      spec:
        parallelism: 2
        completions: 2
        template:{deeper}
"
    );
    // 1 driver + 2 x 2 workers = 5 pods of 2 GPUs: 10 on 8, so none; on 10, all.
    let r = run(8, &jobset);
    assert_eq!((r.pods.scheduled, r.pods.pending_at_end), (0, 5));
    let r = run(10, &jobset);
    assert_eq!((r.pods.completed, r.span), (5, 60_000));
}

#[test]
fn bad_multi_role_workloads_name_the_object_and_field() {
    let no_master = pytorch(2).replace("Master:", "Chief:");
    let e = read(&no_master).unwrap_err();
    assert!(
        e.contains("PyTorchJob ml/llm")
            && e.contains("pytorchReplicaSpecs")
            && e.contains("Master"),
        "{e}"
    );
    let too_many = "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: ml}
spec:
  tasks:
  - name: worker
    replicas: 2
    minAvailable: 3
    template: {spec: {containers: [{name: c, image: x}]}}
";
    let e = read(too_many).unwrap_err();
    assert!(
        e.contains("Job ml/mpi")
            && e.contains("spec.tasks[0].minAvailable")
            && e.contains("exceeds"),
        "{e}"
    );
    let no_duration = pytorch(1).replace("  annotations: {kestrel.dev/sim-duration: 60s}\n", "");
    let e = read(&no_duration).unwrap_err();
    assert!(e.contains("a PyTorchJob needs to say how long"), "{e}");
}

#[test]
fn kinds_at_versions_kestrel_does_not_read_are_refused_naming_the_versions_it_reads() {
    let volcano_job = "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: ml, annotations: {kestrel.dev/sim-duration: 60s}}
spec:
  tasks:
  - name: worker
    replicas: 2
    template: {spec: {containers: [{name: c, image: x}]}}
";
    let jobset = "apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: ml, annotations: {kestrel.dev/sim-duration: 60s}}
spec:
  replicatedJobs:
  - name: w
    replicas: 1
    template: {spec: {template: {spec: {containers: [{name: c, image: x}]}}}}
";
    let pod_group = "apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: g, namespace: ml}
spec: {minMember: 2}
";
    // Each reads at its own version first.
    for yaml in [pytorch(1).as_str(), volcano_job, jobset, pod_group] {
        read(yaml).unwrap_or_else(|e| panic!("{e}"));
    }
    for (yaml, from, to, object, reads) in [
        (
            pytorch(1),
            "kubeflow.org/v1",
            "kubeflow.org/v2",
            "PyTorchJob ml/llm",
            "kubeflow.org/v1",
        ),
        (
            volcano_job.to_string(),
            "v1alpha1",
            "v1beta1",
            "Job ml/mpi",
            "batch.volcano.sh/v1alpha1",
        ),
        (
            jobset.to_string(),
            "v1alpha2",
            "v1",
            "JobSet ml/js",
            "jobset.x-k8s.io/v1alpha2",
        ),
        (
            pod_group.to_string(),
            "v1beta1",
            "v1",
            "PodGroup ml/g",
            "scheduling.volcano.sh/v1beta1",
        ),
        // Kubernetes' own PodGroup (the Workload API's): not a kind of another version
        // Kestrel reads, but the same name; the versions it reads are named.
        (
            pod_group.to_string(),
            "scheduling.volcano.sh/v1beta1",
            "scheduling.k8s.io/v1alpha1",
            "PodGroup ml/g",
            "scheduling.x-k8s.io/v1alpha1",
        ),
    ] {
        let e = read(&yaml.replacen(from, to, 1)).unwrap_err();
        assert!(
            e.contains(object)
                && e.contains("apiVersion")
                && e.contains("is not one Kestrel reads")
                && e.contains(reads),
            "{e}"
        );
    }
}
#[test]
fn a_preempted_bare_pod_is_deleted_and_a_jobs_pod_comes_back() {
    let yaml = "apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: v1
kind: Pod
metadata:
  name: scratch
  namespace: ml
  annotations: {kestrel.dev/sim-duration: 1h}
spec:
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 4}}}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: batch
  namespace: ml
  annotations: {kestrel.dev/sim-duration: 1h}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 4}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: urgent
  namespace: ml
  annotations: {kestrel.dev/sim-duration: 10m, kestrel.dev/sim-arrival: 5m}
spec:
  priorityClassName: high
  containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]
";
    let r = run(8, yaml);
    assert_eq!(r.preemption.victim_pods, 2, "{:?}", r.preemption);
    assert_eq!(r.preemption.deleted_pods, 1, "the bare Pod is gone");
    // urgent and the Job's pod complete; the bare Pod never runs again.
    assert_eq!((r.pods.completed, r.pods.pending_at_end), (2, 0));
}

fn training(workers: u32) -> String {
    format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1
kind: TrainingJob
metadata:
  name: bert
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 60s}}
spec:
  replicaSpecs:
    Master:
      replicas: 1
      template:{TEMPLATE}
    Worker:
      replicas: {workers}
      template:{TEMPLATE}
"
    )
}

/// A TrainingJob is read with the live controller's validation and runs as one gang.
#[test]
fn a_training_job_is_one_gang_and_refused_as_live() {
    let r = run(8, &training(3));
    assert_eq!((r.pods.created, r.pods.completed), (4, 4));
    assert_eq!(r.gangs.started, 1, "{:?}", r.gangs);
    let r = run(8, &training(4));
    assert_eq!((r.pods.scheduled, r.pods.pending_at_end), (0, 5));
    let e = read(&training(0)).unwrap_err();
    assert!(
        e.contains(
            "w.yaml: TrainingJob ml/bert: field spec.replicaSpecs.Worker.replicas: 0 replicas"
        ),
        "{e}"
    );
    let e = read(&training(1).replace("Master:", "Chief:")).unwrap_err();
    assert!(e.contains("unknown replica type"), "{e}");
}

#[test]
fn a_suspended_job_without_a_queue_never_starts_and_is_warned_of() {
    let job = |suspend: &str| {
        format!(
            "apiVersion: batch/v1
kind: Job
metadata: {{name: paused, namespace: ml, annotations: {{kestrel.dev/sim-duration: 60s}}}}
spec:
  suspend: {suspend}
  parallelism: 2
  template: {{spec: {{containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}}}
"
        )
    };
    let r = run(8, &job("false"));
    assert_eq!(r.pods.completed, 2);
    let workload = read(&job("true")).unwrap();
    let warnings = warnings_of(&workload);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("Job ml/paused")
            && warnings[0].contains("spec.suspend")
            && warnings[0].contains("names no queue"),
        "{warnings:?}"
    );
    let r = run(8, &job("true"));
    assert_eq!((r.pods.created, r.pods.scheduled), (0, 0));
}

#[test]
fn a_volcano_job_in_the_default_queue_runs_as_volcano_always_has_that_queue() {
    let job = "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: ml, annotations: {kestrel.dev/sim-duration: 60s}}
spec:
  minAvailable: 2
  queue: default
  tasks:
  - name: worker
    replicas: 2
    template: {spec: {containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]}}
";
    let research = "---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec: {weight: 1, capability: {nvidia.com/gpu: 4}}
";
    // Alone, and beside a queue of the user's.
    for yaml in [job.to_string(), format!("{job}{research}")] {
        let r = run(8, &yaml);
        assert_eq!(r.pods.completed, 2, "{yaml}: {:?}", r.pending_at_end);
    }
    // A default queue of the user's own is the one used: capability 1 GPU holds back a
    // gang of 2.
    let own = "---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
spec: {weight: 1, capability: {nvidia.com/gpu: 1}}
";
    let r = run(8, &format!("{job}{own}"));
    assert_eq!((r.pods.scheduled, r.pods.pending_at_end), (0, 2));
}

#[test]
fn duplicated_role_names_and_huge_counts_are_refused_naming_the_field() {
    let twice = "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: ml, annotations: {kestrel.dev/sim-duration: 60s}}
spec:
  tasks:
  - {name: worker, replicas: 1, template: {spec: {containers: [{name: c, image: x}]}}}
  - {name: worker, replicas: 1, template: {spec: {containers: [{name: c, image: x}]}}}
";
    let e = read(twice).unwrap_err();
    assert!(
        e.contains("Job ml/mpi")
            && e.contains("spec.tasks[1].name")
            && e.contains("also the name of spec.tasks[0]")
            && !e.contains("metadata.name"),
        "{e}"
    );
    let jobset = "apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: ml, annotations: {kestrel.dev/sim-duration: 60s}}
spec:
  replicatedJobs:
  - {name: w, replicas: 1, template: {spec: {template: {spec: {containers: [{name: c, image: x}]}}}}}
  - {name: w, replicas: 1, template: {spec: {template: {spec: {containers: [{name: c, image: x}]}}}}}
";
    let e = read(jobset).unwrap_err();
    assert!(e.contains("spec.replicatedJobs[1].name"), "{e}");
    let big_task = twice.replacen("replicas: 1", "replicas: 150000", 1);
    for (yaml, field) in [
        (
            "apiVersion: batch/v1
kind: Job
metadata: {name: huge, namespace: ml, annotations: {kestrel.dev/sim-duration: 60s}}
spec:
  parallelism: 1000000
  template: {spec: {containers: [{name: c, image: x}]}}
",
            "spec.parallelism",
        ),
        (
            "apiVersion: apps/v1
kind: Deployment
metadata: {name: huge, namespace: ml}
spec:
  replicas: 200000
  selector: {matchLabels: {a: b}}
  template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: x}]}}
",
            "spec.replicas",
        ),
        (big_task.as_str(), "spec.tasks[0].replicas"),
    ] {
        let e = read(yaml).unwrap_err();
        assert!(
            e.contains(field) && e.contains("exceeds Kestrel's limit of 100000 pods"),
            "{field}: {e}"
        );
    }
}

#[test]
fn a_misspelt_pod_field_is_warned_of_by_its_path() {
    let job = "apiVersion: batch/v1
kind: Job
metadata: {name: typo, namespace: ml, annotations: {kestrel.dev/sim-duration: 60s}}
spec:
  template:
    spec:
      nodeSelectr: {pool: a}
      containers:
      - name: c
        image: x
        resoures: {limits: {nvidia.com/gpu: 1}}
";
    let workload = read(job).unwrap();
    let warnings = warnings_of(&workload);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("Job ml/typo: field spec.template.spec.containers[0].resoures")
            || warnings[1].contains("Job ml/typo: field spec.template.spec.containers[0].resoures"),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("field spec.template.spec.nodeSelectr: unknown field")),
        "{warnings:?}"
    );
    // Spelt right, nothing is said.
    let right = job
        .replace("nodeSelectr", "nodeSelector")
        .replace("resoures", "resources");
    assert!(read(&right).unwrap().queues.warnings.is_empty());
}

#[test]
fn a_jobset_with_exclusive_topology_gives_each_child_job_a_rack_of_its_own() {
    use kestrel_core::{PodPhase, RACK_LABEL};
    let cluster = kestrel_sim::cluster_spec::load_cluster_spec(
        &std::path::PathBuf::from("cluster.yaml"),
        "apiVersion: sim.kestrel.dev/v1alpha1
kind: SimCluster
metadata: {name: racks}
spec:
  pools:
  - {name: gpu, count: 4, racks: 2, cpu: \"64\", memory: 512Gi, gpu: {model: H100, count: 8, memoryMiB: 81559}}
",
    )
    .unwrap();
    let jobset = |annotation: &str| {
        format!(
            "apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: js
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 60s{annotation}}}
spec:
  replicatedJobs:
  - name: w
    replicas: 2
    template:
      spec:
        parallelism: 2
        completions: 2
        template: {{spec: {{containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 4}}}}}}]}}}}
"
        )
    };
    let racks_of = |yaml: &str| {
        let workload = read(yaml).unwrap();
        let mut sim =
            kestrel_sim::Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
        sim.run_to(1_000).unwrap();
        let mut racks: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (_, record) in sim.scheduler().pods() {
            if let PodPhase::Bound { node, .. } = &record.phase {
                let rack = sim.scheduler().cluster().node(*node).spec.labels[RACK_LABEL].clone();
                // Pods are named after their child Job: js-w-<job>-<pod> or js-w-<n>.
                racks
                    .entry(rack)
                    .or_default()
                    .push(record.spec.name.clone());
            }
        }
        racks
    };
    let exclusive = racks_of(&jobset(
        ", alpha.jobset.sigs.k8s.io/exclusive-topology: topology.kestrel.dev/rack",
    ));
    assert_eq!(exclusive.len(), 2, "{exclusive:?}");
    for pods in exclusive.values() {
        assert_eq!(pods.len(), 2, "{exclusive:?}");
        let job = |p: &String| p.rsplit_once('-').unwrap().0.to_string();
        assert_eq!(
            job(&pods[0]),
            job(&pods[1]),
            "one child Job per rack: {exclusive:?}"
        );
    }
    // Without the annotation the four pods pack into one rack.
    let packed = racks_of(&jobset(""));
    assert_eq!(packed.len(), 1, "{packed:?}");
}

#[test]
fn leader_worker_sets_are_a_gang_per_group_and_bad_ones_are_refused_by_field() {
    let lws = |size: &str, extra: &str| {
        format!(
            "apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {{name: llm, namespace: serving, annotations: {{kestrel.dev/sim-duration: 60s{extra}}}}}
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: {size}
    workerTemplate: {{spec: {{containers: [{{name: w, image: x, resources: {{limits: {{nvidia.com/gpu: 2}}}}}}]}}}}
"
        )
    };
    // Two groups of 4 pods of 2 GPUs on 8 GPUs: one group at a time, whole.
    let r = run(8, &lws("4", ""));
    assert_eq!((r.pods.created, r.pods.completed), (8, 8));
    assert_eq!(r.span, 120_000, "one group after the other");
    assert_eq!(r.gangs.started, 2, "{:?}", r.gangs);
    let e = read(&lws("0", "")).unwrap_err();
    assert!(
        e.contains("LeaderWorkerSet serving/llm")
            && e.contains("spec.leaderWorkerTemplate.size")
            && e.contains("leader at least"),
        "{e}"
    );
    let e = read(&lws("2", "").replace("    workerTemplate:", "    otherTemplate:")).unwrap_err();
    assert!(
        e.contains("spec.leaderWorkerTemplate.workerTemplate") && e.contains("missing"),
        "{e}"
    );
    let e =
        read(&lws("2", "").replace("leaderworkerset.x-k8s.io/v1", "leaderworkerset.x-k8s.io/v2"))
            .unwrap_err();
    assert!(
        e.contains("leaderworkerset.x-k8s.io/v1") && e.contains("apiVersion"),
        "{e}"
    );
}

#[test]
fn a_cron_job_creates_its_jobs_on_its_schedule() {
    let cron = |schedule: &str, extra: &str| {
        format!(
            "apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 10m, kestrel.dev/sim-until: 2h{extra}}}
spec:
  schedule: \"{schedule}\"
  jobTemplate:
    spec:
      template: {{spec: {{restartPolicy: Never, containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]}}}}
"
        )
    };
    // Every 30 minutes for 2 hours: 0, 30, 60 and 90 minutes, 10 minutes each.
    let r = run(8, &cron("*/30 * * * *", ""));
    assert_eq!((r.pods.created, r.pods.completed), (4, 4));
    assert_eq!(r.span, 100 * 60_000, "the last starts at 90 minutes");
    let workload = read(&cron("*/30 * * * *", "")).unwrap();
    let names: Vec<&str> = workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        ["nightly-0", "nightly-30", "nightly-60", "nightly-90"]
    );
    let e = read(&cron("*/30 * * *", "")).unwrap_err();
    assert!(
        e.contains("CronJob ml/nightly") && e.contains("spec.schedule") && e.contains("five"),
        "{e}"
    );
    let e = read(&cron("* * * * *", "").replace("2h", "30d")).unwrap_err();
    assert!(
        e.contains("kestrel.dev/sim-until") && e.contains("more than 10000"),
        "{e}"
    );
    // Suspended: no Jobs, and a warning.
    let suspended =
        cron("*/30 * * * *", "").replace("spec:\n  schedule", "spec:\n  suspend: true\n  schedule");
    let workload = read(&suspended).unwrap();
    assert!(workload.jobs.is_empty());
    assert!(workload.queues.warnings[0]
        .to_string()
        .contains("spec.suspend"));
}

/// A Kubeflow Trainer runtime with a trainer Job of one 1-GPU pod (`kind`: TrainingRuntime
/// in namespace ml, or ClusterTrainingRuntime) and a TrainJob on it (`trainer`: its
/// `spec.trainer`, `labels`: its labels).
fn train_job(kind: &str, trainer: &str, labels: &str) -> String {
    let namespace = match kind {
        "TrainingRuntime" => ", namespace: ml",
        _ => "",
    };
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1
kind: {kind}
metadata: {{name: torch{namespace}}}
spec:
  mlPolicy: {{numNodes: 2}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
          spec:
            template:
              spec:
                containers:
                - {{name: node, image: x, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {{name: llm, namespace: ml, labels: {{{labels}}}, annotations: {{kestrel.dev/sim-duration: 60s}}}}
spec:
  runtimeRef: {{name: torch, kind: {kind}}}
  trainer: {{{trainer}}}
"
    )
}

#[test]
fn a_train_job_runs_its_runtimes_jobset_sized_by_its_trainer_as_one_gang() {
    // The runtime's 2 nodes, 1 GPU each.
    let r = run(8, &train_job("ClusterTrainingRuntime", "", ""));
    assert_eq!((r.pods.created, r.pods.completed), (2, 2));
    let workload = read(&train_job("TrainingRuntime", "", "")).unwrap();
    let names: Vec<&str> = workload.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(
        names,
        ["llm-node"],
        "the JobSet's replicated Job, named after the TrainJob"
    );
    // numNodes 3 x 4 GPUs on 8: two fit, so the gang of three waits whole.
    let big = train_job(
        "TrainingRuntime",
        "numNodes: 3, resourcesPerNode: {limits: {nvidia.com/gpu: 4}}",
        "",
    );
    let r = run(8, &big);
    assert_eq!((r.pods.created, r.pods.scheduled), (3, 0), "{:?}", r.gangs);
    // 2 nodes of 4 GPUs fit at once.
    let r = run(
        8,
        &train_job(
            "TrainingRuntime",
            "resourcesPerNode: {limits: {nvidia.com/gpu: 4}}",
            "",
        ),
    );
    assert_eq!((r.pods.created, r.pods.completed, r.span), (2, 2, 60_000));
}

#[test]
fn a_train_jobs_queue_label_counts() {
    let queue = "apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: ml}
spec: {clusterQueue: team}
---
";
    let job = train_job(
        "TrainingRuntime",
        "resourcesPerNode: {limits: {nvidia.com/gpu: 4}}",
        "kueue.x-k8s.io/queue-name: main",
    );
    // 8 GPUs over a quota of 4: admitted whole or not at all.
    let r = run(8, &format!("{queue}{job}"));
    assert_eq!((r.pods.created, r.pods.scheduled), (2, 0));
    let r = run(8, &format!("{queue}{}", job.replace("gpu: 4}", "gpu: 2}")));
    assert_eq!((r.pods.created, r.pods.completed), (2, 2));
    // Named in spec.labels, which Trainer copies onto its JobSet, it counts as well.
    let in_spec = train_job(
        "TrainingRuntime",
        "resourcesPerNode: {limits: {nvidia.com/gpu: 4}}",
        "",
    )
    .replace(
        "  trainer: {",
        "  labels: {kueue.x-k8s.io/queue-name: main}\n  trainer: {",
    );
    let r = run(8, &format!("{queue}{in_spec}"));
    assert_eq!((r.pods.created, r.pods.scheduled), (2, 0));
}

#[test]
fn a_train_job_naming_a_missing_runtime_is_refused_by_field() {
    let file = train_job("TrainingRuntime", "", "");
    let e = read(&file.replace("name: torch, kind", "name: torhc, kind")).unwrap_err();
    assert!(
        e.contains("TrainJob ml/llm")
            && e.contains("spec.runtimeRef.name")
            && e.contains("no TrainingRuntime ml/torhc")
            && e.contains("add it to the workload files"),
        "{e}"
    );
    // A TrainingRuntime is namespaced: one in another namespace is not the one named.
    let e = read(&file.replace("namespace: ml}", "namespace: other}")).unwrap_err();
    assert!(e.contains("no TrainingRuntime ml/torch"), "{e}");
    // Trainer's default kind is ClusterTrainingRuntime.
    let e = read(&file.replace(", kind: TrainingRuntime}", "}")).unwrap_err();
    assert!(e.contains("no ClusterTrainingRuntime torch"), "{e}");
    // resourcesPerNode sets the trainer's `node` container: a runtime without one is wrong.
    let e = read(
        &file
            .replace(
                "trainer: {}",
                "trainer: {resourcesPerNode: {limits: {nvidia.com/gpu: 2}}}",
            )
            .replace("{name: node, image", "{name: main, image"),
    )
    .unwrap_err();
    assert!(
        e.contains("TrainingRuntime ml/torch")
            && e.contains("no container named node")
            && e.contains("TrainJob ml/llm"),
        "{e}"
    );
    let e = read(&file.replace(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob",
        "apiVersion: trainer.kubeflow.org/v2\nkind: TrainJob",
    ))
    .unwrap_err();
    assert!(
        e.contains("apiVersion") && e.contains("trainer.kubeflow.org/v1alpha1"),
        "{e}"
    );
}

#[test]
fn an_mpi_job_starts_its_launcher_and_workers_together_or_none() {
    let mpi = |workers: u32| {
        format!(
            "apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: pi, namespace: ml, annotations: {{kestrel.dev/sim-duration: 60s}}}}
spec:
  slotsPerWorker: 1
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template: {{spec: {{containers: [{{name: l, image: x}}]}}}}
    Worker:
      replicas: {workers}
      template:{TEMPLATE}
"
        )
    };
    // 3 workers of 2 GPUs and the launcher on 8 GPUs: all at once.
    let r = run(8, &mpi(3));
    assert_eq!((r.pods.created, r.pods.completed, r.span), (4, 4, 60_000));
    // 5 workers of 2 GPUs on 8: four would fit, but the gang waits whole.
    let r = run(8, &mpi(5));
    assert_eq!((r.pods.created, r.pods.scheduled), (6, 0));
    let e = read(&mpi(2).replace("kubeflow.org/v2beta1", "kubeflow.org/v1")).unwrap_err();
    assert!(
        e.contains("apiVersion") && e.contains("kubeflow.org/v2beta1"),
        "{e}"
    );
}

/// The roles of one gang that see a shared volume differently are warned of, whatever the
/// kind; the gang still runs (the warning does not hold it).
#[test]
fn a_gang_whose_roles_mount_a_shared_volume_differently_is_warned_of() {
    let role = |name: &str, replicas: u32, mount: &str| {
        format!(
            "
  - name: {name}
    replicas: {replicas}
    template:
      spec:
        template:
          spec:
            volumes: [{{name: ckpt, nfs: {{server: nas, path: /exports/ckpt}}}}]
            containers:
            - {{name: c, image: x, volumeMounts: [{mount}],
                resources: {{limits: {{nvidia.com/gpu: 1}}}}}}"
        )
    };
    let jobset = |worker_mount: &str| {
        format!(
            "apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: llm, namespace: ml, annotations: {{kestrel.dev/sim-duration: 1h}}}}
spec:
  replicatedJobs:{}{}
",
            role("leader", 1, "{name: ckpt, mountPath: /ckpt}"),
            role("workers", 2, worker_mount)
        )
    };
    let alike = read(&jobset("{name: ckpt, mountPath: /ckpt}")).unwrap();
    assert!(warnings_of(&alike).is_empty(), "{:?}", warnings_of(&alike));
    let differs = read(&jobset("{name: ckpt, mountPath: /ckpt, readOnly: true}")).unwrap();
    let warnings = warnings_of(&differs);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("JobSet ml/llm")
            && warnings[0].contains("inconsistent volumes")
            && warnings[0]
                .contains("role workers mounts NFS nas:/exports/ckpt at \"/ckpt\" read-only")
            && warnings[0].contains("role leader at \"/ckpt\" read-write"),
        "{warnings:?}"
    );
    let r = run(8, &jobset("{name: ckpt, mountPath: /ckpt, readOnly: true}"));
    assert_eq!(r.pods.completed, 3);
}
