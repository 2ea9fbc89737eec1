//! Volcano's and KAI's `Queue`: cluster-wide queues that pods name directly, mapped onto
//! Kestrel's (Kueue-shaped) queue model.
//!
//! Each leaf Queue becomes a [`ClusterQueueSpec`] with `cluster_scoped` set, one resource
//! group on the [`ANY_NODE_FLAVOR`] flavor and the cohort of its parent queue (the top
//! queues share [`VOLCANO_ROOT`] or [`KAI_ROOT`]). What a queue is owed is its nominal
//! quota; what it may reach is nominal plus its borrowing limit; the root cohort holds the
//! rest of the cluster (sized by [`super::QueueSetup::size_cluster_pools`]), so queues
//! without a limit borrow idle capacity, and a queue below what it is owed reclaims it.

use super::reader::{at, describe, Reader};
use super::{QueueDocument, QueueSetup};
use crate::error::LoadError;
use crate::warning::{FieldWarning, WarnedObject};
use kestrel_core::{
    ClusterQueueSpec, CohortSpec, FlavorQuotas, NodeSpec, QueuePreemption, ReclaimPolicy,
    ResourceFlavor, ResourceGroup, ResourceQuota, WithinQueuePreemption, GPU_RESOURCE,
    PODS_RESOURCE,
};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Volcano's queue group.
pub const VOLCANO_QUEUE_GROUP: &str = "scheduling.volcano.sh";
/// KAI's queue group.
pub const KAI_QUEUE_GROUP: &str = "scheduling.run.ai";
/// The pod annotation naming a Volcano queue.
pub const VOLCANO_QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
/// The annotation Volcano's Job controller puts on a Job's pods: the Job's `spec.queue`.
pub const VOLCANO_JOB_QUEUE_ANNOTATION: &str = "volcano.sh/queue-name";
/// The pod label naming a KAI queue.
pub const KAI_QUEUE_LABEL: &str = "kai.scheduler/queue";
/// The flavor Volcano and KAI queues charge: any node.
pub const ANY_NODE_FLAVOR: &str = "any-node";
/// The cohort of Volcano's top queues (those without `spec.parent`, or under `root`).
pub const VOLCANO_ROOT: &str = "volcano-root";
/// The cohort of KAI's top queues (those without `spec.parentQueue`).
pub const KAI_ROOT: &str = "kai-root";
/// Resources every Volcano and KAI queue covers, whether it names them or not: a resource
/// a queue does not name is unlimited for it, not refused.
pub const ALWAYS_COVERED: [&str; 3] = ["cpu", "memory", GPU_RESOURCE];

/// Volcano's hierarchy by annotations on a Queue (its drf plugin's hierarchy), which
/// Kestrel does not read: `spec.parent` is the hierarchy it reads.
pub const VOLCANO_HIERARCHY_ANNOTATIONS: [&str; 2] =
    ["volcano.sh/hierarchy", "volcano.sh/hierarchy-weights"];

pub const VOLCANO_QUEUE_FIELDS: &[&str] = &[
    "weight",
    "capability",
    "deserved",
    "guarantee",
    "reclaimable",
    "parent",
];
pub const KAI_QUEUE_FIELDS: &[&str] = &["parentQueue", "resources", "displayName"];

/// Per resource: owed (nominal) and the most it may use (`None`: no limit).
#[derive(Default)]
struct Amounts {
    nominal: BTreeMap<String, i64>,
    most: BTreeMap<String, i64>,
    /// Kept back from the cohort (Volcano's `guarantee`).
    kept: BTreeMap<String, i64>,
}

impl Amounts {
    /// Per resource, the queues' total: what they are owed, what they keep, and the most
    /// they may use (only where each has a limit).
    fn of_all(queues: &[&ClusterQueueSpec]) -> Amounts {
        let mut out = Amounts::default();
        for r in queues
            .iter()
            .flat_map(|q| &q.resource_groups)
            .flat_map(|g| &g.flavors)
            .flat_map(|f| &f.resources)
        {
            *out.nominal.entry(r.name.clone()).or_default() += r.nominal;
            let kept = r.lending_limit.map_or(0, |l| r.nominal - l);
            *out.kept.entry(r.name.clone()).or_default() += kept;
            if let Some(b) = r.borrowing_limit {
                *out.most.entry(r.name.clone()).or_default() += r.nominal + b;
            }
        }
        out
    }
}

/// The project a parent queue is written for, for the names of its fields.
#[derive(Clone, Copy)]
enum Project {
    Volcano,
    Kai,
}

impl Project {
    fn of(root: &str) -> Project {
        match root {
            KAI_ROOT => Project::Kai,
            _ => Project::Volcano,
        }
    }

    fn limit_field(self, resource: &str) -> String {
        match self {
            Project::Volcano => at("spec.capability", resource),
            Project::Kai => format!("spec.resources.{}.limit", kai_resource(resource)),
        }
    }

    fn owed_field(self, resource: &str) -> String {
        match self {
            Project::Volcano => at("spec.deserved", resource),
            Project::Kai => format!("spec.resources.{}.quota", kai_resource(resource)),
        }
    }

    fn weight_field(self, keeps: bool) -> &'static str {
        match (self, keeps) {
            (Project::Volcano, true) => "spec.reclaimable",
            (Project::Volcano, false) => "spec.weight",
            (Project::Kai, _) => "spec.resources.*.overQuotaWeight",
        }
    }
}

fn kai_resource(resource: &str) -> &str {
    match resource {
        GPU_RESOURCE => "gpu",
        other => other,
    }
}

/// Whether queue `name` hangs (at any depth) under cohort `parent`.
fn is_under(cohort_of: &BTreeMap<String, String>, name: &str, parent: &str) -> bool {
    let mut at = cohort_of.get(name);
    for _ in 0..=cohort_of.len() {
        match at {
            Some(c) if c == parent => return true,
            Some(c) => at = cohort_of.get(c),
            None => return false,
        }
    }
    false
}

/// A parent queue's own limits as its cohort's: the most its subtree uses in all is the
/// parent's limit, which is its children's quota plus the cohort's borrowing limit. What
/// it is owed or keeps beyond its children's total has no place to go (each child is owed
/// its own): a warning each, as is a limit below the children's quota.
fn parent_limits(
    name: &str,
    project: Project,
    own: &Amounts,
    children: &Amounts,
) -> (Vec<ResourceGroup>, Vec<FieldWarning>) {
    let mut warnings = Vec::new();
    let mut resources = Vec::new();
    let amount = |r: &str, v: i64| format!("{} {r}", kestrel_core::format_amount(r, v));
    for (r, &most) in &own.most {
        let owed = children.nominal.get(r).copied().unwrap_or(0);
        if most < owed {
            warnings.push(parent_queue_warning(
                name,
                Some(project.limit_field(r)),
                &format!(
                    "{} is less than its children are owed together ({}), which Volcano and \
                     KAI refuse; Kestrel holds them to what they are owed: raise it",
                    amount(r, most),
                    amount(r, owed),
                ),
            ));
        }
        resources.push(ResourceQuota {
            name: r.clone(),
            nominal: 0,
            borrowing_limit: Some((most - owed).max(0)),
            lending_limit: None,
        });
    }
    for (r, &n) in &own.nominal {
        let owed = children.nominal.get(r).copied().unwrap_or(0);
        if n > owed {
            warnings.push(parent_queue_warning(
                name,
                Some(project.owed_field(r)),
                &format!(
                    "{} is more than its children are owed together ({}); Kestrel owes each \
                     child queue its own and the rest to no one: give it to the children",
                    amount(r, n),
                    amount(r, owed),
                ),
            ));
        }
    }
    for (r, &k) in own.kept.iter().filter(|(_, &k)| k > 0) {
        let kept = children.kept.get(r).copied().unwrap_or(0);
        if k > kept {
            warnings.push(parent_queue_warning(
                name,
                Some(at("spec.guarantee.resource", r)),
                &format!(
                    "{} is more than its children keep together ({}); Kestrel keeps each child \
                     queue's own guarantee only: give it to the children",
                    amount(r, k),
                    amount(r, kept),
                ),
            ));
        }
    }
    let groups = if resources.is_empty() {
        Vec::new()
    } else {
        vec![ResourceGroup {
            covered: resources.iter().map(|r| r.name.clone()).collect(),
            flavors: vec![FlavorQuotas {
                flavor: ANY_NODE_FLAVOR.to_string(),
                resources,
            }],
        }]
    };
    (groups, warnings)
}

/// Reads a Volcano `Queue` (`scheduling.volcano.sh/v1beta1`).
pub(super) fn volcano_queue(
    r: &Reader,
    name: String,
    s: &Map<String, Value>,
) -> Result<ClusterQueueSpec, LoadError> {
    r.known_fields(s, "spec", VOLCANO_QUEUE_FIELDS)?;
    let keeps_borrowed_quota = match s.get("reclaimable") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(reclaimable)) => !reclaimable,
        Some(v) => {
            return Err(r.err(
                "spec.reclaimable",
                format!("is {}; write true or false", describe(v)),
            ))
        }
    };
    let mut a = Amounts::default();
    let deserved = resource_list(r, s.get("deserved"), "spec.deserved")?;
    let guarantee = match r.map(s.get("guarantee"), "spec.guarantee")? {
        Some(g) => resource_list(r, g.get("resource"), "spec.guarantee.resource")?,
        None => BTreeMap::new(),
    };
    let capability = resource_list(r, s.get("capability"), "spec.capability")?;
    for (res, &g) in &guarantee {
        match deserved.get(res) {
            Some(&d) if d < g => {
                return Err(r.err(
                    at("spec.deserved", res),
                    "is less than spec.guarantee.resource; a queue is owed at least what is \
                     reserved for it: raise deserved or lower the guarantee",
                ))
            }
            _ => {}
        }
    }
    for (res, &d) in deserved.iter().chain(guarantee.iter()) {
        a.nominal.entry(res.clone()).or_insert(d);
    }
    a.kept = guarantee;
    for (res, &c) in &capability {
        if let Some(&n) = a.nominal.get(res).filter(|&&n| n > c) {
            let owed = if deserved.contains_key(res) {
                "spec.deserved"
            } else {
                "spec.guarantee.resource"
            };
            return Err(r.err(
                at("spec.capability", res),
                format!(
                    "is less than {owed} ({n} in Kestrel's units); a queue may always use \
                     what it is owed: raise the capability or lower {owed}"
                ),
            ));
        }
        a.most.insert(res.clone(), c);
    }
    let weight = match s.get("weight") {
        None | Some(Value::Null) => 1.0,
        Some(Value::Number(n)) if n.as_f64().is_some_and(|w| w > 0.0) => n.as_f64().unwrap_or(1.0),
        Some(v) => {
            return Err(r.err(
                "spec.weight",
                format!("{v} is not a positive number; write e.g. 1"),
            ))
        }
    };
    let parent = r
        .string(s.get("parent"), "spec.parent")?
        .filter(|p| !p.is_empty() && *p != "root")
        .unwrap_or(VOLCANO_ROOT);
    Ok(ClusterQueueSpec {
        keeps_borrowed_quota,
        ..queue_spec(name, parent, weight, a)
    })
}

/// Reads a KAI `Queue` (`scheduling.run.ai/v2`): `resources.{gpu,cpu,memory}` with
/// `quota`, `limit` (`-1`: none) and `overQuotaWeight`; GPUs in units, CPU in millicores,
/// memory in megabytes.
pub(super) fn kai_queue(
    r: &Reader,
    name: String,
    s: &Map<String, Value>,
) -> Result<ClusterQueueSpec, LoadError> {
    r.known_fields(s, "spec", KAI_QUEUE_FIELDS)?;
    let mut a = Amounts::default();
    let mut weights = Vec::new();
    if let Some(resources) = r.map(s.get("resources"), "spec.resources")? {
        for (key, v) in resources {
            let field = at("spec.resources", key);
            let (resource, scale) = match key.as_str() {
                "gpu" => (GPU_RESOURCE, 1000),
                "cpu" => ("cpu", 1),
                "memory" => ("memory", 1_000_000),
                other => {
                    return Err(r.err(
                        field,
                        format!("{other:?} is not a KAI queue resource; use gpu, cpu or memory"),
                    ))
                }
            };
            let Some(m) = r.map(Some(v), &field)? else {
                continue;
            };
            r.known_fields(m, &field, &["quota", "limit", "overQuotaWeight"])?;
            let number = |k: &str| -> Result<Option<f64>, LoadError> {
                match m.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::Number(n)) => Ok(n.as_f64()),
                    Some(other) => Err(r.err(
                        at(&field, k),
                        format!("is {}; write a number (-1: no limit)", describe(other)),
                    )),
                }
            };
            let amount = |k: &str, x: f64| -> Result<i64, LoadError> {
                if x < 0.0 && x != -1.0 {
                    return Err(r.err(
                        at(&field, k),
                        format!("{x} is negative; write 0 or more, or -1 for no limit"),
                    ));
                }
                Ok((x * scale as f64).round() as i64)
            };
            let quota = number("quota")?.map(|q| amount("quota", q)).transpose()?;
            let limit = number("limit")?.map(|l| amount("limit", l)).transpose()?;
            // -1 quota: nothing is reserved for the queue; it takes what is free.
            let nominal = quota.filter(|&q| q >= 0).unwrap_or(0);
            a.nominal.insert(resource.to_string(), nominal);
            if let Some(limit) = limit.filter(|&l| l >= 0) {
                if limit < nominal {
                    return Err(r.err(
                        at(&field, "limit"),
                        "is less than its quota; a queue may always use its quota: raise the \
                         limit, or write -1 for none",
                    ));
                }
                a.most.insert(resource.to_string(), limit);
            }
            if let Some(w) = number("overQuotaWeight")? {
                if w < 0.0 {
                    return Err(r.err(
                        at(&field, "overQuotaWeight"),
                        format!("{w} is negative; write 0 or more"),
                    ));
                }
                weights.push((key.clone(), w));
            }
        }
    }
    // Kestrel shares borrowed capacity by one weight per queue: the GPUs' when given.
    let weight = weights
        .iter()
        .find(|(k, _)| k == "gpu")
        .or(weights.first())
        .map_or(1.0, |(_, w)| *w);
    if weights.iter().any(|(_, w)| *w != weight) {
        r.warn(
            "spec.resources",
            format!(
                "overQuotaWeight differs per resource; Kestrel shares idle capacity by one \
                 weight per queue and uses {weight}"
            ),
        );
    }
    let parent = r
        .string(s.get("parentQueue"), "spec.parentQueue")?
        .filter(|p| !p.is_empty())
        .unwrap_or(KAI_ROOT);
    Ok(queue_spec(name, parent, weight, a))
}

fn queue_spec(name: String, cohort: &str, weight: f64, a: Amounts) -> ClusterQueueSpec {
    let mut covered: Vec<String> = ALWAYS_COVERED.iter().map(|r| r.to_string()).collect();
    for r in a.nominal.keys().chain(a.most.keys()) {
        if !covered.contains(r) {
            covered.push(r.clone());
        }
    }
    let resources = covered
        .iter()
        .map(|res| {
            let nominal = a.nominal.get(res).copied().unwrap_or(0);
            ResourceQuota {
                name: res.clone(),
                nominal,
                borrowing_limit: a.most.get(res).map(|m| m - nominal),
                lending_limit: a.kept.get(res).map(|k| nominal - k),
            }
        })
        .collect();
    ClusterQueueSpec {
        name,
        cohort: Some(cohort.to_string()),
        resource_groups: vec![ResourceGroup {
            covered,
            flavors: vec![FlavorQuotas {
                flavor: ANY_NODE_FLAVOR.to_string(),
                resources,
            }],
        }],
        // Both schedulers preempt lower priority in a queue and reclaim what others borrow.
        preemption: QueuePreemption {
            within_cluster_queue: WithinQueuePreemption::LowerPriority,
            reclaim_within_cohort: ReclaimPolicy::Any,
            borrow_within_cohort: None,
        },
        fair_weight: weight,
        cluster_scoped: true,
        ..Default::default()
    }
}

/// A Kubernetes ResourceList (`{cpu: 8, nvidia.com/gpu: 4}`) in the engine's units.
fn resource_list(
    r: &Reader,
    v: Option<&Value>,
    field: &str,
) -> Result<BTreeMap<String, i64>, LoadError> {
    let mut out = BTreeMap::new();
    if let Some(m) = r.map(v, field)? {
        for (res, q) in m {
            out.insert(res.clone(), r.quota(q, &at(field, res), res)?);
        }
    }
    Ok(out)
}

/// A warning about a parent queue as a whole. Its apiVersion and uid are not known here
/// (Volcano's and KAI's parents are named by their children): the live scheduler takes
/// them from the listed object, if there is one.
fn parent_queue_warning(parent: &str, field: Option<String>, message: &str) -> FieldWarning {
    FieldWarning {
        source: None,
        object: WarnedObject {
            kind: "Queue".into(),
            api_version: None,
            namespace: None,
            name: parent.to_string(),
            uid: None,
        },
        field,
        message: message.to_string(),
        reason: crate::warning::FIELD_NOT_HONOURED,
    }
}

impl QueueSetup {
    /// The flavor and cohorts Volcano and KAI queues imply: [`ANY_NODE_FLAVOR`]; a cohort
    /// for each queue named as a parent (which then admits nothing itself: pods go to leaf
    /// queues, as in both projects); and the root cohorts, whose quota
    /// [`QueueSetup::size_cluster_pools`] sets to the rest of the cluster.
    pub(super) fn add_cluster_wide_structure(&mut self) {
        let cohort_of: BTreeMap<String, String> = self
            .cluster_queues
            .iter()
            .filter(|q| q.cluster_scoped)
            .filter_map(|q| Some((q.name.clone(), q.cohort.clone()?)))
            .collect();
        if cohort_of.is_empty() {
            return;
        }
        let roots = [VOLCANO_ROOT, KAI_ROOT];
        let parents: BTreeSet<&String> = cohort_of
            .values()
            .filter(|c| !roots.contains(&c.as_str()))
            .collect();
        let mut warnings = Vec::new();
        for parent in &parents {
            let leaves: Vec<&ClusterQueueSpec> = self
                .cluster_queues
                .iter()
                .filter(|q| q.cluster_scoped && !parents.contains(&q.name))
                .filter(|q| is_under(&cohort_of, &q.name, parent))
                .collect();
            let children = Amounts::of_all(&leaves);
            let spec = match self.cluster_queues.iter().position(|q| &&q.name == parent) {
                Some(i) => {
                    let project = Project::of(&self.root_cohort_of(&self.cluster_queues[i]));
                    let q = self.cluster_queues.remove(i);
                    let own = Amounts::of_all(&[&q]);
                    let (groups, said) = parent_limits(&q.name, project, &own, &children);
                    warnings.extend(said);
                    if q.fair_weight != 1.0 || q.keeps_borrowed_quota {
                        warnings.push(parent_queue_warning(
                            parent,
                            Some(project.weight_field(q.keeps_borrowed_quota).to_string()),
                            "is a parent queue's; Kestrel shares idle capacity and reclaims \
                             between leaf queues only, and ignores it",
                        ));
                    }
                    CohortSpec {
                        name: q.name,
                        parent: q.cohort,
                        resource_groups: groups,
                    }
                }
                None => {
                    warnings.push(parent_queue_warning(
                        parent,
                        None,
                        "is named as a parent queue and not defined; its children share only \
                         their own quotas (define the parent queue)",
                    ));
                    CohortSpec {
                        name: parent.to_string(),
                        ..Default::default()
                    }
                }
            };
            if !self.cohorts.iter().any(|c| c.name == spec.name) {
                self.cohorts.push(spec);
            }
        }
        for root in roots {
            let covered: BTreeSet<String> = self
                .cluster_queues
                .iter()
                .filter(|q| q.cluster_scoped && self.root_cohort_of(q) == root)
                .flat_map(|q| q.resource_groups.iter().flat_map(|g| g.covered.clone()))
                .collect();
            if covered.is_empty() || self.cohorts.iter().any(|c| c.name == root) {
                continue;
            }
            self.cohorts.push(CohortSpec {
                name: root.to_string(),
                parent: None,
                resource_groups: vec![ResourceGroup {
                    covered: covered.iter().cloned().collect(),
                    flavors: vec![FlavorQuotas {
                        flavor: ANY_NODE_FLAVOR.to_string(),
                        resources: covered
                            .iter()
                            .map(|r| ResourceQuota {
                                name: r.clone(),
                                nominal: 0,
                                borrowing_limit: None,
                                lending_limit: None,
                            })
                            .collect(),
                    }],
                }],
            });
        }
        if !self.flavors.iter().any(|f| f.name == ANY_NODE_FLAVOR) {
            self.flavors.push(ResourceFlavor {
                name: ANY_NODE_FLAVOR.to_string(),
                ..Default::default()
            });
        }
        self.warnings.extend(warnings);
    }

    fn root_cohort_of(&self, q: &ClusterQueueSpec) -> String {
        let mut at = q.cohort.clone().unwrap_or_default();
        for _ in 0..=self.cohorts.len() {
            match self
                .cohorts
                .iter()
                .find(|c| c.name == at)
                .and_then(|c| c.parent.clone())
            {
                Some(p) => at = p,
                None => break,
            }
        }
        at
    }

    /// Sizes the root cohorts of Volcano and KAI queues to the cluster: `capacity` (per
    /// resource, in the engine's units) less what the queues themselves lend, so that the
    /// queues of a tree share exactly the cluster.
    pub fn size_cluster_pools(&mut self, capacity: &BTreeMap<String, i64>) {
        let mut lent: BTreeMap<(String, String), i64> = BTreeMap::new();
        for q in self.cluster_queues.iter().filter(|q| q.cluster_scoped) {
            let root = self.root_cohort_of(q);
            for f in q.resource_groups.iter().flat_map(|g| &g.flavors) {
                for r in &f.resources {
                    *lent.entry((root.clone(), r.name.clone())).or_default() +=
                        r.lending_limit.unwrap_or(r.nominal);
                }
            }
        }
        for cohort in &mut self.cohorts {
            if cohort.name != VOLCANO_ROOT && cohort.name != KAI_ROOT {
                continue;
            }
            for f in cohort
                .resource_groups
                .iter_mut()
                .flat_map(|g| &mut g.flavors)
            {
                for r in &mut f.resources {
                    let cluster = capacity.get(&r.name).copied().unwrap_or(0);
                    let queues = lent
                        .get(&(cohort.name.clone(), r.name.clone()))
                        .copied()
                        .unwrap_or(0);
                    r.nominal = (cluster - queues).max(0);
                }
            }
        }
    }
}

/// What the cluster's nodes offer, per resource in the engine's units (GPUs in
/// thousandths), for sizing the root cohorts of Volcano and KAI queues.
pub fn cluster_capacity<'a>(
    nodes: impl IntoIterator<Item = &'a NodeSpec>,
) -> BTreeMap<String, i64> {
    let mut capacity: BTreeMap<String, i64> = BTreeMap::new();
    for node in nodes {
        let a = &node.allocatable;
        let gpus = 1000 * node.gpus.len() as i64;
        for (name, amount) in [
            ("cpu", a.cpu_milli),
            ("memory", a.memory_bytes),
            ("ephemeral-storage", a.ephemeral_storage_bytes),
            (GPU_RESOURCE, gpus),
            (PODS_RESOURCE, i64::from(node.max_pods)),
        ]
        .into_iter()
        .chain(a.extended.iter().map(|(n, v)| (n.as_str(), *v)))
        {
            *capacity.entry(name.to_string()).or_default() += amount;
        }
    }
    capacity
}

/// For the live scheduler, which reads queue objects one at a time: the Volcano and KAI
/// queues among `docs` with the structure they imply (parent queues as cohorts, the
/// root cohorts sized to `capacity`, the any-node flavor), as the simulator builds it from
/// its files. Other documents pass through unchanged. Also returns the warnings.
pub fn with_cluster_wide_structure(
    docs: Vec<QueueDocument>,
    capacity: &BTreeMap<String, i64>,
) -> (Vec<QueueDocument>, Vec<FieldWarning>) {
    let (scoped, mut out): (Vec<QueueDocument>, Vec<QueueDocument>) = docs
        .into_iter()
        .partition(|d| matches!(d, QueueDocument::ClusterQueue(q) if q.cluster_scoped));
    if scoped.is_empty() {
        return (out, Vec::new());
    }
    let mut setup = QueueSetup {
        cluster_queues: scoped
            .into_iter()
            .filter_map(|d| match d {
                QueueDocument::ClusterQueue(q) => Some(q),
                _ => None,
            })
            .collect(),
        ..Default::default()
    };
    setup.add_cluster_wide_structure();
    setup.size_cluster_pools(capacity);
    let declared = |name: &str, out: &[QueueDocument]| {
        out.iter()
            .any(|d| matches!(d, QueueDocument::Flavor(f) if f.name == name))
    };
    for flavor in setup.flavors {
        if !declared(&flavor.name, &out) {
            out.push(QueueDocument::Flavor(flavor));
        }
    }
    out.extend(setup.cohorts.into_iter().map(QueueDocument::Cohort));
    out.extend(
        setup
            .cluster_queues
            .into_iter()
            .map(QueueDocument::ClusterQueue),
    );
    (out, setup.warnings)
}
