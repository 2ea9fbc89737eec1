//! Pods as the scheduler's pods, and the classes they name.
//!
//! A pod's demand is what kube-scheduler computes: the larger of the sum of its containers'
//! requests (with restartable "sidecar" init containers) and the largest init container,
//! per resource; pod-level `spec.resources` override it; `spec.overhead` or the
//! RuntimeClass's `overhead.podFixed` is added. A container's limit stands in for a missing
//! request, else its namespace's LimitRange default. Pod affinity, anti-affinity,
//! topology spread constraints and host ports are read by [`crate::inter_pod`].
//!
//! A pod is submitted to the LocalQueue its labels name (on the object or else its pod
//! template), as [`queue_name`] reads it (Kestrel's, Kueue's or KAI's label, Volcano's annotation). Its
//! [`PreemptionTerms`]: it never preempts when its PriorityClass or its own
//! `spec.preemptionPolicy` says `Never`; it stops within `spec.terminationGracePeriodSeconds`
//! (default 30 s); and what it declares in [`MIN_RUNTIME_ANNOTATION`],
//! [`CHECKPOINT_INTERVAL_ANNOTATION`], [`CHECKPOINT_GRACE_ANNOTATION`] and
//! [`RUNTIME_ESTIMATE_ANNOTATION`] (durations such as `90s`, `30m`, `2h`). The live
//! scheduler reads the same through [`Catalog::pod_from_kube`].
//!
//! Simulation annotations, on the object or else on its pod template:
//! `kestrel.dev/sim-arrival`, `kestrel.dev/sim-duration`, `kestrel.dev/sim-gpu-utilization`
//! (read by the simulator's manifest loader).
//!
//! A share of one GPU: [`GPU_MILLI_ANNOTATION`] or KAI's [`GPU_FRACTION_ANNOTATION`], or by
//! device memory KAI's [`GPU_MEMORY_ANNOTATION`] (all read by the live scheduler too); NUMA
//! alignment of its GPUs: [`NUMA_POLICY_ANNOTATION`].

use crate::annotations::*;
use crate::documents::Document;
use crate::duration::parse_duration;
use crate::error::LoadError;
use crate::fields::{add_amounts, max_amounts, Amounts, Ctx};
use crate::queues::queue_name;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kestrel_core::{
    Demand, GpuRequest, Millis, NodeAffinity, PlacementConstraints, PodSpec, PreemptionTerms,
    Resources, RuntimeClassScheduling, GPU_RESOURCE,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The PriorityClasses every cluster has.
const SYSTEM_PRIORITY_CLASSES: [(&str, i32); 2] = [
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

/// of the whole file set for the simulator, the classes the API server lists for the live
/// scheduler ([`Catalog::live`]; the API server has applied LimitRanges to its pods
/// already). [`Catalog::pod_from_kube`] turns a Pod into the scheduler's pod.
/// The PriorityClasses, RuntimeClasses and LimitRange defaults pods resolve against: those
#[derive(Default)]
pub struct Catalog {
    priority: BTreeMap<String, PriorityInfo>,
    global_default: Option<String>,
    runtime: BTreeMap<String, RuntimeInfo>,
    /// namespace -> default container requests (from its LimitRanges).
    container_defaults: BTreeMap<String, Amounts>,
    /// Kueue's WorkloadPriorityClasses by name (value, where defined); `None`: Kueue's
    /// kind is not served (no Kueue on the cluster), so the label is not resolved.
    workload_priority: Option<BTreeMap<String, (i32, String)>>,
    /// Where the classes come from, for the error of a pod naming one that is missing.
    classes_from: ClassesFrom,
    /// The live WorkloadPriorityClasses are not listed yet: a pod naming one waits.
    workload_priority_pending: bool,
}

/// What the live scheduler knows of Kueue's WorkloadPriorityClasses.
#[derive(Debug, Clone, Copy)]
pub enum WorkloadPriorityListing<'a> {
    /// Not listed yet: pods naming one wait until the listing is in.
    Pending,
    /// Kueue's kind is not served (no Kueue): the label is not read.
    NotServed,
    /// The classes listed (as JSON objects).
    Listed(&'a [Value]),
}

/// Where a [`Catalog`]'s classes come from.
#[derive(Default, Clone, Copy)]
enum ClassesFrom {
    #[default]
    WorkloadFiles,
    ApiServer,
}

/// Kueue's label naming a WorkloadPriorityClass: the workload's priority in queues and
/// preemption, in place of its pods' PriorityClass.
pub const WORKLOAD_PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// KAI's label naming the workload's PriorityClass when the pod spec names none.
pub const KAI_PRIORITY_LABEL: &str = "priorityClassName";

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
        let mut c = Catalog {
            workload_priority: Some(BTreeMap::new()),
            ..Catalog::default()
        };
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

    pub fn add(&mut self, path: &Path, doc: &Document) -> Result<(), LoadError> {
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
            "WorkloadPriorityClass" => {
                let (name, value) = read_workload_priority_class(&ctx, &doc.value)?;
                let classes = self.workload_priority.get_or_insert_with(BTreeMap::new);
                if let Some((_, first)) = classes.get(&name) {
                    return Err(ctx.err(
                        "metadata.name",
                        format!("a WorkloadPriorityClass {name:?} is already defined in {first}; remove one"),
                    ));
                }
                classes.insert(name, (value, origin));
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
        let value = pc.value.ok_or_else(|| {
            ctx.err(
                "value",
                "missing; a PriorityClass needs its priority value (an integer)",
            )
        })?;
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
                value,
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
    pub fn pod(
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

        // The pod's own class, else the one KAI's label names.
        let named_class = match spec
            .priority_class_name
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            Some(pc) => Some((format!("{sf}.priorityClassName"), pc)),
            None => annotations
                .label(KAI_PRIORITY_LABEL)
                .map(|pc| (annotations.label_field(KAI_PRIORITY_LABEL), pc)),
        };
        let (priority, priority_class) = match named_class {
            Some((field, pc)) => match self.priority.get(pc) {
                Some(info) => (info.value, Some(pc.to_string())),
                None => {
                    return Err(ctx.err(
                        field,
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
        let priority = self
            .workload_priority(ctx, annotations)?
            .unwrap_or(priority);
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
            devices: None,
            inter_pod: crate::inter_pod::inter_pod_rules(ctx, sf, spec, &namespace, &labels)?,
            host_ports: crate::inter_pod::host_ports(ctx, sf, spec)?,
            volumes: None,
        };
        // The object's labels first (Kueue labels the Job), then its pod template's.
        let queue =
            queue_name(&annotations.sources.map(|s| s.map(|(_, meta)| meta))).map(String::from);
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

    /// The value of the WorkloadPriorityClass the pod's [`WORKLOAD_PRIORITY_LABEL`] names,
    /// which replaces its PriorityClass's; `None`: no label, or Kueue's kind not read.
    fn workload_priority(
        &self,
        ctx: &Ctx,
        annotations: &Annotations,
    ) -> Result<Option<i32>, LoadError> {
        if self.workload_priority_pending && annotations.label(WORKLOAD_PRIORITY_LABEL).is_some() {
            return Err(ctx.err(
                annotations.label_field(WORKLOAD_PRIORITY_LABEL),
                "Kueue's WorkloadPriorityClasses are not listed yet; the pod is read again \
                 once they are",
            ));
        }
        match (
            annotations.label(WORKLOAD_PRIORITY_LABEL),
            &self.workload_priority,
        ) {
            (Some(class), Some(classes)) => match classes.get(class) {
                Some((value, _)) => Ok(Some(*value)),
                None => Err(ctx.err(
                    annotations.label_field(WORKLOAD_PRIORITY_LABEL),
                    format!(
                        "no WorkloadPriorityClass {class:?} {} (Kueue would not admit \
                             the workload); {} one (kind: WorkloadPriorityClass, apiVersion: \
                             kueue.x-k8s.io/v1beta1) or use one of {:?}",
                        match self.classes_from {
                            ClassesFrom::WorkloadFiles => "in the workload files",
                            ClassesFrom::ApiServer => "on the API server",
                        },
                        match self.classes_from {
                            ClassesFrom::WorkloadFiles => "add",
                            ClassesFrom::ApiServer => "create",
                        },
                        classes.keys().collect::<Vec<_>>()
                    ),
                )),
            },
            _ => Ok(None),
        }
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
    pub fn set_container_defaults(&mut self, defaults: BTreeMap<String, Amounts>) {
        self.container_defaults = defaults;
    }

    /// The catalog of a live cluster: the classes the API server lists (the system classes
    /// among them), and Kueue's WorkloadPriorityClasses as far as they are known. A class
    /// Kestrel cannot read is left out and its error returned; pods naming it wait with
    /// that reason.
    pub fn live<'a>(
        source: &Path,
        priority_classes: impl IntoIterator<Item = &'a PriorityClass>,
        runtime_classes: impl IntoIterator<Item = &'a RuntimeClass>,
        workload_priority_classes: WorkloadPriorityListing,
    ) -> (Catalog, Vec<LoadError>) {
        let mut catalog = Catalog {
            classes_from: ClassesFrom::ApiServer,
            workload_priority_pending: matches!(
                workload_priority_classes,
                WorkloadPriorityListing::Pending
            ),
            ..Catalog::default()
        };
        let mut errors = Vec::new();
        let origin = "the API server".to_string();
        if let WorkloadPriorityListing::Listed(objects) = workload_priority_classes {
            let classes = catalog.workload_priority.insert(BTreeMap::new());
            for object in objects {
                let name = object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let ctx = Ctx {
                    path: source,
                    object: format!("WorkloadPriorityClass {name}"),
                };
                match read_workload_priority_class(&ctx, object) {
                    Ok((name, value)) => {
                        classes.insert(name, (value, origin.clone()));
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
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
                // The value the API server resolved, unless a WorkloadPriorityClass names
                // the workload's.
                out.priority = self
                    .workload_priority(&ctx, &annotations)?
                    .unwrap_or(priority);
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

/// A Kueue WorkloadPriorityClass (of any served version: `value` is the same in each) as
/// its name and value.
fn read_workload_priority_class(ctx: &Ctx, object: &Value) -> Result<(String, i32), LoadError> {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ctx.err("metadata.name", "missing; name the class"))?;
    let value = object
        .get("value")
        .and_then(Value::as_i64)
        .and_then(|v| i32::try_from(v).ok())
        .ok_or_else(|| {
            ctx.err(
                "value",
                "missing or not a 32-bit whole number; write e.g. 1000",
            )
        })?;
    Ok((name.to_string(), value))
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

/// Kestrel's annotations (and the queue labels), looked up on the object, then on its pod
/// template.
pub struct Annotations<'a> {
    pub sources: [Option<(&'static str, &'a ObjectMeta)>; 2],
}

impl Annotations<'_> {
    /// The field path and value of an annotation.
    pub fn get(&self, key: &str) -> Option<(String, &str)> {
        self.sources.iter().flatten().find_map(|(prefix, meta)| {
            meta.annotations
                .as_ref()?
                .get(key)
                .map(|v| (format!("{prefix}.annotations[\"{key}\"]"), v.as_str()))
        })
    }

    /// The field path of a label where [`Annotations::label`] finds it (in the first source
    /// when none has it).
    pub fn label_field(&self, key: &str) -> String {
        let found = self.sources.iter().flatten().find(|(_, meta)| {
            meta.labels
                .as_ref()
                .and_then(|l| l.get(key))
                .is_some_and(|v| !v.is_empty())
        });
        match found.or(self.sources.iter().flatten().next()) {
            Some((prefix, _)) => format!("{prefix}.labels[\"{key}\"]"),
            None => format!("metadata.labels[\"{key}\"]"),
        }
    }

    /// A label's value (not empty), looked up in the same order.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.sources.iter().flatten().find_map(|(_, meta)| {
            meta.labels
                .as_ref()?
                .get(key)
                .map(String::as_str)
                .filter(|v| !v.is_empty())
        })
    }
}
