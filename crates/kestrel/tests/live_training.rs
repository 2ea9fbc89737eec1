//! The TrainingJob controller of `kestrel serve` on a real kube-apiserver, with the
//! shipped RBAC: pods, Service and gang created with the rendezvous variables, a member
//! killed and the gang restarted, bad jobs refused with nothing created, and (against a
//! real MLflow server) each job recorded as an MLflow run.

#![allow(clippy::await_holding_lock)]

mod live;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kestrel_objects::crds::PodGroup;
use kestrel_objects::training::{TrainingJob, ATTEMPT_LABEL};
use kestrel_testenv::{FakeKubelet, MlflowServer};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use live::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

/// A job of a Master and `workers` Workers, 4 GPUs each, reading one dataset claim.
fn training_job(ns: &str, name: &str, scheduler: &str, workers: i32, extra: Value) -> TrainingJob {
    let template = |annotations: Value| {
        json!({
            "metadata": {"annotations": annotations},
            "spec": {
                "nodeSelector": {POOL_LABEL: ns},
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "train", "image": "trainer:1",
                    "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "4"},
                                  "limits": {"nvidia.com/gpu": "4"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}],
            },
        })
    };
    let mut spec = json!({
        "schedulerName": scheduler,
        "replicaSpecs": {
            "Master": {"replicas": 1, "template": template(extra["masterAnnotations"].clone())},
            "Worker": {"replicas": workers, "template": template(json!({}))},
        },
        "runPolicy": {"backoffLimit": 2},
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        if k != "masterAnnotations" {
            spec[k] = v.clone();
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "TrainingJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .expect("a TrainingJob")
}

/// The dataset every job's pods read: claim `imagenet` in `ns`, bound to a volume as the
/// volume controller leaves it (a pod whose claim is missing or unbound stays pending).
async fn create_dataset(client: &kube::Client, ns: &str) {
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("{ns}-imagenet")},
        "spec": {
            "capacity": {"storage": "1Ti"},
            "accessModes": ["ReadOnlyMany"],
            "csi": {"driver": "datasets.example.com", "volumeHandle": format!("{ns}-imagenet")},
            "claimRef": {"namespace": ns, "name": "imagenet"},
        },
    });
    let claim = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "imagenet", "namespace": ns,
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {
            "storageClassName": "",
            "accessModes": ["ReadOnlyMany"],
            "resources": {"requests": {"storage": "1Ti"}},
            "volumeName": format!("{ns}-imagenet"),
        },
    });
    let text = format!("{volume}\n---\n{claim}");
    kestrel_testenv::apply_yaml(client, &text, false)
        .await
        .unwrap_or_else(|e| panic!("creating the dataset claim in {ns}: {e}"));
}

async fn create_job(client: &kube::Client, job: &TrainingJob) {
    let ns = job.metadata.namespace.clone().unwrap();
    Api::<TrainingJob>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), job)
        .await
        .unwrap_or_else(|e| panic!("creating TrainingJob {ns}/{:?}: {e}", job.metadata.name));
}

/// Waits until the job's status passes `check`.
async fn wait_job(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&TrainingJob) -> bool,
) -> TrainingJob {
    let api: Api<TrainingJob> = Api::namespaced(client.clone(), ns);
    eventually(
        WAIT,
        &format!("TrainingJob {ns}/{name}: {what}"),
        || async {
            let job = api.get(name).await.ok()?;
            check(&job).then_some(job)
        },
    )
    .await
}

fn state(job: &TrainingJob) -> Option<&str> {
    job.status.as_ref()?.state.as_deref()
}

fn condition<'a>(job: &'a TrainingJob, kind: &str) -> Option<(&'a str, &'a str, &'a str)> {
    let c = job
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)?;
    Some((c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

fn env_of(pod: &Pod) -> BTreeMap<String, String> {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

fn attempt(pod: &Pod) -> &str {
    pod.metadata.labels.as_ref().unwrap()[ATTEMPT_LABEL].as_str()
}

async fn events(client: &kube::Client, ns: &str, reason: &str) -> Vec<String> {
    Api::<K8sEvent>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// Kills a pod as its kubelet reports a container that died: phase Failed, exit code.
async fn kill(client: &kube::Client, ns: &str, pod: &str, exit_code: i32) {
    let status = json!({"status": {
        "phase": "Failed",
        "containerStatuses": [{"name": "train", "image": "trainer:1", "imageID": "", "ready": false,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}}}],
    }});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("failing pod {ns}/{pod}: {e}"));
}

/// A job of 3 pods runs as one gang with a headless Service and the rendezvous variables;
/// a worker killed by a signal (exit 137) restarts the whole gang (one restart counted), so
/// does a pod deleted from under it; Kestrel SIGKILLed and restarted picks the job up
/// without a restart; a master exiting 1 fails the job, and the pods still running are
/// cleaned up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_training_job_starts_and_restarts_as_one_gang() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler) = ("train", "kestrel-train");
    create_namespace(&client, ns).await;
    create_dataset(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 2).await;
    let _kubelet = FakeKubelet::start(client.clone(), "train-");
    // Without election, so that a restarted Kestrel leads at once.
    let args = ["--scheduler-name", scheduler, "--leader-elect=false"];
    let mut kestrel = env.kestrel(scheduler, &args);
    create_job(&client, &training_job(ns, "bert", scheduler, 2, json!({}))).await;

    let job = wait_job(&client, ns, "bert", "Running", |j| {
        state(j) == Some("Running")
    })
    .await;
    let status = job.status.as_ref().unwrap();
    assert_eq!(status.restarts, 0);
    assert_eq!(status.replica_statuses["Worker"].running, 2);
    let pods = pods_in(&client, ns).await;
    assert_eq!(pods.len(), 3);
    assert!(pods.iter().all(|p| node_of(p).is_some()));
    let worker = pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("bert-worker-1"))
        .expect("bert-worker-1");
    let vars = env_of(worker);
    for (k, v) in [
        ("MASTER_ADDR", "bert-master-0.bert.train.svc"),
        ("MASTER_PORT", "23456"),
        ("WORLD_SIZE", "12"),
        ("RANK", "2"),
        ("PET_NNODES", "3"),
        ("PET_NPROC_PER_NODE", "4"),
        ("PET_NODE_RANK", "2"),
        ("PET_MASTER_ADDR", "bert-master-0.bert.train.svc"),
        ("PET_MASTER_PORT", "23456"),
    ] {
        assert_eq!(
            vars.get(k).map(String::as_str),
            Some(v),
            "{k} of bert-worker-1"
        );
    }
    let spec = worker.spec.as_ref().unwrap();
    assert_eq!(
        (spec.hostname.as_deref(), spec.subdomain.as_deref()),
        (Some("bert-worker-1"), Some("bert"))
    );
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .get("bert")
        .await
        .expect("the headless Service");
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    let pg = Api::<PodGroup>::namespaced(client.clone(), ns)
        .get("bert")
        .await
        .expect("the job's PodGroup");
    assert_eq!(pg.spec.min_member, 3);
    assert_eq!(
        pg.spec.min_task_member,
        [("master".to_string(), 1), ("worker".to_string(), 2)].into()
    );

    // Kestrel SIGKILLed and started again: it picks the running job up as it is (no
    // restart, the same pods), and carries on below.
    let uids = |pods: &[Pod]| -> Vec<String> {
        let mut uids: Vec<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        uids.sort();
        uids
    };
    let before = uids(&pods_in(&client, ns).await);
    kestrel.kill();
    let mut kestrel = env.kestrel(scheduler, &args);
    eventually(WAIT, "the new Kestrel ready", || async {
        kestrel.ready().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = wait_job(&client, ns, "bert", "Running", |j| {
        state(j) == Some("Running")
    })
    .await;
    assert_eq!(
        job.status.as_ref().unwrap().restarts,
        0,
        "a Kestrel restart is no gang restart"
    );
    assert_eq!(uids(&pods_in(&client, ns).await), before, "the same pods");

    // A worker killed by a signal: the whole gang goes and comes back as attempt 1.
    kill(&client, ns, "bert-worker-0", 137).await;
    let job = wait_job(&client, ns, "bert", "restarted and running", |j| {
        state(j) == Some("Running") && j.status.as_ref().unwrap().restarts == 1
    })
    .await;
    let (_, _, message) = condition(&job, "Restarting").expect("a Restarting condition");
    assert!(
        message.contains("bert-worker-0 failed: container train exited with code 137"),
        "{message}"
    );
    let pods = wait_bound(&client, ns, 3, WAIT).await;
    assert_eq!(pods.len(), 3);
    assert!(
        pods.iter().all(|p| attempt(p) == "1"),
        "every pod of the new attempt"
    );
    let restarts = events(&client, ns, "Restarting").await;
    assert_eq!(restarts.len(), 1, "{restarts:?}");
    assert_invariants(&client).await;

    // A pod deleted from under the job (an eviction, a drain): restart 2 of 2.
    Api::<Pod>::namespaced(client.clone(), ns)
        .delete("bert-worker-1", &Default::default())
        .await
        .expect("deleting bert-worker-1");
    let job = wait_job(&client, ns, "bert", "restarted again and running", |j| {
        state(j) == Some("Running") && j.status.as_ref().unwrap().restarts == 2
    })
    .await;
    let (_, _, message) = condition(&job, "Restarting").unwrap();
    assert!(
        message.contains("bert-worker-1 was deleted or evicted")
            && message.contains("restart 2 of 2"),
        "{message}"
    );
    let pods = wait_bound(&client, ns, 3, WAIT).await;
    assert!(pods.iter().all(|p| attempt(p) == "2"));

    // The program's own error: the job fails, the workers still running are deleted.
    kill(&client, ns, "bert-master-0", 1).await;
    let job = wait_job(&client, ns, "bert", "Failed", |j| {
        state(j) == Some("Failed")
    })
    .await;
    let (_, reason, message) = condition(&job, "Failed").unwrap();
    assert_eq!(reason, "PermanentFailure");
    assert!(message.contains("exited with code 1"), "{message}");
    assert_eq!(job.status.as_ref().unwrap().restarts, 2);
    let left = eventually(WAIT, "only the failed master left", || async {
        let pods = pods_in(&client, ns).await;
        (pods.len() == 1).then_some(pods)
    })
    .await;
    assert_eq!(left[0].metadata.name.as_deref(), Some("bert-master-0"));
    let log = kestrel.log_text();
    assert!(
        !log.contains("forbidden"),
        "kestrel logged forbidden:\n{log}"
    );
    assert!(kestrel.terminate(Duration::from_secs(20)));
    cleanup(&client, "train-", &[ns]).await;
}

/// Jobs without a master, with zero workers, with a worker that mounts the dataset
/// read-write, or naming a missing queue are refused (Failed/Invalid, an event) and create
/// nothing; an unreachable MLflow does not stop a job, it is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_training_jobs_are_refused_and_create_nothing() {
    let Some((env, _serial)) = env() else { return };
    let client = env.client().await;
    let (ns, scheduler) = ("badtrain", "kestrel-badtrain");
    create_namespace(&client, ns).await;
    create_dataset(&client, ns).await;
    let mut kestrel = env.kestrel(scheduler, &["--scheduler-name", scheduler]);
    let mut no_master = training_job(ns, "no-master", scheduler, 1, json!({}));
    no_master.spec.replica_specs.remove("Master");
    let zero = training_job(ns, "zero", scheduler, 0, json!({}));
    let mut mixed = training_job(ns, "mixed", scheduler, 1, json!({}));
    let worker = mixed.spec.replica_specs.get_mut("Worker").unwrap();
    let mounts = worker.template.spec.as_mut().unwrap().containers[0]
        .volume_mounts
        .as_mut()
        .unwrap();
    mounts[0].read_only = Some(false);
    let queue = training_job(ns, "queued", scheduler, 1, json!({"queue": "nowhere"}));
    let cases = [
        (no_master, "spec.replicaSpecs: no Master"),
        (zero, "spec.replicaSpecs.Worker.replicas: 0 replicas"),
        (
            mixed,
            "replica Worker mounts volume \"data\" at \"/data\" read-write",
        ),
        (
            queue,
            "spec.queue: LocalQueue badtrain/nowhere does not exist",
        ),
    ];
    for (job, _) in &cases {
        create_job(&client, job).await;
    }
    for (job, want) in &cases {
        let name = job.metadata.name.as_deref().unwrap();
        let job = wait_job(&client, ns, name, "refused", |j| state(j) == Some("Failed")).await;
        let (on, reason, message) = condition(&job, "Failed").unwrap();
        assert_eq!((on, reason), ("True", "Invalid"), "{name}");
        assert!(
            message.contains(&format!("TrainingJob {ns}/{name}")) && message.contains(want),
            "{name}: {message}"
        );
    }
    let notes = eventually(WAIT, "4 Invalid events", || async {
        let notes = events(&client, ns, "Invalid").await;
        (notes.len() >= 4).then_some(notes)
    })
    .await;
    assert_eq!(notes.len(), 4, "one event per refused job: {notes:?}");
    assert!(
        pods_in(&client, ns).await.is_empty(),
        "no pod of a refused job"
    );
    let services = Api::<Service>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(services.items.is_empty(), "no Service of a refused job");
    let groups = Api::<PodGroup>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(groups.items.is_empty(), "no PodGroup of a refused job");

    // Tracking that cannot reach MLflow: the job runs, the failure is on it.
    let closed = kestrel_testenv::free_port();
    let uri = format!("http://127.0.0.1:{closed}");
    create_job(
        &client,
        &training_job(
            ns,
            "untracked",
            scheduler,
            1,
            json!({"mlflow": {"trackingUri": uri}}),
        ),
    )
    .await;
    let job = wait_job(&client, ns, "untracked", "created", |j| state(j).is_some()).await;
    let (on, reason, message) = condition(&job, "Tracking").unwrap_or_else(|| {
        panic!(
            "no Tracking condition: {:?} {:?}",
            job.spec.mlflow, job.status
        )
    });
    assert_eq!((on, reason), ("False", "MlflowUnavailable"));
    assert!(
        message.contains(&uri) && message.contains("unreachable"),
        "{message}"
    );
    let pods = eventually(WAIT, "the untracked job's pods", || async {
        let pods = pods_in(&client, ns).await;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    assert!(pods
        .iter()
        .all(|p| !env_of(p).contains_key("MLFLOW_RUN_ID")));
    // No node in this namespace's pool: the job waits, with the scheduler's explanation
    // from its PodGroup.
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), ns);
    let jobs: Api<TrainingJob> = Api::namespaced(client.clone(), ns);
    let (reason, explained) = eventually(WAIT, "the PodGroup's waiting reason", || async {
        let status = jobs.get("untracked").await.ok()?.status?;
        let scheduled = groups
            .get("untracked")
            .await
            .ok()?
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Scheduled" && c.status == "False")?;
        let queued = status.state.as_deref() == Some("Queued");
        (queued && status.waiting_reason.as_deref() == Some(scheduled.message.as_str()))
            .then_some((status.waiting_reason?, scheduled.message))
    })
    .await;
    assert_eq!(reason, explained);
    assert!(!reason.is_empty());
    assert_eq!(events(&client, ns, "MlflowUnavailable").await.len(), 1);
    assert!(kestrel.terminate(Duration::from_secs(20)));
    cleanup(&client, "badtrain-", &[ns]).await;
}

/// With `--mlflow-tracking-uri` a job (admitted through a LocalQueue) is one MLflow run:
/// its pods carry the run's id, and the run holds the job's params, tags and metrics and
/// ends FINISHED with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_training_job_is_recorded_as_an_mlflow_run() {
    let Some((env, _serial)) = env() else { return };
    let Some(mlflow) = MlflowServer::start(&env.cp.dir) else {
        return;
    };
    let client = env.client().await;
    let (ns, scheduler) = ("tracked", "kestrel-tracked");
    create_namespace(&client, ns).await;
    create_dataset(&client, ns).await;
    create_pool_nodes(&client, ns, 0, 2).await;
    let _kubelet = FakeKubelet::start(client.clone(), "tracked-");
    let mut kestrel = env.kestrel(
        scheduler,
        &[
            "--scheduler-name",
            scheduler,
            "--mlflow-tracking-uri",
            &mlflow.uri,
        ],
    );
    // Admitted through a LocalQueue with room for the job's 8 GPUs.
    let queues = format!(
        "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {{name: tracked-flavor}}\n---\n\
         apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ClusterQueue\nmetadata: {{name: tracked}}\nspec:\n  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n  resourceGroups:\n  - coveredResources: [cpu, memory, nvidia.com/gpu]\n    flavors:\n    - name: tracked-flavor\n      resources:\n      - {{name: cpu, nominalQuota: 100}}\n      - {{name: memory, nominalQuota: 1Ti}}\n      - {{name: nvidia.com/gpu, nominalQuota: 16}}\n---\n\
         apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: LocalQueue\nmetadata: {{name: research, namespace: {ns}}}\nspec: {{clusterQueue: tracked}}\n"
    );
    kestrel_testenv::apply_yaml(&client, &queues, false)
        .await
        .unwrap();
    // The master finishes 3 s after it starts (the fake kubelet's sim-duration).
    let extra = json!({"queue": "research",
                       "masterAnnotations": {"kestrel.dev/sim-duration": "3s"}});
    create_job(&client, &training_job(ns, "resnet", scheduler, 1, extra)).await;
    let job = wait_job(&client, ns, "resnet", "Succeeded", |j| {
        state(j) == Some("Succeeded")
    })
    .await;
    let status = job.status.as_ref().unwrap();
    let run_id = status.mlflow_run_id.clone().expect("the job's run id");
    let (on, _, message) = condition(&job, "Tracking").unwrap();
    assert_eq!(on, "True", "{message}");
    let master = Api::<Pod>::namespaced(client.clone(), ns)
        .get("resnet-master-0")
        .await
        .expect("the master");
    let vars = env_of(&master);
    assert_eq!(vars.get("MLFLOW_RUN_ID"), Some(&run_id));
    assert_eq!(vars.get("MLFLOW_TRACKING_URI"), Some(&mlflow.uri));
    let labels = master.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kestrel.dev/queue"], "research");

    let run = eventually(WAIT, "the run ended", || async {
        let run = mlflow.api(&format!("runs/get?run_id={run_id}"));
        (run["run"]["info"]["status"] == "FINISHED").then_some(run)
    })
    .await;
    let pairs = |key: &str| -> BTreeMap<String, Value> {
        run["run"]["data"][key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (p["key"].as_str().unwrap().to_string(), p["value"].clone()))
            .collect()
    };
    let params = pairs("params");
    assert_eq!(params["gpus"], "8");
    assert_eq!(params["nodes"], "2");
    assert_eq!(params["queue"], "research");
    // The fake nodes' GPU feature discovery label.
    assert_eq!(params["gpu_model"], "NVIDIA-H100-80GB-HBM3");
    let tags = pairs("tags");
    assert_eq!(tags["kestrel.job"], "resnet");
    assert_eq!(tags["kestrel.namespace"], ns);
    assert_eq!(tags["kestrel.outcome"], "Succeeded");
    assert!(tags["kestrel.nodes"].as_str().unwrap().contains("tracked-"));
    let metrics = pairs("metrics");
    for m in ["queue_wait_seconds", "gpu_hours", "restarts"] {
        assert!(metrics.contains_key(m), "metric {m} in {metrics:?}");
    }
    assert_eq!(metrics["restarts"], 0.0);
    assert!(metrics["gpu_hours"].as_f64().unwrap() > 0.0);
    let experiment = mlflow.api(&format!(
        "experiments/get?experiment_id={}",
        run["run"]["info"]["experiment_id"].as_str().unwrap()
    ));
    assert_eq!(experiment["experiment"]["name"], ns);
    assert!(kestrel.terminate(Duration::from_secs(20)));
    cleanup(&client, "tracked-", &[ns]).await;
}
