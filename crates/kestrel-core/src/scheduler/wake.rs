//! Parking and waking workloads by the queueing hints of [`crate::hints`].

use super::{QueueLink, Scheduler};
use crate::explain::Unschedulable;
use crate::gang::GangId;
use crate::hints::{ChangeKind, QuotaScope, WakeOn};
use crate::predicates::static_check;
use crate::preempt::WorkloadKey;
use crate::queue::{CqId, QueueProblem, QueueingStrategy};
use crate::types::{NodeId, PodId, PodPhase};
use std::collections::HashMap;

/// What makes two parked workloads' verdicts the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Alike {
    Pod {
        base_constraint: u32,
        signature: u32,
        priority: i32,
        queue: Option<CqId>,
        parked_at: u64,
        wake_on: WakeOn,
    },
    Gang(GangId),
}

impl Scheduler {
    /// The quota scope of a ClusterQueue.
    pub(crate) fn quota_scope(&self, cq: CqId) -> QuotaScope {
        match &self.queues.cqs[cq.0 as usize].root {
            Some(root) => QuotaScope::Cohort(root.clone()),
            None => QuotaScope::Queue(cq),
        }
    }

    /// Whether `cq` is in cohort `scope` (a queue of its own reclaims from nobody).
    fn in_cohort(&self, cq: CqId, scope: &QuotaScope) -> bool {
        match (scope, &self.queues.cqs[cq.0 as usize].root) {
            (QuotaScope::Cohort(root), Some(r)) => root == r,
            _ => false,
        }
    }

    /// A bound pod ended on `node`, charged to `cq` (if queued); `gang`: it was a gang
    /// member, whose end changes its gang's count.
    pub(crate) fn log_release(&mut self, node: NodeId, cq: Option<CqId>, gang: bool) {
        if self.hints.off || gang {
            return self.capacity_may_have_grown();
        }
        self.generation += 1;
        let scope = cq.map(|cq| self.quota_scope(cq));
        self.hints.log(node, scope, ChangeKind::Released);
    }

    /// A pod of `priority` was bound on `node`, charged to `cq` (if queued).
    pub(crate) fn log_bind(&mut self, node: NodeId, cq: Option<CqId>, priority: i32) {
        if self.hints.off {
            return;
        }
        let scope = cq.map(|cq| self.quota_scope(cq));
        self.hints.log(node, scope, ChangeKind::Bound { priority });
    }

    /// What should wake workload `pods` (pending; `pods[0]` represents it), parked after
    /// failing for `reason`.
    pub(crate) fn wake_on(&self, pods: &[PodId], reason: &Unschedulable) -> WakeOn {
        // Reservations and fair-share decay change with time alone.
        if self.hints.off
            || self.config().head_reservation > 0
            || self.config().fair_share_half_life > 0
        {
            return WakeOn::Any;
        }
        let workload = self.workload_of(pods[0]);
        if self.preemption.awaiting.contains_key(&workload)
            || self
                .holds
                .values()
                .any(|held| held.iter().any(|h| h.workload == workload))
        {
            return WakeOn::Any;
        }
        if let QueueLink::Cq(cq) = self.pods[pods[0].0 as usize].link {
            // A StrictFIFO head that is not tried does not hold back those behind it.
            if self.queues.cqs[cq.0 as usize].spec.queueing_strategy == QueueingStrategy::StrictFifo
            {
                return WakeOn::Any;
            }
        }
        match reason.queue.as_deref() {
            Some(QueueProblem::Quota(_)) => WakeOn::Quota,
            Some(_) => WakeOn::Any,
            None if reason.is_capacity() && self.pods[pods[0].0 as usize].quota_settled => {
                WakeOn::RoomOnly
            }
            None if reason.is_capacity() => WakeOn::Room,
            None => WakeOn::Any,
        }
    }

    /// Parks a workload's pod after a failure, noting what wakes it.
    pub(crate) fn park(&mut self, pod: PodId, wake: WakeOn) {
        let record = &mut self.pods[pod.0 as usize];
        record.parked_at = self.hints.cycle_start;
        record.wake_on = wake;
        let key = record.queue_key(pod);
        self.parked.push(key);
    }

    /// Moves the parked workloads that what changed may help to the active queue.
    pub(crate) fn wake_parked(&mut self) {
        let parked = std::mem::take(&mut self.parked);
        // Pods alike (same constraints, demand, priority and queue, parked together)
        // share a verdict, as do a gang's members.
        let mut verdicts: HashMap<Alike, bool> = HashMap::new();
        for key in parked {
            let record = &self.pods[key.2 .0 as usize];
            let wake = record.parked_at < self.hints.global
                || record.wake_on == WakeOn::Any
                || *verdicts
                    .entry(self.alike(key.2))
                    .or_insert_with(|| self.may_help(key.2));
            if wake {
                self.active.insert(key);
            } else {
                // Nothing so far helps it: only what comes next is looked at.
                self.pods[key.2 .0 as usize].parked_at = self.hints.seq;
                self.parked.push(key);
            }
        }
        self.hints.changes.clear();
    }

    fn alike(&self, pod: PodId) -> Alike {
        let r = &self.pods[pod.0 as usize];
        match self.workload_of(pod) {
            WorkloadKey::Gang(g) => Alike::Gang(g),
            WorkloadKey::Pod(_) => Alike::Pod {
                base_constraint: r.base_constraint,
                signature: r.signature,
                priority: r.spec.priority,
                queue: match r.link {
                    QueueLink::Cq(cq) => Some(cq),
                    _ => None,
                },
                parked_at: r.parked_at,
                wake_on: r.wake_on,
            },
        }
    }

    /// Whether a change logged since `pod` was parked may help its workload.
    fn may_help(&self, pod: PodId) -> bool {
        let record = &self.pods[pod.0 as usize];
        let since = record.parked_at;
        let wake = record.wake_on;
        let pods: Vec<PodId> = match self.workload_of(pod) {
            WorkloadKey::Pod(p) => vec![p],
            WorkloadKey::Gang(g) => self.gangs.gangs[g.0 as usize]
                .members
                .iter()
                .copied()
                .filter(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending)
                .collect(),
        };
        let priority = pods
            .iter()
            .map(|p| self.pods[p.0 as usize].spec.priority)
            .max()
            .unwrap_or(record.spec.priority);
        let scope = match record.link {
            QueueLink::Cq(cq) => Some(self.quota_scope(cq)),
            _ => None,
        };
        let cohort = matches!(scope, Some(QuotaScope::Cohort(_)));
        let room = matches!(wake, WakeOn::Room | WakeOn::RoomOnly);
        let start = self.hints.changes.partition_point(|c| c.seq <= since);
        self.hints.changes.range(start..).any(|c| {
            let in_scope = scope.is_some() && c.scope == scope;
            // A pod bound in its cohort may be reclaimed whatever its priority.
            let helps = match c.kind {
                ChangeKind::Released => true,
                ChangeKind::Bound { priority: p } => p < priority || (in_scope && cohort),
            };
            helps
                && ((wake != WakeOn::RoomOnly && in_scope)
                    || (room && self.might_use(&pods, c.node, priority, scope.as_ref())))
        })
    }

    /// Whether any of `pods` might go on `node` now, by its static predicates and the
    /// room there counting as gone the pods it might preempt: those below `priority`, and
    /// any charged to its cohort (reclaim takes borrowers whatever their priority).
    /// A superset of where it fits.
    fn might_use(
        &self,
        pods: &[PodId],
        node: NodeId,
        priority: i32,
        scope: Option<&QuotaScope>,
    ) -> bool {
        let Some(state) = self.cluster.get(node) else {
            return false;
        };
        let mut room = state.free.clone();
        let mut gpu_room = state.free_gpu_milli();
        let mut pod_room = state.free_pods as u64;
        for &p in &state.pods {
            let other = &self.pods[p.0 as usize];
            let in_scope = scope.is_some_and(|s| {
                other
                    .admission
                    .as_ref()
                    .is_some_and(|a| self.in_cohort(a.cq, s))
            });
            if other.spec.priority < priority || in_scope {
                let r = &other.spec.demand.resources;
                room.cpu_milli += r.cpu_milli;
                room.memory_bytes += r.memory_bytes;
                room.ephemeral_storage_bytes += r.ephemeral_storage_bytes;
                if let PodPhase::Bound { gpus, .. } = &other.phase {
                    gpu_room += gpus.milli();
                }
                pod_room += 1;
            }
        }
        pods.iter().any(|&p| {
            let record = &self.pods[p.0 as usize];
            let r = &record.spec.demand.resources;
            let gpu_need = self.gpu_milli_bounds(record.spec.demand.gpu).0;
            pod_room >= 1
                && r.cpu_milli <= room.cpu_milli
                && r.memory_bytes <= room.memory_bytes
                && r.ephemeral_storage_bytes <= room.ephemeral_storage_bytes
                && gpu_need <= gpu_room
                && static_check(self.constraint_of(record.base_constraint), &state.spec).is_ok()
        })
    }
}
