//! Preemption glue: candidates gathered from the engine's state, ranked and tried by a
//! real placement attempt (see [`crate::preempt`] for the rules).

use super::{QuotaRequest, Scheduler};
use crate::gang::{GangId, GangSpec};
use crate::outcome::Decisions;
use crate::preempt::{
    within_queue_victim, DisruptionBudget, Preemption, Victim, VictimOrder, WorkloadKey,
};
use crate::queue::{Admission, CqId, QuotaFit, ReclaimPolicy, WithinQueuePreemption};
use crate::types::{GpuAssignment, Millis, NodeId, PodId, PodPhase};
use std::cmp::Reverse;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
struct Candidate {
    pods: Vec<PodId>,
    /// 0: borrowed from another queue (reclaimed first), 1: the preemptor's own queue.
    tier: u8,
    priority: i32,
    /// GPU-ms (or CPU core-ms, far below) of work lost if it is evicted now.
    cost: u64,
    started: Millis,
    /// Its queue, when it is in another queue than the preemptor's.
    other_queue: Option<CqId>,
    /// Evicting it would take a PodDisruptionBudget below its floor.
    breaks_budget: bool,
}

type Detached = (PodId, NodeId, GpuAssignment, Millis, Option<Admission>);
/// With the chosen victims gone: `None` if quota still refuses, else the admission
/// (`Some(None)` for a workload outside any queue).
type QuotaVerdict = Option<Option<Admission>>;
type GangPlan<'a> = Option<(&'a GangSpec, &'a [PodId], usize)>;

impl Scheduler {
    /// Work a bound pod loses if evicted now: its weight times the time since its last
    /// checkpoint (reported, or implied by a declared checkpoint interval).
    pub(crate) fn lost_work(&self, pod: PodId, now: Millis) -> u64 {
        let record = &self.pods[pod.0 as usize];
        let PodPhase::Bound { at, .. } = record.phase else {
            return 0;
        };
        let mut saved = at;
        if let Some(interval) = record
            .spec
            .preemption
            .checkpoint_interval
            .filter(|&i| i > 0)
        {
            saved = at + (now.saturating_sub(at) / interval) * interval;
        }
        if let Some(reported) = record.last_checkpoint {
            saved = saved.max(reported.min(now));
        }
        let gpu = self.gpu_milli(pod);
        let since = now.saturating_sub(saved);
        if gpu > 0 {
            gpu * since
        } else {
            (record.spec.demand.resources.cpu_milli.max(1) as u64 / 1000).max(1) * since / 1000
        }
    }

    pub(crate) fn preemption_notice(
        &self,
        preemptor: Option<PodId>,
        victims: Vec<PodId>,
        reason: String,
        now: Millis,
    ) -> Preemption {
        Preemption {
            preemptor,
            victims: victims
                .into_iter()
                .map(|pod| {
                    let terms = &self.pods[pod.0 as usize].spec.preemption;
                    let gpu_ms = match self.gpu_milli(pod) {
                        0 => 0,
                        _ => self.lost_work(pod, now),
                    };
                    Victim {
                        pod,
                        checkpoint_grace: terms.checkpoint_grace,
                        termination_grace: terms.termination_grace,
                        lost_gpu_ms: gpu_ms / 1000,
                    }
                })
                .collect(),
            reason,
        }
    }

    /// The bound workloads `pods` belong to, whole, as candidates (those that may not be
    /// preempted yet left out).
    fn candidates(
        &self,
        pods: impl Iterator<Item = PodId>,
        tier: u8,
        other_queue: Option<CqId>,
        now: Millis,
        accept_priority: &dyn Fn(i32, Millis) -> bool,
    ) -> Vec<Candidate> {
        let mut by_workload: BTreeMap<WorkloadKey, Vec<PodId>> = BTreeMap::new();
        for p in pods {
            let record = &self.pods[p.0 as usize];
            let key = match &record.spec.gang {
                Some(m) => match self.gang_id(&record.spec.namespace, &m.gang) {
                    Some(g) => WorkloadKey::Gang(g),
                    None => WorkloadKey::Pod(p),
                },
                None => WorkloadKey::Pod(p),
            };
            if by_workload.contains_key(&key) {
                continue;
            }
            let members: Vec<PodId> = match key {
                WorkloadKey::Gang(g) => self
                    .gang(g)
                    .members
                    .iter()
                    .copied()
                    .filter(|m| matches!(self.pods[m.0 as usize].phase, PodPhase::Bound { .. }))
                    .collect(),
                WorkloadKey::Pod(p) => vec![p],
            };
            by_workload.insert(key, members);
        }
        // An elastic gang above its minimum offers the part above it too.
        let mut groups: Vec<Vec<PodId>> = Vec::with_capacity(by_workload.len());
        for (key, members) in by_workload {
            if let WorkloadKey::Gang(g) = key {
                let surplus = self.gang_surplus(g, &members);
                if !surplus.is_empty() && surplus.len() < members.len() {
                    groups.push(surplus);
                }
            }
            groups.push(members);
        }
        let allowances = self.budget_allowances();
        let mut out = Vec::new();
        for pods in groups {
            if pods.is_empty() {
                continue;
            }
            let mut ok = true;
            let (mut priority, mut cost, mut started) = (i32::MIN, 0u64, 0);
            for &p in &pods {
                let record = &self.pods[p.0 as usize];
                let PodPhase::Bound { at, .. } = record.phase else {
                    ok = false;
                    break;
                };
                let queue_min = record
                    .admission
                    .as_ref()
                    .and_then(|a| self.queues.cqs[a.cq.0 as usize].spec.min_runtime);
                let min_runtime = record
                    .spec
                    .preemption
                    .min_runtime
                    .or(queue_min)
                    .unwrap_or(0);
                if record.evicting || now < at + min_runtime {
                    if !record.evicting {
                        self.wake_at_least(at + min_runtime);
                    }
                    ok = false;
                    break;
                }
                priority = priority.max(record.spec.priority);
                cost += self.lost_work(p, now);
                started = started.max(at);
            }
            if ok && accept_priority(priority, started) {
                let breaks_budget = allowances.iter().any(|(budget, allowed)| {
                    let taken = pods
                        .iter()
                        .filter(|p| {
                            let spec = &self.pods[p.0 as usize].spec;
                            budget.selects(&spec.namespace, &spec.labels)
                        })
                        .count();
                    taken as u32 > *allowed
                });
                out.push(Candidate {
                    pods,
                    tier,
                    priority,
                    cost,
                    started,
                    other_queue,
                    breaks_budget,
                });
            }
        }
        out
    }

    /// The bound members of an elastic gang above its `minMember` (and each role's
    /// minimum), highest ranks and newest first: the part that may leave while the rest
    /// runs on. Empty for a gang at its minimum.
    fn gang_surplus(&self, g: GangId, bound: &[PodId]) -> Vec<PodId> {
        let Some(spec) = &self.gang(g).spec else {
            return Vec::new();
        };
        let role = |p: PodId| {
            let m = self.pods[p.0 as usize].spec.gang.as_ref();
            m.and_then(|m| m.role.clone()).unwrap_or_default()
        };
        let mut left: BTreeMap<String, u32> = BTreeMap::new();
        for &p in bound {
            *left.entry(role(p)).or_default() += 1;
        }
        let mut order = bound.to_vec();
        order.sort_by_key(|&p| {
            let record = &self.pods[p.0 as usize];
            let rank = record.spec.gang.as_ref().and_then(|m| m.rank);
            let at = match record.phase {
                PodPhase::Bound { at, .. } => at,
                _ => 0,
            };
            Reverse((rank, at, p))
        });
        let mut surplus = Vec::new();
        let mut running = bound.len() as u32;
        for p in order {
            if running <= spec.min_member {
                break;
            }
            let r = role(p);
            let floor = spec
                .role_minimums
                .iter()
                .find(|(name, _)| *name == r)
                .map_or(0, |(_, min)| *min);
            let have = left.get_mut(&r).expect("counted above");
            if *have > floor {
                *have -= 1;
                running -= 1;
                surplus.push(p);
            }
        }
        surplus
    }

    /// Adds or replaces a PodDisruptionBudget.
    pub fn set_disruption_budget(&mut self, budget: DisruptionBudget) {
        let key = (budget.namespace.clone(), budget.name.clone());
        self.preemption.disruption_budgets.insert(key, budget);
    }

    pub fn disruption_budgets(&self) -> impl Iterator<Item = &DisruptionBudget> {
        self.preemption.disruption_budgets.values()
    }

    pub fn remove_disruption_budget(&mut self, namespace: &str, name: &str) {
        self.preemption
            .disruption_budgets
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Each budget with the disruptions it allows now: its pods are those it selects that
    /// have not ended, the healthy ones those bound and not already leaving.
    fn budget_allowances(&self) -> Vec<(&DisruptionBudget, u32)> {
        if self.preemption.disruption_budgets.is_empty() {
            return Vec::new();
        }
        let mut counts = vec![(0u32, 0u32); self.preemption.disruption_budgets.len()];
        for record in &self.pods {
            if record.phase == PodPhase::Gone {
                continue;
            }
            let healthy = matches!(record.phase, PodPhase::Bound { .. }) && !record.evicting;
            for (i, budget) in self.preemption.disruption_budgets.values().enumerate() {
                if budget.selects(&record.spec.namespace, &record.spec.labels) {
                    counts[i].0 += 1;
                    counts[i].1 += healthy as u32;
                }
            }
        }
        self.preemption
            .disruption_budgets
            .values()
            .zip(counts)
            .map(|(b, (expected, healthy))| (b, b.allowed(expected, healthy)))
            .collect()
    }

    fn rank(&self, candidates: &mut [Candidate]) {
        match self.config().victim_order {
            VictimOrder::CheckpointAware => candidates.sort_by_key(|c| {
                (
                    c.tier,
                    c.breaks_budget,
                    c.priority,
                    c.cost,
                    c.pods.len(),
                    Reverse(c.started),
                    c.pods[0],
                )
            }),
            VictimOrder::LowestPriority => candidates.sort_by_key(|c| {
                (
                    c.tier,
                    c.breaks_budget,
                    c.priority,
                    Reverse(c.started),
                    c.pods[0],
                )
            }),
        }
    }

    /// Parked workloads get another look at `at` (a victim's minimum runtime or a
    /// preemptor's delay ends), even if nothing else changed.
    pub(crate) fn wake_at_least(&self, at: Millis) {
        let wake = self.wake_at.get().map_or(at, |w| w.min(at));
        self.wake_at.set(Some(wake));
    }

    /// The preemptor's own terms: `None` when it may not preempt (yet).
    fn may_preempt(&self, pods: &[PodId], cq: Option<CqId>, now: Millis) -> Option<i32> {
        let record = &self.pods[pods[0].0 as usize];
        if record.spec.preemption.never_preempt {
            return None;
        }
        let delay = cq.and_then(|c| self.queues.cqs[c.0 as usize].spec.preemption_delay);
        if let Some(delay) = delay.filter(|d| now < record.submitted_at + d) {
            self.wake_at_least(record.submitted_at + delay);
            return None;
        }
        pods.iter()
            .map(|p| self.pods[p.0 as usize].spec.priority)
            .max()
    }

    /// Quota did not admit the workload: preempt by its queue's policy.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn preempt_for_quota(
        &mut self,
        workload: WorkloadKey,
        cq: CqId,
        pods: &[PodId],
        gang: GangPlan,
        request: &[(String, i64)],
        now: Millis,
        decisions: &mut Decisions,
    ) -> Option<u32> {
        let priority = self.may_preempt(pods, Some(cq), now)?;
        let policy = self.queues.cqs[cq.0 as usize].spec.preemption;
        let rep_seq_time = self.pods[pods[0].0 as usize].submitted_at;
        let mut candidates = Vec::new();
        let own: Vec<PodId> = self
            .preemption
            .bound_by_cq
            .get(&cq)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        let accept = within_queue_victim(policy.within_cluster_queue, priority, rep_seq_time);
        candidates.extend(self.candidates(own.into_iter(), 1, None, now, &accept));
        let threshold = policy
            .borrow_within_cohort
            .map(|b| b.max_priority_threshold);
        candidates.extend(self.reclaim_candidates(cq, request, priority, true, threshold, now));
        if candidates.is_empty() {
            return None;
        }
        self.rank(&mut candidates);
        let request = request.to_vec();
        let tolerations = self.pods[pods[0].0 as usize]
            .spec
            .constraints
            .tolerations
            .clone();
        let fits = move |s: &mut Scheduler, chosen: &[&Candidate]| -> QuotaVerdict {
            // Other queues' workloads are preempted to reclaim nominal quota, or to borrow
            // when the policy allows borrowing over them.
            let borrowing_ok = chosen.iter().all(|c| {
                c.other_queue.is_none()
                    || threshold
                        .is_some_and(|t| c.priority < priority && t.is_none_or(|t| c.priority <= t))
            });
            match s.queues.fit(cq, &request, &tolerations) {
                QuotaFit::Nominal(a) => Some(Some(a)),
                QuotaFit::Borrowing(a) if borrowing_ok => Some(Some(a)),
                _ => None,
            }
        };
        let reason = format!(
            "preempted to admit a workload of priority {priority} in ClusterQueue {}",
            self.queues.cqs[cq.0 as usize].spec.name
        );
        self.choose_victims(
            workload, pods, gang, candidates, &fits, now, reason, decisions,
        )
    }

    /// Workloads of cohort queues that borrow in a resource of `request`, which `cq`'s
    /// policy lets it take back (reclaim, when `may_reclaim`), or preempt to borrow in turn
    /// (`threshold`); none of a queue that keeps what it borrows.
    fn reclaim_candidates(
        &self,
        cq: CqId,
        request: &[(String, i64)],
        priority: i32,
        may_reclaim: bool,
        threshold: Option<Option<i32>>,
        now: Millis,
    ) -> Vec<Candidate> {
        let reclaim = match may_reclaim {
            true => {
                self.queues.cqs[cq.0 as usize]
                    .spec
                    .preemption
                    .reclaim_within_cohort
            }
            false => ReclaimPolicy::Never,
        };
        let others: Vec<CqId> = self
            .queues
            .cohort_members(cq)
            .map(|(id, _)| id)
            .filter(|&id| {
                id != cq
                    && !self.queues.cqs[id.0 as usize].spec.keeps_borrowed_quota
                    && self.queues.is_borrowing(id, request)
            })
            .collect();
        let mut out = Vec::new();
        for other in others {
            let pods = self
                .preemption
                .bound_by_cq
                .get(&other)
                .into_iter()
                .flatten()
                .copied();
            out.extend(self.candidates(pods, 0, Some(other), now, &|p, _| {
                let by_reclaim = match reclaim {
                    ReclaimPolicy::Never => false,
                    ReclaimPolicy::LowerPriority => p < priority,
                    ReclaimPolicy::Any => true,
                };
                let by_borrowing =
                    threshold.is_some_and(|t| p < priority && t.is_none_or(|t| p <= t));
                by_reclaim || by_borrowing
            }));
        }
        out
    }

    /// Quota admits the workload but no node holds it: preempt as its queue's policy
    /// allows. A queued preemptor takes lower-priority work of its own queue (by
    /// `withinClusterQueue`), what cohort queues borrow (reclaim when it is inside its
    /// nominal quota, else by `borrowWithinCohort`) and lower-priority pods outside any
    /// queue; never work another queue runs inside its nominal quota, which that queue
    /// would take straight back. A preemptor outside any queue preempts lower-priority
    /// workloads anywhere, as kube-scheduler does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn preempt_for_capacity(
        &mut self,
        workload: WorkloadKey,
        pods: &[PodId],
        gang: GangPlan,
        admission: Option<&Admission>,
        within_nominal: bool,
        now: Millis,
        decisions: &mut Decisions,
    ) -> Option<u32> {
        let priority = self.may_preempt(pods, admission.map(|a| a.cq), now)?;
        let mut candidates = match admission {
            Some(a) => {
                let request = self.workload_request(pods);
                let policy = self.queues.cqs[a.cq.0 as usize].spec.preemption;
                let threshold = policy
                    .borrow_within_cohort
                    .map(|b| b.max_priority_threshold);
                self.reclaim_candidates(a.cq, &request, priority, within_nominal, threshold, now)
            }
            None => Vec::new(),
        };
        let own_queue = admission.map(|a| a.cq);
        let within_queue = own_queue.map(|cq| self.queues.cqs[cq.0 as usize].spec.preemption);
        let rep_seq_time = self.pods[pods[0].0 as usize].submitted_at;
        // Equal priorities only where the queue's policy may take newer ones.
        let equal_too = within_queue.is_some_and(|p| {
            p.within_cluster_queue == WithinQueuePreemption::LowerOrNewerEqualPriority
        });
        let bound = match equal_too {
            true => priority.saturating_add(1),
            false => priority,
        };
        // Lower-priority pods of the preemptor's own queue go by its policy, those outside
        // any queue by priority; other queues' work only as reclaim or borrowing above.
        let (mut by_queue, mut by_priority) = (Vec::new(), Vec::new());
        for &(_, p) in self.preemption.bound_by_priority.range(..(bound, PodId(0))) {
            if candidates.iter().any(|c| c.pods.contains(&p)) {
                continue;
            }
            match self.pods[p.0 as usize].admission.as_ref().map(|a| a.cq) {
                None => by_priority.push(p),
                Some(_) if own_queue.is_none() => by_priority.push(p),
                victim_queue if victim_queue == own_queue => by_queue.push(p),
                Some(_) => {}
            }
        }
        if let Some(policy) = within_queue {
            let accept = within_queue_victim(policy.within_cluster_queue, priority, rep_seq_time);
            candidates.extend(self.candidates(by_queue.into_iter(), 1, None, now, &accept));
        }
        candidates
            .extend(self.candidates(by_priority.into_iter(), 1, None, now, &|p, _| p < priority));
        if candidates.is_empty() {
            return None;
        }
        self.rank(&mut candidates);
        let admission = admission.cloned();
        let fits =
            move |_: &mut Scheduler, _: &[&Candidate]| -> QuotaVerdict { Some(admission.clone()) };
        let reason = format!("preempted to place a workload of priority {priority}");
        self.choose_victims(
            workload, pods, gang, candidates, &fits, now, reason, decisions,
        )
    }

    /// Greedy choice with reprieve (see the module docs). `quota` says, with the chosen
    /// victims' pods detached, under which admission the preemptor would be admitted.
    #[allow(clippy::too_many_arguments)]
    fn choose_victims(
        &mut self,
        workload: WorkloadKey,
        pods: &[PodId],
        gang: GangPlan,
        candidates: Vec<Candidate>,
        quota: &dyn Fn(&mut Scheduler, &[&Candidate]) -> QuotaVerdict,
        now: Millis,
        reason: String,
        decisions: &mut Decisions,
    ) -> Option<u32> {
        let mut chosen: Vec<&Candidate> = Vec::new();
        let mut found = false;
        for c in &candidates {
            // A whole gang replaces the part of it already chosen; a part of one chosen
            // whole adds nothing.
            let covers = |a: &Candidate, b: &Candidate| b.pods.iter().all(|p| a.pods.contains(p));
            if chosen.iter().any(|k| covers(k, c)) {
                continue;
            }
            chosen.retain(|k| !covers(c, k));
            chosen.push(c);
            if self
                .placement_without(&chosen, pods, gang, quota, now)
                .is_some()
            {
                found = true;
                break;
            }
        }
        if !found {
            return None;
        }
        // Let off every victim the others make unnecessary, the costliest first.
        let mut i = chosen.len();
        while i > 0 && chosen.len() > 1 {
            i -= 1;
            let mut without = chosen.clone();
            without.remove(i);
            if self
                .placement_without(&without, pods, gang, quota, now)
                .is_some()
            {
                chosen = without;
            }
        }
        if chosen.len() > 1 {
            let worst = chosen.iter().map(|c| c.priority).max().unwrap_or(i32::MIN);
            let total: u64 = chosen.iter().map(|c| c.cost).sum();
            let single = candidates
                .iter()
                .filter(|c| c.priority <= worst && c.cost <= total)
                .find(|c| {
                    self.placement_without(&[c], pods, gang, quota, now)
                        .is_some()
                });
            if let Some(single) = single {
                chosen = vec![single];
            }
        }
        // The room the victims leave is promised to the preemptor where it would go.
        if let Some(placement) = self.placement_without(&chosen, pods, gang, quota, now) {
            self.hold_for(workload, &placement);
        }
        let victims: Vec<PodId> = chosen.iter().flat_map(|c| c.pods.iter().copied()).collect();
        for &v in &victims {
            self.pods[v.0 as usize].evicting = true;
            self.preemption.preemptor_of.insert(v, workload);
        }
        for (key, victim) in self.claims_freed_by(&victims) {
            self.preemption
                .victim_claims
                .insert(key, (workload, victim));
        }
        let count = victims.len() as u32;
        self.preemption.awaiting.insert(workload, count);
        decisions
            .preemptions
            .push(self.preemption_notice(Some(pods[0]), victims, reason, now));
        Some(count)
    }

    /// Where the preemptor would go if `chosen` left (`None`: it would not be admitted
    /// or placed). Nothing is changed when it returns.
    fn placement_without(
        &mut self,
        chosen: &[&Candidate],
        pods: &[PodId],
        gang: GangPlan,
        quota: &dyn Fn(&mut Scheduler, &[&Candidate]) -> QuotaVerdict,
        now: Millis,
    ) -> Option<Vec<(PodId, NodeId, GpuAssignment)>> {
        // Quota first, on the books alone: cheap, and most candidates fail it.
        let charged: Vec<(Admission, QuotaRequest)> = chosen
            .iter()
            .flat_map(|c| c.pods.iter())
            .filter_map(|&p| {
                let r = &self.pods[p.0 as usize];
                r.admission.clone().map(|a| (a, r.quota_request.clone()))
            })
            .collect();
        for (a, r) in &charged {
            self.queues.charge(a, r, -1);
        }
        let admission = quota(self, chosen);
        for (a, r) in &charged {
            self.queues.charge(a, r, 1);
        }
        let admission = admission?;
        let detached = self.detach(chosen.iter().flat_map(|c| c.pods.iter().copied()));
        // Their claims that nobody else uses are released once they are gone.
        let pods_out: Vec<PodId> = detached.iter().map(|d| d.0).collect();
        let claims_out: Vec<String> = self
            .claims_freed_by(&pods_out)
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        self.take_claim_devices(&claims_out, false);
        self.probing = true;
        let placed = self.place_workload(pods, gang, admission.as_ref(), now);
        self.probing = false;
        let placement = match placed {
            Ok(placed) => {
                self.rollback(&placed);
                self.apply_namespace_policy(pods, None);
                Some(placed)
            }
            Err(_) => None,
        };
        self.take_claim_devices(&claims_out, true);
        self.reattach(detached);
        placement
    }

    /// How many of a preemptor's victims have yet to leave: their pods, and the pods gone
    /// whose claims still hold their devices (`None`: none, or not a preemptor).
    pub(crate) fn victims_left(&self, workload: WorkloadKey) -> Option<u32> {
        let pods = self
            .preemption
            .awaiting
            .get(&workload)
            .copied()
            .unwrap_or(0);
        let holding: std::collections::BTreeSet<PodId> = self
            .preemption
            .victim_claims
            .values()
            .filter(|(w, v)| *w == workload && !self.preemption.preemptor_of.contains_key(v))
            .map(|(_, v)| *v)
            .collect();
        let left = pods + holding.len() as u32;
        (left > 0).then_some(left)
    }

    fn detach(&mut self, pods: impl Iterator<Item = PodId>) -> Vec<Detached> {
        let pods: Vec<PodId> = pods.collect();
        let mut out = Vec::with_capacity(pods.len());
        for p in pods {
            let record = &self.pods[p.0 as usize];
            let PodPhase::Bound { node, gpus, at } = record.phase.clone() else {
                continue;
            };
            let admission = record.admission.clone();
            self.release_to_pending(p);
            out.push((p, node, gpus, at, admission));
        }
        out
    }

    fn reattach(&mut self, detached: Vec<Detached>) {
        for (p, node, gpus, at, admission) in detached.into_iter().rev() {
            self.pods[p.0 as usize].admission = admission;
            self.bind(p, node, gpus, at);
        }
    }
}
