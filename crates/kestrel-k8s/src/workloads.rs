//! A workload is what the user submitted: a queued Job, StatefulSet or ReplicaSet is admitted
//! whole against its queue's quota, as Kueue admits it, not pod by pod.
//!
//! Kestrel gives such an object's pods an implied gang ([`queued_workload`]): all of its
//! pods at once (`parallelism`, at most the completions left, or `replicas`), or down to
//! Kueue's partial-admission minimum [`KUEUE_MIN_PARALLELISM_ANNOTATION`] on a Job. Once
//! started the workload stays admitted ([`GangSpec::keeps_admission`]): its next pods (the
//! Job's later completions, replacements) start as they fit. Pods that name a gang
//! themselves (a PodGroup, Kueue's pod-group labels) keep it, and a Deployment's pods stay
//! one workload each, as in Kueue. Unqueued objects are not grouped: without a queue there
//! is no quota to admit against.
//!
//! A PyTorchJob, Volcano Job or JobSet is one gang over its roles ([`role_workload`]),
//! queued or not: its roles must start together to train at all. Live, their pods find
//! their owner by its controller reference or JobSet's labels ([`controlling_owner`]).
//!
//! Kueue shrinks a partially admitted Job to the count it admitted; Kestrel does not edit
//! the Job, so the pods left over wait and start as quota and room free up.

use crate::fields::Ctx;
use crate::queues::{queue_name, VOLCANO_QUEUE_ANNOTATION};
use crate::LoadError;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kestrel_core::GangSpec;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Kueue's partial admission: a Job may start with this many pods when its parallelism
/// does not fit the quota.
pub const KUEUE_MIN_PARALLELISM_ANNOTATION: &str = "kueue.x-k8s.io/job-min-parallelism";

/// The kinds whose pods are one workload when queued.
pub const WHOLE_WORKLOAD_KINDS: [&str; 3] = ["Job", "StatefulSet", "ReplicaSet"];

/// Other projects' multi-role kinds whose pods the live scheduler groups by their owner:
/// (kind, API group, version read, plural). Volcano's Jobs are not among them: Volcano's
/// controller gives every Job a PodGroup, which the pods name.
pub const LIVE_ROLE_OWNER_KINDS: [(&str, &str, &str, &str); 2] = [
    ("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs"),
    ("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets"),
];

/// Every kind the live scheduler reads as the owner of a workload's pods.
pub const LIVE_OWNER_KINDS: [&str; 5] =
    ["Job", "StatefulSet", "ReplicaSet", "PyTorchJob", "JobSet"];

/// The label JobSet's controller puts on its Jobs and their pods: the JobSet's name.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";
/// The label JobSet's controller puts on its pods: their replicated Job (a role).
pub const JOBSET_ROLE_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// The label Kubeflow's training operator puts on a PyTorchJob's pods: their replica type
/// (a role), in lower case.
pub const KUBEFLOW_ROLE_LABEL: &str = "training.kubeflow.org/replica-type";

/// The implied gang's name for an object: Kueue's workload naming, `job-<name>`.
pub fn workload_gang_name(kind: &str, name: &str) -> String {
    format!("{}-{name}", kind.to_ascii_lowercase())
}

/// The gang a queued object of `kind` implies for its `pods` pods (`None` for kinds whose
/// pods are workloads of their own). `annotations`: the object's;
/// `pod_management_policy`: a StatefulSet's `spec.podManagementPolicy`.
///
/// A StatefulSet's controller creates its pods one at a time, each once the one before it
/// is ready (`OrderedReady`, the default): a gang waiting for all of them would wait for
/// ever. As Kueue does (fast admission), its queue admits it for all its replicas when
/// its first pod comes, and its pods start as they come. A `Parallel` one's pods come
/// together and start together.
pub fn queued_workload(
    ctx: &Ctx,
    kind: &str,
    namespace: &str,
    name: &str,
    pods: u32,
    pod_management_policy: Option<&str>,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<GangSpec>, LoadError> {
    if !WHOLE_WORKLOAD_KINDS.contains(&kind) || pods == 0 {
        return Ok(None);
    }
    let one_by_one = kind == "StatefulSet"
        && match pod_management_policy {
            None | Some("OrderedReady") => true,
            Some("Parallel") => false,
            Some(other) => {
                return Err(ctx.err(
                    "spec.podManagementPolicy",
                    format!(
                        "{other:?} is not a pod management policy; write OrderedReady (the \
                         default: pods one at a time) or Parallel"
                    ),
                ))
            }
        };
    let field = format!("metadata.annotations[{KUEUE_MIN_PARALLELISM_ANNOTATION:?}]");
    let min_member = match annotations.get(KUEUE_MIN_PARALLELISM_ANNOTATION) {
        Some(_) if kind != "Job" => {
            return Err(ctx.err(
                field,
                format!(
                    "partial admission is for Jobs; a {kind} is admitted with all its \
                     replicas: remove the annotation"
                ),
            ))
        }
        Some(value) => match value.trim().parse::<u32>() {
            Ok(min) if (1..=pods).contains(&min) => min,
            _ => {
                return Err(ctx.err(
                    field,
                    format!(
                        "{value:?} is not a pod count from 1 to the Job's parallelism \
                         ({pods}); set one in that range or remove it"
                    ),
                ))
            }
        },
        None => pods,
    };
    Ok(Some(GangSpec {
        namespace: namespace.to_string(),
        name: workload_gang_name(kind, name),
        min_member: if one_by_one { 1 } else { min_member },
        total: Some(pods),
        keeps_admission: true,
        fast_admission: one_by_one,
        ..Default::default()
    }))
}

/// A Job the live scheduler sees: the LocalQueue it names (on the Job, else its pod
/// template) and the gang its pods form; `Ok(None)` when it names no queue.
///
/// Its pods are the ones it still runs at once: `parallelism`, at most the completions not
/// yet succeeded, so that a scheduler that restarts midway does not wait for pods the Job
/// will never create.
fn queued_job(path: &Path, job: &Job) -> Result<Option<(String, GangSpec)>, LoadError> {
    let namespace = job
        .metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    let name = job.metadata.name.as_deref().unwrap_or_default();
    // A JobSet's Jobs are parts of its workload, as in Kueue.
    if controller_kind(&job.metadata) == Some("JobSet") {
        return Ok(None);
    }
    let spec = job.spec.as_ref();
    let queue = queue_name(&[
        Some(&job.metadata),
        spec.and_then(|s| s.template.metadata.as_ref()),
    ]);
    let Some(queue) = queue else {
        return Ok(None);
    };
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1).max(0);
    let succeeded = job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
    let left = spec
        .and_then(|s| s.completions)
        .map_or(parallelism, |c| (c - succeeded).max(0));
    let ctx = Ctx {
        path,
        object: format!("Job {namespace}/{name}"),
    };
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    let count = |v: i32| u32::try_from(v.max(1)).unwrap_or(u32::MAX);
    // The minimum is checked against the parallelism the user wrote, then shrinks with
    // the completions left (never to 0: pods may still be finishing).
    let mut gang = queued_workload(
        &ctx,
        "Job",
        namespace,
        name,
        count(parallelism),
        None,
        &annotations,
    )?
    .expect("a Job with pods implies a gang");
    let pods = count(parallelism.min(left));
    gang.total = Some(pods);
    gang.min_member = gang.min_member.min(pods);
    Ok(Some((queue.to_string(), gang)))
}

/// One role of a workload of several pod templates: `pods` at once until `completions`.
#[derive(Debug, Clone)]
pub struct Role {
    pub name: String,
    pub pods: u32,
    pub completions: u32,
    pub template: PodTemplateSpec,
    /// Field path of the template, for errors (`spec.pytorchReplicaSpecs.Worker.template`).
    pub field: String,
}

/// A workload of several roles: a Kubeflow `PyTorchJob` or Kestrel `TrainingJob` (Master
/// and Worker), a Volcano
/// `Job` (its tasks) or a `JobSet` (its replicated Jobs). Its pods are one gang over all
/// roles: all of them (a Volcano Job: its `minAvailable`), each role at least its own
/// minimum (its replicas; a Volcano task: its `minAvailable`).
#[derive(Debug, Clone)]
pub struct RoleWorkload {
    pub roles: Vec<Role>,
    pub gang: GangSpec,
}

/// The multi-role kinds, by (API group, kind).
pub const ROLE_WORKLOAD_KINDS: [(&str, &str); 4] = [
    ("kubeflow.org", "PyTorchJob"),
    (crate::crds::GROUP, "TrainingJob"),
    ("batch.volcano.sh", "Job"),
    ("jobset.x-k8s.io", "JobSet"),
];

/// The JobSet annotation that gives each child Job a topology domain of its own.
pub const JOBSET_EXCLUSIVE_ANNOTATION: &str = "alpha.jobset.sigs.k8s.io/exclusive-topology";
/// The label JobSet puts on a child Job's pods, unique to the Job.
pub const JOBSET_JOB_KEY_LABEL: &str = "jobset.sigs.k8s.io/job-key";

/// A pod template with what JobSet's and LeaderWorkerSet's webhooks add for exclusive
/// placement on `topology`: `key` as the value of `label`, a required affinity to the pods
/// with the same value and a required anti-affinity to those with another, both over
/// `topology`.
pub fn exclusive_template(
    mut template: PodTemplateSpec,
    label: &str,
    key: &str,
    topology: &str,
) -> PodTemplateSpec {
    use k8s_openapi::api::core::v1::{Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    let requirement = |operator: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
        key: label.to_string(),
        operator: operator.to_string(),
        values,
    };
    let term = |requirements: Vec<LabelSelectorRequirement>| PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_expressions: Some(requirements),
            match_labels: None,
        }),
        topology_key: topology.to_string(),
        ..Default::default()
    };
    template
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .insert(label.to_string(), key.to_string());
    let spec = template.spec.get_or_insert_with(Default::default);
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    affinity
        .pod_affinity
        .get_or_insert_with(PodAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(term(vec![requirement("In", Some(vec![key.to_string()]))]));
    affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .push(term(vec![
            requirement("Exists", None),
            requirement("NotIn", Some(vec![key.to_string()])),
        ]));
    template
}

/// The most pods one object may ask for (a Job's parallelism or completions, a set's
/// replicas, a role's): Kubernetes caps an Indexed Job's at the same number.
pub const MAX_POD_COUNT: i64 = 100_000;

/// Why a pod count at `field` is refused: over [`MAX_POD_COUNT`] (negative counts are
/// the callers' to refuse, as their schema would).
pub fn check_pod_count(field: &str, n: i64) -> Result<(), String> {
    if n > MAX_POD_COUNT {
        return Err(format!(
            "{n} exceeds Kestrel's limit of {MAX_POD_COUNT} pods for {field}; split the work \
             into several objects"
        ));
    }
    Ok(())
}

/// Reads `value` as a multi-role workload; `Ok(None)` for other kinds. Once started it
/// stays admitted: pods that come later (a task's last replicas that did not fit, the next
/// completions) start as they fit, as Volcano counts finished pods towards `minAvailable`.
pub fn role_workload<'v>(
    ctx: &Ctx,
    value: &'v Value,
    namespace: &str,
    name: &str,
) -> Result<Option<RoleWorkload>, LoadError> {
    let group = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map(|(g, _)| g)
        .unwrap_or_default();
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !ROLE_WORKLOAD_KINDS.contains(&(group, kind)) {
        return Ok(None);
    }
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    if let Some(why) = crate::documents::unread_version(kind, api_version.unwrap_or_default()) {
        return Err(ctx.err("apiVersion", why));
    }
    let spec = value
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            ctx.err(
                "spec",
                format!("a {kind} needs a spec with its pod templates"),
            )
        })?;
    let count = |field: &str, v: Option<&Value>, default: u32| -> Result<u32, LoadError> {
        let n = match v {
            None | Some(Value::Null) => default,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    ctx.err(
                        field,
                        format!("{v} is not a pod count; write a whole number"),
                    )
                })?,
        };
        check_pod_count(field, i64::from(n)).map_err(|why| ctx.err(field, why))?;
        Ok(n)
    };
    // A role's name must differ from those before it: its pods are named after it.
    let unique_role = |roles: &[Role], role: &str, list: &str, here: &str| match roles
        .iter()
        .position(|r| r.name == role)
    {
        Some(first) => Err(ctx.err(
            format!("{here}.name"),
            format!(
                "{role:?} is also the name of {list}[{first}]; names must differ within the {kind}"
            ),
        )),
        None => Ok(()),
    };
    // A role's name (`<here>.name`), which its pods are named after.
    let role_name = |here: &str, item: &'v Value, fix: &str| -> Result<&'v str, LoadError> {
        item.get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ctx.err(format!("{here}.name"), format!("missing; {fix}")))
    };
    let template = |field: &str, v: Option<&Value>| -> Result<PodTemplateSpec, LoadError> {
        let v = v.ok_or_else(|| ctx.err(field, "missing; add the pod template"))?;
        serde_json::from_value(v.clone())
            .map_err(|e| ctx.err(field, format!("not a pod template: {e}")))
    };
    let mut roles = Vec::new();
    let mut role_minimums = Vec::new();
    let mut min_member = None;
    match kind {
        "PyTorchJob" => {
            let field = "spec.pytorchReplicaSpecs";
            let specs = spec
                .get("pytorchReplicaSpecs")
                .and_then(Value::as_object)
                .ok_or_else(|| ctx.err(field, "missing; add Master and Worker replica specs"))?;
            if !specs.contains_key("Master") {
                return Err(ctx.err(
                    field,
                    "no Master; a PyTorchJob needs one Master replica (rank 0)",
                ));
            }
            for (role, replica) in specs {
                if role != "Master" && role != "Worker" {
                    return Err(ctx.err(
                        format!("{field}.{role}"),
                        "unknown replica type; a PyTorchJob has Master and Worker",
                    ));
                }
                let here = format!("{field}.{role}");
                let pods = count(&format!("{here}.replicas"), replica.get("replicas"), 1)?;
                roles.push(Role {
                    name: role.clone(),
                    pods,
                    completions: pods,
                    template: template(&format!("{here}.template"), replica.get("template"))?,
                    field: format!("{here}.template"),
                });
                role_minimums.push((role.clone(), pods));
            }
        }
        "TrainingJob" => {
            // The live controller's validation and roles; its pods carry the job's queue,
            // as the controller labels them live.
            let job: crate::training::TrainingJob = serde_json::from_value(value.clone())
                .map_err(|e| ctx.err("spec", format!("not a TrainingJob: {e}")))?;
            let plan = crate::training::plan(ctx.path, &job)?;
            for mut role in plan.roles {
                if let Some(queue) = &plan.queue {
                    role.template
                        .metadata
                        .get_or_insert_with(Default::default)
                        .labels
                        .get_or_insert_with(Default::default)
                        .insert(crate::queues::KESTREL_QUEUE_LABEL.into(), queue.clone());
                }
                let field = format!("spec.replicaSpecs.{}.template", role.name);
                role_minimums.push((role.name.clone(), role.replicas));
                roles.push(Role {
                    name: role.name,
                    pods: role.replicas,
                    completions: role.replicas,
                    template: role.template,
                    field,
                });
            }
        }
        "Job" => {
            let tasks = spec
                .get("tasks")
                .and_then(Value::as_array)
                .ok_or_else(|| ctx.err("spec.tasks", "missing; a Volcano Job needs its tasks"))?;
            for (i, task) in tasks.iter().enumerate() {
                let here = format!("spec.tasks[{i}]");
                let role = role_name(&here, task, "name the task")?;
                unique_role(&roles, role, "spec.tasks", &here)?;
                let pods = count(&format!("{here}.replicas"), task.get("replicas"), 1)?;
                if let Some(min) = task.get("minAvailable") {
                    let min = count(&format!("{here}.minAvailable"), Some(min), 0)?;
                    if min > pods {
                        return Err(ctx.err(
                            format!("{here}.minAvailable"),
                            format!("{min} exceeds the task's {pods} replicas; lower it"),
                        ));
                    }
                    role_minimums.push((role.to_string(), min));
                }
                roles.push(Role {
                    name: role.to_string(),
                    pods,
                    completions: pods,
                    template: template(&format!("{here}.template"), task.get("template"))?,
                    field: format!("{here}.template"),
                });
            }
            if spec.contains_key("minAvailable") {
                min_member = Some(count("spec.minAvailable", spec.get("minAvailable"), 0)?);
            }
            // The Job's queue is its pods' (Volcano's controller puts it on their PodGroup).
            match spec.get("queue") {
                None | Some(Value::Null) => {}
                Some(Value::String(queue)) if !queue.is_empty() => {
                    for role in &mut roles {
                        role.template
                            .metadata
                            .get_or_insert_with(Default::default)
                            .annotations
                            .get_or_insert_with(Default::default)
                            .entry(VOLCANO_QUEUE_ANNOTATION.to_string())
                            .or_insert_with(|| queue.clone());
                    }
                }
                Some(other) => {
                    return Err(ctx.err(
                        "spec.queue",
                        format!("{other} is not a queue name; write the name of a Queue"),
                    ))
                }
            }
        }
        _ => {
            let jobs = spec
                .get("replicatedJobs")
                .and_then(Value::as_array)
                .ok_or_else(|| {
                    ctx.err(
                        "spec.replicatedJobs",
                        "missing; a JobSet needs its replicated Jobs",
                    )
                })?;
            let exclusive = value
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(JOBSET_EXCLUSIVE_ANNOTATION))
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty());
            for (i, job) in jobs.iter().enumerate() {
                let here = format!("spec.replicatedJobs[{i}]");
                let role = role_name(&here, job, "name it")?;
                unique_role(&roles, role, "spec.replicatedJobs", &here)?;
                let replicas = count(&format!("{here}.replicas"), job.get("replicas"), 1)?;
                let job_spec = job.pointer("/template/spec");
                let field = format!("{here}.template.spec");
                let parallelism = count(
                    &format!("{field}.parallelism"),
                    job_spec.and_then(|s| s.get("parallelism")),
                    1,
                )?;
                let completions = count(
                    &format!("{field}.completions"),
                    job_spec.and_then(|s| s.get("completions")),
                    parallelism,
                )?;
                let pods = replicas.saturating_mul(parallelism.min(completions));
                let pod_template = template(
                    &format!("{field}.template"),
                    job_spec.and_then(|s| s.get("template")),
                )?;
                let Some(topology) = exclusive else {
                    roles.push(Role {
                        name: role.to_string(),
                        pods,
                        completions: replicas.saturating_mul(completions),
                        template: pod_template,
                        field: format!("{field}.template"),
                    });
                    role_minimums.push((role.to_string(), pods));
                    continue;
                };
                // Exclusive placement: each child Job alone in its own domain, by the
                // affinity JobSet's webhook gives its pods; one role per child Job.
                for index in 0..replicas {
                    let child = format!("{role}-{index}");
                    let pods = parallelism.min(completions);
                    roles.push(Role {
                        template: exclusive_template(
                            pod_template.clone(),
                            JOBSET_JOB_KEY_LABEL,
                            &format!("{name}-{child}"),
                            topology,
                        ),
                        name: child.clone(),
                        pods,
                        completions,
                        field: format!("{field}.template"),
                    });
                    role_minimums.push((child, pods));
                }
            }
        }
    }
    let total: u32 = roles.iter().map(|r| r.pods).sum();
    if total == 0 {
        return Ok(None);
    }
    let min_member = min_member.unwrap_or(total);
    if min_member == 0 || min_member > total {
        return Err(ctx.err(
            "spec.minAvailable",
            format!("{min_member} is not from 1 to the Job's {total} pods; set one in that range"),
        ));
    }
    role_minimums.retain(|(_, n)| *n > 0);
    Ok(Some(RoleWorkload {
        roles,
        gang: GangSpec {
            namespace: namespace.to_string(),
            name: workload_gang_name(kind, name),
            min_member,
            total: Some(total),
            role_minimums,
            keeps_admission: true,
            ..Default::default()
        },
    }))
}

/// A live object whose pods are one workload: a queued Job, StatefulSet, or ReplicaSet that
/// no Deployment owns (a Deployment's pods stay one workload each), or a PyTorchJob or
/// JobSet, whose pods are one gang over their roles whether queued or not (as in the
/// simulator).
#[derive(Debug, Clone)]
pub enum Owner {
    Job(Job),
    StatefulSet(StatefulSet),
    ReplicaSet(ReplicaSet),
    /// One of [`LIVE_ROLE_OWNER_KINDS`], read untyped.
    Roles {
        kind: &'static str,
        meta: ObjectMeta,
        object: Value,
    },
}

/// What an owner says of its pods: the queue they are in (if any) and the gang they form.
pub type OwnerWorkload = (Option<String>, GangSpec);

impl Owner {
    /// An untyped object of one of [`LIVE_ROLE_OWNER_KINDS`] (`kind` names which).
    pub fn roles(kind: &'static str, object: Value) -> Owner {
        let meta = object
            .get("metadata")
            .and_then(|m| serde_json::from_value(m.clone()).ok())
            .unwrap_or_default();
        Owner::Roles { kind, meta, object }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Owner::Job(_) => "Job",
            Owner::StatefulSet(_) => "StatefulSet",
            Owner::ReplicaSet(_) => "ReplicaSet",
            Owner::Roles { kind, .. } => kind,
        }
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Owner::Job(j) => &j.metadata,
            Owner::StatefulSet(s) => &s.metadata,
            Owner::ReplicaSet(r) => &r.metadata,
            Owner::Roles { meta, .. } => meta,
        }
    }

    /// Its namespace (`default` when unset) and name.
    pub fn key(&self) -> (String, String) {
        let meta = self.meta();
        (
            meta.namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into()),
            meta.name.clone().unwrap_or_default(),
        )
    }

    /// The queue and the gang its pods form; `Ok(None)`: its pods are workloads of their
    /// own (a Job, StatefulSet or ReplicaSet that names no queue, or that a Deployment or
    /// JobSet controls).
    pub fn workload(&self, path: &Path) -> Result<Option<OwnerWorkload>, LoadError> {
        let (namespace, name) = self.key();
        let mut pod_management_policy = None;
        let (replicas, template) = match self {
            Owner::Job(job) => {
                return Ok(queued_job(path, job)?.map(|(queue, gang)| (Some(queue), gang)))
            }
            Owner::Roles { kind, object, .. } => {
                let ctx = Ctx {
                    path,
                    object: format!("{kind} {namespace}/{name}"),
                };
                let Some(workload) = role_workload(&ctx, object, &namespace, &name)? else {
                    return Ok(None);
                };
                let metas: Vec<Option<&ObjectMeta>> = std::iter::once(Some(self.meta()))
                    .chain(workload.roles.iter().map(|r| r.template.metadata.as_ref()))
                    .collect();
                return Ok(Some((
                    queue_name(&metas).map(str::to_string),
                    workload.gang,
                )));
            }
            Owner::StatefulSet(s) => {
                let spec = s.spec.as_ref();
                pod_management_policy = spec.and_then(|s| s.pod_management_policy.as_deref());
                (
                    spec.and_then(|s| s.replicas),
                    spec.and_then(|s| s.template.metadata.as_ref()),
                )
            }
            Owner::ReplicaSet(r) => {
                if controller_kind(&r.metadata).is_some() {
                    return Ok(None);
                }
                let spec = r.spec.as_ref();
                (
                    spec.and_then(|s| s.replicas),
                    spec.and_then(|s| s.template.as_ref()?.metadata.as_ref()),
                )
            }
        };
        let Some(queue) = queue_name(&[Some(self.meta()), template]) else {
            return Ok(None);
        };
        let ctx = Ctx {
            path,
            object: format!("{} {namespace}/{name}", self.kind()),
        };
        let pods = u32::try_from(replicas.unwrap_or(1).max(0)).unwrap_or(0);
        let annotations = self.meta().annotations.clone().unwrap_or_default();
        Ok(queued_workload(
            &ctx,
            self.kind(),
            &namespace,
            &name,
            pods,
            pod_management_policy,
            &annotations,
        )?
        .map(|gang| (Some(queue.to_string()), gang)))
    }
}

/// The kind of the controller owner reference of an object, if any.
fn controller_kind(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.as_str())
}

/// The object whose workload `pod` belongs to, as its kind and name: the JobSet its
/// label names (its pods' controller is one of the JobSet's Jobs), else its controller
/// owner reference if that is a `batch/v1` Job, an `apps/v1` StatefulSet or ReplicaSet,
/// or a `kubeflow.org` PyTorchJob.
pub fn controlling_owner(pod: &Pod) -> Option<(&'static str, &str)> {
    let labels = pod.metadata.labels.as_ref();
    if let Some(jobset) = labels.and_then(|l| l.get(JOBSET_NAME_LABEL)) {
        return Some(("JobSet", jobset.as_str()));
    }
    let owner = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    let kind = LIVE_OWNER_KINDS
        .into_iter()
        .filter(|k| *k != "JobSet")
        .find(|k| *k == owner.kind)?;
    let expected = match kind {
        "Job" => "batch",
        "PyTorchJob" => "kubeflow.org",
        _ => "apps",
    };
    (group == expected).then_some((kind, owner.name.as_str()))
}

/// The role a pod of a multi-role owner plays, as the owner's spec names it: a JobSet's
/// replicated Job, a PyTorchJob's replica type (`Master`, `Worker`; the operator's label
/// is in lower case).
pub fn owner_role(pod: &Pod) -> Option<String> {
    let labels = pod.metadata.labels.as_ref()?;
    if let Some(role) = labels.get(JOBSET_ROLE_LABEL) {
        return Some(role.clone());
    }
    let kubeflow = labels.get(KUBEFLOW_ROLE_LABEL)?;
    ["Master", "Worker"]
        .into_iter()
        .find(|r| r.eq_ignore_ascii_case(kubeflow))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn read(kind: &str, pods: u32, min: Option<&str>) -> Result<Option<GangSpec>, LoadError> {
        read_with_policy(kind, pods, min, None)
    }

    fn read_with_policy(
        kind: &str,
        pods: u32,
        min: Option<&str>,
        policy: Option<&str>,
    ) -> Result<Option<GangSpec>, LoadError> {
        let ctx = Ctx {
            path: Path::new("w.yaml"),
            object: format!("{kind} team-a/train"),
        };
        let annotations = min
            .map(|m| [(KUEUE_MIN_PARALLELISM_ANNOTATION.to_string(), m.to_string())].into())
            .unwrap_or_default();
        queued_workload(&ctx, kind, "team-a", "train", pods, policy, &annotations)
    }

    #[test]
    fn a_queued_job_is_one_gang_of_its_parallelism() {
        let gang = read("Job", 3, None).unwrap().unwrap();
        assert_eq!((gang.name.as_str(), gang.min_member), ("job-train", 3));
        assert_eq!(gang.total, Some(3));
        assert!(gang.keeps_admission);
        assert!(!gang.fast_admission);
        let gang = read_with_policy("StatefulSet", 4, None, Some("Parallel"))
            .unwrap()
            .unwrap();
        assert_eq!(
            (gang.name.as_str(), gang.min_member, gang.fast_admission),
            ("statefulset-train", 4, false)
        );
        assert_eq!(read("Deployment", 4, None).unwrap(), None);
        assert_eq!(read("Pod", 1, None).unwrap(), None);
        assert_eq!(read("Job", 0, None).unwrap(), None);
    }

    /// A StatefulSet's pods come one at a time unless it says `Parallel`: admitted for all
    /// its replicas at its first pod, they start as they come.
    #[test]
    fn an_ordered_stateful_set_is_admitted_for_all_its_replicas_at_its_first_pod() {
        for policy in [None, Some("OrderedReady")] {
            let gang = read_with_policy("StatefulSet", 4, None, policy)
                .unwrap()
                .unwrap();
            assert_eq!(
                (gang.min_member, gang.total, gang.fast_admission),
                (1, Some(4), true),
                "{policy:?}"
            );
            assert!(gang.keeps_admission);
        }
        let e = read_with_policy("StatefulSet", 4, None, Some("parallel"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("StatefulSet team-a/train")
                && e.contains("spec.podManagementPolicy")
                && e.contains("\"parallel\" is not a pod management policy")
                && e.contains("OrderedReady"),
            "{e}"
        );
        // Only a StatefulSet's policy is read.
        let job = read_with_policy("Job", 3, None, Some("Parallel"))
            .unwrap()
            .unwrap();
        assert!(!job.fast_admission);
    }

    #[test]
    fn partial_admission_reads_kueues_minimum() {
        let gang = read("Job", 4, Some("2")).unwrap().unwrap();
        assert_eq!((gang.min_member, gang.total), (2, Some(4)));
        for bad in ["0", "5", "two", "-1"] {
            let e = read("Job", 4, Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("Job team-a/train")
                    && e.contains(KUEUE_MIN_PARALLELISM_ANNOTATION)
                    && e.contains("from 1 to the Job's parallelism (4)"),
                "{e}"
            );
        }
        let e = read("StatefulSet", 4, Some("2")).unwrap_err().to_string();
        assert!(e.contains("partial admission is for Jobs"), "{e}");
    }

    #[test]
    fn a_live_job_names_its_queue_and_shrinks_with_its_completions() {
        let job: Job = serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a",
                "labels": {"kueue.x-k8s.io/queue-name": "main"},
                "annotations": {"kueue.x-k8s.io/job-min-parallelism": "2"}},
            "spec": {"parallelism": 3, "completions": 5,
                "template": {"spec": {"containers": []}}},
            "status": {"succeeded": 4}
        }))
        .unwrap();
        let (queue, gang) = queued_job(Path::new("cluster"), &job).unwrap().unwrap();
        assert_eq!(queue, "main");
        assert_eq!(
            (gang.min_member, gang.total),
            (1, Some(1)),
            "one completion left"
        );
        let mut unqueued = job.clone();
        unqueued.metadata.labels = None;
        assert_eq!(queued_job(Path::new("cluster"), &unqueued).unwrap(), None);
        let mut bad = job;
        bad.metadata.annotations = Some(
            [(
                KUEUE_MIN_PARALLELISM_ANNOTATION.to_string(),
                "7".to_string(),
            )]
            .into(),
        );
        let e = queued_job(Path::new("cluster"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Job team-a/train") && e.contains("(3)"), "{e}");
    }
}
