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

/// Devices chosen for a pod on one node: per claim, its results (request and device
/// position in `NodeSpec::gpus`), and all positions together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceChoiceOnNode {
    pub per_claim: Vec<Vec<(String, usize)>>,
    pub positions: Vec<usize>,
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
            } => {
                write!(
                    f,
                    "ResourceClaim {claim} request {request}: {matching} matching device(s), {free} free"
                )?;
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

    /// The position of the published device `(driver, pool, name)`.
    pub fn dra_position(&self, driver: &str, pool: &str, name: &str) -> Option<usize> {
        self.gpus.iter().position(|g| {
            g.dra
                .as_ref()
                .is_some_and(|d| d.driver == driver && d.pool == pool && d.name == name)
        })
    }
}

pub(crate) fn tolerates_all(device: &GpuDevice, tolerations: &[crate::model::Toleration]) -> bool {
    device.dra.as_ref().is_none_or(|d| {
        d.taints.iter().all(|taint| {
            taint.effect == crate::model::TaintEffect::PreferNoSchedule
                || tolerations.iter().any(|t| t.tolerates(taint))
        })
    })
}

impl NodeState {
    /// Devices for all of a pod's claims on this node now, or why not. Allocated claims
    /// keep their devices (the node must be theirs); the others take free devices their
    /// filters accept: for each request the first alternative that fits, from the NUMA
    /// node (then NVLink island) with the fewest free matching devices that holds them
    /// all, so that emptier ones stay whole for bigger claims; devices bound by a
    /// `matchAttribute` share its value.
    pub fn choose_devices(
        &self,
        claims: &DeviceClaims,
    ) -> Result<DeviceChoiceOnNode, ClaimShortfall> {
        self.choose_devices_in(claims, None)
    }

    /// [`NodeState::choose_devices`] among the given positions only: which request of
    /// which claim each device of a binding serves.
    pub fn choose_devices_in(
        &self,
        claims: &DeviceClaims,
        only: Option<&BTreeSet<usize>>,
    ) -> Result<DeviceChoiceOnNode, ClaimShortfall> {
        // By position: a node's devices are few, and this runs for every node a placement
        // looks at.
        let mut taken = vec![false; self.spec.gpus.len()];
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
                    let p = self
                        .spec
                        .dra_position(&r.driver, &r.pool, &r.device)
                        .ok_or_else(|| ClaimShortfall::AllocationGone {
                            claim: claim.key.clone(),
                        })?;
                    taken[p] = true;
                    results.push((r.request.clone(), p));
                }
                per_claim.push(results);
                continue;
            }
            per_claim.push(self.choose_claim(claim, only, &mut taken)?);
        }
        Ok(DeviceChoiceOnNode {
            per_claim,
            positions: (0..taken.len()).filter(|&p| taken[p]).collect(),
        })
    }

    fn choose_claim(
        &self,
        claim: &DeviceClaim,
        only: Option<&BTreeSet<usize>>,
        taken: &mut Vec<bool>,
    ) -> Result<Vec<(String, usize)>, ClaimShortfall> {
        // Attributes that bind requests: each value of the first such attribute is tried
        // in turn (fullest group first), the others checked on the result.
        let bound: Vec<&(String, Vec<String>)> = claim.match_attributes.iter().collect();
        if bound.is_empty() {
            // One try: a failure fails the whole choice, so what it took is dropped anyway.
            return self.choose_requests(claim, &bound, None, only, taken);
        }
        let groups: Vec<Option<&DeviceAttribute>> = match bound.first() {
            None => vec![None],
            Some((attribute, _)) => {
                let mut values: Vec<&DeviceAttribute> = self
                    .spec
                    .gpus
                    .iter()
                    .filter_map(|g| g.dra.as_ref()?.attributes.get(attribute))
                    .collect();
                values.sort();
                values.dedup();
                values.into_iter().map(Some).collect()
            }
        };
        let mut last_err = None;
        for group in &groups {
            let mut trial = taken.clone();
            match self.choose_requests(claim, &bound, *group, only, &mut trial) {
                Ok(results) => {
                    *taken = trial;
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
        }))
    }

    fn choose_requests(
        &self,
        claim: &DeviceClaim,
        bound: &[&(String, Vec<String>)],
        group: Option<&DeviceAttribute>,
        only: Option<&BTreeSet<usize>>,
        taken: &mut [bool],
    ) -> Result<Vec<(String, usize)>, ClaimShortfall> {
        let mut results = Vec::new();
        for request in &claim.requests {
            // The attribute value this request's devices must have, if it is bound.
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
                    for (p, device) in self.spec.gpus.iter().enumerate() {
                        let Some(dra) = &device.dra else { continue };
                        let is_free = only.is_none_or(|o| o.contains(&p))
                            && !taken[p]
                            && self.gpus[p].free_milli == 1000;
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
                        if !tolerates_all(device, &choice.tolerations) {
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
                            free.push(p);
                        }
                    }
                    (matching, free, error)
                };
                if let DeviceCount::Exact(n) = choice.count {
                    let (_, free, _) = scan(true);
                    if free.len() >= n as usize {
                        chosen = Some((choice.name.clone(), self.aligned(free, n as usize)));
                        break;
                    }
                }
                let (matching, free, error) = scan(false);
                let need = match choice.count {
                    DeviceCount::Exact(n) => n as usize,
                    DeviceCount::All if matching > 0 && free.len() == matching as usize => {
                        free.len()
                    }
                    DeviceCount::All => usize::MAX,
                };
                if free.len() >= need {
                    chosen = Some((choice.name.clone(), self.aligned(free, need)));
                    break;
                }
                shortfall.get_or_insert(ClaimShortfall::Request {
                    claim: claim.key.clone(),
                    request: request.name.clone(),
                    matching,
                    free: free.len() as u32,
                    error,
                });
            }
            let Some((name, positions)) = chosen else {
                return Err(shortfall.expect("a request has an alternative"));
            };
            for p in positions {
                taken[p] = true;
                results.push((name.clone(), p));
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
                .map(|(_, p)| {
                    self.spec.gpus[*p]
                        .dra
                        .as_ref()
                        .and_then(|d| d.attributes.get(attribute))
                });
            if let Some(first) = values.next() {
                if values.any(|v| v != first) {
                    return Err(ClaimShortfall::Request {
                        claim: claim.key.clone(),
                        request: claim.requests[0].name.clone(),
                        matching: 0,
                        free: 0,
                        error: Some(format!("no devices share one value of {attribute}")),
                    });
                }
            }
        }
        Ok(results)
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
                driver: "x".into(),
                pool: "n".into(),
                name: format!("gpu-{i}"),
                attributes,
                capacity: BTreeMap::new(),
                taints: if i == 7 {
                    vec![crate::model::Taint {
                        key: "unhealthy".into(),
                        value: String::new(),
                        effect: TaintEffect::NoSchedule,
                    }]
                } else {
                    Vec::new()
                },
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
        assert_eq!(choice.positions.len(), 5);
        let x: Vec<usize> = choice.per_claim[0]
            .iter()
            .filter(|(r, _)| r == "x/0")
            .map(|(_, p)| *p)
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
        assert_eq!(n.choose_devices(&tolerant).unwrap().positions.len(), 8);
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
            .all(|(r, p)| r == "r/1" && *p >= 3));
        let all = claims(
            vec![request("r", vec![(filter(&["a"]), DeviceCount::All)])],
            vec![],
        );
        assert_eq!(n.choose_devices(&all).unwrap().positions, vec![0, 1, 2]);
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
            choice.positions,
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
}
