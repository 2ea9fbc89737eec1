//! One scheduling cycle: workloads in queue order, each admitted through its queue and
//! placed, preempting or parking when it does not fit.

use super::{Attempt, Cycle, QueueKey, QueueLink, Scheduler};
use crate::explain::Unschedulable;
use crate::outcome::Decisions;
use crate::preempt::WorkloadKey;
use crate::queue::{Admission, CqId, QueueProblem, QuotaFit};
use crate::types::{Binding, GpuAssignment, Millis, NodeId, PodId, PodPhase};
use std::collections::HashMap;
use std::sync::Arc;

impl Scheduler {
    /// One scheduling cycle at time `now`.
    ///
    /// Workloads go in queue order (priority, then arrival). A queued workload that fits
    /// its ClusterQueue only by borrowing waits for the second phase, where queues take
    /// turns by fair share (the least borrowed, by weight, first), so every queue's
    /// nominal quota is served before anyone borrows.
    pub fn schedule(&mut self, now: Millis) -> Decisions {
        self.now = now;
        if self.reservation.as_ref().is_some_and(|r| now >= r.until) {
            self.release_reservation();
        }
        if self.wake_at.get().is_some_and(|w| now >= w) {
            self.wake_at.set(None);
            self.capacity_may_have_grown();
        }
        self.hints.begin_cycle();
        self.refresh_fast_admission_holds();
        if self.parked_generation != self.generation {
            self.wake_parked();
            self.parked_generation = self.generation;
        }
        if self.config.fair_share_half_life > 0 {
            self.queues
                .decay_shares(now, self.config.fair_share_half_life);
        }
        let mut decisions = Decisions::default();
        self.drain_stopped_queues(now, &mut decisions);
        let mut cycle = Cycle::default();
        for preemptor in std::mem::take(&mut self.preemption.ready_preemptors) {
            let first = match preemptor {
                WorkloadKey::Pod(p) => Some(p),
                WorkloadKey::Gang(g) => self.gangs.gangs[g.0 as usize]
                    .members
                    .iter()
                    .copied()
                    .find(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending),
            };
            let Some(pod) = first.filter(|&p| self.pods[p.0 as usize].phase == PodPhase::Pending)
            else {
                continue;
            };
            let key = self.pods[pod.0 as usize].queue_key(pod);
            if self.active.remove(&key) {
                self.consider(key, now, &mut cycle, &mut decisions);
            }
        }
        let mut room_looks = HashMap::new();
        let mut retried = false;
        loop {
            let bound = decisions.bindings.len();
            while let Some(key) = self.next_in_queue(&mut room_looks) {
                self.consider(key, now, &mut cycle, &mut decisions);
            }
            // Pods that wait on bindings (required pod affinity, a DoNotSchedule spread's
            // least-loaded domain) may fit beside the pods this pass bound: they are tried
            // again in this cycle, as kube-scheduler retries them on the bind. Each pass
            // needs a binding, so the passes end.
            if decisions.bindings.len() == bound || !self.retry_waiting_on_bindings() {
                break;
            }
            retried = true;
        }
        if retried {
            let pods = &self.pods;
            decisions
                .unschedulable
                .retain(|(id, _)| pods[id.0 as usize].phase == PodPhase::Pending);
        }
        debug_assert!(self.room_waiting.is_empty());
        self.freed_nodes.clear();
        cycle.borrowing_phase = true;
        while let Some(key) = self.next_borrower(&mut cycle) {
            self.consider(key, now, &mut cycle, &mut decisions);
        }
        decisions
    }

    /// The head of the borrowing queue with the lowest fair share.
    fn next_borrower(&self, cycle: &mut Cycle) -> Option<QueueKey> {
        let cq = cycle
            .borrowers
            .iter()
            .filter_map(|(cq, keys)| keys.first().map(|k| (*cq, *k)))
            .min_by(|a, b| {
                let (sa, sb) = (self.queues.fair_share(a.0), self.queues.fair_share(b.0));
                sa.total_cmp(&sb).then(a.1.cmp(&b.1))
            })?
            .0;
        let keys = cycle.borrowers.get_mut(&cq)?;
        let key = keys.pop_first();
        if keys.is_empty() {
            cycle.borrowers.remove(&cq);
        }
        key
    }

    fn consider(
        &mut self,
        key: QueueKey,
        now: Millis,
        cycle: &mut Cycle,
        decisions: &mut Decisions,
    ) {
        let id = key.2;
        let spec = &self.pods[id.0 as usize].spec;
        if let Some(membership) = &spec.gang {
            let gang = self.gangs.id(&spec.namespace, &membership.gang);
            self.schedule_gang(gang, now, cycle, decisions);
            return;
        }
        match self.admit_and_place(WorkloadKey::Pod(id), &[id], None, now, cycle, decisions) {
            Attempt::Placed(placed) => {
                for (pod, node, gpus) in placed {
                    decisions.bindings.push(Binding { pod, node, gpus });
                }
            }
            Attempt::Deferred => {
                if let QueueLink::Cq(cq) = self.pods[id.0 as usize].link {
                    cycle.borrowers.entry(cq).or_default().insert(key);
                }
            }
            Attempt::Failed(reason) => {
                let wake = self.wake_on(&[id], &reason);
                let record = &mut self.pods[id.0 as usize];
                let changed = !record
                    .pending_reason
                    .as_ref()
                    .is_some_and(|r| Arc::ptr_eq(r, &reason) || **r == *reason);
                if changed {
                    record.pending_reason = Some(reason.clone());
                    decisions.unschedulable.push((id, reason));
                }
                self.park(id, wake);
            }
        }
    }

    /// Admits a workload's pending `pods` through its queue and places them: a single pod
    /// (`gang` = None) or a gang's pods (its spec, running members and how many must start).
    /// Placed pods are bound in the index and charged to the queue.
    pub(crate) fn admit_and_place(
        &mut self,
        workload: WorkloadKey,
        pods: &[PodId],
        gang: Option<(&crate::gang::GangSpec, &[PodId], usize)>,
        now: Millis,
        cycle: &mut Cycle,
        decisions: &mut Decisions,
    ) -> Attempt {
        let total_nodes = self.cluster.len() as u32;
        let queue_failure =
            |p: QueueProblem| Attempt::Failed(Arc::new(Unschedulable::queue_only(p, total_nodes)));
        // Victims already leave for it: no second round of preemption, but it may start
        // earlier if room turns up elsewhere.
        let waiting = self.victims_left(workload);
        let waiting_failure = |victims| queue_failure(QueueProblem::WaitingForVictims { victims });
        let mut pods = pods;
        let rep = pods[0];
        for &p in pods {
            self.pods[p.0 as usize].quota_settled = false;
        }
        let mut within_nominal = false;
        let admission = match self.pods[rep.0 as usize].link.clone() {
            QueueLink::Unqueued => None,
            QueueLink::Broken(problem) => return queue_failure(problem),
            QueueLink::Cq(cq) => {
                if cycle.blocked.contains(&cq) {
                    return queue_failure(QueueProblem::BehindHead {
                        cluster_queue: self.queues.cqs[cq.0 as usize].spec.name.clone(),
                    });
                }
                if waiting.is_none() && self.preemptor_ahead(cq, pods) {
                    return queue_failure(QueueProblem::BehindPreemptor {
                        cluster_queue: self.queues.cqs[cq.0 as usize].spec.name.clone(),
                    });
                }
                // Workloads alike that quota refused this cycle are refused again: usage
                // only grows within a cycle.
                let shape = match workload {
                    WorkloadKey::Pod(p) => (cq, false, self.pods[p.0 as usize].signature),
                    WorkloadKey::Gang(g) => (cq, true, g.0),
                };
                if let Some(reason) = cycle.quota_refused.get(&shape) {
                    if waiting.is_none() {
                        return Attempt::Failed(reason.clone());
                    }
                }
                let request = match gang {
                    Some((spec, running, _)) if spec.fast_admission && running.is_empty() => {
                        let not_created = spec.total.unwrap_or(0).saturating_sub(pods.len() as u32);
                        self.fast_admission_request(pods, not_created)
                    }
                    _ => self.workload_request(pods),
                };
                let tolerations = self.pods[rep.0 as usize]
                    .spec
                    .constraints
                    .tolerations
                    .clone();
                let mut fit = self.queues.fit(cq, &request, &tolerations);
                if let (QuotaFit::No(_), Some((spec, _, needed))) = (&fit, gang) {
                    // Partial admission: as many as the quota takes, down to the minimum.
                    // Fewer pods ask for less, so whether they fit falls with the count:
                    // a binary search finds the most.
                    if spec.role_minimums.is_empty() && !spec.fast_admission {
                        let mut pods_admitted = pods.len();
                        let (mut low, mut high) = (needed.max(1), pods.len() - 1);
                        while low <= high {
                            let k = low + (high - low) / 2;
                            let request = self.workload_request(&pods[..k]);
                            match self.queues.fit(cq, &request, &tolerations) {
                                QuotaFit::No(_) => high = k - 1,
                                smaller => {
                                    fit = smaller;
                                    pods_admitted = k;
                                    low = k + 1;
                                }
                            }
                        }
                        pods = &pods[..pods_admitted];
                    }
                }
                match fit {
                    QuotaFit::Nominal(admission) => {
                        within_nominal = true;
                        Some(admission)
                    }
                    QuotaFit::Borrowing(_) if !cycle.borrowing_phase => return Attempt::Deferred,
                    QuotaFit::Borrowing(admission) => {
                        if waiting.is_none() {
                            if let Some(cluster_queue) = self.reclaim_in_cohort(cq, workload) {
                                return queue_failure(QueueProblem::BehindReclaim {
                                    cluster_queue,
                                });
                            }
                        }
                        Some(admission)
                    }
                    QuotaFit::No(_) if waiting.is_some() => {
                        return waiting_failure(waiting.unwrap_or_default())
                    }
                    QuotaFit::No(problem) => {
                        let search = self.search_key(true, Some(cq), pods, &request);
                        if !cycle.no_victims.contains(&search) {
                            match self.preempt_for_quota(
                                workload, cq, pods, gang, &request, now, decisions,
                            ) {
                                Some(victims) => return waiting_failure(victims),
                                None => {
                                    cycle.no_victims.insert(search);
                                }
                            }
                        }
                        let strict = self.queues.cqs[cq.0 as usize].spec.queueing_strategy
                            == crate::queue::QueueingStrategy::StrictFifo;
                        if strict {
                            cycle.blocked.insert(cq);
                        }
                        let reason = Arc::new(Unschedulable::queue_only(problem, total_nodes));
                        cycle.quota_refused.insert(shape, reason.clone());
                        return Attempt::Failed(reason);
                    }
                }
            }
        };
        match self.place_workload(pods, gang, admission.as_ref(), now) {
            Ok(placed) => {
                if self
                    .reservation
                    .as_ref()
                    .is_some_and(|r| r.holder == workload)
                {
                    self.release_reservation();
                }
                self.release_holds(workload);
                Attempt::Placed(placed)
            }
            Err(_) if waiting.is_some() => waiting_failure(waiting.unwrap_or_default()),
            Err(reason) => {
                let settled = admission.as_ref().is_none_or(|a| {
                    within_nominal
                        && self.queues.cqs[a.cq.0 as usize]
                            .spec
                            .resource_groups
                            .iter()
                            .all(|g| g.flavors.len() == 1)
                });
                for &p in pods {
                    self.pods[p.0 as usize].quota_settled = settled;
                }
                // Its victims are gone and it still does not fit: the promise is void.
                self.release_holds(workload);
                let cq = admission.as_ref().map(|a| a.cq);
                let request = self.workload_request(pods);
                let search = self.search_key(false, cq, pods, &request);
                if cycle.no_victims.contains(&search) {
                    return Attempt::Failed(Arc::new(reason));
                }
                if let Some(victims) = self.preempt_for_capacity(
                    workload,
                    pods,
                    gang,
                    admission.as_ref(),
                    within_nominal,
                    now,
                    decisions,
                ) {
                    return waiting_failure(victims);
                }
                cycle.no_victims.insert(search);
                if reason.is_capacity() && !std::mem::replace(&mut cycle.head_seen, true) {
                    self.reserve_for(workload, pods, gang.map(|g| g.0), now);
                }
                Attempt::Failed(Arc::new(reason))
            }
        }
    }

    /// Places the pods under an admission (flavor node labels applied); on failure nothing
    /// stays bound or charged.
    pub(crate) fn place_workload(
        &mut self,
        pods: &[PodId],
        gang: Option<(&crate::gang::GangSpec, &[PodId], usize)>,
        admission: Option<&Admission>,
        now: Millis,
    ) -> Result<Vec<(PodId, NodeId, GpuAssignment)>, Unschedulable> {
        self.apply_namespace_policy(pods, admission);
        let result = match gang {
            Some((spec, running, needed)) => {
                let record = self.record_failures;
                self.record_failures = false;
                let outcome = self.place_gang_pods(spec, pods, running, needed, now);
                self.record_failures = record;
                outcome
            }
            None => match self.place(pods[0]) {
                Ok((node, gpus)) => {
                    self.bind(pods[0], node, gpus.clone(), now);
                    Ok(vec![(pods[0], node, gpus)])
                }
                Err(reason) => Err((*reason).clone()),
            },
        };
        if result.is_err() {
            self.apply_namespace_policy(pods, None);
        }
        result
    }

    /// Sets the admission pods are charged under when bound, with its flavor's node labels
    /// and tolerations added to their constraints (`None` restores their own).
    pub(crate) fn apply_namespace_policy(&mut self, pods: &[PodId], admission: Option<&Admission>) {
        let extra = admission
            .map(|a| self.queues.flavor_constraints(a))
            .filter(|(labels, tolerations)| !labels.is_empty() || !tolerations.is_empty());
        for &p in pods {
            let record = &self.pods[p.0 as usize];
            if matches!(record.phase, PodPhase::Bound { .. }) {
                continue;
            }
            let base = record.base_constraint;
            let constraint = match &extra {
                Some((labels, tolerations)) => {
                    let mut c = self.constraints.entries[base as usize].constraints.clone();
                    c.node_selector.extend(labels.clone());
                    c.tolerations.extend(tolerations.iter().cloned());
                    self.constraints.intern(&c)
                }
                None => base,
            };
            if constraint != self.pods[p.0 as usize].constraint {
                let demand = self.pods[p.0 as usize].spec.demand.clone();
                let signature = self.constraints.intern_signature(constraint, demand);
                let record = &mut self.pods[p.0 as usize];
                record.constraint = constraint;
                record.signature = signature;
            }
            self.pods[p.0 as usize].admission = admission.cloned();
        }
    }

    /// Queues on HoldAndDrain evict what they admitted.
    fn drain_stopped_queues(&mut self, now: Millis, decisions: &mut Decisions) {
        let draining: Vec<CqId> = self
            .queues
            .cqs
            .iter()
            .enumerate()
            .filter(|(_, cq)| cq.spec.stop_policy == crate::queue::StopPolicy::HoldAndDrain)
            .map(|(i, _)| CqId(i as u32))
            .collect();
        for cq in draining {
            let victims: Vec<PodId> = self
                .preemption
                .bound_by_cq
                .get(&cq)
                .into_iter()
                .flatten()
                .copied()
                .filter(|&p| !self.pods[p.0 as usize].evicting)
                .collect();
            if victims.is_empty() {
                continue;
            }
            for &v in &victims {
                self.pods[v.0 as usize].evicting = true;
            }
            let name = self.queues.cqs[cq.0 as usize].spec.name.clone();
            decisions.preemptions.push(self.preemption_notice(
                None,
                victims,
                format!("ClusterQueue {name} is draining (stopPolicy HoldAndDrain)"),
                now,
            ));
        }
    }
}
