//! Kubernetes workload manifests as a simulator [`Workload`].
//!
//! Files hold any number of YAML documents, `kind: List` (and `PodList`, `JobList` ...)
//! included. Kinds:
//! - `Pod` -> one pod ([`JobKind::Pod`]);
//! - `Job` -> [`JobKind::Job`]: `spec.parallelism` (default 1) pods at a time until
//!   `spec.completions` (default: parallelism) have run;
//! - `Deployment`, `StatefulSet` -> [`JobKind::Service`] with `spec.replicas` (default 1) pods;
//! - `PriorityClass`, `RuntimeClass` -> resolve the pods' priority (and `preemptionPolicy`)
//!   and runtime class, wherever they appear in the file set;
//! - `ClusterQueue`, `LocalQueue`, `Cohort`, `ResourceFlavor` (Kueue's or Kestrel's),
//!   `Namespace`, `ResourceQuota`, `LimitRange` -> [`Workload::queues`] and the namespaces'
//!   default container requests, read by [`crate::queue_sources`] (namespaces need not be
//!   declared).
//!
//! Objects that create no pods (`replicas: 0`, `parallelism: 0`, `completions: 0`) are left
//! out of the workload.
//!
//! A pod's demand is what kube-scheduler computes: the larger of the sum of its containers'
//! requests (with restartable "sidecar" init containers) and the largest init container,
//! per resource; pod-level `spec.resources` override it; `spec.overhead` or the
//! RuntimeClass's `overhead.podFixed` is added. A container's limit stands in for a missing
//! request, else its namespace's LimitRange default. Pod affinity, anti-affinity and
//! topology spread constraints are not simulated.
//!
//! A pod is submitted to the LocalQueue its labels name (on the object or else its pod
//! template): [`KESTREL_QUEUE_LABEL`], else Kueue's [`KUEUE_QUEUE_LABEL`]. Its
//! [`PreemptionTerms`]: it never preempts when its PriorityClass or its own
//! `spec.preemptionPolicy` says `Never`; it stops within `spec.terminationGracePeriodSeconds`
//! (default 30 s); and what it declares in [`MIN_RUNTIME_ANNOTATION`],
//! [`CHECKPOINT_INTERVAL_ANNOTATION`], [`CHECKPOINT_GRACE_ANNOTATION`] and
//! [`RUNTIME_ESTIMATE_ANNOTATION`] (durations such as `90s`, `30m`, `2h`). The live
//! scheduler reads the same through [`Catalog::pod_from_kube`].
//!
//! Simulation annotations, on the object or else on its pod template:
//! [`ARRIVAL_ANNOTATION`], [`DURATION_ANNOTATION`], [`GPU_UTILIZATION_ANNOTATION`].
//!
//! A share of one GPU: [`GPU_MILLI_ANNOTATION`] or KAI's [`GPU_FRACTION_ANNOTATION`], or by
//! device memory KAI's [`GPU_MEMORY_ANNOTATION`] (all read by the live scheduler too); NUMA
//! alignment of its GPUs: [`NUMA_POLICY_ANNOTATION`].

use crate::duration::parse_duration;
use crate::error::LoadError;
use crate::gang_sources::{is_gang_document, pod_gang, GangCollector};
use crate::queue_sources::{
    is_queue_document, QueueCollector, KESTREL_QUEUE_LABEL, KUEUE_QUEUE_LABEL,
};
use crate::workload::{JobKind, SimJob, Workload};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kestrel_core::{
    parse_quantity, Demand, GpuRequest, Millis, NodeAffinity, NodeSelectorTerm,
    PlacementConstraints, PodSpec, PreemptionTerms, Requirement, Resources, RuntimeClassScheduling,
    SelectorOperator, TaintEffect, Toleration, TolerationOperator, GPU_RESOURCE,
};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// When the object is created, from the simulation's start (default `0`).
pub const ARRIVAL_ANNOTATION: &str = "kestrel.dev/sim-arrival";
/// How long each pod runs once bound (default: to the end; required on a Job).
pub const DURATION_ANNOTATION: &str = "kestrel.dev/sim-duration";
/// Share of its GPUs a pod keeps busy, `0`..=`1` (default 1 for GPU pods).
pub const GPU_UTILIZATION_ANNOTATION: &str = "kestrel.dev/sim-gpu-utilization";
/// A share of one GPU in thousandths (`1`..=`1000`) for a pod without `nvidia.com/gpu`.
pub const GPU_MILLI_ANNOTATION: &str = "kestrel.dev/gpu-milli";
/// KAI Scheduler's share of one GPU as a decimal in (0, 1] (`"0.5"`); the same request as
/// [`GPU_MILLI_ANNOTATION`], rounded to thousandths.
pub const GPU_FRACTION_ANNOTATION: &str = "gpu-fraction";
/// KAI Scheduler's share of one GPU by device memory, in MiB (`"20480"`): the pod goes on a
/// device with at least that much memory and takes the share of it that the memory is
/// ([`GpuRequest::Memory`]).
pub const GPU_MEMORY_ANNOTATION: &str = "gpu-memory";
/// kubelet's Topology Manager policy, per pod: `single-numa-node` puts all its GPUs (and
/// their NICs) on one NUMA node or waits; `best-effort` and `none` only prefer that.
pub const NUMA_POLICY_ANNOTATION: &str = "kestrel.dev/numa-policy";
/// It may not be preempted before it ran this long (`30m`).
pub const MIN_RUNTIME_ANNOTATION: &str = "kestrel.dev/min-runtime";
/// It checkpoints this often from its start (`1h`).
pub const CHECKPOINT_INTERVAL_ANNOTATION: &str = "kestrel.dev/checkpoint-interval";
/// Asked to, it checkpoints within this long (`2m`); Kestrel asks before evicting it.
pub const CHECKPOINT_GRACE_ANNOTATION: &str = "kestrel.dev/checkpoint-grace";
/// How long it is expected to run (`6h`), for backfill and start-time predictions.
pub const RUNTIME_ESTIMATE_ANNOTATION: &str = "kestrel.dev/runtime-estimate";
/// `spec.terminationGracePeriodSeconds` when a pod does not set it (Kubernetes' default).
pub const DEFAULT_TERMINATION_GRACE: Millis = 30_000;
/// The kinds a workload file may hold (plus `List`s of them).
pub const SUPPORTED_KINDS: [&str; 13] = [
    "Pod",
    "Job",
    "Deployment",
    "StatefulSet",
    "PriorityClass",
    "RuntimeClass",
    "Namespace",
    "ClusterQueue",
    "LocalQueue",
    "Cohort",
    "ResourceFlavor",
    "ResourceQuota",
    "LimitRange",
];

/// Kinds without a namespace, named `Kind name` rather than `Kind namespace/name`.
const CLUSTER_SCOPED: [&str; 7] = [
    "Node",
    "Namespace",
    "PriorityClass",
    "RuntimeClass",
    "ClusterQueue",
    "Cohort",
    "ResourceFlavor",
];

/// The PriorityClasses every cluster has.
const SYSTEM_PRIORITY_CLASSES: [(&str, i32); 2] = [
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

/// One Kubernetes object read from a file: a document, or an item of a List document.
pub(crate) struct Document {
    value: Value,
    /// 1-based document number in the file.
    number: usize,
    /// Index in the List's `items`, for objects inside a List.
    item: Option<usize>,
}

impl Document {
    pub(crate) fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// A PodGroup or Topology of a project whose gangs Kestrel reads.
    fn is_gang_document(&self) -> bool {
        let api_version = self
            .value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        is_gang_document(self.kind(), api_version)
    }

    fn meta_str(&self, key: &str) -> Option<&str> {
        self.value
            .get("metadata")
            .and_then(|m| m.get(key))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// Where the object is in its file: `document 3` or `document 3 items[2]`.
    pub(crate) fn position(&self) -> String {
        match self.item {
            None => format!("document {}", self.number),
            Some(i) => format!("document {} items[{i}]", self.number),
        }
    }

    /// `Pod llm/train-0`, `PriorityClass training`, or `Job at document 3` when unnamed.
    pub(crate) fn object(&self) -> String {
        let kind = self.kind();
        match self.meta_str("name") {
            Some(name) if CLUSTER_SCOPED.contains(&kind) => format!("{kind} {name}"),
            Some(name) => {
                let ns = self.meta_str("namespace").unwrap_or("default");
                format!("{kind} {ns}/{name}")
            }
            None => format!("{kind} at {}", self.position()),
        }
    }

    /// The object as its k8s-openapi type; the API version must be the one Kestrel reads.
    pub(crate) fn typed<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        path: &Path,
    ) -> Result<T, LoadError> {
        if let Some(v) = self.value.get("apiVersion").and_then(Value::as_str) {
            if v != T::API_VERSION {
                return Err(LoadError::new(
                    path,
                    format!(
                        "apiVersion {v:?} is not one Kestrel reads for {}; set apiVersion: {}",
                        T::KIND,
                        T::API_VERSION
                    ),
                )
                .object(self.object())
                .field("apiVersion"));
            }
        }
        serde_json::from_value(self.value.clone()).map_err(|e| {
            LoadError::new(
                path,
                format!(
                    "does not match the Kubernetes {} {} schema: {e}",
                    T::API_VERSION,
                    T::KIND
                ),
            )
            .object(self.object())
        })
    }
}

/// Reads every object of a YAML file: each document, with `List` documents (`kind: List` or
/// `kind: <Kind>List`) replaced by their items. Items without a kind take it from a typed
/// list's name (`NodeList` -> `Node`), else `item_kind`.
pub(crate) fn read_documents(
    path: &Path,
    text: &str,
    item_kind: Option<&str>,
) -> Result<Vec<Document>, LoadError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text)
        .map_err(|e| LoadError::new(path, format!("not valid YAML: {e}")))?;
    let mut out = Vec::new();
    for (i, value) in docs.into_iter().enumerate() {
        let number = i + 1;
        let doc = Document {
            value,
            number,
            item: None,
        };
        check_object(path, &doc)?;
        let kind = doc.kind().to_string();
        if !kind.ends_with("List") {
            out.push(doc);
            continue;
        }
        let items = match doc.value.get("items") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => {
                return Err(
                    LoadError::new(path, "items is not a list; write items: [...]")
                        .object(doc.object())
                        .field("items"),
                )
            }
        };
        let default_kind = kind
            .strip_suffix("List")
            .filter(|k| !k.is_empty())
            .or(item_kind);
        for (j, mut value) in items.into_iter().enumerate() {
            if let (Value::Object(map), Some(k)) = (&mut value, default_kind) {
                map.entry("kind").or_insert_with(|| Value::String(k.into()));
            }
            let item = Document {
                value,
                number,
                item: Some(j),
            };
            check_object(path, &item)?;
            out.push(item);
        }
    }
    Ok(out)
}

fn check_object(path: &Path, doc: &Document) -> Result<(), LoadError> {
    if !doc.value.is_object() {
        return Err(LoadError::new(
            path,
            "not a Kubernetes object (a mapping with apiVersion, kind and metadata)",
        )
        .object(doc.position()));
    }
    if doc.kind().is_empty() {
        return Err(LoadError::new(
            path,
            format!("no kind; every object needs apiVersion and kind (one of {SUPPORTED_KINDS:?})"),
        )
        .object(doc.position())
        .field("kind"));
    }
    Ok(())
}

/// Amounts per resource name: cpu in millicores, the rest in units (bytes, devices).
type Amounts = BTreeMap<String, i64>;

fn add_amounts(to: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        *to.entry(k.clone()).or_default() += v;
    }
}

fn max_amounts(to: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        let e = to.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

/// Where errors about one object point.
pub(crate) struct Ctx<'a> {
    pub(crate) path: &'a Path,
    pub(crate) object: String,
}

impl Ctx<'_> {
    pub(crate) fn err(&self, field: impl Into<String>, message: impl Into<String>) -> LoadError {
        LoadError::new(self.path, message)
            .object(&self.object)
            .field(field)
    }

    /// One resource amount; extended resources (GPUs included) must be whole numbers.
    fn amount(
        &self,
        field: &str,
        resource: &str,
        Quantity(q): &Quantity,
    ) -> Result<i64, LoadError> {
        let whole = !matches!(resource, "cpu" | "memory" | "ephemeral-storage")
            && !resource.starts_with("hugepages-");
        let scale = if resource == "cpu" { 1000 } else { 1 };
        let v = parse_quantity(q, scale).map_err(|e| self.err(field, e.to_string()))?;
        if v < 0 {
            return Err(self.err(field, format!("{q:?} is negative; write 0 or more")));
        }
        if whole {
            let milli = parse_quantity(q, 1000).map_err(|e| self.err(field, e.to_string()))?;
            if milli % 1000 != 0 {
                let hint = if resource == GPU_RESOURCE {
                    format!(
                        "; for a share of one GPU drop {GPU_RESOURCE} and set the \
                        annotation {GPU_FRACTION_ANNOTATION}: \"0.5\" (or \
                        {GPU_MILLI_ANNOTATION}: \"500\")"
                    )
                } else {
                    String::new()
                };
                return Err(self.err(
                    field,
                    format!(
                        "{resource} is counted in whole units, {q:?} is not a whole number{hint}"
                    ),
                ));
            }
        }
        Ok(v)
    }

    pub(crate) fn amounts(
        &self,
        field: &str,
        map: Option<&BTreeMap<String, Quantity>>,
    ) -> Result<Amounts, LoadError> {
        let mut out = Amounts::new();
        for (name, q) in map.into_iter().flatten() {
            out.insert(
                name.clone(),
                self.amount(&format!("{field}.{name}"), name, q)?,
            );
        }
        Ok(out)
    }

    /// A container's requests, its limits standing in for missing requests (as the API
    /// server defaults them).
    fn requirements(
        &self,
        field: &str,
        r: Option<&core::ResourceRequirements>,
    ) -> Result<Amounts, LoadError> {
        let Some(r) = r else {
            return Ok(Amounts::new());
        };
        let mut out = self.amounts(&format!("{field}.limits"), r.limits.as_ref())?;
        out.extend(self.amounts(&format!("{field}.requests"), r.requests.as_ref())?);
        Ok(out)
    }

    fn toleration(&self, field: &str, t: &core::Toleration) -> Result<Toleration, LoadError> {
        let key = t.key.clone().unwrap_or_default();
        let value = t.value.clone().unwrap_or_default();
        let operator = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => TolerationOperator::Equal,
            Some("Exists") => TolerationOperator::Exists,
            Some(other) => {
                return Err(self.err(
                    format!("{field}.operator"),
                    format!("unknown toleration operator {other:?}; use Equal or Exists"),
                ))
            }
        };
        if operator == TolerationOperator::Exists && !value.is_empty() {
            return Err(self.err(
                format!("{field}.value"),
                "operator Exists takes no value; remove the value or use operator Equal",
            ));
        }
        if key.is_empty() && operator == TolerationOperator::Equal {
            return Err(self.err(
                format!("{field}.key"),
                "an empty key tolerates every taint only with operator \
                    Exists; set a key or operator: Exists",
            ));
        }
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => Some(TaintEffect::parse(e).ok_or_else(|| {
                self.err(
                    format!("{field}.effect"),
                    format!(
                        "unknown taint effect {e:?}; use NoSchedule, \
                        PreferNoSchedule or NoExecute, or leave it out to match all"
                    ),
                )
            })?),
        };
        Ok(Toleration {
            key,
            operator,
            value,
            effect,
        })
    }

    pub(crate) fn tolerations(
        &self,
        field: &str,
        list: Option<&Vec<core::Toleration>>,
    ) -> Result<Vec<Toleration>, LoadError> {
        list.into_iter()
            .flatten()
            .enumerate()
            .map(|(i, t)| self.toleration(&format!("{field}[{i}]"), t))
            .collect()
    }

    fn requirement(
        &self,
        field: &str,
        r: &core::NodeSelectorRequirement,
        match_field: bool,
    ) -> Result<Requirement, LoadError> {
        use SelectorOperator::*;
        let operator = SelectorOperator::parse(&r.operator).ok_or_else(|| {
            self.err(
                format!("{field}.operator"),
                format!(
                    "unknown operator {:?}; use In, NotIn, Exists, DoesNotExist, Gt or Lt",
                    r.operator
                ),
            )
        })?;
        let values = r.values.clone().unwrap_or_default();
        let values_field = format!("{field}.values");
        match operator {
            In | NotIn if values.is_empty() => {
                return Err(self.err(
                    values_field,
                    format!("operator {} needs one or more values", r.operator),
                ))
            }
            Exists | DoesNotExist if !values.is_empty() => {
                return Err(self.err(
                    values_field,
                    format!("operator {} takes no values; remove them", r.operator),
                ))
            }
            Gt | Lt if values.len() != 1 || values[0].parse::<i64>().is_err() => {
                return Err(self.err(
                    values_field,
                    format!(
                        "operator {} needs exactly one integer value, e.g. [\"4\"]",
                        r.operator
                    ),
                ))
            }
            _ => {}
        }
        if match_field && (r.key != "metadata.name" || !matches!(operator, In | NotIn)) {
            return Err(self.err(
                field,
                "matchFields supports only key metadata.name with operator \
                    In or NotIn; use matchExpressions for labels",
            ));
        }
        Ok(Requirement {
            key: r.key.clone(),
            operator,
            values,
        })
    }

    fn term(&self, field: &str, t: &core::NodeSelectorTerm) -> Result<NodeSelectorTerm, LoadError> {
        let reqs = |name: &str, list: Option<&Vec<core::NodeSelectorRequirement>>, fields| {
            list.into_iter()
                .flatten()
                .enumerate()
                .map(|(i, r)| self.requirement(&format!("{field}.{name}[{i}]"), r, fields))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(NodeSelectorTerm {
            match_expressions: reqs("matchExpressions", t.match_expressions.as_ref(), false)?,
            match_fields: reqs("matchFields", t.match_fields.as_ref(), true)?,
        })
    }

    fn node_affinity(
        &self,
        field: &str,
        a: &core::NodeAffinity,
    ) -> Result<NodeAffinity, LoadError> {
        let required = match &a.required_during_scheduling_ignored_during_execution {
            None => None,
            Some(sel) => {
                let f = format!(
                    "{field}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
                );
                if sel.node_selector_terms.is_empty() {
                    return Err(self.err(
                        f,
                        "needs one or more node selector terms (an empty list \
                        matches no node); add a term or remove \
                        requiredDuringSchedulingIgnoredDuringExecution",
                    ));
                }
                Some(
                    sel.node_selector_terms
                        .iter()
                        .enumerate()
                        .map(|(i, t)| self.term(&format!("{f}[{i}]"), t))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
        };
        let mut preferred = Vec::new();
        for (i, p) in a
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let f = format!("{field}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            if !(1..=100).contains(&p.weight) {
                return Err(self.err(
                    format!("{f}.weight"),
                    format!(
                        "weight {} is outside 1..=100; set a weight from 1 to 100",
                        p.weight
                    ),
                ));
            }
            preferred.push((
                p.weight,
                self.term(&format!("{f}.preference"), &p.preference)?,
            ));
        }
        Ok(NodeAffinity {
            required,
            preferred,
        })
    }
}

/// The PriorityClasses, RuntimeClasses and LimitRange defaults pods resolve against: those
/// of the whole file set for the simulator, the classes the API server lists for the live
/// scheduler ([`Catalog::live`]; the API server has applied LimitRanges to its pods
/// already). [`Catalog::pod_from_kube`] turns a Pod into the scheduler's pod.
#[derive(Default)]
pub struct Catalog {
    priority: BTreeMap<String, PriorityInfo>,
    global_default: Option<String>,
    runtime: BTreeMap<String, RuntimeInfo>,
    /// namespace -> default container requests (from its LimitRanges).
    container_defaults: BTreeMap<String, Amounts>,
}

struct PriorityInfo {
    value: i32,
    /// `preemptionPolicy: Never`.
    never_preempt: bool,
    /// Where it is defined.
    origin: String,
}

struct RuntimeInfo {
    scheduling: RuntimeClassScheduling,
    overhead: Amounts,
    origin: String,
}

impl Catalog {
    /// An empty catalog with the system PriorityClasses every cluster has.
    pub fn new() -> Catalog {
        let mut c = Catalog::default();
        for (name, value) in SYSTEM_PRIORITY_CLASSES {
            c.priority.insert(
                name.to_string(),
                PriorityInfo {
                    value,
                    never_preempt: false,
                    origin: "built into Kubernetes".to_string(),
                },
            );
        }
        c
    }

    fn add(&mut self, path: &Path, doc: &Document) -> Result<(), LoadError> {
        let object = doc.object();
        let ctx = Ctx {
            path,
            object: object.clone(),
        };
        let origin = format!("{} {}", path.display(), doc.position());
        match doc.kind() {
            "PriorityClass" => {
                let pc: PriorityClass = doc.typed(path)?;
                let name = required_name(&ctx, &pc.metadata)?;
                if let Some(PriorityInfo { origin: first, .. }) = self.priority.get(&name) {
                    let why = if name.starts_with("system-") {
                        "names starting with system- are reserved by Kubernetes; rename it"
                            .to_string()
                    } else {
                        format!("already defined in {first}; remove one")
                    };
                    return Err(ctx.err(
                        "metadata.name",
                        format!("a PriorityClass {name:?} is {why}"),
                    ));
                }
                self.insert_priority_class(&ctx, name, &pc, origin)?;
            }
            "RuntimeClass" => {
                let rc: RuntimeClass = doc.typed(path)?;
                let name = required_name(&ctx, &rc.metadata)?;
                if let Some(first) = self.runtime.get(&name) {
                    return Err(ctx.err(
                        "metadata.name",
                        format!(
                            "a RuntimeClass {name:?} is already defined in {}; remove one",
                            first.origin
                        ),
                    ));
                }
                self.insert_runtime_class(&ctx, name, &rc, origin)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn insert_priority_class(
        &mut self,
        ctx: &Ctx,
        name: String,
        pc: &PriorityClass,
        origin: String,
    ) -> Result<(), LoadError> {
        let never_preempt =
            preemption_policy_never(ctx, "preemptionPolicy", pc.preemption_policy.as_deref())?;
        if pc.global_default == Some(true) {
            if let Some(other) = self.global_default.as_ref().filter(|o| **o != name) {
                return Err(ctx.err(
                    "globalDefault",
                    format!(
                        "PriorityClass {other:?} is already the global default; only \
                        one may set globalDefault: true"
                    ),
                ));
            }
            self.global_default = Some(name.clone());
        }
        self.priority.insert(
            name,
            PriorityInfo {
                value: pc.value,
                never_preempt,
                origin,
            },
        );
        Ok(())
    }

    fn insert_runtime_class(
        &mut self,
        ctx: &Ctx,
        name: String,
        rc: &RuntimeClass,
        origin: String,
    ) -> Result<(), LoadError> {
        let overhead = ctx.amounts(
            "overhead.podFixed",
            rc.overhead.as_ref().and_then(|o| o.pod_fixed.as_ref()),
        )?;
        let scheduling = rc.scheduling.clone().unwrap_or_default();
        let info = RuntimeInfo {
            scheduling: RuntimeClassScheduling {
                name: name.clone(),
                node_selector: scheduling.node_selector.unwrap_or_default(),
                tolerations: ctx
                    .tolerations("scheduling.tolerations", scheduling.tolerations.as_ref())?,
            },
            overhead,
            origin,
        };
        self.runtime.insert(name, info);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn pod(
        &self,
        ctx: &Ctx,
        sf: &str,
        spec: &core::PodSpec,
        annotations: &Annotations,
        namespace: String,
        name: String,
        labels: BTreeMap<String, String>,
    ) -> Result<PodSpec, LoadError> {
        if spec.containers.is_empty() {
            return Err(ctx.err(
                format!("{sf}.containers"),
                "a pod needs one or more containers",
            ));
        }
        // What a container asks for: its requests, else its limits, else its namespace's
        // LimitRange defaults (the API server fills them in before the pod is stored).
        let defaults = self.container_defaults.get(&namespace);
        let container = |f: &str, r: Option<&core::ResourceRequirements>| {
            let mut out = ctx.requirements(f, r)?;
            for (resource, amount) in defaults.into_iter().flatten() {
                out.entry(resource.clone()).or_insert(*amount);
            }
            Ok::<_, LoadError>(out)
        };
        // kube-scheduler's rule: regular containers and sidecars add up; each init
        // container runs alone beside the sidecars started before it.
        let mut sum = Amounts::new();
        for (i, c) in spec.containers.iter().enumerate() {
            let f = format!("{sf}.containers[{i}].resources");
            add_amounts(&mut sum, &container(&f, c.resources.as_ref())?);
        }
        let mut sidecars = Amounts::new();
        let mut init_max = Amounts::new();
        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            let f = format!("{sf}.initContainers[{i}].resources");
            let r = container(&f, c.resources.as_ref())?;
            if c.restart_policy.as_deref() == Some("Always") {
                add_amounts(&mut sum, &r);
                add_amounts(&mut sidecars, &r);
                max_amounts(&mut init_max, &sidecars);
            } else {
                let mut running = sidecars.clone();
                add_amounts(&mut running, &r);
                max_amounts(&mut init_max, &running);
            }
        }
        let mut total = sum;
        max_amounts(&mut total, &init_max);
        // Pod-level resources, where set, replace the containers' sum.
        total.extend(ctx.requirements(&format!("{sf}.resources"), spec.resources.as_ref())?);

        let runtime = match spec.runtime_class_name.as_deref().filter(|s| !s.is_empty()) {
            Some(rc) => Some(self.runtime.get(rc).ok_or_else(|| {
                ctx.err(
                    format!("{sf}.runtimeClassName"),
                    format!(
                        "no RuntimeClass {rc:?} in the workload files; add one \
                            (kind: RuntimeClass, apiVersion: node.k8s.io/v1) or use one \
                            of {:?}",
                        self.runtime.keys().collect::<Vec<_>>()
                    ),
                )
            })?),
            None => None,
        };
        match &spec.overhead {
            Some(o) => add_amounts(
                &mut total,
                &ctx.amounts(&format!("{sf}.overhead"), Some(o))?,
            ),
            None => {
                if let Some(rc) = runtime {
                    add_amounts(&mut total, &rc.overhead);
                }
            }
        }

        let whole_gpus = total.remove(GPU_RESOURCE).unwrap_or(0);
        let gpu = gpu_request(ctx, sf, whole_gpus, annotations)?;
        let mut resources = Resources::default();
        for (name, v) in total {
            match name.as_str() {
                "cpu" => resources.cpu_milli = v,
                "memory" => resources.memory_bytes = v,
                "ephemeral-storage" => resources.ephemeral_storage_bytes = v,
                other => resources.set_extended(other, v),
            }
        }

        let (priority, priority_class) = match spec
            .priority_class_name
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            Some(pc) => match self.priority.get(pc) {
                Some(info) => (info.value, Some(pc.to_string())),
                None => {
                    return Err(ctx.err(
                        format!("{sf}.priorityClassName"),
                        format!(
                            "no PriorityClass {pc:?} in the workload files (the API \
                                server would reject the pod); add one (kind: PriorityClass, \
                                apiVersion: scheduling.k8s.io/v1) or use one of {:?}",
                            self.priority.keys().collect::<Vec<_>>()
                        ),
                    ))
                }
            },
            None => match &self.global_default {
                Some(pc) => (self.priority[pc].value, Some(pc.clone())),
                None => (spec.priority.unwrap_or(0), None),
            },
        };
        let preemption =
            self.preemption_terms(ctx, sf, spec, priority_class.as_deref(), annotations)?;

        let affinity = match spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
        {
            Some(a) => ctx.node_affinity(&format!("{sf}.affinity.nodeAffinity"), a)?,
            None => NodeAffinity::default(),
        };
        let constraints = PlacementConstraints {
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            affinity,
            tolerations: ctx
                .tolerations(&format!("{sf}.tolerations"), spec.tolerations.as_ref())?,
            runtime_class: runtime.map(|rc| rc.scheduling.clone()),
            single_numa_node: numa_policy(ctx, annotations)?,
        };
        // The object's labels first (Kueue labels the Job), then its pod template's.
        let queue = [KESTREL_QUEUE_LABEL, KUEUE_QUEUE_LABEL]
            .iter()
            .find_map(|key| annotations.label(key))
            .map(String::from);
        Ok(PodSpec {
            namespace,
            name,
            labels,
            priority,
            priority_class,
            demand: Demand { resources, gpu },
            constraints,
            queue,
            preemption,
            ..Default::default()
        })
    }

    /// How the pod takes part in preemption: its (or its class's) preemptionPolicy, its
    /// termination grace period and Kestrel's annotations.
    fn preemption_terms(
        &self,
        ctx: &Ctx,
        sf: &str,
        spec: &core::PodSpec,
        priority_class: Option<&str>,
        annotations: &Annotations,
    ) -> Result<PreemptionTerms, LoadError> {
        let own = preemption_policy_never(
            ctx,
            &format!("{sf}.preemptionPolicy"),
            spec.preemption_policy.as_deref(),
        )?;
        let class = priority_class
            .and_then(|c| self.priority.get(c))
            .is_some_and(|c| c.never_preempt);
        let termination_grace = match spec.termination_grace_period_seconds {
            None => DEFAULT_TERMINATION_GRACE,
            Some(s) if s >= 0 => (s as u64).saturating_mul(1000),
            Some(s) => {
                return Err(ctx.err(
                    format!("{sf}.terminationGracePeriodSeconds"),
                    format!("{s} is negative; set 0 or more seconds"),
                ))
            }
        };
        let duration = |key: &str, positive: bool| -> Result<Option<Millis>, LoadError> {
            let Some((field, v)) = annotations.get(key) else {
                return Ok(None);
            };
            let ms = parse_duration(v).map_err(|e| ctx.err(&field, e))?;
            if positive && ms == 0 {
                return Err(ctx.err(
                    field,
                    format!("{v:?} is zero; write a duration above 0, e.g. \"30m\""),
                ));
            }
            Ok(Some(ms))
        };
        Ok(PreemptionTerms {
            never_preempt: own || class,
            min_runtime: duration(MIN_RUNTIME_ANNOTATION, false)?,
            checkpoint_interval: duration(CHECKPOINT_INTERVAL_ANNOTATION, true)?,
            checkpoint_grace: duration(CHECKPOINT_GRACE_ANNOTATION, false)?,
            termination_grace,
            runtime_estimate: duration(RUNTIME_ESTIMATE_ANNOTATION, true)?,
        })
    }

    /// Fills the namespaces' default container requests from their LimitRanges.
    fn set_container_defaults(&mut self, defaults: BTreeMap<String, Amounts>) {
        self.container_defaults = defaults;
    }

    /// The catalog of a live cluster: the classes the API server lists (the system classes
    /// among them). A class Kestrel cannot read is left out and its error returned; pods
    /// naming it wait with that reason.
    pub fn live<'a>(
        source: &Path,
        priority_classes: impl IntoIterator<Item = &'a PriorityClass>,
        runtime_classes: impl IntoIterator<Item = &'a RuntimeClass>,
    ) -> (Catalog, Vec<LoadError>) {
        let mut catalog = Catalog::default();
        let mut errors = Vec::new();
        let origin = "the API server".to_string();
        for pc in priority_classes {
            let name = pc.metadata.name.clone().unwrap_or_default();
            let ctx = Ctx {
                path: source,
                object: format!("PriorityClass {name}"),
            };
            if let Err(e) = catalog.insert_priority_class(&ctx, name, pc, origin.clone()) {
                errors.push(e);
            }
        }
        for rc in runtime_classes {
            let name = rc.metadata.name.clone().unwrap_or_default();
            let ctx = Ctx {
                path: source,
                object: format!("RuntimeClass {name}"),
            };
            if let Err(e) = catalog.insert_runtime_class(&ctx, name, rc, origin.clone()) {
                errors.push(e);
            }
        }
        (catalog, errors)
    }

    /// A Pod object as the scheduler's pod: requests, priority, RuntimeClass, node
    /// selector, affinity, tolerations and the [`GPU_MILLI_ANNOTATION`], by the rules of
    /// the module docs. A pod whose `spec.priority` is set (the API server's priority
    /// admission resolves it) keeps that value; otherwise its class is looked up here.
    pub fn pod_from_kube(&self, source: &Path, pod: &core::Pod) -> Result<PodSpec, LoadError> {
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ctx = Ctx {
            path: source,
            object: format!("Pod {namespace}/{name}"),
        };
        let spec = pod
            .spec
            .as_ref()
            .ok_or_else(|| ctx.err("spec", "no pod spec; set spec.containers"))?;
        let annotations = Annotations {
            sources: [Some(("metadata", &pod.metadata)), None],
        };
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        match spec.priority {
            Some(priority) => {
                let mut resolved = spec.clone();
                let class = resolved
                    .priority_class_name
                    .take()
                    .filter(|c| !c.is_empty());
                let mut out = self.pod(
                    &ctx,
                    "spec",
                    &resolved,
                    &annotations,
                    namespace,
                    name,
                    labels,
                )?;
                out.priority = priority;
                // The class the API server resolved, not the global default `pod` saw.
                out.preemption =
                    self.preemption_terms(&ctx, "spec", spec, class.as_deref(), &annotations)?;
                out.priority_class = class;
                Ok(out)
            }
            None => self.pod(&ctx, "spec", spec, &annotations, namespace, name, labels),
        }
    }
}

/// Whether a `preemptionPolicy` (a PriorityClass's or a pod's) is `Never`.
fn preemption_policy_never(
    ctx: &Ctx,
    field: &str,
    policy: Option<&str>,
) -> Result<bool, LoadError> {
    match policy {
        None | Some("") | Some("PreemptLowerPriority") => Ok(false),
        Some("Never") => Ok(true),
        Some(other) => Err(ctx.err(
            field,
            format!("unknown preemptionPolicy {other:?}; use PreemptLowerPriority or Never"),
        )),
    }
}

/// The pod's GPU request: whole GPUs from `nvidia.com/gpu`, or a share of one from
/// [`GPU_MILLI_ANNOTATION`] or KAI's [`GPU_FRACTION_ANNOTATION`] (which must agree when
/// both are set), or by device memory from KAI's [`GPU_MEMORY_ANNOTATION`] (alone).
fn gpu_request(
    ctx: &Ctx,
    sf: &str,
    whole_gpus: i64,
    annotations: &Annotations,
) -> Result<GpuRequest, LoadError> {
    if let Some((field, v)) = annotations.get(GPU_MEMORY_ANNOTATION) {
        return gpu_memory_request(ctx, field, v, whole_gpus, annotations);
    }
    let milli =
        annotations
            .get(GPU_MILLI_ANNOTATION)
            .map(|(field, v)| match v.trim().parse::<u32>() {
                Ok(m @ 1..=1000) => Ok((field, m)),
                _ => Err(ctx.err(
                    field,
                    format!(
                        "{v:?} is not a share of one GPU in thousandths; write 1 to 1000, e.g. \
                    \"500\" for half a GPU"
                    ),
                )),
            });
    let fraction = annotations.get(GPU_FRACTION_ANNOTATION).map(|(field, v)| {
        // Rounded to thousandths, the unit shares are counted in.
        match v.trim().parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 && f <= 1.0 && (f * 1000.0).round() >= 1.0 => {
                Ok((field, (f * 1000.0).round() as u32))
            }
            _ => Err(ctx.err(
                field,
                format!(
                    "{v:?} is not a fraction of one GPU; write a decimal above 0 and at \
                    most 1 (at least 0.001), e.g. \"0.5\" for half a GPU"
                ),
            )),
        }
    });
    let share = match (milli.transpose()?, fraction.transpose()?) {
        (Some((_, m)), Some((field, f))) if m != f => {
            return Err(ctx.err(
                field,
                format!(
                    "{GPU_FRACTION_ANNOTATION} asks for {f} thousandths of a GPU but \
                    {GPU_MILLI_ANNOTATION} asks for {m}; keep one of the two annotations"
                ),
            ))
        }
        (_, Some(share)) | (Some(share), None) => Some(share),
        (None, None) => None,
    };
    match share {
        Some((field, _)) if whole_gpus > 0 => Err(ctx.err(
            field,
            format!(
                "the pod also requests {whole_gpus} {GPU_RESOURCE}; keep the request for \
                whole GPUs or the annotation for a share, not both"
            ),
        )),
        Some((_, 1000)) => Ok(GpuRequest::Whole(1)),
        Some((_, milli)) => Ok(GpuRequest::Shared { milli }),
        None if whole_gpus > 0 => Ok(GpuRequest::Whole(u32::try_from(whole_gpus).map_err(
            |_| {
                ctx.err(
                    format!("{sf}.containers"),
                    format!("{whole_gpus} GPUs is too many"),
                )
            },
        )?)),
        None => Ok(GpuRequest::None),
    }
}

/// A share of one GPU by device memory ([`GPU_MEMORY_ANNOTATION`] = `v` at `field`): a
/// whole number of MiB above 0, with no other GPU request beside it.
fn gpu_memory_request(
    ctx: &Ctx,
    field: String,
    v: &str,
    whole_gpus: i64,
    annotations: &Annotations,
) -> Result<GpuRequest, LoadError> {
    let mib = match v.trim().parse::<u64>() {
        Ok(mib) if mib > 0 => mib,
        _ => {
            return Err(ctx.err(
                field,
                format!(
                    "{v:?} is not an amount of GPU memory; write a whole number of MiB above \
                    0, e.g. \"20480\" for 20 GiB of one GPU"
                ),
            ))
        }
    };
    if whole_gpus > 0 {
        return Err(ctx.err(
            field,
            format!(
                "the pod also requests {whole_gpus} {GPU_RESOURCE}; keep the request for \
                whole GPUs or {GPU_MEMORY_ANNOTATION} for a share of one, not both"
            ),
        ));
    }
    for other in [GPU_FRACTION_ANNOTATION, GPU_MILLI_ANNOTATION] {
        if let Some((other_field, _)) = annotations.get(other) {
            return Err(ctx.err(
                field,
                format!(
                    "the pod also sets {other_field}; a share of one GPU is asked for by \
                    memory ({GPU_MEMORY_ANNOTATION}) or by fraction ({other}), not both: \
                    keep one of the two annotations"
                ),
            ));
        }
    }
    Ok(GpuRequest::Memory { mib })
}

/// Whether [`NUMA_POLICY_ANNOTATION`] asks for `single-numa-node`.
fn numa_policy(ctx: &Ctx, annotations: &Annotations) -> Result<bool, LoadError> {
    match annotations.get(NUMA_POLICY_ANNOTATION) {
        None => Ok(false),
        Some((_, "single-numa-node")) => Ok(true),
        // Kestrel prefers one NUMA node for every pod anyway.
        Some((_, "best-effort" | "none")) => Ok(false),
        Some((field, v)) => Err(ctx.err(
            field,
            format!(
                "unknown NUMA policy {v:?}; write \"single-numa-node\" (all GPUs and their \
                NICs on one NUMA node, or wait) or \"best-effort\" (prefer one; the default)"
            ),
        )),
    }
}

fn required_name(ctx: &Ctx, meta: &ObjectMeta) -> Result<String, LoadError> {
    meta.name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ctx.err("metadata.name", "no name; set metadata.name"))
}

/// Reads workload manifests: all files are parsed and their PriorityClasses and
/// RuntimeClasses collected first, then jobs are built in file order, then document order.
pub fn load_manifests(files: &[(PathBuf, String)]) -> Result<Workload, LoadError> {
    let mut parsed = Vec::new();
    for (path, text) in files {
        parsed.push((path.as_path(), read_documents(path, text, None)?));
    }
    let mut catalog = Catalog::new();
    let mut gangs = GangCollector::default();
    let mut queues = QueueCollector::default();
    for (path, docs) in &parsed {
        for doc in docs {
            if doc.is_gang_document() {
                gangs.add_document(path, &doc.value)?;
            } else if is_queue_document(doc.kind()) {
                queues.add_document(path, &doc.position(), &doc.value)?;
            } else {
                catalog.add(path, doc)?;
            }
        }
    }
    catalog.set_container_defaults(queues.container_defaults());
    let mut builder = Builder {
        catalog,
        gangs,
        queues: queues.into_setup(),
        seen: BTreeMap::new(),
        generated: BTreeMap::new(),
        jobs: Vec::new(),
    };
    for (path, docs) in &parsed {
        for doc in docs {
            builder.add(path, doc)?;
        }
    }
    let (gangs, topology_levels) = builder.gangs.into_parts();
    Ok(Workload {
        jobs: builder.jobs,
        gangs,
        topology_levels,
        queues: builder.queues,
    })
}

struct Builder {
    catalog: Catalog,
    gangs: GangCollector,
    queues: crate::workload::QueueSetup,
    /// (kind, namespace, name) -> where it was first defined.
    seen: BTreeMap<(String, String, String), String>,
    /// generateName prefix -> names generated so far.
    generated: BTreeMap<String, u32>,
    jobs: Vec<SimJob>,
}

/// Where a pod's template sits in its object.
struct Shape<'a> {
    kind: JobKind,
    /// The object's metadata, then the pod template's (for annotations).
    meta: &'a ObjectMeta,
    template_meta: Option<&'a ObjectMeta>,
    /// Field path of the pod spec (`spec`, `spec.template.spec`).
    spec_field: &'static str,
    spec: Option<&'a core::PodSpec>,
    parallelism: i64,
    completions: i64,
}

impl Builder {
    fn add(&mut self, path: &Path, doc: &Document) -> Result<(), LoadError> {
        let object = doc.object();
        let ctx = Ctx {
            path,
            object: object.clone(),
        };
        if doc.is_gang_document() || is_queue_document(doc.kind()) {
            return Ok(());
        }
        let job = match doc.kind() {
            "PriorityClass" | "RuntimeClass" => return Ok(()),
            "Pod" => {
                let pod: core::Pod = doc.typed(path)?;
                self.job(
                    &ctx,
                    doc,
                    Shape {
                        kind: JobKind::Pod,
                        meta: &pod.metadata,
                        template_meta: None,
                        spec_field: "spec",
                        spec: pod.spec.as_ref(),
                        parallelism: 1,
                        completions: 1,
                    },
                )?
            }
            "Job" => {
                let job: Job = doc.typed(path)?;
                let spec = job
                    .spec
                    .as_ref()
                    .ok_or_else(|| ctx.err("spec", "a Job needs spec.template"))?;
                let parallelism = i64::from(spec.parallelism.unwrap_or(1));
                let completions = spec.completions.map(i64::from).unwrap_or(parallelism);
                for (field, v) in [
                    ("spec.parallelism", parallelism),
                    ("spec.completions", completions),
                ] {
                    if v < 0 {
                        return Err(ctx.err(field, format!("{v} is negative; set 0 or more")));
                    }
                }
                self.job(
                    &ctx,
                    doc,
                    Shape {
                        kind: JobKind::Job,
                        meta: &job.metadata,
                        template_meta: spec.template.metadata.as_ref(),
                        spec_field: "spec.template.spec",
                        spec: spec.template.spec.as_ref(),
                        // Kubernetes never runs more pods than completions remain.
                        parallelism: parallelism.min(completions),
                        completions,
                    },
                )?
            }
            "Deployment" => {
                let d: Deployment = doc.typed(path)?;
                let spec = d
                    .spec
                    .as_ref()
                    .ok_or_else(|| ctx.err("spec", "a Deployment needs spec.template"))?;
                self.service(&ctx, doc, &d.metadata, spec.replicas, &spec.template)?
            }
            "StatefulSet" => {
                let s: StatefulSet = doc.typed(path)?;
                let spec = s
                    .spec
                    .as_ref()
                    .ok_or_else(|| ctx.err("spec", "a StatefulSet needs spec.template"))?;
                self.service(&ctx, doc, &s.metadata, spec.replicas, &spec.template)?
            }
            other => {
                return Err(ctx.err(
                    "kind",
                    format!(
                        "Kestrel does not simulate {other} objects; workload files \
                            may hold {} (and Lists of them): remove it or move it to a \
                            file the simulator does not read",
                        SUPPORTED_KINDS.join(", ")
                    ),
                ))
            }
        };
        if let Some(job) = job {
            self.jobs.push(job);
        }
        Ok(())
    }

    fn service(
        &mut self,
        ctx: &Ctx,
        doc: &Document,
        meta: &ObjectMeta,
        replicas: Option<i32>,
        template: &core::PodTemplateSpec,
    ) -> Result<Option<SimJob>, LoadError> {
        let replicas = i64::from(replicas.unwrap_or(1));
        if replicas < 0 {
            return Err(ctx.err(
                "spec.replicas",
                format!("{replicas} is negative; set 0 or more"),
            ));
        }
        self.job(
            ctx,
            doc,
            Shape {
                kind: JobKind::Service,
                meta,
                template_meta: template.metadata.as_ref(),
                spec_field: "spec.template.spec",
                spec: template.spec.as_ref(),
                parallelism: replicas,
                completions: replicas,
            },
        )
    }

    fn job(
        &mut self,
        ctx: &Ctx,
        doc: &Document,
        shape: Shape,
    ) -> Result<Option<SimJob>, LoadError> {
        let namespace = shape
            .meta
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        let name = match (&shape.meta.name, &shape.meta.generate_name) {
            (Some(name), _) if !name.is_empty() => name.clone(),
            (_, Some(prefix)) if !prefix.is_empty() => {
                let n = self
                    .generated
                    .entry(format!("{namespace}/{prefix}"))
                    .or_default();
                *n += 1;
                format!("{prefix}{}", *n - 1)
            }
            _ => {
                return Err(ctx.err(
                    "metadata.name",
                    "no name; set metadata.name (or metadata.generateName)",
                ))
            }
        };
        let key = (doc.kind().to_string(), namespace.clone(), name.clone());
        let here = format!("{} {}", ctx.path.display(), doc.position());
        if let Some(first) = self.seen.get(&key) {
            return Err(ctx.err(
                "metadata.name",
                format!(
                    "a {} {namespace}/{name} is already defined in {first}; rename or remove one",
                    doc.kind()
                ),
            ));
        }
        self.seen.insert(key, here);

        let spec = shape.spec.ok_or_else(|| {
            ctx.err(
                shape.spec_field,
                format!("no pod spec; set {}.containers", shape.spec_field),
            )
        })?;
        let annotations = Annotations {
            sources: [
                Some(("metadata", shape.meta)),
                shape.template_meta.map(|m| ("spec.template.metadata", m)),
            ],
        };
        let labels = shape
            .template_meta
            .unwrap_or(shape.meta)
            .labels
            .clone()
            .unwrap_or_default();
        let mut template = self.catalog.pod(
            ctx,
            shape.spec_field,
            spec,
            &annotations,
            namespace.clone(),
            name.clone(),
            labels,
        )?;
        let mut all_annotations = BTreeMap::new();
        for meta in [Some(shape.meta), shape.template_meta]
            .into_iter()
            .flatten()
        {
            all_annotations.extend(meta.annotations.clone().unwrap_or_default());
        }
        if let Some(gang) = pod_gang(
            ctx.path,
            &ctx.object,
            &namespace,
            &template.labels,
            &all_annotations,
        )? {
            self.gangs.add_pod(&namespace, &gang);
            template.gang = Some(gang.membership);
        }

        let arrival = match annotations.get(ARRIVAL_ANNOTATION) {
            Some((field, v)) => parse_duration(v).map_err(|e| ctx.err(field, e))?,
            None => 0,
        };
        let duration: Option<Millis> = match annotations.get(DURATION_ANNOTATION) {
            Some((field, v)) => Some(parse_duration(v).map_err(|e| ctx.err(field, e))?),
            None if shape.kind == JobKind::Job => {
                return Err(ctx.err(
                    format!("metadata.annotations[\"{DURATION_ANNOTATION}\"]"),
                    format!(
                        "a Job needs to say how long its pods run; add the \
                        annotation {DURATION_ANNOTATION}: \"2h\" (or the time you \
                        expect)"
                    ),
                ))
            }
            None => None,
        };
        let gpu_utilization = match annotations.get(GPU_UTILIZATION_ANNOTATION) {
            Some((field, v)) => match v.trim().parse::<f64>() {
                Ok(u) if (0.0..=1.0).contains(&u) => u,
                _ => {
                    return Err(ctx.err(
                        field,
                        format!("{v:?} is not a share from 0 to 1; write e.g. \"0.5\""),
                    ))
                }
            },
            None if template.demand.gpu != GpuRequest::None => 1.0,
            None => 0.0,
        };
        if shape.parallelism == 0 || shape.completions == 0 {
            return Ok(None);
        }
        let count = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        Ok(Some(SimJob {
            kind: shape.kind,
            source_kind: doc.kind().to_string(),
            namespace,
            name,
            arrival,
            duration,
            parallelism: count(shape.parallelism),
            completions: count(shape.completions),
            template,
            gpu_utilization,
        }))
    }
}

/// Kestrel's annotations (and the queue labels), looked up on the object, then on its pod
/// template.
struct Annotations<'a> {
    sources: [Option<(&'static str, &'a ObjectMeta)>; 2],
}

impl Annotations<'_> {
    /// The field path and value of an annotation.
    fn get(&self, key: &str) -> Option<(String, &str)> {
        self.sources.iter().flatten().find_map(|(prefix, meta)| {
            meta.annotations
                .as_ref()?
                .get(key)
                .map(|v| (format!("{prefix}.annotations[\"{key}\"]"), v.as_str()))
        })
    }

    /// A label's value (not empty), looked up in the same order.
    fn label(&self, key: &str) -> Option<&str> {
        self.sources.iter().flatten().find_map(|(_, meta)| {
            meta.labels
                .as_ref()?
                .get(key)
                .map(String::as_str)
                .filter(|v| !v.is_empty())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(files: &[(&str, &str)]) -> Result<Workload, LoadError> {
        let files: Vec<(PathBuf, String)> = files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect();
        load_manifests(&files)
    }

    fn one(text: &str) -> SimJob {
        let w = load(&[("w.yaml", text)]).unwrap();
        assert_eq!(w.jobs.len(), 1, "{:?}", w.jobs);
        w.jobs.into_iter().next().unwrap()
    }

    fn err(text: &str) -> String {
        load(&[("w.yaml", text)]).unwrap_err().to_string()
    }

    fn assert_names(e: &str, parts: &[&str]) {
        assert!(e.starts_with("w.yaml: "), "{e}");
        for p in parts {
            assert!(e.contains(p), "{e:?} lacks {p:?}");
        }
    }

    const GIB: i64 = 1 << 30;

    #[test]
    fn pod_maps_resources_constraints_and_annotations() {
        let j = one(r#"
apiVersion: v1
kind: Pod
metadata:
  name: nb-1
  namespace: vision
  labels: {app: notebook}
  annotations:
    kestrel.dev/sim-arrival: "1h30m"
    kestrel.dev/sim-duration: "2h"
    kestrel.dev/sim-gpu-utilization: "0.25"
spec:
  priority: 7
  nodeSelector: {nvidia.com/gpu.product: H100-80GB}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.count, operator: Gt, values: ["3"]}
          - {key: zone, operator: Exists}
          matchFields:
          - {key: metadata.name, operator: NotIn, values: [gpu-9]}
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 40
        preference:
          matchExpressions: [{key: topology.kestrel.dev/rack, operator: In, values: [r1, r2]}]
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  - {key: dedicated, value: ml}
  - {operator: Exists}
  containers:
  - name: a
    resources:
      requests: {cpu: 500m, memory: 1Gi, ephemeral-storage: 10Gi, rdma/ib: 1}
      limits: {nvidia.com/gpu: 1}
  - name: b
    resources:
      limits: {cpu: "1.5", memory: 512Mi}
"#);
        assert_eq!(j.kind, JobKind::Pod);
        assert_eq!(j.source_kind, "Pod");
        assert_eq!((j.namespace.as_str(), j.name.as_str()), ("vision", "nb-1"));
        assert_eq!(j.arrival, 5_400_000);
        assert_eq!(j.duration, Some(7_200_000));
        assert_eq!((j.parallelism, j.completions), (1, 1));
        assert_eq!(j.gpu_utilization, 0.25);
        let t = &j.template;
        assert_eq!((t.namespace.as_str(), t.name.as_str()), ("vision", "nb-1"));
        assert_eq!(t.labels.get("app").unwrap(), "notebook");
        assert_eq!((t.priority, t.priority_class.as_deref()), (7, None));
        let r = &t.demand.resources;
        assert_eq!(r.cpu_milli, 2000, "limits stand in for requests");
        assert_eq!(r.memory_bytes, GIB + GIB / 2);
        assert_eq!(r.ephemeral_storage_bytes, 10 * GIB);
        assert_eq!(r.extended, vec![("rdma/ib".to_string(), 1)]);
        assert_eq!(t.demand.gpu, GpuRequest::Whole(1));
        let c = &t.constraints;
        assert_eq!(
            c.node_selector.get("nvidia.com/gpu.product").unwrap(),
            "H100-80GB"
        );
        let req = c.affinity.required.as_ref().unwrap();
        assert_eq!(req.len(), 1);
        assert_eq!(req[0].match_expressions.len(), 2);
        assert_eq!(req[0].match_expressions[0].operator, SelectorOperator::Gt);
        assert_eq!(req[0].match_expressions[0].values, vec!["3"]);
        assert_eq!(req[0].match_fields[0].key, "metadata.name");
        assert_eq!(c.affinity.preferred.len(), 1);
        assert_eq!(c.affinity.preferred[0].0, 40);
        assert_eq!(
            c.affinity.preferred[0].1.match_expressions[0].values,
            vec!["r1", "r2"]
        );
        assert_eq!(c.tolerations.len(), 3);
        assert_eq!(c.tolerations[0].operator, TolerationOperator::Exists);
        assert_eq!(c.tolerations[0].effect, Some(TaintEffect::NoSchedule));
        assert_eq!(
            c.tolerations[1].operator,
            TolerationOperator::Equal,
            "default operator"
        );
        assert_eq!(
            (c.tolerations[1].value.as_str(), c.tolerations[1].effect),
            ("ml", None)
        );
        assert!(c.tolerations[2].key.is_empty());
        assert!(c.runtime_class.is_none());
    }

    #[test]
    fn init_containers_take_the_max_and_sidecars_add_up() {
        let j = one(r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers:
  - {name: fetch, resources: {requests: {cpu: "4", memory: 1Gi}}}
  - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 250m, memory: 3Gi}}}
  - {name: warm, resources: {requests: {cpu: "1", memory: 6Gi}}}
  containers:
  - {name: a, resources: {requests: {cpu: "1", memory: 2Gi}}}
  - {name: b, resources: {requests: {cpu: "1", memory: 1Gi}}}
"#);
        let r = &j.template.demand.resources;
        // cpu: max(sum 1+1+0.25 = 2.25, fetch 4, proxy 0.25, warm 1+0.25) = 4
        assert_eq!(r.cpu_milli, 4000);
        // memory: max(sum 2+1+3 = 6, fetch 1, proxy 3, warm 6+3 = 9) = 9Gi
        assert_eq!(r.memory_bytes, 9 * GIB);
        assert_eq!(j.template.demand.gpu, GpuRequest::None);
        assert_eq!(j.gpu_utilization, 0.0);
        assert_eq!(j.duration, None);
        assert_eq!(j.arrival, 0);
        assert_eq!(j.namespace, "default");
    }

    #[test]
    fn pod_level_resources_replace_the_container_sum() {
        let j = one(r#"
kind: Pod
apiVersion: v1
metadata: {name: p}
spec:
  resources: {requests: {cpu: "8"}}
  containers: [{name: a, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#);
        assert_eq!(j.template.demand.resources.cpu_milli, 8000);
        assert_eq!(j.template.demand.resources.memory_bytes, GIB);
    }

    const CLASSES: &str = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: training}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: batch-low}
value: 100
globalDefault: true
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: nvidia}
handler: nvidia
overhead: {podFixed: {cpu: 250m, memory: 120Mi}}
scheduling:
  nodeSelector: {nvidia.com/gpu.present: "true"}
  tolerations: [{key: nvidia.com/gpu, operator: Exists}]
"#;

    #[test]
    fn job_expands_with_classes_defined_in_a_later_file() {
        let w = load(&[
            (
                "a.yaml",
                r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: llm
  annotations: {kestrel.dev/sim-duration: 6h}
spec:
  parallelism: 4
  completions: 8
  template:
    metadata:
      labels: {job: train}
      annotations: {kestrel.dev/sim-arrival: "02:00", kestrel.dev/sim-duration: 1h}
    spec:
      priorityClassName: training
      runtimeClassName: nvidia
      containers: [{name: w, resources: {limits: {nvidia.com/gpu: 8}, requests: {cpu: "32", memory: 256Gi}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: queue, annotations: {kestrel.dev/sim-duration: 10m}}
spec:
  parallelism: 3
  template:
    spec:
      containers: [{name: w, resources: {requests: {cpu: "1"}}}]
"#,
            ),
            ("b.yaml", CLASSES),
        ])
        .unwrap();
        assert_eq!(w.jobs.len(), 2);
        let j = &w.jobs[0];
        assert_eq!((j.kind, j.source_kind.as_str()), (JobKind::Job, "Job"));
        assert_eq!((j.parallelism, j.completions), (4, 8));
        assert_eq!(
            j.arrival, 7_200_000,
            "falls back to the template's annotation"
        );
        assert_eq!(
            j.duration,
            Some(6 * 3_600_000),
            "the object's annotation wins"
        );
        assert_eq!(j.gpu_utilization, 1.0, "GPU pods default to busy");
        let t = &j.template;
        assert_eq!(t.name, "train");
        assert_eq!(t.labels.get("job").unwrap(), "train");
        assert_eq!(
            (t.priority, t.priority_class.as_deref()),
            (1000, Some("training"))
        );
        assert_eq!(t.demand.gpu, GpuRequest::Whole(8));
        assert_eq!(
            t.demand.resources.cpu_milli, 32_250,
            "RuntimeClass overhead added"
        );
        assert_eq!(t.demand.resources.memory_bytes, 256 * GIB + (120 << 20));
        let rc = t.constraints.runtime_class.as_ref().unwrap();
        assert_eq!(rc.name, "nvidia");
        assert_eq!(
            rc.node_selector.get("nvidia.com/gpu.present").unwrap(),
            "true"
        );
        assert_eq!(rc.tolerations[0].key, "nvidia.com/gpu");
        assert_eq!(rc.tolerations[0].operator, TolerationOperator::Exists);

        let q = &w.jobs[1];
        assert_eq!(
            (q.parallelism, q.completions),
            (3, 3),
            "work queue: completions = parallelism"
        );
        assert_eq!(q.namespace, "default");
        assert_eq!(
            (q.template.priority, q.template.priority_class.as_deref()),
            (100, Some("batch-low")),
            "global default"
        );
    }

    #[test]
    fn deployments_statefulsets_and_lists_become_services() {
        let w = load(&[(
            "w.yaml",
            r#"
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: chat, namespace: platform, annotations: {kestrel.dev/sim-gpu-utilization: "0.5"}}
  spec:
    replicas: 3
    selector: {matchLabels: {app: chat}}
    template:
      metadata: {labels: {app: chat}}
      spec:
        priorityClassName: system-cluster-critical
        containers: [{name: s, resources: {limits: {nvidia.com/gpu: 1}}}]
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: db, namespace: platform}
  spec:
    selector: {matchLabels: {app: db}}
    serviceName: db
    template:
      metadata: {labels: {app: db}, annotations: {kestrel.dev/gpu-milli: "250"}}
      spec:
        containers: [{name: s, resources: {requests: {cpu: "2", memory: 8Gi}}}]
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: idle}
  spec:
    replicas: 0
    selector: {matchLabels: {app: idle}}
    template: {spec: {containers: [{name: s}]}}
---
apiVersion: v1
kind: Namespace
metadata: {name: platform}
"#,
        )])
        .unwrap();
        assert_eq!(w.jobs.len(), 2, "zero replicas create no pods");
        let d = &w.jobs[0];
        assert_eq!(
            (d.kind, d.source_kind.as_str()),
            (JobKind::Service, "Deployment")
        );
        assert_eq!((d.parallelism, d.completions), (3, 3));
        assert_eq!(d.duration, None);
        assert_eq!(d.gpu_utilization, 0.5);
        assert_eq!(d.template.priority, 2_000_000_000);
        assert_eq!(d.template.labels.get("app").unwrap(), "chat");
        let s = &w.jobs[1];
        assert_eq!(
            (s.kind, s.source_kind.as_str()),
            (JobKind::Service, "StatefulSet")
        );
        assert_eq!(
            (s.parallelism, s.completions),
            (1, 1),
            "replicas default to 1"
        );
        assert_eq!(s.template.demand.gpu, GpuRequest::Shared { milli: 250 });
        assert_eq!(s.gpu_utilization, 1.0);
        assert_eq!(s.template.priority, 0);
    }

    #[test]
    fn gpu_milli_annotation() {
        let pod = |milli: &str, gpu: &str| {
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{kestrel.dev/gpu-milli: \"{milli}\"}}}}\nspec:\n  containers: [{{name: a, resources: {{limits: {{{gpu}}}}}}}]\n")
        };
        assert_eq!(
            one(&pod("500", "")).template.demand.gpu,
            GpuRequest::Shared { milli: 500 }
        );
        assert_eq!(
            one(&pod("1000", "")).template.demand.gpu,
            GpuRequest::Whole(1)
        );
        for bad in ["0", "1001", "half"] {
            assert_names(
                &err(&pod(bad, "")),
                &[
                    "Pod default/p",
                    "metadata.annotations[\"kestrel.dev/gpu-milli\"]",
                    bad,
                    "1 to 1000",
                ],
            );
        }
        assert_names(
            &err(&pod("500", "nvidia.com/gpu: 1")),
            &["Pod default/p", "kestrel.dev/gpu-milli", "not both"],
        );
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 500m}}}]}\n");
        assert_names(
            &e,
            &[
                "Pod default/p",
                "spec.containers[0].resources.limits.nvidia.com/gpu",
                "whole",
                "kestrel.dev/gpu-milli",
            ],
        );
    }

    /// A pod with the given annotations (`k: "v"` pairs) and container limits.
    fn annotated_pod(annotations: &str, limits: &str) -> String {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, annotations: {{{annotations}}}}}\nspec:\n  containers: [{{name: a, resources: {{limits: {{{limits}}}}}}}]\n")
    }

    #[test]
    fn kai_gpu_fraction_is_a_share_of_one_gpu() {
        let gpu = |a: &str| one(&annotated_pod(a, "cpu: 1")).template.demand.gpu;
        assert_eq!(
            gpu("gpu-fraction: \"0.5\""),
            GpuRequest::Shared { milli: 500 }
        );
        assert_eq!(
            gpu("gpu-fraction: \"0.3333\""),
            GpuRequest::Shared { milli: 333 },
            "rounded to thousandths"
        );
        assert_eq!(gpu("gpu-fraction: \"1\""), GpuRequest::Whole(1));
        assert_eq!(
            gpu("gpu-fraction: \"0.25\", kestrel.dev/gpu-milli: \"250\""),
            GpuRequest::Shared { milli: 250 },
            "both annotations may be set when they agree"
        );
        for bad in ["0", "1.5", "-0.5", "half", "NaN", "0.0001"] {
            assert_names(
                &err(&annotated_pod(&format!("gpu-fraction: \"{bad}\""), "")),
                &[
                    "Pod default/p",
                    "metadata.annotations[\"gpu-fraction\"]",
                    bad,
                    "above 0 and at most 1",
                    "\"0.5\"",
                ],
            );
        }
        assert_names(
            &err(&annotated_pod("gpu-fraction: \"0.5\"", "nvidia.com/gpu: 1")),
            &[
                "Pod default/p",
                "gpu-fraction",
                "requests 1 nvidia.com/gpu",
                "not both",
            ],
        );
        assert_names(
            &err(&annotated_pod(
                "gpu-fraction: \"0.5\", kestrel.dev/gpu-milli: \"250\"",
                "",
            )),
            &[
                "Pod default/p",
                "metadata.annotations[\"gpu-fraction\"]",
                "500",
                "250",
                "keep one",
            ],
        );
    }

    #[test]
    fn kai_gpu_memory_is_a_share_of_one_gpu_by_memory() {
        let gpu = |a: &str| one(&annotated_pod(a, "cpu: 1")).template.demand.gpu;
        assert_eq!(
            gpu("gpu-memory: \"10240\""),
            GpuRequest::Memory { mib: 10240 }
        );
        assert_eq!(
            gpu("gpu-memory: \" 81920 \""),
            GpuRequest::Memory { mib: 81920 }
        );
        for bad in ["0", "-1024", "10Gi", "1.5", "half", ""] {
            assert_names(
                &err(&annotated_pod(&format!("gpu-memory: \"{bad}\""), "")),
                &[
                    "Pod default/p",
                    "metadata.annotations[\"gpu-memory\"]",
                    &format!("{bad:?}"),
                    "whole number of MiB above 0",
                    "\"20480\"",
                ],
            );
        }
        assert_names(
            &err(&annotated_pod("gpu-memory: \"10240\"", "nvidia.com/gpu: 2")),
            &[
                "Pod default/p",
                "metadata.annotations[\"gpu-memory\"]",
                "requests 2 nvidia.com/gpu",
                "not both",
            ],
        );
        for (other, value) in [("gpu-fraction", "0.5"), ("kestrel.dev/gpu-milli", "500")] {
            assert_names(
                &err(&annotated_pod(
                    &format!("gpu-memory: \"10240\", {other}: \"{value}\""),
                    "",
                )),
                &[
                    "Pod default/p",
                    "metadata.annotations[\"gpu-memory\"]",
                    &format!("metadata.annotations[\"{other}\"]"),
                    "not both",
                    "keep one",
                ],
            );
        }
    }

    #[test]
    fn numa_policy_annotation() {
        let aligned = |a: &str| {
            one(&annotated_pod(a, "nvidia.com/gpu: 2"))
                .template
                .constraints
                .single_numa_node
        };
        assert!(aligned("kestrel.dev/numa-policy: single-numa-node"));
        assert!(!aligned("kestrel.dev/numa-policy: best-effort"));
        assert!(!aligned("kestrel.dev/numa-policy: none"));
        assert!(!aligned(""));
        for bad in ["restricted", "single"] {
            assert_names(
                &err(&annotated_pod(
                    &format!("kestrel.dev/numa-policy: {bad}"),
                    "",
                )),
                &[
                    "Pod default/p",
                    "metadata.annotations[\"kestrel.dev/numa-policy\"]",
                    bad,
                    "\"single-numa-node\"",
                ],
            );
        }
    }

    #[test]
    fn mig_profiles_are_plain_extended_resources() {
        let j = one(&annotated_pod("", "nvidia.com/mig-1g.10gb: 1"));
        assert_eq!(j.template.demand.gpu, GpuRequest::None);
        assert_eq!(
            j.template
                .demand
                .resources
                .extended("nvidia.com/mig-1g.10gb"),
            1
        );
        assert_names(
            &err(&annotated_pod("", "nvidia.com/mig-1g.10gb: 500m")),
            &["Pod default/p", "nvidia.com/mig-1g.10gb", "whole"],
        );
    }

    fn pod_spec(spec: &str) -> String {
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ns}}\nspec:\n{spec}\n  containers: [{{name: a}}]\n")
    }

    #[test]
    fn constraint_errors_name_the_field() {
        let e = err(&pod_spec("  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: a, operator: Within, values: [x]}]}]}}}"));
        assert_names(&e, &[
            "Pod ns/p",
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator",
            "Within",
            "DoesNotExist",
        ]);
        let e = err(&pod_spec("  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: a, operator: Gt, values: [x]}]}]}}}"));
        assert_names(&e, &["Pod ns/p", "matchExpressions[0].values", "integer"]);
        let e = err(&pod_spec("  affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, preference: {}}]}}"));
        assert_names(
            &e,
            &[
                "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
                "1 to 100",
            ],
        );
        let e = err(&pod_spec("  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchFields: [{key: metadata.labels, operator: In, values: [x]}]}]}}}"));
        assert_names(
            &e,
            &["nodeSelectorTerms[0].matchFields[0]", "metadata.name"],
        );
        let e = err(&pod_spec("  tolerations: [{key: a, operator: Equals}]"));
        assert_names(&e, &["Pod ns/p", "spec.tolerations[0].operator", "Equals"]);
        let e = err(&pod_spec("  tolerations: [{key: a, effect: NoScheduling}]"));
        assert_names(&e, &["spec.tolerations[0].effect", "NoScheduling"]);
        let e = err(&pod_spec("  tolerations: [{value: x}]"));
        assert_names(&e, &["spec.tolerations[0].key", "Exists"]);
        let e = err(&pod_spec("  priorityClassName: urgent"));
        assert_names(
            &e,
            &[
                "Pod ns/p",
                "spec.priorityClassName",
                "\"urgent\"",
                "system-node-critical",
            ],
        );
        let e = err(&pod_spec("  runtimeClassName: kata"));
        assert_names(&e, &["Pod ns/p", "spec.runtimeClassName", "\"kata\""]);
    }

    #[test]
    fn object_errors_name_file_object_and_field() {
        let e = err("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ml}\nspec: {template: {spec: {containers: [{name: a}]}}}\n");
        assert_names(
            &e,
            &[
                "Job ml/j",
                "metadata.annotations[\"kestrel.dev/sim-duration\"]",
                "add the annotation",
            ],
        );
        let e = err("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\n");
        assert_names(
            &e,
            &[
                "CronJob default/c",
                "field kind",
                "Pod, Job, Deployment, StatefulSet",
            ],
        );
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {kestrel.dev/sim-arrival: soon}}\nspec: {containers: [{name: a}]}\n");
        assert_names(
            &e,
            &[
                "Pod default/p",
                "metadata.annotations[\"kestrel.dev/sim-arrival\"]",
                "\"soon\"",
            ],
        );
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {kestrel.dev/sim-gpu-utilization: \"1.5\"}}\nspec: {containers: [{name: a}]}\n");
        assert_names(&e, &["kestrel.dev/sim-gpu-utilization", "0 to 1"]);
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {memory: 1Gx}}}]}\n");
        assert_names(
            &e,
            &[
                "Pod default/p",
                "spec.containers[0].resources.requests.memory",
                "\"1Gx\"",
            ],
        );
        let e = err("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {selector: {}, template: {spec: {initContainers: [{name: i, resources: {limits: {cpu: x}}}], containers: [{name: a}]}}}\n");
        assert_names(
            &e,
            &[
                "Deployment default/d",
                "spec.template.spec.initContainers[0].resources.limits.cpu",
            ],
        );
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n");
        assert_names(&e, &["Pod default/p", "spec.containers", "one or more"]);
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: [1]}}}]}\n");
        assert_names(&e, &["Pod default/p", "schema"]);
        let e = err("apiVersion: apps/v1beta1\nkind: Deployment\nmetadata: {name: d}\n");
        assert_names(&e, &["Deployment default/d", "field apiVersion", "apps/v1"]);
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a}]}\n");
        assert_names(
            &e,
            &["Pod default/p", "already defined in w.yaml document 1"],
        );
        let e = err("apiVersion: v1\nmetadata: {name: p}\n");
        assert_names(&e, &["document 1", "field kind"]);
        let e =
            err("apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, metadata: {name: x}}\n");
        assert_names(&e, &["document 1 items[0]", "field kind"]);
        let e = err("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: a, resources: {requests: {cpu: \"-1\"}}}]}\n");
        assert_names(
            &e,
            &["spec.containers[0].resources.requests.cpu", "negative"],
        );
    }

    #[test]
    fn class_errors() {
        let pc = |name: &str, value: i32, global: bool| {
            format!("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\nvalue: {value}\nglobalDefault: {global}\n---\n")
        };
        let e = err(&format!("{}{}", pc("a", 1, true), pc("b", 2, true)));
        assert_names(&e, &["PriorityClass b", "field globalDefault", "\"a\""]);
        let e = err(&format!("{}{}", pc("a", 1, false), pc("a", 2, false)));
        assert_names(
            &e,
            &["PriorityClass a", "metadata.name", "w.yaml document 1"],
        );
        let e = err(&pc("system-node-critical", 5, false));
        assert_names(&e, &["PriorityClass system-node-critical", "reserved"]);
        let e = err("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: r}\nhandler: r\noverhead: {podFixed: {memory: lots}}\n");
        assert_names(
            &e,
            &["RuntimeClass r", "overhead.podFixed.memory", "\"lots\""],
        );
        let e = err("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: r}\nhandler: r\nscheduling: {tolerations: [{key: a, operator: Maybe}]}\n");
        assert_names(
            &e,
            &["RuntimeClass r", "scheduling.tolerations[0].operator"],
        );
    }

    #[test]
    fn generated_names_and_spec_overhead() {
        let w = load(&[(
            "w.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {generateName: sweep-}\nspec: {overhead: {cpu: 100m}, containers: [{name: a, resources: {requests: {cpu: 1}}}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {generateName: sweep-}\nspec: {containers: [{name: a}]}\n",
        )])
        .unwrap();
        let names: Vec<&str> = w.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["sweep-0", "sweep-1"]);
        assert_eq!(w.jobs[0].template.demand.resources.cpu_milli, 1100);
    }

    const QUEUED: &str = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: sweep}
value: 10
preemptionPolicy: Never
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: team}
  annotations:
    kestrel.dev/sim-duration: 2h
    kestrel.dev/min-runtime: 30m
    kestrel.dev/checkpoint-interval: 1h
    kestrel.dev/runtime-estimate: "2h"
spec:
  template:
    metadata:
      annotations: {kestrel.dev/checkpoint-grace: 90s}
    spec:
      terminationGracePeriodSeconds: 120
      containers: [{name: a}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: sweep
  namespace: ml
  labels: {kueue.x-k8s.io/queue-name: team}
  annotations: {kestrel.dev/sim-duration: 1h}
spec:
  template:
    metadata:
      labels: {kestrel.dev/queue: mine}
    spec:
      priorityClassName: sweep
      containers: [{name: a}]
---
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  preemptionPolicy: Never
  containers: [{name: a}]
"#;

    #[test]
    fn queue_labels_and_preemption_terms() {
        let w = load(&[("w.yaml", QUEUED)]).unwrap();
        let [train, sweep, p] = &w.jobs[..] else {
            panic!("{:?}", w.jobs)
        };
        let t = &train.template;
        assert_eq!(t.queue.as_deref(), Some("team"), "the Job's Kueue label");
        assert_eq!(
            t.preemption,
            PreemptionTerms {
                never_preempt: false,
                min_runtime: Some(1_800_000),
                checkpoint_interval: Some(3_600_000),
                checkpoint_grace: Some(90_000),
                termination_grace: 120_000,
                runtime_estimate: Some(7_200_000),
            }
        );
        let s = &sweep.template;
        assert_eq!(s.queue.as_deref(), Some("mine"), "Kestrel's label wins");
        assert!(
            s.preemption.never_preempt,
            "PriorityClass preemptionPolicy: Never"
        );
        assert_eq!(s.preemption.termination_grace, DEFAULT_TERMINATION_GRACE);
        assert_eq!(s.preemption.checkpoint_interval, None);
        let p = &p.template;
        assert_eq!(p.queue, None);
        assert!(p.preemption.never_preempt, "the pod's own preemptionPolicy");
    }

    #[test]
    fn bad_preemption_inputs_name_the_field() {
        let e = err(&QUEUED.replace("checkpoint-interval: 1h", "checkpoint-interval: hourly"));
        assert_names(
            &e,
            &[
                "Job ml/train",
                "metadata.annotations[\"kestrel.dev/checkpoint-interval\"]",
                "\"hourly\"",
            ],
        );
        let e = err(&QUEUED.replace("checkpoint-interval: 1h", "checkpoint-interval: 0s"));
        assert_names(&e, &["kestrel.dev/checkpoint-interval", "zero"]);
        let e = err(&QUEUED.replace("checkpoint-grace: 90s", "checkpoint-grace: 1x"));
        assert_names(
            &e,
            &[
                "spec.template.metadata.annotations[\"kestrel.dev/checkpoint-grace\"]",
                "\"1x\"",
            ],
        );
        let e = err(&QUEUED.replace("min-runtime: 30m", "min-runtime: long"));
        assert_names(&e, &["kestrel.dev/min-runtime", "\"long\""]);
        let e = err(&QUEUED.replace("runtime-estimate: \"2h\"", "runtime-estimate: \"-2h\""));
        assert_names(&e, &["kestrel.dev/runtime-estimate"]);
        let e = err(&QUEUED.replace(
            "preemptionPolicy: Never\n---",
            "preemptionPolicy: Sometimes\n---",
        ));
        assert_names(
            &e,
            &[
                "PriorityClass sweep",
                "field preemptionPolicy",
                "\"Sometimes\"",
                "PreemptLowerPriority or Never",
            ],
        );
        let e = err(&QUEUED.replace(
            "  preemptionPolicy: Never\n  containers",
            "  preemptionPolicy: Nope\n  containers",
        ));
        assert_names(
            &e,
            &["Pod default/p", "field spec.preemptionPolicy", "\"Nope\""],
        );
        let e = err(&QUEUED.replace(
            "terminationGracePeriodSeconds: 120",
            "terminationGracePeriodSeconds: -1",
        ));
        assert_names(
            &e,
            &[
                "spec.template.spec.terminationGracePeriodSeconds",
                "negative",
            ],
        );
    }

    #[test]
    fn queue_kinds_go_to_the_queue_setup() {
        let w = load(&[(
            "w.yaml",
            r#"
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]}]
---
apiVersion: v1
kind: List
items:
- {apiVersion: kueue.x-k8s.io/v1beta1, kind: LocalQueue, metadata: {name: team, namespace: ml}, spec: {clusterQueue: team}}
- {apiVersion: kueue.x-k8s.io/v1beta1, kind: ResourceFlavor, metadata: {name: h100}}
- {apiVersion: kueue.x-k8s.io/v1alpha1, kind: Cohort, metadata: {name: org}}
- {apiVersion: v1, kind: Namespace, metadata: {name: ml, labels: {team: ml}}}
- {apiVersion: v1, kind: ResourceQuota, metadata: {name: q, namespace: ml}, spec: {hard: {requests.nvidia.com/gpu: "2"}}}
"#,
        )])
        .unwrap();
        assert!(w.jobs.is_empty());
        let q = &w.queues;
        assert_eq!(
            q.cluster_queues[0].resource_groups[0].flavors[0].resources[0].nominal,
            8000
        );
        assert_eq!(q.local_queues[0].namespace, "ml");
        assert_eq!(q.flavors[0].name, "h100");
        assert_eq!(q.cohorts[0].name, "org");
        assert_eq!(
            q.namespaces,
            vec![(
                "ml".to_string(),
                [("team".to_string(), "ml".to_string())]
                    .into_iter()
                    .collect()
            )]
        );
        assert_eq!(
            q.resource_quotas[0].hard,
            vec![("nvidia.com/gpu".to_string(), 2000)]
        );
        let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: team}\nspec: {queueingStrategy: FIFO}\n");
        assert_names(
            &e,
            &["ClusterQueue team", "spec.queueingStrategy", "StrictFIFO"],
        );
        let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Workload\nmetadata: {name: w}\n");
        assert_names(
            &e,
            &[
                "Workload default/w",
                "field kind",
                "ClusterQueue, LocalQueue",
            ],
        );
    }

    #[test]
    fn limit_ranges_fill_missing_container_requests() {
        let w = load(&[(
            "w.yaml",
            r#"
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  initContainers: [{name: init}]
  containers:
  - {name: a}
  - {name: b, resources: {limits: {cpu: "2"}, requests: {memory: 256Mi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: other}
spec: {containers: [{name: a}]}
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: ml}
spec:
  limits:
  - {type: Container, defaultRequest: {cpu: 500m}, default: {cpu: "1", memory: 512Mi, rdma/ib: "1"}}
"#,
        )])
        .unwrap();
        let r = &w.jobs[0].template.demand.resources;
        // a: 500m + 512Mi + 1 rdma/ib; b: its limit 2 cpu, its 256Mi, 1 rdma/ib; the init
        // container's defaults are less than the sum.
        assert_eq!(r.cpu_milli, 2500);
        assert_eq!(r.memory_bytes, 768 << 20);
        assert_eq!(r.extended, vec![("rdma/ib".to_string(), 2)]);
        let other = &w.jobs[1].template.demand.resources;
        assert_eq!(
            (other.cpu_milli, other.memory_bytes),
            (0, 0),
            "other namespaces keep none"
        );
    }

    #[test]
    fn live_pods_get_queue_and_preemption_terms_the_same_way() {
        let pc: PriorityClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "sweep"}, "value": 10, "preemptionPolicy": "Never"
        }))
        .unwrap();
        let (catalog, errors) = Catalog::live(Path::new("cluster"), [&pc], []);
        assert!(errors.is_empty(), "{errors:?}");
        let pod: core::Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ml",
                "labels": {"kueue.x-k8s.io/queue-name": "team"},
                "annotations": {"kestrel.dev/checkpoint-interval": "45m", "kestrel.dev/min-runtime": "10m",
                    "gpu-fraction": "0.25"}
            },
            "spec": {"priority": 10, "priorityClassName": "sweep", "containers": [{"name": "a"}]}
        }))
        .unwrap();
        let spec = catalog.pod_from_kube(Path::new("cluster"), &pod).unwrap();
        assert_eq!(spec.queue.as_deref(), Some("team"));
        assert!(spec.preemption.never_preempt);
        assert_eq!(spec.preemption.checkpoint_interval, Some(2_700_000));
        assert_eq!(spec.preemption.min_runtime, Some(600_000));
        assert_eq!(spec.preemption.termination_grace, 30_000);
        assert_eq!(spec.demand.gpu, GpuRequest::Shared { milli: 250 });
        let bad: PriorityClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "odd"}, "value": 1, "preemptionPolicy": "Maybe"
        }))
        .unwrap();
        let (_, errors) = Catalog::live(Path::new("cluster"), [&bad], []);
        assert!(
            errors[0].to_string().contains("preemptionPolicy"),
            "{errors:?}"
        );
    }

    /// Loads an example directory as `kestrel sim <dir>` does: `cluster.yaml` is the
    /// cluster, every other `*.yaml` a workload file, in file-name order.
    fn load_example_dir(dir: &Path) -> (crate::SimCluster, Workload) {
        let cluster_path = dir.join("cluster.yaml");
        let text = std::fs::read_to_string(&cluster_path).unwrap();
        let cluster = crate::cluster_spec::load_cluster_spec(&cluster_path, &text)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml") && !p.ends_with("cluster.yaml"))
            .collect();
        files.sort();
        let files: Vec<(PathBuf, String)> = files
            .into_iter()
            .map(|p| {
                let t = std::fs::read_to_string(&p).unwrap();
                (p, t)
            })
            .collect();
        let workload = load_manifests(&files).unwrap_or_else(|e| panic!("{e}"));
        (cluster, workload)
    }

    fn examples() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
    }

    /// Whether a pod of `job` passes the static filters and fits an empty `node`.
    fn fits(job: &SimJob, node: &kestrel_core::NodeSpec) -> bool {
        let t = &job.template;
        let c = &t.constraints;
        let rc = c.runtime_class.as_ref();
        let tolerations: Vec<&Toleration> = c
            .tolerations
            .iter()
            .chain(rc.into_iter().flat_map(|r| r.tolerations.iter()))
            .collect();
        let labels_match =
            |sel: &BTreeMap<String, String>| sel.iter().all(|(k, v)| node.labels.get(k) == Some(v));
        let gpus = match t.demand.gpu {
            GpuRequest::None => true,
            GpuRequest::Whole(n) => node.gpus.len() as u32 >= n,
            GpuRequest::Shared { .. } => !node.gpus.is_empty(),
            GpuRequest::Memory { mib } => node.gpus.iter().any(|g| g.memory_mib >= mib),
        };
        node.taints
            .iter()
            .filter(|x| x.effect != TaintEffect::PreferNoSchedule)
            .all(|x| tolerations.iter().any(|t| t.tolerates(x)))
            && labels_match(&c.node_selector)
            && rc.is_none_or(|r| labels_match(&r.node_selector))
            && c.affinity
                .required
                .as_ref()
                .is_none_or(|terms| terms.iter().any(|term| term.matches(node)))
            && node.allocatable.fits(&t.demand.resources)
            && gpus
    }

    #[test]
    fn falcon_ai_example_loads_and_every_pod_fits_somewhere() {
        let (cluster, workload) = load_example_dir(&examples().join("falcon-ai"));
        let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            ["cp-0", "cp-1", "cp-2", "gpu-0", "gpu-1", "cpu-0", "cpu-1", "cpu-2", "cpu-3"]
        );
        for n in &cluster.nodes[..3] {
            assert_eq!(
                n.taints[0].to_string(),
                "node-role.kubernetes.io/control-plane:NoSchedule"
            );
            assert_eq!(
                n.labels
                    .get("node-role.kubernetes.io/control-plane")
                    .unwrap(),
                ""
            );
        }
        for n in &cluster.nodes[3..5] {
            assert_eq!(n.gpus.len(), 8);
            assert_eq!(n.nics.len(), 8);
            assert_eq!(n.allocatable.cpu_milli, 224_000);
            assert_eq!(n.allocatable.memory_bytes, 2 << 40);
            assert_eq!(n.taints[0].to_string(), "nvidia.com/gpu=true:NoSchedule");
        }
        let w = &workload.jobs;
        assert!((30..=80).contains(&w.len()), "{} jobs", w.len());
        let kinds: std::collections::BTreeSet<&str> =
            w.iter().map(|j| j.source_kind.as_str()).collect();
        assert_eq!(
            kinds,
            ["Deployment", "Job", "Pod", "StatefulSet"]
                .into_iter()
                .collect()
        );
        assert!(w
            .iter()
            .any(|j| matches!(j.template.demand.gpu, GpuRequest::Shared { .. })));
        let day = 24 * 3_600_000;
        for j in w {
            assert!(j.arrival < day, "{} arrives after the day", j.name);
            let gpu = j.template.demand.gpu != GpuRequest::None;
            let tolerates_gpu = j
                .template
                .constraints
                .tolerations
                .iter()
                .any(|t| t.key == GPU_RESOURCE);
            assert_eq!(
                gpu, tolerates_gpu,
                "{}: GPU pods and only they tolerate the GPU taint",
                j.name
            );
            assert!(
                j.template.priority_class.is_some(),
                "{} has a PriorityClass",
                j.name
            );
            assert!(
                cluster.nodes.iter().any(|n| fits(j, n)),
                "{} fits no node of falcon-ai",
                j.name
            );
            let gpus_at_once = j.parallelism * j.template.demand.gpu.whole();
            assert!(
                gpus_at_once <= 16,
                "{} needs {gpus_at_once} GPUs at once",
                j.name
            );
        }
    }

    #[test]
    fn falcon_ai_32_cluster_loads_with_racks_and_block() {
        let path = examples().join("falcon-ai-32/cluster.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let cluster =
            crate::cluster_spec::load_cluster_spec(&path, &text).unwrap_or_else(|e| panic!("{e}"));
        let gpu: Vec<_> = cluster
            .nodes
            .iter()
            .filter(|n| !n.gpus.is_empty())
            .collect();
        assert_eq!(gpu.len(), 32);
        assert_eq!(
            (gpu[0].name.as_str(), gpu[31].name.as_str()),
            ("gpu-00", "gpu-31")
        );
        for (i, n) in gpu.iter().enumerate() {
            assert_eq!(n.rack(), Some(format!("gpu-rack-{}", i / 8)).as_deref());
            assert_eq!(n.block(), Some("block-a"));
        }
        assert_eq!(cluster.nodes.len(), 39);
        // The falcon-ai workload runs unchanged on it.
        let (_, workload) = load_example_dir(&examples().join("falcon-ai"));
        for j in &workload.jobs {
            assert!(
                cluster.nodes.iter().any(|n| fits(j, n)),
                "{} fits no node",
                j.name
            );
        }
    }

    #[test]
    fn teams_example_loads_with_queues_that_cover_its_pods() {
        let (cluster, w) = load_example_dir(&examples().join("teams"));
        let q = &w.queues;
        let cqs: Vec<&str> = q.cluster_queues.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(cqs, ["research", "prod", "interns"]);
        assert_eq!(
            (q.cohorts.len(), q.flavors.len(), q.local_queues.len()),
            (1, 1, 3)
        );
        assert_eq!(q.resource_quotas.len(), 1);
        let gpus: i64 = cluster
            .nodes
            .iter()
            .map(|n| n.gpus.len() as i64 * 1000)
            .sum();
        let nominal: i64 = q
            .cluster_queues
            .iter()
            .flat_map(|c| &c.resource_groups)
            .flat_map(|g| &g.flavors)
            .flat_map(|f| &f.resources)
            .filter(|r| r.name == GPU_RESOURCE)
            .map(|r| r.nominal)
            .sum();
        assert_eq!(nominal, gpus, "the quotas share out the cluster's GPUs");
        let mut checkpointing = 0;
        for j in &w.jobs {
            let t = &j.template;
            let queue = t
                .queue
                .as_deref()
                .unwrap_or_else(|| panic!("{} has no queue", j.name));
            let lq = q
                .local_queues
                .iter()
                .find(|l| l.namespace == j.namespace && l.name == queue)
                .unwrap_or_else(|| panic!("{}: no LocalQueue {queue}", j.name));
            let cq = q
                .cluster_queues
                .iter()
                .find(|c| c.name == lq.cluster_queue)
                .unwrap();
            let labels = &q
                .namespaces
                .iter()
                .find(|(n, _)| *n == j.namespace)
                .unwrap()
                .1;
            assert!(
                cq.namespace_selector
                    .iter()
                    .flatten()
                    .all(|r| r.matches(labels)),
                "{}: {} does not admit {}",
                j.name,
                cq.name,
                j.namespace
            );
            let covered = |r: &str| {
                cq.resource_groups
                    .iter()
                    .any(|g| g.covered.iter().any(|c| c == r))
            };
            let d = &t.demand;
            assert!(
                d.resources.cpu_milli > 0 && d.resources.memory_bytes > 0,
                "{}",
                j.name
            );
            assert!(covered("cpu") && covered("memory") && covered(GPU_RESOURCE));
            assert!(d.resources.extended.is_empty() && d.resources.ephemeral_storage_bytes == 0);
            assert!(
                cluster.nodes.iter().any(|n| fits(j, n)),
                "{} fits no node",
                j.name
            );
            if t.preemption.checkpoint_interval.is_some() {
                checkpointing += 1;
            }
        }
        assert!(checkpointing >= 3, "training jobs declare checkpoints");
        let notebook = w.jobs.iter().find(|j| j.name == "notebook-ana").unwrap();
        assert_eq!(
            notebook.template.demand.resources.cpu_milli, 2000,
            "from the LimitRange"
        );
        let sweep = w.jobs.iter().find(|j| j.name == "hparam-sweep").unwrap();
        assert!(sweep.template.preemption.never_preempt);

        // The engine accepts the queues as they are.
        let mut s = kestrel_core::Scheduler::new(kestrel_core::SchedulerConfig::default());
        for f in &q.flavors {
            s.add_flavor(f.clone());
        }
        for c in &q.cohorts {
            s.add_cohort(c.clone()).unwrap();
        }
        for c in &q.cluster_queues {
            s.add_cluster_queue(c.clone()).unwrap();
        }
        for l in &q.local_queues {
            s.add_local_queue(l.clone());
        }
        for (n, l) in &q.namespaces {
            s.set_namespace_labels(n, l.clone());
        }
    }
}
