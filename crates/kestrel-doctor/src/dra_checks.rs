//! Checks of DRA objects: claims pods wait on that stay unallocated, and driver pools
//! whose slices are stale or incomplete (a pool's devices count only once every slice of
//! its newest generation is there).

use super::checks::Finding;
use super::objects::PodView;
use super::pod_checks::format_age;
use super::{count, Snapshot};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// GPUs NVIDIA's DRA driver publishes per node: the GPU devices (not their MIG partitions)
/// of node-local slices of each pool's newest generation (older ones are left over;
/// schedulers ignore them).
pub(super) fn dra_gpus_by_node(slices: &[ResourceSlice]) -> BTreeMap<String, i64> {
    let gpu_slices = || {
        slices
            .iter()
            .map(|s| &s.spec)
            .filter(|s| s.driver == kestrel_objects::dra::NVIDIA_GPU_DRIVER)
    };
    let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
    for spec in gpu_slices() {
        let g = newest.entry(spec.pool.name.as_str()).or_insert(i64::MIN);
        *g = (*g).max(spec.pool.generation);
    }
    let mut out = BTreeMap::new();
    for spec in gpu_slices().filter(|s| newest[s.pool.name.as_str()] == s.pool.generation) {
        let Some(node) = spec.node_name.as_ref() else {
            continue;
        };
        let devices = spec
            .devices
            .iter()
            .flatten()
            .filter(|d| {
                let kind = d.attributes.as_ref().and_then(|a| a.get("type"));
                kind.is_none_or(|t| t.string.as_deref() == Some("gpu"))
            })
            .count() as i64;
        *out.entry(node.clone()).or_default() += devices;
    }
    out
}

/// `namespace/name` of the claims pending pods name (directly, or as their status gives
/// the claim made from a template), with those pods.
fn claims_of_pending_pods(pods: &[PodView]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in pods.iter().filter(|p| p.is_pending()) {
        let namespace = p.raw.metadata.namespace.as_deref().unwrap_or("default");
        let named = p
            .raw
            .spec
            .iter()
            .flat_map(|s| s.resource_claims.iter().flatten())
            .filter_map(|c| c.resource_claim_name.clone());
        let made = p
            .raw
            .status
            .iter()
            .flat_map(|s| s.resource_claim_statuses.iter().flatten())
            .filter_map(|s| s.resource_claim_name.clone());
        let names: BTreeSet<String> = named.chain(made).collect();
        for name in names {
            out.entry(format!("{namespace}/{name}"))
                .or_default()
                .push(p.key());
        }
    }
    out
}

/// Claims that pending pods wait on and that are still unallocated `threshold_ms` after
/// they were made.
pub(super) fn dra_claim_unallocated(
    claims: &[ResourceClaim],
    pods: &[PodView],
    now: Option<Timestamp>,
    threshold_ms: u64,
) -> Vec<Finding> {
    let waiting = claims_of_pending_pods(pods);
    let mut bad = Vec::new();
    for claim in claims {
        let allocated = claim
            .status
            .as_ref()
            .is_some_and(|s| s.allocation.is_some());
        if allocated {
            continue;
        }
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or("default"),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        let Some(users) = waiting.get(&key) else {
            continue;
        };
        let age = match (now, claim.metadata.creation_timestamp.as_ref()) {
            (Some(now), Some(made)) => {
                Some(u64::try_from(now.as_millisecond() - made.0.as_millisecond()).unwrap_or(0))
            }
            _ => None,
        };
        if age.is_some_and(|a| a < threshold_ms) {
            continue;
        }
        let classes: BTreeSet<&str> = claim
            .spec
            .iter()
            .flat_map(|s| s.devices.iter())
            .flat_map(|d| d.requests.iter().flatten())
            .filter_map(|r| r.exactly.as_ref().map(|e| e.device_class_name.as_str()))
            .collect();
        let age = age
            .map(|a| format!("{}, ", format_age(a)))
            .unwrap_or_default();
        bad.push(format!(
            "{key} ({age}class {}; pods {})",
            classes.into_iter().collect::<Vec<_>>().join(", "),
            users.join(", ")
        ));
    }
    if bad.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "dra-claim-unallocated",
        format!(
            "{} that pending pods wait on {} unallocated",
            count(bad.len(), "ResourceClaim"),
            if bad.len() == 1 { "is" } else { "are" }
        ),
        bad,
        "No node has free devices that the claim's DeviceClass and selectors accept, or no \
         driver publishes them: the pods never start.",
        "kubectl describe pod POD shows the scheduler's reason; check that the DeviceClass \
         exists, that its selectors match devices the driver publishes (kubectl get \
         resourceslices -o yaml) and that the DRA driver's kubelet plugin runs on the nodes."
            .to_string(),
    )]
}

/// Pools whose slices are of an older generation than the pool's newest, or whose newest
/// generation has fewer slices than `resourceSliceCount` says.
pub(super) fn dra_pool_incomplete(snapshot: &Snapshot) -> Vec<Finding> {
    // (driver, pool) -> generation -> (slices seen, resourceSliceCount)
    let mut pools: BTreeMap<(String, String), BTreeMap<i64, (i64, i64)>> = BTreeMap::new();
    for slice in &snapshot.slices {
        let spec = &slice.spec;
        let seen = pools
            .entry((spec.driver.clone(), spec.pool.name.clone()))
            .or_default()
            .entry(spec.pool.generation)
            .or_default();
        seen.0 += 1;
        seen.1 = seen.1.max(spec.pool.resource_slice_count);
    }
    let mut bad = Vec::new();
    for ((driver, pool), generations) in &pools {
        let (&newest, &(seen, wanted)) = generations.iter().next_back().expect("one at least");
        let stale: i64 = generations
            .iter()
            .filter(|(g, _)| **g < newest)
            .map(|(_, (n, _))| n)
            .sum();
        let mut facts = Vec::new();
        if seen < wanted {
            facts.push(format!("generation {newest}: {seen} of {wanted} slices"));
        }
        if stale > 0 {
            facts.push(format!(
                "{stale} slice{} of older generations",
                if stale == 1 { "" } else { "s" }
            ));
        }
        if !facts.is_empty() {
            bad.push(format!("{driver} pool {pool} ({})", facts.join(", ")));
        }
    }
    if bad.is_empty() {
        return Vec::new();
    }
    vec![Finding::new(
        "dra-pool-incomplete",
        format!(
            "{} of DRA devices {} slices missing or left from an older generation",
            count(bad.len(), "pool"),
            if bad.len() == 1 { "has" } else { "have" }
        ),
        bad,
        "Schedulers use a pool's devices only once every slice of its newest generation is \
         there, and never those of older generations: the pool's devices are not given out, \
         or a driver that restarted did not clean up.",
        "Look at the DRA driver's kubelet plugin on the pool's node (it rewrites its slices \
         when it starts): kubectl get resourceslices -o wide, the plugin's pod and log; \
         delete slices of older generations when their driver is gone."
            .to_string(),
    )]
}
