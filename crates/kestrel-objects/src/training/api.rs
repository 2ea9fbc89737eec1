//! The TrainingJob CRD: its spec, status and the labels its pods carry.

use crate::crds::PodGroupTopology;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Labels every pod of a job carries: the job's name and the attempt it belongs to.
pub const JOB_LABEL: &str = "kestrel.dev/training-job";
pub const ATTEMPT_LABEL: &str = "kestrel.dev/training-attempt";
/// `MASTER_PORT` when the job does not set `masterPort` (PyTorchJob's default).
pub const DEFAULT_MASTER_PORT: i32 = 23456;
/// Attempts after the first when `runPolicy.backoffLimit` is not set.
pub const DEFAULT_BACKOFF_LIMIT: i32 = 3;
pub const MASTER: &str = "Master";
pub const WORKER: &str = "Worker";

/// A pod template, kept whole: the API server validates it when the pods are created,
/// Kestrel checks what a distributed run needs (GPUs, volumes) before that.
pub(super) fn pod_template(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A distributed training run: one Master (rank 0) and Workers, started as one gang,
/// restarted as one, and recorded as one MLflow run when tracking is configured.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "scheduling.kestrel.dev",
    version = "v1alpha1",
    kind = "TrainingJob",
    plural = "trainingjobs",
    namespaced,
    status = "TrainingJobStatus",
    shortname = "tj",
    derive = "PartialEq",
    doc = "A distributed training run started, restarted and reported as one gang (Kestrel).",
    printcolumn = r#"{"name": "State", "type": "string", "jsonPath": ".status.state"}"#,
    printcolumn = r#"{"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TrainingJobSpec {
    /// `Master` (exactly one replica, rank 0) and `Worker`.
    pub replica_specs: BTreeMap<String, ReplicaSpec>,
    /// Processes torchrun starts per pod (`PET_NPROC_PER_NODE`); default: the pod's GPUs,
    /// else 1. When the pods request GPUs it must equal their count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub nproc_per_node: Option<i32>,
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// The LocalQueue (Kestrel's) of the job's namespace it is admitted from; it must exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Where the gang must or should land (as a PodGroup's `topology`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<PodGroupTopology>,
    /// The scheduler (and so the `kestrel serve` whose controller runs the job); default
    /// `kestrel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// `MASTER_PORT`; default 23456.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub master_port: Option<i32>,
    /// MLflow tracking for this job, over the cluster-wide `--mlflow-tracking-uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow: Option<MlflowSpec>,
}

/// One role's pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    #[schemars(schema_with = "pod_template")]
    pub template: PodTemplateSpec,
    /// Which failures of this role restart the gang; default `ExitCode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

pub(super) fn one() -> i32 {
    1
}

/// Which failures restart the whole gang (the others fail the job).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RestartPolicy {
    /// Exit codes 128-255 (signals: OOM kill, SIGTERM) and evictions restart; 1-127 fail.
    ExitCode,
    /// Every failure restarts.
    OnFailure,
    /// As `OnFailure` (a succeeded pod is not rerun on its own).
    Always,
    /// No failure restarts; an eviction still does (the pod did not fail).
    Never,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Gang restarts allowed before the job fails; default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,
    /// The job fails this long after its first pods were created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// Pods deleted when the job finishes; default `Running`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,
    /// The TrainingJob (and with it its pods, Service and PodGroup) is deleted this long
    /// after it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CleanPodPolicy {
    /// Every pod.
    All,
    /// Pods still pending or running (their GPUs are freed; finished pods keep their logs).
    Running,
    /// None.
    None,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MlflowSpec {
    /// `http://host:port` of the tracking server; default: `kestrel serve
    /// --mlflow-tracking-uri`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking_uri: Option<String>,
    /// Experiment of the run (created if missing); default: the job's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment_name: Option<String>,
}

/// Where a job stands.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainingJobStatus {
    /// The latest of Created, Queued, Running, Restarting, Succeeded, Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `Created`, `Queued`, `Running`, `Restarting`, `Succeeded`, `Failed` (True for the
    /// current state), and `Tracking` (False with the reason when MLflow is unreachable).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Per role (`Master`, `Worker`): pods pending, running, succeeded, failed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replica_statuses: BTreeMap<String, ReplicaStatus>,
    /// Gang restarts so far; also the attempt the current pods belong to.
    #[serde(default)]
    pub restarts: i32,
    /// The attempt whose pods were all created (a pod of it that vanishes was evicted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_attempt: Option<i32>,
    /// Why the gang is not running yet, as the scheduler explains it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_reason: Option<String>,
    /// When the first pods were created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the whole gang first ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The MLflow run the job is recorded in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlflow_run_id: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    #[serde(default)]
    pub pending: i32,
    #[serde(default)]
    pub running: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
}
