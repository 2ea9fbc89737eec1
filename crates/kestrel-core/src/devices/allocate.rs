//! Choosing devices for a pod's claims on one node, against what is already taken.

use super::*;
use crate::cluster::NodeState;
use crate::model::GpuDevice;
use std::collections::BTreeSet;
use std::sync::Arc;

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
