//! A pod's device claims: requests, counts, alternatives and allocations.

use super::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::hash::Hash;

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
