//! Why a pod fits no node: counted over every node, or in short when explanations are off.

use super::inter_pod::InterPodCheck;
use super::Scheduler;
use crate::constraints::ClassVerdict;
use crate::explain::{NodeReason, Unschedulable};
use crate::model::Demand;
use crate::predicates::{node_shortfalls, static_check};
use crate::types::PodId;
use std::collections::BTreeMap;

impl Scheduler {
    /// Why this pod fits no node now (the full per-node count).
    pub(crate) fn explain_pod(&mut self, id: PodId) -> Unschedulable {
        let check = self.inter_pod_check(id);
        let record = &self.pods[id.0 as usize];
        self.why_not(
            id,
            record.constraint,
            &record.spec.demand,
            self.may_use_reserved(id),
            check.as_ref(),
        )
    }

    /// Turns the node-by-node explanation of pods that fit nowhere on (the default) or off.
    /// Off, such a pod gets a one-line reason that says only whether some node passes its
    /// static predicates, which is all the engine's decisions read of an explanation: a
    /// forward run that predicts start times needs no more, and explaining every pending
    /// pod over every node after each completion is most of its cost.
    pub fn set_full_explanations(&mut self, on: bool) {
        self.full_explanations = on;
    }

    /// [`Scheduler::explain`], or its short form when explanations are off.
    pub(super) fn why_not(
        &self,
        id: PodId,
        constraint: u32,
        demand: &Demand,
        access: bool,
        check: Option<&InterPodCheck>,
    ) -> Unschedulable {
        // Inter-pod reasons are not capacity ones: the short form, which takes every node
        // that passes the static predicates for one short of room, does not hold for them.
        if self.full_explanations || check.is_some() {
            return self.explain(id, constraint, demand, access, check);
        }
        // Every reason a node that passes the static predicates gives is one of capacity
        // (resources, pod count, fragmentation, reservation, nomination): the short form
        // keeps `Unschedulable::is_capacity` as the full one has it.
        let entry = &self.constraints.entries[constraint as usize];
        let passes = self
            .cluster
            .classes
            .iter()
            .enumerate()
            .filter(|(_, class)| class.len > 0)
            .any(|(ci, class)| match (&entry.verdicts[ci], entry.per_node) {
                (ClassVerdict::Feasible { .. }, false) => true,
                (ClassVerdict::Infeasible(_), false) => false,
                (_, true) => class.buckets.iter().flat_map(|b| b.iter()).any(|&(_, n)| {
                    static_check(&entry.constraints, &self.cluster.node(n).spec).is_ok()
                }),
            });
        let total = self.cluster.len() as u32;
        let reason = if passes {
            NodeReason::Insufficient("room (explanations off)".to_string())
        } else {
            NodeReason::AffinityMismatch
        };
        Unschedulable {
            queue: None,
            gang: None,
            total_nodes: total,
            reasons: vec![(reason, total)],
            gpu_fragmentation: None,
        }
    }

    /// Counts, over all nodes, why a pod with these constraints and demand fits none.
    fn explain(
        &self,
        id: PodId,
        constraint: u32,
        demand: &Demand,
        access: bool,
        check: Option<&InterPodCheck>,
    ) -> Unschedulable {
        let entry = &self.constraints.entries[constraint as usize];
        let reserved = self.reservation.as_ref().filter(|_| !access);
        let mut reasons: BTreeMap<NodeReason, u32> = BTreeMap::new();
        let (mut eligible_free_whole, mut best_free_whole) = (0u32, 0u32);
        for (ci, class) in self.cluster.classes.iter().enumerate() {
            if class.len == 0 {
                continue;
            }
            if !entry.per_node {
                if let ClassVerdict::Infeasible(reason) = &entry.verdicts[ci] {
                    *reasons.entry(reason.clone()).or_default() += class.len as u32;
                    continue;
                }
            }
            for bucket in &class.buckets {
                for &(_, node_id) in bucket.iter() {
                    let node = self.cluster.node(node_id);
                    if entry.per_node {
                        if let Err(reason) = static_check(&entry.constraints, &node.spec) {
                            *reasons.entry(reason).or_default() += 1;
                            continue;
                        }
                    }
                    // kube-scheduler's order: NodePorts before the room, PodTopologySpread
                    // and InterPodAffinity after it.
                    if check.is_some_and(|c| !c.ports_free(node_id)) {
                        *reasons.entry(NodeReason::HostPortsTaken).or_default() += 1;
                        continue;
                    }
                    if let Some(r) = reserved.filter(|r| r.nodes.contains(&node_id)) {
                        let holder = NodeReason::Reserved(r.holder_name.clone());
                        *reasons.entry(holder).or_default() += 1;
                        continue;
                    }
                    let free_whole = node.free_whole_gpus();
                    eligible_free_whole += free_whole;
                    best_free_whole = best_free_whole.max(free_whole);
                    let short = node_shortfalls(node, demand, &entry.constraints);
                    if let (true, Some(Err(reason))) =
                        (short.is_empty(), check.map(|c| c.judge(node_id)))
                    {
                        *reasons.entry(reason).or_default() += 1;
                        continue;
                    }
                    if short.is_empty() && !self.fits_beside_holds(id, node_id) {
                        let preemptor =
                            self.holds_against(id, node_id)
                                .next()
                                .map_or_else(String::new, |h| {
                                    let spec = &self.pods[h.pod.0 as usize].spec;
                                    format!("{}/{}", spec.namespace, spec.name)
                                });
                        *reasons.entry(NodeReason::Nominated(preemptor)).or_default() += 1;
                    }
                    for reason in short {
                        *reasons.entry(reason).or_default() += 1;
                    }
                }
            }
        }
        let mut reasons: Vec<(NodeReason, u32)> = reasons.into_iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let need = demand.gpu.whole();
        Unschedulable {
            queue: None,
            gang: None,
            total_nodes: self.cluster.len() as u32,
            reasons,
            gpu_fragmentation: (need > 0 && eligible_free_whole >= need && best_free_whole < need)
                .then_some((eligible_free_whole, best_free_whole)),
        }
    }
}
