//! Validation of a TrainingJob and the pods, Service and PodGroup it needs.

use super::*;
use crate::crds::{PodGroup, PodGroupSpec, PodGroupTopology};
use crate::error::LoadError;
use crate::fields::Ctx;
use crate::gangs::{KESTREL_POD_GROUP_LABEL, KESTREL_ROLE_LABEL, RANK_ANNOTATION};
use crate::queues::KESTREL_QUEUE_LABEL;
use crate::shared_volumes::{shared_mounts, SharedMount};
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kestrel_core::{parse_quantity, GPU_RESOURCE};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

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

/// GPUs one pod of the template requests (its containers' `nvidia.com/gpu` limits, else
/// requests).
pub(super) fn gpus_per_pod(
    ctx: &Ctx,
    field: &str,
    template: &PodTemplateSpec,
) -> Result<i64, LoadError> {
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
        for (path, master) in &master_mounts {
            let (volume, source, read_only) = (&master.volume, &master.source, &master.read_only);
            match mounts
                .get(path)
                .map(|m| (&m.volume, &m.source, &m.read_only))
            {
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
        if let Some((path, SharedMount { volume, .. })) =
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
pub(super) fn set_env(container: &mut Container, env: &[(String, String)]) {
    let vars = container.env.get_or_insert_with(Vec::new);
    vars.retain(|v| !env.iter().any(|(k, _)| *k == v.name));
    vars.extend(env.iter().map(|(k, v)| EnvVar {
        name: k.clone(),
        value: Some(v.clone()),
        value_from: None,
    }));
}
