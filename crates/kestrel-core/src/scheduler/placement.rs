//! Placing one pod: the best node its constraints allow and its demand fits, found by
//! visiting only the buckets that can win; failures are cached per signature and
//! generation.

use super::Scheduler;
use crate::cluster::{first_bucket_for, Bucket};
use crate::constraints::{ClassVerdict, Source};
use crate::explain::{GangProblem, Unschedulable};
use crate::model::PlacementConstraints;
use crate::policy::Policy;
use crate::predicates::static_check;
use crate::types::{GpuAssignment, NodeId, PodId};
use std::cmp::Reverse;
use std::sync::Arc;

/// Fitting nodes per bucket the packing scorer compares (the best by the policy key).
const PACKING_SHORTLIST: usize = 8;

/// A node that fits, with what ranks it: preference score first, then the policy key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Candidate {
    neg_score: i64,
    key: u64,
    node: NodeId,
}

impl Scheduler {
    pub(crate) fn constraint_of(&self, id: u32) -> &PlacementConstraints {
        &self.constraints.entries[id as usize].constraints
    }

    /// The best node for a pod among `nodes` (a topology domain), by preference score and
    /// policy key.
    pub(crate) fn place_among(
        &mut self,
        id: PodId,
        nodes: &[NodeId],
    ) -> Option<(NodeId, GpuAssignment)> {
        let constraint = self.pods[id.0 as usize].constraint;
        let check = self.inter_pod_check(id);
        self.constraints.verdicts(constraint, &self.cluster);
        self.constraints.plan_sources(constraint, &self.cluster);
        let reserved = match &self.reservation {
            Some(r) if !self.may_use_reserved(id) => Some(&r.nodes),
            _ => None,
        };
        let demand = &self.pods[id.0 as usize].spec.demand;
        let entry = &self.constraints.entries[constraint as usize];
        let best = nodes
            .iter()
            .filter(|n| !reserved.is_some_and(|r| r.contains(n)))
            .filter_map(|&n| {
                let node = self.cluster.node(n);
                let mut score = if entry.per_node {
                    static_check(&entry.constraints, &node.spec).ok()?
                } else {
                    match &entry.verdicts[node.class.0 as usize] {
                        ClassVerdict::Feasible { score } => *score,
                        ClassVerdict::Infeasible(_) => return None,
                    }
                };
                if let Some(check) = &check {
                    if !check.ports_free(n) {
                        return None;
                    }
                    score += check.judge(n).ok()?;
                }
                (node.fits_pod(demand, &entry.constraints) && self.fits_beside_holds(id, n))
                    .then_some((-score, node.slot.1, n))
            })
            .min();
        best.map(|(_, _, node)| {
            let state = self.cluster.node(node);
            (node, state.choose_for_pod(demand, &entry.constraints))
        })
    }

    /// Finds the best node for a pod, or says why there is none.
    pub(crate) fn place(
        &mut self,
        id: PodId,
    ) -> Result<(NodeId, GpuAssignment), Arc<Unschedulable>> {
        let record = &self.pods[id.0 as usize];
        let (constraint, signature) = (record.constraint, record.signature);
        let access = self.may_use_reserved(id);
        // Verdicts under inter-pod rules depend on the pod's labels and namespace too,
        // which its signature does not hold: they are not shared.
        let check = self.inter_pod_check(id);
        let cacheable = !self.probing && !self.held_against(id) && check.is_none();
        if let Some((generation, had_access, reason)) = &self.constraints.failed[signature as usize]
        {
            if *generation == self.generation && *had_access == access && cacheable {
                return Err(reason.clone());
            }
        }
        self.constraints.verdicts(constraint, &self.cluster);
        self.constraints.plan_sources(constraint, &self.cluster);
        let reserved = match &self.reservation {
            Some(r) if !access => Some(&r.nodes),
            _ => None,
        };
        let record = &self.pods[id.0 as usize];
        let demand = &record.spec.demand;
        let entry = &self.constraints.entries[constraint as usize];
        let policy = self.config.policy;
        // Node by node when scores vary from node to node.
        let per_node = entry.per_node || check.as_ref().is_some_and(|c| c.scores);
        // How many fitting nodes each bucket contributes: the first fit for key-ranked
        // policies, a shortlist for the packing scorer, all of them for Random and FGD.
        let per_bucket = match policy {
            Policy::Random | Policy::Fgd => usize::MAX,
            Policy::Kestrel => PACKING_SHORTLIST,
            _ => 1,
        };
        let mut best: Option<Candidate> = None;
        // Reused from placement to placement: no allocation per pod or node visited.
        let mut found = std::mem::take(&mut self.placement_candidates);
        found.clear();
        // The best preference score (negated) of a fitting node so far: a node scoring
        // less never wins, so sources (best score first) that score less are not visited.
        // Random draws among all fitting nodes whatever their score.
        let mut top: Option<i64> = None;
        let skip_worse = policy != Policy::Random && !per_node;
        let first_bucket = match &entry.constraints.devices {
            // A claim's request may be a partition, which a partly taken GPU still holds.
            Some(_) if self.cluster.has_partitions() => first_bucket_for(demand.gpu).min(1),
            _ => first_bucket_for(demand.gpu),
        };
        // Visits one class's or shape's buckets; `only_score`: skip nodes whose class
        // the constraints do not allow with this score (a shape mixes classes).
        let mut visit = |buckets: &[Bucket], class_score: i64, only_score: bool| {
            if skip_worse && top.is_some_and(|t| t < -class_score) {
                return;
            }
            for bucket in buckets.iter().skip(first_bucket) {
                let mut taken = 0;
                for &(key, node_id) in bucket.may_hold(&demand.resources) {
                    if reserved.is_some_and(|r| r.contains(&node_id)) {
                        continue;
                    }
                    let mut score = class_score;
                    let node = self.cluster.node(node_id);
                    if only_score
                        && !matches!(
                            entry.verdicts[node.class.0 as usize],
                            ClassVerdict::Feasible { score } if score == class_score
                        )
                    {
                        continue;
                    }
                    // Scores that vary only with inter-pod rules keep the class verdict.
                    if entry.per_node {
                        match static_check(&entry.constraints, &node.spec) {
                            Ok(s) => score = s,
                            Err(_) => continue,
                        }
                    }
                    if let Some(check) = &check {
                        if !check.ports_free(node_id) {
                            continue;
                        }
                        match check.judge(node_id) {
                            Ok(s) => score += s,
                            Err(_) => continue,
                        }
                    }
                    let candidate = Candidate {
                        neg_score: -score,
                        key,
                        node: node_id,
                    };
                    // Later entries in this bucket only have larger keys: stop when they
                    // cannot beat the best (unless scores vary node by node).
                    if per_bucket == 1 && !per_node && best.is_some_and(|b| b <= candidate) {
                        break;
                    }
                    if !node.fits_pod(demand, &entry.constraints)
                        || !self.fits_beside_holds(id, node_id)
                    {
                        continue;
                    }
                    if top.is_none_or(|t| candidate.neg_score < t) {
                        top = Some(candidate.neg_score);
                    }
                    if per_bucket > 1 {
                        found.push(candidate);
                        taken += 1;
                        if taken >= per_bucket && !per_node {
                            break;
                        }
                        continue;
                    }
                    if best.is_none_or(|b| candidate < b) {
                        best = Some(candidate);
                    }
                    if !per_node {
                        break;
                    }
                }
            }
        };
        if per_node {
            for (ci, class) in self.cluster.classes.iter().enumerate() {
                if class.len > 0 {
                    let score = match &entry.verdicts[ci] {
                        ClassVerdict::Feasible { score } => *score,
                        ClassVerdict::Infeasible(_) if entry.per_node => 0,
                        ClassVerdict::Infeasible(_) => continue,
                    };
                    visit(&class.buckets, score, false);
                }
            }
        } else {
            let (_, sources) = entry.sources.as_ref().expect("planned above");
            for source in sources {
                match *source {
                    Source::Class { class, score } => {
                        visit(&self.cluster.classes[class].buckets, score, false)
                    }
                    Source::Shape { shape, score } => {
                        visit(&self.cluster.shapes[shape].buckets, score, true)
                    }
                }
            }
        }
        let chosen = match policy {
            Policy::Random if found.is_empty() => None,
            Policy::Random => {
                found.sort_unstable_by_key(|c| c.node);
                Some(found[self.rng.below(found.len() as u64) as usize].node)
            }
            Policy::Kestrel => {
                // Preferences first, then what the placement does to packing, then the key:
                // only nodes with the best preference score are worth a packing score.
                self.packing.refresh(self.cluster.capacity());
                let packing = &self.packing;
                found
                    .iter()
                    .filter(|c| Some(c.neg_score) == top)
                    .map(|c| {
                        let node = self.cluster.node(c.node);
                        (Reverse(packing.score(node, demand)), c.key, c.node)
                    })
                    .min()
                    .map(|(_, _, node)| node)
            }
            Policy::Fgd => {
                self.fgd.refresh();
                let fgd = &mut self.fgd;
                found
                    .iter()
                    .map(|c| {
                        let node = self.cluster.node(c.node);
                        (c.neg_score, fgd.cost(c.node, node, demand).0, c.node)
                    })
                    .min()
                    .map(|(_, _, node)| node)
            }
            _ => best.map(|b| b.node),
        };
        self.placement_candidates = found;
        match chosen {
            Some(node) => {
                let state = self.cluster.node(node);
                let gpus = match policy {
                    _ if entry.constraints.devices.is_some() => {
                        state.choose_for_pod(demand, &entry.constraints)
                    }
                    _ if entry.constraints.single_numa_node => state
                        .choose_gpus_single_numa(demand.gpu)
                        .expect("the node fits the pod"),
                    // The packing scorer puts a share on the device it scored.
                    Policy::Kestrel => self.packing.choose_gpus(state, demand),
                    Policy::Fgd => self.fgd.choose_gpus(node, state, demand),
                    _ => {
                        let rng = (policy == Policy::Random).then_some(&mut self.rng);
                        state.choose_gpus(demand.gpu, rng)
                    }
                };
                Ok((node, gpus))
            }
            // Inside a gang attempt the gang explains itself once, after rolling back.
            None if !self.record_failures || self.probing => {
                Err(Arc::new(Unschedulable::gang_only(
                    GangProblem::Unplaceable {
                        gang: String::new(),
                        placed: 0,
                        needed: 0,
                    },
                    0,
                )))
            }
            None => {
                let demand = demand.clone();
                let reason =
                    Arc::new(self.why_not(id, constraint, &demand, access, check.as_ref()));
                if cacheable {
                    self.constraints.failed[signature as usize] =
                        Some((self.generation, access, reason.clone()));
                }
                Err(reason)
            }
        }
    }
}
