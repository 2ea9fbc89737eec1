//! Team queues and namespace limits from the YAML users apply to a cluster.
//!
//! | kind | apiVersion | becomes |
//! |---|---|---|
//! | `ClusterQueue` | `kueue.x-k8s.io/v1beta1`, `v1beta2`, `scheduling.kestrel.dev/v1alpha1` | [`ClusterQueueSpec`] |
//! | `LocalQueue` | same | [`LocalQueueSpec`] |
//! | `Cohort` | `kueue.x-k8s.io/v1alpha1`, `v1beta1`, `v1beta2`, `scheduling.kestrel.dev/v1alpha1` | [`CohortSpec`] |
//! | `ResourceFlavor` | as `ClusterQueue` | [`ResourceFlavor`] |
//! | `Namespace` | `v1` | its labels, for ClusterQueue `namespaceSelector`s |
//! | `ResourceQuota` | `v1` | [`NamespaceQuota`] |
//! | `LimitRange` | `v1` | default container requests per namespace ([`LimitRangeDefaults`]) |
//! | `PodDisruptionBudget` | `policy/v1` | [`DisruptionBudget`]: preemption takes victims that keep it first |
//!
//! Field names are Kueue's. A ClusterQueue reads `spec.cohort` (Kueue v1beta1) or
//! `spec.cohortName`, `namespaceSelector` (`matchLabels`, `matchExpressions`; `{}` selects
//! every namespace; Kestrel reads an absent selector as every namespace too, where Kueue
//! selects none), `queueingStrategy`, `resourceGroups`, `preemption`, `fairSharing.weight`
//! (default 1), `stopPolicy`, and Kestrel's `minRuntimeSeconds` and `preemptionDelaySeconds`
//! (`defaultRuntimeSeconds` is accepted and not used yet). Kestrel's own objects
//! (`scheduling.kestrel.dev`) may hold only the fields Kestrel reads: an unknown field is
//! an error. Kueue's objects may hold Kueue's other fields (`flavorFungibility`,
//! `admissionChecks` ...), which are ignored.
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
//! skipped. Scoped quotas (`spec.scopes`, `spec.scopeSelector`) are refused: the simulator
//! cannot tell which pods they count.
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
use crate::fields::Ctx;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kestrel_core::{
    parse_quantity, quota_scale, BorrowWithinCohort, ClusterQueueSpec, CohortSpec,
    DisruptionBudget, DisruptionLimit, FlavorQuotas, IntOrPercent, Labels, LocalQueueSpec, Millis,
    QueuePreemption, QueueingStrategy, ReclaimPolicy, Requirement, ResourceFlavor, ResourceGroup,
    ResourceQuota, SelectorOperator, StopPolicy, Taint, TaintEffect, WithinQueuePreemption,
    PODS_RESOURCE,
};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

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
    pub resource_quotas: Vec<NamespaceQuota>,
    pub disruption_budgets: Vec<DisruptionBudget>,
}

/// A namespace's ResourceQuota: the API server refuses pod creations beyond `hard`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamespaceQuota {
    pub namespace: String,
    pub name: String,
    /// (resource, amount) in the engine's units: `cpu` in millicores, `memory` in bytes,
    /// `nvidia.com/gpu` in thousandths, `pods` a count (from `requests.cpu`, `cpu`,
    /// `requests.nvidia.com/gpu`, `pods`, `count/pods` ...).
    pub hard: Vec<(String, i64)>,
}

/// Kueue's API group.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io";
/// Kestrel's API group.
pub const KESTREL_GROUP: &str = "scheduling.kestrel.dev";
/// Kueue's label naming the LocalQueue a workload is submitted to.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kestrel's label naming the LocalQueue; wins over Kueue's when both are set.
pub const KESTREL_QUEUE_LABEL: &str = "kestrel.dev/queue";
/// The kinds this module reads.
pub const QUEUE_KINDS: [&str; 8] = [
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "ResourceFlavor",
    "Namespace",
    "ResourceQuota",
    "LimitRange",
    "PodDisruptionBudget",
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
    Quota(NamespaceQuota),
    LimitRange(LimitRangeDefaults),
    DisruptionBudget(DisruptionBudget),
}

/// What a LimitRange fills in for containers without requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRangeDefaults {
    pub namespace: String,
    pub name: String,
    /// Per resource, in the units of pod requests (cpu in millicores, memory in bytes,
    /// extended resources, GPUs included, in whole units).
    pub container_requests: BTreeMap<String, i64>,
}

const CLUSTER_QUEUE_FIELDS: &[&str] = &[
    "cohort",
    "cohortName",
    "namespaceSelector",
    "queueingStrategy",
    "resourceGroups",
    "preemption",
    "fairSharing",
    "stopPolicy",
    "minRuntimeSeconds",
    "preemptionDelaySeconds",
    "defaultRuntimeSeconds",
];
const LOCAL_QUEUE_FIELDS: &[&str] = &["clusterQueue"];
const COHORT_FIELDS: &[&str] = &["parentName", "parent", "resourceGroups", "fairSharing"];
const FLAVOR_FIELDS: &[&str] = &["nodeLabels", "nodeTaints", "tolerations", "topologyName"];

fn group_of(api_version: &str) -> &str {
    api_version.split('/').next().unwrap_or("")
}

/// `spec` + `x` -> `spec.x`.
fn at(field: &str, key: &str) -> String {
    if field.is_empty() {
        key.to_string()
    } else {
        format!("{field}.{key}")
    }
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Reads fields of one object, with errors naming the object and the field.
struct Reader<'a> {
    ctx: Ctx<'a>,
    /// Kestrel's own objects: unknown fields are errors.
    strict: bool,
}

impl Reader<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> LoadError {
        self.ctx.err(field, message)
    }

    /// A mapping; `None` when absent or null.
    fn map<'v>(
        &self,
        v: Option<&'v Value>,
        field: &str,
    ) -> Result<Option<&'v Map<String, Value>>, LoadError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(other) => Err(self.err(
                field,
                format!(
                    "is {}; write a mapping ({{key: value, ...}})",
                    describe(other)
                ),
            )),
        }
    }

    /// A mapping that must be there (a list entry).
    fn entry<'v>(&self, v: &'v Value, field: &str) -> Result<&'v Map<String, Value>, LoadError> {
        self.map(Some(v), field)?
            .ok_or_else(|| self.err(field, "is empty; write a mapping ({key: value, ...})"))
    }

    /// A list; empty when absent or null.
    fn list<'v>(&self, v: Option<&'v Value>, field: &str) -> Result<&'v [Value], LoadError> {
        match v {
            None | Some(Value::Null) => Ok(&[]),
            Some(Value::Array(items)) => Ok(items),
            Some(other) => Err(self.err(
                field,
                format!("is {}; write a list ([...])", describe(other)),
            )),
        }
    }

    /// A string; `None` when absent or null.
    fn string<'v>(&self, v: Option<&'v Value>, field: &str) -> Result<Option<&'v str>, LoadError> {
        match v {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(
                field,
                format!("is {}; write a string (quote it)", describe(other)),
            )),
        }
    }

    /// A non-empty string that must be there.
    fn required_string(
        &self,
        v: Option<&Value>,
        field: &str,
        hint: &str,
    ) -> Result<String, LoadError> {
        match self.string(v, field)? {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            _ => Err(self.err(field, format!("is missing; {hint}"))),
        }
    }

    /// A map of strings (labels).
    fn labels(&self, v: Option<&Value>, field: &str) -> Result<Labels, LoadError> {
        let mut out = Labels::new();
        for (k, v) in self.map(v, field)?.into_iter().flatten() {
            let f = format!("{field}[{k:?}]");
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => {
                    return Err(self.err(
                        f,
                        format!("is {}; label values are strings, quote it", describe(other)),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Refuses fields Kestrel does not read, in Kestrel's own objects.
    fn known_fields(
        &self,
        m: &Map<String, Value>,
        field: &str,
        allowed: &[&str],
    ) -> Result<(), LoadError> {
        if !self.strict {
            return Ok(());
        }
        match m.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(self.err(
                at(field, k),
                format!(
                    "unknown field {k:?}; Kestrel reads {} here",
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    /// One of a fixed set of names; `None` when absent.
    fn choice<T: Copy>(
        &self,
        v: Option<&Value>,
        field: &str,
        options: &[(&str, T)],
    ) -> Result<Option<T>, LoadError> {
        let Some(s) = self.string(v, field)? else {
            return Ok(None);
        };
        match options.iter().find(|(name, _)| *name == s) {
            Some((_, t)) => Ok(Some(*t)),
            None => Err(self.err(
                field,
                format!(
                    "unknown value {s:?}; use {}",
                    options
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// A quantity (string or number) as written.
    fn quantity_text(&self, v: &Value, field: &str) -> Result<String, LoadError> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            other => Err(self.err(
                field,
                format!(
                    "is {}; write a quantity, e.g. \"16\", \"500m\" or \"64Gi\"",
                    describe(other)
                ),
            )),
        }
    }

    /// A quota of `resource` in the engine's units; 0 or more.
    fn quota(&self, v: &Value, field: &str, resource: &str) -> Result<i64, LoadError> {
        let text = self.quantity_text(v, field)?;
        let amount = parse_quantity(&text, quota_scale(resource))
            .map_err(|e| self.err(field, e.to_string()))?;
        if amount < 0 {
            return Err(self.err(field, format!("{text:?} is negative; quotas are 0 or more")));
        }
        Ok(amount)
    }

    /// A whole number of seconds (0 or more) as milliseconds; `None` when absent.
    fn seconds(&self, v: Option<&Value>, field: &str) -> Result<Option<Millis>, LoadError> {
        let secs = match v {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
            Some(_) => None,
        };
        match secs {
            Some(s) => Ok(Some(s.saturating_mul(1000))),
            None => Err(self.err(
                field,
                "is not a whole number of seconds (0 or more); write e.g. 600",
            )),
        }
    }

    /// A label selector (`matchLabels` and `matchExpressions`); `None` when absent.
    fn selector(
        &self,
        v: Option<&Value>,
        field: &str,
    ) -> Result<Option<Vec<Requirement>>, LoadError> {
        let Some(m) = self.map(v, field)? else {
            return Ok(None);
        };
        self.known_fields(m, field, &["matchLabels", "matchExpressions"])?;
        let mut out: Vec<Requirement> = self
            .labels(m.get("matchLabels"), &at(field, "matchLabels"))?
            .into_iter()
            .map(|(key, value)| Requirement {
                key,
                operator: SelectorOperator::In,
                values: vec![value],
            })
            .collect();
        let ef = at(field, "matchExpressions");
        for (i, e) in self
            .list(m.get("matchExpressions"), &ef)?
            .iter()
            .enumerate()
        {
            let f = format!("{ef}[{i}]");
            let e = self.entry(e, &f)?;
            self.known_fields(e, &f, &["key", "operator", "values"])?;
            let key = self.required_string(e.get("key"), &at(&f, "key"), "set the label key")?;
            use SelectorOperator::*;
            let operator = self
                .choice(
                    e.get("operator"),
                    &at(&f, "operator"),
                    &[
                        ("In", In),
                        ("NotIn", NotIn),
                        ("Exists", Exists),
                        ("DoesNotExist", DoesNotExist),
                    ],
                )?
                .ok_or_else(|| {
                    self.err(
                        at(&f, "operator"),
                        "is missing; use In, NotIn, Exists or DoesNotExist",
                    )
                })?;
            let vf = at(&f, "values");
            let mut values = Vec::new();
            for (j, v) in self.list(e.get("values"), &vf)?.iter().enumerate() {
                match v {
                    Value::String(s) => values.push(s.clone()),
                    other => {
                        return Err(self.err(
                            format!("{vf}[{j}]"),
                            format!("is {}; label values are strings, quote it", describe(other)),
                        ))
                    }
                }
            }
            match operator {
                In | NotIn if values.is_empty() => {
                    return Err(self.err(vf, "operator In and NotIn need one or more values"))
                }
                Exists | DoesNotExist if !values.is_empty() => {
                    return Err(self.err(
                        vf,
                        "operator Exists and DoesNotExist take no values; remove them",
                    ))
                }
                _ => {}
            }
            out.push(Requirement {
                key,
                operator,
                values,
            });
        }
        Ok(Some(out))
    }

    /// `resourceGroups`, checked as Kueue checks them.
    fn resource_groups(
        &self,
        v: Option<&Value>,
        field: &str,
    ) -> Result<Vec<ResourceGroup>, LoadError> {
        let mut groups = Vec::new();
        // resource -> the group covering it; flavor -> the group listing it.
        let mut covered_by: BTreeMap<String, usize> = BTreeMap::new();
        let mut flavor_in: BTreeMap<String, usize> = BTreeMap::new();
        for (gi, g) in self.list(v, field)?.iter().enumerate() {
            let gf = format!("{field}[{gi}]");
            let g = self.entry(g, &gf)?;
            self.known_fields(g, &gf, &["coveredResources", "flavors"])?;
            let cf = at(&gf, "coveredResources");
            let mut covered = Vec::new();
            for (i, r) in self
                .list(g.get("coveredResources"), &cf)?
                .iter()
                .enumerate()
            {
                let f = format!("{cf}[{i}]");
                let r = self.required_string(
                    Some(r),
                    &f,
                    "write a resource name, e.g. nvidia.com/gpu",
                )?;
                if let Some(other) = covered_by.insert(r.clone(), gi) {
                    return Err(self.err(
                        f,
                        format!(
                            "{r} is already covered by {field}[{other}]; cover each resource in one group"
                        ),
                    ));
                }
                covered.push(r);
            }
            if covered.is_empty() {
                return Err(self.err(
                    cf,
                    "is empty; list the resources this group's flavors give quota for, e.g. [cpu, memory, nvidia.com/gpu]",
                ));
            }
            let ff = at(&gf, "flavors");
            let mut flavors = Vec::new();
            for (fi, fl) in self.list(g.get("flavors"), &ff)?.iter().enumerate() {
                let f = format!("{ff}[{fi}]");
                let fl = self.entry(fl, &f)?;
                self.known_fields(fl, &f, &["name", "resources"])?;
                let name = self.required_string(
                    fl.get("name"),
                    &at(&f, "name"),
                    "set the ResourceFlavor's name",
                )?;
                if let Some(other) = flavor_in.insert(name.clone(), gi) {
                    return Err(self.err(
                        at(&f, "name"),
                        format!(
                            "flavor {name} is already listed in {field}[{other}]; a flavor may appear in one resource group of a queue"
                        ),
                    ));
                }
                let rf = at(&f, "resources");
                let mut resources: Vec<ResourceQuota> = Vec::new();
                for (ri, r) in self.list(fl.get("resources"), &rf)?.iter().enumerate() {
                    let f = format!("{rf}[{ri}]");
                    let r = self.entry(r, &f)?;
                    self.known_fields(
                        r,
                        &f,
                        &["name", "nominalQuota", "borrowingLimit", "lendingLimit"],
                    )?;
                    let rname = self.required_string(
                        r.get("name"),
                        &at(&f, "name"),
                        "set the resource name",
                    )?;
                    if !covered.contains(&rname) {
                        return Err(self.err(
                            at(&f, "name"),
                            format!(
                                "{rname} is not in {cf} {covered:?}; add it there or remove this quota"
                            ),
                        ));
                    }
                    if resources.iter().any(|q| q.name == rname) {
                        return Err(self.err(
                            at(&f, "name"),
                            format!("{rname} has two quotas in flavor {name}; keep one"),
                        ));
                    }
                    let nf = at(&f, "nominalQuota");
                    let nominal = match r.get("nominalQuota") {
                        None | Some(Value::Null) => {
                            return Err(self.err(
                                nf,
                                format!(
                                    "is missing; set the quota of {rname}, e.g. nominalQuota: 8"
                                ),
                            ))
                        }
                        Some(v) => self.quota(v, &nf, &rname)?,
                    };
                    let optional = |key: &str| -> Result<Option<i64>, LoadError> {
                        match r.get(key) {
                            None | Some(Value::Null) => Ok(None),
                            Some(v) => self.quota(v, &at(&f, key), &rname).map(Some),
                        }
                    };
                    let borrowing_limit = optional("borrowingLimit")?;
                    let lending_limit = optional("lendingLimit")?;
                    if lending_limit.is_some_and(|l| l > nominal) {
                        return Err(self.err(
                            at(&f, "lendingLimit"),
                            "is more than nominalQuota; a queue lends at most its own quota",
                        ));
                    }
                    resources.push(ResourceQuota {
                        name: rname,
                        nominal,
                        borrowing_limit,
                        lending_limit,
                    });
                }
                if resources.is_empty() {
                    return Err(self.err(
                        rf,
                        "is empty; give a quota for each covered resource, e.g. [{name: nvidia.com/gpu, nominalQuota: 8}]",
                    ));
                }
                flavors.push(FlavorQuotas {
                    flavor: name,
                    resources,
                });
            }
            if flavors.is_empty() {
                return Err(self.err(ff, "is empty; list one or more flavors with their quotas"));
            }
            groups.push(ResourceGroup { covered, flavors });
        }
        Ok(groups)
    }

    /// `fairSharing.weight`: a quantity or number, default 1.
    fn fair_weight(&self, v: Option<&Value>, field: &str) -> Result<f64, LoadError> {
        let Some(m) = self.map(v, field)? else {
            return Ok(1.0);
        };
        self.known_fields(m, field, &["weight"])?;
        let wf = at(field, "weight");
        let Some(w) = m.get("weight").filter(|w| !w.is_null()) else {
            return Ok(1.0);
        };
        let text = self.quantity_text(w, &wf)?;
        let milli = parse_quantity(&text, 1000).map_err(|e| self.err(&wf, e.to_string()))?;
        if milli < 0 {
            return Err(self.err(wf, format!("{text:?} is negative; write 0 or more")));
        }
        Ok(milli as f64 / 1000.0)
    }

    fn preemption(&self, v: Option<&Value>, field: &str) -> Result<QueuePreemption, LoadError> {
        let Some(m) = self.map(v, field)? else {
            return Ok(QueuePreemption::default());
        };
        self.known_fields(
            m,
            field,
            &[
                "withinClusterQueue",
                "reclaimWithinCohort",
                "borrowWithinCohort",
            ],
        )?;
        use ReclaimPolicy as R;
        use WithinQueuePreemption as W;
        let within_cluster_queue = self
            .choice(
                m.get("withinClusterQueue"),
                &at(field, "withinClusterQueue"),
                &[
                    ("Never", W::Never),
                    ("LowerPriority", W::LowerPriority),
                    ("LowerOrNewerEqualPriority", W::LowerOrNewerEqualPriority),
                ],
            )?
            .unwrap_or_default();
        let reclaim_within_cohort = self
            .choice(
                m.get("reclaimWithinCohort"),
                &at(field, "reclaimWithinCohort"),
                &[
                    ("Never", R::Never),
                    ("LowerPriority", R::LowerPriority),
                    ("Any", R::Any),
                ],
            )?
            .unwrap_or_default();
        let bf = at(field, "borrowWithinCohort");
        let borrow_within_cohort = match self.map(m.get("borrowWithinCohort"), &bf)? {
            None => None,
            Some(b) => {
                self.known_fields(b, &bf, &["policy", "maxPriorityThreshold"])?;
                let lower = self
                    .choice(
                        b.get("policy"),
                        &at(&bf, "policy"),
                        &[("Never", false), ("LowerPriority", true)],
                    )?
                    .unwrap_or(false);
                let tf = at(&bf, "maxPriorityThreshold");
                let threshold = match b.get("maxPriorityThreshold") {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(v.as_i64().and_then(|t| i32::try_from(t).ok()).ok_or_else(
                        || self.err(tf, "is not a priority (a whole number); write e.g. 1000"),
                    )?),
                };
                lower.then_some(BorrowWithinCohort {
                    max_priority_threshold: threshold,
                })
            }
        };
        if borrow_within_cohort.is_some() && reclaim_within_cohort == R::Never {
            return Err(self.err(
                at(&bf, "policy"),
                "LowerPriority needs reclaimWithinCohort LowerPriority or Any (as Kueue requires); set reclaimWithinCohort or the policy Never",
            ));
        }
        Ok(QueuePreemption {
            within_cluster_queue,
            reclaim_within_cohort,
            borrow_within_cohort,
        })
    }
}

/// The object's name, namespace and the reader for its errors.
fn reader<'a>(path: &'a Path, position: &str, doc: &Value) -> Reader<'a> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let meta = doc.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    let object = match name {
        Some(name) if namespaced(kind) => format!("{kind} {}/{name}", namespace_of(doc)),
        Some(name) => format!("{kind} {name}"),
        None => format!("{kind} at {position}"),
    };
    Reader {
        ctx: Ctx { path, object },
        strict: group_of(api_version) == KESTREL_GROUP,
    }
}

fn namespaced(kind: &str) -> bool {
    matches!(
        kind,
        "LocalQueue" | "ResourceQuota" | "LimitRange" | "PodDisruptionBudget"
    )
}

fn namespace_of(doc: &Value) -> String {
    doc.get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// Reads one object of a kind in [`QUEUE_KINDS`]. `position` says where it is in its file
/// (`document 3`), for objects without a name.
pub fn parse_queue_document(
    path: &Path,
    position: &str,
    doc: &Value,
) -> Result<QueueDocument, LoadError> {
    let r = reader(path, position, doc);
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let accepted: Vec<String> = match kind {
        "Namespace" | "ResourceQuota" | "LimitRange" => vec!["v1".into()],
        "PodDisruptionBudget" => vec!["policy/v1".into()],
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
        "ClusterQueue" => QueueDocument::ClusterQueue(cluster_queue(&r, name, s)?),
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
            r.fair_weight(s.get("fairSharing"), "spec.fairSharing")?;
            QueueDocument::Cohort(CohortSpec {
                name,
                parent: parent_name
                    .or(parent)
                    .filter(|p| !p.is_empty())
                    .map(String::from),
                resource_groups: r
                    .resource_groups(s.get("resourceGroups"), "spec.resourceGroups")?,
            })
        }
        "ResourceFlavor" => QueueDocument::Flavor(flavor(&r, name, s)?),
        "Namespace" => QueueDocument::Namespace(
            name,
            r.labels(meta.and_then(|m| m.get("labels")), "metadata.labels")?,
        ),
        "ResourceQuota" => QueueDocument::Quota(resource_quota(&r, doc, namespace, name)?),
        "LimitRange" => QueueDocument::LimitRange(limit_range(&r, doc, namespace, name)?),
        "PodDisruptionBudget" => {
            QueueDocument::DisruptionBudget(disruption_budget(&r, s, namespace, name)?)
        }
        other => {
            return Err(r.err(
                "kind",
                format!("{other} is not a queue kind; use one of {QUEUE_KINDS:?}"),
            ))
        }
    })
}

fn cluster_queue(
    r: &Reader,
    name: String,
    s: &Map<String, Value>,
) -> Result<ClusterQueueSpec, LoadError> {
    r.known_fields(s, "spec", CLUSTER_QUEUE_FIELDS)?;
    let cohort = r.string(s.get("cohort"), "spec.cohort")?;
    let cohort_name = r.string(s.get("cohortName"), "spec.cohortName")?;
    if let (Some(a), Some(b)) = (cohort, cohort_name) {
        if a != b {
            return Err(r.err(
                "spec.cohortName",
                format!("names {b:?} but spec.cohort names {a:?}; keep one"),
            ));
        }
    }
    let cohort = cohort
        .or(cohort_name)
        .filter(|c| !c.is_empty())
        .map(String::from);
    let resource_groups = r.resource_groups(s.get("resourceGroups"), "spec.resourceGroups")?;
    if cohort.is_none() {
        for (gi, g) in resource_groups.iter().enumerate() {
            for (fi, f) in g.flavors.iter().enumerate() {
                for (ri, q) in f.resources.iter().enumerate() {
                    let limit = if q.borrowing_limit.is_some() {
                        "borrowingLimit"
                    } else if q.lending_limit.is_some() {
                        "lendingLimit"
                    } else {
                        continue;
                    };
                    return Err(r.err(
                        format!("spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}].{limit}"),
                        "needs a cohort to borrow from or lend to; set spec.cohort or remove it",
                    ));
                }
            }
        }
    }
    let stop_policy = r
        .choice(
            s.get("stopPolicy"),
            "spec.stopPolicy",
            &[
                ("None", StopPolicy::None),
                ("Hold", StopPolicy::Hold),
                ("HoldAndDrain", StopPolicy::HoldAndDrain),
            ],
        )?
        .unwrap_or_default();
    r.seconds(s.get("defaultRuntimeSeconds"), "spec.defaultRuntimeSeconds")?;
    Ok(ClusterQueueSpec {
        name,
        cohort,
        namespace_selector: r.selector(s.get("namespaceSelector"), "spec.namespaceSelector")?,
        queueing_strategy: r
            .choice(
                s.get("queueingStrategy"),
                "spec.queueingStrategy",
                &[
                    ("StrictFIFO", QueueingStrategy::StrictFifo),
                    ("BestEffortFIFO", QueueingStrategy::BestEffortFifo),
                ],
            )?
            .unwrap_or_default(),
        resource_groups,
        preemption: r.preemption(s.get("preemption"), "spec.preemption")?,
        fair_weight: r.fair_weight(s.get("fairSharing"), "spec.fairSharing")?,
        stop_policy,
        min_runtime: r.seconds(s.get("minRuntimeSeconds"), "spec.minRuntimeSeconds")?,
        preemption_delay: r.seconds(
            s.get("preemptionDelaySeconds"),
            "spec.preemptionDelaySeconds",
        )?,
    })
}

fn flavor(r: &Reader, name: String, s: &Map<String, Value>) -> Result<ResourceFlavor, LoadError> {
    r.known_fields(s, "spec", FLAVOR_FIELDS)?;
    let node_labels = r.labels(s.get("nodeLabels"), "spec.nodeLabels")?;
    let mut node_taints = Vec::new();
    for (i, t) in r
        .list(s.get("nodeTaints"), "spec.nodeTaints")?
        .iter()
        .enumerate()
    {
        let f = format!("spec.nodeTaints[{i}]");
        let t: core::Taint = serde_json::from_value(t.clone()).map_err(|e| {
            r.err(
                &f,
                format!("{e}; write {{key: ..., value: ..., effect: NoSchedule}}"),
            )
        })?;
        if t.key.is_empty() {
            return Err(r.err(at(&f, "key"), "empty taint key; set a key"));
        }
        let effect = TaintEffect::parse(&t.effect).ok_or_else(|| {
            r.err(
                at(&f, "effect"),
                format!(
                    "unknown taint effect {:?}; use NoSchedule, PreferNoSchedule or NoExecute",
                    t.effect
                ),
            )
        })?;
        node_taints.push(Taint {
            key: t.key,
            value: t.value.unwrap_or_default(),
            effect,
        });
    }
    let tolerations: Vec<core::Toleration> = match s.get("tolerations") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            r.err(
                "spec.tolerations",
                format!("{e}; write [{{key: ..., operator: Exists, effect: NoSchedule}}]"),
            )
        })?,
    };
    Ok(ResourceFlavor {
        name,
        node_labels,
        node_taints,
        tolerations: r.ctx.tolerations("spec.tolerations", Some(&tolerations))?,
    })
}

/// The object as its k8s-openapi type (the apiVersion is checked already).
fn typed<T: k8s_openapi::Resource + serde::de::DeserializeOwned>(
    r: &Reader,
    doc: &Value,
) -> Result<T, LoadError> {
    serde_json::from_value(doc.clone()).map_err(|e| {
        LoadError::new(
            r.ctx.path,
            format!(
                "does not match the Kubernetes {} {} schema: {e}",
                T::API_VERSION,
                T::KIND
            ),
        )
        .object(&r.ctx.object)
    })
}

/// The engine's resource for a ResourceQuota `spec.hard` key, or `None` for keys that
/// are not tracked (limits, object counts, storage).
pub fn quota_resource(key: &str) -> Option<&str> {
    match key {
        "pods" | "count/pods" => Some(PODS_RESOURCE),
        "cpu" | "requests.cpu" => Some("cpu"),
        "memory" | "requests.memory" => Some("memory"),
        "ephemeral-storage" | "requests.ephemeral-storage" => Some("ephemeral-storage"),
        _ => key
            .strip_prefix("requests.")
            .filter(|r| r.contains('/') || r.starts_with("hugepages-")),
    }
}

fn resource_quota(
    r: &Reader,
    doc: &Value,
    namespace: String,
    name: String,
) -> Result<NamespaceQuota, LoadError> {
    let q: core::ResourceQuota = typed(r, doc)?;
    let spec = q.spec.unwrap_or_default();
    if spec.scopes.as_ref().is_some_and(|s| !s.is_empty()) || spec.scope_selector.is_some() {
        let field = if spec.scope_selector.is_some() {
            "spec.scopeSelector"
        } else {
            "spec.scopes"
        };
        return Err(r.err(
            field,
            "scoped quotas are not simulated (Kestrel cannot tell which pods they count); remove the scope, or the quota",
        ));
    }
    let mut hard: BTreeMap<String, i64> = BTreeMap::new();
    for (key, Quantity(text)) in spec.hard.iter().flatten() {
        let Some(resource) = quota_resource(key) else {
            continue;
        };
        let field = format!("spec.hard[{key:?}]");
        let amount = parse_quantity(text, quota_scale(resource))
            .map_err(|e| r.err(&field, e.to_string()))?;
        if amount < 0 {
            return Err(r.err(field, format!("{text:?} is negative; write 0 or more")));
        }
        hard.entry(resource.to_string())
            .and_modify(|a| *a = (*a).min(amount))
            .or_insert(amount);
    }
    Ok(NamespaceQuota {
        namespace,
        name,
        hard: hard.into_iter().collect(),
    })
}

/// A PodDisruptionBudget: `spec.selector` and one of `spec.minAvailable` and
/// `spec.maxUnavailable` (a count or a percentage such as `"50%"`).
fn disruption_budget(
    r: &Reader,
    s: &Map<String, Value>,
    namespace: String,
    name: String,
) -> Result<DisruptionBudget, LoadError> {
    let amount = |field: &str| -> Result<Option<IntOrPercent>, LoadError> {
        let f = format!("spec.{field}");
        let parsed = match s.get(field) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(IntOrPercent::Int),
            Some(Value::String(text)) => match text.strip_suffix('%') {
                Some(p) => p
                    .parse::<u32>()
                    .ok()
                    .filter(|p| *p <= 100)
                    .map(IntOrPercent::Percent),
                None => text.parse::<u32>().ok().map(IntOrPercent::Int),
            },
            Some(_) => None,
        };
        match parsed {
            Some(a) => Ok(Some(a)),
            None => Err(r.err(
                f,
                format!(
                    "{} is not a pod count or a percentage; write e.g. 1 or \"50%\"",
                    s[field]
                ),
            )),
        }
    };
    let limit = match (amount("minAvailable")?, amount("maxUnavailable")?) {
        (Some(_), Some(_)) => {
            return Err(r.err(
                "spec.maxUnavailable",
                "is set with spec.minAvailable; a PodDisruptionBudget takes one of the two",
            ))
        }
        (Some(n), None) => DisruptionLimit::MinAvailable(n),
        (None, Some(n)) => DisruptionLimit::MaxUnavailable(n),
        (None, None) => {
            return Err(r.err(
                "spec",
                "sets neither minAvailable nor maxUnavailable; set one, e.g. minAvailable: 1",
            ))
        }
    };
    Ok(DisruptionBudget {
        namespace,
        name,
        selector: r.selector(s.get("selector"), "spec.selector")?,
        limit,
    })
}

fn limit_range(
    r: &Reader,
    doc: &Value,
    namespace: String,
    name: String,
) -> Result<LimitRangeDefaults, LoadError> {
    let lr: core::LimitRange = typed(r, doc)?;
    let mut container_requests = BTreeMap::new();
    for (i, item) in lr.spec.iter().flat_map(|s| &s.limits).enumerate() {
        let f = format!("spec.limits[{i}]");
        match item.type_.as_str() {
            "Container" => {}
            "Pod" | "PersistentVolumeClaim" => continue,
            other => {
                return Err(r.err(
                    at(&f, "type"),
                    format!("unknown type {other:?}; use Container, Pod or PersistentVolumeClaim"),
                ))
            }
        }
        let amounts =
            |key: &str, map: Option<&BTreeMap<String, Quantity>>| r.ctx.amounts(&at(&f, key), map);
        let default_request = amounts("defaultRequest", item.default_request.as_ref())?;
        let default = amounts("default", item.default.as_ref())?;
        let max = amounts("max", item.max.as_ref())?;
        let min = amounts("min", item.min.as_ref())?;
        for (resource, request) in &default_request {
            if let Some(limit) = default.get(resource).filter(|l| request > *l) {
                return Err(r.err(
                    format!("{f}.defaultRequest.{resource}"),
                    format!(
                        "is more than the default limit of {resource} ({limit} in request units, \
                        cpu in millicores); a request cannot exceed its limit"
                    ),
                ));
            }
        }
        // The API server's defaults: default limit from max, default request from the
        // default limit, else from min.
        for source in [&default_request, &default, &max, &min] {
            for (resource, amount) in source {
                container_requests
                    .entry(resource.clone())
                    .or_insert(*amount);
            }
        }
    }
    Ok(LimitRangeDefaults {
        namespace,
        name,
        container_requests,
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
    /// Reads one document (of a kind in [`QUEUE_KINDS`]) found at `position` in `path`.
    pub fn add_document(
        &mut self,
        path: &Path,
        position: &str,
        doc: &Value,
    ) -> Result<(), LoadError> {
        let parsed = parse_queue_document(path, position, doc)?;
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

    pub fn into_setup(self) -> QueueSetup {
        self.setup
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kestrel_core::TolerationOperator;

    fn yaml(s: &str) -> Value {
        serde_saphyr::from_str(s).unwrap()
    }

    fn parse(s: &str) -> Result<QueueDocument, LoadError> {
        parse_queue_document(Path::new("q.yaml"), "document 1", &yaml(s))
    }

    fn cq(s: &str) -> ClusterQueueSpec {
        match parse(s).unwrap_or_else(|e| panic!("{e}")) {
            QueueDocument::ClusterQueue(q) => q,
            other => panic!("{other:?}"),
        }
    }

    fn err(s: &str) -> String {
        parse(s).unwrap_err().to_string()
    }

    fn assert_names(e: &str, parts: &[&str]) {
        assert!(e.starts_with("q.yaml: "), "{e}");
        for p in parts {
            assert!(e.contains(p), "{e:?} lacks {p:?}");
        }
    }

    const KUEUE_CQ: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: research
spec:
  cohort: ai
  namespaceSelector:
    matchLabels: {team: research}
    matchExpressions:
    - {key: tier, operator: NotIn, values: [sandbox]}
  queueingStrategy: StrictFIFO
  flavorFungibility: {whenCanBorrow: Borrow}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 16
        borrowingLimit: "16"
        lendingLimit: 4
    - name: h100-spot
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 500m}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  fairSharing: {weight: "2"}
  stopPolicy: Hold
  minRuntimeSeconds: 600
  preemptionDelaySeconds: 30
"#;

    #[test]
    fn kueue_cluster_queue_maps_every_field() {
        let q = cq(KUEUE_CQ);
        let expected = ClusterQueueSpec {
            name: "research".into(),
            cohort: Some("ai".into()),
            namespace_selector: Some(vec![
                Requirement {
                    key: "team".into(),
                    operator: SelectorOperator::In,
                    values: vec!["research".into()],
                },
                Requirement {
                    key: "tier".into(),
                    operator: SelectorOperator::NotIn,
                    values: vec!["sandbox".into()],
                },
            ]),
            queueing_strategy: QueueingStrategy::StrictFifo,
            resource_groups: vec![
                ResourceGroup {
                    covered: vec!["cpu".into(), "memory".into()],
                    flavors: vec![FlavorQuotas {
                        flavor: "default-flavor".into(),
                        resources: vec![
                            ResourceQuota {
                                name: "cpu".into(),
                                nominal: 64_000,
                                borrowing_limit: None,
                                lending_limit: None,
                            },
                            ResourceQuota {
                                name: "memory".into(),
                                nominal: 512 << 30,
                                borrowing_limit: None,
                                lending_limit: None,
                            },
                        ],
                    }],
                },
                ResourceGroup {
                    covered: vec!["nvidia.com/gpu".into()],
                    flavors: vec![
                        FlavorQuotas {
                            flavor: "h100".into(),
                            resources: vec![ResourceQuota {
                                name: "nvidia.com/gpu".into(),
                                nominal: 16_000,
                                borrowing_limit: Some(16_000),
                                lending_limit: Some(4_000),
                            }],
                        },
                        FlavorQuotas {
                            flavor: "h100-spot".into(),
                            resources: vec![ResourceQuota {
                                name: "nvidia.com/gpu".into(),
                                nominal: 500,
                                borrowing_limit: None,
                                lending_limit: None,
                            }],
                        },
                    ],
                },
            ],
            preemption: QueuePreemption {
                within_cluster_queue: WithinQueuePreemption::LowerPriority,
                reclaim_within_cohort: ReclaimPolicy::Any,
                borrow_within_cohort: Some(BorrowWithinCohort {
                    max_priority_threshold: Some(100),
                }),
            },
            fair_weight: 2.0,
            stop_policy: StopPolicy::Hold,
            min_runtime: Some(600_000),
            preemption_delay: Some(30_000),
        };
        assert_eq!(q, expected);
    }

    #[test]
    fn defaults_and_selector_forms() {
        let q = cq("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: a}\nspec:\n  namespaceSelector: {}\n  resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: f, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}]}]\n");
        assert_eq!(q.namespace_selector, Some(vec![]), "{{}} selects all");
        assert_eq!(q.cohort, None);
        assert_eq!(q.queueing_strategy, QueueingStrategy::BestEffortFifo);
        assert_eq!(q.preemption, QueuePreemption::default());
        assert_eq!(q.fair_weight, 1.0);
        assert_eq!(q.stop_policy, StopPolicy::None);
        assert_eq!((q.min_runtime, q.preemption_delay), (None, None));
        let q = cq("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: a}\nspec: {fairSharing: {weight: 500m}, preemption: {borrowWithinCohort: {policy: Never, maxPriorityThreshold: 5}}}\n");
        assert_eq!(q.namespace_selector, None, "absent: not restricted");
        assert_eq!(q.fair_weight, 0.5);
        assert_eq!(q.preemption.borrow_within_cohort, None);
        assert!(q.resource_groups.is_empty());
    }

    #[test]
    fn kestrel_spelling_reads_the_same_and_refuses_unknown_fields() {
        let q = cq(&KUEUE_CQ
            .replace("kueue.x-k8s.io/v1beta1", "scheduling.kestrel.dev/v1alpha1")
            .replace("cohort: ai", "cohortName: ai")
            .replace("  flavorFungibility: {whenCanBorrow: Borrow}\n", ""));
        assert_eq!(q, cq(KUEUE_CQ));
        let e = err(&KUEUE_CQ.replace("kueue.x-k8s.io/v1beta1", "scheduling.kestrel.dev/v1alpha1"));
        assert_names(
            &e,
            &[
                "ClusterQueue research",
                "spec.flavorFungibility",
                "unknown field",
                "cohortName",
            ],
        );
        let e = err("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: LocalQueue\nmetadata: {name: q, namespace: ml}\nspec: {clusterQueue: a, clusterqueue: b}\n");
        assert_names(
            &e,
            &["LocalQueue ml/q", "spec.clusterqueue", "clusterQueue"],
        );
    }

    #[test]
    fn bad_cluster_queues_name_the_field_and_the_choices() {
        let e = err(&KUEUE_CQ.replace("StrictFIFO", "FIFO"));
        assert_names(
            &e,
            &[
                "ClusterQueue research",
                "field spec.queueingStrategy",
                "\"FIFO\"",
                "StrictFIFO, BestEffortFIFO",
            ],
        );
        let e = err(&KUEUE_CQ.replace("nominalQuota: 500m", "nominalQuota: 5x"));
        assert_names(
            &e,
            &[
                "field spec.resourceGroups[1].flavors[1].resources[0].nominalQuota",
                "\"5x\"",
                "not a Kubernetes quantity",
            ],
        );
        let e = err(&KUEUE_CQ.replace("nominalQuota: 512Gi", "nominalQuota: -1Gi"));
        assert_names(
            &e,
            &[
                "field spec.resourceGroups[0].flavors[0].resources[1].nominalQuota",
                "negative",
            ],
        );
        let e = err(&KUEUE_CQ.replace("{name: cpu, nominalQuota: 64}", "{name: cpu}"));
        assert_names(
            &e,
            &[
                "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
                "missing",
            ],
        );
        let e = err(&KUEUE_CQ.replace("reclaimWithinCohort: Any", "reclaimWithinCohort: Always"));
        assert_names(
            &e,
            &[
                "spec.preemption.reclaimWithinCohort",
                "\"Always\"",
                "Never, LowerPriority, Any",
            ],
        );
        let e = err(&KUEUE_CQ.replace(
            "withinClusterQueue: LowerPriority",
            "withinClusterQueue: Lower",
        ));
        assert_names(
            &e,
            &[
                "spec.preemption.withinClusterQueue",
                "LowerOrNewerEqualPriority",
            ],
        );
        let e = err(&KUEUE_CQ.replace("policy: LowerPriority", "policy: Any"));
        assert_names(
            &e,
            &[
                "spec.preemption.borrowWithinCohort.policy",
                "Never, LowerPriority",
            ],
        );
        let e = err(&KUEUE_CQ.replace("reclaimWithinCohort: Any", "reclaimWithinCohort: Never"));
        assert_names(
            &e,
            &[
                "spec.preemption.borrowWithinCohort.policy",
                "reclaimWithinCohort",
            ],
        );
        let e = err(&KUEUE_CQ.replace("stopPolicy: Hold", "stopPolicy: Stop"));
        assert_names(&e, &["spec.stopPolicy", "None, Hold, HoldAndDrain"]);
        let e = err(&KUEUE_CQ.replace("weight: \"2\"", "weight: heavy"));
        assert_names(&e, &["spec.fairSharing.weight", "\"heavy\""]);
        let e = err(&KUEUE_CQ.replace("lendingLimit: 4", "lendingLimit: 17"));
        assert_names(
            &e,
            &[
                "spec.resourceGroups[1].flavors[0].resources[0].lendingLimit",
                "nominalQuota",
            ],
        );
        let e = err(&KUEUE_CQ.replace("  cohort: ai\n", ""));
        assert_names(
            &e,
            &[
                "spec.resourceGroups[1].flavors[0].resources[0].borrowingLimit",
                "cohort",
            ],
        );
        let e = err(&KUEUE_CQ.replace(
            "{name: memory, nominalQuota: 512Gi}",
            "{name: nvidia.com/gpu, nominalQuota: 1}",
        ));
        assert_names(
            &e,
            &[
                "spec.resourceGroups[0].flavors[0].resources[1].name",
                "coveredResources",
            ],
        );
        let e = err(&KUEUE_CQ.replace(
            "coveredResources: [nvidia.com/gpu]",
            "coveredResources: [nvidia.com/gpu, cpu]",
        ));
        assert_names(
            &e,
            &[
                "spec.resourceGroups[1].coveredResources[1]",
                "spec.resourceGroups[0]",
            ],
        );
        let e = err(&KUEUE_CQ.replace("name: h100-spot", "name: default-flavor"));
        assert_names(
            &e,
            &[
                "spec.resourceGroups[1].flavors[1].name",
                "one resource group",
            ],
        );
        let e = err(&KUEUE_CQ.replace("operator: NotIn", "operator: Gt"));
        assert_names(
            &e,
            &[
                "spec.namespaceSelector.matchExpressions[0].operator",
                "In, NotIn, Exists, DoesNotExist",
            ],
        );
        let e = err(&KUEUE_CQ.replace("minRuntimeSeconds: 600", "minRuntimeSeconds: -5"));
        assert_names(&e, &["spec.minRuntimeSeconds", "whole number of seconds"]);
        let e = err(&KUEUE_CQ.replace("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1"));
        assert_names(
            &e,
            &[
                "field apiVersion",
                "kueue.x-k8s.io/v1beta1",
                "scheduling.kestrel.dev/v1alpha1",
            ],
        );
    }

    #[test]
    fn local_queues_cohorts_and_flavors() {
        let QueueDocument::LocalQueue(lq) = parse("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: team}\nspec: {clusterQueue: research, stopPolicy: None}\n").unwrap() else {
            panic!()
        };
        assert_eq!(
            lq,
            LocalQueueSpec {
                namespace: "default".into(),
                name: "team".into(),
                cluster_queue: "research".into()
            }
        );
        let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: team, namespace: ml}\nspec: {}\n");
        assert_names(
            &e,
            &["LocalQueue ml/team", "field spec.clusterQueue", "missing"],
        );

        for (version, field) in [("v1alpha1", "parent"), ("v1beta1", "parentName")] {
            let QueueDocument::Cohort(c) = parse(&format!("apiVersion: kueue.x-k8s.io/{version}\nkind: Cohort\nmetadata: {{name: ai}}\nspec:\n  {field}: org\n  resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: h100, resources: [{{name: nvidia.com/gpu, nominalQuota: 8}}]}}]}}]\n")).unwrap() else {
                panic!()
            };
            assert_eq!(c.parent.as_deref(), Some("org"));
            assert_eq!(c.resource_groups[0].flavors[0].resources[0].nominal, 8000);
        }

        let QueueDocument::Flavor(f) = parse("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: spot}\nspec:\n  nodeLabels: {pool: spot}\n  nodeTaints: [{key: spot, value: \"true\", effect: NoSchedule}]\n  tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]\n").unwrap() else {
            panic!()
        };
        assert_eq!(f.name, "spot");
        assert_eq!(f.node_labels.get("pool").unwrap(), "spot");
        assert_eq!(f.node_taints[0].to_string(), "spot=true:NoSchedule");
        assert_eq!(f.tolerations[0].operator, TolerationOperator::Exists);
        let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: spot}\nspec: {nodeTaints: [{key: spot, effect: Sometimes}]}\n");
        assert_names(
            &e,
            &[
                "ResourceFlavor spot",
                "spec.nodeTaints[0].effect",
                "NoExecute",
            ],
        );
        let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: spot}\nspec: {tolerations: [{key: spot, operator: Maybe}]}\n");
        assert_names(&e, &["spec.tolerations[0].operator", "Maybe"]);
    }

    #[test]
    fn resource_quota_maps_to_engine_units() {
        let QueueDocument::Quota(q) = parse(
            r#"
apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: research}
spec:
  hard:
    requests.cpu: "64"
    cpu: "100"
    requests.memory: 256Gi
    limits.memory: 512Gi
    requests.nvidia.com/gpu: "8"
    limits.nvidia.com/gpu: "8"
    requests.rdma/ib: "4"
    requests.storage: 1Ti
    count/pods: "50"
    services: "10"
"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (q.namespace.as_str(), q.name.as_str()),
            ("research", "compute")
        );
        assert_eq!(
            q.hard,
            vec![
                ("cpu".to_string(), 64_000),
                ("memory".to_string(), 256 << 30),
                ("nvidia.com/gpu".to_string(), 8_000),
                ("pods".to_string(), 50),
                ("rdma/ib".to_string(), 4),
            ]
        );
        let e = err("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ml}\nspec: {hard: {requests.cpu: lots}}\n");
        assert_names(
            &e,
            &[
                "ResourceQuota ml/q",
                "spec.hard[\"requests.cpu\"]",
                "\"lots\"",
            ],
        );
        let e = err("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ml}\nspec: {hard: {pods: \"5\"}, scopes: [BestEffort]}\n");
        assert_names(&e, &["spec.scopes", "not simulated"]);
        let e = err("apiVersion: v2\nkind: ResourceQuota\nmetadata: {name: q}\n");
        assert_names(&e, &["field apiVersion", "use v1"]);
    }

    #[test]
    fn limit_range_defaults_follow_the_api_server() {
        let QueueDocument::LimitRange(l) = parse(
            r#"
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: research}
spec:
  limits:
  - type: Pod
    max: {cpu: "64"}
  - type: Container
    defaultRequest: {cpu: 500m}
    default: {cpu: "2", memory: 4Gi}
    max: {rdma/ib: "1"}
    min: {ephemeral-storage: 1Gi}
"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            l.container_requests,
            [
                ("cpu".to_string(), 500),
                ("ephemeral-storage".to_string(), 1 << 30),
                ("memory".to_string(), 4 << 30),
                ("rdma/ib".to_string(), 1),
            ]
            .into_iter()
            .collect()
        );
        let e = err("apiVersion: v1\nkind: LimitRange\nmetadata: {name: d, namespace: ml}\nspec: {limits: [{type: Container, defaultRequest: {cpu: \"4\"}, default: {cpu: \"2\"}}]}\n");
        assert_names(
            &e,
            &[
                "LimitRange ml/d",
                "spec.limits[0].defaultRequest.cpu",
                "limit",
            ],
        );
        let e = err("apiVersion: v1\nkind: LimitRange\nmetadata: {name: d}\nspec: {limits: [{type: Container, default: {nvidia.com/gpu: 500m}}]}\n");
        assert_names(&e, &["spec.limits[0].default.nvidia.com/gpu", "whole"]);
        let e = err("apiVersion: v1\nkind: LimitRange\nmetadata: {name: d}\nspec: {limits: [{type: Containers}]}\n");
        assert_names(&e, &["spec.limits[0].type", "Container, Pod"]);
    }

    #[test]
    fn collector_refuses_names_defined_twice() {
        let mut c = QueueCollector::default();
        let p = Path::new("a.yaml");
        let doc = yaml("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: research}\nspec: {}\n");
        c.add_document(p, "document 1", &doc).unwrap();
        let kestrel = yaml("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ClusterQueue\nmetadata: {name: research}\nspec: {}\n");
        let e = c
            .add_document(Path::new("b.yaml"), "document 4", &kestrel)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("b.yaml: ClusterQueue research: field metadata.name")
                && e.contains("a.yaml document 1")
                && e.contains("b.yaml document 4"),
            "{e}"
        );
        // A LocalQueue may point at a ClusterQueue not (yet) defined.
        let lq = yaml("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q, namespace: ml}\nspec: {clusterQueue: later}\n");
        c.add_document(p, "document 2", &lq).unwrap();
        let ns =
            yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: ml}}\n");
        c.add_document(p, "document 3", &ns).unwrap();
        c.add_document(p, "document 5", &ns).unwrap();
        let other =
            yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: cv}}\n");
        let e = c
            .add_document(p, "document 6", &other)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Namespace ml") && e.contains("defined twice"),
            "{e}"
        );
        let lr = |name: &str, cpu: &str| {
            yaml(&format!("apiVersion: v1\nkind: LimitRange\nmetadata: {{name: {name}, namespace: ml}}\nspec: {{limits: [{{type: Container, defaultRequest: {{cpu: \"{cpu}\"}}}}]}}\n"))
        };
        c.add_document(p, "document 7", &lr("a", "1")).unwrap();
        c.add_document(p, "document 8", &lr("b", "2")).unwrap();
        assert_eq!(c.container_defaults()["ml"]["cpu"], 1000, "the first wins");
        let setup = c.into_setup();
        assert_eq!(setup.cluster_queues.len(), 1);
        assert_eq!(setup.local_queues[0].cluster_queue, "later");
        assert_eq!(setup.namespaces.len(), 1);
    }

    #[test]
    fn pod_disruption_budgets_are_read_as_policy_v1_defines_them() {
        let pdb = |spec: &str| {
            format!(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: db, namespace: ml}}\nspec: {spec}\n"
            )
        };
        let QueueDocument::DisruptionBudget(b) = parse(&pdb(
            "{minAvailable: 2, selector: {matchLabels: {app: db}}}",
        ))
        .unwrap() else {
            panic!()
        };
        assert_eq!((b.namespace.as_str(), b.name.as_str()), ("ml", "db"));
        assert_eq!(b.limit, DisruptionLimit::MinAvailable(IntOrPercent::Int(2)));
        let mut labels = Labels::new();
        labels.insert("app".into(), "db".into());
        assert!(b.selects("ml", &labels) && !b.selects("ml", &Labels::new()));
        let QueueDocument::DisruptionBudget(b) =
            parse(&pdb("{maxUnavailable: \"25%\", selector: {}}")).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            b.limit,
            DisruptionLimit::MaxUnavailable(IntOrPercent::Percent(25))
        );
        assert!(b.selects("ml", &Labels::new()), "{{}} selects every pod");
        let QueueDocument::DisruptionBudget(b) = parse(&pdb("{minAvailable: \"1\"}")).unwrap()
        else {
            panic!()
        };
        assert!(!b.selects("ml", &Labels::new()), "no selector selects none");

        assert_names(
            &err(&pdb("{minAvailable: 1, maxUnavailable: 1}")),
            &[
                "PodDisruptionBudget ml/db",
                "spec.maxUnavailable",
                "one of the two",
            ],
        );
        assert_names(
            &err(&pdb("{selector: {}}")),
            &["PodDisruptionBudget ml/db", "spec", "minAvailable: 1"],
        );
        assert_names(
            &err(&pdb("{minAvailable: \"150%\"}")),
            &["spec.minAvailable", "\"150%\"", "\"50%\""],
        );
        assert_names(
            &err(&pdb("{maxUnavailable: -1}")),
            &["spec.maxUnavailable", "-1"],
        );
        assert_names(
            &err("apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: db}\nspec: {minAvailable: 1}\n"),
            &["apiVersion", "policy/v1"],
        );
    }
}
