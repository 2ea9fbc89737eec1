//! Dynamic Resource Allocation (`resource.k8s.io/v1`): DeviceClasses, ResourceSlices,
//! ResourceClaims and ResourceClaimTemplates, and a pod's `spec.resourceClaims`, as the
//! engine's devices and claims ([`kestrel_core::devices`]). The simulator and the live
//! scheduler read them here alike.
//!
//! - **Devices**: a ResourceSlice's devices of NVIDIA's driver (`gpu.nvidia.com`) whose
//!   `type` attribute is `gpu` (or absent) become GPUs of the slice's node, with the model
//!   from `productName`, memory from capacity `memory`, the GPU `index` as their index, and
//!   NVLink/NUMA/PCIe positions from the node's topology template (as for device-plugin
//!   GPUs). Only a pool's newest generation counts, and only once all its slices are
//!   there. Devices of other drivers and other types (MIG partitions) are not allocated by
//!   this version: a claim that only they could serve stays pending, its reason naming the
//!   request.
//! - **Classes and selectors**: a DeviceClass's `spec.selectors` and a request's
//!   `selectors` are CEL ([`crate::dra_cel`]), compiled once; a class or expression that
//!   does not compile keeps the pods that use it pending, the reason naming the claim, the
//!   request, the class and the expression.
//! - **Claims**: `exactly` (ExactCount with `count`, or All) and `firstAvailable`
//!   requests, their tolerations of device taints, `matchAttribute` constraints, and an
//!   allocation already in the claim's status (kept as it is: the pod goes where it is).
//!   `adminAccess`, `capacity` requests and `distinctAttribute` are refused with an error
//!   naming the field.

use crate::annotations::QUOTA_RESOURCE_ANNOTATION;
use crate::device_taint_rule::DeviceTaintRule;
use crate::dra_cel::{CelSelector, DeviceValue, DeviceView};
use crate::error::LoadError;
use crate::fields::Ctx;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::{
    DeviceClass, DeviceSelector, DeviceToleration, ResourceClaim, ResourceClaimSpec, ResourceSlice,
};
use kestrel_core::{
    parse_quantity, ClaimAllocation, DeviceAttribute, DeviceChoice, DeviceClaim, DeviceCount,
    DeviceFilter, DeviceRequest, DeviceResult, DraDevice, Filter, GpuDevice, NodeSpec, Partition,
    Partitions, Taint, TaintEffect, GPU_CLIQUE_LABEL,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// NVIDIA's DRA driver, whose `gpu` devices Kestrel allocates.
pub const NVIDIA_GPU_DRIVER: &str = "gpu.nvidia.com";

/// A DeviceClass's selectors, compiled.
#[derive(Debug, Clone)]
pub struct ClassSelectors {
    pub name: String,
    selectors: Vec<Arc<CelSelector>>,
    /// The queue quota resource its devices count as.
    pub quota_resource: String,
    /// `spec.extendedResourceName`: the extended resource it serves through DRA.
    pub extended_resource: Option<String>,
    /// `metadata.creationTimestamp`: the newest of two classes that serve one extended
    /// resource wins, as in kube-scheduler.
    created: Option<k8s_openapi::jiff::Timestamp>,
}

/// Device classes by name: compiled, or why not; and the requests' filters, one per class
/// and selectors, shared by every claim alike so that each device is judged once.
#[derive(Debug, Default)]
pub struct DeviceClasses {
    classes: BTreeMap<String, Result<Arc<ClassSelectors>, String>>,
    filters: Mutex<HashMap<String, Arc<RequestFilter>>>,
    /// Compiled expressions by text: a claim read for every pod compiles nothing twice.
    compiled: Mutex<HashMap<String, Arc<CelSelector>>>,
}

impl DeviceClasses {
    /// Reads a DeviceClass; one that cannot be read is kept with its error, which the
    /// claims naming it report.
    pub fn insert(&mut self, ctx: &Ctx, class: &DeviceClass) -> Result<(), LoadError> {
        let name = class.metadata.name.clone().unwrap_or_default();
        let read = read_selectors(ctx, "spec.selectors", class.spec.selectors.as_ref(), self)
            .and_then(|selectors| Ok((selectors, quota_resource(ctx, class)?)));
        match read {
            Ok((selectors, quota_resource)) => {
                let class = ClassSelectors {
                    name: name.clone(),
                    selectors,
                    quota_resource,
                    extended_resource: class.spec.extended_resource_name.clone(),
                    created: class.metadata.creation_timestamp.as_ref().map(|t| t.0),
                };
                self.classes.insert(name, Ok(Arc::new(class)));
                Ok(())
            }
            Err(e) => {
                self.classes.insert(name, Err(e.to_string()));
                Err(e)
            }
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.classes.remove(name);
    }

    pub fn names(&self) -> Vec<String> {
        self.classes.keys().cloned().collect()
    }

    /// The class that serves `nvidia.com/gpu` through DRA (its `spec.extendedResourceName`),
    /// as kube-scheduler chooses one when several name it: the newest, the lower name on a
    /// tie. The warning names the classes left out.
    pub fn gpu_backing(&self) -> (Option<GpuBacking>, Option<crate::warning::FieldWarning>) {
        let mut serving: Vec<&Arc<ClassSelectors>> = self
            .classes
            .values()
            .filter_map(|c| c.as_ref().ok())
            .filter(|c| c.extended_resource.as_deref() == Some(kestrel_core::GPU_RESOURCE))
            .collect();
        serving.sort_by(|a, b| b.created.cmp(&a.created).then(a.name.cmp(&b.name)));
        let Some(chosen) = serving.first() else {
            return (None, None);
        };
        let warning = (serving.len() > 1).then(|| {
            let others: Vec<&str> = serving[1..].iter().map(|c| c.name.as_str()).collect();
            crate::warning::FieldWarning {
                source: None,
                object: crate::warning::WarnedObject {
                    kind: "DeviceClass".to_string(),
                    api_version: Some("resource.k8s.io/v1".to_string()),
                    namespace: None,
                    name: chosen.name.clone(),
                    uid: None,
                },
                field: Some("spec.extendedResourceName".to_string()),
                message: format!(
                    "DeviceClasses {others:?} name {} too; this class (the newest) serves it \
                     and they do not: remove the field from the classes that should not",
                    kestrel_core::GPU_RESOURCE
                ),
            }
        });
        let backing = GpuBacking {
            class: chosen.name.clone(),
            filter: self.shared_filter(chosen, Vec::new()),
        };
        (Some(backing), warning)
    }

    /// The filter of `class` with a request's `own` selectors: one per class and
    /// selectors, shared by every request alike, so each device is judged once.
    fn shared_filter(&self, class: &Arc<ClassSelectors>, own: Vec<Arc<CelSelector>>) -> Filter {
        let class_expressions: Vec<&str> = class.selectors.iter().map(|s| s.expression()).collect();
        let expressions: Vec<&str> = own.iter().map(|s| s.expression()).collect();
        let key = format!("{}|{class_expressions:?}|{expressions:?}", class.name);
        let mut filters = self.filters.lock().unwrap_or_else(|p| p.into_inner());
        let filter = filters
            .entry(key.clone())
            .or_insert_with(|| Arc::new(RequestFilter::new(key, class.clone(), own)))
            .clone();
        Filter(filter)
    }

    fn get(&self, name: &str) -> Result<&Arc<ClassSelectors>, String> {
        match self.classes.get(name) {
            Some(Ok(class)) => Ok(class),
            Some(Err(e)) => Err(format!("DeviceClass {name} cannot be used: {e}")),
            None => Err(format!(
                "DeviceClass {name} does not exist; create it (apiVersion: resource.k8s.io/v1, \
                 kind: DeviceClass) or name one of {:?}",
                self.classes.keys().collect::<Vec<_>>()
            )),
        }
    }
}

/// The queue quota resource a class's devices count as: its
/// [`QUOTA_RESOURCE_ANNOTATION`], else its `spec.extendedResourceName`, else
/// `nvidia.com/gpu`.
fn quota_resource(ctx: &Ctx, class: &DeviceClass) -> Result<String, LoadError> {
    let annotation = class
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(QUOTA_RESOURCE_ANNOTATION));
    let (field, name) = match (annotation, &class.spec.extended_resource_name) {
        (Some(name), _) => (
            format!("metadata.annotations[{QUOTA_RESOURCE_ANNOTATION:?}]"),
            name,
        ),
        (None, Some(name)) => ("spec.extendedResourceName".to_string(), name),
        (None, None) => return Ok(kestrel_core::GPU_RESOURCE.to_string()),
    };
    let reserved = ["cpu", "memory", "ephemeral-storage", "pods"];
    let valid = !name.is_empty()
        && !reserved.contains(&name.as_str())
        && !name.starts_with("hugepages-")
        && name.split('/').count() <= 2
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._/".contains(c));
    if !valid {
        return Err(ctx.err(
            field,
            format!(
                "{name:?} is not a quota resource for devices; write a resource name such as \
                 nvidia.com/gpu or whole-gpus (not cpu, memory, ephemeral-storage, pods or \
                 hugepages-*)"
            ),
        ));
    }
    Ok(name.clone())
}

fn read_selectors(
    ctx: &Ctx,
    field: &str,
    selectors: Option<&Vec<DeviceSelector>>,
    classes: &DeviceClasses,
) -> Result<Vec<Arc<CelSelector>>, LoadError> {
    let mut out = Vec::new();
    for (i, s) in selectors.into_iter().flatten().enumerate() {
        let Some(cel) = &s.cel else {
            return Err(ctx.err(
                format!("{field}[{i}]"),
                "a selector needs cel.expression (the only kind of selector)",
            ));
        };
        let known = classes
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&cel.expression)
            .cloned();
        let compiled = match known {
            Some(compiled) => compiled,
            None => {
                let compiled = Arc::new(CelSelector::compile(&cel.expression).map_err(|e| {
                    ctx.err(
                        format!("{field}[{i}].cel.expression"),
                        format!("{:?} does not compile: {e}", cel.expression),
                    )
                })?);
                let mut cache = classes.compiled.lock().unwrap_or_else(|p| p.into_inner());
                if cache.len() >= COMPILED_EXPRESSIONS {
                    cache.clear();
                }
                cache.insert(cel.expression.clone(), compiled.clone());
                compiled
            }
        };
        out.push(compiled);
    }
    Ok(out)
}

/// A request's filter: its class's selectors, then its own, with what it said of each
/// device seen (by the device's allocation, kept alive by the entry so it is never another
/// device's; a new slice publishes new ones).
#[derive(Debug)]
struct RequestFilter {
    key: String,
    class: Arc<ClassSelectors>,
    own: Vec<Arc<CelSelector>>,
    verdicts: Mutex<HashMap<usize, Verdict, BuildAddressHasher>>,
    /// What all its selectors read of a device, when their trees tell
    /// ([`crate::dra_cel::Reads`]), with full attribute and capacity names.
    reads: Option<FullReads>,
    /// Verdicts by those parts: devices alike in them are selected alike. Only selections
    /// are kept here; an error names its device, so it is judged device by device.
    alike: Mutex<HashMap<Vec<Part>, bool>>,
}

/// [`crate::dra_cel::Reads`] with each (domain, id) as the name a [`DraDevice`] keys it by.
#[derive(Debug)]
struct FullReads {
    driver: bool,
    /// (full name, domain, id).
    attributes: Vec<(String, String, String)>,
    capacity: Vec<(String, String, String)>,
}

/// The value of `full` (`domain/id`) in `map`, where an unqualified `id` is in the driver's
/// domain as CEL sees it; `Err` when the map holds both names (then CEL decides).
fn part_of<'a, V>(
    map: &'a BTreeMap<String, V>,
    driver: &str,
    (full, domain, id): &(String, String, String),
) -> Result<Option<&'a V>, ()> {
    let qualified = map.get(full);
    let bare = if domain == driver { map.get(id) } else { None };
    match (qualified, bare) {
        (Some(_), Some(_)) => Err(()),
        (q, b) => Ok(q.or(b)),
    }
}

/// One part of a device a filter reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Part {
    Driver(String),
    Attribute(Option<DeviceAttribute>),
    Capacity(Option<i64>),
}

/// Hashes a device's address (a `usize`) by one multiplication: the verdict cache is
/// looked up for every device a placement considers, where SipHash showed in profiles.
#[derive(Debug, Default, Clone, Copy)]
struct BuildAddressHasher;

#[derive(Debug, Default)]
struct AddressHasher(u64);

impl std::hash::BuildHasher for BuildAddressHasher {
    type Hasher = AddressHasher;
    fn build_hasher(&self) -> AddressHasher {
        AddressHasher(0)
    }
}

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        // Fibonacci hashing, its high bits folded down: addresses are aligned, so their
        // low bits (the table's index) would otherwise all be equal.
        let h = (n as u64 ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}

/// A device a filter judged (held so its address stays its own) and what the filter said.
type Verdict = (Arc<DraDevice>, Result<bool, String>);

/// Compiled expressions kept before the cache starts over (expressions written per pod).
const COMPILED_EXPRESSIONS: usize = 4096;

/// Verdicts a filter keeps before it starts over (devices of replaced slices linger).
const FILTER_VERDICTS: usize = 1 << 17;

impl DeviceFilter for RequestFilter {
    fn accepts(&self, device: &Arc<DraDevice>) -> Result<bool, String> {
        let id = Arc::as_ptr(device) as usize;
        let mut verdicts = self.verdicts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, verdict)) = verdicts.get(&id) {
            return verdict.clone();
        }
        let verdict = self.judge_alike(device);
        if verdicts.len() >= FILTER_VERDICTS {
            verdicts.clear();
        }
        verdicts.insert(id, (device.clone(), verdict.clone()));
        verdict
    }

    fn key(&self) -> &str {
        &self.key
    }
}

impl RequestFilter {
    fn new(key: String, class: Arc<ClassSelectors>, own: Vec<Arc<CelSelector>>) -> Self {
        let reads = class
            .selectors
            .iter()
            .chain(&own)
            .try_fold(crate::dra_cel::Reads::default(), |all, s| {
                s.reads().map(|r| all.union(r))
            })
            .map(|r| {
                let full = |parts: Vec<(String, String)>| {
                    parts
                        .into_iter()
                        .map(|(d, id)| (format!("{d}/{id}"), d, id))
                        .collect()
                };
                FullReads {
                    driver: r.driver,
                    attributes: full(r.attributes),
                    capacity: full(r.capacity),
                }
            });
        RequestFilter {
            key,
            class,
            own,
            verdicts: Mutex::new(HashMap::default()),
            reads,
            alike: Mutex::new(HashMap::new()),
        }
    }

    /// [`RequestFilter::judge`], or the verdict of a device alike in what the selectors
    /// read. A device with a version attribute that is not a semantic version is always
    /// judged: CEL fails on it whatever the selectors read.
    fn judge_alike(&self, device: &DraDevice) -> Result<bool, String> {
        let Some(reads) = &self.reads else {
            return self.judge(device);
        };
        if !crate::dra_cel::versions_parse(&device.attributes) {
            return self.judge(device);
        }
        let mut parts = Vec::with_capacity(
            usize::from(reads.driver) + reads.attributes.len() + reads.capacity.len(),
        );
        if reads.driver {
            parts.push(Part::Driver(device.driver.clone()));
        }
        for name in &reads.attributes {
            match part_of(&device.attributes, &device.driver, name) {
                Ok(value) => parts.push(Part::Attribute(value.cloned())),
                Err(()) => return self.judge(device),
            }
        }
        for name in &reads.capacity {
            match part_of(&device.capacity, &device.driver, name) {
                Ok(value) => parts.push(Part::Capacity(value.copied())),
                Err(()) => return self.judge(device),
            }
        }
        let mut alike = self.alike.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&selected) = alike.get(&parts) {
            return Ok(selected);
        }
        let verdict = self.judge(device);
        if let Ok(selected) = verdict {
            if alike.len() >= FILTER_VERDICTS {
                alike.clear();
            }
            alike.insert(parts, selected);
        }
        verdict
    }

    fn judge(&self, device: &DraDevice) -> Result<bool, String> {
        let view = DeviceView {
            driver: &device.driver,
            attributes: &device.attributes,
            capacity: &device.capacity,
        };
        let value = DeviceValue::new(&view)?;
        let class = self.class.selectors.iter().map(|s| (true, s));
        for (of_class, selector) in class.chain(self.own.iter().map(|s| (false, s))) {
            let selected = selector.matches_value(&value).map_err(|e| {
                let whose = match of_class {
                    true => format!("DeviceClass {}", self.class.name),
                    false => "the request".to_string(),
                };
                format!(
                    "{whose}: selector {:?} on device {}/{}: {e}",
                    selector.expression(),
                    device.pool,
                    device.name
                )
            })?;
            if !selected {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A claim's spec as the engine's claim `key` (`namespace/name`), its requests resolved
/// against the classes. `field` is where the spec sits (`spec`, `spec.spec` in a template).
pub fn read_claim_spec(
    ctx: &Ctx,
    field: &str,
    key: String,
    spec: &ResourceClaimSpec,
    classes: &DeviceClasses,
) -> Result<DeviceClaim, LoadError> {
    let devices = spec.devices.as_ref();
    let mut requests = Vec::new();
    for (i, r) in devices
        .and_then(|d| d.requests.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let rf = format!("{field}.devices.requests[{i}]");
        let mut alternatives = Vec::new();
        match (&r.exactly, &r.first_available) {
            (Some(exact), None) => {
                if exact.admin_access == Some(true) {
                    return Err(ctx.err(
                        format!("{rf}.exactly.adminAccess"),
                        "adminAccess is not supported by Kestrel; remove it",
                    ));
                }
                if exact.capacity.is_some() {
                    return Err(ctx.err(
                        format!("{rf}.exactly.capacity"),
                        "capacity requests (consumable capacity) are not supported by \
                         Kestrel; request whole devices",
                    ));
                }
                alternatives.push(read_choice(
                    ctx,
                    &format!("{rf}.exactly"),
                    Choice {
                        name: r.name.clone(),
                        class: &exact.device_class_name,
                        selectors: exact.selectors.as_ref(),
                        mode: exact.allocation_mode.as_deref(),
                        count: exact.count,
                        tolerations: exact.tolerations.as_ref(),
                    },
                    classes,
                )?);
            }
            (None, Some(subs)) if !subs.is_empty() => {
                for (j, sub) in subs.iter().enumerate() {
                    let sf = format!("{rf}.firstAvailable[{j}]");
                    if sub.capacity.is_some() {
                        return Err(ctx.err(
                            format!("{sf}.capacity"),
                            "capacity requests are not supported by Kestrel; request whole devices",
                        ));
                    }
                    alternatives.push(read_choice(
                        ctx,
                        &sf,
                        Choice {
                            name: format!("{}/{}", r.name, sub.name),
                            class: &sub.device_class_name,
                            selectors: sub.selectors.as_ref(),
                            mode: sub.allocation_mode.as_deref(),
                            count: sub.count,
                            tolerations: sub.tolerations.as_ref(),
                        },
                        classes,
                    )?);
                }
            }
            _ => {
                return Err(ctx.err(
                    rf,
                    "a request sets exactly one of exactly and firstAvailable (with at least \
                     one subrequest)",
                ))
            }
        }
        requests.push(DeviceRequest {
            name: r.name.clone(),
            alternatives,
        });
    }
    let names: BTreeSet<&str> = requests.iter().map(|r| r.name.as_str()).collect();
    let mut match_attributes = Vec::new();
    for (i, c) in devices
        .and_then(|d| d.constraints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let cf = format!("{field}.devices.constraints[{i}]");
        if c.distinct_attribute.is_some() {
            return Err(ctx.err(
                format!("{cf}.distinctAttribute"),
                "distinctAttribute is not supported by Kestrel; remove it",
            ));
        }
        let Some(attribute) = &c.match_attribute else {
            return Err(ctx.err(cf, "a constraint needs matchAttribute"));
        };
        if !attribute.contains('/') {
            return Err(ctx.err(
                format!("{cf}.matchAttribute"),
                format!("{attribute:?} is not fully qualified; write domain/name, e.g. gpu.nvidia.com/{attribute}"),
            ));
        }
        let bound = c.requests.clone().unwrap_or_default();
        if let Some(unknown) = bound.iter().find(|r| !names.contains(r.as_str())) {
            return Err(ctx.err(
                format!("{cf}.requests"),
                format!("no request {unknown:?} in this claim; name one of {names:?}"),
            ));
        }
        match_attributes.push((attribute.clone(), bound));
    }
    if requests.is_empty() {
        return Err(ctx.err(
            format!("{field}.devices.requests"),
            "the claim requests no device; add a request",
        ));
    }
    Ok(DeviceClaim {
        key,
        requests,
        match_attributes,
        per_pod: None,
        allocation: None,
    })
}

struct Choice<'a> {
    name: String,
    class: &'a str,
    selectors: Option<&'a Vec<DeviceSelector>>,
    mode: Option<&'a str>,
    count: Option<i64>,
    tolerations: Option<&'a Vec<DeviceToleration>>,
}

fn read_choice(
    ctx: &Ctx,
    field: &str,
    choice: Choice<'_>,
    classes: &DeviceClasses,
) -> Result<DeviceChoice, LoadError> {
    let class = classes
        .get(choice.class)
        .map_err(|e| ctx.err(format!("{field}.deviceClassName"), e))?
        .clone();
    let own = read_selectors(
        ctx,
        &format!("{field}.selectors"),
        choice.selectors,
        classes,
    )?;
    let count = match (choice.mode.unwrap_or("ExactCount"), choice.count) {
        ("ExactCount", None) => DeviceCount::Exact(1),
        ("ExactCount", Some(n)) if (1..=128).contains(&n) => DeviceCount::Exact(n as u32),
        ("ExactCount", Some(n)) => {
            return Err(ctx.err(
                format!("{field}.count"),
                format!("{n} is not a device count; write 1 to 128"),
            ))
        }
        ("All", _) => DeviceCount::All,
        (other, _) => {
            return Err(ctx.err(
                format!("{field}.allocationMode"),
                format!("{other:?} is not an allocation mode; write ExactCount or All"),
            ))
        }
    };
    let mut tolerations = Vec::new();
    for (i, t) in choice.tolerations.into_iter().flatten().enumerate() {
        let as_pod = core::Toleration {
            key: t.key.clone(),
            operator: t.operator.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
            toleration_seconds: t.toleration_seconds,
        };
        tolerations.push(ctx.toleration(&format!("{field}.tolerations[{i}]"), &as_pod)?);
    }
    let filter = classes.shared_filter(&class, own);
    Ok(DeviceChoice {
        name: choice.name,
        class: choice.class.to_string(),
        quota_resource: class.quota_resource.clone(),
        filter,
        count,
        tolerations,
    })
}

/// Most devices one request's results may hold (`AllocationResultsMaxSize`): what the API
/// server's quota counts for an `All` request.
const ALLOCATION_RESULTS_MAX: i64 = 32;

/// What the claims a pod's creation makes (those from its ResourceClaimTemplates) count
/// against namespace ResourceQuotas, as the API server counts a new claim: one
/// `count/resourceclaims.resource.k8s.io` each, and per request the devices of its class
/// under `<class>.deviceclass.resource.k8s.io/devices` (`All`: the most a request may
/// hold; `firstAvailable`: per class, its largest alternative).
pub fn claim_quota(devices: &kestrel_core::DeviceClaims) -> Vec<(String, i64)> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for claim in devices.claims.iter().filter(|c| c.per_pod.is_some()) {
        *out.entry(crate::quota::CLAIM_COUNT.to_string())
            .or_default() += 1;
        for request in &claim.requests {
            let mut most: BTreeMap<&str, i64> = BTreeMap::new();
            for a in &request.alternatives {
                let n = match a.count {
                    DeviceCount::Exact(n) => i64::from(n),
                    DeviceCount::All => ALLOCATION_RESULTS_MAX,
                };
                let e = most.entry(a.class.as_str()).or_default();
                *e = (*e).max(n);
            }
            for (class, n) in most {
                *out.entry(format!("{class}{}", crate::quota::DEVICE_CLASS_SUFFIX))
                    .or_default() += n;
            }
        }
    }
    out.into_iter().collect()
}

/// The allocation in a claim's status: its node (kube-scheduler writes a node selector on
/// `metadata.name`, or the hostname label) and results. `None`: not allocated.
pub fn claim_allocation(
    ctx: &Ctx,
    claim: &ResourceClaim,
) -> Result<Option<ClaimAllocation>, LoadError> {
    let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
        return Ok(None);
    };
    let node = allocation
        .node_selector
        .as_ref()
        .and_then(|s| s.node_selector_terms.first())
        .and_then(|t| {
            let fields = t.match_fields.iter().flatten();
            let labels = t.match_expressions.iter().flatten();
            fields
                .filter(|r| r.key == "metadata.name")
                .chain(labels.filter(|r| r.key == kestrel_core::HOSTNAME_LABEL))
                .find(|r| r.operator == "In")
                .and_then(|r| r.values.as_ref()?.first().cloned())
        })
        .ok_or_else(|| {
            ctx.err(
                "status.allocation.nodeSelector",
                "the allocation names no node (devices of a network or cluster pool); \
                 Kestrel holds only node-local devices",
            )
        })?;
    let results = allocation
        .devices
        .as_ref()
        .map(|d| {
            d.results
                .iter()
                .flatten()
                .map(|r| DeviceResult {
                    request: r.request.clone(),
                    driver: r.driver.clone(),
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Some(ClaimAllocation { node, results }))
}

/// A pod's claim entry: its name in the pod and where the claim comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimSource {
    /// `resourceClaimName`: a claim of the namespace, maybe shared.
    Claim(String),
    /// `resourceClaimTemplateName`: a claim made for the pod from the template.
    Template(String),
}

/// `spec.resourceClaims` of a pod spec at `field`, checked against its containers'
/// `resources.claims`.
pub fn pod_claims(
    ctx: &Ctx,
    field: &str,
    spec: &core::PodSpec,
) -> Result<Vec<(String, ClaimSource)>, LoadError> {
    let mut out: Vec<(String, ClaimSource)> = Vec::new();
    for (i, c) in spec.resource_claims.iter().flatten().enumerate() {
        let cf = format!("{field}.resourceClaims[{i}]");
        let source = match (&c.resource_claim_name, &c.resource_claim_template_name) {
            (Some(n), None) => ClaimSource::Claim(n.clone()),
            (None, Some(t)) => ClaimSource::Template(t.clone()),
            _ => {
                return Err(ctx.err(
                    cf,
                    "set exactly one of resourceClaimName and resourceClaimTemplateName",
                ))
            }
        };
        if out.iter().any(|(n, _)| *n == c.name) {
            return Err(ctx.err(
                format!("{cf}.name"),
                format!("a second claim is named {:?}; names must be unique", c.name),
            ));
        }
        out.push((c.name.clone(), source));
    }
    let containers = spec.containers.iter().map(|c| ("containers", c));
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| ("initContainers", c));
    for (list, c) in containers.chain(init) {
        for used in c.resources.iter().flat_map(|r| r.claims.iter().flatten()) {
            if !out.iter().any(|(n, _)| *n == used.name) {
                return Err(ctx.err(
                    format!("{field}.{list}[name={}].resources.claims", c.name),
                    format!(
                        "claim {:?} is not in spec.resourceClaims; add it there",
                        used.name
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// One ResourceSlice as read.
#[derive(Debug, Clone)]
struct Slice {
    node: Option<String>,
    driver: String,
    pool: String,
    generation: i64,
    slice_count: i64,
    devices: Vec<Arc<DraDevice>>,
    /// Per device (in `devices` order): the counter sets it consumes from, and how much.
    consumes: Vec<Vec<(String, BTreeMap<String, i64>)>>,
    /// The counter sets the slice declares (`sharedCounters`): their counters' capacity.
    counter_sets: BTreeMap<String, BTreeMap<String, i64>>,
}

/// ResourceSlices by name, and the devices they publish per node, with the taints
/// DeviceTaintRules put on them.
#[derive(Debug, Clone, Default)]
pub struct SliceBook {
    slices: BTreeMap<String, Slice>,
    taint_rules: BTreeMap<String, TaintRule>,
}

/// A DeviceTaintRule: a taint on every device its selector names (an absent field names
/// any driver, pool or device).
#[derive(Debug, Clone, PartialEq)]
struct TaintRule {
    driver: Option<String>,
    pool: Option<String>,
    device: Option<String>,
    /// `None` for a taint of effect `None`, which only informs.
    taint: Option<Taint>,
}

impl TaintRule {
    fn selects(&self, device: &DraDevice) -> bool {
        self.driver.as_ref().is_none_or(|d| *d == device.driver)
            && self.pool.as_ref().is_none_or(|p| *p == device.pool)
            && self.device.as_ref().is_none_or(|n| *n == device.name)
    }
}

/// A device taint's effect (`field`): NoSchedule and NoExecute keep requests that do not
/// tolerate them off the device; `None` only informs.
fn device_taint(
    ctx: &Ctx,
    field: &str,
    taint: &k8s_openapi::api::resource::v1::DeviceTaint,
) -> Result<Option<Taint>, LoadError> {
    let effect = match taint.effect.as_str() {
        "None" => return Ok(None),
        e => TaintEffect::parse(e)
            .filter(|e| matches!(e, TaintEffect::NoSchedule | TaintEffect::NoExecute))
            .ok_or_else(|| {
                ctx.err(
                    format!("{field}.effect"),
                    format!(
                        "{:?} is not a device taint effect; write NoSchedule, NoExecute or None",
                        taint.effect
                    ),
                )
            })?,
    };
    Ok(Some(Taint {
        key: taint.key.clone(),
        value: taint.value.clone().unwrap_or_default(),
        effect,
    }))
}

impl SliceBook {
    /// Reads (or replaces) a ResourceSlice. Refused: a slice without a node (network and
    /// cluster-wide pools are not allocated by Kestrel), a device listed twice.
    pub fn insert(&mut self, ctx: &Ctx, slice: &ResourceSlice) -> Result<(), LoadError> {
        let name = slice.metadata.name.clone().unwrap_or_default();
        let spec = &slice.spec;
        let node = spec.node_name.clone().filter(|n| !n.is_empty());
        let counter_amount = |field: String, value: &k8s_openapi::api::resource::v1::Counter| {
            parse_quantity(&value.value.0, 1).map_err(|e| ctx.err(field, e.to_string()))
        };
        let mut counter_sets = BTreeMap::new();
        for (i, set) in spec.shared_counters.iter().flatten().enumerate() {
            let mut counters = BTreeMap::new();
            for (name, value) in &set.counters {
                let field = format!("spec.sharedCounters[{i}].counters[{name:?}].value");
                counters.insert(name.clone(), counter_amount(field, value)?);
            }
            if counter_sets.insert(set.name.clone(), counters).is_some() {
                return Err(ctx.err(
                    format!("spec.sharedCounters[{i}].name"),
                    format!(
                        "counter set {:?} is declared twice; a pool declares each set once",
                        set.name
                    ),
                ));
            }
        }
        let mut devices = Vec::new();
        let mut consumes = Vec::new();
        let mut seen = BTreeSet::new();
        for (i, d) in spec.devices.iter().flatten().enumerate() {
            let df = format!("spec.devices[{i}]");
            if !seen.insert(d.name.clone()) {
                return Err(ctx.err(
                    format!("{df}.name"),
                    format!(
                        "device {:?} is listed twice; a device is published once",
                        d.name
                    ),
                ));
            }
            let qualify = |name: &str| match name.contains('/') {
                true => name.to_string(),
                false => format!("{}/{name}", spec.driver),
            };
            let mut attributes = BTreeMap::new();
            for (k, v) in d.attributes.iter().flatten() {
                let value = match (&v.int, &v.bool, &v.string, &v.version) {
                    (Some(i), None, None, None) => DeviceAttribute::Int(*i),
                    (None, Some(b), None, None) => DeviceAttribute::Bool(*b),
                    (None, None, Some(s), None) => DeviceAttribute::String(s.clone()),
                    (None, None, None, Some(v)) => DeviceAttribute::Version(v.clone()),
                    _ => {
                        return Err(ctx.err(
                            format!("{df}.attributes[{k:?}]"),
                            "an attribute sets exactly one of int, bool, string and version",
                        ))
                    }
                };
                attributes.insert(qualify(k), value);
            }
            let mut capacity = BTreeMap::new();
            for (k, v) in d.capacity.iter().flatten() {
                let amount = parse_quantity(&v.value.0, 1)
                    .map_err(|e| ctx.err(format!("{df}.capacity[{k:?}].value"), e.to_string()))?;
                capacity.insert(qualify(k), amount);
            }
            let mut taints = Vec::new();
            for (j, t) in d.taints.iter().flatten().enumerate() {
                taints.extend(device_taint(ctx, &format!("{df}.taints[{j}]"), t)?);
            }
            let mut uses = Vec::new();
            for (j, c) in d.consumes_counters.iter().flatten().enumerate() {
                let mut counters = BTreeMap::new();
                for (name, value) in &c.counters {
                    let field = format!("{df}.consumesCounters[{j}].counters[{name:?}]");
                    let amount = counter_amount(format!("{field}.value"), value)?;
                    // A set declared here is checked here; one another slice of the pool
                    // declares is checked when the pool is put together.
                    if let Some(set) = counter_sets.get(&c.counter_set) {
                        let capacity = set.get(name).copied();
                        if capacity.is_none_or(|cap| amount > cap) {
                            return Err(ctx.err(
                                field,
                                format!(
                                    "device {:?} consumes {amount} of counter {name:?}, and \
                                     counter set {:?} has {}: a device never consumes more \
                                     than its set holds; fix the amount or the set",
                                    d.name,
                                    c.counter_set,
                                    capacity
                                        .map_or("no such counter".to_string(), |c| c.to_string())
                                ),
                            ));
                        }
                    }
                    counters.insert(name.clone(), amount);
                }
                uses.push((c.counter_set.clone(), counters));
            }
            consumes.push(uses);
            devices.push(Arc::new(DraDevice {
                driver: spec.driver.clone(),
                pool: spec.pool.name.clone(),
                name: d.name.clone(),
                attributes,
                capacity,
                taints,
                partitions: None,
            }));
        }
        self.slices.insert(
            name,
            Slice {
                node,
                driver: spec.driver.clone(),
                pool: spec.pool.name.clone(),
                generation: spec.pool.generation,
                slice_count: spec.pool.resource_slice_count.max(1),
                devices,
                consumes,
                counter_sets,
            },
        );
        Ok(())
    }

    pub fn remove(&mut self, name: &str) {
        self.slices.remove(name);
    }

    pub fn names(&self) -> Vec<String> {
        self.slices.keys().cloned().collect()
    }

    /// Reads (or replaces) a DeviceTaintRule: its taint goes on every device its selector
    /// names, wherever it is published. An effect other than NoSchedule, NoExecute and
    /// None is refused naming the field.
    pub fn insert_taint_rule(
        &mut self,
        ctx: &Ctx,
        rule: &DeviceTaintRule,
    ) -> Result<(), LoadError> {
        let name = rule.metadata.name.clone().unwrap_or_default();
        let selector = rule.spec.device_selector.as_ref();
        let rule = TaintRule {
            driver: selector.and_then(|s| s.driver.clone()),
            pool: selector.and_then(|s| s.pool.clone()),
            device: selector.and_then(|s| s.device.clone()),
            taint: device_taint(ctx, "spec.taint", &rule.spec.taint)?,
        };
        self.taint_rules.insert(name, rule);
        Ok(())
    }

    pub fn remove_taint_rule(&mut self, name: &str) {
        self.taint_rules.remove(name);
    }

    pub fn taint_rule_names(&self) -> Vec<String> {
        self.taint_rules.keys().cloned().collect()
    }

    /// The nodes with a device that DeviceTaintRule `name` names (as held now).
    pub fn nodes_of_taint_rule(&self, name: &str) -> BTreeSet<String> {
        let Some(rule) = self.taint_rules.get(name) else {
            return BTreeSet::new();
        };
        self.slices
            .values()
            .filter(|s| s.devices.iter().any(|d| rule.selects(d)))
            .filter_map(|s| s.node.clone())
            .collect()
    }

    /// A device with the taints of the rules that name it added.
    fn with_rule_taints(&self, device: Arc<DraDevice>) -> Arc<DraDevice> {
        let added: Vec<&Taint> = self
            .taint_rules
            .values()
            .filter(|r| r.selects(&device))
            .filter_map(|r| r.taint.as_ref())
            .filter(|t| !device.taints.contains(t))
            .collect();
        if added.is_empty() {
            return device;
        }
        let mut tainted = (*device).clone();
        tainted.taints.extend(added.into_iter().cloned());
        Arc::new(tainted)
    }

    /// The nodes whose devices may change with slice `name`: those of every slice of its
    /// pool (a pool's newest generation decides which of its slices count), its own node
    /// included. Empty when no such slice is held.
    pub fn nodes_of_pool_of(&self, name: &str) -> BTreeSet<String> {
        let Some(slice) = self.slices.get(name) else {
            return BTreeSet::new();
        };
        self.slices
            .values()
            .filter(|s| s.driver == slice.driver && s.pool == slice.pool)
            .chain([slice])
            .filter_map(|s| s.node.clone())
            .collect()
    }

    /// The nodes some slice publishes devices for.
    pub fn nodes(&self) -> BTreeSet<&str> {
        self.slices
            .values()
            .filter_map(|s| s.node.as_deref())
            .collect()
    }

    /// The GPUs published for `node` that count: NVIDIA `gpu` devices of each pool's
    /// newest generation once all its slices are there, by GPU index. A GPU that consumes
    /// one counter set (partitionable devices) carries, as its partitions, the pool's
    /// other devices that consume from that set alone (MIG devices).
    pub fn gpus_of(&self, node: &str) -> Vec<Arc<DraDevice>> {
        // Newest generation per pool, and how many of its slices are here.
        let mut pools: BTreeMap<(&str, &str), (i64, i64, i64)> = BTreeMap::new();
        for s in self.slices.values() {
            let e = pools
                .entry((s.driver.as_str(), s.pool.as_str()))
                .or_insert((s.generation, 0, s.slice_count));
            if s.generation > e.0 {
                *e = (s.generation, 0, s.slice_count);
            }
            if s.generation == e.0 {
                e.1 += 1;
            }
        }
        let current = |s: &Slice| {
            let (generation, present, count) = pools[&(s.driver.as_str(), s.pool.as_str())];
            s.generation == generation && present >= count
        };
        let is_gpu = |d: &DraDevice| {
            let kind = d.attributes.get(&format!("{NVIDIA_GPU_DRIVER}/type"));
            kind.is_none_or(|t| *t == DeviceAttribute::String("gpu".to_string()))
        };
        let here: Vec<&Slice> = self
            .slices
            .values()
            .filter(|s| s.node.as_deref() == Some(node) && s.driver == NVIDIA_GPU_DRIVER)
            .filter(|s| current(s))
            .collect();
        let mut out: Vec<Arc<DraDevice>> = Vec::new();
        for s in &here {
            // The pool's counter sets, wherever in the pool they are declared: gathered
            // once per slice, and only for a slice whose devices consume counters.
            let mut sets: BTreeMap<&str, &BTreeMap<String, i64>> = BTreeMap::new();
            if s.consumes.iter().any(|uses| !uses.is_empty()) {
                for o in self.slices.values() {
                    if o.driver == s.driver && o.pool == s.pool && current(o) {
                        for (name, counters) in &o.counter_sets {
                            sets.entry(name.as_str()).or_insert(counters);
                        }
                    }
                }
            }
            for (d, uses) in s.devices.iter().zip(&s.consumes) {
                if !is_gpu(d) {
                    continue;
                }
                let device = self.with_rule_taints(d.clone());
                let partitions = match uses.as_slice() {
                    [(set, _)] => sets
                        .get(set.as_str())
                        .and_then(|capacity| self.partitions_over(&here, s, d, set, capacity)),
                    _ => None,
                };
                out.push(match partitions {
                    Some(p) => {
                        let mut whole = (*device).clone();
                        whole.partitions = Some(Arc::new(p));
                        Arc::new(whole)
                    }
                    None => device,
                });
            }
        }
        out.sort_by_key(|d| (gpu_index(d).unwrap_or(u32::MAX), d.name.clone()));
        out
    }

    /// The devices of the node's slices of `gpu`'s pool that consume from counter set
    /// `set` alone (its partitions), with what each stands for; `None` when there are
    /// none. Sets a device over-subscribes leave it out; past [`Partitions::MAX`], the
    /// rest are left out.
    fn partitions_over(
        &self,
        here: &[&Slice],
        of: &Slice,
        gpu: &Arc<DraDevice>,
        set: &str,
        capacity: &BTreeMap<String, i64>,
    ) -> Option<Partitions> {
        let mut devices: Vec<Partition> = here
            .iter()
            .filter(|s| s.driver == of.driver && s.pool == of.pool)
            .flat_map(|s| s.devices.iter().zip(&s.consumes))
            .filter(|(d, _)| d.name != gpu.name)
            .filter_map(|(d, uses)| match uses.as_slice() {
                [(s, consumes)] if s == set => Some((d, consumes)),
                _ => None,
            })
            .filter(|(_, consumes)| {
                consumes
                    .iter()
                    .all(|(c, want)| capacity.get(c).is_some_and(|cap| want <= cap))
            })
            .map(|(d, consumes)| Partition {
                device: self.with_rule_taints(d.clone()),
                consumes: consumes.clone(),
                milli: Partitions::milli_of(capacity, consumes),
            })
            .collect();
        devices.sort_by(|a, b| a.device.name.cmp(&b.device.name));
        devices.truncate(Partitions::MAX);
        (!devices.is_empty()).then(|| Partitions {
            counter_set: set.to_string(),
            capacity: capacity.clone(),
            devices,
        })
    }
}

fn gpu_index(device: &DraDevice) -> Option<u32> {
    match device.attributes.get(&format!("{NVIDIA_GPU_DRIVER}/index")) {
        Some(DeviceAttribute::Int(i)) => u32::try_from(*i).ok(),
        _ => None,
    }
}

/// Gives a node the GPUs DRA publishes for it, laid out by the topology template its count
/// and product imply ([`crate::nodes::infer_topology`]). A node whose device plugin already
/// advertises `nvidia.com/gpu` keeps those: the same GPUs published twice would be counted
/// twice. Returns a warning in that case.
pub fn attach_gpus(node: &mut NodeSpec, devices: &[Arc<DraDevice>]) -> Option<String> {
    if devices.is_empty() {
        return None;
    }
    if !node.gpus.is_empty() && !node.gpus_are_dra() {
        return Some(format!(
            "node {} advertises nvidia.com/gpu and its GPUs are published through DRA too; \
             Kestrel counts the device plugin's and leaves the {} DRA devices out (run one of \
             the two)",
            node.name,
            devices.len()
        ));
    }
    let product = |d: &DraDevice| match d
        .attributes
        .get(&format!("{NVIDIA_GPU_DRIVER}/productName"))
    {
        Some(DeviceAttribute::String(s)) => s.clone(),
        _ => "unknown".to_string(),
    };
    let model = product(&devices[0]);
    let count = devices.len() as u32;
    let topology =
        crate::nodes::infer_topology(count, &model, node.labels.contains_key(GPU_CLIQUE_LABEL));
    let (layout, nics) = topology.devices(&model, 0, count);
    let mut used = BTreeSet::new();
    node.gpus = devices
        .iter()
        .zip(layout)
        .enumerate()
        .map(|(position, (d, slot))| {
            let memory = d
                .capacity
                .get(&format!("{NVIDIA_GPU_DRIVER}/memory"))
                .copied()
                .unwrap_or(0);
            // Indices are unique on a node: a device without one, or repeating one, takes
            // the next free number past the published ones.
            let index = gpu_index(d).filter(|i| used.insert(*i)).unwrap_or_else(|| {
                let i = (count + position as u32..)
                    .find(|i| !used.contains(i))
                    .expect("a free index");
                used.insert(i);
                i
            });
            GpuDevice {
                index,
                model: product(d),
                memory_mib: (memory.max(0) as u64) / (1024 * 1024),
                dra: Some(d.clone()),
                ..slot
            }
        })
        .collect();
    if node.nics.is_empty() {
        node.nics = nics;
    }
    None
}

/// The DeviceClass that serves `nvidia.com/gpu` through DRA (KEP-5004): on a node whose
/// GPUs DRA publishes and the class's selectors accept, `nvidia.com/gpu` pods take them, and
/// the binder writes the claim kube-scheduler would ([`extended_gpu_requests`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuBacking {
    pub class: String,
    filter: Filter,
}

impl GpuBacking {
    /// Marks `node` as serving `nvidia.com/gpu` from its published GPUs when the class
    /// accepts every one of them (the engine hands out a node's GPUs alike), and unmarks
    /// it otherwise.
    pub fn apply(backing: Option<&GpuBacking>, node: &mut NodeSpec) {
        node.gpu_extended_class = backing
            .filter(|b| {
                node.gpus_are_dra()
                    && node.gpus.iter().all(|g| {
                        g.dra
                            .as_ref()
                            .is_some_and(|d| b.filter.0.accepts(d) == Ok(true))
                    })
            })
            .map(|b| b.class.clone());
    }
}

/// The requests of the claim kube-scheduler makes for a pod's DRA-backed extended
/// resource `resource` served by `class`, and which container each serves: one request
/// `container-<i>-request-<j>` per container asking for it (`i` counts init containers
/// first, `j` is the resource's place among the container's sorted request names). An init
/// container that is not a sidecar reuses the requests of the long-lived containers after
/// it where they are enough, and asks for the rest; only the largest such request is kept,
/// and the others' mappings name it. Requests sorted by name.
pub fn extended_gpu_requests(
    spec: &core::PodSpec,
    resource: &str,
) -> (Vec<(String, u32)>, Vec<ExtendedMapping>) {
    let init = spec.init_containers.iter().flatten();
    let containers: Vec<&core::Container> = init.chain(spec.containers.iter()).collect();
    let init_count = spec.init_containers.as_ref().map_or(0, Vec::len);
    let short_lived =
        |i: usize| i < init_count && containers[i].restart_policy.as_deref() != Some("Always");
    let asks = |c: &core::Container| -> Option<(usize, u32)> {
        let requests = c.resources.as_ref()?.requests.as_ref()?;
        let count = requests
            .get(resource)?
            .0
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)?;
        let position = requests.keys().position(|k| k == resource)?;
        Some((position, count))
    };
    let mut long: Vec<Option<(String, u32)>> = vec![None; containers.len()];
    let mut mappings = Vec::new();
    for (i, c) in containers
        .iter()
        .enumerate()
        .filter(|(i, _)| !short_lived(*i))
    {
        if let Some((j, count)) = asks(c) {
            let name = format!("container-{i}-request-{j}");
            mappings.push(ExtendedMapping {
                container: c.name.clone(),
                request: name.clone(),
            });
            long[i] = Some((name, count));
        }
    }
    let mut short: Option<(String, u32)> = None;
    let mut short_mappings: Vec<ExtendedMapping> = Vec::new();
    let mut short_names: Vec<String> = Vec::new();
    for (i, c) in containers
        .iter()
        .enumerate()
        .filter(|(i, _)| short_lived(*i))
    {
        let Some((j, count)) = asks(c) else { continue };
        let mut sum = 0;
        for (name, n) in long[i..].iter().flatten() {
            sum += n;
            short_mappings.push(ExtendedMapping {
                container: c.name.clone(),
                request: name.clone(),
            });
            if sum >= count {
                break;
            }
        }
        if sum >= count {
            continue;
        }
        let name = format!("container-{i}-request-{j}");
        short_mappings.push(ExtendedMapping {
            container: c.name.clone(),
            request: name.clone(),
        });
        short_names.push(name.clone());
        if short.as_ref().is_none_or(|(_, most)| *most < count - sum) {
            short = Some((name, count - sum));
        }
    }
    if let Some((kept, _)) = &short {
        for m in &mut short_mappings {
            if short_names.contains(&m.request) {
                m.request = kept.clone();
            }
        }
    }
    let mut requests: Vec<(String, u32)> = short
        .into_iter()
        .chain(long.into_iter().flatten())
        .collect();
    requests.sort();
    mappings.extend(short_mappings);
    (requests, mappings)
}

/// Which request of the extended-resource claim serves which container
/// (`status.extendedResourceClaimStatus.requestMappings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtendedMapping {
    pub container: String,
    pub request: String,
}

/// Gives a pod its claims: it takes DRA devices, and its GPU demand (for packing and
/// quota) is the devices its unallocated claims take. A pod that also asks for
/// `nvidia.com/gpu` is refused: a node serves GPUs through one or the other.
pub fn set_pod_claims(
    ctx: &Ctx,
    field: &str,
    pod: &mut kestrel_core::PodSpec,
    claims: Vec<DeviceClaim>,
) -> Result<(), LoadError> {
    if claims.is_empty() {
        return Ok(());
    }
    if pod.demand.gpu != kestrel_core::GpuRequest::None {
        return Err(ctx.err(
            format!("{field}.resourceClaims"),
            "the pod asks for nvidia.com/gpu (or a GPU share) and for ResourceClaims; a node \
             serves its GPUs through the device plugin or through DRA, not both: ask for \
             GPUs in one way",
        ));
    }
    let devices = kestrel_core::DeviceClaims { claims };
    pod.demand.gpu = devices.gpu_request();
    pod.constraints.devices = Some(devices);
    Ok(())
}

/// A GPU as NVIDIA's driver publishes it: device `gpu-<index>` of the pool named after its
/// node, with `type`, `index`, `uuid`, `productName` and `memory` under the driver's
/// domain, and the standard `pcieRoot`. The simulator's DRA pools publish their GPUs so.
pub fn nvidia_gpu_device(node: &str, gpu: &GpuDevice) -> DraDevice {
    let domain = |id: &str| format!("{NVIDIA_GPU_DRIVER}/{id}");
    let mut attributes = BTreeMap::new();
    attributes.insert(domain("type"), DeviceAttribute::String("gpu".to_string()));
    attributes.insert(domain("index"), DeviceAttribute::Int(i64::from(gpu.index)));
    attributes.insert(
        domain("uuid"),
        DeviceAttribute::String(format!("GPU-{node}-{}", gpu.index)),
    );
    attributes.insert(
        domain("productName"),
        DeviceAttribute::String(gpu.model.clone()),
    );
    attributes.insert(
        "resource.kubernetes.io/pcieRoot".to_string(),
        DeviceAttribute::String(format!(
            "pci0000:{:02x}",
            gpu.pcie_switch.unwrap_or(gpu.numa_node)
        )),
    );
    let mut capacity = BTreeMap::new();
    capacity.insert(domain("memory"), (gpu.memory_mib * 1024 * 1024) as i64);
    DraDevice {
        driver: NVIDIA_GPU_DRIVER.to_string(),
        pool: node.to_string(),
        name: format!("gpu-{}", gpu.index),
        attributes,
        capacity,
        taints: Vec::new(),
        partitions: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The filter of a one-request claim of class `gpu.nvidia.com` (selector `class`) with
    /// its own selector `request`.
    fn filter(class: &str, request: &str) -> Filter {
        let path = std::path::PathBuf::from("claims.yaml");
        let ctx = Ctx {
            path: &path,
            object: "ResourceClaim ml/c".into(),
        };
        let mut classes = DeviceClasses::default();
        let class: DeviceClass = serde_json::from_value(json!({
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": class}}]},
        }))
        .unwrap();
        classes.insert(&ctx, &class).unwrap();
        let spec: ResourceClaimSpec = serde_json::from_value(json!({"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
             "selectors": [{"cel": {"expression": request}}]}}]}}))
        .unwrap();
        let claim = read_claim_spec(&ctx, "spec", "ml/c".into(), &spec, &classes).unwrap();
        claim.requests[0].alternatives[0].filter.clone()
    }

    fn gpu(name: &str, attributes: &[(&str, DeviceAttribute)], memory_gib: i64) -> Arc<DraDevice> {
        Arc::new(DraDevice {
            driver: NVIDIA_GPU_DRIVER.into(),
            pool: "node-a".into(),
            name: name.into(),
            attributes: attributes
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            capacity: BTreeMap::from([("gpu.nvidia.com/memory".into(), memory_gib << 30)]),
            taints: Vec::new(),
            partitions: None,
        })
    }

    fn s(v: &str) -> DeviceAttribute {
        DeviceAttribute::String(v.into())
    }

    const TYPE_IS_GPU: &str = "device.attributes['gpu.nvidia.com'].type == 'gpu'";
    const FORTY_GIB: &str =
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0";

    #[test]
    fn devices_alike_in_what_the_selectors_read_share_a_verdict_and_no_other_does() {
        let f = filter(TYPE_IS_GPU, FORTY_GIB);
        let version = |v: &str| DeviceAttribute::Version(v.into());
        let h100 = |name: &str, uuid: &str| {
            gpu(
                name,
                &[
                    ("gpu.nvidia.com/type", s("gpu")),
                    ("gpu.nvidia.com/uuid", s(uuid)),
                    ("gpu.nvidia.com/driverVersion", version("550.54.15")),
                ],
                80,
            )
        };
        // Alike but for what no selector reads.
        assert_eq!(f.0.accepts(&h100("gpu-0", "GPU-a")), Ok(true));
        assert_eq!(f.0.accepts(&h100("gpu-1", "GPU-b")), Ok(true));
        // A part read differs: capacity, then an attribute.
        let small = gpu("gpu-2", &[("gpu.nvidia.com/type", s("gpu"))], 24);
        assert_eq!(f.0.accepts(&small), Ok(false));
        let nic = gpu("nic-0", &[("gpu.nvidia.com/type", s("nic"))], 80);
        assert_eq!(f.0.accepts(&nic), Ok(false));
        // An unqualified name is in the driver's domain, as CEL reads it.
        let bare = gpu("gpu-3", &[("type", s("nic"))], 80);
        assert_eq!(f.0.accepts(&bare), Ok(false));
        let bare = gpu("gpu-4", &[("type", s("gpu"))], 80);
        assert_eq!(f.0.accepts(&bare), Ok(true));
        // Errors are the device's own: a missing attribute, a version that does not parse
        // (CEL fails on it, read or not), though an alike device was selected.
        let missing = gpu("gpu-5", &[], 80);
        let e = f.0.accepts(&missing).unwrap_err();
        assert!(e.contains("gpu-5"), "{e}");
        let broken = gpu(
            "gpu-6",
            &[
                ("gpu.nvidia.com/type", s("gpu")),
                ("gpu.nvidia.com/driverVersion", version("not-a-version")),
            ],
            80,
        );
        let e = f.0.accepts(&broken).unwrap_err();
        assert!(e.contains("not-a-version"), "{e}");
    }

    #[test]
    fn a_slice_changes_the_devices_of_its_pools_nodes_only() {
        let path = std::path::PathBuf::from("slices.yaml");
        let ctx = Ctx {
            path: &path,
            object: "ResourceSlice".into(),
        };
        let mut book = SliceBook::default();
        for (name, node, pool) in [
            ("a", "node-a", "p"),
            ("b", "node-b", "p"),
            ("c", "node-c", "q"),
        ] {
            let slice: ResourceSlice = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"driver": NVIDIA_GPU_DRIVER, "nodeName": node,
                         "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
                         "devices": [{"name": "gpu-0"}]}}))
            .unwrap();
            book.insert(&ctx, &slice).unwrap();
        }
        let nodes =
            |name: &str| -> Vec<String> { book.nodes_of_pool_of(name).into_iter().collect() };
        assert_eq!(nodes("a"), ["node-a", "node-b"]);
        assert_eq!(nodes("c"), ["node-c"]);
        assert!(nodes("gone").is_empty());
    }

    /// NVIDIA's partitionable layout on one node: pool `node-a` with two slices, one
    /// declaring GPU 0's counter set (8 memory slices), one publishing the GPU (consuming
    /// all of them) and two MIG devices, `1g` at slice 0 and `3g` at slices 4-7.
    fn mig_slices(mig_3g_slices: i64) -> Vec<ResourceSlice> {
        let consume = |from: i64, to: i64| -> serde_json::Value {
            let counters: serde_json::Map<String, serde_json::Value> = (from..to)
                .map(|s| (format!("memory-slice-{s}"), json!({"value": "1"})))
                .collect();
            json!([{"counterSet": "gpu-0-counter-set", "counters": counters}])
        };
        let counters: serde_json::Map<String, serde_json::Value> = (0..8)
            .map(|s| (format!("memory-slice-{s}"), json!({"value": "1"})))
            .collect();
        let pool = json!({"name": "node-a", "generation": 1, "resourceSliceCount": 2});
        let mig = |name: &str, profile: &str, from: i64, to: i64| {
            json!({"name": name,
                   "attributes": {"type": {"string": "mig"}, "profile": {"string": profile},
                                  "parentIndex": {"int": 0}},
                   "consumesCounters": consume(from, to)})
        };
        [
            json!({"metadata": {"name": "counters"},
                   "spec": {"driver": NVIDIA_GPU_DRIVER, "nodeName": "node-a", "pool": pool,
                            "sharedCounters": [{"name": "gpu-0-counter-set",
                                                "counters": counters}]}}),
            json!({"metadata": {"name": "devices"},
            "spec": {"driver": NVIDIA_GPU_DRIVER, "nodeName": "node-a", "pool": pool,
                     "devices": [
                         {"name": "gpu-0",
                          "attributes": {"type": {"string": "gpu"}, "index": {"int": 0},
                                         "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                          "consumesCounters": consume(0, 8)},
                         mig("gpu-0-mig-1g10gb-0", "1g.10gb", 0, 1),
                         mig("gpu-0-mig-3g40gb-4", "3g.40gb", 4, 4 + mig_3g_slices),
                     ]}}),
        ]
        .into_iter()
        .map(|v| serde_json::from_value(v).unwrap())
        .collect()
    }

    #[test]
    fn mig_devices_over_a_gpus_counters_are_its_partitions() {
        let path = std::path::PathBuf::from("slices.yaml");
        let ctx = Ctx {
            path: &path,
            object: "ResourceSlice".into(),
        };
        let mut book = SliceBook::default();
        let slices = mig_slices(4);
        book.insert(&ctx, &slices[1]).unwrap();
        // Until the pool's counter set is there (its other slice), the pool is incomplete.
        assert!(book.gpus_of("node-a").is_empty());
        book.insert(&ctx, &slices[0]).unwrap();
        let gpus = book.gpus_of("node-a");
        assert_eq!(gpus.len(), 1, "MIG devices are partitions, not GPUs");
        let parts = gpus[0].partitions.as_ref().expect("partitions");
        assert_eq!(parts.counter_set, "gpu-0-counter-set");
        assert_eq!(parts.capacity.len(), 8);
        let names: Vec<&str> = parts
            .devices
            .iter()
            .map(|p| p.device.name.as_str())
            .collect();
        assert_eq!(names, ["gpu-0-mig-1g10gb-0", "gpu-0-mig-3g40gb-4"]);
        assert_eq!(
            parts.devices.iter().map(|p| p.milli).collect::<Vec<_>>(),
            [125, 500]
        );
        // The whole GPU still lays out as a node's GPU, with its partitions.
        let mut node = NodeSpec::new("node-a", kestrel_core::Resources::new(1000, 1 << 30));
        assert_eq!(attach_gpus(&mut node, &gpus), None);
        assert!(node.has_partitions());
    }

    #[test]
    fn a_device_consuming_more_than_its_counter_set_is_refused_by_field() {
        let path = std::path::PathBuf::from("slices.yaml");
        let ctx = Ctx {
            path: &path,
            object: "ResourceSlice devices".into(),
        };
        // Both in one slice: the set is checked where it is declared.
        let mut slices = mig_slices(4);
        let counters = slices[0].spec.shared_counters.clone();
        slices[1].spec.shared_counters = counters;
        if let Some(devices) = slices[1].spec.devices.as_mut() {
            let c = devices[2].consumes_counters.as_mut().unwrap();
            c[0].counters.insert(
                "memory-slice-4".into(),
                k8s_openapi::api::resource::v1::Counter {
                    value: k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
                },
            );
        }
        let e = SliceBook::default()
            .insert(&ctx, &slices[1])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.devices[2].consumesCounters[0].counters[\"memory-slice-4\"]")
                && e.contains("consumes 2")
                && e.contains("has 1"),
            "{e}"
        );
        // A counter the set does not have.
        let mut slices = mig_slices(5);
        let counters = slices[0].spec.shared_counters.clone();
        slices[1].spec.shared_counters = counters;
        let e = SliceBook::default()
            .insert(&ctx, &slices[1])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("memory-slice-8") && e.contains("no such counter"),
            "{e}"
        );
    }

    #[test]
    fn a_selector_reading_a_whole_domain_judges_each_device() {
        let f = filter("'type' in device.attributes['gpu.nvidia.com']", "true");
        let with = gpu("gpu-0", &[("gpu.nvidia.com/type", s("gpu"))], 80);
        let without = gpu(
            "gpu-1",
            &[("gpu.nvidia.com/index", DeviceAttribute::Int(1))],
            80,
        );
        assert_eq!(f.0.accepts(&with), Ok(true));
        assert_eq!(f.0.accepts(&without), Ok(false));
    }
}

#[cfg(test)]
mod extended_tests {
    use super::*;
    use serde_json::json;

    fn names(mappings: &[ExtendedMapping]) -> Vec<(&str, &str)> {
        mappings
            .iter()
            .map(|m| (m.container.as_str(), m.request.as_str()))
            .collect()
    }

    #[test]
    fn extended_gpu_requests_name_containers_and_let_init_containers_reuse_later_ones() {
        let spec: core::PodSpec = serde_json::from_value(json!({
            "initContainers": [
                {"name": "fetch", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "3"}}},
                {"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
                {"name": "sidecar", "restartPolicy": "Always",
                 "resources": {"requests": {"nvidia.com/gpu": "1"}}}
            ],
            "containers": [
                {"name": "cpu-only", "resources": {"requests": {"cpu": "1"}}},
                {"name": "main", "resources": {"requests": {"memory": "1Gi", "nvidia.com/gpu": "2"}}}
            ]
        }))
        .unwrap();
        let (requests, mappings) = extended_gpu_requests(&spec, "nvidia.com/gpu");
        // The sidecar and `main` hold theirs for the pod's life; `warm` reuses the
        // sidecar's; `fetch` needs 3, finds 1 + 2 after it and reuses both.
        assert_eq!(
            requests,
            vec![
                ("container-2-request-0".to_string(), 1),
                ("container-4-request-1".to_string(), 2)
            ]
        );
        assert_eq!(
            names(&mappings),
            vec![
                ("sidecar", "container-2-request-0"),
                ("main", "container-4-request-1"),
                ("fetch", "container-2-request-0"),
                ("fetch", "container-4-request-1"),
                ("warm", "container-2-request-0"),
            ]
        );
        // An init container asking for more than the long-lived ones hold gets its own
        // request for the rest.
        let spec: core::PodSpec = serde_json::from_value(json!({
            "initContainers": [
                {"name": "big", "resources": {"requests": {"nvidia.com/gpu": "4"}}}
            ],
            "containers": [
                {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
            ]
        }))
        .unwrap();
        let (requests, mappings) = extended_gpu_requests(&spec, "nvidia.com/gpu");
        assert_eq!(
            requests,
            vec![
                ("container-0-request-0".to_string(), 3),
                ("container-1-request-0".to_string(), 1)
            ]
        );
        assert_eq!(
            names(&mappings),
            vec![
                ("main", "container-1-request-0"),
                ("big", "container-1-request-0"),
                ("big", "container-0-request-0"),
            ]
        );
    }
}
