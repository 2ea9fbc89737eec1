//! The compatibility set (`tests/compat/`) on the real control plane: each case's objects
//! applied as written, their controllers played by the test (Kestrel does not run them),
//! and the outcome its header states checked on what the API server holds, as
//! `crates/kestrel-sim/tests/compat.rs` checks it in the simulator.
//!
//! - Time runs 1200 times faster: an hour of `kestrel.dev/sim-duration` is 3 s.
//! - `completed` pods must succeed; `most_running` is the most pods bound and not yet
//!   finished at once (sampled; a pod counts until shortly before it ended, as a gang's
//!   pods end a few milliseconds apart here and at one instant in the simulator). Kestrel
//!   starts once the case's objects are created; the invariant checker runs while pods
//!   run and at the end; `scheduled=0` with `pending_at_end`: none binds.
//! - Kueue's queue kinds (`kueue.x-k8s.io`) are applied in Kestrel's group, which
//!   `kestrel serve` reads (where Kueue is installed it admits them itself), without the
//!   fields the header expects warnings for: Kestrel's own kinds refuse those. Warnings
//!   about other projects' objects must be in Kestrel's log and in a Warning Event.
//! - The controllers: batch Jobs keep `min(parallelism, completions left)` pods and write
//!   `status.succeeded`; a JobSet gets one Job per replica; a PyTorchJob one pod per
//!   replica (the training operator's labels); a Volcano Job a PodGroup and its pods; a
//!   LeaderWorkerSet each group's leader and workers (its controller's labels and size); a
//!   TrainJob its runtime's JobSet, sized by its trainer (Trainer's controller); an MPIJob
//!   a scheduler-plugins PodGroup and its launcher's and workers' pods (the MPI Operator
//!   with gang scheduling); a RayJob its RayCluster, with the RayJob's labels, and a
//!   RayCluster its head and workers with KubeRay's labels (KubeRay).
//!   kube-controller-manager's resourceclaim controller runs for real: it makes the
//!   claims of pods from templates and releases those of ended pods.
//! - Pools that publish their GPUs through DRA get ResourceSlices as NVIDIA's driver
//!   writes them, and no `nvidia.com/gpu`.
//! - A case whose header expects an error is the simulator's reader refusing a file;
//!   it has nothing to run live.

// The serial lock is held across awaits on purpose: one test at a time on the control plane.
#![allow(clippy::await_holding_lock)]

mod case;
#[path = "../live/mod.rs"]
mod live;

use kestrel_test_support::compat::expected;

use case::*;
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
        crd("RayCluster", "rayclusters", "ray.io", "Namespaced", &["v1"]),
        crd("RayJob", "rayjobs", "ray.io", "Namespaced", &["v1"]),
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
                        | "RayCluster"
                        | "RayJob"
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
        // Kestrel starts once the case's objects are there, so its first cycles see all
        // of them, as the simulator's first instant does: pods that a slow API server
        // creates one by one would otherwise start, and end, one by one.
        let mut kestrel = env.kestrel(&scheduler, &["--scheduler-name", &scheduler]);
        eventually(Duration::from_secs(30), "Kestrel leading", || async {
            (kestrel.log_count("leading: rebuilding state") == 1).then_some(())
        })
        .await;
        let count = |k: &str| want.count(k);
        let started = Instant::now();
        let mut job_pods = BTreeMap::new();
        let mut runs = Runs::default();
        let (deadline, settle) = (Duration::from_secs(90), Duration::from_secs(6));
        let mut samples = 0u32;
        let (running, succeeded, pending) = loop {
            case.run_jobs(&mut job_pods).await;
            case.run_ordered_sets().await;
            let (running, succeeded, pending) = case.counts(&mut runs).await;
            samples += 1;
            if samples.is_multiple_of(10) {
                // The checker while pods run, not only once they have ended.
                assert_invariants(&client).await;
            }
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
        let most_running = runs.most_at_once() as u64;
        let state = format!(
            "{name}: running {running}, succeeded {succeeded}, pending {pending}, most running at once {most_running}, after {:.1} s",
            started.elapsed().as_secs_f64()
        );
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
                // And a Warning Event on the object says it.
                let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
                eventually(
                    Duration::from_secs(30),
                    &format!("{name}: a Warning event {part:?}"),
                    || {
                        let events = events.clone();
                        async move {
                            let list = events.list(&ListParams::default()).await.ok()?;
                            list.items
                                .iter()
                                .any(|e| {
                                    e.type_.as_deref() == Some("Warning")
                                        && e.note
                                            .as_deref()
                                            .is_some_and(|n| n.contains(part.as_str()))
                                })
                                .then_some(())
                        }
                    },
                )
                .await;
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
