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
use crate::queues::queue_name;
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

pub use crate::kinds::{JOBSET_NAME_LABEL, JOBSET_ROLE_LABEL, KUBEFLOW_ROLE_LABEL};

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
    if !crate::kinds::is_whole_workload(kind) || pods == 0 {
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

impl RoleWorkload {
    /// Warnings about `object`, this workload, where its roles see a shared volume
    /// differently ([`crate::shared_volumes`]).
    pub fn volume_warnings(
        &self,
        object: &crate::warning::WarnedObject,
    ) -> Vec<crate::warning::FieldWarning> {
        let roles: Vec<_> = self
            .roles
            .iter()
            .map(|r| (r.name.as_str(), &r.template))
            .collect();
        crate::shared_volumes::gang_warnings(object, &roles)
    }
}

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
pub fn role_workload(
    ctx: &Ctx,
    value: &Value,
    namespace: &str,
    name: &str,
) -> Result<Option<RoleWorkload>, LoadError> {
    role_workload_with(ctx, value, namespace, name, None)
}

/// [`role_workload`], with the objects it may refer to (a TrainJob's runtime) where they
/// are read (the simulator's files).
pub fn role_workload_with(
    ctx: &Ctx,
    value: &Value,
    namespace: &str,
    name: &str,
    references: Option<&crate::kinds::References>,
) -> Result<Option<RoleWorkload>, LoadError> {
    let Some(kind) =
        crate::kinds::of_object(value).filter(|k| k.gang() == crate::kinds::GangScope::PerObject)
    else {
        return Ok(None);
    };
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    if let Some(why) =
        crate::documents::unread_version(kind.kind(), api_version.unwrap_or_default())
    {
        return Err(ctx.err("apiVersion", why));
    }
    let kind_name = kind.kind();
    let spec = value
        .get("spec")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            ctx.err(
                "spec",
                format!("a {kind_name} needs a spec with its pod templates"),
            )
        })?;
    let reader = crate::kinds::RoleReader {
        ctx,
        kind: kind_name,
        namespace,
        name,
        spec,
        references,
    };
    let crate::kinds::RoleSet {
        roles,
        mut role_minimums,
        min_member,
        min_member_field,
    } = kind.roles(&reader, value)?;
    let total: u32 = roles.iter().map(|r| r.pods).sum();
    if total == 0 {
        return Ok(None);
    }
    let min_member = min_member.unwrap_or(total);
    if min_member == 0 || min_member > total {
        return Err(ctx.err(
            min_member_field.unwrap_or("spec.minAvailable"),
            format!(
                "{min_member} is not from 1 to the {kind_name}'s {total} pods; set one in that \
                 range"
            ),
        ));
    }
    role_minimums.retain(|(_, n)| *n > 0);
    Ok(Some(RoleWorkload {
        roles,
        gang: GangSpec {
            namespace: namespace.to_string(),
            name: workload_gang_name(kind_name, name),
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
    // Boxed, as the metadata below: an owner is a whole object, and owners are kept.
    Job(Box<Job>),
    StatefulSet(Box<StatefulSet>),
    ReplicaSet(Box<ReplicaSet>),
    /// A kind the live scheduler watches untyped ([`crate::kinds::Live::Untyped`], or
    /// [`crate::kinds::Live::Parent`], read for its queue alone).
    Roles {
        kind: &'static str,
        meta: Box<ObjectMeta>,
        object: Value,
    },
}

/// What an owner says of its pods: the queue they are in (if any) and the gang they form.
pub type OwnerWorkload = (Option<String>, GangSpec);

impl Owner {
    /// An untyped object of a kind watched untyped (`kind` names which).
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

    /// The parent that controls it ([`crate::kinds::Live::Parent`]: a TrainJob for its
    /// JobSet), as kind and name.
    pub fn parent(&self) -> Option<(&'static str, &str)> {
        crate::kinds::controlling_parent(self.meta().owner_references.as_deref()?)
    }

    /// The queue its own labels name (what a parent passes to the object it controls).
    pub fn queue_label(&self) -> Option<String> {
        queue_name(&[Some(self.meta())]).map(str::to_string)
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

    /// Warnings about it as a gang: roles that see a shared volume differently
    /// ([`crate::shared_volumes`]). Only multi-role kinds have roles to compare.
    pub fn volume_warnings(&self, path: &Path) -> Vec<crate::warning::FieldWarning> {
        let Owner::Roles { kind, meta, object } = self else {
            return Vec::new();
        };
        let (namespace, name) = self.key();
        let ctx = Ctx {
            path,
            object: format!("{kind} {namespace}/{name}"),
        };
        let Ok(Some(workload)) = role_workload(&ctx, object, &namespace, &name) else {
            return Vec::new();
        };
        let mut warned = crate::warning::WarnedObject::of_value(object, &namespace, &name);
        warned.kind = kind.to_string();
        warned.uid.clone_from(&meta.uid);
        workload.volume_warnings(&warned)
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
                let spec = &s.spec;
                pod_management_policy = spec.pod_management_policy.as_deref();
                (spec.replicas, spec.template.metadata.as_ref())
            }
            Owner::ReplicaSet(r) => {
                if controller_kind(&r.metadata).is_some() {
                    return Ok(None);
                }
                let spec = &r.spec;
                (
                    spec.replicas,
                    spec.template.as_ref().and_then(|t| t.metadata.as_ref()),
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

/// The object whose workload `pod` belongs to, as its kind and name: a live owner whose
/// label the pod carries (a JobSet's), else its controller owner reference if that is a
/// live owner kind of the registry ([`crate::kinds`]) in its API group.
pub fn controlling_owner(pod: &Pod) -> Option<(&'static str, &str)> {
    crate::kinds::pod_owner(pod)
}

/// The role a pod of a multi-role owner plays, as the owner's spec names it: a JobSet's
/// replicated Job, a PyTorchJob's replica type (`Master`, `Worker`; the operator's label
/// is in lower case).
pub fn owner_role(pod: &Pod) -> Option<String> {
    crate::kinds::pod_role(pod)
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
