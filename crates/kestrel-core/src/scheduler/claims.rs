//! ResourceClaims in the engine: an allocated claim holds its devices, whoever allocated
//! it, until it is released; pods that share it go where its devices are.
//!
//! A claim's devices are held once by the claim and once by each bound pod that uses it
//! (devices count their holders), so a device stays taken while either lasts: the claim
//! outlives its pods until the driver releases it (live: until the API shows it
//! deallocated; in the simulator, when its last pod ends).

use super::Scheduler;
use crate::devices::{ClaimAllocation, DeviceRef, DeviceResult, PartitionChoice};
use crate::types::{GpuAssignment, NodeId, PodId, PodPhase};
use std::collections::BTreeSet;

/// An allocated claim as the engine holds it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HeldClaim {
    pub(crate) allocation: ClaimAllocation,
    /// Where the devices are held (`None`: the node or its devices are not known yet).
    held: Option<(NodeId, GpuAssignment)>,
    /// Reported by the driver (the API's claim status); else the engine allocated it for a
    /// binding not confirmed yet.
    pub(crate) confirmed: bool,
}

impl Scheduler {
    /// The claim `key` (`namespace/name`) is allocated in the cluster as `allocation` (read
    /// from its status): its devices are held until [`Scheduler::release_claim`], and
    /// pending pods using it go where they are. The same allocation again changes nothing.
    pub fn hold_claim(&mut self, key: &str, allocation: ClaimAllocation) {
        self.set_claim(key, allocation, true);
    }

    /// The claim is no longer allocated (deallocated or deleted): its devices are free once
    /// no bound pod uses them, and pending pods using it may take new ones.
    pub fn release_claim(&mut self, key: &str) {
        let Some(old) = self.claims.remove(key) else {
            return;
        };
        self.unhold(&old);
        self.repin(key, None);
        self.capacity_may_have_grown();
        // A preemption victim's claim: its preemptor may go once its victims are gone and
        // their devices free.
        if let Some((preemptor, _)) = self.preemption.victim_claims.remove(key) {
            if self.victims_left(preemptor).is_none() {
                self.preemption.ready_preemptors.push(preemptor);
            }
        }
    }

    /// The allocation of a claim as the engine knows it.
    pub fn claim_allocation(&self, key: &str) -> Option<&ClaimAllocation> {
        self.claims.get(key).map(|c| &c.allocation)
    }

    /// Keys of the claims the engine holds.
    pub fn held_claims(&self) -> impl Iterator<Item = &str> {
        self.claims.keys().map(String::as_str)
    }

    /// What a bound pod's claims hold: per claim (`namespace/name`), its allocation. Empty
    /// for a pod without claims or not bound.
    pub fn pod_claim_allocations(&self, id: PodId) -> Vec<(String, ClaimAllocation)> {
        let record = &self.pods[id.0 as usize];
        let Some(claims) = &record.spec.constraints.devices else {
            return Vec::new();
        };
        claims
            .claims
            .iter()
            .filter_map(|c| {
                let a = c
                    .allocation
                    .clone()
                    .or_else(|| self.claims.get(&c.key).map(|h| h.allocation.clone()))?;
                Some((c.key.clone(), a))
            })
            .collect()
    }

    fn set_claim(&mut self, key: &str, allocation: ClaimAllocation, confirmed: bool) {
        if let Some(held) = self.claims.get_mut(key) {
            if held.allocation == allocation {
                held.confirmed |= confirmed;
                if held.held.is_some() {
                    return;
                }
            }
        }
        if let Some(old) = self.claims.remove(key) {
            self.unhold(&old);
        }
        let held = self.hold_devices(&allocation);
        self.claims.insert(
            key.to_string(),
            HeldClaim {
                allocation: allocation.clone(),
                held,
                confirmed,
            },
        );
        self.repin(key, Some(allocation));
    }

    /// Takes the allocation's devices on its node, when the node publishes them all.
    fn hold_devices(&mut self, allocation: &ClaimAllocation) -> Option<(NodeId, GpuAssignment)> {
        let node = self.cluster.id_of(&allocation.node)?;
        let spec = &self.cluster.node(node).spec;
        let gpus = spec.allocation_assignment(&allocation.results)?;
        let key = self.node_key();
        self.cluster.unindex(node);
        self.cluster
            .node_mut_unindexed(node)
            .reserve_devices(&gpus, true);
        self.cluster.reindex(node, &key);
        self.generation += 1;
        Some((node, gpus))
    }

    /// The held claims of `pods` that no bound pod outside them uses, each with the first
    /// of `pods` that uses it: once those pods are gone, the claim controller releases them
    /// (deletes a claim made for its pod, deallocates a claim reserved for nobody), as
    /// kube-scheduler's preemption counts on.
    pub(crate) fn claims_freed_by(&self, pods: &[PodId]) -> Vec<(String, PodId)> {
        let mut out: Vec<(String, PodId)> = Vec::new();
        for &id in pods {
            let record = &self.pods[id.0 as usize];
            for claim in record
                .spec
                .constraints
                .devices
                .iter()
                .flat_map(|d| &d.claims)
            {
                let key = &claim.key;
                if out.iter().any(|(k, _)| k == key)
                    || self.claims.get(key).is_none_or(|c| c.held.is_none())
                {
                    continue;
                }
                let used_by_others = self.claim_users.get(key).into_iter().flatten().any(|u| {
                    !pods.contains(u)
                        && matches!(self.pods[u.0 as usize].phase, PodPhase::Bound { .. })
                });
                if !used_by_others {
                    out.push((key.clone(), id));
                }
            }
        }
        out
    }

    /// Gives back (`take` false) or takes again the devices of held claims, the claims
    /// kept: preemption's what-if, undone before it returns.
    pub(crate) fn take_claim_devices(&mut self, keys: &[String], take: bool) {
        for key in keys {
            let Some((node, gpus)) = self.claims.get(key).and_then(|c| c.held.clone()) else {
                continue;
            };
            let node_key = self.node_key();
            self.cluster.unindex(node);
            self.cluster
                .node_mut_unindexed(node)
                .reserve_devices(&gpus, take);
            self.cluster.reindex(node, &node_key);
        }
    }

    fn unhold(&mut self, claim: &HeldClaim) {
        if let Some((node, gpus)) = &claim.held {
            let key = self.node_key();
            self.cluster.unindex(*node);
            self.cluster
                .node_mut_unindexed(*node)
                .reserve_devices(gpus, false);
            self.cluster.reindex(*node, &key);
            self.generation += 1;
        }
    }

    /// Sets the allocation pending pods see for the claim (`None`: unallocated), so that
    /// they are placed with it.
    fn repin(&mut self, key: &str, allocation: Option<ClaimAllocation>) {
        let users: Vec<PodId> = self
            .claim_users
            .get(key)
            .into_iter()
            .flatten()
            .copied()
            .filter(|id| matches!(self.pods[id.0 as usize].phase, PodPhase::Pending))
            .collect();
        for id in users {
            let record = &mut self.pods[id.0 as usize];
            let devices = record.spec.constraints.devices.as_mut().expect("filtered");
            for claim in devices.claims.iter_mut().filter(|c| c.key == key) {
                claim.allocation = allocation.clone();
            }
            record.spec.demand.gpu = devices.gpu_request();
            let old_base = record.base_constraint;
            let base = self.constraints.intern(&record.spec.constraints);
            let record = &self.pods[id.0 as usize];
            let constraint = if record.constraint == old_base {
                base
            } else {
                let mut c = self.constraints.entries[record.constraint as usize]
                    .constraints
                    .clone();
                c.devices = record.spec.constraints.devices.clone();
                self.constraints.intern(&c)
            };
            let demand = record.spec.demand.clone();
            let signature = self.constraints.intern_signature(constraint, demand);
            let record = &mut self.pods[id.0 as usize];
            record.base_constraint = base;
            record.constraint = constraint;
            record.signature = signature;
            let queue_key = record.queue_key(id);
            if let Some(pos) = self.parked.iter().position(|k| *k == queue_key) {
                self.parked.remove(pos);
                self.active.insert(queue_key);
            }
        }
    }

    /// The claims a pod about to be bound on `node` with `gpus` allocates, with their
    /// results: which device serves which request.
    pub(crate) fn fresh_claims(
        &self,
        id: PodId,
        node: NodeId,
        gpus: &GpuAssignment,
    ) -> Vec<(String, ClaimAllocation)> {
        let Some(claims) = &self.pods[id.0 as usize].spec.constraints.devices else {
            return Vec::new();
        };
        let state = self.cluster.node(node);
        let position = |index: u32| state.spec.gpus.iter().position(|g| g.index == index);
        let devices: BTreeSet<DeviceRef> = match gpus {
            GpuAssignment::Partitions(parts) => parts
                .iter()
                .filter_map(|r| {
                    Some(DeviceRef {
                        position: position(r.index)?,
                        partition: Some(r.partition),
                    })
                })
                .collect(),
            other => other
                .indices()
                .into_iter()
                .filter_map(|i| Some(DeviceRef::whole(position(i)?)))
                .collect(),
        };
        let Ok(choice) = state.choose_devices_in(claims, Some(&devices), PartitionChoice::Packed)
        else {
            return Vec::new();
        };
        let node_name = state.spec.name.clone();
        let mut fresh = Vec::new();
        for (claim, results) in claims.claims.iter().zip(&choice.per_claim) {
            if claim.allocation.is_some() || self.claims.contains_key(&claim.key) {
                continue;
            }
            let results = results
                .iter()
                .map(|(request, d)| {
                    let dra = state.spec.dra_of(*d).expect("a DRA device");
                    DeviceResult {
                        request: request.clone(),
                        driver: dra.driver.clone(),
                        pool: dra.pool.clone(),
                        device: dra.name.clone(),
                    }
                })
                .collect();
            fresh.push((
                claim.key.clone(),
                ClaimAllocation {
                    node: node_name.clone(),
                    results,
                },
            ));
        }
        fresh
    }

    /// Holds the claims a binding allocated, unconfirmed until the driver reports them.
    pub(crate) fn hold_fresh_claims(&mut self, fresh: Vec<(String, ClaimAllocation)>) {
        for (key, allocation) in fresh {
            self.set_claim(&key, allocation, false);
        }
    }

    /// A binding was undone: the claims the engine allocated for it and nobody confirmed
    /// are released.
    pub(crate) fn release_unconfirmed_claims_of(&mut self, id: PodId) {
        let Some(claims) = self.pods[id.0 as usize].spec.constraints.devices.clone() else {
            return;
        };
        for claim in &claims.claims {
            match self.claims.get(&claim.key) {
                Some(held) if !held.confirmed => self.release_claim(&claim.key),
                // Allocated for real: the pod goes back to where its devices are.
                Some(held) => {
                    let allocation = held.allocation.clone();
                    self.repin(&claim.key, Some(allocation));
                }
                None => {}
            }
        }
    }

    /// A new pod's claims that the engine holds allocated: it goes where they are.
    pub(crate) fn pin_to_held_claims(&self, spec: &mut crate::model::PodSpec) {
        let Some(devices) = spec.constraints.devices.as_mut() else {
            return;
        };
        let mut pinned = false;
        for claim in &mut devices.claims {
            if claim.allocation.is_none() {
                if let Some(held) = self.claims.get(&claim.key) {
                    claim.allocation = Some(held.allocation.clone());
                    pinned = true;
                }
            }
        }
        if pinned {
            spec.demand.gpu = devices.gpu_request();
        }
    }

    /// The node's devices were rebuilt or removed: what its claims held there is gone.
    pub(crate) fn forget_claim_holds_on(&mut self, node: NodeId) {
        for claim in self.claims.values_mut() {
            if claim.held.as_ref().is_some_and(|(n, _)| *n == node) {
                claim.held = None;
            }
        }
    }

    /// Takes the devices of the claims allocated on a node that has just come or changed.
    pub(crate) fn rehold_claims_on(&mut self, node_name: &str) {
        let keys: Vec<String> = self
            .claims
            .iter()
            .filter(|(_, c)| c.held.is_none() && c.allocation.node == node_name)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let allocation = self.claims[&key].allocation.clone();
            let held = self.hold_devices(&allocation);
            self.claims.get_mut(&key).expect("listed").held = held;
        }
    }

    /// Releases the claims of an ended pod that no other pod uses, as the claim controller
    /// does (for drivers that play it: the simulator). A claim made for the pod from a
    /// template is its alone.
    pub fn release_unused_claims_of(&mut self, id: PodId) {
        let Some(claims) = self.pods[id.0 as usize].spec.constraints.devices.clone() else {
            return;
        };
        for claim in &claims.claims {
            let shared = claim.per_pod.is_none()
                && self
                    .claim_users
                    .get(&claim.key)
                    .into_iter()
                    .flatten()
                    .any(|&other| {
                        other != id && !matches!(self.pods[other.0 as usize].phase, PodPhase::Gone)
                    });
            if !shared {
                self.release_claim(&claim.key);
            }
        }
    }
}
