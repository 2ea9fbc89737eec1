//! GPUs handed out through Dynamic Resource Allocation: devices a driver publishes in
//! ResourceSlices, and the claims pods make for them.
//!
//! A published GPU is a [`GpuDevice`] of its node like any other (packing, NUMA, NVLink,
//! racks and gangs apply unchanged), with a [`DraDevice`] saying who published it and what
//! its attributes are. A pod's claims ([`DeviceClaims`]) replace `nvidia.com/gpu`: the engine
//! chooses devices for each request among those its filters accept, and the driver writes
//! the allocation. Filters are opaque here ([`DeviceFilter`]): the Kubernetes layer
//! compiles the CEL of device classes and requests, so the engine sees no expression
//! language and no Kubernetes type.

use crate::cluster::NodeState;
use crate::model::{GpuDevice, NodeSpec};
use crate::types::{GpuAssignment, PartitionRef};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// One attribute value of a published device.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum DeviceAttribute {
    Int(i64),
    Bool(bool),
    String(String),
    /// A semantic version, as published.
    Version(String),
}

/// A device as its driver published it in a ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DraDevice {
    pub driver: String,
    pub pool: String,
    pub name: String,
    /// Fully qualified names (`gpu.nvidia.com/productName`); an unqualified name in the
    /// slice is qualified with the driver's name.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Fully qualified names, in base units (bytes for memory).
    pub capacity: BTreeMap<String, i64>,
    /// The device's taints (`spec.devices[].taints`): a request must tolerate them.
    pub taints: Vec<crate::model::Taint>,
    /// For a whole GPU whose driver publishes partitions of it (MIG devices) that share its
    /// counters: those partitions. A GPU is taken whole or partition by partition, never
    /// both.
    pub partitions: Option<Arc<Partitions>>,
}

/// The partitions of one GPU (KEP-4815 partitionable devices): devices that consume the
/// counters of the GPU's counter set (`sharedCounters`), which they may never exceed
/// together. The NVIDIA driver gives each MIG placement its own memory-slice counters, so
/// counters alone say which partitions may coexist.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Partitions {
    /// The counter set's name in its pool.
    pub counter_set: String,
    /// Each counter's capacity.
    pub capacity: BTreeMap<String, i64>,
    /// At most [`Partitions::MAX`].
    pub devices: Vec<Partition>,
}

/// One partition and what it takes of its GPU.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Partition {
    pub device: Arc<DraDevice>,
    /// The counters it consumes (`consumesCounters`).
    pub consumes: BTreeMap<String, i64>,
    /// The thousandths of the GPU it stands for ([`Partitions::milli_of`]).
    pub milli: u32,
}

impl Partitions {
    /// Partitions one GPU may have (a bit each in [`crate::GpuUse`]).
    pub const MAX: usize = 64;

    /// Whether partition `k` fits beside the partitions `taken` (a bit per partition).
    pub fn fits(&self, taken: u64, k: usize) -> bool {
        if taken & (1 << k) != 0 {
            return false;
        }
        self.devices[k].consumes.iter().all(|(counter, want)| {
            self.used(taken, counter) + want <= self.capacity.get(counter).copied().unwrap_or(0)
        })
    }

    /// Whether the partitions `taken` exceed a counter together.
    pub fn over_committed(&self, taken: u64) -> Option<String> {
        self.capacity.iter().find_map(|(counter, capacity)| {
            let used = self.used(taken, counter);
            (used > *capacity).then(|| format!("counter {counter}: {used} of {capacity}"))
        })
    }

    /// How much of `counter` the partitions `taken` consume together.
    fn used(&self, taken: u64, counter: &str) -> i64 {
        (0..self.devices.len())
            .filter(|j| taken & (1 << j) != 0)
            .filter_map(|j| self.devices[j].consumes.get(counter))
            .sum()
    }

    /// Thousandths of the GPU that `consumes` stands for: its mean share of the set's
    /// counters (a MIG device taking one of eight memory slices and an eighth of the
    /// memory and compute stands for an eighth), at least 1.
    pub fn milli_of(capacity: &BTreeMap<String, i64>, consumes: &BTreeMap<String, i64>) -> u32 {
        let shares: f64 = capacity
            .iter()
            .filter(|(_, cap)| **cap > 0)
            .map(|(counter, cap)| {
                let want = consumes.get(counter).copied().unwrap_or(0);
                want.clamp(0, *cap) as f64 / *cap as f64
            })
            .sum();
        let counted = capacity.values().filter(|cap| **cap > 0).count().max(1);
        ((1000.0 * shares / counted as f64).ceil() as u32).clamp(1, 1000)
    }
}

/// Whether a device is one a request may take: the device class's selectors and the
/// request's, compiled once by whoever read them.
pub trait DeviceFilter: fmt::Debug + Send + Sync {
    /// `Err`: the selector failed on this device (a missing attribute, a type error); the
    /// device is not taken and the text explains why.
    fn accepts(&self, device: &Arc<DraDevice>) -> Result<bool, String>;
    /// What identifies the filter (its class and expressions): equal keys, equal filters.
    fn key(&self) -> &str;
}

/// A filter, compared and hashed by its key so that pods with equal claims share
/// constraints.
#[derive(Debug, Clone)]
pub struct Filter(pub Arc<dyn DeviceFilter>);

impl PartialEq for Filter {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}
impl Eq for Filter {}
impl Hash for Filter {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key().hash(state)
    }
}
impl Serialize for Filter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.key())
    }
}

/// How many devices a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum DeviceCount {
    /// `allocationMode: ExactCount`.
    Exact(u32),
    /// `allocationMode: All`: every matching device of the node, at least one.
    All,
}

/// One way to satisfy a request: a device class's filter, a count, tolerations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DeviceChoice {
    /// The request's name, or `request/subrequest` for a `firstAvailable` alternative.
    pub name: String,
    /// The DeviceClass it names.
    pub class: String,
    /// The queue quota resource its devices count as (its class's).
    pub quota_resource: String,
    pub filter: Filter,
    pub count: DeviceCount,
    pub tolerations: Vec<crate::model::Toleration>,
}

/// One request of a claim: alternatives tried in order (one for `exactly`, several for
/// `firstAvailable`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DeviceRequest {
    pub name: String,
    pub alternatives: Vec<DeviceChoice>,
}

/// Devices a claim already has: where and which (by device name in its pool).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ClaimAllocation {
    pub node: String,
    /// (request name, driver, pool, device) per result.
    pub results: Vec<DeviceResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct DeviceResult {
    pub request: String,
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// One claim a pod uses.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DeviceClaim {
    /// `namespace/name` of the ResourceClaim.
    pub key: String,
    pub requests: Vec<DeviceRequest>,
    /// `constraints[].matchAttribute`: (attribute, requests it binds; empty: all) — the
    /// devices chosen for those requests share one value of it.
    pub match_attributes: Vec<(String, Vec<String>)>,
    /// Set for a claim made for each pod from a ResourceClaimTemplate: the pod's name for
    /// it (`spec.resourceClaims[].name`). Its key is the pod's own claim's once the pod is
    /// named ([`DeviceClaims::name_for_pod`]).
    pub per_pod: Option<String>,
    /// Set once the claim is allocated (by Kestrel for a pod sharing it, by an earlier
    /// leader, or by another scheduler): the pod goes where its devices are.
    pub allocation: Option<ClaimAllocation>,
}

/// Every claim of a pod, in `spec.resourceClaims` order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize)]
pub struct DeviceClaims {
    pub claims: Vec<DeviceClaim>,
}

impl DeviceClaims {
    /// Devices the pod's unallocated claims take at least (what `All` requests take
    /// depends on the node; each counts one).
    pub fn to_allocate(&self) -> u32 {
        self.claims
            .iter()
            .filter(|c| c.allocation.is_none())
            .flat_map(|c| &c.requests)
            .map(|r| {
                r.alternatives
                    .iter()
                    .map(|a| match a.count {
                        DeviceCount::Exact(n) => n,
                        DeviceCount::All => 1,
                    })
                    .min()
                    .unwrap_or(0)
            })
            .sum()
    }

    /// What the claims count against queue quota, per resource, in the quota's units
    /// (`scale(resource)` per device). An allocated claim counts its devices, each under
    /// the class resource of the request (or `firstAvailable` alternative) it serves; an
    /// unallocated one the most each request may take: per resource, its largest
    /// alternative, an `All` request `most_per_node` devices.
    pub fn quota(&self, most_per_node: u32, scale: fn(&str) -> i64) -> Vec<(String, i64)> {
        let mut out: BTreeMap<String, i64> = BTreeMap::new();
        for claim in &self.claims {
            match &claim.allocation {
                Some(allocation) => {
                    for result in &allocation.results {
                        let choice = claim
                            .requests
                            .iter()
                            .flat_map(|r| &r.alternatives)
                            .find(|a| a.name == result.request);
                        if let Some(choice) = choice {
                            *out.entry(choice.quota_resource.clone()).or_default() +=
                                scale(&choice.quota_resource);
                        }
                    }
                }
                None => {
                    for request in &claim.requests {
                        let mut most: BTreeMap<&str, i64> = BTreeMap::new();
                        for a in &request.alternatives {
                            let devices = match a.count {
                                DeviceCount::Exact(n) => n,
                                DeviceCount::All => most_per_node.max(1),
                            };
                            let amount = i64::from(devices) * scale(&a.quota_resource);
                            let e = most.entry(a.quota_resource.as_str()).or_default();
                            *e = (*e).max(amount);
                        }
                        for (resource, amount) in most {
                            *out.entry(resource.to_string()).or_default() += amount;
                        }
                    }
                }
            }
        }
        out.into_iter().collect()
    }

    /// Whether some request may take every matching device of a node (`All`).
    pub fn takes_all(&self) -> bool {
        self.claims
            .iter()
            .flat_map(|c| &c.requests)
            .flat_map(|r| &r.alternatives)
            .any(|a| a.count == DeviceCount::All)
    }

    /// The GPU demand that stands for the claims (packing, the index's buckets):
    /// the devices still to allocate, none when every claim is allocated.
    pub fn gpu_request(&self) -> crate::model::GpuRequest {
        match self.to_allocate() {
            0 => crate::model::GpuRequest::None,
            n => crate::model::GpuRequest::Whole(n),
        }
    }

    /// Keys the claims made from templates for pod `namespace/pod`, as the simulator names
    /// them (`<pod>-<claim>`; a cluster's controller adds a random suffix and says the name
    /// in the pod's status).
    pub fn name_for_pod(&mut self, namespace: &str, pod: &str) {
        for claim in &mut self.claims {
            if let Some(name) = &claim.per_pod {
                claim.key = format!("{namespace}/{pod}-{name}");
            }
        }
    }
}

/// One published device of a node: a GPU (its position in `NodeSpec::gpus`) or one of
/// its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceRef {
    pub position: usize,
    pub partition: Option<u8>,
}

impl DeviceRef {
    pub fn whole(position: usize) -> DeviceRef {
        DeviceRef {
            position,
            partition: None,
        }
    }
}

/// Devices chosen for a pod on one node: per claim, its results (request and device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceChoiceOnNode {
    pub per_claim: Vec<Vec<(String, DeviceRef)>>,
}

impl DeviceChoiceOnNode {
    /// Every device chosen, claim by claim.
    pub fn devices(&self) -> Vec<DeviceRef> {
        self.per_claim.iter().flatten().map(|(_, d)| *d).collect()
    }
}

/// How partitions are chosen among those that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionChoice {
    /// GPUs already partitioned first, then the placement that leaves the largest
    /// partition (then the most) still possible on the GPU: whole GPUs and large profiles
    /// stay free for later requests.
    Packed,
    /// The first that fits, GPU by GPU: the baseline the packing is measured against.
    FirstFit,
}

/// Devices a choice has taken so far: GPUs whole, partitions (a bit each) per GPU.
#[derive(Clone)]
struct Trial {
    whole: Vec<bool>,
    parts: Vec<u64>,
}

impl Trial {
    fn take(&mut self, device: DeviceRef) {
        match device.partition {
            None => self.whole[device.position] = true,
            Some(k) => self.parts[device.position] |= 1 << k,
        }
    }
}

/// Why a node cannot serve a pod's claims, for explanations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimShortfall {
    /// The claim is allocated on another node.
    AllocatedElsewhere { claim: String, node: String },
    /// The claim's allocation names devices the node does not publish.
    AllocationGone { claim: String },
    /// No alternative of the request found enough devices.
    Request {
        claim: String,
        request: String,
        /// Devices that matched (free or not) and how many were free.
        matching: u32,
        free: u32,
        /// The first selector error met, if any.
        error: Option<String>,
        /// A matching partition is taken or blocked on a GPU with room enough for it:
        /// the room is split between the partitions held (MIG fragmentation).
        fragmented: bool,
    },
}

impl fmt::Display for ClaimShortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimShortfall::AllocatedElsewhere { claim, node } => {
                write!(f, "ResourceClaim {claim} is allocated on node {node}")
            }
            ClaimShortfall::AllocationGone { claim } => write!(
                f,
                "ResourceClaim {claim} is allocated to devices the node no longer publishes"
            ),
            ClaimShortfall::Request {
                claim,
                request,
                matching,
                free,
                error,
                fragmented,
            } => {
                write!(
                    f,
                    "ResourceClaim {claim} request {request}: {matching} matching device(s), {free} free"
                )?;
                if *fragmented {
                    write!(f, " (free GPU room split between MIG partitions)")?;
                }
                if let Some(e) = error {
                    write!(f, " (selector error: {e})")?;
                }
                Ok(())
            }
        }
    }
}

impl NodeSpec {
    /// Whether the node's GPUs are published through DRA (then it has no `nvidia.com/gpu`).
    pub fn gpus_are_dra(&self) -> bool {
        self.gpus.iter().any(|g| g.dra.is_some())
    }

    /// The published device `(driver, pool, name)`: a GPU or a partition of one.
    pub fn dra_device(&self, driver: &str, pool: &str, name: &str) -> Option<DeviceRef> {
        let is = |d: &DraDevice| d.driver == driver && d.pool == pool && d.name == name;
        self.gpus.iter().enumerate().find_map(|(p, g)| {
            let dra = g.dra.as_ref()?;
            if is(dra) {
                return Some(DeviceRef::whole(p));
            }
            let k = dra
                .partitions
                .as_ref()?
                .devices
                .iter()
                .position(|x| is(&x.device))?;
            Some(DeviceRef {
                position: p,
                partition: Some(k as u8),
            })
        })
    }

    /// The published device behind `device`.
    pub fn dra_of(&self, device: DeviceRef) -> Option<&Arc<DraDevice>> {
        let dra = self.gpus.get(device.position)?.dra.as_ref()?;
        match device.partition {
            None => Some(dra),
            Some(k) => Some(&dra.partitions.as_ref()?.devices.get(k as usize)?.device),
        }
    }

    /// The partitions of the GPU at `position`, if its driver publishes any.
    pub fn partitions_of(&self, position: usize) -> Option<&Partitions> {
        self.gpus.get(position)?.dra.as_ref()?.partitions.as_deref()
    }

    /// Whether some GPU of the node is published with partitions.
    pub fn has_partitions(&self) -> bool {
        (0..self.gpus.len()).any(|p| self.partitions_of(p).is_some())
    }

    /// The assignment that holds `devices`: GPUs whole, or partitions; `None` for a mix,
    /// which Kestrel does not give one pod.
    pub fn assignment_of(&self, devices: &[DeviceRef]) -> Option<GpuAssignment> {
        let (whole, parts): (Vec<&DeviceRef>, Vec<&DeviceRef>) =
            devices.iter().partition(|d| d.partition.is_none());
        match (whole.is_empty(), parts.is_empty()) {
            (true, true) => Some(GpuAssignment::None),
            (false, true) => {
                let mut indices: Vec<u32> =
                    whole.iter().map(|d| self.gpus[d.position].index).collect();
                indices.sort_unstable();
                indices.dedup();
                Some(GpuAssignment::Whole(indices))
            }
            (true, false) => {
                let mut refs: Vec<PartitionRef> = parts
                    .iter()
                    .map(|d| {
                        let k = d.partition.expect("a partition");
                        let milli = self
                            .partitions_of(d.position)
                            .map_or(1, |ps| ps.devices[k as usize].milli);
                        PartitionRef {
                            index: self.gpus[d.position].index,
                            partition: k,
                            milli,
                        }
                    })
                    .collect();
                refs.sort_unstable();
                refs.dedup();
                Some(GpuAssignment::Partitions(refs))
            }
            (false, false) => None,
        }
    }

    /// The assignment that holds the devices an allocation names (`None` when the node
    /// does not publish one of them). A mix of whole GPUs and partitions, which another
    /// scheduler may write, holds the partitions' GPUs whole: never less than is taken.
    pub fn allocation_assignment(&self, results: &[DeviceResult]) -> Option<GpuAssignment> {
        let devices = results
            .iter()
            .map(|r| self.dra_device(&r.driver, &r.pool, &r.device))
            .collect::<Option<Vec<DeviceRef>>>()?;
        self.assignment_of(&devices).or_else(|| {
            let whole: Vec<DeviceRef> = devices
                .iter()
                .map(|d| DeviceRef::whole(d.position))
                .collect();
            self.assignment_of(&whole)
        })
    }
}

pub(crate) fn tolerates_all(device: &GpuDevice, tolerations: &[crate::model::Toleration]) -> bool {
    device
        .dra
        .as_ref()
        .is_none_or(|d| tolerates(d, tolerations))
}

fn tolerates(device: &DraDevice, tolerations: &[crate::model::Toleration]) -> bool {
    device.taints.iter().all(|taint| {
        taint.effect == crate::model::TaintEffect::PreferNoSchedule
            || tolerations.iter().any(|t| t.tolerates(taint))
    })
}

impl NodeState {
    /// Devices for all of a pod's claims on this node now, or why not. Allocated claims
    /// keep their devices (the node must be theirs); the others take free devices their
    /// filters accept: for each request the first alternative that fits, from the NUMA
    /// node (then NVLink island) with the fewest free matching devices that holds them
    /// all, so that emptier ones stay whole for bigger claims; devices bound by a
    /// `matchAttribute` share its value. Partitions are chosen as
    /// [`PartitionChoice::Packed`] chooses them.
    pub fn choose_devices(
        &self,
        claims: &DeviceClaims,
    ) -> Result<DeviceChoiceOnNode, ClaimShortfall> {
        self.choose_devices_in(claims, None, PartitionChoice::Packed)
    }

    /// [`NodeState::choose_devices`] among the given devices only (which request of which
    /// claim each device of a binding serves), partitions chosen by `how`.
    pub fn choose_devices_in(
        &self,
        claims: &DeviceClaims,
        only: Option<&BTreeSet<DeviceRef>>,
        how: PartitionChoice,
    ) -> Result<DeviceChoiceOnNode, ClaimShortfall> {
        // By position: a node's devices are few, and this runs for every node a placement
        // looks at.
        let mut trial = Trial {
            whole: vec![false; self.spec.gpus.len()],
            parts: vec![0; self.spec.gpus.len()],
        };
        let mut per_claim = Vec::with_capacity(claims.claims.len());
        for claim in &claims.claims {
            if let Some(allocation) = &claim.allocation {
                if allocation.node != self.spec.name {
                    return Err(ClaimShortfall::AllocatedElsewhere {
                        claim: claim.key.clone(),
                        node: allocation.node.clone(),
                    });
                }
                let mut results = Vec::new();
                for r in &allocation.results {
                    let d = self
                        .spec
                        .dra_device(&r.driver, &r.pool, &r.device)
                        .ok_or_else(|| ClaimShortfall::AllocationGone {
                            claim: claim.key.clone(),
                        })?;
                    trial.take(d);
                    results.push((r.request.clone(), d));
                }
                per_claim.push(results);
                continue;
            }
            per_claim.push(self.choose_claim(claim, only, how, &mut trial)?);
        }
        let choice = DeviceChoiceOnNode { per_claim };
        let all = choice.devices();
        if all.iter().any(|d| d.partition.is_some()) && all.iter().any(|d| d.partition.is_none()) {
            let claim = claims
                .claims
                .first()
                .map(|c| c.key.clone())
                .unwrap_or_default();
            return Err(ClaimShortfall::Request {
                claim,
                request: String::new(),
                matching: 0,
                free: 0,
                fragmented: false,
                error: Some(
                    "Kestrel gives one pod whole GPUs or GPU partitions, not both: split the \
                     claims over two pods"
                        .to_string(),
                ),
            });
        }
        Ok(choice)
    }

    fn choose_claim(
        &self,
        claim: &DeviceClaim,
        only: Option<&BTreeSet<DeviceRef>>,
        how: PartitionChoice,
        trial: &mut Trial,
    ) -> Result<Vec<(String, DeviceRef)>, ClaimShortfall> {
        // Attributes that bind requests: each value of the first such attribute is tried
        // in turn (fullest group first), the others checked on the result.
        let bound: Vec<&(String, Vec<String>)> = claim.match_attributes.iter().collect();
        if bound.is_empty() {
            // One try: a failure fails the whole choice, so what it took is dropped anyway.
            return self.choose_requests(claim, &bound, None, only, how, trial);
        }
        let groups: Vec<Option<&DeviceAttribute>> = match bound.first() {
            None => vec![None],
            Some((attribute, _)) => {
                let mut values: Vec<&DeviceAttribute> = self
                    .devices()
                    .filter_map(|(_, d)| d.attributes.get(attribute))
                    .collect();
                values.sort();
                values.dedup();
                values.into_iter().map(Some).collect()
            }
        };
        let mut last_err = None;
        for group in &groups {
            let mut attempt = trial.clone();
            match self.choose_requests(claim, &bound, *group, only, how, &mut attempt) {
                Ok(results) => {
                    *trial = attempt;
                    return Ok(results);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| ClaimShortfall::Request {
            claim: claim.key.clone(),
            request: claim
                .requests
                .first()
                .map(|r| r.name.clone())
                .unwrap_or_default(),
            matching: 0,
            free: 0,
            error: None,
            fragmented: false,
        }))
    }

    /// Every published device of the node: each GPU, then its partitions.
    fn devices(&self) -> impl Iterator<Item = (DeviceRef, &Arc<DraDevice>)> {
        self.spec.gpus.iter().enumerate().flat_map(|(p, g)| {
            let whole = g.dra.as_ref().map(|d| (DeviceRef::whole(p), d));
            let parts = g
                .dra
                .iter()
                .flat_map(|d| d.partitions.iter())
                .flat_map(move |ps| {
                    ps.devices.iter().enumerate().map(move |(k, x)| {
                        let r = DeviceRef {
                            position: p,
                            partition: Some(k as u8),
                        };
                        (r, &x.device)
                    })
                });
            whole.into_iter().chain(parts)
        })
    }

    /// Whether `device` is free now, beside what `trial` has taken.
    fn is_free(&self, device: DeviceRef, trial: &Trial) -> bool {
        let p = device.position;
        if trial.whole[p] || self.gpus[p].held_whole {
            return false;
        }
        match device.partition {
            None => trial.parts[p] == 0 && self.gpus[p].free_milli == 1000,
            Some(k) => self.spec.partitions_of(p).is_some_and(|ps| {
                ps.fits(self.gpus[p].partitions_taken() | trial.parts[p], k as usize)
            }),
        }
    }

    fn choose_requests(
        &self,
        claim: &DeviceClaim,
        bound: &[&(String, Vec<String>)],
        group: Option<&DeviceAttribute>,
        only: Option<&BTreeSet<DeviceRef>>,
        how: PartitionChoice,
        trial: &mut Trial,
    ) -> Result<Vec<(String, DeviceRef)>, ClaimShortfall> {
        let mut results = Vec::new();
        for request in &claim.requests {
            // The attributes that bind this request's devices.
            let binds: Vec<&str> = bound
                .iter()
                .filter(|(_, requests)| requests.is_empty() || requests.contains(&request.name))
                .map(|(attribute, _)| attribute.as_str())
                .collect();
            let mut shortfall = None;
            let mut chosen = None;
            for choice in &request.alternatives {
                // Which devices the alternative may take: with `free_only`, free ones alone
                // (devices taken need not be judged); else all, for the count of matching
                // ones an `All` request and a shortfall need.
                let scan = |free_only: bool| {
                    let mut matching = 0u32;
                    let mut free = Vec::new();
                    let mut error = None;
                    let mut fragmented = false;
                    for (r, dra) in self.devices() {
                        let is_free = only.is_none_or(|o| o.contains(&r)) && self.is_free(r, trial);
                        if free_only && !is_free {
                            continue;
                        }
                        match choice.filter.0.accepts(dra) {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(e) => {
                                error.get_or_insert(e);
                                continue;
                            }
                        }
                        if !tolerates(dra, &choice.tolerations) {
                            continue;
                        }
                        let in_group = binds.iter().enumerate().all(|(i, attribute)| {
                            let value = dra.attributes.get(*attribute);
                            match (i, group) {
                                (0, Some(g)) => value == Some(g),
                                _ => value.is_some(),
                            }
                        });
                        if !in_group {
                            continue;
                        }
                        matching += 1;
                        if is_free {
                            free.push(r);
                        } else if let Some(k) = r.partition {
                            let gpu = &self.gpus[r.position];
                            let milli = self
                                .spec
                                .partitions_of(r.position)
                                .map_or(u32::MAX, |ps| ps.devices[k as usize].milli);
                            fragmented |= !gpu.held_whole && gpu.free_milli >= milli;
                        }
                    }
                    (matching, free, error, fragmented)
                };
                if let DeviceCount::Exact(n) = choice.count {
                    let (_, free, _, _) = scan(true);
                    if let Some(picked) = self.pick(free, n as usize, how, trial) {
                        chosen = Some((choice.name.clone(), picked));
                        break;
                    }
                }
                let (matching, free, error, fragmented) = scan(false);
                // `All` takes every matching GPU, whole: partitions of one GPU exclude
                // each other, so "all of them" means nothing for them.
                let whole_only: Vec<DeviceRef> = free
                    .iter()
                    .copied()
                    .filter(|d| d.partition.is_none())
                    .collect();
                let picked = match choice.count {
                    DeviceCount::Exact(n) => self.pick(free.clone(), n as usize, how, trial),
                    DeviceCount::All if matching > 0 && whole_only.len() == matching as usize => {
                        self.pick(whole_only, matching as usize, how, trial)
                    }
                    DeviceCount::All => None,
                };
                if let Some(picked) = picked {
                    chosen = Some((choice.name.clone(), picked));
                    break;
                }
                shortfall.get_or_insert(ClaimShortfall::Request {
                    claim: claim.key.clone(),
                    request: request.name.clone(),
                    matching,
                    free: free.len() as u32,
                    error,
                    fragmented,
                });
            }
            let Some((name, devices)) = chosen else {
                return Err(shortfall.expect("a request has an alternative"));
            };
            for d in devices {
                trial.take(d);
                results.push((name.clone(), d));
            }
        }
        // The other bound attributes: one value across their requests.
        for (attribute, requests) in bound.iter().skip(1) {
            let mut values = results
                .iter()
                .filter(|(r, _)| {
                    let base = r.split('/').next().unwrap_or(r);
                    requests.is_empty() || requests.iter().any(|q| q == base)
                })
                .map(|(_, d)| {
                    self.spec
                        .dra_of(*d)
                        .and_then(|d| d.attributes.get(attribute))
                });
            if let Some(first) = values.next() {
                if values.any(|v| v != first) {
                    return Err(ClaimShortfall::Request {
                        claim: claim.key.clone(),
                        request: claim.requests[0].name.clone(),
                        matching: 0,
                        free: 0,
                        fragmented: false,
                        error: Some(format!("no devices share one value of {attribute}")),
                    });
                }
            }
        }
        Ok(results)
    }

    /// `need` of the `free` devices, or `None` when they cannot hold that many together:
    /// partitions when enough of them fit together (they are smaller), chosen by `how`;
    /// else whole GPUs, aligned ([`NodeState::aligned`]).
    fn pick(
        &self,
        free: Vec<DeviceRef>,
        need: usize,
        how: PartitionChoice,
        trial: &Trial,
    ) -> Option<Vec<DeviceRef>> {
        let (whole, parts): (Vec<DeviceRef>, Vec<DeviceRef>) =
            free.into_iter().partition(|d| d.partition.is_none());
        if !parts.is_empty() {
            let mut attempt = trial.clone();
            let mut picked = Vec::with_capacity(need);
            while picked.len() < need {
                let candidates = parts.iter().filter(|d| self.is_free(**d, &attempt));
                let next = match how {
                    PartitionChoice::FirstFit => candidates.min().copied(),
                    PartitionChoice::Packed => candidates
                        .min_by_key(|d| self.partition_cost(**d, &attempt))
                        .copied(),
                };
                let Some(next) = next else { break };
                attempt.take(next);
                picked.push(next);
            }
            if picked.len() == need {
                return Some(picked);
            }
        }
        (whole.len() >= need).then(|| {
            let positions = whole.iter().map(|d| d.position).collect();
            self.aligned(positions, need)
                .into_iter()
                .map(DeviceRef::whole)
                .collect()
        })
    }

    /// What taking partition `device` costs, least first: a GPU no partition of which is
    /// taken yet last (it stays whole), then what the GPU loses of what it could still
    /// hold (its largest partition that fits, then all that fit): a small partition goes
    /// into a hole no larger one could use before it cuts into room a large one needs.
    fn partition_cost(&self, device: DeviceRef, trial: &Trial) -> (bool, i64, i64, DeviceRef) {
        let p = device.position;
        let Some(ps) = self.spec.partitions_of(p) else {
            return (true, 0, 0, device);
        };
        let before = self.gpus[p].partitions_taken() | trial.parts[p];
        let after = before | 1 << device.partition.unwrap_or(0);
        let room = |taken: u64| {
            let (mut largest, mut total) = (0i64, 0i64);
            for (k, part) in ps.devices.iter().enumerate() {
                if ps.fits(taken, k) {
                    largest = largest.max(i64::from(part.milli));
                    total += i64::from(part.milli);
                }
            }
            (largest, total)
        };
        let (largest_before, total_before) = room(before);
        let (largest_after, total_after) = room(after);
        (
            before == 0,
            largest_before - largest_after,
            total_before - total_after,
            device,
        )
    }

    /// `need` of the free positions, from the NUMA node (then NVLink island) with the
    /// fewest that holds them all, else the first ones.
    fn aligned(&self, mut free: Vec<usize>, need: usize) -> Vec<usize> {
        // The group (by `key`) with the fewest free positions that still holds `need`,
        // lowest key first among equals.
        let group_of = |free: &[usize], key: &dyn Fn(&GpuDevice) -> Option<u32>| {
            let mut best: Option<(usize, u32)> = None;
            for (i, &p) in free.iter().enumerate() {
                let Some(k) = key(&self.spec.gpus[p]) else {
                    continue;
                };
                // Counted once per group, at its first position.
                if free[..i]
                    .iter()
                    .any(|&q| key(&self.spec.gpus[q]) == Some(k))
                {
                    continue;
                }
                let len = free[i..]
                    .iter()
                    .filter(|&&q| key(&self.spec.gpus[q]) == Some(k))
                    .count();
                if len >= need && best.is_none_or(|(l, bk)| (len, k) < (l, bk)) {
                    best = Some((len, k));
                }
            }
            best.map(|(_, k)| k)
        };
        let numa = |g: &GpuDevice| Some(g.numa_node);
        let island = |g: &GpuDevice| g.nvlink_island;
        if let Some(k) = group_of(&free, &numa) {
            free.retain(|&p| numa(&self.spec.gpus[p]) == Some(k));
        } else if let Some(k) = group_of(&free, &island) {
            free.retain(|&p| island(&self.spec.gpus[p]) == Some(k));
        }
        free.truncate(need);
        free
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{TaintEffect, Toleration, TolerationOperator};
    use crate::resources::Resources;
    use crate::topology::GpuTopology;

    /// Accepts devices whose `model` attribute is one of the given ones.
    #[derive(Debug)]
    struct Model(Vec<&'static str>, String);

    impl DeviceFilter for Model {
        fn accepts(&self, device: &Arc<DraDevice>) -> Result<bool, String> {
            match device.attributes.get("x/model") {
                Some(DeviceAttribute::String(m)) => Ok(self.0.contains(&m.as_str())),
                _ => Err("no such key: model".to_string()),
            }
        }
        fn key(&self) -> &str {
            &self.1
        }
    }

    fn filter(models: &[&'static str]) -> Filter {
        Filter(Arc::new(Model(models.to_vec(), format!("{models:?}"))))
    }

    /// The GPUs a choice takes whole, by position, ascending.
    fn positions(choice: &DeviceChoiceOnNode) -> Vec<usize> {
        let mut out: Vec<usize> = choice
            .devices()
            .iter()
            .filter(|d| d.partition.is_none())
            .map(|d| d.position)
            .collect();
        out.sort_unstable();
        out
    }

    /// A device of driver `x`, pool `n`, untainted and unpartitioned.
    fn test_device(name: String, attributes: BTreeMap<String, DeviceAttribute>) -> DraDevice {
        DraDevice {
            driver: "x".into(),
            pool: "n".into(),
            name,
            attributes,
            capacity: BTreeMap::new(),
            taints: Vec::new(),
            partitions: None,
        }
    }

    /// A DGX-shaped node whose GPUs `0..8` are published, GPU i of model `models[i]` and
    /// switch attribute `i / 4`.
    fn node(models: [&str; 8]) -> NodeState {
        let mut spec = NodeSpec::new("n", Resources::new(64_000, 512 << 30));
        spec.gpus = GpuTopology::DgxH100.devices("H100", 81_559, 8).0;
        for (i, g) in spec.gpus.iter_mut().enumerate() {
            let mut attributes = BTreeMap::new();
            attributes.insert("x/model".into(), DeviceAttribute::String(models[i].into()));
            attributes.insert("x/switch".into(), DeviceAttribute::Int(i as i64 / 4));
            g.dra = Some(Arc::new(DraDevice {
                taints: if i == 7 {
                    vec![crate::model::Taint {
                        key: "unhealthy".into(),
                        value: String::new(),
                        effect: TaintEffect::NoSchedule,
                    }]
                } else {
                    Vec::new()
                },
                ..test_device(format!("gpu-{i}"), attributes)
            }));
        }
        let mut index = crate::cluster::ClusterIndex::default();
        let id = index.insert(spec, |_: &crate::cluster::ClusterIndex, _: &NodeState| 0);
        index.node(id).clone()
    }

    fn request(name: &str, choices: Vec<(Filter, DeviceCount)>) -> DeviceRequest {
        DeviceRequest {
            name: name.into(),
            alternatives: choices
                .into_iter()
                .enumerate()
                .map(|(i, (filter, count))| DeviceChoice {
                    name: format!("{name}/{i}"),
                    class: "gpu.nvidia.com".into(),
                    quota_resource: crate::resources::GPU_RESOURCE.into(),
                    filter,
                    count,
                    tolerations: Vec::new(),
                })
                .collect(),
        }
    }

    fn claims(
        requests: Vec<DeviceRequest>,
        match_attributes: Vec<(String, Vec<String>)>,
    ) -> DeviceClaims {
        DeviceClaims {
            claims: vec![DeviceClaim {
                key: "ns/c".into(),
                requests,
                match_attributes,
                per_pod: None,
                allocation: None,
            }],
        }
    }

    const MODELS: [&str; 8] = ["a", "a", "a", "b", "b", "b", "b", "b"];

    #[test]
    fn nvidia_gpu_is_served_from_published_gpus_only_where_a_device_class_backs_it() {
        use crate::model::{Demand, GpuRequest, PlacementConstraints};
        let demand = Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::Whole(2),
        };
        let constraints = PlacementConstraints::default();
        let plain = node(MODELS);
        assert!(
            !plain.fits_pod(&demand, &constraints),
            "no nvidia.com/gpu without a class"
        );
        let mut spec = plain.spec.clone();
        spec.gpu_extended_class = Some("gpu.nvidia.com".into());
        let mut index = crate::cluster::ClusterIndex::default();
        let id = index.insert(spec, |_: &crate::cluster::ClusterIndex, _: &NodeState| 0);
        let mut served = index.node(id).clone();
        assert!(served.fits_pod(&demand, &constraints));
        // GPU 7 is tainted NoSchedule: seven whole GPUs for such pods, not eight.
        let whole = |n| Demand {
            resources: Resources::new(1_000, 1 << 30),
            gpu: GpuRequest::Whole(n),
        };
        assert!(served.fits_pod(&whole(7), &constraints));
        assert!(!served.fits_pod(&whole(8), &constraints));
        assert!(!served
            .choose_for_pod(&whole(7), &constraints)
            .indices()
            .contains(&7));
        let gpus = served.choose_for_pod(&demand, &constraints);
        assert_eq!(gpus.indices().len(), 2);
        // Devices taken by the pod are not there for a claim, nor the other way round
        // (GPU 7 is tainted: 5 are left for a claim).
        served.reserve_devices(&gpus, true);
        let all = claims(
            vec![request(
                "r",
                vec![(filter(&["a", "b"]), DeviceCount::Exact(5))],
            )],
            Vec::new(),
        );
        assert!(served.choose_devices(&all).is_ok());
        let one_more = claims(
            vec![request(
                "r",
                vec![(filter(&["a", "b"]), DeviceCount::Exact(6))],
            )],
            Vec::new(),
        );
        assert!(served.choose_devices(&one_more).is_err());
        // The five untainted GPUs the pod did not take, held by a claim: none is left.
        let taken = gpus.indices();
        let rest: Vec<u32> = (0..7).filter(|i| !taken.contains(i)).collect();
        assert_eq!(rest.len(), 5);
        served.reserve_devices(&crate::types::GpuAssignment::Whole(rest), true);
        assert!(!served.fits_pod(&whole(1), &constraints));
    }

    #[test]
    fn quota_counts_the_most_a_pending_claim_may_take_and_exactly_what_it_holds() {
        let scale = |r: &str| if r == "nvidia.com/gpu" { 1000 } else { 1 };
        let mut x = request(
            "x",
            vec![
                (filter(&["a"]), DeviceCount::Exact(2)),
                (filter(&["b"]), DeviceCount::Exact(3)),
            ],
        );
        x.alternatives[1].quota_resource = "small-gpus".into();
        let y = request("y", vec![(filter(&["a"]), DeviceCount::All)]);
        let mut c = claims(vec![x, y], vec![]);
        // Pending: each resource its largest alternative; All the most one node has.
        assert_eq!(
            c.quota(8, scale),
            vec![("nvidia.com/gpu".into(), 10_000), ("small-gpus".into(), 3)]
        );
        // Allocated: the devices each alternative got.
        let result = |request: &str, device: &str| DeviceResult {
            request: request.into(),
            driver: "x".into(),
            pool: "n".into(),
            device: device.into(),
        };
        c.claims[0].allocation = Some(ClaimAllocation {
            node: "n".into(),
            results: vec![
                result("x/1", "3"),
                result("x/1", "4"),
                result("x/1", "5"),
                result("y/0", "0"),
            ],
        });
        assert_eq!(
            c.quota(8, scale),
            vec![("nvidia.com/gpu".into(), 1000), ("small-gpus".into(), 3)]
        );
    }

    #[test]
    fn requests_take_matching_free_devices_aligned_and_never_twice() {
        let n = node(MODELS);
        let c = claims(
            vec![
                request("x", vec![(filter(&["a"]), DeviceCount::Exact(2))]),
                request("y", vec![(filter(&["a", "b"]), DeviceCount::Exact(3))]),
            ],
            vec![],
        );
        let choice = n.choose_devices(&c).unwrap();
        assert_eq!(positions(&choice).len(), 5);
        let x: Vec<usize> = choice.per_claim[0]
            .iter()
            .filter(|(r, _)| r == "x/0")
            .map(|(_, d)| d.position)
            .collect();
        assert!(x.iter().all(|&p| p < 3), "{x:?}");
        // Tainted gpu-7 is never taken untolerated: 7 usable devices, not 8.
        let c = claims(
            vec![request(
                "all",
                vec![(filter(&["a", "b"]), DeviceCount::Exact(8))],
            )],
            vec![],
        );
        assert!(matches!(
            n.choose_devices(&c),
            Err(ClaimShortfall::Request {
                matching: 7,
                free: 7,
                ..
            })
        ));
        let mut tolerant = c.clone();
        tolerant.claims[0].requests[0].alternatives[0].tolerations = vec![Toleration {
            key: "unhealthy".into(),
            operator: TolerationOperator::Exists,
            value: String::new(),
            effect: None,
        }];
        assert_eq!(positions(&n.choose_devices(&tolerant).unwrap()).len(), 8);
    }

    #[test]
    fn first_available_falls_back_and_all_takes_every_match() {
        let n = node(MODELS);
        let c = claims(
            vec![request(
                "r",
                vec![
                    (filter(&["a"]), DeviceCount::Exact(4)),
                    (filter(&["b"]), DeviceCount::Exact(4)),
                ],
            )],
            vec![],
        );
        let choice = n.choose_devices(&c).unwrap();
        assert!(choice.per_claim[0]
            .iter()
            .all(|(r, p)| r == "r/1" && p.position >= 3));
        let all = claims(
            vec![request("r", vec![(filter(&["a"]), DeviceCount::All)])],
            vec![],
        );
        assert_eq!(positions(&n.choose_devices(&all).unwrap()), vec![0, 1, 2]);
        let none = claims(
            vec![request("r", vec![(filter(&["z"]), DeviceCount::All)])],
            vec![],
        );
        assert!(
            n.choose_devices(&none).is_err(),
            "All needs at least one device"
        );
    }

    #[test]
    fn match_attribute_keeps_a_claims_devices_on_one_value() {
        let n = node(MODELS);
        // 3 devices sharing a switch: only switch 1 (gpu-4..6 usable) or switch 0 holds 3.
        let c = claims(
            vec![request(
                "r",
                vec![(filter(&["a", "b"]), DeviceCount::Exact(4))],
            )],
            vec![("x/switch".into(), vec![])],
        );
        let choice = n.choose_devices(&c).unwrap();
        assert_eq!(
            positions(&choice),
            vec![0, 1, 2, 3],
            "switch 1 has only 3 untainted"
        );
        let five = claims(
            vec![request(
                "r",
                vec![(filter(&["a", "b"]), DeviceCount::Exact(5))],
            )],
            vec![("x/switch".into(), vec![])],
        );
        assert!(n.choose_devices(&five).is_err());
    }

    #[test]
    fn a_selector_error_is_reported_not_panicked() {
        let mut n = node(MODELS);
        let mut spec = n.spec.clone();
        for g in &mut spec.gpus {
            let mut d = (**g.dra.as_ref().unwrap()).clone();
            d.attributes.remove("x/model");
            g.dra = Some(Arc::new(d));
        }
        n.spec = spec;
        let c = claims(
            vec![request("r", vec![(filter(&["a"]), DeviceCount::Exact(1))])],
            vec![],
        );
        match n.choose_devices(&c) {
            Err(ClaimShortfall::Request {
                matching: 0,
                error: Some(e),
                ..
            }) => {
                assert!(e.contains("no such key"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// A GPU's partitions as MIG lays them out on an 8-memory-slice GPU: `1g` at slices
    /// 0..7, `2g` at 0, 2, 4, `3g` at 0 and 4, `7g` over all; each consumes the slices it
    /// covers (`x/model` is its profile).
    fn mig_partitions(gpu: usize) -> Partitions {
        let mut devices = Vec::new();
        for (profile, starts, width) in [
            ("1g", vec![0, 1, 2, 3, 4, 5, 6], 1),
            ("2g", vec![0, 2, 4], 2),
            ("3g", vec![0, 4], 4),
            ("7g", vec![0], 8),
        ] {
            for start in starts {
                let consumes: BTreeMap<String, i64> = (start..start + width)
                    .map(|s| (format!("slice{s}"), 1))
                    .collect();
                let mut attributes = BTreeMap::new();
                attributes.insert("x/model".into(), DeviceAttribute::String(profile.into()));
                devices.push(Partition {
                    device: Arc::new(test_device(
                        format!("gpu-{gpu}-{profile}-{start}"),
                        attributes,
                    )),
                    milli: width as u32 * 125,
                    consumes,
                });
            }
        }
        Partitions {
            counter_set: format!("gpu-{gpu}-counters"),
            capacity: (0..8).map(|s| (format!("slice{s}"), 1)).collect(),
            devices,
        }
    }

    /// Two published GPUs (`x/model` "a"), each with [`mig_partitions`].
    fn mig_node() -> NodeState {
        let mut spec = NodeSpec::new("n", Resources::new(64_000, 512 << 30));
        spec.gpus = GpuTopology::DgxH100.devices("H100", 81_559, 8).0;
        spec.gpus.truncate(2);
        for (i, g) in spec.gpus.iter_mut().enumerate() {
            let mut attributes = BTreeMap::new();
            attributes.insert("x/model".into(), DeviceAttribute::String("a".into()));
            g.dra = Some(Arc::new(DraDevice {
                partitions: Some(Arc::new(mig_partitions(i))),
                ..test_device(format!("gpu-{i}"), attributes)
            }));
        }
        let mut index = crate::cluster::ClusterIndex::default();
        let id = index.insert(spec, |_: &crate::cluster::ClusterIndex, _: &NodeState| 0);
        index.node(id).clone()
    }

    fn one(model: &'static str) -> DeviceClaims {
        claims(
            vec![request(
                "r",
                vec![(filter(&[model]), DeviceCount::Exact(1))],
            )],
            vec![],
        )
    }

    fn assert_counters_hold(n: &NodeState) {
        for p in 0..n.spec.gpus.len() {
            let ps = n.spec.partitions_of(p).unwrap();
            let taken = n.gpus[p].partitions_taken();
            assert_eq!(ps.over_committed(taken), None, "GPU {p}");
            assert!(
                taken == 0 || !n.gpus[p].held_whole,
                "GPU {p} held whole and in partitions"
            );
        }
    }

    #[test]
    fn partitions_and_the_whole_gpu_exclude_each_other() {
        let mut n = mig_node();
        let part = n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
        let GpuAssignment::Partitions(refs) = &part else {
            panic!("{part:?}")
        };
        assert_eq!(refs.len(), 1);
        let used = refs[0].index;
        // The partitioned GPU is not free whole; the other one is.
        let whole = n.take_devices(&one("a"), PartitionChoice::Packed).unwrap();
        assert_eq!(whole.indices(), vec![1 - used]);
        assert!(n.take_devices(&one("a"), PartitionChoice::Packed).is_none());
        // A 7g covers every slice: neither GPU has room for it now.
        assert!(n
            .take_devices(&one("7g"), PartitionChoice::Packed)
            .is_none());
        n.give_back_devices(&part);
        assert_eq!(n.gpus[used as usize].free_milli, 1000);
        assert!(n
            .take_devices(&one("7g"), PartitionChoice::Packed)
            .is_some());
        assert_counters_hold(&n);
    }

    #[test]
    fn packed_partitions_fill_a_partitioned_gpu_and_keep_large_profiles_possible() {
        let mut n = mig_node();
        // Seven 1g partitions all go to one GPU: the other stays whole.
        for _ in 0..7 {
            n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
        }
        assert_eq!(n.free_whole_gpus(), 1);
        assert_counters_hold(&n);
        // One 1g then two 3g: packed, the 1g leaves a 3g possible beside it, so the two
        // 3g fit on the GPUs with one whole GPU's worth... first-fit's 1g at slice 0
        // leaves one 3g on that GPU too; both then fit. A 1g, a 3g, then a 7g: the 7g
        // needs a GPU no partition touches, which packing keeps.
        for how in [PartitionChoice::Packed, PartitionChoice::FirstFit] {
            let mut n = mig_node();
            n.take_devices(&one("1g"), how).unwrap();
            n.take_devices(&one("3g"), how).unwrap();
            assert!(n.take_devices(&one("7g"), how).is_some(), "{how:?}");
            assert_counters_hold(&n);
        }
        // A 2g after a 1g: packed keeps the 3g beside them possible on the same GPU.
        let mut n = mig_node();
        n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
        n.take_devices(&one("2g"), PartitionChoice::Packed).unwrap();
        n.take_devices(&one("3g"), PartitionChoice::Packed).unwrap();
        assert_eq!(n.free_whole_gpus(), 1, "1g + 2g + 3g share one GPU");
        // First-fit puts the 1g at slice 0 and the 2g at slices 2-3: the 3g then needs
        // slices 4-7 and still fits; what differs is measured by `kestrel bench mig`.
        assert_counters_hold(&n);
    }

    #[test]
    fn random_partition_requests_never_over_commit_counters() {
        let profiles = ["1g", "2g", "3g", "7g", "a"];
        for how in [PartitionChoice::Packed, PartitionChoice::FirstFit] {
            let mut rng = crate::Rng::new(7);
            for _ in 0..200 {
                let mut n = mig_node();
                let mut held = Vec::new();
                for _ in 0..24 {
                    if !held.is_empty() && rng.below(3) == 0 {
                        let gpus: GpuAssignment =
                            held.swap_remove(rng.below(held.len() as u64) as usize);
                        n.give_back_devices(&gpus);
                    } else {
                        let profile = profiles[rng.below(profiles.len() as u64) as usize];
                        if let Some(gpus) = n.take_devices(&one(profile), how) {
                            held.push(gpus);
                        }
                    }
                    assert_counters_hold(&n);
                }
                for gpus in held.drain(..) {
                    n.give_back_devices(&gpus);
                }
                assert_eq!(n.free_whole_gpus(), 2, "everything given back");
            }
        }
    }

    #[test]
    fn allocations_name_partitions_and_a_mix_holds_whole_gpus() {
        let n = mig_node();
        let result = |device: &str| DeviceResult {
            request: "r".into(),
            driver: "x".into(),
            pool: "n".into(),
            device: device.into(),
        };
        let parts = n
            .spec
            .allocation_assignment(&[result("gpu-1-3g-4"), result("gpu-1-1g-0")])
            .unwrap();
        match parts {
            GpuAssignment::Partitions(refs) => {
                assert_eq!(refs.len(), 2);
                assert!(refs.iter().all(|r| r.index == 1));
                assert_eq!(refs.iter().map(|r| r.milli).sum::<u32>(), 625);
            }
            other => panic!("{other:?}"),
        }
        let mixed = n
            .spec
            .allocation_assignment(&[result("gpu-0"), result("gpu-1-1g-0")])
            .unwrap();
        assert_eq!(mixed, GpuAssignment::Whole(vec![0, 1]));
        assert_eq!(n.spec.allocation_assignment(&[result("gpu-9")]), None);
    }

    #[test]
    fn a_partition_blocked_by_split_room_is_named_mig_fragmentation() {
        let mut n = mig_node();
        // 1g instances at slices 1 and 5 of both GPUs: three quarters of each GPU free,
        // yet neither 3g placement (slices 0-3, 4-7) is whole.
        for gpu in 0..2 {
            let parts = n.spec.partitions_of(gpu).unwrap().clone();
            let at = |name: &str| {
                let k = parts
                    .devices
                    .iter()
                    .position(|p| p.device.name == format!("gpu-{gpu}-{name}"))
                    .unwrap() as u8;
                PartitionRef {
                    index: gpu as u32,
                    partition: k,
                    milli: 125,
                }
            };
            n.reserve_devices(
                &GpuAssignment::Partitions(vec![at("1g-1"), at("1g-5")]),
                true,
            );
        }
        let short = n.choose_devices(&one("3g")).unwrap_err();
        assert!(
            matches!(
                short,
                ClaimShortfall::Request {
                    fragmented: true,
                    free: 0,
                    ..
                }
            ),
            "{short:?}"
        );
        assert!(
            short.to_string().contains("split between MIG partitions"),
            "{short}"
        );
        // A 7g never fits beside a partition: no GPU has the room, nothing is split.
        let mut n = mig_node();
        n.take_devices(&one("a"), PartitionChoice::Packed).unwrap();
        n.take_devices(&one("1g"), PartitionChoice::Packed).unwrap();
        let short = n.choose_devices(&one("7g")).unwrap_err();
        assert!(
            matches!(
                short,
                ClaimShortfall::Request {
                    fragmented: false,
                    ..
                }
            ),
            "{short:?}"
        );
    }
}
