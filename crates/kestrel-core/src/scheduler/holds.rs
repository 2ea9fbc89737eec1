//! Room promised to preemptors (holds) and nodes reserved for the head of the queue, so
//! that room made for a workload is not taken by others.

use super::{Hold, Reservation, Scheduler};
use crate::model::GpuRequest;
use crate::predicates::static_check;
use crate::preempt::WorkloadKey;
use crate::types::{GpuAssignment, Millis, NodeId, PodId, PodPhase};
use std::collections::BTreeSet;

impl Scheduler {
    /// Whether a pod may use reserved nodes: the holder's pods, and work whose runtime
    /// estimate ends before the holder's estimated start (backfill).
    pub(crate) fn may_use_reserved(&self, id: PodId) -> bool {
        let Some(r) = &self.reservation else {
            return true;
        };
        if self.workload_of(id) == r.holder {
            return true;
        }
        let estimate = self.pods[id.0 as usize].spec.preemption.runtime_estimate;
        matches!((estimate, r.start_estimate), (Some(e), Some(start)) if self.now + e <= start)
    }

    /// Promises a preemptor the room of its planned placement until it binds or tries again.
    pub(crate) fn hold_for(
        &mut self,
        workload: WorkloadKey,
        placed: &[(PodId, NodeId, GpuAssignment)],
    ) {
        self.release_holds(workload);
        for (pod, node, gpus) in placed {
            let priority = self.pods[pod.0 as usize].spec.priority;
            self.holds.entry(*node).or_default().push(Hold {
                pod: *pod,
                workload,
                priority,
                gpus: gpus.clone(),
            });
        }
    }

    /// The node whose room is held for a preempting pod (Kubernetes' nominated node).
    pub fn nominated_node(&self, pod: PodId) -> Option<NodeId> {
        self.holds
            .iter()
            .find(|(_, held)| held.iter().any(|h| h.pod == pod))
            .map(|(node, _)| *node)
    }

    /// Drops a workload's promised room (it bound, left, or must choose again).
    pub(crate) fn release_holds(&mut self, workload: WorkloadKey) {
        if self.holds.is_empty() {
            return;
        }
        let before: usize = self.holds.values().map(Vec::len).sum();
        self.holds.retain(|_, held| {
            held.retain(|h| h.workload != workload);
            !held.is_empty()
        });
        if self.holds.values().map(Vec::len).sum::<usize>() != before {
            self.capacity_may_have_grown();
        }
    }

    /// The holds on a node that bind pod `id`: other workloads' of no lower priority.
    pub(super) fn holds_against(&self, id: PodId, node: NodeId) -> impl Iterator<Item = &Hold> {
        let held = self.holds.get(&node).map_or(&[][..], Vec::as_slice);
        let priority = self.pods[id.0 as usize].spec.priority;
        let own = (!held.is_empty()).then(|| self.workload_of(id));
        held.iter()
            .filter(move |h| h.priority >= priority && Some(h.workload) != own)
    }

    /// Whether pod `id` (whose demand fits the node's free room) also fits beside the
    /// room promised there to preemptors it may not overtake: on a copy of the node with
    /// their planned devices taken (those free by now), by the engine's own fit, NUMA
    /// alignment included.
    pub(super) fn fits_beside_holds(&self, id: PodId, node_id: NodeId) -> bool {
        if self.holds.is_empty() {
            return true;
        }
        let mut against = self.holds_against(id, node_id).peekable();
        if against.peek().is_none() {
            return true;
        }
        let mut node = self.cluster.node(node_id).clone();
        for h in against {
            let held = &self.pods[h.pod.0 as usize].spec;
            node.reserve_free(&held.demand.resources, &h.gpus);
        }
        let spec = &self.pods[id.0 as usize].spec;
        node.fits_pod(&spec.demand, &spec.constraints)
    }

    /// Whether any promised room can bind pod `id` (then failures are not shared by
    /// pods of the same shape, whose priorities may differ).
    pub(super) fn held_against(&self, id: PodId) -> bool {
        let priority = self.pods[id.0 as usize].spec.priority;
        self.holds
            .values()
            .any(|held| held.iter().any(|h| h.priority >= priority))
    }

    /// Holds nodes for the highest-priority workload that does not fit, when enabled and
    /// nobody holds any: the eligible nodes (inside its required topology domain, if any)
    /// with the most free GPUs, until they could hold it once their pods end.
    pub(super) fn reserve_for(
        &mut self,
        workload: WorkloadKey,
        pods: &[PodId],
        gang: Option<&crate::gang::GangSpec>,
        now: Millis,
    ) {
        if self.config.head_reservation == 0
            || self.reservation.is_some()
            || self.last_holder == Some(workload)
        {
            return;
        }
        let need: u64 = pods.iter().map(|&p| self.gpu_milli(p)).sum();
        let largest = pods.iter().map(|&p| self.gpu_milli(p)).max().unwrap_or(0);
        if need == 0 {
            return;
        }
        // Shares by memory need a device with that much memory.
        let device_memory = pods
            .iter()
            .filter_map(|p| match self.pods[p.0 as usize].spec.demand.gpu {
                GpuRequest::Memory { mib } => Some(mib),
                _ => None,
            })
            .max();
        let rep = &self.pods[pods[0].0 as usize];
        let constraints = self.constraints.entries[rep.constraint as usize]
            .constraints
            .clone();
        let holder_name = match gang {
            Some(g) => format!("gang {}", g.key()),
            None => format!("pod {}", rep.spec.key()),
        };
        // A node whose allocatable cannot hold any of the pods even once empty (it lacks
        // their cpu, memory or an extended resource) would only keep others off it.
        let could_hold = |s: &Scheduler, n: NodeId| {
            let allocatable = &s.cluster.node(n).spec.allocatable;
            pods.iter()
                .any(|p| allocatable.fits(&s.pods[p.0 as usize].spec.demand.resources))
        };
        let eligible = |s: &Scheduler, n: NodeId| {
            let node = s.cluster.node(n);
            let room = if constraints.single_numa_node {
                node.spec.max_gpus_on_one_numa()
            } else {
                node.gpu_count()
            };
            static_check(&constraints, &node.spec).is_ok()
                && room as u64 * 1000 >= largest
                && device_memory.is_none_or(|mib| node.has_device_memory(mib))
                && could_hold(s, n)
        };
        let mut groups: Vec<Vec<NodeId>> = match gang.and_then(|g| g.topology.required.clone()) {
            Some(level) => self
                .domains(&level, None)
                .into_iter()
                .map(|(_, n)| n)
                .collect(),
            None => vec![self.cluster.iter().map(|(id, _)| id).collect()],
        };
        for nodes in &mut groups {
            nodes.retain(|&n| eligible(self, n));
            nodes.sort_by_key(|&n| (std::cmp::Reverse(self.cluster.node(n).free_gpu_milli()), n));
        }
        let capacity = |s: &Scheduler, nodes: &[NodeId]| -> u64 {
            nodes
                .iter()
                .map(|&n| s.cluster.node(n).gpu_count() as u64 * 1000)
                .sum()
        };
        let free = |s: &Scheduler, nodes: &[NodeId]| -> u64 {
            nodes
                .iter()
                .map(|&n| s.cluster.node(n).free_gpu_milli())
                .sum()
        };
        let Some(nodes) = groups
            .into_iter()
            .filter(|nodes| capacity(self, nodes) >= need)
            .max_by_key(|nodes| free(self, nodes))
        else {
            return;
        };
        let mut chosen = BTreeSet::new();
        let mut total = 0;
        for n in nodes {
            if total >= need {
                break;
            }
            total += self.cluster.node(n).gpu_count() as u64 * 1000;
            chosen.insert(n);
        }
        let mut start_estimate = Some(now);
        for &n in &chosen {
            for &p in &self.cluster.node(n).pods {
                let record = &self.pods[p.0 as usize];
                let end = match (&record.phase, record.spec.preemption.runtime_estimate) {
                    (PodPhase::Bound { at, .. }, Some(e)) => Some(at + e),
                    _ => None,
                };
                start_estimate = match (start_estimate, end) {
                    (Some(s), Some(e)) => Some(s.max(e)),
                    _ => None,
                };
            }
        }
        let until = now + self.config.head_reservation;
        self.wake_at_least(until);
        self.reservation = Some(Reservation {
            holder: workload,
            holder_name,
            nodes: chosen,
            until,
            start_estimate,
        });
    }

    pub(super) fn release_reservation(&mut self) {
        if let Some(r) = self.reservation.take() {
            self.last_holder = Some(r.holder);
            // What waited for the reserved nodes gets another look in this very cycle.
            self.capacity_may_have_grown();
            self.active.extend(self.parked.drain(..));
            let room_waiting = std::mem::take(&mut self.room_waiting);
            self.active.extend(room_waiting);
            self.parked_generation = self.generation;
        }
    }

    /// Nodes held for the head of the queue, its name and until when.
    pub fn reservation(&self) -> Option<(&str, Vec<NodeId>, Millis)> {
        self.reservation.as_ref().map(|r| {
            (
                r.holder_name.as_str(),
                r.nodes.iter().copied().collect(),
                r.until,
            )
        })
    }

    /// When a cycle should run even if nothing changes (a victim's minimum runtime or a
    /// preemption delay ends); drivers schedule a wake-up for it.
    pub fn next_wakeup(&self) -> Option<Millis> {
        self.wake_at.get()
    }
}
