use super::*;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kestrel_core::{PreemptionTerms, SelectorOperator, TaintEffect, TolerationOperator};
use kestrel_objects::annotations::DEFAULT_TERMINATION_GRACE;

fn load(files: &[(&str, &str)]) -> Result<Workload, LoadError> {
    let files: Vec<(PathBuf, String)> = files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    load_manifests(&files)
}

fn one(text: &str) -> PodSet {
    let w = load(&[("w.yaml", text)]).unwrap();
    assert_eq!(w.jobs.len(), 1, "{:?}", w.jobs);
    w.jobs.into_iter().next().unwrap()
}

fn err(text: &str) -> String {
    load(&[("w.yaml", text)]).unwrap_err().to_string()
}

fn assert_names(e: &str, parts: &[&str]) {
    assert!(e.starts_with("w.yaml: "), "{e}");
    for p in parts {
        assert!(e.contains(p), "{e:?} lacks {p:?}");
    }
}

const GIB: i64 = 1 << 30;

#[test]
fn pod_maps_resources_constraints_and_annotations() {
    let j = one(r#"
apiVersion: v1
kind: Pod
metadata:
  name: nb-1
  namespace: vision
  labels: {app: notebook}
  annotations:
    kestrel.dev/sim-arrival: "1h30m"
    kestrel.dev/sim-duration: "2h"
    kestrel.dev/sim-gpu-utilization: "0.25"
spec:
  priority: 7
  nodeSelector: {nvidia.com/gpu.product: H100-80GB}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.count, operator: Gt, values: ["3"]}
          - {key: zone, operator: Exists}
          matchFields:
          - {key: metadata.name, operator: NotIn, values: [gpu-9]}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 40
        preference:
          matchExpressions: [{key: topology.kestrel.dev/rack, operator: In, values: [r1, r2]}]
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  - {key: dedicated, value: ml}
  - {operator: Exists}
  containers:
  - name: a
    resources:
      requests: {cpu: 500m, memory: 1Gi, ephemeral-storage: 10Gi, rdma/ib: 1}
      limits: {nvidia.com/gpu: 1}
  - name: b
    resources:
      limits: {cpu: "1.5", memory: 512Mi}
"#);
    assert_eq!(j.kind, JobKind::BarePod);
    assert_eq!(j.source_kind, "Pod");
    assert_eq!((j.namespace.as_str(), j.name.as_str()), ("vision", "nb-1"));
    assert_eq!(j.arrival, 5_400_000);
    assert_eq!(j.duration, Some(7_200_000));
    assert_eq!((j.parallelism, j.completions), (1, 1));
    assert_eq!(j.gpu_utilization, 0.25);
    let t = &j.template;
    assert_eq!((t.namespace.as_str(), t.name.as_str()), ("vision", "nb-1"));
    assert_eq!(t.labels.get("app").unwrap(), "notebook");
    assert_eq!((t.priority, t.priority_class.as_deref()), (7, None));
    let r = &t.demand.resources;
    assert_eq!(r.cpu_milli, 2000, "limits stand in for requests");
    assert_eq!(r.memory_bytes, GIB + GIB / 2);
    assert_eq!(r.ephemeral_storage_bytes, 10 * GIB);
    assert_eq!(r.extended, vec![("rdma/ib".to_string(), 1)]);
    assert_eq!(t.demand.gpu, GpuRequest::Whole(1));
    let c = &t.constraints;
    assert_eq!(
        c.node_selector.get("nvidia.com/gpu.product").unwrap(),
        "H100-80GB"
    );
    let req = c.affinity.required.as_ref().unwrap();
    assert_eq!(req.len(), 1);
    assert_eq!(req[0].match_expressions.len(), 2);
    assert_eq!(req[0].match_expressions[0].operator, SelectorOperator::Gt);
    assert_eq!(req[0].match_expressions[0].values, vec!["3"]);
    assert_eq!(req[0].match_fields[0].key, "metadata.name");
    assert_eq!(c.affinity.preferred.len(), 1);
    assert_eq!(c.affinity.preferred[0].0, 40);
    assert_eq!(
        c.affinity.preferred[0].1.match_expressions[0].values,
        vec!["r1", "r2"]
    );
    assert_eq!(c.tolerations.len(), 3);
    assert_eq!(c.tolerations[0].operator, TolerationOperator::Exists);
    assert_eq!(c.tolerations[0].effect, Some(TaintEffect::NoSchedule));
    assert_eq!(
        c.tolerations[1].operator,
        TolerationOperator::Equal,
        "default operator"
    );
    assert_eq!(
        (c.tolerations[1].value.as_str(), c.tolerations[1].effect),
        ("ml", None)
    );
    assert!(c.tolerations[2].key.is_empty());
    assert!(c.runtime_class.is_none());
}

#[test]
fn init_containers_take_the_max_and_sidecars_add_up() {
    let j = one(r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers:
  - {name: fetch, resources: {requests: {cpu: "4", memory: 1Gi}}}
  - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 250m, memory: 3Gi}}}
  - {name: warm, resources: {requests: {cpu: "1", memory: 6Gi}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 2Gi}}}
  - {name: b, resources: {requests: {cpu: "1", memory: 1Gi}}}
"#);
    let r = &j.template.demand.resources;
    // cpu: max(sum 1+1+0.25 = 2.25, fetch 4, proxy 0.25, warm 1+0.25) = 4
    assert_eq!(r.cpu_milli, 4000);
    // memory: max(sum 2+1+3 = 6, fetch 1, proxy 3, warm 6+3 = 9) = 9Gi
    assert_eq!(r.memory_bytes, 9 * GIB);
    assert_eq!(j.template.demand.gpu, GpuRequest::None);
    assert_eq!(j.gpu_utilization, 0.0);
    assert_eq!(j.duration, None);
    assert_eq!(j.arrival, 0);
    assert_eq!(j.namespace, "default");
}

#[test]
fn pod_level_resources_replace_the_container_sum() {
    let j = one(r#"
kind: Pod
apiVersion: v1
metadata: {name: p}
spec:
  resources: {requests: {cpu: "8"}}
  containers: [{name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#);
    assert_eq!(j.template.demand.resources.cpu_milli, 8000);
    assert_eq!(j.template.demand.resources.memory_bytes, GIB);
}

const CLASSES: &str = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: training}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch-low}
value: 100
globalDefault: true
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
overhead: {podFixed: {cpu: 250m, memory: 120Mi}}
scheduling:
  nodeSelector: {nvidia.com/gpu.present: "true"}
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
"#;

#[test]
fn job_expands_with_classes_defined_in_a_later_file() {
    let w = load(&[
            (
                "a.yaml",
                r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: llm
  annotations: {kestrel.dev/sim-duration: 6h}
spec:
  parallelism: 4
  completions: 8
  template:
    metadata:
      labels: {job: train}
      annotations: {kestrel.dev/sim-arrival: "02:00", kestrel.dev/sim-duration: 1h}
    spec:
      priorityClassName: training
      runtimeClassName: nvidia
      containers: [{name: w, resources: {limits: {nvidia.com/gpu: 8}, requests: {cpu: "32", memory: 256Gi}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: queue, annotations: {kestrel.dev/sim-duration: 10m}}
spec:
  parallelism: 3
  template:
    spec:
      containers: [{name: w, resources: {requests: {cpu: "1"}}}]
"#,
            ),
            ("b.yaml", CLASSES),
        ])
        .unwrap();
    assert_eq!(w.jobs.len(), 2);
    let j = &w.jobs[0];
    assert_eq!((j.kind, j.source_kind.as_str()), (JobKind::Job, "Job"));
    assert_eq!((j.parallelism, j.completions), (4, 8));
    assert_eq!(
        j.arrival, 7_200_000,
        "falls back to the template's annotation"
    );
    assert_eq!(
        j.duration,
        Some(6 * 3_600_000),
        "the object's annotation wins"
    );
    assert_eq!(j.gpu_utilization, 1.0, "GPU pods default to busy");
    let t = &j.template;
    assert_eq!(t.name, "train");
    assert_eq!(t.labels.get("job").unwrap(), "train");
    assert_eq!(
        (t.priority, t.priority_class.as_deref()),
        (1000, Some("training"))
    );
    assert_eq!(t.demand.gpu, GpuRequest::Whole(8));
    assert_eq!(
        t.demand.resources.cpu_milli, 32_250,
        "RuntimeClass overhead added"
    );
    assert_eq!(t.demand.resources.memory_bytes, 256 * GIB + (120 << 20));
    let rc = t.constraints.runtime_class.as_ref().unwrap();
    assert_eq!(rc.name, "nvidia");
    assert_eq!(
        rc.node_selector.get("nvidia.com/gpu.present").unwrap(),
        "true"
    );
    assert_eq!(rc.tolerations[0].key, "nvidia.com/gpu");
    assert_eq!(rc.tolerations[0].operator, TolerationOperator::Exists);

    let q = &w.jobs[1];
    assert_eq!(
        (q.parallelism, q.completions),
        (3, 3),
        "work queue: completions = parallelism"
    );
    assert_eq!(q.namespace, "default");
    assert_eq!(
        (q.template.priority, q.template.priority_class.as_deref()),
        (100, Some("batch-low")),
        "global default"
    );
}

#[test]
fn deployments_statefulsets_and_lists_become_services() {
    let w = load(&[(
        "w.yaml",
        r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: chat, namespace: platform, annotations: {kestrel.dev/sim-gpu-utilization: "0.5"}}
  spec:
    replicas: 3
    selector: {matchLabels: {app: chat}}
    template:
      metadata: {labels: {app: chat}}
      spec:
        priorityClassName: system-cluster-critical
        containers: [{name: s, resources: {limits: {nvidia.com/gpu: 1}}}]
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: db, namespace: platform}
  spec:
    selector: {matchLabels: {app: db}}
    serviceName: db
    template:
      metadata: {labels: {app: db}, annotations: {kestrel.dev/gpu-milli: "250"}}
      spec:
        containers: [{name: s, resources: {requests: {cpu: "2", memory: 8Gi}}}]
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: idle}
  spec:
    replicas: 0
    selector: {matchLabels: {app: idle}}
    template: {spec: {containers: [{name: s}]}}
---
apiVersion: v1
kind: Namespace
metadata: {name: platform}
"#,
    )])
    .unwrap();
    assert_eq!(w.jobs.len(), 2, "zero replicas create no pods");
    let d = &w.jobs[0];
    assert_eq!(
        (d.kind, d.source_kind.as_str()),
        (JobKind::Service, "Deployment")
    );
    assert_eq!((d.parallelism, d.completions), (3, 3));
    assert_eq!(d.duration, None);
    assert_eq!(d.gpu_utilization, 0.5);
    assert_eq!(d.template.priority, 2_000_000_000);
    assert_eq!(d.template.labels.get("app").unwrap(), "chat");
    let s = &w.jobs[1];
    assert_eq!(
        (s.kind, s.source_kind.as_str()),
        (JobKind::Service, "StatefulSet")
    );
    assert_eq!(
        (s.parallelism, s.completions),
        (1, 1),
        "replicas default to 1"
    );
    assert_eq!(s.template.demand.gpu, GpuRequest::Shared { milli: 250 });
    assert_eq!(s.gpu_utilization, 1.0);
    assert_eq!(s.template.priority, 0);
}

#[test]
fn gpu_milli_annotation() {
    let pod = |milli: &str, gpu: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{kestrel.dev/gpu-milli: \"{milli}\"}}}}\nspec:\n  containers: [{{name: a, resources: {{limits: {{{gpu}}}}}}}]\n")
    };
    assert_eq!(
        one(&pod("500", "")).template.demand.gpu,
        GpuRequest::Shared { milli: 500 }
    );
    assert_eq!(
        one(&pod("1000", "")).template.demand.gpu,
        GpuRequest::Whole(1)
    );
    for bad in ["0", "1001", "half"] {
        assert_names(
            &err(&pod(bad, "")),
            &[
                "Pod default/p",
                "metadata.annotations[\"kestrel.dev/gpu-milli\"]",
                bad,
                "1 to 1000",
            ],
        );
    }
    assert_names(
        &err(&pod("500", "nvidia.com/gpu: 1")),
        &["Pod default/p", "kestrel.dev/gpu-milli", "not both"],
    );
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 500m}}}]}\n");
    assert_names(
        &e,
        &[
            "Pod default/p",
            "spec.containers[0].resources.limits.nvidia.com/gpu",
            "whole",
            "kestrel.dev/gpu-milli",
        ],
    );
}

/// A pod with the given annotations (`k: "v"` pairs) and container limits.
fn annotated_pod(annotations: &str, limits: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{{annotations}}}}}\nspec:\n  containers: [{{name: a, resources: {{limits: {{{limits}}}}}}}]\n")
}

#[test]
fn kai_gpu_fraction_is_a_share_of_one_gpu() {
    let gpu = |a: &str| one(&annotated_pod(a, "cpu: 1")).template.demand.gpu;
    assert_eq!(
        gpu("gpu-fraction: \"0.5\""),
        GpuRequest::Shared { milli: 500 }
    );
    assert_eq!(
        gpu("gpu-fraction: \"0.3333\""),
        GpuRequest::Shared { milli: 333 },
        "rounded to thousandths"
    );
    assert_eq!(gpu("gpu-fraction: \"1\""), GpuRequest::Whole(1));
    assert_eq!(
        gpu("gpu-fraction: \"0.25\", kestrel.dev/gpu-milli: \"250\""),
        GpuRequest::Shared { milli: 250 },
        "both annotations may be set when they agree"
    );
    for bad in ["0", "1.5", "-0.5", "half", "NaN", "0.0001"] {
        assert_names(
            &err(&annotated_pod(&format!("gpu-fraction: \"{bad}\""), "")),
            &[
                "Pod default/p",
                "metadata.annotations[\"gpu-fraction\"]",
                bad,
                "above 0 and at most 1",
                "\"0.5\"",
            ],
        );
    }
    assert_names(
        &err(&annotated_pod("gpu-fraction: \"0.5\"", "nvidia.com/gpu: 1")),
        &[
            "Pod default/p",
            "gpu-fraction",
            "requests 1 nvidia.com/gpu",
            "not both",
        ],
    );
    assert_names(
        &err(&annotated_pod(
            "gpu-fraction: \"0.5\", kestrel.dev/gpu-milli: \"250\"",
            "",
        )),
        &[
            "Pod default/p",
            "metadata.annotations[\"gpu-fraction\"]",
            "500",
            "250",
            "keep one",
        ],
    );
}

#[test]
fn kai_gpu_memory_is_a_share_of_one_gpu_by_memory() {
    let gpu = |a: &str| one(&annotated_pod(a, "cpu: 1")).template.demand.gpu;
    assert_eq!(
        gpu("gpu-memory: \"10240\""),
        GpuRequest::Memory { mib: 10240 }
    );
    assert_eq!(
        gpu("gpu-memory: \" 81920 \""),
        GpuRequest::Memory { mib: 81920 }
    );
    for bad in ["0", "-1024", "10Gi", "1.5", "half", ""] {
        assert_names(
            &err(&annotated_pod(&format!("gpu-memory: \"{bad}\""), "")),
            &[
                "Pod default/p",
                "metadata.annotations[\"gpu-memory\"]",
                &format!("{bad:?}"),
                "whole number of MiB above 0",
                "\"20480\"",
            ],
        );
    }
    assert_names(
        &err(&annotated_pod("gpu-memory: \"10240\"", "nvidia.com/gpu: 2")),
        &[
            "Pod default/p",
            "metadata.annotations[\"gpu-memory\"]",
            "requests 2 nvidia.com/gpu",
            "not both",
        ],
    );
    for (other, value) in [("gpu-fraction", "0.5"), ("kestrel.dev/gpu-milli", "500")] {
        assert_names(
            &err(&annotated_pod(
                &format!("gpu-memory: \"10240\", {other}: \"{value}\""),
                "",
            )),
            &[
                "Pod default/p",
                "metadata.annotations[\"gpu-memory\"]",
                &format!("metadata.annotations[\"{other}\"]"),
                "not both",
                "keep one",
            ],
        );
    }
}

#[test]
fn numa_policy_annotation() {
    let aligned = |a: &str| {
        one(&annotated_pod(a, "nvidia.com/gpu: 2"))
            .template
            .constraints
            .single_numa_node
    };
    assert!(aligned("kestrel.dev/numa-policy: single-numa-node"));
    assert!(!aligned("kestrel.dev/numa-policy: best-effort"));
    assert!(!aligned("kestrel.dev/numa-policy: none"));
    assert!(!aligned(""));
    for bad in ["restricted", "single"] {
        assert_names(
            &err(&annotated_pod(
                &format!("kestrel.dev/numa-policy: {bad}"),
                "",
            )),
            &[
                "Pod default/p",
                "metadata.annotations[\"kestrel.dev/numa-policy\"]",
                bad,
                "\"single-numa-node\"",
            ],
        );
    }
}

#[test]
fn mig_profiles_are_plain_extended_resources() {
    let j = one(&annotated_pod("", "nvidia.com/mig-1g.10gb: 1"));
    assert_eq!(j.template.demand.gpu, GpuRequest::None);
    assert_eq!(
        j.template
            .demand
            .resources
            .extended("nvidia.com/mig-1g.10gb"),
        1
    );
    assert_names(
        &err(&annotated_pod("", "nvidia.com/mig-1g.10gb: 500m")),
        &["Pod default/p", "nvidia.com/mig-1g.10gb", "whole"],
    );
}

fn pod_spec(spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns}}\nspec:\n{spec}\n  containers: [{{name: a}}]\n")
}

#[test]
fn constraint_errors_name_the_field() {
    let e = err(&pod_spec("  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: a, operator: Within, values: [x]}]}]}}}"));
    assert_names(&e, &[
            "Pod ns/p",
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
            "Within",
            "DoesNotExist",
        ]);
    let e = err(&pod_spec("  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: a, operator: Gt, values: [x]}]}]}}}"));
    assert_names(&e, &["Pod ns/p", "matchExpressions[0].values", "integer"]);
    let e = err(&pod_spec("  affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, preference: {}}]}}"));
    assert_names(
        &e,
        &[
            "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
            "1 to 100",
        ],
    );
    let e = err(&pod_spec("  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchFields: [{key: metadata.labels, operator: In, values: [x]}]}]}}}"));
    assert_names(
        &e,
        &["nodeSelectorTerms[0].matchFields[0]", "metadata.name"],
    );
    let e = err(&pod_spec("  tolerations: [{key: a, operator: Equals}]"));
    assert_names(&e, &["Pod ns/p", "spec.tolerations[0].operator", "Equals"]);
    let e = err(&pod_spec("  tolerations: [{key: a, effect: NoScheduling}]"));
    assert_names(&e, &["spec.tolerations[0].effect", "NoScheduling"]);
    let e = err(&pod_spec("  tolerations: [{value: x}]"));
    assert_names(&e, &["spec.tolerations[0].key", "Exists"]);
    let e = err(&pod_spec("  priorityClassName: urgent"));
    assert_names(
        &e,
        &[
            "Pod ns/p",
            "spec.priorityClassName",
            "\"urgent\"",
            "system-node-critical",
        ],
    );
    let e = err(&pod_spec("  runtimeClassName: kata"));
    assert_names(&e, &["Pod ns/p", "spec.runtimeClassName", "\"kata\""]);
}

#[test]
fn object_errors_name_file_object_and_field() {
    let e = err("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\nspec: {template: {spec: {containers: [{name: a}]}}}\n");
    assert_names(
        &e,
        &[
            "Job ml/j",
            "metadata.annotations[\"kestrel.dev/sim-duration\"]",
            "add the annotation",
        ],
    );
    let e = err("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\n");
    assert_names(&e, &["CronJob default/c", "field spec", "spec.schedule"]);
    let e = err("apiVersion: batch/v2\nkind: SparkApplication\nmetadata: {name: c}\n");
    assert_names(
        &e,
        &[
            "SparkApplication default/c",
            "field kind",
            "Pod, Job, CronJob, Deployment, StatefulSet",
        ],
    );
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {kestrel.dev/sim-arrival: soon}}\nspec: {containers: [{name: a}]}\n");
    assert_names(
        &e,
        &[
            "Pod default/p",
            "metadata.annotations[\"kestrel.dev/sim-arrival\"]",
            "\"soon\"",
        ],
    );
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {kestrel.dev/sim-gpu-utilization: \"1.5\"}}\nspec: {containers: [{name: a}]}\n");
    assert_names(&e, &["kestrel.dev/sim-gpu-utilization", "0 to 1"]);
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {memory: 1Gx}}}]}\n");
    assert_names(
        &e,
        &[
            "Pod default/p",
            "spec.containers[0].resources.requests.memory",
            "\"1Gx\"",
        ],
    );
    let e = err("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {selector: {}, template: {spec: {initContainers: [{name: i, resources: {limits: {cpu: x}}}], containers: [{name: a}]}}}\n");
    assert_names(
        &e,
        &[
            "Deployment default/d",
            "spec.template.spec.initContainers[0].resources.limits.cpu",
        ],
    );
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n");
    assert_names(&e, &["Pod default/p", "spec.containers", "one or more"]);
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: [1]}}}]}\n");
    assert_names(&e, &["Pod default/p", "schema"]);
    let e = err("apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d}\n");
    assert_names(&e, &["Deployment default/d", "field apiVersion", "apps/v1"]);
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}\n");
    assert_names(
        &e,
        &["Pod default/p", "already defined in w.yaml document 1"],
    );
    let e = err("apiVersion: v1\nmetadata: {name: p}\n");
    assert_names(&e, &["document 1", "field kind"]);
    let e = err("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, metadata: {name: x}}\n");
    assert_names(&e, &["document 1 items[0]", "field kind"]);
    let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: \"-1\"}}}]}\n");
    assert_names(
        &e,
        &["spec.containers[0].resources.requests.cpu", "negative"],
    );
}

#[test]
fn class_errors() {
    let pc = |name: &str, value: i32, global: bool| {
        format!("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\nglobalDefault: {global}\n---\n")
    };
    let e = err(&format!("{}{}", pc("a", 1, true), pc("b", 2, true)));
    assert_names(&e, &["PriorityClass b", "field globalDefault", "\"a\""]);
    let e = err(&format!("{}{}", pc("a", 1, false), pc("a", 2, false)));
    assert_names(
        &e,
        &["PriorityClass a", "metadata.name", "w.yaml document 1"],
    );
    let e = err(&pc("system-node-critical", 5, false));
    assert_names(&e, &["PriorityClass system-node-critical", "reserved"]);
    let e = err("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: r}\nhandler: r\noverhead: {podFixed: {memory: lots}}\n");
    assert_names(
        &e,
        &["RuntimeClass r", "overhead.podFixed.memory", "\"lots\""],
    );
    let e = err("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: r}\nhandler: r\nscheduling: {tolerations: [{key: a, operator: Maybe}]}\n");
    assert_names(
        &e,
        &["RuntimeClass r", "scheduling.tolerations[0].operator"],
    );
}

#[test]
fn generated_names_and_spec_overhead() {
    let w = load(&[(
            "w.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {generateName: sweep-}\nspec: {overhead: {cpu: 100m}, containers: [{name: a, resources: {requests: {cpu: 1}}}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {generateName: sweep-}\nspec: {containers: [{name: a}]}\n",
        )])
        .unwrap();
    let names: Vec<&str> = w.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["sweep-0", "sweep-1"]);
    assert_eq!(w.jobs[0].template.demand.resources.cpu_milli, 1100);
}

const QUEUED: &str = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: sweep}
value: 10
preemptionPolicy: Never
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: team}
  annotations:
    kestrel.dev/sim-duration: 2h
    kestrel.dev/min-runtime: 30m
    kestrel.dev/checkpoint-interval: 1h
    kestrel.dev/runtime-estimate: "2h"
spec:
  template:
    metadata:
      annotations: {kestrel.dev/checkpoint-grace: 90s}
    spec:
      terminationGracePeriodSeconds: 120
      containers: [{name: a}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: sweep
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: team}
  annotations: {kestrel.dev/sim-duration: 1h}
spec:
  template:
    metadata:
      labels: {kestrel.dev/queue: mine}
    spec:
      priorityClassName: sweep
      containers: [{name: a}]
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  preemptionPolicy: Never
  containers: [{name: a}]
"#;

#[test]
fn queue_labels_and_preemption_terms() {
    let w = load(&[("w.yaml", QUEUED)]).unwrap();
    let [train, sweep, p] = &w.jobs[..] else {
        panic!("{:?}", w.jobs)
    };
    let t = &train.template;
    assert_eq!(t.queue.as_deref(), Some("team"), "the Job's Kueue label");
    assert_eq!(
        t.preemption,
        PreemptionTerms {
            never_preempt: false,
            min_runtime: Some(1_800_000),
            checkpoint_interval: Some(3_600_000),
            checkpoint_grace: Some(90_000),
            termination_grace: 120_000,
            runtime_estimate: Some(7_200_000),
        }
    );
    let s = &sweep.template;
    assert_eq!(s.queue.as_deref(), Some("mine"), "Kestrel's label wins");
    assert!(
        s.preemption.never_preempt,
        "PriorityClass preemptionPolicy: Never"
    );
    assert_eq!(s.preemption.termination_grace, DEFAULT_TERMINATION_GRACE);
    assert_eq!(s.preemption.checkpoint_interval, None);
    let p = &p.template;
    assert_eq!(p.queue, None);
    assert!(p.preemption.never_preempt, "the pod's own preemptionPolicy");
}

#[test]
fn bad_preemption_inputs_name_the_field() {
    let e = err(&QUEUED.replace("checkpoint-interval: 1h", "checkpoint-interval: hourly"));
    assert_names(
        &e,
        &[
            "Job ml/train",
            "metadata.annotations[\"kestrel.dev/checkpoint-interval\"]",
            "\"hourly\"",
        ],
    );
    let e = err(&QUEUED.replace("checkpoint-interval: 1h", "checkpoint-interval: 0s"));
    assert_names(&e, &["kestrel.dev/checkpoint-interval", "zero"]);
    let e = err(&QUEUED.replace("checkpoint-grace: 90s", "checkpoint-grace: 1x"));
    assert_names(
        &e,
        &[
            "spec.template.metadata.annotations[\"kestrel.dev/checkpoint-grace\"]",
            "\"1x\"",
        ],
    );
    let e = err(&QUEUED.replace("min-runtime: 30m", "min-runtime: long"));
    assert_names(&e, &["kestrel.dev/min-runtime", "\"long\""]);
    let e = err(&QUEUED.replace("runtime-estimate: \"2h\"", "runtime-estimate: \"-2h\""));
    assert_names(&e, &["kestrel.dev/runtime-estimate"]);
    let e = err(&QUEUED.replace(
        "preemptionPolicy: Never\n---",
        "preemptionPolicy: Sometimes\n---",
    ));
    assert_names(
        &e,
        &[
            "PriorityClass sweep",
            "field preemptionPolicy",
            "\"Sometimes\"",
            "PreemptLowerPriority or Never",
        ],
    );
    let e = err(&QUEUED.replace(
        "  preemptionPolicy: Never\n  containers",
        "  preemptionPolicy: Nope\n  containers",
    ));
    assert_names(
        &e,
        &["Pod default/p", "field spec.preemptionPolicy", "\"Nope\""],
    );
    let e = err(&QUEUED.replace(
        "terminationGracePeriodSeconds: 120",
        "terminationGracePeriodSeconds: -1",
    ));
    assert_names(
        &e,
        &[
            "spec.template.spec.terminationGracePeriodSeconds",
            "negative",
        ],
    );
}

#[test]
fn queue_kinds_go_to_the_queue_setup() {
    let w = load(&[(
            "w.yaml",
            r#"
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]}]
---
apiVersion: v1
kind: List
items:
- {apiVersion: kueue.x-k8s.io/v1beta1, kind: LocalQueue, metadata: {name: team, namespace: ml}, spec: {clusterQueue: team}}
- {apiVersion: kueue.x-k8s.io/v1beta1, kind: ResourceFlavor, metadata: {name: h100}}
- {apiVersion: kueue.x-k8s.io/v1alpha1, kind: Cohort, metadata: {name: org}}
- {apiVersion: v1, kind: Namespace, metadata: {name: ml, labels: {team: ml}}}
- {apiVersion: v1, kind: ResourceQuota, metadata: {name: q, namespace: ml}, spec: {hard: {requests.nvidia.com/gpu: "2"}}}
"#,
        )])
        .unwrap();
    assert!(w.jobs.is_empty());
    let q = &w.queues;
    assert_eq!(
        q.cluster_queues[0].resource_groups[0].flavors[0].resources[0].nominal,
        8000
    );
    assert_eq!(q.local_queues[0].namespace, "ml");
    assert_eq!(q.flavors[0].name, "h100");
    assert_eq!(q.cohorts[0].name, "org");
    assert_eq!(
        q.namespaces,
        vec![(
            "ml".to_string(),
            [("team".to_string(), "ml".to_string())]
                .into_iter()
                .collect()
        )]
    );
    let limits: Vec<_> = q.resource_quotas[0].limits().collect();
    assert_eq!(limits, [("requests.nvidia.com/gpu", 2, 0)]);
    let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: team}\nspec: {queueingStrategy: FIFO}\n");
    assert_names(
        &e,
        &["ClusterQueue team", "spec.queueingStrategy", "StrictFIFO"],
    );
    let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\n");
    assert_names(
        &e,
        &[
            "Workload default/w",
            "field kind",
            "ClusterQueue, LocalQueue",
        ],
    );
}

#[test]
fn limit_ranges_fill_missing_container_requests() {
    let w = load(&[(
        "w.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  initContainers: [{name: init}]
  containers:
  - {name: a}
  - {name: b, resources: {limits: {cpu: "2"}, requests: {memory: 256Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: other}
spec: {containers: [{name: a}]}
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: ml}
spec:
  limits:
  - {type: Container, defaultRequest: {cpu: 500m}, default: {cpu: "1", memory: 512Mi, rdma/ib: "1"}}
"#,
    )])
    .unwrap();
    let r = &w.jobs[0].template.demand.resources;
    // a: 500m + 512Mi + 1 rdma/ib; b: its limit 2 cpu, its 256Mi, 1 rdma/ib; the init
    // container's defaults are less than the sum.
    assert_eq!(r.cpu_milli, 2500);
    assert_eq!(r.memory_bytes, 768 << 20);
    assert_eq!(r.extended, vec![("rdma/ib".to_string(), 2)]);
    let other = &w.jobs[1].template.demand.resources;
    assert_eq!(
        (other.cpu_milli, other.memory_bytes),
        (0, 0),
        "other namespaces keep none"
    );
}

#[test]
fn live_pods_get_queue_and_preemption_terms_the_same_way() {
    let pc: PriorityClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "sweep"}, "value": 10, "preemptionPolicy": "Never"
    }))
    .unwrap();
    let (catalog, errors) = Catalog::live(
        Path::new("cluster"),
        [&pc],
        [],
        kestrel_objects::pods::WorkloadPriorityListing::NotServed,
    );
    assert!(errors.is_empty(), "{errors:?}");
    let pod: core::Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ml",
                "labels": {"kueue.x-k8s.io/queue-name": "team"},
                "annotations": {"kestrel.dev/checkpoint-interval": "45m", "kestrel.dev/min-runtime": "10m",
                    "gpu-fraction": "0.25"}
            },
            "spec": {"priority": 10, "priorityClassName": "sweep", "containers": [{"name": "a"}]}
        }))
        .unwrap();
    let spec = catalog.pod_from_kube(Path::new("cluster"), &pod).unwrap();
    assert_eq!(spec.queue.as_deref(), Some("team"));
    assert!(spec.preemption.never_preempt);
    assert_eq!(spec.preemption.checkpoint_interval, Some(2_700_000));
    assert_eq!(spec.preemption.min_runtime, Some(600_000));
    assert_eq!(spec.preemption.termination_grace, 30_000);
    assert_eq!(spec.demand.gpu, GpuRequest::Shared { milli: 250 });
    let bad: PriorityClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "odd"}, "value": 1, "preemptionPolicy": "Maybe"
    }))
    .unwrap();
    let (_, errors) = Catalog::live(
        Path::new("cluster"),
        [&bad],
        [],
        kestrel_objects::pods::WorkloadPriorityListing::NotServed,
    );
    assert!(
        errors[0].to_string().contains("preemptionPolicy"),
        "{errors:?}"
    );
}
