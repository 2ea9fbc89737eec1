//! The workload kinds Kestrel reads, one module each, and the registry ([`KINDS`]) that
//! everything kind-specific is derived from: the kinds a workload file may hold and the
//! apiVersions read ([`crate::documents`]), the owners the live scheduler watches and how a
//! pod finds its owner and role ([`crate::workloads`]), the ClusterRole rules for those
//! watches (`kestrel-live`'s `deploy`), and the table of kinds in
//! `docs/reference/compatibility.md` (a test checks it lists every kind here).
//!
//! Adding a kind: a module with a [`WorkloadKind`] implementation and a line in [`KINDS`].

mod jobset;
mod kubernetes;
mod leader_worker_set;
mod mpi_job;
mod pytorch_job;
mod ray;
mod train_job;
mod training_job;
mod volcano_job;

use crate::fields::Ctx;
use crate::workloads::{check_pod_count, Role};
use crate::LoadError;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use jobset::{JOBSET_NAME_LABEL, JOBSET_ROLE_LABEL};
pub use pytorch_job::KUBEFLOW_ROLE_LABEL;
pub use ray::{RAY_CLUSTER_LABEL, RAY_GROUP_LABEL, RAY_HEAD_GROUP};
pub use train_job::{TRAINER_ANCESTOR_LABEL, TRAINER_GROUP, TRAINER_NODE, TRAINING_RUNTIME_KINDS};

/// How the live scheduler reads a kind's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Live {
    /// Not watched: its pods say what they belong to (labels, a PodGroup its controller
    /// creates), or its controller creates objects of another watched kind.
    NotWatched,
    /// Listed and watched as its k8s-openapi type (Kubernetes' own kinds).
    Typed,
    /// Listed and watched untyped, when its CRD is installed (other projects' kinds).
    Untyped,
    /// Listed and watched untyped for its queue alone: it creates no pods, but an object
    /// of a watched kind that it controls (a TrainJob's JobSet), whose pods take its queue.
    /// Kueue labels the object it admits, and the controller below does not copy the label.
    Parent,
}

/// Which of a kind's pods start together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GangScope {
    /// None: each pod is a workload of its own (a Deployment's pods, as in Kueue).
    PerPod,
    /// Each object it creates (a CronJob's Jobs) is read as that kind.
    PerCreatedObject,
    /// All of an object's pods, when it names a queue: admitted whole against its quota.
    PerObjectWhenQueued,
    /// All of an object's pods over its roles, queued or not.
    PerObject,
    /// Each of an object's groups (a leader and its workers) on its own.
    PerGroup,
}

/// What Kestrel needs from a workload kind.
pub trait WorkloadKind: Sync {
    fn kind(&self) -> &'static str;
    /// Its API group (`""` for Kubernetes' core group).
    fn group(&self) -> &'static str;
    /// The versions of its group Kestrel reads, the one watched live first.
    fn versions(&self) -> &'static [&'static str];
    /// Its resource name, for watches and RBAC.
    fn plural(&self) -> &'static str;
    /// How lists of kinds name it: `PyTorchJob (kubeflow.org)`; Kubernetes' own by kind.
    fn display(&self) -> String {
        match self.group() {
            "" | "batch" | "apps" => self.kind().to_string(),
            group => format!("{} ({group})", self.kind()),
        }
    }
    fn live(&self) -> Live;
    fn gang(&self) -> GangScope;
    /// The verbs Kestrel's ClusterRole grants on the kind: what its watch needs.
    fn rbac_verbs(&self) -> &'static [&'static str] {
        match self.live() {
            Live::NotWatched => &[],
            Live::Typed | Live::Untyped | Live::Parent => &["list", "watch"],
        }
    }
    /// A label its controller puts on its pods that names the object, for pods whose
    /// controller owner is something else (a JobSet's pods are its Jobs').
    fn owner_label(&self) -> Option<&'static str> {
        None
    }
    /// The role a pod of this kind plays, as the object's spec names it.
    fn pod_role(&self, _pod: &Pod) -> Option<String> {
        None
    }
    /// Kinds the object refers to that create no pods themselves (a TrainJob's runtimes):
    /// (kind, whether cluster-scoped).
    fn referenced_kinds(&self) -> &'static [(&'static str, bool)] {
        &[]
    }
    /// The roles of an object of a [`GangScope::PerObject`] kind (its spec already found),
    /// which the simulator expands into pods and whose counts make the gang.
    fn roles(&self, _r: &RoleReader<'_>, _value: &Value) -> Result<RoleSet, LoadError> {
        unreachable!("only kinds whose gang is per object over roles are read as roles")
    }
}

/// Every workload kind Kestrel reads, in the order lists of kinds show them.
pub static KINDS: &[&dyn WorkloadKind] = &[
    &kubernetes::Job,
    &kubernetes::CronJob,
    &kubernetes::Deployment,
    &kubernetes::StatefulSet,
    &kubernetes::ReplicaSet,
    &pytorch_job::PyTorchJob,
    &mpi_job::MpiJob,
    &volcano_job::VolcanoJob,
    &jobset::JobSet,
    &leader_worker_set::LeaderWorkerSet,
    &training_job::TrainingJob,
    &train_job::TrainJob,
    &ray::RayCluster,
    &ray::RayJob,
];

/// `group/version`, or `version` for the core group.
pub fn api_version(group: &str, version: &str) -> String {
    match group {
        "" => version.to_string(),
        _ => format!("{group}/{version}"),
    }
}

/// The kind of this name in this group.
pub fn find(group: &str, kind: &str) -> Option<&'static dyn WorkloadKind> {
    KINDS
        .iter()
        .copied()
        .find(|k| k.kind() == kind && k.group() == group)
}

/// The kind of an object's `apiVersion` and `kind`.
pub fn of_object(value: &Value) -> Option<&'static dyn WorkloadKind> {
    let kind = value.get("kind").and_then(Value::as_str)?;
    let group = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    find(group, kind)
}

/// The apiVersions Kestrel reads of the kinds named `kind` (in every group).
pub fn versions_of(kind: &str) -> Vec<String> {
    KINDS
        .iter()
        .filter(|k| k.kind() == kind)
        .flat_map(|k| k.versions().iter().map(|v| api_version(k.group(), v)))
        .collect()
}

/// The kinds the live scheduler watches as owners, of pods or of a watched kind
/// ([`Live::Parent`]), in registry order.
pub fn live_owners() -> impl Iterator<Item = &'static dyn WorkloadKind> {
    KINDS
        .iter()
        .copied()
        .filter(|k| k.live() != Live::NotWatched)
}

/// Whether the live scheduler watches `kind` as an owner.
pub fn is_live_owner(kind: &str) -> bool {
    live_owners().any(|k| k.kind() == kind)
}

/// The owner kinds watched untyped (other projects' multi-role kinds and parents).
pub fn live_untyped_owners() -> impl Iterator<Item = &'static dyn WorkloadKind> {
    live_owners().filter(|k| matches!(k.live(), Live::Untyped | Live::Parent))
}

/// The kinds that pass their queue to a watched object they control ([`Live::Parent`]).
pub fn live_parents() -> impl Iterator<Item = &'static dyn WorkloadKind> {
    live_owners().filter(|k| k.live() == Live::Parent)
}

/// Whether the live scheduler watches `kind` as a parent ([`Live::Parent`]).
pub fn is_live_parent(kind: &str) -> bool {
    live_parents().any(|k| k.kind() == kind)
}

/// The parent (its kind and name) that controls an object, by its controller owner
/// reference, if that is of a [`Live::Parent`] kind.
pub fn controlling_parent(
    owner_references: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
) -> Option<(&'static str, &str)> {
    let owner = owner_references
        .iter()
        .find(|o| o.controller == Some(true))?;
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    live_parents()
        .find(|k| k.kind() == owner.kind && k.group() == group)
        .map(|k| (k.kind(), owner.name.as_str()))
}

/// Whether a queued object of `kind` is one workload, admitted whole.
pub fn is_whole_workload(kind: &str) -> bool {
    KINDS
        .iter()
        .any(|k| k.kind() == kind && k.gang() == GangScope::PerObjectWhenQueued)
}

/// The rules Kestrel's ClusterRole needs for the owner watches: one per API group, its
/// kinds' plurals in registry order, verbs as the kinds say.
pub fn rbac_rules() -> Vec<(&'static str, Vec<&'static str>, &'static [&'static str])> {
    let mut rules: Vec<(&'static str, Vec<&'static str>, &'static [&'static str])> = Vec::new();
    for k in live_owners() {
        match rules
            .iter_mut()
            .find(|(group, _, verbs)| *group == k.group() && *verbs == k.rbac_verbs())
        {
            Some((_, plurals, _)) => plurals.push(k.plural()),
            None => rules.push((k.group(), vec![k.plural()], k.rbac_verbs())),
        }
    }
    rules
}

/// Kinds a workload file may hold that create no pods of their own (a TrainJob's
/// runtimes), each with whether it is cluster-scoped and the kind that refers to it.
pub fn referenced_kinds() -> impl Iterator<Item = (&'static str, bool, &'static dyn WorkloadKind)> {
    KINDS.iter().flat_map(|k| {
        k.referenced_kinds()
            .iter()
            .map(move |(kind, cluster)| (*kind, *cluster, *k))
    })
}

/// The kind of the controller owner reference of `pod` among the live owners, matched by
/// group and kind, with the owner's name; before that, a live owner whose label the pod
/// carries (a JobSet's pods' controller is one of its Jobs).
pub fn pod_owner(pod: &Pod) -> Option<(&'static str, &str)> {
    let labels = pod.metadata.labels.as_ref();
    let pod_owners = || live_owners().filter(|k| k.live() != Live::Parent);
    let by_label = pod_owners().find_map(|k| {
        let name = labels?.get(k.owner_label()?)?;
        Some((k.kind(), name.as_str()))
    });
    if by_label.is_some() {
        return by_label;
    }
    let owner = pod
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))?;
    let group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
    pod_owners()
        .find(|k| k.kind() == owner.kind && k.group() == group && k.owner_label().is_none())
        .map(|k| (k.kind(), owner.name.as_str()))
}

/// The role a pod of a multi-role owner plays, as the owner's spec names it.
pub fn pod_role(pod: &Pod) -> Option<String> {
    KINDS.iter().find_map(|k| k.pod_role(pod))
}

/// The roles of one object and the gang's minimums over them.
#[derive(Debug, Default)]
pub struct RoleSet {
    pub roles: Vec<Role>,
    /// (role, pods of it that must start together).
    pub role_minimums: Vec<(String, u32)>,
    /// The gang's minimum over all roles (default: all its pods).
    pub min_member: Option<u32>,
    /// The field that sets `min_member`, for errors (default `spec.minAvailable`).
    pub min_member_field: Option<&'static str>,
}

/// Objects an object refers to by name (a TrainJob's runtime), by (kind, namespace, name)
/// (cluster-scoped ones under namespace `""`), with the file each was read from.
pub type References = BTreeMap<(String, String, String), (PathBuf, Value)>;

/// Reads one multi-role object's fields, with errors that name the object and field.
pub struct RoleReader<'a> {
    pub ctx: &'a Ctx<'a>,
    pub kind: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object's `spec`.
    pub spec: &'a Map<String, Value>,
    /// The objects it may refer to; `None` where they are not read (live, where its
    /// controller has resolved them into objects of another kind).
    pub references: Option<&'a References>,
}

impl<'a> RoleReader<'a> {
    pub fn err(&self, field: impl Into<String>, message: impl Into<String>) -> LoadError {
        self.ctx.err(field, message)
    }

    /// A pod count at `field` (`default` when absent), within Kestrel's limit.
    pub fn count(&self, field: &str, v: Option<&Value>, default: u32) -> Result<u32, LoadError> {
        let n = match v {
            None | Some(Value::Null) => default,
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    self.err(
                        field,
                        format!("{v} is not a pod count; write a whole number"),
                    )
                })?,
        };
        check_pod_count(field, i64::from(n)).map_err(|why| self.err(field, why))?;
        Ok(n)
    }

    /// A role's name (at `field`) must differ from those of the roles read before it
    /// from `list`, which are `roles[skip..]` (a RayCluster's head, read first, is not
    /// in its list of worker groups): its pods are named after it.
    pub fn unique_role(
        &self,
        (roles, skip): (&[Role], usize),
        role: &str,
        list: &str,
        field: String,
    ) -> Result<(), LoadError> {
        let listed = roles.get(skip..).unwrap_or_default();
        match listed.iter().position(|r| r.name == role) {
            Some(first) => Err(self.err(
                field,
                format!(
                    "{role:?} is also the name of {list}[{first}]; names must differ within \
                     the {}",
                    self.kind
                ),
            )),
            None => Ok(()),
        }
    }

    /// A role's name (`<here>.name`), which its pods are named after.
    pub fn role_name<'v>(
        &self,
        here: &str,
        item: &'v Value,
        fix: &str,
    ) -> Result<&'v str, LoadError> {
        item.get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| self.err(format!("{here}.name"), format!("missing; {fix}")))
    }

    /// The pod template at `field`.
    pub fn template(&self, field: &str, v: Option<&Value>) -> Result<PodTemplateSpec, LoadError> {
        let v = v.ok_or_else(|| self.err(field, "missing; add the pod template"))?;
        serde_json::from_value(v.clone())
            .map_err(|e| self.err(field, format!("not a pod template: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_registered_once_per_group() {
        for (i, k) in KINDS.iter().enumerate() {
            assert!(!k.versions().is_empty(), "{}", k.kind());
            assert!(
                KINDS[..i]
                    .iter()
                    .all(|o| (o.group(), o.kind()) != (k.group(), k.kind())),
                "{} ({}) is registered twice",
                k.kind(),
                k.group()
            );
        }
    }

    /// The owners and rules the live scheduler had before the registry, unchanged.
    #[test]
    fn live_owners_and_their_rules_come_from_the_registry() {
        let owners: Vec<_> = live_owners().map(|k| k.kind()).collect();
        assert_eq!(
            owners,
            [
                "Job",
                "StatefulSet",
                "ReplicaSet",
                "PyTorchJob",
                "JobSet",
                "TrainJob",
                "RayCluster"
            ]
        );
        let rules = rbac_rules();
        let plurals: Vec<_> = rules.iter().map(|(g, p, _)| (*g, p.clone())).collect();
        assert_eq!(
            plurals,
            [
                ("batch", vec!["jobs"]),
                ("apps", vec!["statefulsets", "replicasets"]),
                ("kubeflow.org", vec!["pytorchjobs"]),
                ("jobset.x-k8s.io", vec!["jobsets"]),
                ("trainer.kubeflow.org", vec!["trainjobs"]),
                ("ray.io", vec!["rayclusters"]),
            ]
        );
        assert!(rules.iter().all(|(_, _, v)| *v == ["list", "watch"]));
        assert_eq!(
            versions_of("Job"),
            ["batch/v1", "batch.volcano.sh/v1alpha1"]
        );
        assert!(is_whole_workload("StatefulSet") && !is_whole_workload("Deployment"));
    }

    /// The reference table of kinds lists every registered kind at the versions it reads.
    #[test]
    fn the_compatibility_table_lists_every_kind() {
        let doc = include_str!("../../../../docs/reference/compatibility.md");
        let table: Vec<&str> = doc
            .split("## Kinds")
            .nth(1)
            .expect("a Kinds section")
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .collect();
        for k in KINDS {
            let kind = format!("`{}`", k.kind());
            let version = k.versions()[0];
            let row = table.iter().find(|row| {
                row.contains(&kind)
                    && (row.contains(&format!("`{}`", api_version(k.group(), version)))
                        || row.contains(&format!("`{}/", k.group()))
                        || (k.group() == "apps" && row.contains("`apps/v1`")))
            });
            assert!(
                row.is_some(),
                "docs/reference/compatibility.md's table of kinds has no row for {} ({})",
                k.kind(),
                api_version(k.group(), version)
            );
        }
        for (kind, _, _) in referenced_kinds() {
            assert!(
                table.iter().any(|row| row.contains(&format!("`{kind}`"))),
                "docs/reference/compatibility.md's table of kinds has no row for {kind}"
            );
        }
    }
}
