//! Team queues and namespace limits from the YAML users apply to a cluster.
//!
//! | kind | apiVersion | becomes |
//! |---|---|---|
//! | `ClusterQueue` | `kueue.x-k8s.io/v1beta1`, `v1beta2`, `scheduling.kestrel.dev/v1alpha1` | [`ClusterQueueSpec`] |
//! | `LocalQueue` | same | [`LocalQueueSpec`] |
//! | `Cohort` | `kueue.x-k8s.io/v1alpha1`, `v1beta1`, `v1beta2`, `scheduling.kestrel.dev/v1alpha1` | [`CohortSpec`] |
//! | `ResourceFlavor` | as `ClusterQueue` | [`ResourceFlavor`] |
//! | `Namespace` | `v1` | its labels, for ClusterQueue `namespaceSelector`s |
//! | `ResourceQuota` | `v1` | [`crate::quota::Quota`] |
//! | `LimitRange` | `v1` | default container requests per namespace ([`LimitRangeDefaults`]) |
//! | `PodDisruptionBudget` | `policy/v1` | [`DisruptionBudget`]: preemption takes victims that keep it first |
//! | `Queue` | `scheduling.volcano.sh/v1beta1`, `scheduling.run.ai/v2` | a cluster-wide [`ClusterQueueSpec`] (see [`cluster_wide`]) |
//!
//! Field names are Kueue's. A ClusterQueue reads `spec.cohort` (Kueue v1beta1) or
//! `spec.cohortName`, `namespaceSelector` (`matchLabels`, `matchExpressions`; `{}` selects
//! every namespace; Kestrel reads an absent selector as every namespace too, where Kueue
//! selects none), `queueingStrategy`, `resourceGroups`, `preemption`, `fairSharing.weight`
//! (default 1), `stopPolicy`, `flavorFungibility.whenCanBorrow`, and Kestrel's `minRuntimeSeconds` and `preemptionDelaySeconds`
//! (`defaultRuntimeSeconds` is accepted and not used yet). Kestrel's own objects
//! (`scheduling.kestrel.dev`) may hold only the fields Kestrel reads: an unknown field is
//! an error. Other projects' objects may hold their other fields (`admissionChecks`,
//! `admissionScope` ...): each is a warning naming the object and the field.
//!
//! Quotas are in the engine's units (see `kestrel_core::queue`): a quantity as written
//! times [`quota_scale`] of its resource: `cpu` and `nvidia.com/gpu` in thousandths, memory
//! in bytes, other resources in their own units.
//!
//! A ResourceQuota's `spec.hard` maps `requests.cpu` and `cpu` to `cpu`, `requests.memory`
//! and `memory` to `memory`, `requests.ephemeral-storage` and `ephemeral-storage` to
//! `ephemeral-storage`, `requests.<extended resource>` (`requests.nvidia.com/gpu`,
//! `requests.hugepages-2Mi` ...) to the resource, and `pods` and `count/pods` to `pods`;
//! when two keys name one resource the smaller amount holds. Limits (`limits.*`) are not
//! tracked: the scheduler counts requests. Other keys (object counts, storage) are
//! skipped. A quota is read into the model the live scheduler uses ([`crate::quota`]):
//! GPUs in devices, the scopes `BestEffort`, `NotBestEffort` and `PriorityClass` matched
//! against pods; a quota scoped to what the simulator does not model (`Terminating`,
//! `NotTerminating`, `CrossNamespacePodAffinity`) is refused.
//!
//! A LimitRange item of `type: Container` gives containers of its namespace the requests
//! they do not set, as the API server does: the container's own limit, else the item's
//! `defaultRequest`, else its `default` limit, else its `max`, else its `min`. Items of other
//! types are skipped. The amounts are in the units of pod requests (cpu in millicores,
//! extended resources in whole units).
//!
//! A LocalQueue may name a ClusterQueue that is not in the files: it can be created later,
//! and the scheduler reports it on the pods. Objects of one kind and name defined twice are
//! an error (a Namespace repeated with the same labels is not).

use crate::error::LoadError;
use crate::warning::FieldWarning;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kestrel_core::{
    ClusterQueueSpec, CohortSpec, DisruptionBudget, Inactive, Labels, LocalQueueSpec,
    ResourceFlavor,
};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use self::cluster_wide::{kai_queue, volcano_queue};
pub use self::cluster_wide::{
    ANY_NODE_FLAVOR, KAI_QUEUE_GROUP, KAI_QUEUE_LABEL, KAI_ROOT, VOLCANO_HIERARCHY_ANNOTATIONS,
    VOLCANO_JOB_QUEUE_ANNOTATION, VOLCANO_QUEUE_ANNOTATION, VOLCANO_QUEUE_GROUP, VOLCANO_ROOT,
};
use self::kueue::{cluster_queue, flavor, limits_need_a_parent};
pub use self::kueue::{CLUSTER_QUEUE_FIELDS, COHORT_FIELDS, FLAVOR_FIELDS, LOCAL_QUEUE_FIELDS};
pub use self::namespace::LimitRangeDefaults;
use self::namespace::{disruption_budget, limit_range, resource_quota};
use self::reader::{namespace_of, namespaced, reader, Reader};
use crate::quota::Quota;

pub mod cluster_wide;
mod kueue;
mod namespace;
mod reader;

/// Team queues and namespace limits, from ClusterQueue, LocalQueue, Cohort,
/// ResourceFlavor, Namespace and ResourceQuota objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueueSetup {
    pub cluster_queues: Vec<ClusterQueueSpec>,
    pub local_queues: Vec<LocalQueueSpec>,
    pub cohorts: Vec<CohortSpec>,
    pub flavors: Vec<ResourceFlavor>,
    /// Namespace labels (for ClusterQueue namespaceSelectors).
    pub namespaces: Vec<(String, Labels)>,
    /// In the model the live scheduler reads quotas into, nothing used yet.
    pub resource_quotas: Vec<Quota>,
    pub disruption_budgets: Vec<DisruptionBudget>,
    /// Fields of other projects' objects that Kestrel does not honour.
    pub warnings: Vec<FieldWarning>,
}

/// Kueue's API group.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";
/// Kestrel's API group.
pub const KESTREL_GROUP: &str = crate::crds::GROUP;
/// Kueue's label naming the LocalQueue a workload is submitted to.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kestrel's label naming the LocalQueue; wins over Kueue's when both are set.
pub const KESTREL_QUEUE_LABEL: &str = "kestrel.dev/queue";
/// The queue an object names, looking at each of `metas` (the object's, then its pod
/// template's) for Kestrel's label, then Kueue's, then KAI's, then Volcano's annotations
/// (the one users write, then the one Volcano's Job controller puts on its pods).
pub fn queue_name<'a>(metas: &[Option<&'a ObjectMeta>]) -> Option<&'a str> {
    let labels = [KESTREL_QUEUE_LABEL, KUEUE_QUEUE_LABEL, KAI_QUEUE_LABEL]
        .into_iter()
        .map(|key| (key, false));
    labels
        .chain([
            (VOLCANO_QUEUE_ANNOTATION, true),
            (VOLCANO_JOB_QUEUE_ANNOTATION, true),
        ])
        .find_map(|(key, annotation)| {
            metas.iter().flatten().find_map(|meta| {
                let map = match annotation {
                    true => meta.annotations.as_ref(),
                    false => meta.labels.as_ref(),
                };
                map?.get(key).map(String::as_str).filter(|q| !q.is_empty())
            })
        })
}

/// The kinds this module reads.
pub const QUEUE_KINDS: [&str; 9] = [
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "ResourceFlavor",
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "PodDisruptionBudget",
    "Queue",
];

/// Whether documents of this kind belong to this module (whatever their apiVersion; a
/// wrong one is reported by [`parse_queue_document`]).
pub fn is_queue_document(kind: &str) -> bool {
    QUEUE_KINDS.contains(&kind)
}

/// One object read by [`parse_queue_document`].
#[derive(Debug, Clone, PartialEq)]
pub enum QueueDocument {
    ClusterQueue(ClusterQueueSpec),
    LocalQueue(LocalQueueSpec),
    Cohort(CohortSpec),
    Flavor(ResourceFlavor),
    Namespace(String, Labels),
    Quota(Quota),
    LimitRange(LimitRangeDefaults),
    DisruptionBudget(DisruptionBudget),
}

/// Reads one object of a kind in [`QUEUE_KINDS`], with a warning for each field of another
/// project's object that Kestrel does not read. `position` says where it is in its file
/// (`document 3`), for objects without a name.
pub fn parse_queue_document(
    path: &Path,
    position: &str,
    doc: &Value,
) -> Result<(QueueDocument, Vec<FieldWarning>), LoadError> {
    let r = reader(path, position, doc);
    let parsed = read_queue_document(&r, doc)?;
    Ok((parsed, r.warnings.take()))
}

fn read_queue_document(r: &Reader, doc: &Value) -> Result<QueueDocument, LoadError> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let accepted: Vec<String> = match kind {
        "Namespace" | "ResourceQuota" | "LimitRange" => vec!["v1".into()],
        "PodDisruptionBudget" => vec!["policy/v1".into()],
        "Queue" => vec![
            format!("{VOLCANO_QUEUE_GROUP}/v1beta1"),
            format!("{KAI_QUEUE_GROUP}/v2"),
        ],
        _ => {
            let kueue = if kind == "Cohort" {
                &["v1alpha1", "v1beta1", "v1beta2"][..]
            } else {
                &["v1beta1", "v1beta2"][..]
            };
            kueue
                .iter()
                .map(|v| format!("{KUEUE_GROUP}/{v}"))
                .chain([format!("{KESTREL_GROUP}/v1alpha1")])
                .collect()
        }
    };
    if !accepted.iter().any(|a| a == api_version) {
        return Err(r.err(
            "apiVersion",
            format!(
                "{api_version:?} is not an apiVersion Kestrel reads for {kind}; use {}",
                accepted.join(" or ")
            ),
        ));
    }
    let meta = r.map(doc.get("metadata"), "metadata")?;
    let name = r.required_string(
        meta.and_then(|m| m.get("name")),
        "metadata.name",
        "set metadata.name",
    )?;
    let namespace = namespace_of(doc);
    let spec = r.map(doc.get("spec"), "spec")?;
    let empty = Map::new();
    let s = spec.unwrap_or(&empty);
    Ok(match kind {
        "ClusterQueue" => QueueDocument::ClusterQueue(cluster_queue(r, name, s)?),
        "Queue" if api_version.starts_with(VOLCANO_QUEUE_GROUP) => {
            // Volcano's older hierarchy by annotations (its drf plugin's): not read; say so
            // rather than run the queue flat without a word.
            let annotations = meta
                .and_then(|m| m.get("annotations"))
                .and_then(Value::as_object);
            for key in VOLCANO_HIERARCHY_ANNOTATIONS {
                if annotations.is_some_and(|a| a.contains_key(key)) {
                    r.warn(
                        format!("metadata.annotations[{key:?}]"),
                        "is Volcano's hierarchy by annotations, which Kestrel does not read: \
                         the queue sits under its spec.parent (write spec.parent for a \
                         hierarchy)",
                    );
                }
            }
            QueueDocument::ClusterQueue(volcano_queue(r, name, s)?)
        }
        "Queue" => QueueDocument::ClusterQueue(kai_queue(r, name, s)?),
        "LocalQueue" => {
            r.known_fields(s, "spec", LOCAL_QUEUE_FIELDS)?;
            let cluster_queue = r.required_string(
                s.get("clusterQueue"),
                "spec.clusterQueue",
                "name the ClusterQueue this queue submits to",
            )?;
            QueueDocument::LocalQueue(LocalQueueSpec {
                namespace,
                name,
                cluster_queue,
            })
        }
        "Cohort" => {
            r.known_fields(s, "spec", COHORT_FIELDS)?;
            let parent_name = r.string(s.get("parentName"), "spec.parentName")?;
            let parent = r.string(s.get("parent"), "spec.parent")?;
            if let (Some(a), Some(b)) = (parent_name, parent) {
                if a != b {
                    return Err(r.err(
                        "spec.parent",
                        format!("names {b:?} but spec.parentName names {a:?}; keep one"),
                    ));
                }
            }
            if r.fair_weight(s.get("fairSharing"), "spec.fairSharing")? != 1.0 {
                r.warn(
                    "spec.fairSharing.weight",
                    "Kestrel shares idle quota fairly between ClusterQueues, not between \
                     cohorts, and ignores it",
                );
            }
            let parent = parent_name
                .or(parent)
                .filter(|p| !p.is_empty())
                .map(String::from);
            let resource_groups =
                r.resource_groups(s.get("resourceGroups"), "spec.resourceGroups")?;
            if parent.is_none() {
                limits_need_a_parent(
                    r,
                    &resource_groups,
                    "needs a parent cohort to borrow from or lend to; set spec.parentName or remove it",
                )?;
            }
            QueueDocument::Cohort(CohortSpec {
                name,
                parent,
                resource_groups,
            })
        }
        "ResourceFlavor" => QueueDocument::Flavor(flavor(r, name, s)?),
        "Namespace" => QueueDocument::Namespace(
            name,
            r.labels(meta.and_then(|m| m.get("labels")), "metadata.labels")?,
        ),
        "ResourceQuota" => QueueDocument::Quota(resource_quota(r, doc)?),
        "LimitRange" => QueueDocument::LimitRange(limit_range(r, doc, namespace, name)?),
        "PodDisruptionBudget" => {
            QueueDocument::DisruptionBudget(disruption_budget(r, s, namespace, name)?)
        }
        other => {
            return Err(r.err(
                "kind",
                format!("{other} is not a queue kind; use one of {QUEUE_KINDS:?}"),
            ))
        }
    })
}

/// The key [`QueueDocument::key`] gives an object of a queue kind, read from its
/// metadata alone (so an object that does not parse can still be matched with its
/// previous version); `None` for other kinds or without a name.
pub fn queue_document_key(doc: &Value) -> Option<(&'static str, String)> {
    let kind = doc.get("kind").and_then(Value::as_str)?;
    let kind = QUEUE_KINDS.iter().find(|k| **k == kind)?;
    let name = doc.pointer("/metadata/name").and_then(Value::as_str)?;
    Some(match namespaced(kind) {
        true => (kind, format!("{}/{name}", namespace_of(doc))),
        false => (kind, name.to_string()),
    })
}

impl QueueDocument {
    /// The kind and the name (`namespace/name` for namespaced kinds) it is known by.
    pub fn key(&self) -> (&'static str, String) {
        match self {
            QueueDocument::ClusterQueue(q) => ("ClusterQueue", q.name.clone()),
            QueueDocument::LocalQueue(q) => ("LocalQueue", format!("{}/{}", q.namespace, q.name)),
            QueueDocument::Cohort(c) => ("Cohort", c.name.clone()),
            QueueDocument::Flavor(f) => ("ResourceFlavor", f.name.clone()),
            QueueDocument::Namespace(n, _) => ("Namespace", n.clone()),
            QueueDocument::Quota(q) => ("ResourceQuota", format!("{}/{}", q.namespace, q.name)),
            QueueDocument::LimitRange(l) => ("LimitRange", format!("{}/{}", l.namespace, l.name)),
            QueueDocument::DisruptionBudget(b) => {
                ("PodDisruptionBudget", format!("{}/{}", b.namespace, b.name))
            }
        }
    }
}

/// Collects the queue kinds of a file set, refusing names defined twice.
#[derive(Debug, Default)]
pub struct QueueCollector {
    setup: QueueSetup,
    limit_ranges: Vec<LimitRangeDefaults>,
    /// (kind, name) -> where it was first defined.
    origin: BTreeMap<(&'static str, String), String>,
}

impl QueueCollector {
    /// Adds Volcano's `default` queue, which every Volcano cluster has (its installer
    /// creates it: weight 1, reclaimable, no capability), unless a queue of that name was
    /// read. Called when work names it, so that it does not wait on a queue Volcano users
    /// never write.
    pub fn add_volcano_default_queue(&mut self) -> Result<(), LoadError> {
        if self
            .origin
            .contains_key(&("ClusterQueue", "default".to_string()))
        {
            return Ok(());
        }
        let queue = serde_json::json!({
            "apiVersion": format!("{VOLCANO_QUEUE_GROUP}/v1beta1"), "kind": "Queue",
            "metadata": {"name": "default"},
            "spec": {"weight": 1, "reclaimable": true}});
        self.add_document(Path::new("Volcano"), "its default queue", &queue)
    }

    /// Reads one document (of a kind in [`QUEUE_KINDS`]) found at `position` in `path`.
    pub fn add_document(
        &mut self,
        path: &Path,
        position: &str,
        doc: &Value,
    ) -> Result<(), LoadError> {
        let (parsed, warnings) = parse_queue_document(path, position, doc)?;
        self.setup.warnings.extend(warnings);
        let (kind, key) = parsed.key();
        let here = format!("{} {position}", path.display());
        if let Some(first) = self.origin.get(&(kind, key.clone())) {
            if let QueueDocument::Namespace(name, labels) = &parsed {
                let same = self
                    .setup
                    .namespaces
                    .iter()
                    .any(|(n, l)| n == name && l == labels);
                if same {
                    return Ok(());
                }
            }
            return Err(LoadError::new(
                path,
                format!(
                    "{kind} {key} is defined twice: first in {first}, again in {here}; keep one"
                ),
            )
            .object(format!("{kind} {key}"))
            .field("metadata.name"));
        }
        self.origin.insert((kind, key), here);
        let s = &mut self.setup;
        match parsed {
            QueueDocument::ClusterQueue(q) => s.cluster_queues.push(q),
            QueueDocument::LocalQueue(q) => s.local_queues.push(q),
            QueueDocument::Cohort(c) => s.cohorts.push(c),
            QueueDocument::Flavor(f) => s.flavors.push(f),
            QueueDocument::Namespace(n, l) => s.namespaces.push((n, l)),
            QueueDocument::Quota(q) => s.resource_quotas.push(q),
            QueueDocument::LimitRange(l) => self.limit_ranges.push(l),
            QueueDocument::DisruptionBudget(b) => s.disruption_budgets.push(b),
        }
        Ok(())
    }

    /// Default container requests per namespace from its LimitRanges (in file order, the
    /// first to name a resource gives it).
    pub fn container_defaults(&self) -> BTreeMap<String, BTreeMap<String, i64>> {
        let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        for lr in &self.limit_ranges {
            let ns = out.entry(lr.namespace.clone()).or_default();
            for (resource, amount) in &lr.container_requests {
                ns.entry(resource.clone()).or_insert(*amount);
            }
        }
        out
    }

    /// The setup; ClusterQueues naming a flavor no document declares are inactive. Volcano
    /// and KAI queues get the flavor and the cohorts they imply (a queue named as a parent
    /// becomes a cohort: pods go to leaf queues).
    pub fn into_setup(mut self) -> QueueSetup {
        self.setup.add_cluster_wide_structure();
        let flavors: BTreeSet<String> = self.setup.flavors.iter().map(|f| f.name.clone()).collect();
        for q in &mut self.setup.cluster_queues {
            mark_missing_flavors(q, |f| flavors.contains(f));
        }
        self.setup
    }
}

/// Makes a ClusterQueue that names a ResourceFlavor that does not exist inactive, as Kueue
/// does (reason `FlavorNotFound`); active again once every flavor it names exists.
pub fn mark_missing_flavors(q: &mut ClusterQueueSpec, exists: impl Fn(&str) -> bool) {
    q.inactive = q.resource_groups.iter().enumerate().find_map(|(gi, group)| {
        group.flavors.iter().enumerate().find_map(|(fi, f)| {
            (!exists(&f.flavor)).then(|| Inactive {
                reason: FLAVOR_NOT_FOUND,
                message: format!(
                    "spec.resourceGroups[{gi}].flavors[{fi}].name: ResourceFlavor {:?} does not exist; create it, or fix the name",
                    f.flavor
                ),
            })
        })
    });
}

/// Kueue's reason for a ClusterQueue that names a missing ResourceFlavor.
pub const FLAVOR_NOT_FOUND: &str = "FlavorNotFound";

#[cfg(test)]
mod tests;
