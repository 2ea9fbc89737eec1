//! Queues, labels and priorities of Volcano, KAI and Kueue as their users write them, run
//! in the simulator.

use kestrel_core::Resources;
use kestrel_sim::manifests::load_manifests;
use kestrel_sim::metrics::SimReport;
use kestrel_sim::{simulate, SimCluster, SimConfig, Workload};
use std::path::PathBuf;

/// Two nodes of 8 GPUs.
fn cluster() -> SimCluster {
    let mut cluster = SimCluster::default();
    for i in 0..2 {
        let mut n = kestrel_core::NodeSpec::new(format!("n{i}"), Resources::new(64_000, 1 << 40));
        (n.gpus, n.nics) = kestrel_core::GpuTopology::Flat.devices("H100", 81_559, 8);
        cluster.nodes.push(n);
    }
    cluster
}

fn load(yaml: &str) -> Result<Workload, String> {
    load_manifests(&[(PathBuf::from("w.yaml"), yaml.to_string())]).map_err(|e| e.to_string())
}

fn run(workload: &Workload) -> SimReport {
    simulate(&cluster(), workload, SimConfig::default(), &mut |_, _| {}).unwrap()
}

/// `count` one-GPU pods in `namespace`, arriving at `arrival` and running `duration`, with
/// `labels` and `annotations` (`, key: value` pairs) added.
fn pods(
    prefix: &str,
    namespace: &str,
    count: u32,
    (arrival, duration): (&str, &str),
    labels: &str,
    annotations: &str,
) -> String {
    (0..count)
        .map(|i| {
            format!(
                "apiVersion: v1
kind: Pod
metadata:
  name: {prefix}-{i}
  namespace: {namespace}
  labels: {{{labels}}}
  annotations: {{kestrel.dev/sim-arrival: {arrival}, kestrel.dev/sim-duration: {duration}{annotations}}}
spec:
  containers:
  - name: w
    image: trainer
    resources: {{limits: {{nvidia.com/gpu: 1}}}}
---
"
            )
        })
        .collect()
}

const VOLCANO_QUEUES: &str = "apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec: {weight: 1, deserved: {nvidia.com/gpu: 8}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: batch}
spec: {weight: 1, capability: {nvidia.com/gpu: 12}}
---
";

#[test]
fn a_volcano_queue_holds_its_capability_and_reclaims_what_it_is_owed() {
    // Volcano's annotation names the queue.
    let batch = pods(
        "b",
        "batch",
        16,
        ("0s", "1h"),
        "",
        ", scheduling.volcano.sh/queue-name: batch",
    );
    let alone = load(&format!("{VOLCANO_QUEUES}{batch}")).unwrap();
    assert!(
        alone.queues.warnings.is_empty(),
        "{:?}",
        alone.queues.warnings
    );
    let r = run(&alone);
    // 16 pods of an hour, at most 12 at once: two hours, though 16 GPUs are free.
    assert_eq!((r.pods.completed, r.span), (16, 2 * 3_600_000));
    assert_eq!(r.preemption.victim_pods, 0);

    // Research is owed 8 GPUs: when it comes, it takes back 4 of the 12 batch borrowed.
    let research = pods(
        "r",
        "research",
        8,
        ("10m", "10m"),
        "",
        ", scheduling.volcano.sh/queue-name: research",
    );
    let both = load(&format!("{VOLCANO_QUEUES}{batch}{research}")).unwrap();
    let r = run(&both);
    // The four batch victims are bare Pods: deleted, as Kubernetes does.
    assert_eq!(r.preemption.victim_pods, 4);
    assert_eq!(r.preemption.deleted_pods, 4);
    assert_eq!(r.pods.completed, 20);
    let wait = r
        .by_namespace
        .iter()
        .find(|g| g.group == "research")
        .unwrap()
        .queue_wait
        .max;
    // Each reclaim waits out its victims' 30 s grace; within a few minutes, not the hour
    // batch's pods run.
    assert!(
        wait <= 150.0,
        "research waited {wait} s for what it is owed"
    );
}

#[test]
fn a_volcano_queue_that_is_not_reclaimable_keeps_what_it_borrows() {
    // As above, but batch says `reclaimable: false`: research does not preempt batch's
    // borrowed pods to take its 8 GPUs back.
    let queues = VOLCANO_QUEUES.replace(
        "capability: {nvidia.com/gpu: 12}}",
        "capability: {nvidia.com/gpu: 12}, reclaimable: false}",
    );
    assert_ne!(queues, VOLCANO_QUEUES);
    let batch = pods(
        "b",
        "batch",
        16,
        ("0s", "1h"),
        "",
        ", scheduling.volcano.sh/queue-name: batch",
    );
    let research = pods(
        "r",
        "research",
        8,
        ("10m", "10m"),
        "",
        ", scheduling.volcano.sh/queue-name: research",
    );
    let w = load(&format!("{queues}{batch}{research}")).unwrap();
    assert!(w.queues.warnings.is_empty(), "{:?}", w.queues.warnings);
    let r = run(&w);
    assert_eq!(r.preemption.victim_pods, 0);
    assert_eq!(r.pods.completed, 24);
    let wait = r
        .by_namespace
        .iter()
        .find(|g| g.group == "research")
        .unwrap()
        .queue_wait
        .max;
    // Research runs on the 4 GPUs nobody uses, in two turns of 10 min, instead of taking
    // back the 4 more it is owed (reclaimed, it waited at most 150 s above).
    assert!(wait >= 590.0, "research waited only {wait} s");
}

#[test]
fn a_kai_queue_holds_its_limit_under_its_parent() {
    let yaml = format!(
        "apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: org}}
spec: {{resources: {{gpu: {{quota: 16, limit: -1, overQuotaWeight: 1}}}}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: team-a}}
spec:
  parentQueue: org
  resources:
    gpu: {{quota: 4, limit: 6, overQuotaWeight: 2}}
    cpu: {{quota: -1, limit: -1}}
    memory: {{quota: -1, limit: -1}}
---
{}",
        pods(
            "a",
            "team-a",
            8,
            ("0s", "1h"),
            "kai.scheduler/queue: team-a",
            ""
        )
    );
    let w = load(&yaml).unwrap();
    let leaf = &w.queues.cluster_queues;
    assert_eq!(leaf.len(), 1, "the parent queue is a cohort, not a queue");
    assert_eq!(leaf[0].fair_weight, 2.0);
    assert!(
        w.queues
            .warnings
            .iter()
            .map(ToString::to_string)
            .any(|m| m.starts_with("Queue org: field spec.resources.gpu.quota: 16 nvidia.com/gpu is more than its children are owed together (4 nvidia.com/gpu)")),
        "{:?}",
        w.queues.warnings
    );
    let r = run(&w);
    // At most 6 of the 8 at once.
    assert_eq!((r.pods.completed, r.span), (8, 2 * 3_600_000));
}

/// The most pods running at once in a run.
fn most_running(r: &SimReport) -> u32 {
    r.samples.iter().map(|s| s.pods_running).max().unwrap_or(0)
}

#[test]
fn a_parent_queues_limit_bounds_its_children_together() {
    // KAI: org (limit 5 GPUs, owed nothing beyond its children) over team-a and team-b
    // (quota 2 each, no limit of their own); `other` beside org with nothing owed. 16 GPUs.
    let kai = |parent_limit: i64| {
        format!(
            "apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: org}}
spec: {{resources: {{gpu: {{quota: 0, limit: {parent_limit}}}}}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: team-a}}
spec: {{parentQueue: org, resources: {{gpu: {{quota: 2, limit: -1}}}}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: team-b}}
spec: {{parentQueue: org, resources: {{gpu: {{quota: 2, limit: -1}}}}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: other}}
spec: {{resources: {{gpu: {{quota: 0, limit: -1}}}}}}
---
{}{}{}",
            pods(
                "a",
                "team-a",
                4,
                ("0s", "1h"),
                "kai.scheduler/queue: team-a",
                ""
            ),
            pods(
                "b",
                "team-b",
                4,
                ("0s", "1h"),
                "kai.scheduler/queue: team-b",
                ""
            ),
            pods(
                "o",
                "other",
                8,
                ("0s", "1h"),
                "kai.scheduler/queue: other",
                ""
            ),
        )
    };
    let w = load(&kai(5)).unwrap();
    assert!(w.queues.warnings.is_empty(), "{:?}", w.queues.warnings);
    let r = run(&w);
    // org's children run 5 at once (two turns), `other` its 8 beside them at once.
    assert_eq!((r.pods.completed, r.span), (16, 2 * 3_600_000));
    assert_eq!(most_running(&r), 13);
    // No parent limit: all 16 at once.
    let r = run(&load(&kai(-1)).unwrap());
    assert_eq!((r.span, most_running(&r)), (3_600_000, 16));
    // A limit below what the children are owed is a warning; they keep what they are owed.
    let w = load(&kai(3)).unwrap();
    let said: Vec<String> = w.queues.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        said,
        [
            "Queue org: field spec.resources.gpu.limit: 3 nvidia.com/gpu is less than its \
          children are owed together (4 nvidia.com/gpu), which Volcano and KAI refuse; \
          Kestrel holds them to what they are owed: raise it"
        ]
    );
    assert_eq!(most_running(&run(&w)), 4 + 8);
}

#[test]
fn bad_volcano_and_kai_queues_name_the_object_and_field() {
    let cases = [
        (
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\nspec: {reclaimable: \"no\"}\n",
            &["Queue q", "spec.reclaimable", "write true or false"][..],
        ),
        (
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\nspec: {deserved: {nvidia.com/gpu: 8}, capability: {nvidia.com/gpu: 4}}\n",
            &["Queue q", "spec.capability.nvidia.com/gpu", "raise the capability"],
        ),
        (
            "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: k}\nspec: {resources: {tpu: {quota: 1}}}\n",
            &["Queue k", "spec.resources.tpu", "gpu, cpu or memory"],
        ),
        (
            "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata: {name: k}\nspec: {resources: {gpu: {quota: 4, limit: 2}}}\n",
            &["Queue k", "spec.resources.gpu.limit", "-1 for none"],
        ),
        (
            "apiVersion: scheduling.run.ai/v1\nkind: Queue\nmetadata: {name: k}\n",
            &["Queue k", "apiVersion", "scheduling.run.ai/v2"],
        ),
    ];
    for (yaml, parts) in cases {
        let e = load(yaml).unwrap_err();
        for p in parts {
            assert!(e.contains(p), "{p:?} not in {e}");
        }
    }
}

#[test]
fn fields_kestrel_does_not_read_are_warnings_naming_object_and_field() {
    let w = load(
        "apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  admissionChecks: [prov]
  flavorFungibility: {whenCanBorrow: Borrow, whenCanPreempt: Preempt}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: team}
spec: {clusterQueue: team, fairSharing: {weight: 2}}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: v}
spec: {weight: 1, extendClusters: [{name: other}]}
",
    )
    .unwrap();
    let warnings: Vec<String> = w.queues.warnings.iter().map(ToString::to_string).collect();
    for (object, field) in [
        ("ClusterQueue team", "spec.admissionChecks"),
        ("ClusterQueue team", "spec.flavorFungibility.whenCanPreempt"),
        ("LocalQueue team/main", "spec.fairSharing"),
        ("Queue v", "spec.extendClusters"),
    ] {
        assert!(
            warnings
                .iter()
                .any(|m| m.starts_with("w.yaml: ") && m.contains(object) && m.contains(field)),
            "{object} {field} not in {warnings:?}"
        );
    }
    assert_eq!(warnings.len(), 4, "{warnings:?}");
}

#[test]
fn workload_priority_classes_and_kai_priority_labels_set_the_priority() {
    let classes = "apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 10000
description: deadlines
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: train}
value: 50
---
";
    let w = load(&format!(
        "{classes}{}{}",
        pods(
            "k",
            "t",
            1,
            ("0s", "1m"),
            "kueue.x-k8s.io/priority-class: urgent",
            ""
        ),
        pods("a", "t", 1, ("0s", "1m"), "priorityClassName: train", ""),
    ))
    .unwrap();
    let priority = |name: &str| {
        w.jobs
            .iter()
            .find(|j| j.name == name)
            .map(|j| (j.template.priority, j.template.priority_class.clone()))
            .unwrap()
    };
    assert_eq!(priority("k-0").0, 10000);
    assert_eq!(priority("a-0"), (50, Some("train".to_string())));

    let e = load(&pods(
        "k",
        "t",
        1,
        ("0s", "1m"),
        "kueue.x-k8s.io/priority-class: missing",
        "",
    ))
    .unwrap_err();
    assert!(
        e.contains("Pod t/k-0")
            && e.contains("metadata.labels[\"kueue.x-k8s.io/priority-class\"]")
            && e.contains("no WorkloadPriorityClass \"missing\""),
        "{e}"
    );
    let e = load(&pods(
        "a",
        "t",
        1,
        ("0s", "1m"),
        "priorityClassName: build",
        "",
    ))
    .unwrap_err();
    assert!(
        e.contains("metadata.labels[\"priorityClassName\"]") && e.contains("\"build\""),
        "{e}"
    );
}

#[test]
fn a_volcano_job_gives_its_queue_to_its_pods() {
    let w = load(
        "apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi, namespace: t, annotations: {kestrel.dev/sim-duration: 1h}}
spec:
  minAvailable: 2
  queue: research
  tasks:
  - name: worker
    replicas: 2
    template:
      metadata: {labels: {volcano.sh/task-spec: worker}}
      spec:
        containers:
        - name: w
          image: trainer
          resources: {limits: {nvidia.com/gpu: 1}}
",
    )
    .unwrap();
    assert!(!w.jobs.is_empty());
    for job in &w.jobs {
        assert_eq!(
            job.template.queue.as_deref(),
            Some("research"),
            "{}",
            job.name
        );
    }
}
