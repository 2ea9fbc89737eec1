//! The rules: a snapshot's nodes, gangs, queues and cohorts, and a step between two.

use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// All violations, one per line (for `assert!`/`prop_assert!` messages).
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("  - {v}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks a snapshot: every rule, recomputed from the bound pods.
pub fn check(snapshot: &Snapshot) -> Result<(), Vec<Violation>> {
    let mut out = Vec::new();
    let nodes: BTreeMap<&str, &NodeView> = snapshot
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    let mut seen = BTreeSet::new();
    for p in &snapshot.pods {
        if !seen.insert(p.key.as_str()) {
            out.push(Violation::DuplicatePod { pod: p.key.clone() });
        }
    }
    check_nodes(snapshot, &nodes, &mut out);
    check_gangs(snapshot, &mut out);
    check_queues(snapshot, &mut out);
    placement::check_anti_affinity(snapshot, &mut out);
    placement::check_volumes(snapshot, &mut out);
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}

pub(super) fn check_nodes(
    snapshot: &Snapshot,
    nodes: &BTreeMap<&str, &NodeView>,
    out: &mut Vec<Violation>,
) {
    // node -> its bound pods
    let mut on: BTreeMap<&str, Vec<&PodView>> = BTreeMap::new();
    for p in &snapshot.pods {
        let Some(node) = &p.node else { continue };
        if !nodes.contains_key(node.as_str()) {
            out.push(Violation::UnknownNode {
                pod: p.key.clone(),
                node: node.clone(),
            });
            continue;
        }
        on.entry(node.as_str()).or_default().push(p);
        let whole_gpus = p.requests.get(GPU).copied().unwrap_or(0);
        if whole_gpus > 0
            && p.gpu == GpuClaim::None
            && nodes[node.as_str()].gpu_devices > 0
            && p.resource_claims.is_empty()
            && p.scheduler.as_deref() != Some(KUBE_SCHEDULER)
        {
            out.push(Violation::GpuWithoutIndices {
                pod: p.key.clone(),
                node: node.clone(),
                requested: whole_gpus,
            });
        }
        // Whole GPUs a pod's ResourceClaims hold are the claims' to count, not its requests.
        if let (GpuClaim::Whole(v), true) = (&p.gpu, p.resource_claims.is_empty()) {
            let requested = p.requests.get(GPU).copied().unwrap_or(0);
            if requested != 1000 * v.len() as Amount {
                out.push(Violation::GpuClaimMismatch {
                    pod: p.key.clone(),
                    requested,
                    claimed: 1000 * v.len() as Amount,
                });
            }
        }
    }
    for (name, pods) in on {
        let node = nodes[name];
        // Resources, with one pod slot per pod.
        let mut used: BTreeMap<&str, Amount> = BTreeMap::new();
        for p in &pods {
            *used.entry(PODS).or_default() += 1000;
            for (r, a) in &p.requests {
                *used.entry(r.as_str()).or_default() += a;
            }
        }
        for (resource, requested) in used {
            let allocatable = node.allocatable.get(resource).copied().unwrap_or(0);
            if requested > allocatable {
                out.push(Violation::OverAllocatable {
                    node: name.to_string(),
                    resource: resource.to_string(),
                    requested,
                    allocatable,
                    pods: pods
                        .iter()
                        .filter(|p| {
                            resource == PODS || p.requests.get(resource).is_some_and(|a| *a > 0)
                        })
                        .map(|p| p.key.clone())
                        .collect(),
                });
            }
        }
        // Devices: who holds each, whole or in part.
        let mut whole: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
        let mut shares: BTreeMap<u32, (Amount, Vec<&str>)> = BTreeMap::new();
        let mut parts: BTreeMap<u32, Vec<(u8, &str)>> = BTreeMap::new();
        for p in &pods {
            let indices: Vec<u32> = match &p.gpu {
                GpuClaim::None => continue,
                GpuClaim::Whole(v) => {
                    for &i in v {
                        whole.entry(i).or_default().push(&p.key);
                    }
                    v.clone()
                }
                GpuClaim::Share { index, milli } => {
                    let e = shares.entry(*index).or_default();
                    e.0 += Amount::from(*milli);
                    e.1.push(&p.key);
                    vec![*index]
                }
                GpuClaim::Partitions(v) => {
                    for &(index, k) in v {
                        parts.entry(index).or_default().push((k, &p.key));
                    }
                    v.iter().map(|(i, _)| *i).collect()
                }
            };
            for index in indices.into_iter().filter(|&i| i >= node.gpu_devices) {
                out.push(Violation::DeviceOutOfRange {
                    node: name.to_string(),
                    pod: p.key.clone(),
                    index,
                    devices: node.gpu_devices,
                });
            }
        }
        for (index, holders) in &whole {
            let sharers = shares.get(index).map(|(_, p)| p.as_slice()).unwrap_or(&[]);
            let partitioners: Vec<&str> = parts
                .get(index)
                .into_iter()
                .flatten()
                .map(|(_, p)| *p)
                .collect();
            let sharers: Vec<&str> = sharers.iter().copied().chain(partitioners).collect();
            if holders.len() + sharers.len() > 1 {
                out.push(Violation::DeviceTwice {
                    node: name.to_string(),
                    index: *index,
                    pods: holders
                        .iter()
                        .chain(&sharers)
                        .map(|s| s.to_string())
                        .collect(),
                });
            }
        }
        for (index, held) in &parts {
            let pods: Vec<String> = held.iter().map(|(_, p)| p.to_string()).collect();
            let Some(view) = node.partitions.get(index) else {
                out.push(Violation::UnknownPartition {
                    node: name.to_string(),
                    index: *index,
                    partition: held[0].0,
                    pods,
                });
                continue;
            };
            for (counter, capacity) in &view.capacity {
                let used: Amount = held
                    .iter()
                    .filter_map(|(k, _)| view.consumes.get(*k as usize)?.get(counter))
                    .sum();
                if used > *capacity {
                    out.push(Violation::CountersOverCommitted {
                        node: name.to_string(),
                        index: *index,
                        counter: counter.clone(),
                        used,
                        capacity: *capacity,
                        pods: pods.clone(),
                    });
                }
            }
            if let Some((k, _)) = held
                .iter()
                .find(|(k, _)| *k as usize >= view.consumes.len())
            {
                out.push(Violation::UnknownPartition {
                    node: name.to_string(),
                    index: *index,
                    partition: *k,
                    pods: pods.clone(),
                });
            }
        }
        for (index, (milli, holders)) in shares {
            if milli > 1000 {
                out.push(Violation::DeviceOverShared {
                    node: name.to_string(),
                    index,
                    milli,
                    pods: holders.iter().map(|s| s.to_string()).collect(),
                });
            }
        }
    }
}

pub(super) fn check_gangs(snapshot: &Snapshot, out: &mut Vec<Violation>) {
    let gangs: BTreeMap<&str, &GangView> =
        snapshot.gangs.iter().map(|g| (g.key.as_str(), g)).collect();
    let mut bound: BTreeMap<&str, u32> = BTreeMap::new();
    for p in snapshot.pods.iter().filter(|p| p.node.is_some()) {
        let Some(gang) = &p.gang else { continue };
        if !gangs.contains_key(gang.as_str()) {
            out.push(Violation::UnknownGang {
                pod: p.key.clone(),
                gang: gang.clone(),
            });
            continue;
        }
        *bound.entry(gang.as_str()).or_default() += 1;
    }
    for (key, n) in bound {
        let g = gangs[key];
        if n + g.departed < g.min_member {
            out.push(Violation::GangPartial {
                gang: key.to_string(),
                bound: n,
                departed: g.departed,
                min_member: g.min_member,
            });
        }
    }
}

pub(super) fn check_queues(snapshot: &Snapshot, out: &mut Vec<Violation>) {
    let queues: BTreeMap<&str, &QueueView> = snapshot
        .queues
        .iter()
        .map(|q| (q.name.as_str(), q))
        .collect();
    // (queue, flavor, resource) -> used
    let mut used: BTreeMap<(&str, String, String), Amount> = BTreeMap::new();
    for p in snapshot.pods.iter().filter(|p| p.node.is_some()) {
        // A pod of a queue the snapshot does not have (deleted, still draining) is
        // charged nowhere.
        let Some(q) = p.queue.as_deref().and_then(|q| queues.get(q)) else {
            continue;
        };
        for (resource, a) in p.quota_amounts() {
            let flavor = p.flavors.get(&resource).cloned().or_else(|| {
                q.quotas
                    .iter()
                    .find(|x| x.resource == resource)
                    .map(|x| x.flavor.clone())
            });
            match flavor {
                Some(flavor) => *used.entry((&q.name, flavor, resource)).or_default() += a,
                None if resource == PODS => {}
                None => out.push(Violation::QueueNotCovered {
                    queue: q.name.clone(),
                    pod: p.key.clone(),
                    resource,
                }),
            }
        }
    }
    let usage = |q: &str, flavor: &str, resource: &str| {
        used.get(&(q, flavor.to_string(), resource.to_string()))
            .copied()
            .unwrap_or(0)
    };
    for q in &snapshot.queues {
        for quota in &q.quotas {
            let u = usage(&q.name, &quota.flavor, &quota.resource);
            let limit = match (&q.cohort, quota.borrowing_limit) {
                (None, _) => Some(quota.nominal),
                (Some(_), Some(b)) => Some(quota.nominal + b),
                (Some(_), None) => None,
            };
            if let Some(limit) = limit.filter(|l| u > *l) {
                out.push(Violation::QueueOverLimit {
                    queue: q.name.clone(),
                    flavor: quota.flavor.clone(),
                    resource: quota.resource.clone(),
                    used: u,
                    limit,
                });
            }
        }
    }
    check_cohorts(snapshot, &usage, out);
}

/// One resource in one flavor at a node of a cohort tree, as Kueue counts hierarchical
/// cohorts: what it holds (its nominal plus what its children lend it), what it keeps
/// from its parent (that less its lending limit), and what it uses (a cohort: what its
/// children take beyond what they keep).
#[derive(Default, Clone, Copy)]
pub(super) struct Held {
    quota: Amount,
    kept: Amount,
    used: Amount,
}

impl Held {
    fn of(quota: Amount, lending_limit: Option<Amount>, used: Amount) -> Held {
        Held {
            quota,
            kept: lending_limit.map_or(0, |l| (quota - l).max(0)),
            used,
        }
    }
    fn lent(&self) -> Amount {
        self.quota - self.kept
    }
    fn taken(&self) -> Amount {
        (self.used - self.kept).max(0)
    }
}

/// Every cohort tree within its root's pool, and every inner cohort within what its
/// parent may lend it.
pub(super) fn check_cohorts(
    snapshot: &Snapshot,
    usage: &dyn Fn(&str, &str, &str) -> Amount,
    out: &mut Vec<Violation>,
) {
    let declared: BTreeMap<&str, &CohortView> = snapshot
        .cohorts
        .iter()
        .map(|c| (c.name.as_str(), c))
        .collect();
    let mut names: BTreeSet<&str> = declared.keys().copied().collect();
    names.extend(snapshot.cohorts.iter().filter_map(|c| c.parent.as_deref()));
    names.extend(snapshot.queues.iter().filter_map(|q| q.cohort.as_deref()));
    let parent = |c: &str| declared.get(c).and_then(|v| v.parent.as_deref());
    let resources: BTreeSet<(&str, &str)> = snapshot
        .queues
        .iter()
        .flat_map(|q| &q.quotas)
        .chain(snapshot.cohorts.iter().flat_map(|c| &c.quotas))
        .map(|q| (q.flavor.as_str(), q.resource.as_str()))
        .collect();
    for (flavor, resource) in resources {
        let own = |quotas: &[QuotaView]| {
            quotas
                .iter()
                .find(|q| q.flavor == flavor && q.resource == resource)
                .cloned()
                .unwrap_or_default()
        };
        // Children before parents: a cohort's amounts are its own and its children's.
        let mut held: BTreeMap<&str, Held> = BTreeMap::new();
        let depth = |c: &str| {
            let mut at = c;
            let mut d = 0;
            while let Some(p) = parent(at).filter(|_| d <= names.len()) {
                at = p;
                d += 1;
            }
            d
        };
        let mut order: Vec<&str> = names.iter().copied().collect();
        order.sort_by_key(|c| std::cmp::Reverse(depth(c)));
        for c in order {
            let (mut quota, mut used) = (0, 0);
            for q in snapshot
                .queues
                .iter()
                .filter(|q| q.cohort.as_deref() == Some(c))
            {
                let mine = own(&q.quotas);
                let h = Held::of(
                    mine.nominal,
                    mine.lending_limit,
                    usage(&q.name, flavor, resource),
                );
                quota += h.lent();
                used += h.taken();
            }
            for child in names.iter().filter(|n| parent(n) == Some(c)) {
                let h = held.get(child).copied().unwrap_or_default();
                quota += h.lent();
                used += h.taken();
            }
            let mine = declared.get(c).map(|v| own(&v.quotas)).unwrap_or_default();
            let h = Held::of(quota + mine.nominal, mine.lending_limit, used);
            held.insert(c, h);
            match (parent(c), mine.borrowing_limit) {
                (None, _) if h.used > h.quota => out.push(Violation::CohortOverLent {
                    cohort: c.to_string(),
                    flavor: flavor.to_string(),
                    resource: resource.to_string(),
                    taken: h.used,
                    pool: h.quota,
                }),
                (Some(_), Some(b)) if h.taken() > h.lent() + b => {
                    out.push(Violation::CohortOverLimit {
                        cohort: c.to_string(),
                        flavor: flavor.to_string(),
                        resource: resource.to_string(),
                        taken: h.taken(),
                        limit: h.lent() + b,
                    })
                }
                _ => {}
            }
        }
    }
}

/// Checks a step from `before` to `after`: every pod pending before is still there
/// (pending or bound) unless it is in `left` (completed or deleted during the step); every
/// pod newly bound had its required pod affinity met and kept its DoNotSchedule topology
/// spread constraints at the moment of binding, as far as the two snapshots tell. The
/// order of the bindings between them is unknown, so what any order allows passes:
/// - other pods newly bound in the step count as affinity partners, and a spread's skew
///   may exceed `maxSkew` by the number of them that match the constraint (on eligible
///   nodes): they may have been bound after the pod;
/// - pods bound before and not after (ended, evicted, on a removed node) may have left
///   after the binding: they count as affinity partners and in the least-loaded spread
///   domain (never in the pod's own);
/// - "first of a series" (a pod matching its own affinity terms may go where none match
///   when no pod in the cluster does) is judged against the pods bound throughout the step.
///
/// Affinity is not checked by [`check`]: the partner may have ended since
/// (`IgnoredDuringExecution`).
pub fn check_transition(
    before: &Snapshot,
    after: &Snapshot,
    left: &BTreeSet<String>,
) -> Result<(), Vec<Violation>> {
    let present: BTreeSet<&str> = after.pods.iter().map(|p| p.key.as_str()).collect();
    let mut out: Vec<Violation> = before
        .pods
        .iter()
        .filter(|p| p.node.is_none())
        .filter(|p| !present.contains(p.key.as_str()) && !left.contains(&p.key))
        .map(|p| Violation::PendingPodDropped { pod: p.key.clone() })
        .collect();
    placement::check_bindings(before, after, &mut out);
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}
