//! The compatibility set (`tests/compat/`) on the real control plane: each case's objects
//! applied as written, their controllers played by the test (Kestrel does not run them),
//! and the outcome its header states checked on what the API server holds, as
//! `crates/kestrel-sim/tests/compat.rs` checks it in the simulator.
//!
//! - Time runs 1200 times faster: an hour of `kestrel.dev/sim-duration` is 3 s.
//! - `completed` pods must succeed; `most_running` is the most pods bound and not yet
//!   finished at once (sampled); `scheduled=0` with `pending_at_end`: none binds.
//! - Kueue's queue kinds (`kueue.x-k8s.io`) are applied in Kestrel's group, which
//!   `kestrel serve` reads (where Kueue is installed it admits them itself), without the
//!   fields the header expects warnings for: Kestrel's own kinds refuse those. Warnings
//!   about other projects' queue objects must be in Kestrel's log.
//! - The controllers: batch Jobs keep `min(parallelism, completions left)` pods and write
//!   `status.succeeded`; a JobSet gets one Job per replica; a PyTorchJob one pod per
//!   replica (the training operator's labels); a Volcano Job a PodGroup and its pods; a
//!   LeaderWorkerSet each group's leader and workers (its controller's labels and size); a
//!   TrainJob its runtime's JobSet, sized by its trainer (Trainer's controller); an MPIJob
//!   a scheduler-plugins PodGroup and its launcher's and workers' pods (the MPI Operator
//!   with gang scheduling).
//!   kube-controller-manager's resourceclaim controller runs for real: it makes the
//!   claims of pods from templates and releases those of ended pods.
//! - Pools that publish their GPUs through DRA get ResourceSlices as NVIDIA's driver
//!   writes them, and no `nvidia.com/gpu`.
//! - A case whose header expects an error is the simulator's reader refusing a file;
//!   it has nothing to run live.

// The serial lock is held across awaits on purpose: one test at a time on the control plane.
#![allow(clippy::await_holding_lock)]

#[path = "../../kestrel-sim/tests/compat_header/mod.rs"]
mod compat_header;
mod live;

use compat_header::expected;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kestrel_objects::documents::read_documents;
use kestrel_objects::duration::parse_duration;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use live::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Simulated milliseconds per real millisecond.
const SPEED_UP: u64 = 1200;
const DURATION: &str = "kestrel.dev/sim-duration";
const KESTREL_API: &str = "scheduling.kestrel.dev/v1alpha1";

fn compat_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/compat")
}

/// A duration annotation's value, `speed_up` times shorter.
fn faster(value: &str) -> String {
    let ms = parse_duration(value).unwrap_or_else(|e| panic!("duration {value:?}: {e}"));
    format!("{}ms", (ms / SPEED_UP).max(1))
}

/// The cluster of `tests/compat/cluster.yaml`, named after `prefix`: its nodes, and the
/// ResourceSlices of the pools whose GPUs are published through DRA (`publish: dra`; such
/// nodes have no `nvidia.com/gpu`), with their MIG partitions for `partitions: mig`.
fn compat_nodes(prefix: &str) -> (Vec<Node>, Vec<Value>) {
    let text = std::fs::read_to_string(compat_dir().join("cluster.yaml")).unwrap();
    let cluster = read_documents(Path::new("cluster.yaml"), &text, None).unwrap()[0]
        .value
        .clone();
    let (mut nodes, mut slices) = (Vec::new(), Vec::new());
    for pool in cluster["spec"]["pools"].as_array().expect("pools") {
        let name = pool["name"].as_str().unwrap();
        let gpus = pool["gpu"]["count"].as_u64().unwrap_or(0) as u32;
        let dra = pool["gpu"]["publish"] == "dra";
        let mig = pool["gpu"]["partitions"] == "mig";
        let labels: Vec<(String, String)> = pool["labels"]
            .as_object()
            .map(|l| {
                l.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        for i in 0..pool["count"].as_u64().unwrap_or(1) {
            let node_name = format!("{prefix}{name}-{i}");
            let device_plugin_gpus = if dra { 0 } else { gpus };
            let mut node = kestrel_testenv::gpu_node(&node_name, device_plugin_gpus, &labels);
            if mig {
                let product = pool["gpu"]["model"].as_str().unwrap_or_default();
                slices.extend(kestrel_objects::mig::nvidia_mig_slices(
                    &node_name, gpus, product,
                ));
            } else if dra {
                slices.push(kestrel_testenv::nodes::nvidia_gpu_slice(&node_name, gpus));
            }
            if let Some(taints) = pool.get("taints") {
                node.spec.get_or_insert_with(Default::default).taints =
                    Some(serde_json::from_value(taints.clone()).unwrap());
            }
            nodes.push(node);
        }
    }
    (nodes, slices)
}

/// Kueue's CRDs (every served version), Volcano's, KAI's, Kubeflow's and JobSet's, as
/// schemaless CRDs: the kinds the compatibility set writes.
fn other_projects_crds() -> String {
    let crd = |kind: &str, plural: &str, group: &str, scope: &str, versions: &[&str]| {
        let versions: Vec<Value> = versions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                json!({"name": v, "served": true, "storage": i == 0,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}})
            })
            .collect();
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": scope, "versions": versions,
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                    "listKind": format!("{kind}List")}}})
        .to_string()
    };
    [
        crd(
            "WorkloadPriorityClass",
            "workloadpriorityclasses",
            "kueue.x-k8s.io",
            "Cluster",
            &["v1beta1", "v1beta2"],
        ),
        crd(
            "Queue",
            "queues",
            "scheduling.volcano.sh",
            "Cluster",
            &["v1beta1"],
        ),
        crd(
            "PodGroup",
            "podgroups",
            "scheduling.volcano.sh",
            "Namespaced",
            &["v1beta1"],
        ),
        crd("Queue", "queues", "scheduling.run.ai", "Cluster", &["v2"]),
        crd(
            "PodGroup",
            "podgroups",
            "scheduling.x-k8s.io",
            "Namespaced",
            &["v1alpha1"],
        ),
        crd(
            "PyTorchJob",
            "pytorchjobs",
            "kubeflow.org",
            "Namespaced",
            &["v1"],
        ),
        crd(
            "JobSet",
            "jobsets",
            "jobset.x-k8s.io",
            "Namespaced",
            &["v1alpha2"],
        ),
        crd(
            "Job",
            "jobs",
            "batch.volcano.sh",
            "Namespaced",
            &["v1alpha1"],
        ),
        crd(
            "LeaderWorkerSet",
            "leaderworkersets",
            "leaderworkerset.x-k8s.io",
            "Namespaced",
            &["v1"],
        ),
        crd(
            "MPIJob",
            "mpijobs",
            "kubeflow.org",
            "Namespaced",
            &["v2beta1"],
        ),
        crd(
            "TrainJob",
            "trainjobs",
            "trainer.kubeflow.org",
            "Namespaced",
            &["v1alpha1"],
        ),
        crd(
            "TrainingRuntime",
            "trainingruntimes",
            "trainer.kubeflow.org",
            "Namespaced",
            &["v1alpha1"],
        ),
        crd(
            "ClusterTrainingRuntime",
            "clustertrainingruntimes",
            "trainer.kubeflow.org",
            "Cluster",
            &["v1alpha1"],
        ),
    ]
    .join("\n---\n")
}

/// An object's (namespace, name).
fn key(o: &Value) -> (String, String) {
    (
        o["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

fn owner_ref(o: &Value) -> Value {
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
        "uid": o["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true})
}

/// A pod from a pod template as a controller makes it: its name, namespace, labels and
/// annotations added, for `scheduler`, owned by `owner`; its template's duration sped up,
/// or `duration` (sped up already) when the template has none.
fn pod_from_template(
    template: &Value,
    name: &str,
    namespace: &str,
    scheduler: &str,
    extra: (&Value, &Value),
    duration: Option<&str>,
    owner: Option<&Value>,
) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": template.get("metadata").cloned().unwrap_or(json!({})),
        "spec": template["spec"].clone()});
    pod["metadata"]["name"] = json!(name);
    pod["metadata"]["namespace"] = json!(namespace);
    for (field, more) in [("labels", extra.0), ("annotations", extra.1)] {
        let map = pod["metadata"]
            .as_object_mut()
            .unwrap()
            .entry(field)
            .or_insert(json!({}));
        for (k, v) in more.as_object().into_iter().flatten() {
            map[k] = v.clone();
        }
    }
    let annotations = &mut pod["metadata"]["annotations"];
    match annotations.get(DURATION).and_then(Value::as_str) {
        Some(own) => annotations[DURATION] = json!(faster(own)),
        None => {
            if let Some(d) = duration {
                annotations[DURATION] = json!(d);
            }
        }
    }
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([owner_ref(owner)]);
    }
    pod["spec"]["schedulerName"] = json!(scheduler);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(0);
    pod
}

/// The kinds the compatibility set creates (its cases' objects and what the controllers
/// played here make), with their resource names.
const PLURALS: [(&str, &str); 26] = [
    ("Pod", "pods"),
    ("MPIJob", "mpijobs"),
    ("TrainJob", "trainjobs"),
    ("TrainingRuntime", "trainingruntimes"),
    ("ClusterTrainingRuntime", "clustertrainingruntimes"),
    ("Job", "jobs"),
    ("JobSet", "jobsets"),
    ("LeaderWorkerSet", "leaderworkersets"),
    ("PyTorchJob", "pytorchjobs"),
    ("PodGroup", "podgroups"),
    ("Deployment", "deployments"),
    ("ReplicaSet", "replicasets"),
    ("StatefulSet", "statefulsets"),
    ("PriorityClass", "priorityclasses"),
    ("WorkloadPriorityClass", "workloadpriorityclasses"),
    ("ClusterQueue", "clusterqueues"),
    ("LocalQueue", "localqueues"),
    ("Cohort", "cohorts"),
    ("ResourceFlavor", "resourceflavors"),
    ("Queue", "queues"),
    ("PersistentVolumeClaim", "persistentvolumeclaims"),
    ("PersistentVolume", "persistentvolumes"),
    ("StorageClass", "storageclasses"),
    ("DeviceClass", "deviceclasses"),
    ("ResourceClaim", "resourceclaims"),
    ("ResourceClaimTemplate", "resourceclaimtemplates"),
];

/// Applies one case's objects in Kubernetes' order (queues and classes, then workloads)
/// and plays the controllers of the workloads that have none here but batch Jobs'.
struct Case {
    client: kube::Client,
    scheduler: String,
    /// What the case created, to delete afterwards: (resource, namespace, name).
    created: Vec<(kube::api::ApiResource, Option<String>, String)>,
    namespaces: BTreeSet<String>,
    /// StatefulSets whose pods come one at a time (`OrderedReady`): (the set as created,
    /// its pods' duration).
    ordered_sets: Vec<(Value, Option<String>)>,
    /// Trainer's runtimes created, by (kind, namespace or "", name), for the TrainJobs.
    runtimes: BTreeMap<(String, String, String), Value>,
}

impl Case {
    async fn create(&mut self, object: &Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        let kind = object["kind"].as_str().unwrap().to_string();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let Some((_, plural)) = PLURALS.iter().find(|(k, _)| *k == kind) else {
            panic!(
                "{kind} ({api_version}) is not a kind the compatibility set creates here: add it \
                 and its plural to PLURALS"
            )
        };
        let resource = kube::api::ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: api_version.clone(),
            kind: kind.clone(),
            plural: plural.to_string(),
        };
        let namespaced = object["metadata"].get("namespace").is_some();
        let (namespace, name) = key(object);
        let api: Api<kube::api::DynamicObject> = if namespaced {
            if self.namespaces.insert(namespace.clone()) {
                // Namespaces stay between cases: without a namespace controller here, a
                // deleted one would never finish terminating.
                let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
                    Api::all(self.client.clone());
                let ns = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
                match namespaces.create(&PostParams::default(), &ns).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => panic!("creating namespace {namespace}: {e}"),
                }
            }
            Api::namespaced_with(self.client.clone(), &namespace, &resource)
        } else {
            Api::all_with(self.client.clone(), &resource)
        };
        self.created.push((
            resource.clone(),
            namespaced.then(|| namespace.clone()),
            name.clone(),
        ));
        let mut object = object.clone();
        object["metadata"]["namespace"] = if namespaced {
            json!(namespace)
        } else {
            Value::Null
        };
        if kind.ends_with("TrainingRuntime") {
            let ns = if namespaced {
                namespace.clone()
            } else {
                String::new()
            };
            self.runtimes
                .insert((kind.clone(), ns, name.clone()), object.clone());
        }
        let typed: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
        // The API server serves a new CRD's kind a moment after accepting it.
        let created = eventually(
            Duration::from_secs(30),
            &format!("{kind} {name} created"),
            || {
                let (api, typed) = (api.clone(), typed.clone());
                async move { api.create(&PostParams::default(), &typed).await.ok() }
            },
        )
        .await;
        serde_json::to_value(created).unwrap()
    }

    /// A pod, created.
    async fn pod(&mut self, pod: Value) {
        self.create(&pod).await;
    }

    /// `count` pods from `template`, as a controller creates them, owned by `owner`: pod `i`
    /// has the name, labels and annotations `each(i)` gives.
    async fn pods_from_template(
        &mut self,
        template: &Value,
        count: u64,
        namespace: &str,
        duration: Option<&str>,
        owner: &Value,
        each: impl Fn(u64) -> (String, Value, Value),
    ) {
        for i in 0..count {
            let (name, labels, annotations) = each(i);
            let pod = pod_from_template(
                template,
                &name,
                namespace,
                &self.scheduler,
                (&labels, &annotations),
                duration,
                Some(owner),
            );
            self.pod(pod).await;
        }
    }

    /// A workload object and what its controller creates at once.
    async fn workload(&mut self, object: &Value) {
        let created = self.create(object).await;
        let created = json!({"apiVersion": object["apiVersion"], "kind": object["kind"],
            "metadata": created["metadata"], "spec": object["spec"]});
        let (namespace, name) = key(object);
        let duration = object["metadata"]["annotations"][DURATION]
            .as_str()
            .map(faster);
        let group = object["apiVersion"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        match (group, object["kind"].as_str().unwrap()) {
            ("kubeflow.org", "PyTorchJob") => {
                let specs = object["spec"]["pytorchReplicaSpecs"].as_object().unwrap();
                for (role, spec) in specs {
                    let role = role.to_lowercase();
                    let count = spec["replicas"].as_u64().unwrap_or(1);
                    let (template, duration) = (&spec["template"], duration.as_deref());
                    self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                        let labels = json!({"training.kubeflow.org/job-name": name,
                            "training.kubeflow.org/replica-type": role,
                            "training.kubeflow.org/replica-index": i.to_string()});
                        (format!("{name}-{role}-{i}"), labels, json!({}))
                    })
                    .await;
                }
            }
            ("jobset.x-k8s.io", "JobSet") => {
                for job in object["spec"]["replicatedJobs"].as_array().unwrap() {
                    let role = job["name"].as_str().unwrap();
                    for i in 0..job["replicas"].as_u64().unwrap_or(1) {
                        let labels = json!({"jobset.sigs.k8s.io/jobset-name": name,
                            "jobset.sigs.k8s.io/replicatedjob-name": role,
                            "jobset.sigs.k8s.io/job-index": i.to_string()});
                        let mut spec = job["template"]["spec"].clone();
                        for (k, v) in labels.as_object().unwrap() {
                            spec["template"]["metadata"]["labels"][k] = v.clone();
                        }
                        let mut annotations = json!({});
                        if let Some(d) = object["metadata"]["annotations"][DURATION].as_str() {
                            annotations[DURATION] = json!(d);
                        }
                        let child = json!({"apiVersion": "batch/v1", "kind": "Job",
                            "metadata": {"name": format!("{name}-{role}-{i}"),
                                "namespace": namespace, "labels": labels,
                                "annotations": annotations,
                                "ownerReferences": [owner_ref(&created)]},
                            "spec": spec});
                        self.create(&child).await;
                    }
                }
            }
            ("batch.volcano.sh", "Job") => {
                let tasks = object["spec"]["tasks"].as_array().unwrap();
                let total: u64 = tasks
                    .iter()
                    .map(|t| t["replicas"].as_u64().unwrap_or(1))
                    .sum();
                let mut group = json!({"apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": namespace,
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": {"minMember": object["spec"]["minAvailable"].as_u64().unwrap_or(total),
                        "minTaskMember": tasks.iter()
                            .filter(|t| t.get("minAvailable").is_some())
                            .map(|t| (t["name"].as_str().unwrap().to_string(), t["minAvailable"].clone()))
                            .collect::<serde_json::Map<_, _>>()}});
                if let Some(queue) = object["spec"]["queue"].as_str() {
                    group["spec"]["queue"] = json!(queue);
                }
                self.create(&group).await;
                for task in tasks {
                    let task_name = task["name"].as_str().unwrap();
                    let labels = json!({"volcano.sh/job-name": name,
                        "volcano.sh/task-spec": task_name});
                    let mut annotations = json!({"scheduling.k8s.io/group-name": name,
                        "volcano.sh/task-spec": task_name});
                    if let Some(queue) = object["spec"]["queue"].as_str() {
                        annotations["volcano.sh/queue-name"] = json!(queue);
                    }
                    let count = task["replicas"].as_u64().unwrap_or(1);
                    let (template, duration) = (&task["template"], duration.as_deref());
                    self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                        let name = format!("{name}-{task_name}-{i}");
                        (name, labels.clone(), annotations.clone())
                    })
                    .await;
                }
            }
            ("apps", "StatefulSet") if object["spec"]["podManagementPolicy"] == "Parallel" => {
                let count = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let (template, duration) = (&object["spec"]["template"], duration.as_deref());
                self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                    (format!("{name}-{i}"), stateful_pod_labels(i), json!({}))
                })
                .await;
            }
            ("leaderworkerset.x-k8s.io", "LeaderWorkerSet") => {
                // Each group's leader and workers at once, with the labels and the size
                // annotation LeaderWorkerSet's controller writes.
                let groups = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let lwt = &object["spec"]["leaderWorkerTemplate"];
                let size = lwt["size"].as_u64().unwrap_or(1);
                let worker = &lwt["workerTemplate"];
                let leader = if lwt["leaderTemplate"].is_null() {
                    worker
                } else {
                    &lwt["leaderTemplate"]
                };
                for group in 0..groups {
                    for index in 0..size {
                        let template = if index == 0 { leader } else { worker };
                        let pod_name = match index {
                            0 => format!("{name}-{group}"),
                            _ => format!("{name}-{group}-{index}"),
                        };
                        let labels = json!({"leaderworkerset.sigs.k8s.io/name": name,
                            "leaderworkerset.sigs.k8s.io/group-index": group.to_string(),
                            "leaderworkerset.sigs.k8s.io/worker-index": index.to_string()});
                        let annotations =
                            json!({"leaderworkerset.sigs.k8s.io/size": size.to_string()});
                        let pod = pod_from_template(
                            template,
                            &pod_name,
                            &namespace,
                            &self.scheduler,
                            (&labels, &annotations),
                            duration.as_deref(),
                            None,
                        );
                        self.pod(pod).await;
                    }
                }
            }
            ("kubeflow.org", "MPIJob") => {
                // The MPI Operator with gang scheduling (scheduler-plugins): a PodGroup of
                // all its pods, which they name, then the launcher and the workers.
                let specs = object["spec"]["mpiReplicaSpecs"].as_object().unwrap();
                let count = |role: &str| {
                    let default = u64::from(role == "Launcher");
                    specs
                        .get(role)
                        .map_or(0, |s| s["replicas"].as_u64().unwrap_or(default))
                };
                let group = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": namespace,
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": {"minMember": count("Launcher") + count("Worker")}});
                self.create(&group).await;
                for role in ["Launcher", "Worker"] {
                    let Some(spec) = specs.get(role) else {
                        continue;
                    };
                    let role_label = role.to_lowercase();
                    let labels = json!({"training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/job-role": role_label,
                        "scheduling.x-k8s.io/pod-group": name});
                    let (template, duration) = (&spec["template"], duration.as_deref());
                    self.pods_from_template(
                        template,
                        count(role),
                        &namespace,
                        duration,
                        &created,
                        |i| {
                            (
                                format!("{name}-{role_label}-{i}"),
                                labels.clone(),
                                json!({}),
                            )
                        },
                    )
                    .await;
                }
            }
            ("trainer.kubeflow.org", "TrainJob") => {
                // Trainer's controller: the runtime's JobSet, named after the TrainJob and
                // owned by it, its trainer Job sized by spec.trainer.
                let reference = &object["spec"]["runtimeRef"];
                let kind = reference["kind"]
                    .as_str()
                    .unwrap_or("ClusterTrainingRuntime")
                    .to_string();
                let ns = match kind.as_str() {
                    "TrainingRuntime" => namespace.clone(),
                    _ => String::new(),
                };
                let runtime_name = reference["name"].as_str().unwrap().to_string();
                let runtime = &self.runtimes[&(kind, ns, runtime_name)];
                let mut spec = runtime["spec"]["template"]["spec"].clone();
                let trainer = &object["spec"]["trainer"];
                let nodes = trainer["numNodes"]
                    .as_u64()
                    .or_else(|| runtime["spec"]["mlPolicy"]["numNodes"].as_u64());
                for job in spec["replicatedJobs"].as_array_mut().unwrap() {
                    let ancestor = &job["template"]["metadata"]["labels"]
                        ["trainer.kubeflow.org/trainjob-ancestor-step"];
                    if ancestor != "trainer" && job["name"] != "node" {
                        continue;
                    }
                    let job_spec = &mut job["template"]["spec"];
                    if let Some(n) = nodes {
                        job_spec["parallelism"] = json!(n);
                        job_spec["completions"] = json!(n);
                    }
                    if !trainer["resourcesPerNode"].is_null() {
                        for c in job_spec["template"]["spec"]["containers"]
                            .as_array_mut()
                            .unwrap()
                        {
                            if c["name"] == "node" {
                                c["resources"] = trainer["resourcesPerNode"].clone();
                            }
                        }
                    }
                }
                let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "metadata": {"name": name, "namespace": namespace,
                        "labels": object["spec"]["labels"].as_object().cloned().unwrap_or_default(),
                        "annotations": object["metadata"]["annotations"],
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": spec});
                Box::pin(self.workload(&jobset)).await;
            }
            // OrderedReady: the pass below creates each pod once the one before it is ready.
            ("apps", "StatefulSet") => self.ordered_sets.push((created, duration)),
            ("apps", "ReplicaSet") => {
                let count = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let (template, duration) = (&object["spec"]["template"], duration.as_deref());
                self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                    (format!("{name}-{i}"), json!({}), json!({}))
                })
                .await;
            }
            ("apps", "Deployment") => {
                let replica_set = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": format!("{name}-0"), "namespace": namespace,
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": {"replicas": object["spec"]["replicas"],
                        "selector": object["spec"]["selector"],
                        "template": object["spec"]["template"]}});
                let replica_set = self.create(&replica_set).await;
                let replica_set = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": replica_set["metadata"]});
                let count = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let (template, duration) = (&object["spec"]["template"], duration.as_deref());
                self.pods_from_template(template, count, &namespace, duration, &replica_set, |i| {
                    (format!("{name}-0-{i}"), json!({}), json!({}))
                })
                .await;
            }
            // batch/v1 Jobs: the Job controller below.
            _ => {}
        }
    }

    /// One pass of the Job controller over the case's namespaces: each Job keeps
    /// `min(parallelism, completions - succeeded)` pods that have not finished, and its
    /// `status.succeeded` counts its pods that did.
    async fn run_jobs(&self, created: &mut BTreeMap<String, u64>) {
        for namespace in &self.namespaces {
            let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            let Ok(jobs_listed) = jobs.list(&ListParams::default()).await else {
                continue;
            };
            let Ok(pods_listed) = pods.list(&ListParams::default()).await else {
                continue;
            };
            for job in jobs_listed.items {
                let uid = job.metadata.uid.clone().unwrap_or_default();
                let name = job.metadata.name.clone().unwrap_or_default();
                let owned: Vec<&Pod> = pods_listed
                    .items
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| o.uid == uid)
                    })
                    .collect();
                let phase = |p: &Pod| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default()
                };
                let succeeded = owned.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
                let active = owned
                    .iter()
                    .filter(|p| phase(p) != "Succeeded" && phase(p) != "Failed")
                    .count() as i32;
                let spec = job.spec.clone().unwrap_or_default();
                let parallelism = spec.parallelism.unwrap_or(1);
                let completions = spec.completions.unwrap_or(parallelism);
                if job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) != succeeded {
                    let _ = jobs
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"succeeded": succeeded}})),
                        )
                        .await;
                }
                let want = parallelism.min(completions - succeeded).max(0);
                let job_value = serde_json::to_value(&job).unwrap();
                let job_value = json!({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": job_value["metadata"], "spec": job_value["spec"]});
                let duration = job
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DURATION))
                    .map(|d| faster(d));
                for _ in active..want {
                    let n = created.entry(uid.clone()).or_insert(0);
                    let labels = json!({"batch.kubernetes.io/job-name": name, "job-name": name});
                    let mut labels = labels;
                    for (k, v) in job.metadata.labels.iter().flatten() {
                        if k.starts_with("jobset.sigs.k8s.io/") {
                            labels[k] = json!(v);
                        }
                    }
                    let pod = pod_from_template(
                        &job_value["spec"]["template"],
                        &format!("{name}-{n}"),
                        namespace,
                        &self.scheduler,
                        (&labels, &json!({})),
                        duration.as_deref(),
                        Some(&job_value),
                    );
                    *n += 1;
                    let typed: Pod = serde_json::from_value(pod).unwrap();
                    let _ = pods.create(&PostParams::default(), &typed).await;
                }
            }
        }
    }

    /// One pass of the StatefulSet controller over the `OrderedReady` sets: the next pod of
    /// each, once every pod before it runs and is ready.
    async fn run_ordered_sets(&self) {
        for (set, duration) in &self.ordered_sets {
            let (namespace, name) = key(set);
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            let Ok(listed) = pods.list(&ListParams::default()).await else {
                continue;
            };
            let ready = |pod: &Pod| {
                pod.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            };
            let replicas = set["spec"]["replicas"].as_u64().unwrap_or(1);
            let mut next = 0;
            while next < replicas {
                let pod_name = format!("{name}-{next}");
                match listed
                    .items
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(&pod_name))
                {
                    Some(pod) if ready(pod) => next += 1,
                    Some(_) => break,
                    None => {
                        let pod = pod_from_template(
                            &set["spec"]["template"],
                            &pod_name,
                            &namespace,
                            &self.scheduler,
                            (&stateful_pod_labels(next), &json!({})),
                            duration.as_deref(),
                            Some(set),
                        );
                        let typed: Pod = serde_json::from_value(pod).unwrap();
                        let _ = pods.create(&PostParams::default(), &typed).await;
                        break;
                    }
                }
            }
        }
    }

    /// Pods of the case's namespaces: (bound and not finished, succeeded, pending).
    async fn counts(&self) -> (u64, u64, u64) {
        let (mut running, mut succeeded, mut pending) = (0, 0, 0);
        for namespace in &self.namespaces {
            for pod in pods_in(&self.client, namespace).await {
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                match (phase.as_str(), node_of(&pod).is_some()) {
                    ("Succeeded", _) => succeeded += 1,
                    ("Failed", _) => {}
                    (_, true) => running += 1,
                    (_, false) => pending += 1,
                }
            }
        }
        (running, succeeded, pending)
    }

    /// Deletes what the case created (there is no garbage collector here): its pods, its
    /// nodes, then every object in reverse order.
    async fn clean(&self, node_prefix: &str) {
        let namespaces: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        cleanup(&self.client, node_prefix, &namespaces).await;
        for namespace in &self.namespaces {
            let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
            let _ = jobs
                .delete_collection(&DeleteParams::background(), &ListParams::default())
                .await;
        }
        for (resource, namespace, name) in self.created.iter().rev() {
            let api: Api<kube::api::DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
                None => Api::all_with(self.client.clone(), resource),
            };
            if matches!(
                resource.kind.as_str(),
                "PersistentVolumeClaim" | "PersistentVolume"
            ) {
                // No protection controller runs here to take the finalizer off.
                let unprotect = json!({"metadata": {"finalizers": null}});
                let _ = api
                    .patch(
                        name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&unprotect),
                    )
                    .await;
            }
            let _ = api
                .delete(name, &DeleteParams::background().grace_period(0))
                .await;
        }
    }
}

/// The label the StatefulSet controller puts on its pod `i`.
fn stateful_pod_labels(i: u64) -> Value {
    json!({"apps.kubernetes.io/pod-index": i.to_string()})
}

/// Kueue's queue kinds in Kestrel's group, without the fields the header warns of.
fn as_kestrels(mut object: Value, warnings: &[String]) -> Value {
    let kind = object["kind"].as_str().unwrap_or_default().to_string();
    let (namespace, name) = key(&object);
    let object_name = match kind.as_str() {
        "LocalQueue" => format!("{kind} {namespace}/{name}"),
        _ => format!("{kind} {name}"),
    };
    for w in warnings {
        if let Some(field) = w
            .strip_prefix(&format!("{object_name}: field "))
            .map(|f| f.trim_end_matches(':'))
        {
            let mut at = &mut object;
            let parts: Vec<&str> = field.split('.').collect();
            for part in &parts[..parts.len() - 1] {
                at = &mut at[*part];
            }
            if let Some(map) = at.as_object_mut() {
                map.remove(parts[parts.len() - 1]);
            }
        }
    }
    object["apiVersion"] = json!(KESTREL_API);
    object
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compatibility_set_has_its_stated_outcomes_on_a_real_control_plane() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    // Claims from templates are kube-controller-manager's: it creates them for the pods
    // and releases those of ended pods. Its volume controller completes the bindings of
    // volume claims that a scheduler wrote on PersistentVolumes (synced every second
    // rather than every 15 s, so a case's claims bind within its time).
    env.cp.start_controller_manager(
        &[
            "resourceclaim-controller",
            "persistentvolume-binder-controller",
        ],
        &["--pvclaimbinder-sync-period=1s"],
    );
    kestrel_testenv::apply_yaml(&client, &other_projects_crds(), false)
        .await
        .unwrap();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(compat_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("cluster.yaml"))
        .collect();
    cases.sort();
    let mut ran = 0;
    for (index, path) in cases.iter().enumerate() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        let want = expected(&text);
        if !want.errors.is_empty() {
            continue;
        }
        ran += 1;
        let prefix = format!("compat{index}-");
        let scheduler = format!("kestrel-compat{index}");
        let (nodes, slices) = compat_nodes(&prefix);
        kestrel_testenv::create_gpu_nodes(&client, nodes).await;
        let slices: Vec<String> = slices.iter().map(Value::to_string).collect();
        kestrel_testenv::apply_yaml(&client, &slices.join("\n---\n"), false)
            .await
            .unwrap();
        let _kubelet = kestrel_testenv::FakeKubelet::start(client.clone(), &prefix);
        let mut case = Case {
            client: client.clone(),
            scheduler: scheduler.clone(),
            created: Vec::new(),
            namespaces: BTreeSet::new(),
            ordered_sets: Vec::new(),
            runtimes: BTreeMap::new(),
        };
        let documents: Vec<Value> = read_documents(path, &text, None)
            .unwrap()
            .into_iter()
            .map(|d| d.value)
            .collect();
        let is_workload = |o: &Value| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "Pod"
                        | "Job"
                        | "JobSet"
                        | "LeaderWorkerSet"
                        | "PyTorchJob"
                        | "PodGroup"
                        | "Deployment"
                        | "ReplicaSet"
                        | "StatefulSet"
                        | "TrainJob"
                        | "MPIJob"
                )
            )
        };
        for object in documents.iter().filter(|o| !is_workload(o)) {
            let object = match object["apiVersion"].as_str() {
                Some(v)
                    if v.starts_with("kueue.x-k8s.io/")
                        && object["kind"] != "WorkloadPriorityClass" =>
                {
                    as_kestrels(object.clone(), &want.warnings)
                }
                _ => object.clone(),
            };
            case.create(&object).await;
        }
        let mut kestrel = env.kestrel(&scheduler, &["--scheduler-name", &scheduler]);
        // PodGroups before their pods, as their users apply them.
        for object in documents.iter().filter(|o| o["kind"] == "PodGroup") {
            case.create(object).await;
        }
        for object in documents
            .iter()
            .filter(|o| is_workload(o) && o["kind"] != "PodGroup")
        {
            if object["kind"] == "Pod" {
                let (namespace, pod_name) = key(object);
                let pod = pod_from_template(
                    object,
                    &pod_name,
                    &namespace,
                    &scheduler,
                    (&json!({}), &json!({})),
                    None,
                    None,
                );
                case.pod(pod).await;
            } else {
                case.workload(object).await;
            }
        }
        let count = |k: &str| want.count(k);
        let started = Instant::now();
        let mut job_pods = BTreeMap::new();
        let mut most_running = 0;
        let (deadline, settle) = (Duration::from_secs(90), Duration::from_secs(6));
        let (running, succeeded, pending) = loop {
            case.run_jobs(&mut job_pods).await;
            case.run_ordered_sets().await;
            let (running, succeeded, pending) = case.counts().await;
            most_running = most_running.max(running);
            let done = match count("completed") {
                Some(n) => succeeded >= n && running == 0,
                // Nothing is to complete: long enough for a bind to show, were there one.
                None => started.elapsed() > settle,
            };
            if done || started.elapsed() > deadline {
                break (running, succeeded, pending);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let state = format!("{name}: running {running}, succeeded {succeeded}, pending {pending}, most running at once {most_running}");
        if let Some(n) = count("completed") {
            assert_eq!(succeeded, n, "{state}");
        }
        if let Some(n) = count("most_running") {
            assert_eq!(most_running, n, "{state}");
        }
        if count("scheduled") == Some(0) {
            assert_eq!((running, succeeded), (0, 0), "{state}");
        }
        if let Some(n) = count("pending_at_end") {
            assert_eq!(pending, n, "{state}");
        }
        let log = kestrel.log_text();
        for part in &want.warnings {
            let translated = documents.iter().any(|o| {
                o["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("kueue.x-k8s.io/"))
                    && part.starts_with(&format!("{} ", o["kind"].as_str().unwrap_or_default()))
            });
            if !translated {
                assert!(
                    log.contains(part.as_str()),
                    "{name}: no warning {part:?} in Kestrel's log"
                );
            }
        }
        assert_invariants(&client).await;
        kestrel.kill();
        case.clean(&prefix).await;
        eprintln!("{state}: as stated");
    }
    env.cp.stop_controller_manager();
    assert!(ran >= 10, "only {ran} cases ran");
}
