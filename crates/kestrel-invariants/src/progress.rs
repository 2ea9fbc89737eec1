//! Progress: no pod left pending while it fits a node that holds nothing, judged over
//! successive snapshots with this crate's own fit, never a scheduler's (see
//! [`StrandedWatch`]).

use crate::{GangView, NodeView, PodView, ShareRequest, Snapshot, Violation, PODS};
use std::collections::{BTreeMap, BTreeSet};

/// Pods pending while they fit an empty node, counted over successive snapshots (one per
/// scheduling cycle): a pod stranded in `cycles` snapshots in a row is a
/// [`Violation::Stranded`], reported in every snapshot from then on until it is bound or
/// no longer fits an empty node.
///
/// An empty node holds no pod, is not cordoned and is not [`NodeView::reserved`] for
/// another pod. A pod fits it when its requests and one pod slot are within the node's
/// allocatable, a share of a GPU finds a device, the node is selected (node selector,
/// required node affinity), its taints are tolerated, and the pod's bound volumes' node
/// affinity and CSI limits allow it.
///
/// Only what a snapshot shows is judged, so a pod is left out wherever waiting may be
/// right for a reason the snapshot does not hold or the rule does not model:
/// - pods with scheduling gates, ResourceClaims, a `single-numa-node` policy or a share
///   of a GPU given as device memory (a node's device memory is not in the snapshot);
/// - pods charged to a ClusterQueue (whether the queue admits them turns on quota,
///   borrowing, cohort lending and flavors' node labels);
/// - pods with required pod affinity, anti-affinity or DoNotSchedule spread constraints,
///   and pods that a bound pod's anti-affinity matches (their domains reach past one node);
/// - pods whose `ReadWriteOncePod` claim a bound pod uses, and pods with claims not bound
///   yet (which volumes are free, or may be made, is not in the snapshot);
/// - members of gangs the snapshot does not declare, of gangs with role minimums or
///   slices, of gangs that timed out (backing off), and of gangs with a member bound (a
///   running gang's late members).
///
/// A gang counts as a whole: its pending members are stranded when `min_member` of them
/// fit distinct empty nodes, in one domain of its required topology key.
#[derive(Debug, Clone)]
pub struct StrandedWatch {
    cycles: u32,
    /// Pod key -> snapshots in a row it has been stranded in.
    stranded_for: BTreeMap<String, u32>,
}

impl StrandedWatch {
    /// A watch that tolerates `cycles - 1` snapshots in a row (at least one).
    pub fn new(cycles: u32) -> StrandedWatch {
        StrandedWatch {
            cycles: cycles.max(1),
            stranded_for: BTreeMap::new(),
        }
    }

    /// Takes the next snapshot.
    pub fn observe(&mut self, snapshot: &Snapshot) -> Result<(), Vec<Violation>> {
        let now = stranded(snapshot);
        let mut out = Vec::new();
        let mut counts = BTreeMap::new();
        for (pod, node) in now {
            let n = self.stranded_for.get(&pod).copied().unwrap_or(0) + 1;
            if n >= self.cycles {
                out.push(Violation::Stranded {
                    pod: pod.clone(),
                    node,
                    cycles: n,
                });
            }
            counts.insert(pod, n);
        }
        self.stranded_for = counts;
        if out.is_empty() {
            Ok(())
        } else {
            Err(out)
        }
    }
}

/// The pending pods of one snapshot that fit an empty node, each with such a node.
pub fn stranded(snapshot: &Snapshot) -> BTreeMap<String, String> {
    let occupied: BTreeSet<&str> = snapshot
        .pods
        .iter()
        .filter_map(|p| p.node.as_deref())
        .collect();
    let empty: Vec<&NodeView> = snapshot
        .nodes
        .iter()
        .filter(|n| !n.unschedulable && !n.reserved && !occupied.contains(n.name.as_str()))
        .collect();
    let bound: Vec<&PodView> = snapshot.pods.iter().filter(|p| p.node.is_some()).collect();
    let judged = |p: &PodView| p.node.is_none() && judged_alone(snapshot, &bound, p);
    let mut out = BTreeMap::new();
    for p in snapshot
        .pods
        .iter()
        .filter(|p| p.gang.is_none() && judged(p))
    {
        if let Some(n) = empty.iter().find(|n| fits_empty(p, n)) {
            out.insert(p.key.clone(), n.name.clone());
        }
    }
    let gangs: BTreeMap<&str, &GangView> =
        snapshot.gangs.iter().map(|g| (g.key.as_str(), g)).collect();
    let mut members: BTreeMap<&str, Vec<&PodView>> = BTreeMap::new();
    for p in &snapshot.pods {
        if let Some(g) = &p.gang {
            members.entry(g.as_str()).or_default().push(p);
        }
    }
    for (key, pods) in members {
        let Some(gang) = gangs
            .get(key)
            .filter(|g| !g.roles_or_slices && !g.timed_out)
        else {
            continue;
        };
        if !pods.iter().all(|p| judged(p)) {
            continue;
        }
        // None of it runs: it starts afresh, and members that departed do not count.
        let need = gang.min_member.max(1) as usize;
        if let Some(placed) = place_gang(gang, &pods, &empty, need) {
            out.extend(placed);
        }
    }
    out
}

/// Whether a pending pod is one the rule can judge by itself (see [`StrandedWatch`]).
fn judged_alone(snapshot: &Snapshot, bound: &[&PodView], p: &PodView) -> bool {
    let repelled = bound.iter().any(|q| {
        q.anti_affinity
            .iter()
            .any(|t| snapshot.term_matches(t, q.namespace(), p))
    });
    let claim_in_use = bound.iter().any(|q| {
        q.exclusive_claims
            .iter()
            .any(|c| p.exclusive_claims.contains(c))
    });
    !p.gated
        && p.resource_claims.is_empty()
        && !p.single_numa_node
        && !matches!(p.gpu_share, Some(ShareRequest::MemoryMib(_)))
        && p.queue.is_none()
        && p.affinity.is_empty()
        && p.anti_affinity.is_empty()
        && p.spread.is_empty()
        && !repelled
        && !claim_in_use
        && p.claims_to_bind.is_empty()
}

/// Whether a pod fits a node that holds no pod: its requests and one pod slot within the
/// node's allocatable, a device for a share, the node selected, its taints tolerated, its
/// bound volumes' node affinity met and its CSI volumes within the node's limits.
fn fits_empty(p: &PodView, n: &NodeView) -> bool {
    let within =
        |resource: &str, amount| n.allocatable.get(resource).copied().unwrap_or(0) >= amount;
    let mut per_driver: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (driver, volume) in &p.attached_volumes {
        per_driver.entry(driver).or_default().insert(volume);
    }
    p.requests.iter().all(|(r, a)| within(r, *a))
        && within(PODS, 1000)
        && (p.gpu_share.is_none() || n.gpu_devices > 0)
        && p.selects_node(n)
        && p.tolerates_node(n)
        && p.volume_affinity
            .iter()
            .all(|v| v.terms.iter().any(|t| t.selects(n)))
        && per_driver.iter().all(|(driver, volumes)| {
            n.volume_limits
                .get(*driver)
                .is_none_or(|limit| volumes.len() <= *limit as usize)
        })
}

/// `need` of a gang's pending members on distinct empty nodes, all in one domain of its
/// required topology key (first fit, in the snapshot's order: enough to show that the
/// gang fits, not a search for every way it might).
fn place_gang<'a>(
    gang: &GangView,
    pods: &[&PodView],
    empty: &[&'a NodeView],
    need: usize,
) -> Option<Vec<(String, String)>> {
    // `None`: the node is in no domain of the key; `Some(None)`: no key, one domain.
    fn domain<'a>(gang: &GangView, n: &'a NodeView) -> Option<Option<&'a str>> {
        match &gang.required_domain {
            Some(key) => n.labels.get(key).map(|v| Some(v.as_str())),
            None => Some(None),
        }
    }
    let domain = |n: &'a NodeView| domain(gang, n);
    let domains: BTreeSet<Option<&str>> = empty.iter().filter_map(|n| domain(n)).collect();
    for d in domains {
        let mut free: Vec<&NodeView> = empty
            .iter()
            .copied()
            .filter(|n| domain(n) == Some(d))
            .collect();
        let mut placed = Vec::new();
        for p in pods {
            if let Some(i) = free.iter().position(|n| fits_empty(p, n)) {
                placed.push((p.key.clone(), free.remove(i).name.clone()));
            }
        }
        if placed.len() >= need {
            return Some(placed);
        }
    }
    None
}
