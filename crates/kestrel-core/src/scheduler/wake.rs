//! Parking and waking workloads by the queueing hints of [`crate::hints`].

use super::{QueueKey, QueueLink, Scheduler};
use crate::explain::Unschedulable;
use crate::gang::GangId;
use crate::hints::{ChangeKind, QuotaScope, WakeOn};
use crate::predicates::static_check;
use crate::preempt::WorkloadKey;
use crate::queue::{CqId, QueueProblem, QueueingStrategy};
use crate::types::{NodeId, PodId, PodPhase};
use std::collections::HashMap;

/// What the changes since a workload was parked may do for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Help {
    /// Nothing: it stays parked.
    Nothing,
    /// Only room on nodes where pods ended: a single pod is tried in its turn if that
    /// room may still hold it then.
    FreedRoom,
    /// Freed quota, new victims, or anything else: it is tried.
    Wake,
}

/// What makes two parked workloads' verdicts the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Alike {
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
        if !self.inter_pod.waiting.is_empty() {
            // A pod waits for company (required affinity) or for its spread's least
            // loaded domain to grow: bindings may let it in.
            self.generation += 1;
        }
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
        // Inter-pod rules and host ports change with pods placed anywhere in a domain; but a
        // single pod that no rule refused anywhere (every node that passed its static
        // predicates lacked room) waits for room like any other: its rules are judged
        // again where room frees.
        let refused_by_rules =
            pods.len() > 1 || reason.reasons.iter().any(|(r, _)| r.is_inter_pod());
        if refused_by_rules
            && pods.iter().any(|&p| {
                let c = self.constraint_of(self.pods[p.0 as usize].base_constraint);
                c.inter_pod.is_some()
                    || !c.host_ports.is_empty()
                    || super::inter_pod::volumes_depend_on_pods(c)
                    || self.repelled(p)
            })
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

    /// Moves the parked workloads that what changed may help to the active queue; single
    /// pods that only room freed by ended pods may help wait for their turn in queue
    /// order ([`Scheduler::next_in_queue`]), which looks again whether that room may
    /// still hold them.
    pub(crate) fn wake_parked(&mut self) {
        let parked = std::mem::take(&mut self.parked);
        // Pods alike (same constraints, demand, priority and queue, parked together)
        // share a verdict, as do a gang's members.
        let mut verdicts: HashMap<Alike, Help> = HashMap::new();
        for key in parked {
            let record = &self.pods[key.2 .0 as usize];
            let help = if record.parked_at < self.hints.global || record.wake_on == WakeOn::Any {
                Help::Wake
            } else {
                *verdicts
                    .entry(self.alike(key.2))
                    .or_insert_with(|| self.may_help(key.2))
            };
            match help {
                Help::Wake => {
                    self.active.insert(key);
                }
                Help::FreedRoom => {
                    self.room_waiting.insert(key);
                }
                Help::Nothing => {
                    // Nothing so far helps it: only what comes next is looked at.
                    self.pods[key.2 .0 as usize].parked_at = self.hints.seq;
                    self.parked.push(key);
                }
            }
        }
        self.freed_nodes.clear();
        if !self.room_waiting.is_empty() {
            self.freed_nodes.extend(
                self.hints
                    .changes
                    .iter()
                    .filter(|c| c.kind == ChangeKind::Released)
                    .map(|c| c.node),
            );
            self.freed_nodes.sort_unstable();
            self.freed_nodes.dedup();
        }
        self.hints.changes.clear();
    }

    /// The next workload of the cycle in queue order: the head of the active queue, or a
    /// pod woken by freed room when it comes first and that room may still hold it. One
    /// it may not (pods before it took the room) goes back to the parked untried, as if
    /// it had been tried and failed: nothing but bindings changed since it failed, so it
    /// would fail. Pods alike share that look until the cluster's room changes again, so
    /// once the room is taken the rest go back at the cost of a lookup each.
    pub(crate) fn next_in_queue(
        &mut self,
        room_looks: &mut HashMap<Alike, (u64, bool)>,
    ) -> Option<QueueKey> {
        loop {
            let room_first = match (self.active.first(), self.room_waiting.first()) {
                (_, None) => return self.active.pop_first(),
                (Some(active), Some(waiting)) => waiting < active,
                (None, Some(_)) => true,
            };
            if !room_first {
                return self.active.pop_first();
            }
            let key = self.room_waiting.pop_first()?;
            let changes = self.cluster.room_changes;
            let alike = self.alike(key.2);
            let may_hold = match room_looks.get(&alike) {
                Some(&(at, may_hold)) if at == changes => may_hold,
                _ => {
                    let may_hold = self.freed_room_may_hold(key.2);
                    room_looks.insert(alike, (changes, may_hold));
                    may_hold
                }
            };
            if may_hold {
                return Some(key);
            }
            // As a pod that failed in this cycle: it sees the cycle's bindings later.
            self.pods[key.2 .0 as usize].parked_at = self.hints.cycle_start;
            self.parked.push(key);
        }
    }

    /// Whether a pod might go on one of the nodes where pods ended, as things are now.
    fn freed_room_may_hold(&self, pod: PodId) -> bool {
        let record = &self.pods[pod.0 as usize];
        let scope = match record.link {
            QueueLink::Cq(cq) => Some(self.quota_scope(cq)),
            _ => None,
        };
        self.freed_nodes
            .iter()
            .any(|&node| self.might_use(&[pod], node, record.spec.priority, scope.as_ref()))
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

    /// What the changes logged since `pod` was parked may do for its workload.
    fn may_help(&self, pod: PodId) -> Help {
        let record = &self.pods[pod.0 as usize];
        let since = record.parked_at;
        let wake = record.wake_on;
        let (pods, single): (Vec<PodId>, bool) = match self.workload_of(pod) {
            WorkloadKey::Pod(p) => (vec![p], true),
            WorkloadKey::Gang(g) => (
                self.gangs.gangs[g.0 as usize]
                    .members
                    .iter()
                    .copied()
                    .filter(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending)
                    .collect(),
                false,
            ),
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
        let mut help = Help::Nothing;
        for c in self.hints.changes.range(start..) {
            let in_scope = scope.is_some() && c.scope == scope;
            // A pod bound in its cohort may be reclaimed whatever its priority.
            let helps = match c.kind {
                ChangeKind::Released => true,
                ChangeKind::Bound { priority: p } => p < priority || (in_scope && cohort),
            };
            if !helps {
                continue;
            }
            if wake != WakeOn::RoomOnly && in_scope {
                return Help::Wake;
            }
            // Room where a pod ended; a gang's members place together, so it is woken.
            let freed_room = c.kind == ChangeKind::Released && single;
            if room
                && !(freed_room && help == Help::FreedRoom)
                && self.might_use(&pods, c.node, priority, scope.as_ref())
            {
                if !freed_room {
                    return Help::Wake;
                }
                help = Help::FreedRoom;
            }
        }
        help
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
