//! `TrainingJob` (`scheduling.kestrel.dev/v1alpha1`): a distributed PyTorch training run
//! that Kestrel starts, restarts and reports as one.
//!
//! The decisions live here, without I/O or clock, so that the live controller
//! (`kestrel_live::training`) and the simulator take the same ones: [`plan`] validates a
//! job and says which pods, Service and PodGroup it needs; [`reconcile`] reads the pods
//! that exist and says what to create or delete and what the status is.
//!
//! Restarts are of the whole gang: one failed or vanished pod deletes every pod of the
//! attempt, and the next attempt starts once they are all gone, counted against the job's
//! one `runPolicy.backoffLimit`. A pod's own `restartPolicy` is always `Never`; the
//! replica's `restartPolicy` says which failures are worth a restart (`ExitCode`: exit
//! codes 128-255 and evictions are, 1-127 are not).

use crate::crds::{PodGroup, PodGroupSpec, PodGroupTopology};
use crate::error::LoadError;
use crate::fields::Ctx;
use crate::gangs::{KESTREL_POD_GROUP_LABEL, KESTREL_ROLE_LABEL, RANK_ANNOTATION};
use crate::queues::KESTREL_QUEUE_LABEL;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, Pod, PodTemplateSpec, Service, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kestrel_core::{parse_quantity, GPU_RESOURCE};
use kube::CustomResource;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

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
fn pod_template(_: &mut SchemaGenerator) -> Schema {
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

fn one() -> i32 {
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

// ---- plan: validation and the objects a job needs ----------------------------------------

/// One role, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RolePlan {
    /// `Master` or `Worker`.
    pub name: String,
    pub replicas: u32,
    /// First rank of the role (Master 0, Worker 1).
    pub first_rank: u32,
    pub gpus_per_pod: i64,
    pub restart_policy: RestartPolicy,
    pub template: PodTemplateSpec,
}

/// What a valid job needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub roles: Vec<RolePlan>,
    pub nproc_per_node: u32,
    pub master_port: i32,
    pub scheduler_name: String,
    pub queue: Option<String>,
    pub topology: Option<PodGroupTopology>,
    pub backoff_limit: i32,
    pub active_deadline_seconds: Option<i64>,
    pub clean_pod_policy: CleanPodPolicy,
    pub ttl_seconds_after_finished: Option<i64>,
}

/// Volumes whose contents every pod must see alike (datasets, checkpoints); the others
/// (emptyDir, configMap, secret, projected, downwardAPI, ephemeral) are each pod's own.
fn shared_volume(volume: &Volume) -> Option<Value> {
    let mut source = serde_json::to_value(volume).ok()?;
    let map = source.as_object_mut()?;
    map.remove("name");
    let own = [
        "emptyDir",
        "configMap",
        "secret",
        "projected",
        "downwardAPI",
        "ephemeral",
    ];
    (!own.iter().any(|k| map.contains_key(*k))).then_some(source)
}

/// A role's shared-volume mounts: mount path -> (volume name, source, read-only).
fn shared_mounts(template: &PodTemplateSpec) -> BTreeMap<String, (String, Value, bool)> {
    let Some(spec) = template.spec.as_ref() else {
        return BTreeMap::new();
    };
    let volumes: BTreeMap<&str, Value> = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| Some((v.name.as_str(), shared_volume(v)?)))
        .collect();
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let mut out = BTreeMap::new();
    for mount in containers.flat_map(|c| c.volume_mounts.iter().flatten()) {
        let VolumeMount {
            name,
            mount_path,
            read_only,
            ..
        } = mount;
        if let Some(source) = volumes.get(name.as_str()) {
            out.insert(
                mount_path.clone(),
                (name.clone(), source.clone(), read_only.unwrap_or(false)),
            );
        }
    }
    out
}

/// GPUs one pod of the template requests (its containers' `nvidia.com/gpu` limits, else
/// requests).
fn gpus_per_pod(ctx: &Ctx, field: &str, template: &PodTemplateSpec) -> Result<i64, LoadError> {
    let Some(spec) = template.spec.as_ref() else {
        return Ok(0);
    };
    let mut total = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        let resources = c.resources.as_ref();
        let amount = resources
            .and_then(|r| r.limits.as_ref()?.get(GPU_RESOURCE))
            .or_else(|| resources.and_then(|r| r.requests.as_ref()?.get(GPU_RESOURCE)));
        if let Some(q) = amount {
            total += parse_quantity(&q.0, 1).map_err(|e| {
                ctx.err(
                    format!("{field}.spec.containers[{i}].resources.limits[{GPU_RESOURCE:?}]"),
                    format!("{e}; write a whole number of GPUs"),
                )
            })?;
        }
    }
    Ok(total)
}

/// Validates a job; the error names the field and the fix, and nothing may be created.
pub fn plan(path: &Path, job: &TrainingJob) -> Result<Plan, LoadError> {
    let namespace = job.metadata.namespace.clone().unwrap_or("default".into());
    let name = job.metadata.name.clone().unwrap_or_default();
    let ctx = Ctx {
        path,
        object: format!("TrainingJob {namespace}/{name}"),
    };
    let spec = &job.spec;
    // The pods are named `<job>-master-0`; the Service is the job's name (a DNS label).
    if name.is_empty() || name.len() > 50 {
        return Err(ctx.err(
            "metadata.name",
            "needs 1 to 50 characters: pod names add the role and index to it",
        ));
    }
    for role in spec.replica_specs.keys() {
        if role != MASTER && role != WORKER {
            return Err(ctx.err(
                format!("spec.replicaSpecs.{role}"),
                "unknown replica type; a TrainingJob has Master and Worker",
            ));
        }
    }
    let Some(master) = spec.replica_specs.get(MASTER) else {
        return Err(ctx.err(
            "spec.replicaSpecs",
            "no Master; add a Master replica spec (rank 0, replicas: 1)",
        ));
    };
    if master.replicas != 1 {
        return Err(ctx.err(
            "spec.replicaSpecs.Master.replicas",
            format!(
                "{} Masters; a TrainingJob has exactly 1 (rank 0), put the others in Worker",
                master.replicas
            ),
        ));
    }
    let mut roles = Vec::new();
    let mut first_rank = 0;
    for role in [MASTER, WORKER] {
        let Some(replica) = spec.replica_specs.get(role) else {
            continue;
        };
        let field = format!("spec.replicaSpecs.{role}");
        if replica.replicas < 1 {
            return Err(ctx.err(
                format!("{field}.replicas"),
                format!(
                    "{} replicas; set 1 or more, or remove the {role} replica spec",
                    replica.replicas
                ),
            ));
        }
        let has_containers = replica
            .template
            .spec
            .as_ref()
            .is_some_and(|s| !s.containers.is_empty());
        if !has_containers {
            return Err(ctx.err(
                format!("{field}.template.spec.containers"),
                "no containers; add the training container",
            ));
        }
        let gpus = gpus_per_pod(&ctx, &format!("{field}.template"), &replica.template)?;
        roles.push(RolePlan {
            name: role.to_string(),
            replicas: replica.replicas as u32,
            first_rank,
            gpus_per_pod: gpus,
            restart_policy: replica.restart_policy.unwrap_or(RestartPolicy::ExitCode),
            template: replica.template.clone(),
        });
        first_rank += replica.replicas as u32;
    }
    // Every pod runs the same number of processes on as many GPUs.
    let master_gpus = roles[0].gpus_per_pod;
    for role in &roles[1..] {
        if role.gpus_per_pod != master_gpus {
            return Err(ctx.err(
                format!("spec.replicaSpecs.{}.template.spec.containers", role.name),
                format!(
                    "{} GPUs per pod but the Master has {master_gpus}; every replica of a \
                     distributed run requests the same GPUs",
                    role.gpus_per_pod
                ),
            ));
        }
    }
    let nproc = match spec.nproc_per_node {
        Some(n) if n < 1 => {
            return Err(ctx.err(
                "spec.nprocPerNode",
                format!("{n}; set 1 or more processes per pod"),
            ))
        }
        Some(n) if master_gpus > 0 && i64::from(n) != master_gpus => {
            return Err(ctx.err(
                "spec.nprocPerNode",
                format!(
                    "{n} processes per pod but each pod requests {master_gpus} GPUs; set \
                     nprocPerNode to {master_gpus} (one process per GPU) or change the requests"
                ),
            ))
        }
        Some(n) => n as u32,
        None => master_gpus.max(1) as u32,
    };
    // A volume seen differently by two replicas corrupts the run (a checkpoint written by
    // rank 0 that the workers do not read back): compare every role with the Master.
    let master_mounts = shared_mounts(&roles[0].template);
    for role in &roles[1..] {
        let mounts = shared_mounts(&role.template);
        let here = format!("spec.replicaSpecs.{}.template.spec", role.name);
        for (path, (volume, source, read_only)) in &master_mounts {
            match mounts.get(path) {
                None => {
                    return Err(ctx.err(
                        format!("{here}.containers[].volumeMounts"),
                        format!(
                            "replica {} does not mount volume {volume:?} at {path:?} as the \
                             Master does; mount it there in every replica",
                            role.name
                        ),
                    ))
                }
                Some((other, other_source, _)) if other_source != source => {
                    return Err(ctx.err(
                        format!("{here}.volumes[{other:?}]"),
                        format!(
                            "replica {} mounts volume {other:?} at {path:?} but the Master \
                             mounts volume {volume:?} (a different source) there; use the \
                             same volume in every replica",
                            role.name
                        ),
                    ))
                }
                Some((other, _, other_ro)) if other_ro != read_only => {
                    let mode = |ro: bool| if ro { "read-only" } else { "read-write" };
                    return Err(ctx.err(
                        format!("{here}.containers[].volumeMounts"),
                        format!(
                            "replica {} mounts volume {other:?} at {path:?} {} but the Master \
                             mounts it {}; use the same readOnly in every replica",
                            role.name,
                            mode(*other_ro),
                            mode(*read_only)
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        if let Some((path, (volume, _, _))) =
            mounts.iter().find(|(p, _)| !master_mounts.contains_key(*p))
        {
            return Err(ctx.err(
                format!("{here}.containers[].volumeMounts"),
                format!(
                    "replica {} mounts volume {volume:?} at {path:?} but the Master does not; \
                     mount it there in every replica",
                    role.name
                ),
            ));
        }
    }
    if let Some(queue) = &spec.queue {
        if queue.is_empty() {
            return Err(ctx.err("spec.queue", "empty; name a LocalQueue or remove it"));
        }
    }
    if let Some(uri) = spec.mlflow.as_ref().and_then(|m| m.tracking_uri.as_deref()) {
        check_tracking_uri(uri).map_err(|why| ctx.err("spec.mlflow.trackingUri", why))?;
    }
    let policy = &spec.run_policy;
    Ok(Plan {
        namespace,
        name,
        uid: job.metadata.uid.clone().unwrap_or_default(),
        roles,
        nproc_per_node: nproc,
        master_port: spec.master_port.unwrap_or(DEFAULT_MASTER_PORT),
        scheduler_name: spec.scheduler_name.clone().unwrap_or("kestrel".into()),
        queue: spec.queue.clone(),
        topology: spec.topology.clone(),
        backoff_limit: policy.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT).max(0),
        active_deadline_seconds: policy.active_deadline_seconds,
        clean_pod_policy: policy.clean_pod_policy.unwrap_or(CleanPodPolicy::Running),
        ttl_seconds_after_finished: policy.ttl_seconds_after_finished,
    })
}

/// An MLflow tracking URI Kestrel can talk to: `http://host[:port][/prefix]`.
pub fn check_tracking_uri(uri: &str) -> Result<(), String> {
    let rest = uri.strip_prefix("http://").ok_or_else(|| {
        format!("{uri:?} is not an http:// URL; write http://HOST:PORT (https is not supported)")
    })?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("{uri:?} names no host; write http://HOST:PORT"));
    }
    if let Some((_, port)) = host.rsplit_once(':') {
        if port.parse::<u16>().is_err() {
            return Err(format!(
                "{uri:?}: {port:?} is not a port; write http://HOST:PORT"
            ));
        }
    }
    Ok(())
}

impl Plan {
    pub fn pods(&self) -> u32 {
        self.roles.iter().map(|r| r.replicas).sum()
    }

    pub fn gpus(&self) -> i64 {
        self.roles
            .iter()
            .map(|r| r.gpus_per_pod * i64::from(r.replicas))
            .sum()
    }

    /// The pod name of a role's `index`th replica.
    pub fn pod_name(&self, role: &str, index: u32) -> String {
        format!("{}-{}-{index}", self.name, role.to_ascii_lowercase())
    }

    /// Every pod of the job: (role, index).
    pub fn members(&self) -> Vec<(String, u32)> {
        self.roles
            .iter()
            .flat_map(|r| (0..r.replicas).map(|i| (r.name.clone(), i)))
            .collect()
    }

    /// The master pod's DNS name through the headless Service.
    pub fn master_addr(&self) -> String {
        format!(
            "{}.{}.{}.svc",
            self.pod_name(MASTER, 0),
            self.name,
            self.namespace
        )
    }

    fn owner(&self) -> OwnerReference {
        OwnerReference {
            api_version: crate::crds::API_VERSION.into(),
            kind: "TrainingJob".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// The rendezvous variables of a pod: what torchrun and plain `torch.distributed`
    /// scripts read.
    pub fn env(&self, role: &str, index: u32) -> Vec<(String, String)> {
        let rank = self
            .roles
            .iter()
            .find(|r| r.name == role)
            .map_or(0, |r| r.first_rank + index);
        let nodes = self.pods();
        let port = self.master_port.to_string();
        let addr = self.master_addr();
        [
            ("MASTER_ADDR", addr.clone()),
            ("MASTER_PORT", port.clone()),
            ("WORLD_SIZE", (nodes * self.nproc_per_node).to_string()),
            ("RANK", rank.to_string()),
            ("PET_NNODES", nodes.to_string()),
            ("PET_NPROC_PER_NODE", self.nproc_per_node.to_string()),
            ("PET_NODE_RANK", rank.to_string()),
            ("PET_MASTER_ADDR", addr),
            ("PET_MASTER_PORT", port),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// The gang: all pods at once, each role at least its replicas.
    pub fn pod_group(&self) -> PodGroup {
        let mut pg = PodGroup::new(
            &self.name,
            PodGroupSpec {
                min_member: self.pods() as i32,
                min_task_member: self
                    .roles
                    .iter()
                    .map(|r| (r.name.to_ascii_lowercase(), r.replicas as i32))
                    .collect(),
                topology: self.topology.clone(),
                ..Default::default()
            },
        );
        pg.metadata.namespace = Some(self.namespace.clone());
        pg.metadata.owner_references = Some(vec![self.owner()]);
        pg.metadata.labels = Some([(JOB_LABEL.to_string(), self.name.clone())].into());
        pg
    }

    /// The headless Service that gives each pod a DNS name (`<pod>.<job>.<namespace>.svc`).
    pub fn service(&self) -> Service {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {JOB_LABEL: self.name},
                         "ownerReferences": [self.owner()]},
            "spec": {
                "clusterIP": "None",
                // Rendezvous happens before any pod is ready.
                "publishNotReadyAddresses": true,
                "selector": {JOB_LABEL: self.name},
                "ports": [{"name": "rendezvous", "port": self.master_port, "targetPort": self.master_port}],
            },
        }))
        .expect("a Service")
    }

    /// A role's `index`th pod of `attempt`; `extra_env` (MLflow's) goes into every
    /// container after the rendezvous variables.
    pub fn pod(&self, role: &str, index: u32, attempt: i32, extra_env: &[(String, String)]) -> Pod {
        let plan = self
            .roles
            .iter()
            .find(|r| r.name == role)
            .expect("a role of the plan");
        let name = self.pod_name(role, index);
        let template = &plan.template;
        let mut meta = template.metadata.clone().unwrap_or_default();
        let labels = meta.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(JOB_LABEL.into(), self.name.clone());
        labels.insert(ATTEMPT_LABEL.into(), attempt.to_string());
        labels.insert(KESTREL_POD_GROUP_LABEL.into(), self.name.clone());
        labels.insert(KESTREL_ROLE_LABEL.into(), role.to_ascii_lowercase());
        if let Some(queue) = &self.queue {
            labels.insert(KESTREL_QUEUE_LABEL.into(), queue.clone());
        }
        let rank = plan.first_rank + index;
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(RANK_ANNOTATION.into(), rank.to_string());
        meta.name = Some(name.clone());
        meta.namespace = Some(self.namespace.clone());
        meta.generate_name = None;
        meta.owner_references = Some(vec![self.owner()]);
        let mut spec = template.spec.clone().unwrap_or_default();
        spec.scheduler_name = Some(self.scheduler_name.clone());
        spec.restart_policy = Some("Never".into());
        spec.hostname = Some(name);
        spec.subdomain = Some(self.name.clone());
        let mut env = self.env(role, index);
        env.extend(extra_env.iter().cloned());
        for c in &mut spec.containers {
            set_env(c, &env);
        }
        Pod {
            metadata: meta,
            spec: Some(spec),
            status: None,
        }
    }
}

/// Sets the variables on a container, replacing the template's own of the same name.
fn set_env(container: &mut Container, env: &[(String, String)]) {
    let vars = container.env.get_or_insert_with(Vec::new);
    vars.retain(|v| !env.iter().any(|(k, _)| *k == v.name));
    vars.extend(env.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        value_from: None,
    }));
}

// ---- reconcile: what to do next --------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
}

/// A pod of the job as the controller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedPod {
    pub name: String,
    pub attempt: i32,
    pub role: String,
    pub phase: PodPhase,
    pub bound: bool,
    /// Being deleted.
    pub deleting: bool,
    /// The failure: (container, exit code) of the first container that exited non-zero.
    pub exit: Option<(String, i32)>,
    /// `status.reason` (`Evicted`, `Preempted`, ...) of a failed pod.
    pub reason: Option<String>,
}

impl ObservedPod {
    /// Reads a pod the job labelled; `None` for others.
    pub fn read(pod: &Pod, job: &str) -> Option<ObservedPod> {
        let labels = pod.metadata.labels.as_ref()?;
        if labels.get(JOB_LABEL).map(String::as_str) != Some(job) {
            return None;
        }
        let attempt = labels.get(ATTEMPT_LABEL)?.parse().ok()?;
        let role = match labels.get(KESTREL_ROLE_LABEL)?.as_str() {
            "master" => MASTER,
            _ => WORKER,
        };
        let status = pod.status.as_ref();
        let phase = match status.and_then(|s| s.phase.as_deref()) {
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            _ => PodPhase::Pending,
        };
        let exit = status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .find_map(|c| {
                let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                (code != 0).then(|| (c.name.clone(), code))
            });
        Some(ObservedPod {
            name: pod.metadata.name.clone()?,
            attempt,
            role: role.into(),
            phase,
            bound: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some(),
            deleting: pod.metadata.deletion_timestamp.is_some(),
            exit,
            reason: status.and_then(|s| s.reason.clone()),
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create these (role, index) pods of the current attempt (and the Service and
    /// PodGroup, if missing).
    CreatePods(Vec<(String, u32)>),
    DeletePods(Vec<String>),
    /// `ttlSecondsAfterFinished` passed.
    DeleteJob,
}

/// An event to record on the job: (type `Normal`/`Warning`, reason, note).
pub type JobEvent = (&'static str, &'static str, String);

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub actions: Vec<Action>,
    pub status: TrainingJobStatus,
    pub events: Vec<JobEvent>,
    /// The job just finished (Succeeded or Failed): the tracking run is closed.
    pub finished: bool,
    /// The gang restarted in this step.
    pub restarted: bool,
}

/// The states, in the order a job goes through them.
pub const STATES: [&str; 6] = [
    "Created",
    "Queued",
    "Running",
    "Restarting",
    "Succeeded",
    "Failed",
];

/// Sets the current state: its condition True, the other states' False (times kept when
/// unchanged).
pub fn set_state(
    status: &mut TrainingJobStatus,
    state: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    status.state = Some(state.to_string());
    for s in STATES {
        let on = s == state;
        let (reason, message) = if on { (reason, message) } else { ("", "") };
        set_condition(status, s, on, reason, message, now);
    }
}

/// Sets one condition; its transition time moves only when its status does.
pub fn set_condition(
    status: &mut TrainingJobStatus,
    kind: &str,
    on: bool,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let value = if on { "True" } else { "False" };
    let given = reason;
    let reason = if reason.is_empty() { kind } else { reason };
    // States never entered are not listed as False.
    if !on && given.is_empty() && !status.conditions.iter().any(|c| c.type_ == kind) {
        return;
    }
    match status.conditions.iter_mut().find(|c| c.type_ == kind) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Time(now);
            }
            c.status = value.into();
            // A state left (no reason given) keeps why it was entered: the last
            // restart's cause stays readable.
            if !given.is_empty() {
                c.reason = reason.into();
                c.message = message.into();
            }
        }
        None => status.conditions.push(Condition {
            type_: kind.into(),
            status: value.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
}

pub fn is_finished(status: &TrainingJobStatus) -> bool {
    matches!(status.state.as_deref(), Some("Succeeded" | "Failed"))
}

/// Whether a failure restarts the gang (else it fails the job): evictions always do;
/// `ExitCode`: codes 128-255 (killed by a signal) do, 1-127 (the program's own error) do
/// not; a failure without an exit code (a lost node) does.
pub fn retryable(policy: RestartPolicy, exit: Option<i32>, evicted: bool) -> bool {
    if evicted {
        return true;
    }
    match policy {
        RestartPolicy::OnFailure | RestartPolicy::Always => true,
        RestartPolicy::Never => false,
        RestartPolicy::ExitCode => exit.is_none_or(|c| !(1..=127).contains(&c)),
    }
}

fn secs(t: &Time, now: Timestamp) -> i64 {
    now.as_second() - t.0.as_second()
}

/// The next step for a job: `status` as it stands, `pods` all the pods carrying its label,
/// `waiting` the scheduler's explanation of why the gang is not placed (from its
/// PodGroup), `now` the clock.
pub fn reconcile(
    plan: &Plan,
    status: &TrainingJobStatus,
    pods: &[ObservedPod],
    waiting: Option<&str>,
    now: Timestamp,
) -> Decision {
    let mut next = status.clone();
    let mut d = Decision {
        actions: Vec::new(),
        status: TrainingJobStatus::default(),
        events: Vec::new(),
        finished: false,
        restarted: false,
    };
    let attempt = status.restarts;
    let current: Vec<&ObservedPod> = pods.iter().filter(|p| p.attempt == attempt).collect();
    next.replica_statuses = replica_statuses(plan, &current);

    if is_finished(status) {
        let done = status.completion_time.as_ref().map_or(0, |t| secs(t, now));
        if plan
            .ttl_seconds_after_finished
            .is_some_and(|ttl| done >= ttl)
        {
            d.actions.push(Action::DeleteJob);
        } else {
            let clean: Vec<String> = pods
                .iter()
                .filter(|p| !p.deleting)
                .filter(|p| match plan.clean_pod_policy {
                    CleanPodPolicy::All => true,
                    CleanPodPolicy::Running => {
                        matches!(p.phase, PodPhase::Pending | PodPhase::Running)
                    }
                    CleanPodPolicy::None => false,
                })
                .map(|p| p.name.clone())
                .collect();
            if !clean.is_empty() {
                d.actions.push(Action::DeletePods(clean));
            }
        }
        d.status = next;
        return d;
    }

    // Pods of an earlier attempt go first; the next attempt starts once they are gone,
    // so that no two attempts hold GPUs or rendezvous at once.
    let stale: Vec<String> = pods
        .iter()
        .filter(|p| p.attempt != attempt && !p.deleting)
        .map(|p| p.name.clone())
        .collect();
    if pods.iter().any(|p| p.attempt != attempt) {
        if !stale.is_empty() {
            d.actions.push(Action::DeletePods(stale));
        }
        d.status = next;
        return d;
    }

    let finish = |next: &mut TrainingJobStatus,
                  d: &mut Decision,
                  state: &str,
                  reason: &str,
                  message: String| {
        set_state(next, state, reason, &message, now);
        next.completion_time = Some(Time(now));
        next.waiting_reason = None;
        d.finished = true;
        let kind = if state == "Succeeded" {
            "Normal"
        } else {
            "Warning"
        };
        let reason: &'static str = match reason {
            "Succeeded" => "Succeeded",
            "BackoffLimitExceeded" => "BackoffLimitExceeded",
            "DeadlineExceeded" => "DeadlineExceeded",
            _ => "PermanentFailure",
        };
        d.events.push((kind, reason, message));
    };
    let clean = |d: &mut Decision, pods: &[&ObservedPod], all: bool| {
        let names: Vec<String> = pods
            .iter()
            .filter(|p| !p.deleting)
            .filter(|p| all || matches!(p.phase, PodPhase::Pending | PodPhase::Running))
            .map(|p| p.name.clone())
            .collect();
        if !names.is_empty() {
            d.actions.push(Action::DeletePods(names));
        }
    };
    let clean_all = plan.clean_pod_policy == CleanPodPolicy::All;
    let clean_some = plan.clean_pod_policy != CleanPodPolicy::None;

    // The master's success is the job's (workers may still be winding down).
    if current
        .iter()
        .any(|p| p.role == MASTER && p.phase == PodPhase::Succeeded)
    {
        finish(
            &mut next,
            &mut d,
            "Succeeded",
            "Succeeded",
            format!("the Master finished after {attempt} restart(s)"),
        );
        if clean_some {
            clean(&mut d, &current, clean_all);
        }
        d.status = next;
        return d;
    }

    if let (Some(deadline), Some(start)) = (plan.active_deadline_seconds, &status.start_time) {
        if secs(start, now) >= deadline {
            finish(
                &mut next,
                &mut d,
                "Failed",
                "DeadlineExceeded",
                format!("running longer than runPolicy.activeDeadlineSeconds ({deadline}s)"),
            );
            if clean_some {
                clean(&mut d, &current, clean_all);
            }
            d.status = next;
            return d;
        }
    }

    // A failed pod, or one of a fully created attempt that vanished (evicted, preempted,
    // deleted by hand).
    let created = status.created_attempt == Some(attempt);
    let failed = current.iter().find(|p| p.phase == PodPhase::Failed);
    let missing: Vec<(String, u32)> = plan
        .members()
        .into_iter()
        .filter(|(role, i)| {
            let name = plan.pod_name(role, *i);
            !current.iter().any(|p| p.name == name)
        })
        .collect();
    let lost = created && !missing.is_empty();
    let deleting = current
        .iter()
        .find(|p| p.deleting && p.phase != PodPhase::Succeeded);
    if failed.is_some() || lost || (created && deleting.is_some()) {
        let (retry, why) = match failed {
            Some(p) => {
                let evicted = p.reason.as_deref().is_some_and(|r| {
                    matches!(
                        r,
                        "Evicted" | "Preempted" | "Shutdown" | "Terminated" | "DeadlineExceeded"
                    )
                });
                let policy = plan
                    .roles
                    .iter()
                    .find(|r| r.name == p.role)
                    .map_or(RestartPolicy::ExitCode, |r| r.restart_policy);
                let code = p.exit.as_ref().map(|(_, c)| *c);
                let why = match (&p.exit, &p.reason) {
                    (Some((c, code)), _) => {
                        format!(
                            "pod {} failed: container {c} exited with code {code}",
                            p.name
                        )
                    }
                    (None, Some(r)) => format!("pod {} failed: {r}", p.name),
                    (None, None) => format!("pod {} failed", p.name),
                };
                (retryable(policy, code, evicted), why)
            }
            None => {
                let name = match deleting {
                    Some(p) => p.name.clone(),
                    None => plan.pod_name(&missing[0].0, missing[0].1),
                };
                (true, format!("pod {name} was deleted or evicted"))
            }
        };
        if !retry {
            finish(
                &mut next,
                &mut d,
                "Failed",
                "PermanentFailure",
                format!("{why} (1-127: the program's own error, not retried); fix it and submit the job again"),
            );
            if clean_some {
                clean(&mut d, &current, clean_all);
            }
        } else if attempt >= plan.backoff_limit {
            finish(
                &mut next,
                &mut d,
                "Failed",
                "BackoffLimitExceeded",
                format!(
                    "{why}; the gang restarted {attempt} time(s), runPolicy.backoffLimit is {}",
                    plan.backoff_limit
                ),
            );
            if clean_some {
                clean(&mut d, &current, clean_all);
            }
        } else {
            next.restarts = attempt + 1;
            next.waiting_reason = None;
            let message = format!(
                "{why}; restarting the whole gang (restart {} of {})",
                attempt + 1,
                plan.backoff_limit
            );
            set_state(&mut next, "Restarting", "GangRestart", &message, now);
            d.events.push(("Warning", "Restarting", message));
            d.restarted = true;
            let names: Vec<String> = current
                .iter()
                .filter(|p| !p.deleting)
                .map(|p| p.name.clone())
                .collect();
            if !names.is_empty() {
                d.actions.push(Action::DeletePods(names));
            }
        }
        d.status = next;
        return d;
    }

    if !missing.is_empty() {
        if next.start_time.is_none() {
            next.start_time = Some(Time(now));
        }
        if status.state.is_none() {
            let message = format!("creating {} pod(s) of one gang", plan.pods());
            set_state(&mut next, "Created", "PodsCreated", &message, now);
            d.events.push(("Normal", "Created", message));
        }
        next.created_attempt = Some(attempt);
        d.actions.push(Action::CreatePods(missing));
        d.status = next;
        return d;
    }

    let all_running = current.iter().all(|p| p.phase == PodPhase::Running);
    if all_running {
        if status.state.as_deref() != Some("Running") {
            let message = format!("all {} pods running (attempt {attempt})", plan.pods());
            set_state(&mut next, "Running", "GangRunning", &message, now);
            d.events.push(("Normal", "Running", message));
        }
        if next.running_time.is_none() {
            next.running_time = Some(Time(now));
        }
        next.waiting_reason = None;
    } else if current.iter().any(|p| !p.bound) {
        let reason = waiting.unwrap_or("waiting for the scheduler to place the gang");
        if status.state.as_deref() != Some("Queued")
            || status.waiting_reason.as_deref() != Some(reason)
        {
            set_state(&mut next, "Queued", "WaitingForGang", reason, now);
        }
        next.waiting_reason = Some(reason.to_string());
    } else {
        next.waiting_reason = None;
    }
    d.status = next;
    d
}

fn replica_statuses(plan: &Plan, pods: &[&ObservedPod]) -> BTreeMap<String, ReplicaStatus> {
    plan.roles
        .iter()
        .map(|r| {
            let mut s = ReplicaStatus::default();
            for p in pods.iter().filter(|p| p.role == r.name) {
                match p.phase {
                    PodPhase::Pending => s.pending += 1,
                    PodPhase::Running => s.running += 1,
                    PodPhase::Succeeded => s.succeeded += 1,
                    PodPhase::Failed => s.failed += 1,
                }
            }
            (r.name.clone(), s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

#[cfg(test)]
mod example_tests {
    use super::*;

    /// The example of docs/concepts/training-jobs.md (examples/training/bert.yaml) is a valid job.
    #[test]
    fn the_example_job_plans() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/training/bert.yaml");
        let text = std::fs::read_to_string(&path).expect("the example");
        let job: TrainingJob = serde_saphyr::from_str(&text).expect("a TrainingJob");
        let p = plan(&path, &job).unwrap();
        assert_eq!((p.pods(), p.gpus(), p.nproc_per_node), (4, 32, 8));
        assert_eq!(p.queue.as_deref(), Some("research"));
        assert_eq!(p.env(WORKER, 2)[3], ("RANK".to_string(), "3".to_string()));
    }
}
